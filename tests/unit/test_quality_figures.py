"""The quality simulation's figures the docs quote are the stored simulation's: every pass rate, interval and
mean case count in the notebook's spread-floor tables, and the pass rates in the design page's table, are read
from `lab/data/cpu/quality/simulation-floor-*.json` (written by `python -m lab.studies.quality_simulation`)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "lab" / "data" / "cpu" / "quality"
NOTEBOOK = ROOT / "lab" / "notebook" / "quality-verdict.md"
DESIGN = ROOT / "docs" / "design" / "quality-verdict.md"
SECTION = "## The spread floor"
DESIGN_TABLE = "The simulation's figures for the judge's test"


def stored_rows() -> dict[tuple[str, str, str], dict]:
    rows = {}
    for path in sorted(DATA.glob("simulation-floor-*.json")):
        for row in json.loads(path.read_text())["rows"]:
            rows[(row["metric"], row["class"], row["change"])] = row
    return rows


def passed_text(row: dict, interval: bool = True) -> str:
    text = f"{100 * row['passes'] / row['sessions']:.2f}%"
    lo, hi = row["interval"]
    return f"{text} [{100 * lo:.2f}, {100 * hi:.2f}]" if interval else text


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def notebook_problems(text: str, rows: dict[tuple[str, str, str], dict]) -> list[str]:
    """Each 7-cell table row of the spread-floor section naming a stored row must quote its figures."""
    problems, checked = [], 0
    for line in text.split(SECTION, 1)[1].splitlines():
        c = cells(line) if line.startswith("|") else []
        if len(c) != 7 or (c[0], c[1], c[2]) not in rows:
            continue
        row, checked = rows[(c[0], c[1], c[2])], checked + 1
        if c[5] != passed_text(row) or c[6] != f"{row['mean_cases']:.0f}":
            problems.append(f"{line.strip()} != {passed_text(row)} over {row['mean_cases']:.0f} cases")
    return problems + ([] if checked else ["no quoted row found"])


def design_problems(text: str, rows: dict[tuple[str, str, str], dict]) -> list[str]:
    problems, checked = [], 0
    table = text.split(DESIGN_TABLE, 1)[1].split("\n\n", 2)[1]
    for line in table.splitlines()[2:]:
        change, *quoted = cells(line)
        for cls, figure in zip(("approximate", "quantization"), quoted):
            if figure:
                checked += 1
                want = passed_text(rows[("judge_accuracy", cls, change)], interval=False)
                if figure != want:
                    problems.append(f"{change} ({cls}): {figure} != {want}")
    return problems + ([] if checked else ["no quoted figure found"])


def test_the_notebook_quotes_the_stored_simulation() -> None:
    assert notebook_problems(NOTEBOOK.read_text(), stored_rows()) == []


def test_the_design_page_quotes_the_stored_simulation() -> None:
    assert design_problems(DESIGN.read_text(), stored_rows()) == []


def test_a_stale_figure_is_caught() -> None:
    rows = stored_rows()
    row = rows[("judge_accuracy", "approximate", "blend 1 x")]
    good = passed_text(row)
    text = NOTEBOOK.read_text()
    assert good in text
    assert notebook_problems(text.replace(good, "4.99% [4.50, 5.50]"), rows)
    design = DESIGN.read_text()
    short = passed_text(row, interval=False)
    assert design_problems(design.replace(f"| {short} |", "| 4.99% |"), rows)
