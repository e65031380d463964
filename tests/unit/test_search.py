"""Retrieval quality and behaviour of `dit-ar search` (pytest_dit_ar/search.py) over the real handbook."""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import pytest

from pytest_dit_ar.cli import search as verb
from pytest_dit_ar.search import engine as S

ROOT = Path(__file__).resolve().parents[2]

HANDBOOK = ROOT / "handbook"

# Queries an agent would plausibly type, each with the file(s) that should answer it.
QUERIES: list[tuple[str, str | tuple[str, ...]]] = [
    ("flash attention sm_86", "03_single_gpu/02_attention_backends_sdpa_flash2.md"),
    ("out of memory at 1024 T5 offload", "04_memory/03_text_encoder_on_24gb.md"),
    ("cuda graphs static shapes", "03_single_gpu/05_cuda_graphs_and_shape_buckets.md"),
    ("is int8 weight-only exact", ("07_approximation_quantization/04_quantization_on_ampere.md",
                                   "00_foundations/05_experiment_classes_and_audit.md")),
    ("false keep noise between processes", "09_reference/02_false_keeps_and_pitfalls.md"),
    ("which SDPA backend is fastest on Ampere", "03_single_gpu/02_attention_backends_sdpa_flash2.md"),
    ("FlashAttention-3 on A5500", ("00_foundations/04_target_hardware_and_quality_contract.md",
                                   "03_single_gpu/02_attention_backends_sdpa_flash2.md")),
    ("fp8 tensor cores ampere", ("00_foundations/04_target_hardware_and_quality_contract.md",
                                 "07_approximation_quantization/04_quantization_on_ampere.md")),
    ("regional compilation repeated blocks compile time",
     "03_single_gpu/03_torch_compile_regional_and_graph_breaks.md"),
    ("graph breaks torch.compile recompiles", "03_single_gpu/03_torch_compile_regional_and_graph_breaks.md"),
    ("fuse layernorm adaLN modulation shift scale", "03_single_gpu/04_norm_modulation_pointwise_fusion.md"),
    ("precompute timestep embedding before loop", "03_single_gpu/04_norm_modulation_pointwise_fusion.md"),
    ("gemm tile wave quantization 80 SMs", "03_single_gpu/06_gemm_algorithm_and_layout_tuning.md"),
    ("batch cond and uncond into one forward", ("03_single_gpu/06_gemm_algorithm_and_layout_tuning.md",
                                                "08_playbooks/01_dit_xl2_256.md")),
    (".item() host sync in scheduler loop", "03_single_gpu/07_host_overhead_and_syncs.md"),
    ("what to try first optimization order", "03_single_gpu/08_a5500_optimization_ladder.md"),
    ("memcpy HtoD weights every step offload hooks", "04_memory/01_transfer_elimination_and_component_lifetime.md"),
    ("VAE tiling decode peak memory", "04_memory/02_24gb_vram_engineering.md"),
    ("NVLink bridge bandwidth two A5500", "05_multi_gpu/01_dual_a5500_topology_pcie_nvlink.md"),
    ("CFG parallel two GPUs", "05_multi_gpu/02_cfg_parallel_and_sequence_parallel.md"),
    ("ulysses sequence parallel all-to-all", "05_multi_gpu/02_cfg_parallel_and_sequence_parallel.md"),
    ("write a triton kernel shared memory limit", "06_kernels/01_custom_triton_and_cuda_on_ampere.md"),
    ("reduce number of sampling steps DPM-Solver", "07_approximation_quantization/01_step_reduction_and_solvers.md"),
    ("TeaCache reuse features across steps", "07_approximation_quantization/02_caching_across_steps.md"),
    ("skip guidance on last steps", "07_approximation_quantization/03_guidance_truncation_and_cfg.md"),
    ("W8A8 int8 tensor cores speedup", "07_approximation_quantization/04_quantization_on_ampere.md"),
    ("Flux 12B does not fit 24GB", "08_playbooks/04_flux_in_24gb.md"),
    ("SD3 three text encoders memory", "08_playbooks/03_sd3_in_24gb.md"),
    ("pixart sigma 1024 playbook", "08_playbooks/02_pixart_sigma_1024.md"),
    ("DiT-XL/2 256 launch bound", "08_playbooks/01_dit_xl2_256.md"),
    ("embedded cpu lane threads", "08_playbooks/05_embedded_cpu_lane.md"),
    ("nsys timeline kernels gaps", "02_bottlenecks/05_nsight_a5500_profiling_workflow.md"),
    ("ncu permission ERR_NVGPUCTRPERM", "02_bottlenecks/05_nsight_a5500_profiling_workflow.md"),
    ("stage attribution text_encode denoise decode", "01_profiling/01_end_to_end_profiling_and_stage_attribution.md"),
    ("roofline ridge point memory bound", "00_foundations/03_roofline_on_a5500.md"),
    ("audit raises class undeclared bf16", "00_foundations/05_experiment_classes_and_audit.md"),
    ("mann whitney bootstrap min improvement 2%", "00_foundations/02_benchmarking_and_quality_gates.md"),
    ("bf16 vs fp32 error tf32", "03_single_gpu/01_precision_bf16_fp16_tf32.md"),
    ("how to cite a measurement hypothesis", "09_reference/10_reproducibility_and_claims_standard.md"),
    ("persistence mode clocks before baseline", "09_reference/09_a5500_benchmark_runbook.md"),
    ("A5500 memory bandwidth tensor TFLOPS", ("09_reference/01_hardware_and_model_numbers.md",
                                              "00_foundations/04_target_hardware_and_quality_contract.md",
                                              "00_foundations/03_roofline_on_a5500.md")),
    ("launch bound vs compute bound which limit", "02_bottlenecks/01_bottleneck_taxonomy.md"),
    ("FLOPs per step tokens patch size", "00_foundations/01_dit_inference_anatomy.md"),
    ("arxiv id of PipeFusion paper", ("09_reference/03_sources.md",
                                      "05_multi_gpu/02_cfg_parallel_and_sequence_parallel.md")),
    ("verdict crash what to do reset", ("09_reference/02_false_keeps_and_pitfalls.md",
                                        "00_foundations/02_benchmarking_and_quality_gates.md")),
]

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


