"""Retrieval quality of `dit-ar search` over the real handbook: English, Chinese and misspelt queries.

Each query is something an agent or a user would plausibly type, with the page(s) that answer it. The
sets are measured as top-1 and top-3 hit rates; the figures are reported in handbook/README.md and
reproduced with:

    python tests/unit/test_handbook_queries.py

The Chinese queries were written as questions a Chinese-speaking user of this project would ask, before
the dictionary in pytest_dit_ar/search/zh.py was extended; the typo queries misspell words of English
queries in the ways people do (swapped, dropped, doubled letters).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pytest_dit_ar.search import engine as S  # noqa: E402

HANDBOOK = ROOT / "handbook"

Expected = str | tuple[str, ...]

F = "00_foundations/"
P = "01_profiling/"
BN = "02_bottlenecks/"
G = "03_single_gpu/"
M = "04_memory/"
MG = "05_multi_gpu/"
K = "06_kernels/"
A = "07_approximation_quantization/"
PB = "08_playbooks/"
R = "09_reference/"

ENGLISH: list[tuple[str, Expected]] = [
    ("flash attention sm_86", G + "02_attention_backends_sdpa_flash2.md"),
    ("out of memory at 1024 T5 offload", (M + "03_text_encoder_on_24gb.md",
                                          M + "07_offload_budgets_for_text_encoders.md")),
    ("cuda graphs static shapes", G + "05_cuda_graphs_and_shape_buckets.md"),
    ("is int8 weight-only exact", (A + "04_quantization_on_ampere.md", F + "05_experiment_classes_and_audit.md")),
    ("false keep noise between processes", R + "02_false_keeps_and_pitfalls.md"),
    ("which SDPA backend is fastest on Ampere", (G + "02_attention_backends_sdpa_flash2.md",
                                                 G + "10_attention_alternatives_on_sm86.md")),
    ("FlashAttention-3 on A5500", (F + "04_target_hardware_and_quality_contract.md",
                                   G + "02_attention_backends_sdpa_flash2.md")),
    ("fp8 tensor cores ampere", (F + "04_target_hardware_and_quality_contract.md", A + "04_quantization_on_ampere.md",
                                 M + "04_layerwise_casting_and_fp8_storage.md")),
    ("regional compilation repeated blocks compile time", (G + "03_torch_compile_regional_and_graph_breaks.md",
                                                           G + "11_compile_caches_cold_start_aot.md")),
    ("graph breaks torch.compile recompiles", G + "03_torch_compile_regional_and_graph_breaks.md"),
    ("fuse layernorm adaLN modulation shift scale", G + "04_norm_modulation_pointwise_fusion.md"),
    ("precompute timestep embedding before loop", G + "04_norm_modulation_pointwise_fusion.md"),
    ("gemm tile wave quantization 80 SMs", G + "06_gemm_algorithm_and_layout_tuning.md"),
    ("batch cond and uncond into one forward", (G + "06_gemm_algorithm_and_layout_tuning.md",
                                                PB + "01_dit_xl2_256.md")),
    (".item() host sync in scheduler loop", G + "07_host_overhead_and_syncs.md"),
    ("what to try first optimization order", G + "08_a5500_optimization_ladder.md"),
    ("memcpy HtoD weights every step offload hooks", (M + "01_transfer_elimination_and_component_lifetime.md",
                                                      M + "07_offload_budgets_for_text_encoders.md")),
    ("VAE tiling decode peak memory", (M + "06_vae_decode_memory_at_1024.md", M + "02_24gb_vram_engineering.md")),
    ("NVLink bridge bandwidth two A5500", MG + "01_dual_a5500_topology_pcie_nvlink.md"),
    ("CFG parallel two GPUs", MG + "02_cfg_parallel_and_sequence_parallel.md"),
    ("ulysses sequence parallel all-to-all", MG + "02_cfg_parallel_and_sequence_parallel.md"),
    ("write a triton kernel shared memory limit", (K + "01_custom_triton_and_cuda_on_ampere.md",
                                                   K + "02_triton_kernels_on_sm86_in_practice.md")),
    ("reduce number of sampling steps DPM-Solver", A + "01_step_reduction_and_solvers.md"),
    ("TeaCache reuse features across steps", A + "02_caching_across_steps.md"),
    ("skip guidance on last steps", A + "03_guidance_truncation_and_cfg.md"),
    ("W8A8 int8 tensor cores speedup", (A + "04_quantization_on_ampere.md", K + "04_int8_matmul_with_torch_int_mm.md")),
    ("Flux 12B does not fit 24GB", PB + "04_flux_in_24gb.md"),
    ("SD3 three text encoders memory", PB + "03_sd3_in_24gb.md"),
    ("pixart sigma 1024 playbook", PB + "02_pixart_sigma_1024.md"),
    ("DiT-XL/2 256 launch bound", PB + "01_dit_xl2_256.md"),
    ("embedded cpu lane threads", PB + "05_embedded_cpu_lane.md"),
    ("nsys timeline kernels gaps", BN + "05_nsight_a5500_profiling_workflow.md"),
    ("ncu permission ERR_NVGPUCTRPERM", BN + "05_nsight_a5500_profiling_workflow.md"),
    ("stage attribution text_encode denoise decode", (P + "01_end_to_end_profiling_and_stage_attribution.md",
                                                     P + "02_reading_the_profile_output.md")),
    ("roofline ridge point memory bound", F + "03_roofline_on_a5500.md"),
    ("audit raises class undeclared bf16", F + "05_experiment_classes_and_audit.md"),
    ("verdict order scope crash quality performance", (F + "02_benchmarking_and_quality_gates.md",
                                                       R + "06_verdict_reasons_and_next_steps.md")),
    ("bf16 vs fp32 error tf32", G + "01_precision_bf16_fp16_tf32.md"),
    ("how to cite a measurement hypothesis", R + "10_reproducibility_and_claims_standard.md"),
    ("persistence mode clocks before baseline", R + "09_a5500_benchmark_runbook.md"),
    ("A5500 memory bandwidth tensor TFLOPS", (R + "01_hardware_and_model_numbers.md",
                                              F + "04_target_hardware_and_quality_contract.md",
                                              F + "03_roofline_on_a5500.md")),
    ("launch bound vs compute bound which limit", BN + "01_bottleneck_taxonomy.md"),
    ("FLOPs per step tokens patch size", F + "01_dit_inference_anatomy.md"),
    ("arxiv id of PipeFusion paper", (R + "03_sources.md", MG + "02_cfg_parallel_and_sequence_parallel.md")),
    ("verdict crash what to do reset", (R + "02_false_keeps_and_pitfalls.md",
                                        F + "02_benchmarking_and_quality_gates.md",
                                        R + "06_verdict_reasons_and_next_steps.md")),
    # pages added for issue 16
    ("torchao not installed what can a change import", F + "06_what_a_change_may_import.md"),
    ("when to stop the session", F + "07_session_discipline_stop_rule_and_notes.md"),
    ("where to keep notes without dirtying the tree", F + "07_session_discipline_stop_rule_and_notes.md"),
    ("unattributed row in dit-ar profile output", P + "02_reading_the_profile_output.md"),
    ("the profile shows many small kernels what to read", BN + "02_symptom_index.md"),
    ("channels_last cudnn benchmark VAE decoder", G + "09_vae_and_convolution_speed.md"),
    ("SageAttention attention mask PixArt cross-attention", G + "10_attention_alternatives_on_sm86.md"),
    ("cuDNN attention faster than flash on sm86", G + "10_attention_alternatives_on_sm86.md"),
    ("compile cache cold start fresh worker process", G + "11_compile_caches_cold_start_aot.md"),
    ("AOTInductor TensorRT", G + "11_compile_caches_cold_start_aot.md"),
    ("fp8 weight storage layerwise casting", M + "04_layerwise_casting_and_fp8_storage.md"),
    ("expandable_segments fragmentation reserved memory", M + "05_allocator_and_cuda_graph_pools.md"),
    ("CUDA graph memory pool", (M + "05_allocator_and_cuda_graph_pools.md", G + "05_cuda_graphs_and_shape_buckets.md")),
    ("VAE decode memory at 1024", M + "06_vae_decode_memory_at_1024.md"),
    ("PCIe time to move T5 every request", M + "07_offload_budgets_for_text_encoders.md"),
    ("triton autotune num_stages shared memory sm_86", K + "02_triton_kernels_on_sm86_in_practice.md"),
    ("L2 cache flush microbenchmark", K + "03_microbenchmark_method.md"),
    ("lock clocks do_bench", K + "03_microbenchmark_method.md"),
    ("torch._int_mm int8 matmul", K + "04_int8_matmul_with_torch_int_mm.md"),
    ("approximate gate lane without task metric", A + "05_approximations_without_a_task_metric.md"),
    ("token merging ToMe", A + "06_token_merging_and_token_reduction.md"),
    ("cache-dit DBCache first block cache", A + "07_block_caching_cache_dit_style.md"),
    ("MMDiT joint attention SD3 Flux playbook", PB + "06_mmdit_playbook_sd3_flux_class.md"),
    ("what the H200 session kept and rejected", PB + "07_lessons_from_the_h200_session.md"),
    ("glossary of terms", R + "04_glossary.md"),
    ("does compile work with offload and CUDA graphs", R + "05_technique_interaction_matrix.md"),
    ("DISCARD-QUALITY reason outside the noise envelope", R + "06_verdict_reasons_and_next_steps.md"),
    ("8-bit weights", (A + "04_quantization_on_ampere.md", K + "04_int8_matmul_with_torch_int_mm.md")),
    # issue 23: what the docs review found agents asking
    ("can a quantization be kept on a lane without a task metric",
     (A + "05_approximations_without_a_task_metric.md", A + "04_quantization_on_ampere.md")),
    ("int8 on a GPU lane with no task metric", (A + "05_approximations_without_a_task_metric.md",
                                                A + "04_quantization_on_ampere.md")),
    ("is the p95 guardrail judged after two segments", (F + "02_benchmarking_and_quality_gates.md",
                                                        F + "04_target_hardware_and_quality_contract.md",
                                                        R + "06_verdict_reasons_and_next_steps.md")),
    ("how is the speed verdict decided sequential test fresh process pairs",
     (F + "02_benchmarking_and_quality_gates.md", R + "02_false_keeps_and_pitfalls.md")),
    ("DISCARD-QUALITY timed outputs against the best's for the same request",
     R + "06_verdict_reasons_and_next_steps.md"),
    ("T5 out of memory offload", (M + "03_text_encoder_on_24gb.md", M + "07_offload_budgets_for_text_encoders.md")),
]

CHINESE: list[tuple[str, Expected]] = [
    ("显存不够 1024 分辨率 T5 卸载", (M + "03_text_encoder_on_24gb.md", M + "07_offload_budgets_for_text_encoders.md")),
    ("CUDA 图 静态形状", G + "05_cuda_graphs_and_shape_buckets.md"),
    ("int8 权重量化 会不会更快", (A + "04_quantization_on_ampere.md", K + "04_int8_matmul_with_torch_int_mm.md")),
    ("A5500 支持 FP8 吗", (F + "04_target_hardware_and_quality_contract.md", A + "04_quantization_on_ampere.md",
                          M + "04_layerwise_casting_and_fp8_storage.md")),
    ("注意力后端哪个最快", (G + "02_attention_backends_sdpa_flash2.md", G + "10_attention_alternatives_on_sm86.md")),
    ("区域编译 编译时间太长", (G + "03_torch_compile_regional_and_graph_breaks.md",
                          G + "11_compile_caches_cold_start_aot.md")),
    ("图断裂和重新编译", G + "03_torch_compile_regional_and_graph_breaks.md"),
    ("减少采样步数 求解器", A + "01_step_reduction_and_solvers.md"),
    ("跨步缓存 特征复用", (A + "02_caching_across_steps.md", A + "07_block_caching_cache_dit_style.md")),
    ("无分类器引导只在部分步数使用", A + "03_guidance_truncation_and_cfg.md"),
    ("两张卡 NVLink 带宽", MG + "01_dual_a5500_topology_pcie_nvlink.md"),
    ("序列并行 all-to-all 通信", MG + "02_cfg_parallel_and_sequence_parallel.md"),
    ("手写 Triton 内核 共享内存限制", (K + "01_custom_triton_and_cuda_on_ampere.md",
                                K + "02_triton_kernels_on_sm86_in_practice.md")),
    ("性能分析 各阶段耗时", (P + "01_end_to_end_profiling_and_stage_attribution.md",
                       P + "02_reading_the_profile_output.md")),
    ("屋顶线模型 访存瓶颈", F + "03_roofline_on_a5500.md"),
    ("实验分类 审计 精度变化", F + "05_experiment_classes_and_audit.md"),
    ("误保留 进程间噪声", R + "02_false_keeps_and_pitfalls.md"),
    ("VAE 解码 显存峰值", M + "06_vae_decode_memory_at_1024.md"),
    ("主机同步 .item() 调度器", G + "07_host_overhead_and_syncs.md"),
    ("adaLN 调制 融合 预先计算", G + "04_norm_modulation_pointwise_fusion.md"),
    ("Flux 12B 放不下 24GB 显存", PB + "04_flux_in_24gb.md"),
    ("可以导入哪些库 torchao 没安装", F + "06_what_a_change_may_import.md"),
    ("会话什么时候停止", F + "07_session_discipline_stop_rule_and_notes.md"),
    ("术语表", R + "04_glossary.md"),
    ("编译缓存 冷启动", G + "11_compile_caches_cold_start_aot.md"),
    ("通道优先 卷积 cudnn benchmark", G + "09_vae_and_convolution_speed.md"),
    ("微基准测试 清空 L2 缓存 锁定频率", K + "03_microbenchmark_method.md"),
    ("令牌合并 ToMe", A + "06_token_merging_and_token_reduction.md"),
    ("编译 CUDA 图 卸载 能不能组合", R + "05_technique_interaction_matrix.md"),
    ("没有任务指标的通道 近似实验", A + "05_approximations_without_a_task_metric.md"),
    ("判决 DISCARD-QUALITY 怎么办", R + "06_verdict_reasons_and_next_steps.md"),
    ("分层类型转换 fp8 存储", M + "04_layerwise_casting_and_fp8_storage.md"),
    ("内存分配器 碎片 expandable_segments", M + "05_allocator_and_cuda_graph_pools.md"),
    ("嵌入式 CPU 通道 线程", PB + "05_embedded_cpu_lane.md"),
    ("SD3 三个文本编码器 显存", PB + "03_sd3_in_24gb.md"),
    ("从冷机开始的基准测试流程", R + "09_a5500_benchmark_runbook.md"),
    ("如何引用测量 假设", R + "10_reproducibility_and_claims_standard.md"),
    ("先做什么 优化顺序", G + "08_a5500_optimization_ladder.md"),
    ("bf16 和 fp32 的误差 TF32", G + "01_precision_bf16_fp16_tf32.md"),
    ("启动开销 和 计算瓶颈 怎么区分", BN + "01_bottleneck_taxonomy.md"),
    # issue 23
    ("量化 int8 能不能 保留 没有任务指标", (A + "05_approximations_without_a_task_metric.md",
                                    A + "04_quantization_on_ampere.md")),
    ("显存不够 T5 卸载", (M + "03_text_encoder_on_24gb.md", M + "07_offload_budgets_for_text_encoders.md")),
    ("p95 护栏 什么时候 判断", (F + "02_benchmarking_and_quality_gates.md",
                          F + "04_target_hardware_and_quality_contract.md")),
    ("速度 判决 序贯检验 分段", (F + "02_benchmarking_and_quality_gates.md", R + "02_false_keeps_and_pitfalls.md")),
]

TYPOS: list[tuple[str, Expected]] = [
    ("cuda grpahs static shapse", G + "05_cuda_graphs_and_shape_buckets.md"),
    ("quantizaton int8 wieghts", (A + "04_quantization_on_ampere.md", K + "04_int8_matmul_with_torch_int_mm.md")),
    ("atention backend flsh", (G + "02_attention_backends_sdpa_flash2.md", G + "10_attention_alternatives_on_sm86.md")),
    ("regional compilaton", G + "03_torch_compile_regional_and_graph_breaks.md"),
    ("out of memroy T5 ofload", (M + "03_text_encoder_on_24gb.md", M + "07_offload_budgets_for_text_encoders.md")),
    ("roofline ridgepoint memroy bound", F + "03_roofline_on_a5500.md"),
    ("nvlnik bandwith", MG + "01_dual_a5500_topology_pcie_nvlink.md"),
    ("guidnace interval", A + "03_guidance_truncation_and_cfg.md"),
    ("teacahe caching", A + "02_caching_across_steps.md"),
    ("profling stage atribution", (P + "01_end_to_end_profiling_and_stage_attribution.md",
                                   P + "02_reading_the_profile_output.md")),
    ("grpahs", (G + "05_cuda_graphs_and_shape_buckets.md", G + "03_torch_compile_regional_and_graph_breaks.md")),
    ("quantizaton", (A + "04_quantization_on_ampere.md", K + "04_int8_matmul_with_torch_int_mm.md")),
    ("layerwise castng", M + "04_layerwise_casting_and_fp8_storage.md"),
    ("microbenchmrak L2 flsh", K + "03_microbenchmark_method.md"),
    ("flase keeep noise", R + "02_false_keeps_and_pitfalls.md"),
    ("glosary", R + "04_glossary.md"),
    # issue 23
    ("quantizaton kept without task metrc", (A + "05_approximations_without_a_task_metric.md",
                                             A + "04_quantization_on_ampere.md")),
    ("p95 guardrial judged", (F + "02_benchmarking_and_quality_gates.md",
                              F + "04_target_hardware_and_quality_contract.md")),
    ("sequental test segmnets", (F + "02_benchmarking_and_quality_gates.md", R + "02_false_keeps_and_pitfalls.md")),
]

SETS = {"English": ENGLISH, "Chinese": CHINESE, "typos": TYPOS}


def expected(exp: Expected) -> tuple[str, ...]:
    return exp if isinstance(exp, tuple) else (exp,)


def figures(index: S.Index) -> dict[str, dict[str, object]]:
    """Top-1 and top-3 hit rates per query set, with the misses."""
    out: dict[str, dict[str, object]] = {}
    for name, queries in SETS.items():
        top1 = top3 = 0
        misses = []
        for query, exp in queries:
            got = [h.path for h in S.search_index(index, query, top=3)]
            want = set(expected(exp))
            top1 += bool(got[:1] and got[0] in want)
            top3 += bool(want & set(got))
            if not want & set(got):
                misses.append((query, got))
        out[name] = {"queries": len(queries), "top1": top1, "top3": top3, "misses": misses}
    return out


@pytest.fixture(scope="module")
def index(handbook_index: S.Index) -> S.Index:
    return handbook_index  # the handbook indexed once per process (tests/unit/conftest.py)


@pytest.fixture(scope="module")
def measured(index: S.Index) -> dict[str, dict[str, object]]:
    """The figures of every query set, searched once for the tests that read them."""
    return figures(index)


def test_query_sets_point_at_existing_pages():
    for queries in SETS.values():
        for query, exp in queries:
            for rel in expected(exp):
                assert (HANDBOOK / rel).is_file(), (query, rel)
    assert len(CHINESE) >= 15 and len(TYPOS) >= 10 and len(ENGLISH) >= 45


@pytest.mark.parametrize("name,top1_min,top3_min", [("English", 0.85, 0.95), ("Chinese", 0.85, 0.95),
                                                    ("typos", 0.8, 0.95)])
def test_hit_rates(measured, name, top1_min, top3_min):
    result = measured[name]
    n = result["queries"]
    assert result["top3"] / n >= top3_min, f"{name}: top-3 {result['top3']}/{n}; misses {result['misses']}"
    assert result["top1"] / n >= top1_min, f"{name}: top-1 {result['top1']}/{n}"


def test_typo_queries_really_are_misspelt(index):
    """A typo query measures correction only if its misspelt words are absent from the handbook (a page that
    quotes a misspelling as an example would make it a known word)."""
    for query, _ in TYPOS:
        assert S.report_index(index, query, top=1).interpreted, f"nothing in {query!r} needed correcting"


def test_chinese_queries_are_translated(index):
    for query, _ in CHINESE:
        report = S.report_index(index, query, top=1)
        assert report.interpreted or query.isascii(), f"no Chinese term of {query!r} was recognised"


def test_chinese_does_as_well_as_english(measured):
    result = measured
    en, zh = result["English"], result["Chinese"]
    assert zh["top3"] / zh["queries"] >= en["top3"] / en["queries"] - 0.05


def test_readme_reports_current_figures(measured):
    """handbook/README.md reports the figures of these sets (within two hits, so that a page edit that moves
    one query does not fail the suite; rerun the reproduce command and update the table when it drifts)."""
    import re

    text = (HANDBOOK / "README.md").read_text(encoding="utf-8")
    for name, r in measured.items():
        row = re.search(rf"^\| {name} \| (\d+) \| (\d+)/\d+ \(\d+%\) \| (\d+)/\d+ \(\d+%\) \|$", text, re.M)
        assert row, f"handbook/README.md has no figures row for {name}"
        n, top1, top3 = (int(g) for g in row.groups())
        assert n == r["queries"], f"{name}: README says {n} queries, the set has {r['queries']}"
        assert abs(top1 - r["top1"]) <= 2 and abs(top3 - r["top3"]) <= 2, (name, row.group(0), r)


def main() -> None:
    result = figures(S.build_index(HANDBOOK))
    print("| query set | queries | top-1 | top-3 |")
    print("| --- | --- | --- | --- |")
    for name, r in result.items():
        n = r["queries"]
        print(f"| {name} | {n} | {r['top1']}/{n} ({r['top1'] / n:.0%}) | {r['top3']}/{n} ({r['top3'] / n:.0%}) |")
    for name, r in result.items():
        for query, got in r["misses"]:
            print(f"miss ({name}): {query!r} -> {got}")


if __name__ == "__main__":
    main()
