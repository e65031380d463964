"""Load and validate config/autoresearch.json, the session contract (DESIGN §3)."""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError

CLASSES = ("exact", "numerical", "approximate", "quantization")
PRIMARY_METRICS = ("latency_ms", "images_per_s")
QUALITY_METRIC_KEYS = ("clip", "lpips")
DEFAULT_CONFIG = Path("config/autoresearch.json")

PERF_DEFAULTS: dict[str, Any] = {
    "warmup_rounds": 2,
    "rounds": 12,
    "min_improvement_pct": 2.0,
    "alpha": 0.01,
    "bootstrap_resamples": 2000,
    "confirm_with_fresh_workers": True,
    "round_timeout_s": 600,
    "threads": 2,
    "cpu_affinity": None,
}


@dataclass(frozen=True)
class Target:
    name: str
    device_match: str
    compute_capability: str
    vram_gb: float
    gpu_count: int
    peak_tflops_bf16: float
    memory_bandwidth_gbs: float
    allow_foreign_lanes: bool


@dataclass(frozen=True)
class Lane:
    name: str
    preset: str
    weights: str | None
    device: str
    resolution: int
    steps: int
    guidance: float
    batch: int
    corpus: str
    primary_metric: str
    task_metrics: tuple[str, ...]
    guardrails: dict[str, float]
    performance: dict[str, Any]
    quality: dict[str, Any]
    options: dict[str, Any]
    description: str = ""

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    def workload(self, root: Path) -> dict[str, Any]:
        """The spec handed to model_under_test.build_pipeline (DESIGN §2)."""
        weights = self.weights
        if weights and not Path(weights).is_absolute():
            weights = str((root / weights).resolve())
        return {
            "root": str(root), "lane": self.name, "preset": self.preset, "weights": weights,
            "device": self.device, "resolution": self.resolution, "steps": self.steps,
            "guidance": self.guidance, "batch": self.batch, "options": dict(self.options),
        }


@dataclass(frozen=True)
class Config:
    path: Path
    root: Path
    sha256: str
    target: Target
    default_lane: str
    lanes: dict[str, Lane]
    mutable_paths: tuple[str, ...]
    fixed_paths: tuple[str, ...]
    raw: dict[str, Any] = field(repr=False)

    def lane(self, name: str | None) -> Lane:
        name = name or self.default_lane
        if name not in self.lanes:
            raise ConfigError(self.path, "lanes", name, f"one of {sorted(self.lanes)}")
        return self.lanes[name]


