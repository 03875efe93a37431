//! Indexing, joining and splitting methods (cat, stack, split, chunk, index_select, gather, one_hot).
