"""Root wiring for pytest: the mutable package is judged by the suites, never collected as tests."""

collect_ignore = ["model_under_test"]
