"""Regenerate (or verify) checksums.json: sha256 of every frozen corpus file here.

    python quality_suite/corpus/make_checksums.py          # rewrite checksums.json
    python quality_suite/corpus/make_checksums.py --check  # exit 1 if any file changed
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHECKSUMS = HERE / "checksums.json"


def compute() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(HERE.glob("*.jsonl"))}


def main(argv: list[str]) -> int:
    sums = compute()
    if "--check" in argv:
        recorded = json.loads(CHECKSUMS.read_text())
        bad = sorted(k for k in set(sums) | set(recorded) if sums.get(k) != recorded.get(k))
        for name in bad:
            print(f"MISMATCH {name}: recorded {recorded.get(name)} actual {sums.get(name)}")
        return 1 if bad else 0
    CHECKSUMS.write_text(json.dumps(sums, indent=2, sort_keys=True) + "\n")
    print(f"wrote {CHECKSUMS} ({len(sums)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
