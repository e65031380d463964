"""Handbook search: a BM25 index over the handbook's passages (a library; the verb is `dit-ar search`)."""
