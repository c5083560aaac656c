"""Looking inside a model: attention maps, windows and pictures (attention), the surprise page
(surprise) and the self-contained HTML pages built from plain data (pages, web/)."""
