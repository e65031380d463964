"""The parts both scaffolds share (`dit-ar scaffold --pipeline` in cli/scaffold.py, `--custom` in
cli/scaffold_custom.py): what was asked, the workload, the plan of files, the corpus and config files, the
templates, the repository, and checking and writing a plan."""

from __future__ import annotations

import hashlib
import json
import math
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dit_ar_contract.config import DEFAULT_CONFIG, load_config
from dit_ar_contract.errors import Refused
from dit_ar_contract.noninferiority_settings import NonInferiorityTest

from .scaffold_clip import ClipChoice

TEMPLATES = Path(__file__).resolve().parent / "scaffold_templates"
CORPUS_DIR = "corpus"
MUTABLE = "model_under_test/"
FIXED = ("config/", f"{CORPUS_DIR}/", "program.md", "AGENTS.md", "tests/", ".gitignore")
# a virtual environment inside the project is never committed
IGNORED = ("__pycache__/", "*.pyc", ".pytest_cache/", ".benchmarks/", ".venv/", "venv/")
LANE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
DEVICE = re.compile(r"cpu|cuda(:[0-9]+)?")
FIRST_SEED = 4101
DEFAULT_CASES = 16


@dataclass(frozen=True)
class Family:
    """What the scaffold knows about one diffusers pipeline class; the numbers are fallbacks for when the
    folder's configs or the class's signature say nothing."""

    class_name: str
    key: str  # the lane's preset name
    wrapper: str  # the class in the generated pipeline.py
    sample_size: int  # latent side
    vae_factor: int  # VAE down-sampling
    multiple: int  # the resolution must be a multiple of this
    steps: int
    guidance: float
    max_sequence_length: int = 0
    cuda_dtype: str = "bfloat16"

    @property
    def text_to_image(self) -> bool:
        return self.wrapper == "TextToImage"

    @property
    def template(self) -> str:
        return "model/pipeline_text.py.j2" if self.text_to_image else "model/pipeline_class.py.j2"


@dataclass(frozen=True)
class Request:
    """What was asked on the command line."""

    pipeline: Path
    lane: str | None = None
    resolution: int | None = None
    steps: int | None = None
    guidance: float | None = None
    batch: int | None = None
    device: str = "cuda"
    cases: int = DEFAULT_CASES
    force: bool = False
    clip_weights: Path | None = None  # open_clip weights for the clip_score task metric (scaffold_clip.py)
    clip_model: str | None = None


@dataclass(frozen=True)
class Workload:
    """The lane's workload, each value from a flag, the pipeline's folder or the class's defaults."""

    resolution: int
    steps: int
    guidance: float
    batch: int
    device: str
    max_sequence_length: int


@dataclass(frozen=True)
class Plan:
    """Every file the scaffold writes (repo-relative path -> text) and what it was made for."""

    root: Path
    family: Family
    lane: str
    workload: Workload
    files: Mapping[str, str] = field(default_factory=dict)
    clip: ClipChoice | None = None


def read_json_file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def slug(text: str, words: int = 3) -> str:
    """A case id's readable part: the first words of the prompt, lower-case, joined by '-'."""
    return "-".join(re.findall(r"[a-z0-9]+", text.lower())[:words]) or "case"


def corpus_files(root: Path, lane: str, cases: list[dict[str, Any]]) -> dict[str, str]:
    """The corpus file and the checksums file beside it (other lanes' entries kept)."""
    text = "".join(json.dumps(case) + "\n" for case in cases)
    name = f"{lane}.jsonl"
    sums = read_json_file(root / CORPUS_DIR / "checksums.json")
    sums[name] = hashlib.sha256(text.encode("utf-8")).hexdigest()  # the bytes write() puts on disk
    return {f"{CORPUS_DIR}/{name}": text,
            f"{CORPUS_DIR}/checksums.json": json.dumps(dict(sorted(sums.items())), indent=2) + "\n"}


def contract() -> dict[str, Any]:
    """This project's target, quality and timing contract (kept equal to config/autoresearch.json's)."""
    return json.loads((TEMPLATES / "contract.json").read_text(encoding="utf-8"))


def weights_entry(root: Path, folder: Path) -> str:
    """The lane's weights: relative to the repository when the folder is inside it, else absolute."""
    resolved = folder.resolve()
    return resolved.relative_to(root).as_posix() if root in resolved.parents else str(resolved)


def fixed_paths(weights: str) -> list[str]:
    """The fixed files of a scaffolded repository, with the weights folder when it lives inside it."""
    paths = list(FIXED)
    if not Path(weights).is_absolute():
        paths.append(weights.rstrip("/") + "/")
    return paths


