"""The agent entry point: SKILL.md names the six mandatory pages, its commands parse, and the seed's
`knowledge/handbook/...` paths resolve to the handbook."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for folder in (ROOT, Path(__file__).resolve().parent):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from test_docs_commands import _split, extract_commands  # noqa: E402

MANDATORY = [
    "00_foundations/02_benchmarking_and_quality_gates.md",
    "00_foundations/04_target_hardware_and_quality_contract.md",
    "02_bottlenecks/05_nsight_a5500_profiling_workflow.md",
    "03_single_gpu/08_a5500_optimization_ladder.md",
    "09_reference/09_a5500_benchmark_runbook.md",
    "09_reference/10_reproducibility_and_claims_standard.md",
]

SKILL = ROOT / "SKILL.md"


def test_skill_names_the_mandatory_pages_and_the_program():
    text = SKILL.read_text(encoding="utf-8")
    assert text.startswith("---\nname: ") and "\ndescription: " in text.split("---")[1]
    assert "`program.md`" in text
    for rel in MANDATORY:
        assert f"`handbook/{rel}`" in text, rel
        assert f"handbook/{rel}" in (ROOT / "program.md").read_text(encoding="utf-8"), rel


def test_skill_commands_parse():
    from pytest_dit_ar.cli.main import build_parser

    commands = extract_commands(SKILL.read_text(encoding="utf-8"))
    assert len(commands) >= 10
    verbs = set()
    for _line, cmd in commands:
        argv = _split(cmd)[1:]
        build_parser().parse_args(argv)  # exits (fails the test) on a command the CLI rejects
        verbs.add(argv[0])
    assert {"doctor", "init", "baseline", "profile", "status", "search", "experiment"} <= verbs


def test_knowledge_handbook_paths_resolve():
    alias = ROOT / "knowledge" / "handbook"
    assert alias.is_dir() and alias.resolve() == (ROOT / "handbook").resolve()
    for rel in MANDATORY:
        assert (alias / rel).is_file(), rel
