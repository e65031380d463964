"""Fixed quality harness: frozen corpora, the judge, metrics, gates and the classification audit."""
