"""The quality simulation's figures the docs quote are the stored simulation's: every pass rate, interval and
mean case count in the notebook's tables, and the pass rates and floor figures in the design page's section 8, are
read from `lab/data/cpu/quality/simulation-*.json` (written by `python -m lab.studies.quality_simulation`): the
spread-floor tables of the notebook from `simulation-floor-*.json`, the round-2 tables from `simulation-iid*.json`
and `simulation-blocks*.json`."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "lab" / "data" / "cpu" / "quality"
NOTEBOOK = ROOT / "lab" / "notebook" / "quality-verdict.md"
DESIGN = ROOT / "docs" / "design" / "quality-verdict.md"
SECTION = "## The spread floor"


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


def test_the_notebook_quotes_the_stored_simulation() -> None:
    assert notebook_problems(NOTEBOOK.read_text(), stored_rows()) == []


def test_a_stale_figure_is_caught() -> None:
    rows = stored_rows()
    row = rows[("judge_accuracy", "approximate", "blend 1 x")]
    good = passed_text(row)
    text = NOTEBOOK.read_text()
    assert good in text
    assert notebook_problems(text.replace(good, "4.99% [4.50, 5.50]"), rows)


# -- the iid study (quality round 2): every figure the notebook and the design page quote is a stored one ----------

ROUND2 = sorted(DATA.glob("simulation-iid*.json")) + sorted(DATA.glob("simulation-blocks*.json"))
DESIGN_SECTION = "## 8. Error rates, measured"
RATE = re.compile(r"\d+\.\d\d% \[\d+\.\d\d, \d+\.\d\d\]")


def round2_rows(path: Path) -> dict[tuple[str, str], dict]:
    return {(row["class"], row["change"]): row for row in json.loads(path.read_text())["rows"]}


def table_after(text: str, marker: str) -> list[list[str]]:
    """The body rows (cells) of the first markdown table from the line that holds `marker` on (that line may be the
    table's header)."""
    at = text.find(marker)
    lines = text[text.rfind("\n", 0, at) + 1:].splitlines() if at >= 0 else []
    rows, started = [], False
    for line in lines:
        if line.startswith("|"):
            started = True
            rows.append(cells(line))
        elif started:
            break
    return rows[2:]


def study_table_problems(text: str, path: Path) -> list[str]:
    """The table after the stored file's name: | class | change | degradation | margin | passed [95% CI] | cases |."""
    rows, problems = round2_rows(path), []
    quoted = table_after(text, path.relative_to(ROOT).as_posix())
    for c in quoted:
        row = rows.get((c[0], c[1]))
        if row is None:
            problems.append(f"{c[:2]}: no such stored row in {path.name}")
        elif c[4] != passed_text(row) or c[5] != f"{row['mean_cases']:.0f}":
            problems.append(f"{c}: stored {passed_text(row)} over {row['mean_cases']:.0f} cases")
    return problems + ([] if quoted else [f"no table after {path.name}"])


def design_round2_problems(text: str, path: Path) -> list[str]:
    """Section 8 of the design page: the class-by-class table, and every 'x.xx% [a, b]' quoted anywhere in the
    section, are the stored iid study's."""
    rows, problems = round2_rows(path), []
    section = text.split(DESIGN_SECTION, 1)[1].split("\n## ", 1)[0]
    table = table_after(section, "| change | approximate: passed [95% CI] | quantization: passed [95% CI] |")
    for change, *quoted in table:
        for cls, figure in zip(("approximate", "quantization"), quoted):
            if figure and (cls, change) not in rows:
                problems.append(f"{change} ({cls}): not a stored row")
            elif figure and figure != passed_text(rows[(cls, change)]):
                problems.append(f"{change} ({cls}): {figure} != {passed_text(rows[(cls, change)])}")
    stored = {passed_text(r) for r in rows.values()}
    problems += [f"{figure} is no stored row's" for figure in RATE.findall(section) if figure not in stored]
    floors = json.loads(path.read_text())["floors"]
    for c in table_after(section, "| class | floor p5 | median | p95 |"):
        f = floors[c[0]]["floor"]
        if c[1:4] != [f"{f[k]:.3g}" for k in ("p5", "median", "p95")]:
            problems.append(f"floor {c}: stored {f}")
    return problems + ([] if table else ["no class-by-class table in section 8"])


def test_the_notebook_quotes_the_stored_round2_studies() -> None:
    assert ROUND2, "no stored simulation-iid*.json"
    text = NOTEBOOK.read_text()
    assert [p for path in ROUND2 for p in study_table_problems(text, path)] == []


def test_the_design_page_quotes_the_stored_iid_study() -> None:
    assert design_round2_problems(DESIGN.read_text(), DATA / "simulation-iid.json") == []


def test_a_stale_round2_figure_is_caught() -> None:
    path = DATA / "simulation-iid.json"
    row = round2_rows(path)[("approximate", "blend 1 x")]
    good = passed_text(row)
    design, notebook = DESIGN.read_text(), NOTEBOOK.read_text()
    assert good in design and good in notebook
    assert design_round2_problems(design.replace(good, "4.99% [4.50, 5.50]"), path)
    assert study_table_problems(notebook.replace(good, "4.99% [4.50, 5.50]"), path)
