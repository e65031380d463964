"""Copy the target contract, quality contract and timing protocol from config/autoresearch.json into the file
`dit-ar scaffold` starts every new project's config from (pytest_dit_ar/cli/scaffold_templates/contract.json).

    python -m lab.tools.sync_scaffold_contract          # rewrite contract.json
    python -m lab.tools.sync_scaffold_contract --check  # exit 1 if it differs (tests/unit/test_scaffold.py checks too)

The CUDA lane section comes from this repository's GPU lane `dit-xl2-256` (its guardrails and timing overrides).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config" / "autoresearch.json"
CONTRACT = ROOT / "pytest_dit_ar" / "cli" / "scaffold_templates" / "contract.json"
GPU_LANE = "dit-xl2-256"


def contract_from(config: dict) -> dict:
    """The sections a scaffolded config copies from this repository's config."""
    lane = config["lanes"][GPU_LANE]
    return {"target": config["target"], "quality": config["quality"], "performance": config["performance"],
            "cuda_lane": {"guardrails": lane["guardrails"], "performance": lane.get("performance", {})}}


def main(argv: list[str]) -> int:
    wanted = json.dumps(contract_from(json.loads(CONFIG.read_text())), indent=2) + "\n"
    if "--check" in argv:
        same = CONTRACT.is_file() and CONTRACT.read_text() == wanted
        print("contract.json matches config/autoresearch.json" if same else
              "contract.json differs from config/autoresearch.json: run python -m lab.tools.sync_scaffold_contract")
        return 0 if same else 1
    CONTRACT.write_text(wanted)
    print(f"wrote {CONTRACT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
