"""Fixtures shared by both tiers."""

from tests.helpers.report_state import state  # noqa: F401 - the hand-built state directory of the report tests
