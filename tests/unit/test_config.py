"""The session contract: typed sections, strict keys, and errors that name file, key and expectation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dit_ar_contract.config import ENVELOPE_RERUNS, PerfProtocol, load_config
from dit_ar_contract.errors import ConfigError, UnknownKeyError
from pytest_dit_ar.loop.baseline import PERTURBATIONS, rerun_batch
from tests.helpers.loop import PROJECT

RAW = json.loads((PROJECT / "config" / "autoresearch.json").read_text())


def write(tmp_path: Path, raw: dict) -> Path:
    (tmp_path / "config").mkdir(exist_ok=True)
    for lane in raw["lanes"].values():  # corpora (and holdouts) must exist relative to the repo root
        for corpus in (lane["corpus"], lane.get("holdout_corpus")):
            src, dest = PROJECT / str(corpus), tmp_path / str(corpus)
            if corpus and src.is_file():
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(src.read_bytes())
    path = tmp_path / "config" / "autoresearch.json"
    path.write_text(json.dumps(raw))
    return path


def edited(**changes) -> dict:
    raw = json.loads(json.dumps(RAW))
    for dotted, value in changes.items():
        node, keys = raw, dotted.split("__")
        for key in keys[:-1]:
            node = node[key]
        if value is KeyError:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return raw


def test_the_shipped_config_loads_into_typed_sections() -> None:
    config = load_config(PROJECT / "config" / "autoresearch.json")
    lane = config.lanes["embedded-cpu"]
    assert isinstance(lane.performance, PerfProtocol)
    assert lane.performance.rounds == RAW["lanes"]["embedded-cpu"].get("performance", {}).get(
        "rounds", RAW["performance"]["rounds"])
    assert lane.guardrails.peak_memory_mb == 4096.0 and lane.guardrails.peak_vram_gb is None
    assert lane.quality.numerical.min_psnr_db == RAW["quality"]["numerical"]["min_psnr_db"]
    assert lane.quality.approximate.task_margin["judge_accuracy"] == 0.025
    dit = config.lanes["dit-xl2-256"]
    assert dit.performance.overlap_startup and not lane.performance.overlap_startup
    assert dit.performance.alpha == RAW["performance"]["alpha"]  # merged from the top-level section


@pytest.mark.parametrize("where,key", [
    ("guardrails", "lanes.embedded-cpu.guardrail"),
    ("performance", "performance.round"),
    ("quality", "quality.numerical.min_psnr"),
    ("target", "target.vram"),
    ("top", "lanes_"),
    ("lane", "lanes.embedded-cpu.step"),
])
def test_an_unknown_key_anywhere_is_refused_with_the_known_keys(tmp_path: Path, where: str, key: str) -> None:
    raw = json.loads(json.dumps(RAW))
    node = raw
    *parents, last = key.split(".")
    for part in parents:
        node = node[part]
    node[last] = 1
    with pytest.raises(UnknownKeyError) as err:
        load_config(write(tmp_path, raw))
    assert f"key '{key}'" in str(err.value) and "known keys" in str(err.value)
    assert str(tmp_path) in str(err.value)


def test_renaming_guardrails_no_longer_drops_them_silently(tmp_path: Path) -> None:
    raw = json.loads(json.dumps(RAW))
    raw["lanes"]["embedded-cpu"]["guardrail"] = raw["lanes"]["embedded-cpu"].pop("guardrails")
    with pytest.raises(UnknownKeyError, match="lanes.embedded-cpu.guardrail"):
        load_config(write(tmp_path, raw))


@pytest.mark.parametrize("change,key,expected", [
    ({"performance__rounds": 3}, "performance.rounds", "at least 4"),
    ({"performance__max_segments": 1}, "performance.max_segments", "at least min_segments"),
    ({"performance__alpha": 0.7}, "performance.alpha", "significance level"),
    ({"performance__rounds": "12"}, "performance.rounds", "integer"),
    ({"performance__overlap_startup": 1}, "performance.overlap_startup", "boolean"),
    ({"lanes__embedded-cpu__steps": 0}, "lanes.embedded-cpu.steps", "positive"),
    ({"lanes__embedded-cpu__batch": True}, "lanes.embedded-cpu.batch", "integer"),
    ({"lanes__embedded-cpu__device": "tpu"}, "lanes.embedded-cpu.device", "cuda"),
    ({"lanes__embedded-cpu__primary_metric": "fps"}, "primary_metric", "latency_ms"),
    ({"lanes__embedded-cpu__corpus": "nowhere.jsonl"}, "lanes.embedded-cpu.corpus", "existing corpus"),
    ({"quality__numerical__min_mean_ssim": KeyError}, "quality.numerical.min_mean_ssim", "<missing>"),
    ({"target__compute_capability": "86"}, "target.compute_capability", '"8.6"'),
    ({"default_lane": "nope"}, "default_lane", "one of the lanes"),
    ({"schema_version": 2}, "schema_version", "1"),
    ({"mutable_paths": ["pytest_dit_ar/"]}, "mutable_paths", "no overlap"),
    ({"fixed_paths": ["/etc"]}, "fixed_paths[0]", "relative path"),
    ({"performance__cpu_affinity": []}, "performance.cpu_affinity", "non-empty"),
    ({"performance__revalidate_every": -1}, "performance.revalidate_every", "0 (never)"),
    ({"lanes__embedded-cpu__holdout_corpus": "nowhere.jsonl"}, "lanes.embedded-cpu.holdout_corpus", "existing corpus"),
    ({"lanes__embedded-cpu__holdout_corpus": "quality_suite/corpus/embedded_digits.jsonl"},
     "lanes.embedded-cpu.holdout_corpus", "other than the lane's corpus"),
    ({"performance__pair_cores": "two"}, "performance.pair_cores", '"one"'),
    ({"performance__time_quality_pair": "maybe"}, "performance.time_quality_pair", '"no"'),
    ({"performance__fork_servers_per_side": 0}, "performance.fork_servers_per_side", "positive"),
    ({"performance__offset_floor_pct": 3.4}, "performance.offset_floor_pct", "offset_bound_pct"),
    ({"lanes__dit-xl2-256__performance__offset_floor_pct": 7.0}, "lanes.dit-xl2-256.performance.offset_floor_pct",
     "offset_bound_pct"),
    ({"performance__bound_confidence": 1.0}, "performance.bound_confidence", "confidence level"),
    ({"performance__pairs": 0}, "performance.pairs", "positive"),
    ({"performance__calibration_pairs": 2}, "performance.calibration_pairs", "at least 3"),
    ({"lanes__dit-xl2-256__performance__calibration_rounds": 3}, "lanes.dit-xl2-256.performance.calibration_rounds",
     "at least 4"),
    ({"performance__offset_bound_pct": -1.0}, "performance.offset_bound_pct", "positive"),
    ({"quality__noninferiority__alpha_q": 0.5}, "quality.noninferiority.alpha_q", "false-pass rate in (0, 0.5)"),
    ({"quality__noninferiority__alpha_q": 0}, "quality.noninferiority.alpha_q", "false-pass rate"),
    ({"quality__noninferiority__case_budget_multiple": 0.5}, "quality.noninferiority.case_budget_multiple",
     "at least 1"),
    ({"quality__noninferiority__bootstrap_resamples": 10}, "quality.noninferiority.bootstrap_resamples",
     "at least 50"),
    ({"quality__noninferiority__spending_gamma": 50.0}, "quality.noninferiority.spending_gamma", "[-10, 10]"),
    ({"quality__exact__envelope_reruns": []}, "quality.exact.envelope_reruns", "non-empty list"),
    ({"quality__exact__envelope_reruns": ["half-steps"]}, "quality.exact.envelope_reruns", "split-batch"),
    ({"lanes__embedded-cpu__quality": {"exact": {"envelope_reruns": ["sdpa-math"]}}},
     "lanes.embedded-cpu.quality.exact.envelope_reruns", "reruns of a cpu lane"),
])
def test_bad_values_name_the_key_and_what_was_expected(tmp_path: Path, change: dict, key: str,
                                                        expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, edited(**change)))
    assert key in str(err.value) and expected in str(err.value), str(err.value)


def test_malformed_json_and_missing_file(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    bad = tmp_path / "config" / "autoresearch.json"
    bad.write_text("{ not json")
    with pytest.raises(ConfigError, match="valid JSON"):
        load_config(bad)
    with pytest.raises(ConfigError, match=r"missing.*pass --config PATH, or .*`dit-ar scaffold --pipeline PATH`"):
        load_config(tmp_path / "config" / "absent.json")  # a user's own repository is set up by the scaffold


def test_a_lane_overrides_performance_key_by_key(tmp_path: Path) -> None:
    raw = edited(**{"lanes__embedded-cpu__performance": {"rounds": 30}})
    lane = load_config(write(tmp_path, raw)).lanes["embedded-cpu"]
    assert lane.performance.rounds == 30 and lane.performance.alpha == RAW["performance"]["alpha"]


def test_workload_is_the_seam_spec_with_absolute_weights() -> None:
    lane = load_config(PROJECT / "config" / "autoresearch.json").lanes["embedded-cpu"]
    spec = lane.workload(PROJECT)
    assert set(spec) == {"root", "lane", "preset", "weights", "device", "resolution", "steps", "guidance", "batch",
                         "options", "gpus"}
    assert spec["gpus"] == 1  # the GPUs the worker sees; a CPU lane has its one device
    assert Path(spec["weights"]).is_absolute() and Path(spec["weights"]).is_dir()
    spec["options"]["x"] = 1
    assert "x" not in lane.options  # the spec is a copy: a candidate cannot change the contract through it


def test_a_multi_gpu_lane_is_a_cuda_lane_within_the_target_s_gpu_count(tmp_path: Path) -> None:
    lane = load_config(write(tmp_path, RAW)).lanes["dit-xl2-256-x2"]
    assert lane.gpus == 2 and lane.workload(PROJECT)["gpus"] == 2
    with pytest.raises(ConfigError, match=r"lanes.dit-xl2-256-x2.gpus.*at most target.gpu_count \(1\)"):
        load_config(write(tmp_path, edited(**{"target__gpu_count": 1})))
    pinned = {**RAW["lanes"]["dit-xl2-256-x2"], "device": "cuda:1"}
    with pytest.raises(ConfigError, match=r"lanes.dit-xl2-256-x2.gpus.*\"cuda:N\" name one device"):
        load_config(write(tmp_path, edited(**{"lanes__dit-xl2-256-x2": pinned})))


def test_each_shipped_lane_with_a_holdout_has_a_frozen_disjoint_one() -> None:
    from quality_suite.corpora import load_corpus

    config = load_config(PROJECT / "config" / "autoresearch.json")
    with_holdout = [lane for lane in config.lanes.values() if lane.holdout_corpus]
    assert "embedded-cpu" in {lane.name for lane in with_holdout}
    assert config.lanes["embedded-cpu"].performance.revalidate_every == 5  # the default
    for lane in with_holdout:
        visible, held = load_corpus(PROJECT / lane.corpus), load_corpus(PROJECT / lane.holdout_corpus)  # checksummed
        assert not {c.id for c in visible} & {c.id for c in held}
        assert not {c.seed for c in visible} & {c.seed for c in held}


def test_the_envelope_reruns_default_to_every_one_of_the_device_and_a_lane_keeps_fewer(tmp_path: Path) -> None:
    lanes = load_config(write(tmp_path, edited(**{"lanes__embedded-cpu__quality": {}}))).lanes
    assert lanes["embedded-cpu"].quality.exact.reruns(False) == ("split-batch", "merged-batches", "reversed-batches",
                                                                   "one-thread")
    # a doubled batch may not fit a card of the target's size: a CUDA lane runs merged-batches only when it names it
    assert lanes["dit-xl2-256"].quality.exact.reruns(True) == ("split-batch", "reversed-batches", "sdpa-math")
    shipped = load_config(PROJECT / "config" / "autoresearch.json").lanes
    # docs/design/quality.md says why: merged-batches is the batch arithmetic of batched guidance
    assert shipped["embedded-cpu"].quality.exact.reruns(False) == ("merged-batches",)
    assert shipped["dit-xl2-256"].quality.exact.envelope_reruns is None  # the GPU lanes keep their three
    assert set(ENVELOPE_RERUNS) == {"split-batch", "merged-batches", "reversed-batches", "one-thread", "sdpa-math"}
    assert set(ENVELOPE_RERUNS) == set(PERTURBATIONS)  # each name has its rerun in loop/baseline.py


def test_each_envelope_rerun_generates_in_its_own_batch() -> None:
    batches = {name: rerun_batch(how, 2) for name, how in PERTURBATIONS.items()}
    assert batches == {"split-batch": 1, "merged-batches": 4, "reversed-batches": 2, "one-thread": 2, "sdpa-math": 2}
    assert rerun_batch(PERTURBATIONS["merged-batches"], 8) == 16  # twice the lane's batch: batched guidance's shape
