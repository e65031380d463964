"""Fixed quality library: frozen corpora, the digit judge, metrics, gates, the classification audit and the
quality assessment, plus the tests marked `quality`. Nothing here imports the harness above it."""