class _Reader:
    """Typed access to the JSON tree that names the key path in every error."""

    def __init__(self, path: Path):
        self.path = path

    def get(self, node: dict, key: str, where: str, kind: type | tuple, default: Any = ...) -> Any:
        full = f"{where}.{key}" if where else key
        if not isinstance(node, dict):
            raise ConfigError(self.path, where or "<root>", node, "a JSON object")
        if key not in node:
            if default is ...:
                raise ConfigError(self.path, full, "<missing>", f"a value of type {_tname(kind)}")
            return default
        value = node[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and kind in (int, float):
            raise ConfigError(self.path, full, value, f"a {_tname(kind)}")
        if not isinstance(value, kind):
            raise ConfigError(self.path, full, value, f"a value of type {_tname(kind)}")
        return value

    def positive(self, node: dict, key: str, where: str, kind: type = int, default: Any = ...) -> Any:
        value = self.get(node, key, where, kind, default)
        if value is not None and value <= 0:
            raise ConfigError(self.path, f"{where}.{key}", value, "a positive number")
        return value


def _tname(kind: type | tuple) -> str:
    if isinstance(kind, tuple):
        return " or ".join(_tname(k) for k in kind)
    return {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object",
            list: "array", type(None): "null"}.get(kind, kind.__name__)


def _merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _target(r: _Reader, raw: dict) -> Target:
    t = r.get(raw, "target", "", dict)
    cc = r.get(t, "compute_capability", "target", str)
    if not all(part.isdigit() for part in cc.split(".")) or cc.count(".") != 1:
        raise ConfigError(r.path, "target.compute_capability", cc, 'a string like "8.6"')
    return Target(
        name=r.get(t, "name", "target", str),
        device_match=r.get(t, "device_match", "target", str),
        compute_capability=cc,
        vram_gb=r.positive(t, "vram_gb", "target", float),
        gpu_count=r.positive(t, "gpu_count", "target", int),
        peak_tflops_bf16=r.positive(t, "peak_tflops_bf16", "target", float),
        memory_bandwidth_gbs=r.positive(t, "memory_bandwidth_gbs", "target", float),
        allow_foreign_lanes=r.get(t, "allow_foreign_lanes", "target", bool),
    )


def _performance(r: _Reader, node: dict, where: str) -> dict[str, Any]:
    perf = _merge(PERF_DEFAULTS, node)
    for key in ("warmup_rounds", "rounds", "bootstrap_resamples", "threads"):
        r.positive(perf, key, where, int)
    if perf["rounds"] < 6:
        raise ConfigError(r.path, f"{where}.rounds", perf["rounds"], "at least 6 timed rounds")
    r.get(perf, "min_improvement_pct", where, float)
    alpha = r.get(perf, "alpha", where, float)
    if not 0 < alpha < 0.5:
        raise ConfigError(r.path, f"{where}.alpha", alpha, "a significance level in (0, 0.5)")
    r.get(perf, "confirm_with_fresh_workers", where, bool)
    r.positive(perf, "round_timeout_s", where, float)
    cores = r.get(perf, "cpu_affinity", where, (list, type(None)))
    if cores is not None and (not cores or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0
                                                   for c in cores)):
        raise ConfigError(r.path, f"{where}.cpu_affinity", cores, "null or a non-empty list of CPU core numbers")
    unknown = set(perf) - set(PERF_DEFAULTS)
    if unknown:
        raise ConfigError(r.path, f"{where}.{sorted(unknown)[0]}", perf[sorted(unknown)[0]],
                          f"one of the known keys {sorted(PERF_DEFAULTS)}")
    return perf


def _quality(r: _Reader, node: dict, where: str) -> dict[str, Any]:
    for cls in CLASSES:
        r.get(node, cls, where, dict)
    for key in QUALITY_METRIC_KEYS:  # metric settings (quality_suite.clip / quality_suite.perceptual)
        r.get(node, key, where, dict, {})
    unknown = set(node) - set(CLASSES) - set(QUALITY_METRIC_KEYS)
    if unknown:
        key = sorted(unknown)[0]
        raise ConfigError(r.path, f"{where}.{key}", node[key],
                          f"one of the classes {list(CLASSES)} or metric settings {list(QUALITY_METRIC_KEYS)}")
    return node


