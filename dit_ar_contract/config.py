"""config/autoresearch.json, the session contract (docs/design/README.md), read into frozen dataclasses.

Every section has a fixed set of keys: a missing required key, a value of the wrong type and a key
nobody knows are all refused with the file, the key path, what was found and what was expected. Lanes
may override the top-level `performance` and `quality` sections key by key.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from .errors import ConfigError, UnknownKeyError
from .noninferiority_settings import NonInferiorityTest
from .perf_protocol import PAIR_CORES, TIME_QUALITY_PAIR, PerfProtocol

PRIMARY_METRICS = ("latency_ms", "images_per_s")
DEFAULT_CONFIG = Path("config/autoresearch.json")
SCHEMA_VERSION = 1
REQUIRED = dataclasses.MISSING


# -- the contract's sections (the performance section: perf_protocol.py) ------------------------------
@dataclass(frozen=True)
class Target:
    """The hardware the project optimises for; any other device runs as a labelled foreign lane. `device` "cuda": a
    GPU model, described by the figures below (all required); "cpu": the machine's own CPU, for a project whose lanes
    all run on it (`dit-ar scaffold --device cpu`; no GPU figures)."""

    name: str
    device_match: str
    allow_foreign_lanes: bool
    device: str = "cuda"
    compute_capability: str = ""
    vram_gb: float = 0.0
    gpu_count: int = 1
    peak_tflops_bf16: float = 0.0
    memory_bandwidth_gbs: float = 0.0

    @property
    def is_cpu(self) -> bool:
        return self.device == "cpu"


@dataclass(frozen=True)
class Guardrails:
    """Limits a faster candidate must still respect (absent = not checked)."""

    peak_vram_gb: float | None = None
    peak_memory_mb: float | None = None
    p95_regression_pct: float | None = None
    memory_growth_pct: float | None = 10.0  # peak memory may grow this much over the best's (plus 64 MB)
    startup_growth_pct: float | None = 100.0  # reported: the warm start's growth over the best's (decides nothing)
    startup_budget_s: float | None = 120.0  # the candidate's warm start (build + warm-up, cache present) at most
    emulated_vram_gb: float | None = None  # judge as on a card of this size: the sum of live workers (memory_plan)
    host_memory_mb: float | None = None  # each worker's hard host-memory limit (None: from the machine, host_limit)


@dataclass(frozen=True)
class ExactGate:
    envelope_multiple: float = 4.0
    latent_rel_l2_floor: float = 1e-5
    latent_max_abs_floor: float = 1e-4
    psnr_floor_db: float = 60.0
    ssim_loss_floor: float = 1e-4
    # the baseline's benign reruns the envelope is the worst of (ENVELOPE_RERUNS); None: every one the lane's device
    # runs by default (default_reruns). A lane may keep fewer where the others measured bit-identical to the default
    # run (docs/design/quality.md)
    envelope_reruns: tuple[str, ...] | None = None

    def reruns(self, is_cuda: bool) -> tuple[str, ...]:
        """The benign reruns the baseline runs on a lane of this kind of device, in order."""
        if self.envelope_reruns is None:
            return default_reruns(is_cuda)
        return tuple(r for r in device_reruns(is_cuda) if r in self.envelope_reruns)


# the baseline's benign, mathematically equivalent reruns (loop/baseline.py `perturbations`): every case alone, two
# batches as one (twice the lane's batch), the batches in reverse order, and one per kind of device (a thread count
# on a CPU, the math attention kernel on CUDA)
ENVELOPE_RERUNS = ("split-batch", "merged-batches", "reversed-batches", "one-thread", "sdpa-math")
# the reruns a lane runs by default only on a CPU: a doubled batch on a card of the target's size may not fit
CPU_DEFAULT_ONLY = ("merged-batches",)


def device_reruns(is_cuda: bool) -> tuple[str, ...]:
    """The benign reruns a lane on this kind of device may run."""
    return ("split-batch", "merged-batches", "reversed-batches", "sdpa-math" if is_cuda else "one-thread")


def default_reruns(is_cuda: bool) -> tuple[str, ...]:
    """The benign reruns a lane runs when it names none (`envelope_reruns` null)."""
    return tuple(r for r in device_reruns(is_cuda) if not (is_cuda and r in CPU_DEFAULT_ONLY))


@dataclass(frozen=True)
class NumericalGate:
    max_latent_rel_l2: float
    min_psnr_db: float
    min_mean_psnr_db: float
    min_ssim: float
    min_mean_ssim: float
    max_lpips: float | None = None


@dataclass(frozen=True)
class ApproximateGate:
    min_psnr_db: float
    min_ssim: float
    max_lpips: float | None = None
    task_margin: Mapping[str, float] = field(default_factory=dict)
    max_sharpness_change: float = 0.25  # mean |log Laplacian-energy ratio|; docs/design/quality.md calibrates it


@dataclass(frozen=True)
class QuantizationGate:
    """The tolerance claim on every task score (quality_suite/task_tests.py) plus the numerical floors; nothing to
    configure here (its settings are `quality.noninferiority`)."""


@dataclass(frozen=True)
class LpipsSettings:
    net: str = "alex"
    required: bool = False


@dataclass(frozen=True)
class ClipSettings:
    """open_clip weights for `clip_score` (`weights`: a checkpoint file, a folder holding one or a hub cache folder,
    relative to the repository or absolute) and the architecture (`model`; optional where the folder says it)."""

    model: str | None = None
    weights: str | None = None


@dataclass(frozen=True)
class ClassifierSettings:
    """A torchvision ImageNet classifier for `classifier_top1`: architecture, local state_dict file, input geometry."""

    model: str | None = None
    weights: str | None = None
    resize: int = 256  # shorter side before the centre crop: the weights' transforms().resize_size
    crop: int = 224
    interpolation: str = "bilinear"  # or "bicubic", as the weights' transforms() say


@dataclass(frozen=True)
class QualityContract:
    """Thresholds per experiment class (docs/design/quality.md) and the settings of the optional metrics."""

    exact: ExactGate
    numerical: NumericalGate
    approximate: ApproximateGate
    quantization: QuantizationGate
    lpips: LpipsSettings = field(default_factory=LpipsSettings)
    clip: ClipSettings = field(default_factory=ClipSettings)
    classifier: ClassifierSettings = field(default_factory=ClassifierSettings)
    noninferiority: NonInferiorityTest = field(default_factory=NonInferiorityTest)


class WorkloadSpec(TypedDict):
    """What `model_under_test.build_pipeline(spec)` receives, made by `Lane.workload`: a plain dict at run time, so
    the mutable side imports nothing of the harness (model_under_test/__init__.py names every key; a test checks)."""

    root: str  # the side's tree, as its worker sees it
    lane: str
    preset: str
    weights: str | None  # a pipeline folder or file, absolute; None: the preset's own
    device: str
    resolution: int
    steps: int
    guidance: float
    batch: int
    options: dict[str, Any]  # the preset's own options (docs/design/models-and-lanes.md)
    gpus: int  # GPUs the worker sees (cuda:0 .. cuda:gpus-1)


@dataclass(frozen=True)
class Lane:
    """One named workload: the model, its device and size, its corpus, its metrics and its protocol."""

    name: str
    preset: str
    device: str
    resolution: int
    steps: int
    guidance: float
    batch: int
    corpus: str
    primary_metric: str
    performance: PerfProtocol
    quality: QualityContract
    guardrails: Guardrails = field(default_factory=Guardrails)
    task_metrics: tuple[str, ...] = ()
    weights: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    gpus: int = 1  # GPUs the worker sees (cuda:0 .. cuda:gpus-1); a multi-GPU candidate may use them all
    holdout_corpus: str | None = None  # frozen cases only `dit-ar revalidate` judges (never `experiment`)

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    def workload(self, root: Path, project: Path | None = None) -> WorkloadSpec:
        """The spec for model_under_test.build_pipeline: `root` is the side's tree; relative weights resolve against
        `project` (the session's repository, default `root`), so both sides build from the same fixed files."""
        return WorkloadSpec(root=str(root), lane=self.name, preset=self.preset,
                            weights=self.weights_path(project or root), device=self.device,
                            resolution=self.resolution, steps=self.steps, guidance=self.guidance, batch=self.batch,
                            options=copy.deepcopy(dict(self.options)), gpus=self.gpus)

    def weights_path(self, project: Path) -> str | None:
        """The lane's weights as an absolute path (relative ones resolve against the project); None: the preset's."""
        weights = self.weights
        return str((project / weights).resolve()) if weights and not Path(weights).is_absolute() else weights

    def metric_value(self, median_ms: float | None) -> float | None:
        """A batch latency in ms expressed as the lane's primary metric."""
        if median_ms is None:
            return None
        return self.batch / (median_ms / 1e3) if self.primary_metric == "images_per_s" else median_ms

    def gpu_seconds_per_image(self, median_ms: float | None) -> float | None:
        """What an image costs in GPU time: the batch latency times the GPUs the worker holds, per image (a
        two-GPU candidate must be more than twice as fast to be cheaper). None on CPU lanes."""
        return gpu_seconds_per_image(median_ms, self.device, self.gpus, self.batch)


def gpu_seconds_per_image(median_ms: float | None, device: str, gpus: int, batch: int) -> float | None:
    if median_ms is None or not device.startswith("cuda"):
        return None
    return median_ms / 1e3 * gpus / batch


@dataclass(frozen=True)
class Config:
    path: Path
    root: Path
    sha256: str
    target: Target
    default_lane: str
    lanes: Mapping[str, Lane]
    mutable_paths: tuple[str, ...]
    fixed_paths: tuple[str, ...]

    def lane_name(self, explicit: str | None = None, session_lane: str | None = None) -> str:
        """The one rule for which lane runs: the explicit choice, else the session's, else the default."""
        name = explicit or session_lane or self.default_lane
        if name not in self.lanes:
            raise ConfigError(self.path, "lanes", name, f"one of the lanes {sorted(self.lanes)}")
        return name

    def lane(self, explicit: str | None = None, session_lane: str | None = None) -> Lane:
        return self.lanes[self.lane_name(explicit, session_lane)]


# -- reading ---------------------------------------------------------------------------------------
class _Reader:
    """Builds the dataclasses above from JSON objects; every error names the key path."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, key: str, found: Any, expected: str) -> ConfigError:
        return ConfigError(self.path, key, found, expected)

    def obj(self, node: Any, where: str) -> dict[str, Any]:
        if not isinstance(node, dict):
            raise self.fail(where or "<root>", node, "a JSON object")
        return node

    def known(self, node: dict[str, Any], where: str, keys: typing.Iterable[str]) -> None:
        keys = set(keys)
        for key in (k for k in node if k not in keys):
            raise UnknownKeyError(self.path, _join(where, key), keys)

    def build(self, cls: type, node: Any, where: str) -> Any:
        """An instance of dataclass `cls` from `node`, every field type-checked, unknown keys refused."""
        node = self.obj(node, where)
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        self.known(node, where, fields)
        values = {}
        for name, f in fields.items():
            key = _join(where, name)
            if name in node:
                values[name] = self.value(hints[name], node[name], key)
            elif f.default is REQUIRED and f.default_factory is REQUIRED:
                raise self.fail(key, "<missing>", f"a value of type {_type_name(hints[name])}")
        return cls(**values)

    def value(self, hint: Any, value: Any, key: str) -> Any:
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (typing.Union, types.UnionType):
            if value is None and type(None) in args:
                return None
            options = [a for a in args if a is not type(None)]
            return self.value(options[0], value, key)
        if origin is tuple:
            if not isinstance(value, list):
                raise self.fail(key, value, f"an array of {_type_name(args[0])}")
            return tuple(self.value(args[0], item, f"{key}[{i}]") for i, item in enumerate(value))
        if origin in (Mapping, dict):
            mapping = self.obj(value, key)
            return {k: self.value(args[1], v, _join(key, k)) for k, v in mapping.items()}
        if hint is Any:
            return value
        if dataclasses.is_dataclass(hint):
            return self.build(hint, value, key)
        return self.scalar(hint, value, key)

    def scalar(self, kind: type, value: Any, key: str) -> Any:
        if isinstance(value, bool) and kind is not bool:
            raise self.fail(key, value, f"a {_type_name(kind)}")
        if kind is float and isinstance(value, int):
            return float(value)
        if not isinstance(value, kind):
            raise self.fail(key, value, f"a value of type {_type_name(kind)}")
        return value


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _type_name(hint: Any) -> str:
    names = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args) + " or null"
    if typing.get_origin(hint) is tuple:
        return "array"
    if typing.get_origin(hint) in (Mapping, dict) or dataclasses.is_dataclass(hint):
        return "object"
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def _merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


# -- checks beyond types ---------------------------------------------------------------------------
def _positive(r: _Reader, where: str, **values: float | None) -> None:
    for key, value in values.items():
        if value is not None and value <= 0:
            raise r.fail(_join(where, key), value, "a positive number")


def _check_target(r: _Reader, t: Target) -> None:
    if t.device not in ("cuda", "cpu"):
        raise r.fail("target.device", t.device, '"cuda" (a GPU model) or "cpu" (this machine\'s CPU)')
    cc = t.compute_capability
    if t.is_cpu:
        return
    if cc.count(".") != 1 or not all(part.isdigit() for part in cc.split(".")):
        raise r.fail("target.compute_capability", cc or "<missing>", 'a string like "8.6"')
    _positive(r, "target", vram_gb=t.vram_gb, gpu_count=t.gpu_count, peak_tflops_bf16=t.peak_tflops_bf16,
              memory_bandwidth_gbs=t.memory_bandwidth_gbs)


PERF_RANGES = (("bound_confidence", lambda x: 0 < x < 1, "a confidence level in (0, 1)"),
               ("futility_power", lambda x: 0 <= x < 1, "a probability in [0, 1) (0 turns the stop off)"),
               ("futility_from", lambda x: 0 <= x <= 1, "an information fraction in [0, 1]"),
               ("alpha", lambda x: 0 < x < 0.5, "a significance level in (0, 0.5)"),
               ("role_check_fraction", lambda x: 0 <= x <= 1, "a fraction of experiments in [0, 1]"),
               ("warmup_rounds", lambda x: x >= 0, "zero or more warm-up rounds"),
               ("compile_cache_keep", lambda x: x >= 0, "zero or more recent trees kept"),
               ("revalidate_every", lambda x: x >= 0, "0 (never) or the number of keeps between automatic "
                "re-validations"))


def _check_perf(r: _Reader, p: PerfProtocol, where: str) -> None:
    _positive(r, where, rounds=p.rounds, min_segments=p.min_segments, threads=p.threads,
              round_timeout_s=p.round_timeout_s, offset_bound_pct=p.offset_bound_pct, futility_z=p.futility_z,
              bound_min_df=p.bound_min_df, pairs=p.pairs, look_every_rounds=p.look_every_rounds)
    for key, ok, expected in PERF_RANGES:
        if not ok(getattr(p, key)):
            raise r.fail(f"{where}.{key}", getattr(p, key), expected)
    if p.pairs > 1 and not 4 <= p.first_look_rounds <= p.rounds:
        raise r.fail(f"{where}.first_look_rounds", p.first_look_rounds, f"4 to rounds ({p.rounds}) rounds per pair")
    if p.warmup_max_rounds < p.warmup_rounds:
        raise r.fail(f"{where}.warmup_max_rounds", p.warmup_max_rounds, f"at least warmup_rounds ({p.warmup_rounds})")
    _positive(r, where, warmup_window=p.warmup_window, warmup_steady_pct=p.warmup_steady_pct,
              compile_cache_gb=p.compile_cache_gb, worker_log_mb=p.worker_log_mb)
    if p.rounds < 4:
        raise r.fail(f"{where}.rounds", p.rounds, "at least 4 timed rounds per segment")
    if p.max_segments < p.min_segments:
        raise r.fail(f"{where}.max_segments", p.max_segments, f"at least min_segments ({p.min_segments})")
    if p.cpu_affinity is not None and (not p.cpu_affinity or min(p.cpu_affinity) < 0):
        raise r.fail(f"{where}.cpu_affinity", list(p.cpu_affinity), "null or a non-empty list of CPU core numbers")
    for key, allowed in (("pair_cores", PAIR_CORES), ("time_quality_pair", TIME_QUALITY_PAIR)):
        if getattr(p, key) not in allowed:
            raise r.fail(f"{where}.{key}", getattr(p, key), " or ".join(f'"{c}"' for c in allowed))
    _positive(r, where, fork_servers_per_side=p.fork_servers_per_side)
    if p.calibration_pairs < 3:
        raise r.fail(f"{where}.calibration_pairs", p.calibration_pairs, "at least 3 A/A pairs")
    if p.calibration_rounds is not None and p.calibration_rounds < 4:
        raise r.fail(f"{where}.calibration_rounds", p.calibration_rounds, "null (the lane's rounds) or at least 4 "
                     "rounds per pair")


def _check_quality(r: _Reader, q: QualityContract, where: str) -> None:
    reruns = q.exact.envelope_reruns
    if reruns is not None and (not reruns or any(x not in ENVELOPE_RERUNS for x in reruns)):
        raise r.fail(f"{where}.exact.envelope_reruns", list(reruns),
                     f"null or a non-empty list of {list(ENVELOPE_RERUNS)}")
    if q.lpips.net not in ("alex", "vgg", "squeeze"):
        raise r.fail(f"{where}.lpips.net", q.lpips.net, 'one of "alex", "vgg", "squeeze"')
    _positive(r, f"{where}.classifier", resize=q.classifier.resize, crop=q.classifier.crop)
    if q.classifier.crop > q.classifier.resize:
        raise r.fail(f"{where}.classifier.crop", q.classifier.crop, f"at most resize ({q.classifier.resize})")
    if q.classifier.interpolation not in ("bilinear", "bicubic"):
        raise r.fail(f"{where}.classifier.interpolation", q.classifier.interpolation, '"bilinear" or "bicubic"')
    bad = q.noninferiority.invalid()
    if bad is not None:
        raise r.fail(f"{where}.noninferiority.{bad[0]}", bad[1], bad[2])


def _check_lane(r: _Reader, lane: Lane, root: Path) -> None:
    where = f"lanes.{lane.name}"
    if lane.device != "cpu" and not (lane.device == "cuda" or lane.device.startswith("cuda:")):
        raise r.fail(f"{where}.device", lane.device, '"cpu", "cuda" or "cuda:N"')
    if not (root / lane.corpus).is_file():
        raise r.fail(f"{where}.corpus", lane.corpus, f"an existing corpus file relative to {root}")
    if lane.holdout_corpus is not None and (lane.holdout_corpus == lane.corpus or
                                            not (root / lane.holdout_corpus).is_file()):
        raise r.fail(f"{where}.holdout_corpus", lane.holdout_corpus, f"an existing corpus file relative to {root}, "
                     "other than the lane's corpus (or leave the key out)")
    if lane.primary_metric not in PRIMARY_METRICS:
        raise r.fail(f"{where}.primary_metric", lane.primary_metric, f"one of {list(PRIMARY_METRICS)}")
    _positive(r, where, resolution=lane.resolution, steps=lane.steps, batch=lane.batch, gpus=lane.gpus)
    if lane.gpus > 1 and lane.device != "cuda":
        raise r.fail(f"{where}.gpus", lane.gpus, '1, or a lane with device "cuda" (the worker then sees '
                     'that many GPUs; "cpu" and "cuda:N" name one device)')
    g = lane.guardrails
    _positive(r, f"{where}.guardrails", peak_vram_gb=g.peak_vram_gb, peak_memory_mb=g.peak_memory_mb,
              p95_regression_pct=g.p95_regression_pct, memory_growth_pct=g.memory_growth_pct,
              startup_growth_pct=g.startup_growth_pct, startup_budget_s=g.startup_budget_s,
              emulated_vram_gb=g.emulated_vram_gb, host_memory_mb=g.host_memory_mb)
    _check_perf(r, lane.performance, f"{where}.performance")
    _check_quality(r, lane.quality, f"{where}.quality")
    reruns = lane.quality.exact.envelope_reruns
    own = device_reruns(lane.device != "cpu")
    if reruns is not None and any(x not in own for x in reruns):
        raise r.fail(f"{where}.quality.exact.envelope_reruns", list(reruns),
                     f"reruns of a {lane.device} lane, some of {list(own)}")


def _check_metric_weights(r: _Reader, lane: Lane, root: Path, mutable: tuple[str, ...]) -> None:
    """Task-metric weights never lie under a mutable path (a candidate's commit could swap the model scoring it)."""
    for key, value in (("clip", lane.quality.clip.weights), ("classifier", lane.quality.classifier.weights)):
        path = (root / value).resolve() if value else None  # an absolute value stays itself
        for m in mutable if path else ():
            if path == (root / m).resolve() or (root / m).resolve() in path.parents:
                raise r.fail(f"lanes.{lane.name}.quality.{key}.weights", value, f"a path outside the mutable {m!r}")


def _paths(r: _Reader, raw: dict, key: str) -> tuple[str, ...]:
    items = r.value(tuple[str, ...], raw.get(key, []), key)
    if not items:
        raise r.fail(key, list(items), "a non-empty list of paths relative to the repo root")
    for i, item in enumerate(items):
        if not item or item.startswith("/") or ".." in Path(item).parts:
            raise r.fail(f"{key}[{i}]", item, "a relative path inside the repo")
    return items


REMOVED_KEYS = {"offset_floor_pct": "offset_bound_pct (a bound on the between-process sd alone, not on the total "
                "spread; null = the lane kind's default; see docs/design/speed-verdict.md)"}


def _refuse_removed(r: _Reader, node: dict, where: str) -> None:
    for key, instead in REMOVED_KEYS.items():
        if key in node:
            raise r.fail(_join(where, key), "a removed key", f"{instead}: rename or delete it")


def _lane(r: _Reader, name: str, node: Any, perf: dict, quality: dict, root: Path) -> Lane:
    where = f"lanes.{name}"
    node = r.obj(node, where)
    _refuse_removed(r, r.obj(node.get("performance", {}), f"{where}.performance"), f"{where}.performance")
    merged = dict(node)
    merged["performance"] = _merge(perf, r.obj(node.get("performance", {}), f"{where}.performance"))
    merged["quality"] = _merge(quality, r.obj(node.get("quality", {}), f"{where}.quality"))
    lane = r.build(Lane, {"name": name, **merged}, where)
    _check_lane(r, lane, root)
    return lane


def repo_root_for(config_path: Path) -> Path:
    """The repo root is the folder above the config file's folder (config/autoresearch.json)."""
    return Path(config_path).resolve().parent.parent


TOP_KEYS = ("schema_version", "target", "default_lane", "lanes", "mutable_paths", "fixed_paths", "quality",
            "performance")


def load_config(path: str | Path = DEFAULT_CONFIG) -> Config:
    """Read, validate and return the config; every error names file, key, found and expected."""
    if not Path(path).is_file():
        raise ConfigError(path, "<file>", "missing", "an existing JSON file: pass --config PATH, or set up this "
                          "repository around your own pipeline with `dit-ar scaffold --pipeline PATH`")
    return parse_config(Path(path).read_text(encoding="utf-8"), path)


def parse_config(text: str, path: str | Path) -> Config:
    """The config in `text`, as if read from `path` (its repository root is the folder above the file's folder):
    the file itself, or the version of it a commit holds (`loop/guards/frozen.py` reads the best commit's)."""
    path = Path(path)
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(path, f"<line {exc.lineno} column {exc.colno}>", exc.msg, "valid JSON") from None
    r = _Reader(path)
    raw = r.obj(raw, "")
    r.known(raw, "", TOP_KEYS)
    version = r.value(int, raw.get("schema_version"), "schema_version")
    if version != SCHEMA_VERSION:
        raise r.fail("schema_version", version, str(SCHEMA_VERSION))
    root = repo_root_for(path)
    target = r.build(Target, raw.get("target"), "target")
    _check_target(r, target)
    perf = r.obj(raw.get("performance", {}), "performance")
    _refuse_removed(r, perf, "performance")
    _check_perf(r, r.build(PerfProtocol, perf, "performance"), "performance")
    quality = r.obj(raw.get("quality"), "quality")
    _check_quality(r, r.build(QualityContract, quality, "quality"), "quality")
    lanes_raw = r.obj(raw.get("lanes"), "lanes")
    if not lanes_raw:
        raise r.fail("lanes", lanes_raw, "at least one lane")
    lanes = {name: _lane(r, name, node, perf, quality, root) for name, node in lanes_raw.items()}
    for lane in (lane for lane in lanes.values() if lane.gpus > target.gpu_count):
        raise r.fail(f"lanes.{lane.name}.gpus", lane.gpus, f"at most target.gpu_count ({target.gpu_count}): "
                     "the target machine has that many GPUs")
    for lane in (lane for lane in lanes.values() if lane.is_cuda and target.is_cpu):
        raise r.fail(f"lanes.{lane.name}.device", lane.device, "cpu: the target is a CPU (target.device)")
    default_lane = r.value(str, raw.get("default_lane"), "default_lane")
    if default_lane not in lanes:
        raise r.fail("default_lane", default_lane, f"one of the lanes {sorted(lanes)}")
    mutable, fixed = _paths(r, raw, "mutable_paths"), _paths(r, raw, "fixed_paths")
    for m, f in ((m, f) for m in mutable for f in fixed):
        a, b = m.rstrip("/"), f.rstrip("/")
        if a == b or a.startswith(b + "/") or b.startswith(a + "/"):
            raise r.fail("mutable_paths", m, f"no overlap with fixed path {f!r}")
    for lane in lanes.values():
        _check_metric_weights(r, lane, root, mutable)
    return Config(path=path.resolve(), root=root, sha256=hashlib.sha256(text.encode()).hexdigest(), target=target,
                  default_lane=default_lane, lanes=lanes, mutable_paths=mutable, fixed_paths=fixed)
