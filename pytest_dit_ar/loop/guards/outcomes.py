"""pytest's outcomes of the suite tests, by marker: light (no torch), so the plugin can hold them from the start of
every run, including runs that select none of the suites."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TestOutcomes:
    """pytest's outcome of every quality and perf test that ran (node id -> passed/failed/skipped)."""

    quality: dict[str, str] = field(default_factory=dict)
    perf: dict[str, str] = field(default_factory=dict)

    def record(self, marker: str, nodeid: str, outcome: str) -> None:
        seen = getattr(self, marker)
        if seen.get(nodeid) in (None, "passed"):
            seen[nodeid] = outcome

    def failed(self, marker: str) -> list[str]:
        """Tests of the marker that failed (a skipped test decides nothing: the plugin skips the benchmark
        tests inside an experiment, and the speed test after a quality failure)."""
        return [n for n, outcome in getattr(self, marker).items() if outcome == "failed"]

    def quality_failed(self) -> bool:
        return bool(self.failed("quality"))
