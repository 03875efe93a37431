//! Embedding lookup.
