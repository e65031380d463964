"""Workers: launching a session's worker processes, what fits in memory at once, and the live view of a run."""
