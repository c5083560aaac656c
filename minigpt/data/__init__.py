"""Text in, ids out: tokenizers, which files a text is (sources), encoding once in bounded memory
(encoding), the cache of encoded corpora (cache), and the corpus, its splits and batches (corpus)."""
