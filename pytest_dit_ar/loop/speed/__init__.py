"""Speed: worker pairs, segments and timed rounds, A/A calibration and warm servers (the statistics: perf_suite)."""
