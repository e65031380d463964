"""Fixed performance harness: out-of-process interleaved timing, statistics and profiling."""