def _expected(exp: str | tuple[str, ...]) -> tuple[str, ...]:
    return exp if isinstance(exp, tuple) else (exp,)


# --------------------------------------------------------------------------------------------------
# The real handbook


def test_handbook_structure():
    files = sorted(p.relative_to(HANDBOOK).as_posix() for p in HANDBOOK.rglob("*.md"))
    numbered = [f for f in files if re.match(r"^\d\d_[a-z0-9_]+/\d\d_[a-z0-9_]+\.md$", f)]
    assert len(numbered) >= 25, f"only {len(numbered)} handbook files in numbered folders"
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


def test_queries_point_at_existing_files():
    for _, exp in QUERIES:
        for rel in _expected(exp):
            assert (HANDBOOK / rel).is_file(), rel
    assert len(QUERIES) >= 30


def test_top3_hit_rate_and_latency():
    misses, slowest = [], 0.0
    for query, exp in QUERIES:
        start = time.perf_counter()
        hits = S.search(query, HANDBOOK, top=3)  # builds the index on the fly, as the CLI does without cache
        elapsed = time.perf_counter() - start
        slowest = max(slowest, elapsed)
        assert elapsed < 1.0, f"{query!r} took {elapsed:.2f}s"
        got = [h.path for h in hits]
        if not set(_expected(exp)) & set(got):
            misses.append((query, got))
    rate = 1 - len(misses) / len(QUERIES)
    assert rate >= 0.9, f"top-3 hit rate {rate:.0%}; misses: {misses}"


def test_results_carry_passages_with_correct_lines():
    hits = S.search("cuda graphs static shapes", HANDBOOK, top=3)
    assert hits and hits[0].passages
    for hit in hits:
        lines = (HANDBOOK / hit.path).read_text(encoding="utf-8").splitlines()
        for p in hit.passages:
            assert p.score > 0
            first = p.text.splitlines()[0]
            assert lines[p.line - 1] == first, (hit.path, p.line)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_cached_index_matches_and_is_fast(tmp_path):
    cache = tmp_path / "handbook_index.json"
    first = S.search("bf16 vs fp32 error tf32", HANDBOOK, top=3, cache_path=cache)
    assert cache.is_file()
    start = time.perf_counter()
    second = S.search("bf16 vs fp32 error tf32", HANDBOOK, top=3, cache_path=cache)
    assert time.perf_counter() - start < 1.0
    assert [h.path for h in first] == [h.path for h in second]


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


@pytest.mark.parametrize("query", ["", "   ", "!!! ??? ###", "zzqxjv wqpfk", "the of and a"])
def test_empty_or_garbage_query_returns_empty(query):
    assert S.search(query, HANDBOOK) == []


def test_top_limits_results():
    assert len(S.search("memory", HANDBOOK, top=2)) <= 2
    assert S.search("memory", HANDBOOK, top=0) == []


def test_stemming_and_synonyms_meet():
    assert S.tokens("caching")[0] == S.tokens("caches")[0] == S.tokens("cache")[0]
    assert S.tokens("bfloat16") == S.tokens("bf16")
    assert "sm86" in S.tokens("sm_86")
    assert "memory" in S.query_terms("vram")


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


def test_cli_missing_handbook_is_refused(tmp_path, capsys):
    (tmp_path / "config").mkdir()
    args = _parser().parse_args(["--config", str(tmp_path / "config" / "autoresearch.json"), "search", "x"])
    assert verb.run(args) == 2
    assert "no handbook" in capsys.readouterr().err


def test_cli_no_match_is_not_an_error(capsys):
    args = _parser().parse_args(["--config", str(ROOT / "config" / "autoresearch.json"), "search", "zzqxjv"])
    assert verb.run(args) == 0
    assert "no handbook passage" in capsys.readouterr().out
