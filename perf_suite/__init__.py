"""Fixed performance library: the statistics of paired timings, guardrails, the roofline and profiling.

A pure library plus the tests marked `perf`; the interleaved timing of worker processes is the loop's
(`pytest_dit_ar.loop.speed.measurement`). Nothing here imports the harness above it.
"""
