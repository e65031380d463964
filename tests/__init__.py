"""The project's tests: `unit/` (no subprocess but git, seconds), `e2e/` (whole experiments) and `helpers/`."""
