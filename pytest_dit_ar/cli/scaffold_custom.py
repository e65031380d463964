"""`dit-ar scaffold --custom`: set up a git repository for any PyTorch model, without a diffusers pipeline.

It writes, from scaffold_templates/custom/:

* `model_under_test/` — a seam skeleton that already works: `build_pipeline(spec)` and a pipeline whose
  `generate(requests)` runs three stages inside the `text_encode`, `denoise` and `decode` profiler ranges, with a
  tiny seeded denoiser in place of your model (every stand-in is marked REPLACE);
* `tests/test_seam_contract.py` — the contract test (`pytest_dit_ar.worker.seam.check_seam`) that checks your
  implementation and says, one line per problem, what is wrong and how to fix it;
* a corpus template `corpus/<lane>.jsonl` (prompts and seeds) and its checksum: edit it for your model before
  `dit-ar init`, then refresh the checksum with the one-liner printed at the end;
* `config/autoresearch.json` (one lane, preset `custom`), `program.md`, `AGENTS.md` and the `.gitignore` entries.

Refusals (nothing written): outside a git repository, existing files without `--force`, a lane name or
workload that is not valid, a weights path that does not exist.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dit_ar_contract.config import DEFAULT_CONFIG
from dit_ar_contract.errors import Refused

from . import scaffold_files as sc
from .scaffold_clip import add_clip, describe

CUSTOM = sc.Family("your PyTorch model", "custom", "CustomPipeline", 32, 8, 8, 20, 3.0, cuda_dtype="float32")
DEFAULT_RESOLUTION = 64
DEFAULT_STEPS = 20
DEFAULT_GUIDANCE = 3.0


def _workload(request: sc.Request) -> sc.Workload:
    if not sc.DEVICE.fullmatch(request.device):
        raise Refused(f"--device {request.device!r}: use cuda, cuda:N or cpu")
    for name, value in (("resolution", request.resolution), ("steps", request.steps), ("batch", request.batch),
                        ("cases", request.cases)):
        if value is not None and value < 1:
            raise Refused(f"--{name} must be at least 1, got {value}")
    resolution = request.resolution or DEFAULT_RESOLUTION
    if resolution % CUSTOM.multiple:
        raise Refused(f"--resolution {resolution}: the skeleton's latents are resolution/{CUSTOM.multiple}; use a "
                      f"multiple of {CUSTOM.multiple}")
    if request.cases > len(_prompts()):
        raise Refused(f"--cases {request.cases}: the corpus template has {len(_prompts())} prompts; write more "
                      "cases into the corpus yourself")
    return sc.Workload(resolution=resolution, steps=request.steps or DEFAULT_STEPS,
                       guidance=DEFAULT_GUIDANCE if request.guidance is None else request.guidance,
                       batch=request.batch or 1, device=request.device, max_sequence_length=0)


def _prompts() -> list[str]:
    text = (sc.TEMPLATES / "custom" / "corpus_prompts.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


def corpus_cases(count: int) -> list[dict[str, Any]]:
    seeds = range(sc.FIRST_SEED, sc.FIRST_SEED + count)
    return [{"id": f"{sc.slug(p)}-s{seed}", "prompt": p, "seed": seed} for p, seed in zip(_prompts()[:count], seeds)]


def _weights(root: Path, weights: Path | None) -> str | None:
    if weights is None:
        return None
    resolved = weights.expanduser().resolve()
    if not resolved.exists():
        raise Refused(f"--weights {weights}: no such file or folder (give your model's local weights, or leave the "
                      "flag out to start with the skeleton's seeded weights)")
    entry = sc.weights_entry(root, resolved)
    if entry == sc.MUTABLE.rstrip("/") or entry.startswith(sc.MUTABLE):
        raise Refused(f"the weights {entry} are inside the mutable {sc.MUTABLE}: keep them elsewhere")
    return entry


def plan(request: sc.Request, root: Path, weights: Path | None) -> sc.Plan:
    """Everything to write, computed without touching the repository."""
    work = _workload(request)
    lane = request.lane or f"custom-{work.resolution}"
    if not sc.LANE_NAME.fullmatch(lane):
        raise Refused(f"--lane {lane!r}: use lower-case letters, digits, '.', '_' or '-' (it names the corpus file)")
    entry = _weights(root, weights)
    config = sc.config_for(CUSTOM, lane, work, entry or "")
    config["lanes"][lane]["weights"] = entry
    config["lanes"][lane]["description"] = (f"your PyTorch model at {work.resolution}x{work.resolution} "
                                            "(set up by dit-ar scaffold --custom)")
    config["fixed_paths"] = list(sc.FIXED)
    if entry and not Path(entry).is_absolute():  # the weights inside the repository are fixed (a file or a folder)
        config["fixed_paths"].append(entry if (root / entry).is_file() else entry.rstrip("/") + "/")
    clip = add_clip(config, lane, request.clip_weights, request.clip_model, root, True,  # prompts
                    sc.MUTABLE)
    cases = corpus_cases(request.cases)
    sc.set_case_budget(config, lane, len(cases))
    context = dict(family=CUSTOM, lane=lane, weights=entry or "none (the skeleton's seeded weights)",
                   target=config["target"], fixed_paths=config["fixed_paths"], corpus=f"{sc.CORPUS_DIR}/{lane}.jsonl",
                   cases=len(cases), task_metrics=config["lanes"][lane]["task_metrics"], **dataclasses.asdict(work))
    files = {str(DEFAULT_CONFIG): json.dumps(config, indent=2) + "\n", **sc.corpus_files(root, lane, cases),
             "model_under_test/__init__.py": sc.render("custom/__init__.py.j2", **context),
             "model_under_test/pipeline.py": sc.render("custom/pipeline.py.j2", **context),
             "tests/test_seam_contract.py": sc.render("custom/test_seam_contract.py.j2", **context),
             "program.md": sc.render("program.md.j2", **context), "AGENTS.md": sc.render("AGENTS.md.j2", **context)}
    return sc.Plan(root=root, family=CUSTOM, lane=lane, workload=work, files=files, clip=clip)


def scaffold_custom(request: sc.Request, weights: Path | None = None, cwd: Path | None = None,
                    out: Callable[[str], None] = print) -> int:
    root = sc.repo_root(cwd or Path.cwd())
    made = plan(request, root, weights)
    sc.check_config(made)
    written = sc.write(made, request.force)
    w = made.workload
    out(f"scaffolded lane {made.lane}: a seam skeleton for your PyTorch model, {w.resolution}x{w.resolution}, "
        f"{w.steps} steps, guidance {w.guidance:g}, batch {w.batch}, on {w.device}")
    for rel in written:
        out(f"  wrote {rel}")
    out(describe(made.clip, made.lane))
    from .doctor_budget import case_budget_lines

    for line in case_budget_lines(sc.load_config(made.root / DEFAULT_CONFIG)):
        out(line)
    out("next:")
    if weights is not None:  # baseline would refuse weights the sandboxed workers cannot read: the fix comes first
        from ..worker.sandbox import unreadable_refusal

        refusal = unreadable_refusal(weights.expanduser().resolve(), (root,))
        if refusal:
            out(f"  first: {refusal}")
    out("  edit model_under_test/pipeline.py (every REPLACE) and the corpus, then check the seam:")
    out("  pytest tests/test_seam_contract.py")
    out(f"  python -c \"import hashlib, json, pathlib; p = pathlib.Path('{sc.CORPUS_DIR}'); s = json.loads((p / "
        f"'checksums.json').read_text()); s['{made.lane}.jsonl'] = hashlib.sha256((p / '{made.lane}.jsonl')"
        ".read_bytes()).hexdigest(); (p / 'checksums.json').write_text(json.dumps(s, indent=2) + '\\n')\""
        "   # after editing the corpus")
    out('  git add -A && git commit -m "Set up dit-ar for my model"')
    out(f"  dit-ar init --tag mytag --lane {made.lane}")
    out("  dit-ar baseline")
    return 0
