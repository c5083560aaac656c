"""Text in, ids out: tokenizers, sources, encoding in bounded memory, the cache, the corpus and its batches."""