def config_for(family: Family, lane: str, work: Workload, weights: str) -> dict[str, Any]:
    """The session contract of the scaffolded repository: one lane, this project's contract."""
    base = contract()
    on_cuda = work.device.startswith("cuda")
    lane_node: dict[str, Any] = {
        "description": f"{family.class_name} from {weights} at {work.resolution}x{work.resolution} "
                       f"(set up by dit-ar scaffold)",
        "preset": family.key, "weights": weights, "device": work.device, "resolution": work.resolution,
        "steps": work.steps, "guidance": work.guidance, "batch": work.batch,
        "corpus": f"{CORPUS_DIR}/{lane}.jsonl", "primary_metric": "latency_ms", "task_metrics": [],
        "guardrails": base["cuda_lane"]["guardrails"] if on_cuda else {"p95_regression_pct": 20.0},
    }
    if on_cuda and base["cuda_lane"].get("performance"):
        lane_node["performance"] = base["cuda_lane"]["performance"]
    target = base["target"] if on_cuda else cpu_target()
    return {"schema_version": 1, "target": target, "default_lane": lane, "lanes": {lane: lane_node},
            "mutable_paths": [MUTABLE], "fixed_paths": fixed_paths(weights),
            "quality": base["quality"], "performance": base["performance"]}


def cpu_target() -> dict[str, Any]:
    """A CPU lane's target: this machine's CPU, as `dit-ar doctor` names it (no GPU model is the target of a
    project that runs on a CPU)."""
    from dit_ar_contract.device import cpu_name

    name = cpu_name()
    return {"name": name, "device": "cpu", "device_match": name, "allow_foreign_lanes": True}


def set_case_budget(config: dict[str, Any], lane: str, cases: int) -> None:
    """A lane with a task metric gets the case budget a quantization needs (n_pass cases, `tolerance_cases`) as its
    own `quality.noninferiority.case_budget_multiple` when the contract's is smaller; an approximate change's
    n_min depends on the baseline's scores (`dit-ar doctor` says whether the budget holds it)."""
    node = config["lanes"][lane]
    if not node.get("task_metrics") or cases < 1:
        return
    settings = config["quality"].get("noninferiority", {})
    n_pass = int(settings.get("tolerance_cases", NonInferiorityTest.tolerance_cases))
    multiple = float(settings.get("case_budget_multiple", NonInferiorityTest.case_budget_multiple))
    if round(multiple * cases) < n_pass:
        quality = node.setdefault("quality", {})
        quality.setdefault("noninferiority", {})["case_budget_multiple"] = math.ceil(n_pass / cases)


def render(template: str, **context: Any) -> str:
    """One template of scaffold_templates/ (Jinja2, undefined names are errors)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    return env.get_template(template).render(**context)


def repo_root(cwd: Path) -> Path:
    """The git repository around `cwd`, refusing outside one."""
    import git

    try:
        repo = git.Repo(cwd, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise Refused(f"{cwd} is not inside a git repository: the loop keeps or resets commits, so run "
                      "`git init` (and commit your files) first, then `dit-ar scaffold` again") from None
    if repo.working_tree_dir is None:
        raise Refused(f"{cwd} is a bare git repository: run dit-ar scaffold in a working tree")
    return Path(repo.working_tree_dir).resolve()


def check_config(plan_: Plan) -> None:
    """Load the config as the harness will (in a scratch copy), so a scaffold never writes an invalid one."""
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in plan_.files.items():
            if rel.startswith(("config/", CORPUS_DIR + "/")):
                (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
                (Path(tmp) / rel).write_text(text, encoding="utf-8")
        load_config(Path(tmp) / DEFAULT_CONFIG)


def _gitignore(root: Path) -> str:
    path = root / ".gitignore"
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    have = {line.strip() for line in text.splitlines()}
    missing = [entry for entry in IGNORED if entry not in have]
    if not missing:
        return text
    return text + ("" if not text or text.endswith("\n") else "\n") + "\n".join(missing) + "\n"


def write(plan_: Plan, force: bool) -> list[str]:
    """Write the plan's files (refusing existing ones unless forced) and the .gitignore entries."""
    existing = sorted(rel for rel in plan_.files if (plan_.root / rel).exists())
    if existing and not force:
        raise Refused(f"these files exist already: {', '.join(existing)}; nothing was written (pass --force to "
                      "overwrite them)")
    written = []
    for rel, text in plan_.files.items():
        path = plan_.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))  # exactly these bytes: the corpus checksum is taken over them
        written.append(rel)
    (plan_.root / ".gitignore").write_text(_gitignore(plan_.root), encoding="utf-8")
    return [*written, ".gitignore"]
