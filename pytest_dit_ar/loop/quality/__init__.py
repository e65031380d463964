"""Quality: the candidate's quality run, further cases, holdout, reuse, calibration (the gates: quality_suite)."""
