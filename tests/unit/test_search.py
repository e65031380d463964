"""Behaviour of `dit-ar search` (pytest_dit_ar/search/, cli/search.py): the handbook's shape, the engine on small
synthetic handbooks, Chinese and misspelt queries, the weak-match report, and the CLI. Retrieval quality over the
real handbook (English, Chinese and typo query sets) is measured in test_handbook_queries.py."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from pytest_dit_ar.cli import search as verb
from pytest_dit_ar.search import engine as S
from pytest_dit_ar.search import index as ix
from pytest_dit_ar.search import zh
from pytest_dit_ar.search.index import W_BODY, W_COMMAND, W_EXAMPLE_QUERY, weighted_parts
from pytest_dit_ar.search.query import correct
from pytest_dit_ar.search.words import tokens

ROOT = Path(__file__).resolve().parents[2]

HANDBOOK = ROOT / "handbook"

MANDATORY = [
    "00_foundations/02_benchmarking_and_quality_gates.md",
    "00_foundations/04_target_hardware_and_quality_contract.md",
    "02_bottlenecks/05_nsight_a5500_profiling_workflow.md",
    "03_single_gpu/08_a5500_optimization_ladder.md",
    "09_reference/09_a5500_benchmark_runbook.md",
    "09_reference/10_reproducibility_and_claims_standard.md",
]

RUNG_SECTIONS = [
    "## Mechanism",
    "## When it pays on an A5500",
    "## How to measure it with this harness",
    "## Experiment class and quality risk",
    "## Sources",
]


@pytest.fixture(scope="module")
def index(handbook_index: S.Index) -> S.Index:
    return handbook_index  # the handbook indexed once per process (tests/unit/conftest.py)


# --------------------------------------------------------------------------------------------------
# The real handbook


def test_handbook_structure():
    files = sorted(p.relative_to(HANDBOOK).as_posix() for p in HANDBOOK.rglob("*.md"))
    numbered = [f for f in files if re.match(r"^\d\d_[a-z0-9_]+/\d\d_[a-z0-9_]+\.md$", f)]
    assert len(numbered) >= 55, f"only {len(numbered)} handbook pages in numbered folders"
    assert "README.md" in files
    for rel in MANDATORY:
        assert rel in files, f"mandatory handbook file missing: {rel}"
    for rel in files:
        text = (HANDBOOK / rel).read_text(encoding="utf-8")
        if rel not in ("README.md", "09_reference/03_sources.md"):  # the index and the bibliography itself
            assert "## Sources" in text, f"{rel} has no Sources section"
        if "\n## Mechanism" in text:
            for section in RUNG_SECTIONS:
                assert f"\n{section}" in text, f"rung file {rel} lacks section {section!r}"


def test_uncached_search_finds_the_page():
    hits = S.search("cuda graphs static shapes", HANDBOOK, top=3)  # builds the index, as the CLI does without cache
    assert hits[0].path == "03_single_gpu/05_cuda_graphs_and_shape_buckets.md"


def test_results_carry_passages_with_correct_lines(index):
    hits = S.search_index(index, "cuda graphs static shapes", top=3)
    assert hits and hits[0].passages
    for hit in hits:
        lines = (HANDBOOK / hit.path).read_text(encoding="utf-8").splitlines()
        for p in hit.passages:
            assert p.score > 0
            first = p.text.splitlines()[0]
            assert lines[p.line - 1] == first, (hit.path, p.line)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_cached_index_matches_and_is_reused(tmp_path, monkeypatch):
    cache = tmp_path / "handbook_index.json"
    first = S.search("bf16 vs fp32 error tf32", HANDBOOK, top=3, cache_path=cache)
    assert cache.is_file()

    def no_rebuild(*_args, **_kwargs):
        raise AssertionError("the cached index was rebuilt although every file hash matched")
    monkeypatch.setattr(ix, "_docs_for_file", no_rebuild)  # speed is a benchmark's business; reuse is checked here
    monkeypatch.setattr(ix, "_BUILT", {})  # nothing this process built earlier: the second index comes from the file
    second = S.search("bf16 vs fp32 error tf32", HANDBOOK, top=3, cache_path=cache)
    assert [h.path for h in first] == [h.path for h in second]
    third = S.search("grpahs", HANDBOOK, top=3, cache_path=cache)  # typo correction works from a cached index
    assert third


def test_chinese_query_is_translated(index):
    report = S.report_index(index, "显存不够 1024 分辨率 T5 卸载", top=3)
    assert report.hits and not report.weak
    assert any(i.startswith("卸载 -> offload") for i in report.interpreted)
    assert "04_memory/03_text_encoder_on_24gb.md" in [h.path for h in report.hits]


def test_misspelt_query_is_corrected(index):
    report = S.report_index(index, "quantizaton", top=3)
    assert "quantizaton -> quantization" in report.interpreted
    assert report.hits[0].path == "07_approximation_quantization/04_quantization_on_ampere.md"


def test_weak_match_is_reported(index):
    strong = S.report_index(index, "cuda graphs static shapes", top=3)
    assert not strong.weak and strong.coverage == 1.0 and not strong.note
    weak = S.report_index(index, "tensor parallel kubernetes autoscaling", top=3)
    assert weak.hits and weak.weak and weak.coverage < S.WEAK_COVERAGE
    assert {"kubernetes", "autoscaling"} <= set(weak.missing) and "weak match" in weak.note
    none = S.report_index(index, "zzqxjv wqpfk", top=3)
    assert none.hits == []


def test_synonyms_reach_the_quantization_page(index):
    top = S.search_index(index, "8-bit weights", top=1)[0]
    assert top.path == "07_approximation_quantization/04_quantization_on_ampere.md"


# --------------------------------------------------------------------------------------------------
# Unit behaviour on small synthetic handbooks


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_heading_match_outweighs_body_match(tmp_path):
    filler = "Some general words about tensors and kernels and memory traffic on the device.\n"
    _write(tmp_path, "01_a/01_body.md", "# Notes\n\n## Overview\n\n" + filler + "The warp scheduler matters.\n")
    _write(tmp_path, "01_a/02_head.md", "# Notes\n\n## Warp scheduler\n\n" + filler + "Nothing else here.\n")
    hits = S.search("warp scheduler", tmp_path, top=2)
    assert [h.path for h in hits][:1] == ["01_a/02_head.md"]


def test_an_example_search_command_counts_less_than_prose(tmp_path):
    """A page that shows how to search for a topic is not a page about it (issue 23)."""
    filler = "Some general words about tensors and kernels and memory traffic on the device.\n"
    _write(tmp_path, "01_a/01_shows.md", "# Notes\n\n" + filler + "```bash\ndit-ar search \"warp scheduler stalls\" "
           "--top 3\ndit-ar profile --lane warp-scheduler\n```\n\nTry `dit-ar search \"warp scheduler stalls\"` too.\n")
    _write(tmp_path, "01_a/02_about.md", "# Notes\n\n" + filler + "A warp scheduler stalls when operands are late.\n")
    hits = S.search("warp scheduler stalls", tmp_path, top=2)
    assert [h.path for h in hits][:1] == ["01_a/02_about.md"], [(h.path, h.score) for h in hits]
    parts = weighted_parts('```bash\ndit-ar search "a b" --top 3\nnsys profile x\n```')
    assert ('"a b"', W_EXAMPLE_QUERY) in parts and any(w == W_COMMAND for _, w in parts)
    assert "nsys profile x" in parts[0][0] and parts[0][1] == W_BODY


def test_the_bibliography_counts_less_than_the_page_it_cites(tmp_path):
    text = "# {t}\n\nPipeFusion patch-level pipeline parallelism, arXiv:2405.14430.\n"
    _write(tmp_path, "09_reference/03_sources.md", text.format(t="Sources"))
    _write(tmp_path, "05_multi/02_parallel.md", text.format(t="Parallel inference"))
    hits = S.search("PipeFusion pipeline parallelism", tmp_path, top=2)
    assert hits[0].path == "05_multi/02_parallel.md" and hits[0].score > 1.5 * hits[1].score


def test_title_match_outweighs_body_match(tmp_path):
    _write(tmp_path, "01_a/01_x.md", "# Unrelated page\n\nGuidance interval is mentioned once here.\n")
    _write(tmp_path, "01_a/02_y.md", "# Guidance interval\n\nA page about something, briefly.\n")
    hits = S.search("guidance interval", tmp_path, top=2)
    assert hits[0].path == "01_a/02_y.md"


def test_line_numbers_and_headings(tmp_path):
    text = (
        "# Title\n"            # 1
        "\n"                    # 2
        "## First\n"            # 3
        "\n"                    # 4
        "alpha beta gamma\n"    # 5
        "delta epsilon\n"       # 6
        "\n"                    # 7
        "## Second\n"           # 8
        "\n"                    # 9
        "```bash\n"             # 10
        "zeta command --flag\n" # 11
        "\n"                    # 12
        "more zeta\n"           # 13
        "```\n"                 # 14
    )
    _write(tmp_path, "00_x/01_y.md", text)
    hits = S.search("epsilon", tmp_path)
    assert hits[0].passages[0].line == 5 and hits[0].passages[0].heading == "First"
    hits = S.search("zeta", tmp_path)
    p = hits[0].passages[0]
    assert p.line == 10 and p.heading == "Second"
    assert "more zeta" in p.text, "a fenced code block must stay one passage"


@pytest.mark.parametrize("query", ["", "   ", "!!! ??? ###", "zzqxjv wqpfk", "the of and a", "的 了 吗"])
def test_empty_or_garbage_query_returns_empty(index, query):
    assert S.search_index(index, query) == []


def test_top_limits_results(index):
    assert len(S.search_index(index, "memory", top=2)) <= 2
    assert S.search_index(index, "memory", top=0) == []


def test_stemming_and_synonyms_meet():
    assert tokens("caching")[0] == tokens("caches")[0] == tokens("cache")[0]
    assert tokens("bfloat16") == tokens("bf16")
    assert "sm86" in tokens("sm_86")
    assert "memory" in S.query_terms("vram")
    assert tokens("8-bit") == tokens("int8")[:1] + tokens("8-bit")[1:]


def test_chinese_tokens_and_segmentation():
    assert tokens("显存峰值") == ["显存", "存峰", "峰值"]  # index side: character bigrams
    assert tokens("ＣＵＤＡ graphs") == tokens("CUDA graphs")  # full-width input is folded
    terms = S.query_terms("显存不够怎么办")
    assert "memory" in terms and "怎么" not in "".join(terms)
    assert zh.segment("图断裂和重新编译") == [("图断裂", "graph breaks"), ("重新编译", "recompiles")]
    assert zh.segment("一下") == []  # a stopword is not read as the number one
    unknown = S.query_plan("量子")
    assert unknown and not unknown[0].counted and "量子" in unknown[0].terms


def test_typo_correction_on_a_small_handbook(tmp_path):
    _write(tmp_path, "01_a/01_graphs.md", "# CUDA graphs\n\nCapture the forward once and replay it.\n")
    _write(tmp_path, "01_a/02_other.md", "# Memory\n\nThe allocator keeps blocks.\n")
    index = S.build_index(tmp_path)
    assert correct("grpahs", index) == "graphs"
    assert correct("replya", index) == "replay"
    assert correct("xyzzy", index) is None
    assert correct("capturereplay", index) == "capture replay"
    report = S.report_index(index, "grpahs", top=1)
    assert report.hits[0].path == "01_a/01_graphs.md" and report.interpreted == ["grpahs -> graphs"]
    # a word the handbook knows is never "corrected"
    assert S.report_index(index, "memory", top=1).interpreted == []


def test_an_index_of_the_same_files_is_made_once_per_process(tmp_path, monkeypatch):
    _write(tmp_path, "one/01_a/01_b.md", "# Page\n\nalpha text\n")
    _write(tmp_path, "two/01_a/01_b.md", "# Page\n\nalpha text\n")
    first = S.build_index(tmp_path / "one")

    def no_rebuild(*_args, **_kwargs):
        raise AssertionError("rebuilt")
    monkeypatch.setattr(ix, "_docs_for_file", no_rebuild)
    cache = tmp_path / "state" / "index.json"
    assert S.build_index(tmp_path / "two", cache) is first  # another folder, the same files: the same index
    assert json.loads(cache.read_text(encoding="utf-8"))["files"] == first.files  # and its cache file is written
    _write(tmp_path, "two/01_a/01_b.md", "# Page\n\nomega text\n")
    with pytest.raises(AssertionError, match="rebuilt"):  # a changed file is indexed again
        S.build_index(tmp_path / "two", cache)


def test_cache_is_invalidated_when_a_file_changes(tmp_path):
    _write(tmp_path, "hb/01_a/01_b.md", "# Page\n\nalpha text\n")
    cache = tmp_path / "cache.json"
    assert S.search("alpha", tmp_path / "hb", cache_path=cache)
    _write(tmp_path, "hb/01_a/01_b.md", "# Page\n\nomega text\n")
    assert S.search("alpha", tmp_path / "hb", cache_path=cache) == []
    assert S.search("omega", tmp_path / "hb", cache_path=cache)


# --------------------------------------------------------------------------------------------------
# CLI


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dit-ar")
    parser.add_argument("--config", type=Path, default=Path("config/autoresearch.json"))
    sub = parser.add_subparsers(dest="command")
    verb.add_parser(sub)
    return parser


def test_cli_json_output(capsys):
    args = _parser().parse_args(["--config", str(ROOT / "config" / "autoresearch.json"),
                                 "search", "cuda graphs static shapes", "--top", "2", "--json"])
    assert verb.run(args) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["query"] == "cuda graphs static shapes"
    assert 1 <= len(payload["hits"]) <= 2
    hit = payload["hits"][0]
    assert {"path", "score", "passages"} <= set(hit)
    assert {"line", "heading", "text", "score"} <= set(hit["passages"][0])


def test_cli_text_output_shows_path_line_heading(capsys):
    args = _parser().parse_args(["--config", str(ROOT / "config" / "autoresearch.json"),
                                 "search", "flash", "attention", "sm_86"])
    assert verb.run(args) == 0
    out = capsys.readouterr().out
    assert re.search(r"handbook/03_single_gpu/02_attention_backends_sdpa_flash2\.md:\d+ ", out)


def test_cli_missing_handbook_is_refused(tmp_path, capsys, monkeypatch):
    from pytest_dit_ar.search import location

    monkeypatch.setattr(location, "PACKAGED", tmp_path / "no-packaged-copy")
    monkeypatch.setattr(location, "SOURCE_TREE", tmp_path / "no-source-tree")
    (tmp_path / "config").mkdir()
    args = _parser().parse_args(["--config", str(tmp_path / "config" / "autoresearch.json"), "search", "x"])
    assert verb.run(args) == 2
    assert "no handbook" in capsys.readouterr().err


def test_cli_without_a_project_handbook_searches_the_installed_one(tmp_path, capsys, monkeypatch):
    """A user's repository has no handbook/: the copy shipped with the package (here the source tree's) serves."""
    from pytest_dit_ar.search import location

    monkeypatch.setattr(location, "PACKAGED", tmp_path / "no-packaged-copy")
    (tmp_path / "config").mkdir()
    args = _parser().parse_args(["--config", str(tmp_path / "config" / "autoresearch.json"), "search", "cuda graphs"])
    assert verb.run(args) == 0
    assert "handbook/" in capsys.readouterr().out
    assert location.find_handbook(tmp_path) == ROOT / "handbook"


def test_cli_no_match_is_not_an_error(capsys):
    args = _parser().parse_args(["--config", str(ROOT / "config" / "autoresearch.json"), "search", "zzqxjv"])
    assert verb.run(args) == 0
    assert "no handbook passage" in capsys.readouterr().out


def test_cli_says_when_the_match_is_weak(capsys):
    config = str(ROOT / "config" / "autoresearch.json")
    assert verb.run(_parser().parse_args(["--config", config, "search", "tensor parallel kubernetes autoscaling"])) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("note: weak match") and "kubernetes" in out.splitlines()[0]
    assert verb.run(_parser().parse_args(["--config", config, "search", "tensor parallel kubernetes autoscaling",
                                          "--json"])) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["weak"] is True and payload["coverage"] < S.WEAK_COVERAGE and "kubernetes" in payload["missing"]


def test_cli_shows_how_a_chinese_query_was_read(capsys):
    config = str(ROOT / "config" / "autoresearch.json")
    assert verb.run(_parser().parse_args(["--config", config, "search", "CUDA 图 静态形状", "--json"])) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["weak"] is False and "静态形状 -> static shapes" in payload["interpreted"]
    assert payload["hits"][0]["path"] == "03_single_gpu/05_cuda_graphs_and_shape_buckets.md"
    assert verb.run(_parser().parse_args(["--config", config, "search", "CUDA", "图", "静态形状"])) == 0
    assert capsys.readouterr().out.startswith("read as: ")
