"""The settings of the paired task-score tests of the approximate and quantization gates
(`quality.noninferiority`; the statistics are quality_suite/noninferiority.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NonInferiorityTest:
    """The paired task-score tests of the approximate and quantization gates (quality_suite/noninferiority.py)."""

    alpha_q: float = 0.05  # false-pass rate of each test (one metric against one reference) over all its looks
    case_budget_multiple: float = 5.0  # an undecided test adds cases up to this multiple of the corpus size
    spending_gamma: float = 2.0  # Hwang-Shih-DeCani alpha spending over the looks (larger: more at the first)
    bootstrap_resamples: int = 200  # paired bootstrap resamples of a set metric (the Frechet distance, reported)
    tolerance_cases: int = 200  # n_pass: no quantization passes before this many cases (p0 = 1 - alpha_q^(1/n))

    def invalid(self) -> tuple[str, object, str] | None:
        """The first setting out of range: (key, value, what was expected); None when all are valid."""
        checks = (("alpha_q", 0 < self.alpha_q < 0.5, "a false-pass rate in (0, 0.5)"),
                  ("case_budget_multiple", self.case_budget_multiple >= 1, "at least 1 (the corpus itself)"),
                  ("bootstrap_resamples", self.bootstrap_resamples >= 50, "at least 50 resamples"),
                  ("tolerance_cases", self.tolerance_cases >= 1, "at least 1 case"),
                  ("spending_gamma", -10 <= self.spending_gamma <= 10, "a number in [-10, 10]"))
        for key, ok, expected in checks:
            if not ok:
                return key, getattr(self, key), expected
        return None
