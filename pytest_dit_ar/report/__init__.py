"""The report layer: an HTML page with PNG figures, made from recorded state only (reads, never writes state)."""
