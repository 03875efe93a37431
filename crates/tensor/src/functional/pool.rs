//! Pooling functions (max_pool2d, avg_pool2d, adaptive_avg_pool2d).
