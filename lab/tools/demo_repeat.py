"""Run N fresh `dit-ar demo`s one after another and tabulate each candidate's verdict against the one the README
documents (`pytest_dit_ar.cli.demo.DOCUMENTED`). A benchmark, not a test: each demo takes minutes.

    python -m lab.tools.demo_repeat -n 3 --dir /tmp/demo-repeat [--config config/autoresearch.json]

Prints one row per demo (wall seconds, the load average at its start, each candidate's verdict, `*` where it
differs from the documented one) and a final line `as documented: K of N demos`; writes the table as JSON to
DIR/demo_repeat.json. Exit 0 when every demo gave every documented verdict, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pytest_dit_ar.cli.demo import DOCUMENTED, candidates

ROOT = Path(__file__).resolve().parents[2]

CANDIDATE = re.compile(r"candidate (\d+)/\d+:")
VERDICT = re.compile(r"^\s*VERDICT: ([A-Z-]+)")


@dataclass
class DemoRun:
    index: int
    seconds: float
    load_at_start: float
    exit_code: int
    verdicts: list[str] = field(default_factory=list)
    quality_tests: dict[int, list[str]] = field(default_factory=dict)  # candidate -> its task-score test lines

    def as_documented(self, expected: list[tuple[str, ...]]) -> bool:
        return self.exit_code == 0 and all(v in e for v, e in zip(self.verdicts, expected, strict=True))


def verdicts_in(output: str, count: int) -> list[str]:
    """Each candidate's verdict in a demo's output ('?' where a candidate printed none)."""
    found: dict[int, str] = {}
    current = None
    for line in output.splitlines():
        if (m := CANDIDATE.search(line)) is not None:
            current = int(m.group(1))
        elif (m := VERDICT.match(line)) is not None and current is not None:
            found.setdefault(current, m.group(1))
    return [found.get(i, "?") for i in range(1, count + 1)]


def quality_tests_in(output: str) -> dict[int, list[str]]:
    """Each candidate's paired task-score test lines (degradation, bound, margin, cases, decision)."""
    found: dict[int, list[str]] = {}
    current = None
    for line in output.splitlines():
        if (m := CANDIDATE.search(line)) is not None:
            current = int(m.group(1))
        elif "quality test:" in line and current is not None:
            found.setdefault(current, []).append(line.split("quality test:", 1)[1].strip())
    return found


def one_demo(index: int, config: Path, scratch: Path, log: Path) -> DemoRun:
    """One fresh demo; its output goes to `log` as it is written (an interrupted series keeps what it saw)."""
    load = os.getloadavg()[0]
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as out:
        code = subprocess.run([sys.executable, "-m", "pytest_dit_ar.cli", "--config", str(config), "demo",
                               "--dir", str(scratch)], cwd=ROOT, text=True, stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}).returncode
    seconds = time.perf_counter() - started
    text = log.read_text(encoding="utf-8")
    return DemoRun(index, round(seconds, 1), load, code, verdicts_in(text, len(DOCUMENTED)), quality_tests_in(text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10, help="how many fresh demos (default 10)")
    parser.add_argument("--dir", type=Path, required=True, help="scratch folder: one sub-folder per demo")
    parser.add_argument("--config", type=Path, default=ROOT / "config" / "autoresearch.json")
    args = parser.parse_args(argv)
    names = [c.patch.stem for c in candidates()]
    expected = [DOCUMENTED[n] for n in names]
    args.dir.mkdir(parents=True, exist_ok=True)
    print("demo  seconds  load  " + "  ".join(names))
    print("expected             " + "  ".join(f"{'|'.join(v):<{len(n)}}" for n, v in zip(names, expected)))
    runs = []
    for i in range(1, args.n + 1):
        scratch = args.dir / f"demo-{i}-{os.getpid()}"
        run = one_demo(i, args.config.resolve(), scratch, args.dir / f"demo-{i}-{os.getpid()}.log")
        runs.append(run)
        cells = [f"{v + ('' if v in e else '*'):<{len(n)}}" for v, e, n in zip(run.verdicts, expected, names)]
        print(f"{i:>4}  {run.seconds:7.1f}  {run.load_at_start:4.1f}  " + "  ".join(cells)
              + ("" if run.exit_code == 0 else f"  (exit {run.exit_code})"), flush=True)
    good = sum(r.as_documented(expected) for r in runs)
    print(f"as documented: {good} of {len(runs)} demos")
    (args.dir / "demo_repeat.json").write_text(json.dumps({"expected": {n: list(e) for n, e in zip(names, expected)},
                                                            "runs": [asdict(r) for r in runs]}, indent=2))
    return 0 if good == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