def _lane(r: _Reader, name: str, node: dict, perf: dict, quality: dict, root: Path) -> Lane:
    where = f"lanes.{name}"
    device = r.get(node, "device", where, str)
    if device != "cpu" and not (device == "cuda" or device.startswith("cuda:")):
        raise ConfigError(r.path, f"{where}.device", device, '"cpu", "cuda" or "cuda:N"')
    corpus = r.get(node, "corpus", where, str)
    if not (root / corpus).is_file():
        raise ConfigError(r.path, f"{where}.corpus", corpus, f"an existing corpus file relative to {root}")
    metric = r.get(node, "primary_metric", where, str)
    if metric not in PRIMARY_METRICS:
        raise ConfigError(r.path, f"{where}.primary_metric", metric, f"one of {list(PRIMARY_METRICS)}")
    guardrails = r.get(node, "guardrails", where, dict, {})
    for key, value in guardrails.items():
        if key not in ("peak_vram_gb", "peak_memory_mb", "p95_regression_pct"):
            raise ConfigError(r.path, f"{where}.guardrails.{key}", value,
                              "one of peak_vram_gb, peak_memory_mb, p95_regression_pct")
        r.positive(guardrails, key, f"{where}.guardrails", float)
    tasks = r.get(node, "task_metrics", where, list, [])
    for i, metric_name in enumerate(tasks):
        if not isinstance(metric_name, str):
            raise ConfigError(r.path, f"{where}.task_metrics[{i}]", metric_name, "a metric name string")
    lane_perf = _performance(r, _merge(perf, r.get(node, "performance", where, dict, {})), f"{where}.performance")
    lane_quality = _quality(r, _merge(quality, r.get(node, "quality", where, dict, {})), f"{where}.quality")
    return Lane(
        name=name,
        preset=r.get(node, "preset", where, str),
        weights=r.get(node, "weights", where, (str, type(None)), None),
        device=device,
        resolution=r.positive(node, "resolution", where, int),
        steps=r.positive(node, "steps", where, int),
        guidance=r.get(node, "guidance", where, float),
        batch=r.positive(node, "batch", where, int),
        corpus=corpus,
        primary_metric=metric,
        task_metrics=tuple(tasks),
        guardrails=guardrails,
        performance=lane_perf,
        quality=lane_quality,
        options=r.get(node, "options", where, dict, {}),
        description=r.get(node, "description", where, str, ""),
    )


def _paths(r: _Reader, raw: dict, key: str) -> tuple[str, ...]:
    items = r.get(raw, key, "", list)
    if not items:
        raise ConfigError(r.path, key, items, "a non-empty list of paths relative to the repo root")
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item or item.startswith("/") or ".." in Path(item).parts:
            raise ConfigError(r.path, f"{key}[{i}]", item, "a relative path inside the repo")
    return tuple(items)


def repo_root_for(config_path: Path) -> Path:
    """The repo root is the folder above the config file's folder (config/autoresearch.json)."""
    return config_path.resolve().parent.parent


def load_config(path: str | Path = DEFAULT_CONFIG) -> Config:
    """Read, validate and return the config; every error names file, key, found and expected."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(path, "<file>", "missing", "an existing JSON file (see config/autoresearch.json)")
    text = path.read_text(encoding="utf-8")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(path, f"<line {exc.lineno} column {exc.colno}>", exc.msg, "valid JSON") from None
    r = _Reader(path)
    if not isinstance(raw, dict):
        raise ConfigError(path, "<root>", type(raw).__name__, "a JSON object")
    version = r.get(raw, "schema_version", "", int)
    if version != 1:
        raise ConfigError(path, "schema_version", version, "1")
    root = repo_root_for(path)
    perf = r.get(raw, "performance", "", dict)
    _performance(r, perf, "performance")
    quality = _quality(r, r.get(raw, "quality", "", dict), "quality")
    lanes_raw = r.get(raw, "lanes", "", dict)
    if not lanes_raw:
        raise ConfigError(path, "lanes", lanes_raw, "at least one lane")
    lanes = {name: _lane(r, name, r.get(lanes_raw, name, "lanes", dict), perf, quality, root)
             for name in lanes_raw}
    default_lane = r.get(raw, "default_lane", "", str)
    if default_lane not in lanes:
        raise ConfigError(path, "default_lane", default_lane, f"one of the lanes {sorted(lanes)}")
    mutable, fixed = _paths(r, raw, "mutable_paths"), _paths(r, raw, "fixed_paths")
    for m in mutable:
        for f in fixed:
            if m.rstrip("/") == f.rstrip("/") or m.startswith(f.rstrip("/") + "/") or f.startswith(m.rstrip("/") + "/"):
                raise ConfigError(path, "mutable_paths", m, f"no overlap with fixed path {f!r}")
    return Config(
        path=path.resolve(), root=root, sha256=hashlib.sha256(text.encode()).hexdigest(),
        target=_target(r, raw), default_lane=default_lane, lanes=lanes,
        mutable_paths=mutable, fixed_paths=fixed, raw=raw,
    )
