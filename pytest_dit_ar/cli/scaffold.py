"""`dit-ar scaffold --pipeline PATH`: set up a user's git repository around a local diffusers pipeline.

It reads the folder's `model_index.json` (`_class_name`), picks the matching family (DiT, PixArt-Alpha,
PixArt-Sigma, Stable Diffusion 3, Sana, Flux: those the installed diffusers has) and writes, from the
templates in scaffold_templates/:

* `config/autoresearch.json` with one lane for the pipeline (workload from the flags, else the pipeline's
  own defaults and configs) and the target, quality and timing contract of this project (contract.json);
* `model_under_test/` wrapping the pipeline behind the seam (build_pipeline(spec) -> generate(requests));
* a frozen corpus in `corpus/` with its checksum (class ids for DiT, a prompt set for text-to-image);
* `program.md` (what an agent may change, and the loop) and `AGENTS.md` (where an agent starts);
* `.gitignore` entries for caches.

Nothing is overwritten without `--force`; outside a git repository, or for a folder without
model_index.json, it refuses and says what to do. Then `dit-ar init`, `baseline` and `experiment` run there.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dit_ar_contract.config import DEFAULT_CONFIG, load_config
from dit_ar_contract.errors import Refused

from .scaffold_clip import add_clip, describe
from .scaffold_files import (
    CORPUS_DIR,
    DEFAULT_CASES,
    DEVICE,
    FIRST_SEED,
    LANE_NAME,
    MUTABLE,
    TEMPLATES,
    Family,
    Plan,
    Request,
    Workload,
    check_config,
    config_for,
    corpus_files,
    read_json_file,
    render,
    repo_root,
    set_case_budget,
    slug,
    weights_entry,
    write,
)

FAMILIES = (
    Family("DiTPipeline", "dit", "ClassConditional", 32, 8, 16, 50, 4.0, cuda_dtype="float32"),
    Family("PixArtAlphaPipeline", "pixart-alpha", "TextToImage", 128, 8, 16, 20, 4.5, 120),
    Family("PixArtSigmaPipeline", "pixart-sigma", "TextToImage", 128, 8, 16, 20, 4.5, 300),
    Family("StableDiffusion3Pipeline", "sd3", "TextToImage", 128, 8, 16, 28, 7.0, 256),
    Family("SanaPipeline", "sana", "TextToImage", 32, 32, 32, 20, 4.5, 300),
    Family("FluxPipeline", "flux", "TextToImage", 128, 8, 16, 28, 3.5, 512),
)


# -- reading the pipeline -----------------------------------------------------------------------------
def supported_families() -> tuple[Family, ...]:
    """The families whose pipeline class the installed diffusers has."""
    import diffusers

    names = set(dir(diffusers))
    return tuple(f for f in FAMILIES if f.class_name in names)


def pipeline_family(folder: Path) -> Family:
    """The family of the pipeline saved in `folder`, refusing a folder or class the scaffold cannot use."""
    index = folder / "model_index.json"
    if not index.is_file():
        raise Refused(f"{folder} has no model_index.json: --pipeline must name a local diffusers pipeline folder "
                      "(the one `pipeline.save_pretrained(PATH)` writes; nothing is downloaded)")
    class_name = read_json_file(index).get("_class_name")
    supported = supported_families()
    for family in supported:
        if family.class_name == class_name:
            return family
    raise Refused(f"{index}: pipeline class {class_name!r} is not supported; supported with the installed "
                  f"diffusers: {', '.join(f.class_name for f in supported)}")


def _vae_factor(folder: Path, family: Family) -> int:
    vae = read_json_file(folder / "vae" / "config.json")
    channels = vae.get("block_out_channels") or vae.get("encoder_block_out_channels")
    return 2 ** (len(channels) - 1) if isinstance(channels, list) and channels else family.vae_factor


def native_resolution(folder: Path, family: Family) -> int:
    """The picture side the transformer was configured for (its latent side times the VAE's down-sampling)."""
    size = read_json_file(folder / "transformer" / "config.json").get("sample_size")
    latent = size if isinstance(size, int) and size > 0 else family.sample_size
    return latent * _vae_factor(folder, family)


def call_defaults(family: Family) -> tuple[int, float, int]:
    """Steps, guidance and prompt length the class's __call__ uses by default (the table's when unreadable)."""
    try:
        import diffusers

        params = inspect.signature(getattr(diffusers, family.class_name).__call__).parameters
    except Exception:  # an import problem of one pipeline module: the table's values serve
        return family.steps, family.guidance, family.max_sequence_length

    def default(name: str, fallback: Any) -> Any:
        value = params[name].default if name in params else inspect.Parameter.empty
        return fallback if value is inspect.Parameter.empty or value is None else value

    return (int(default("num_inference_steps", family.steps)), float(default("guidance_scale", family.guidance)),
            int(default("max_sequence_length", family.max_sequence_length)))


def workload_for(request: Request, folder: Path, family: Family) -> Workload:
    """Flags first, then the folder's configs and the class's defaults; the resolution checked."""
    if not DEVICE.fullmatch(request.device):
        raise Refused(f"--device {request.device!r}: use cuda, cuda:N or cpu")
    for name, value in (("resolution", request.resolution), ("steps", request.steps), ("batch", request.batch),
                        ("cases", request.cases)):
        if value is not None and value < 1:
            raise Refused(f"--{name} must be at least 1, got {value}")
    steps, guidance, max_tokens = call_defaults(family)
    resolution = request.resolution or native_resolution(folder, family)
    if resolution % family.multiple:
        raise Refused(f"--resolution {resolution}: {family.class_name} needs a multiple of {family.multiple}")
    return Workload(resolution=resolution, steps=request.steps or steps,
                    guidance=guidance if request.guidance is None else request.guidance,
                    batch=request.batch or 1, device=request.device, max_sequence_length=max_tokens)


# -- the corpus ------------------------------------------------------------------------------------------
def corpus_cases(family: Family, folder: Path, count: int) -> list[dict[str, Any]]:
    """Frozen cases: for DiT evenly spread class ids, for text-to-image the project's prompt set."""
    seeds = range(FIRST_SEED, FIRST_SEED + count)
    if not family.text_to_image:
        classes = read_json_file(folder / "transformer" / "config.json").get("num_embeds_ada_norm") or 1000
        labels = [(i * int(classes)) // count for i in range(count)]
        return [{"id": f"class{label}-s{seed}", "prompt": f"class {label}", "seed": seed, "label": label}
                for label, seed in zip(labels, seeds)]
    prompts = [line.strip() for line in (TEMPLATES / "text_prompts.txt").read_text(encoding="utf-8").splitlines()
               if line.strip()]
    if count > len(prompts):
        raise Refused(f"--cases {count}: the prompt set has {len(prompts)} prompts")
    return [{"id": f"{slug(prompt)}-s{seed}", "prompt": prompt, "seed": seed}
            for prompt, seed in zip(prompts[:count], seeds)]


# -- the plan ------------------------------------------------------------------------------------------
def plan(request: Request, root: Path) -> Plan:
    """Everything to write, computed without touching the repository."""
    folder = request.pipeline.expanduser().resolve()
    if not folder.is_dir():
        raise Refused(f"--pipeline {request.pipeline}: no such folder (give the path of a local diffusers "
                      "pipeline folder, the one `pipeline.save_pretrained(PATH)` writes)")
    family = pipeline_family(folder)
    work = workload_for(request, folder, family)
    lane = request.lane or f"{family.key}-{work.resolution}"
    if not LANE_NAME.fullmatch(lane):
        raise Refused(f"--lane {lane!r}: use lower-case letters, digits, '.', '_' or '-' (it names the corpus file)")
    weights = weights_entry(root, folder)
    if weights == MUTABLE.rstrip("/") or weights.startswith(MUTABLE):
        raise Refused(f"the pipeline folder {weights} is inside the mutable {MUTABLE}: keep the weights elsewhere")
    config = config_for(family, lane, work, weights)
    clip = add_clip(config, lane, request.clip_weights, request.clip_model, root, family.text_to_image,
                    MUTABLE)
    cases = corpus_cases(family, folder, request.cases)
    set_case_budget(config, lane, len(cases))
    context = dict(family=family, lane=lane, weights=weights, target=config["target"],
                   fixed_paths=config["fixed_paths"], corpus=f"{CORPUS_DIR}/{lane}.jsonl", cases=len(cases),
                   task_metrics=config["lanes"][lane]["task_metrics"], **dataclasses.asdict(work))
    files = {str(DEFAULT_CONFIG): json.dumps(config, indent=2) + "\n", **corpus_files(root, lane, cases),
             "model_under_test/__init__.py": render("model/__init__.py.j2", **context),
             "model_under_test/pipeline.py": render(family.template, **context),
             "program.md": render("program.md.j2", **context), "AGENTS.md": render("AGENTS.md.j2", **context)}
    return Plan(root=root, family=family, lane=lane, workload=work, files=files, clip=clip)


def scaffold(request: Request, cwd: Path | None = None, out: Callable[[str], None] = print) -> int:
    """Plan, check and write; print what was written and what to run next."""
    root = repo_root(cwd or Path.cwd())
    made = plan(request, root)
    check_config(made)
    written = write(made, request.force)
    w = made.workload
    out(f"scaffolded lane {made.lane}: {made.family.class_name}, {w.resolution}x{w.resolution}, {w.steps} steps, "
        f"guidance {w.guidance:g}, batch {w.batch}, on {w.device}")
    for rel in written:
        out(f"  wrote {rel}")
    if made.family.text_to_image:
        out(describe(made.clip, made.lane))
    from .doctor_budget import case_budget_lines

    for line in case_budget_lines(load_config(made.root / DEFAULT_CONFIG)):
        out(line)
    out("next:")
    from ..worker.sandbox import unreadable_refusal

    refusal = unreadable_refusal(request.pipeline.expanduser().resolve(), (root,))
    if refusal:  # baseline would refuse: say it now, with the fix as the first step
        out(f"  first: {refusal}")
    out(f'  git add -A && git commit -m "Set up dit-ar for {made.family.class_name}"')
    out(f"  dit-ar init --tag mytag --lane {made.lane}")
    out("  dit-ar baseline")
    return 0


# -- the verb ----------------------------------------------------------------------------------------------
def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "scaffold", help="set up this git repository around a local diffusers pipeline, or any PyTorch model "
                         "(--custom): config, model, corpus",
        description="Write config/autoresearch.json, model_under_test/, a frozen corpus, program.md and AGENTS.md "
                    "for the diffusers pipeline folder PATH, in the git repository around the current folder.")
    parser.add_argument("--pipeline", type=Path, metavar="PATH",
                        help="a local diffusers pipeline folder (with model_index.json)")
    parser.add_argument("--custom", action="store_true",
                        help="any PyTorch model without a diffusers pipeline: a working seam skeleton, a corpus "
                             "template and the seam's contract test (tests/test_seam_contract.py)")
    parser.add_argument("--weights", type=Path, metavar="PATH",
                        help="with --custom: your model's local weights (default: the skeleton's seeded weights)")
    parser.add_argument("--lane", help="lane name (default: the family and resolution, e.g. pixart-sigma-1024)")
    parser.add_argument("--resolution", type=int, help="picture side in pixels (default: the transformer's)")
    parser.add_argument("--steps", type=int, help="sampling steps (default: the pipeline's)")
    parser.add_argument("--guidance", type=float, help="guidance scale (default: the pipeline's)")
    parser.add_argument("--batch", type=int, help="images per generate (default 1)")
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu for a CPU lane")
    parser.add_argument("--cases", type=int, default=DEFAULT_CASES,
                        help=f"cases in the frozen corpus (default {DEFAULT_CASES})")
    parser.add_argument("--clip-weights", type=Path, metavar="PATH",
                        help="open_clip weights for the clip_score task metric of a text-to-image lane: a checkpoint "
                             "file, a folder holding one, or a Hugging Face hub cache folder (nothing is downloaded)")
    parser.add_argument("--clip-model", metavar="NAME",
                        help="with --clip-weights: the open_clip architecture (e.g. ViT-B-32; default: what the "
                             "weights' folder or hub repository says)")
    parser.add_argument("--force", action="store_true", help="overwrite files that exist already")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    if bool(args.custom) == (args.pipeline is not None):
        raise Refused("give exactly one of --pipeline PATH (a local diffusers pipeline folder) and --custom (any "
                      "PyTorch model: a seam skeleton to fill in)")
    if args.weights is not None and not args.custom:
        raise Refused("--weights goes with --custom; a diffusers pipeline folder carries its own weights")
    if args.clip_model is not None and args.clip_weights is None:
        raise Refused("--clip-model goes with --clip-weights PATH (the open_clip weights it names the architecture of)")
    request = Request(pipeline=args.pipeline or Path(), lane=args.lane, resolution=args.resolution, steps=args.steps,
                      guidance=args.guidance, batch=args.batch, device=args.device, cases=args.cases,
                      force=args.force, clip_weights=args.clip_weights, clip_model=args.clip_model)
    if args.custom:
        from .scaffold_custom import scaffold_custom

        return scaffold_custom(request, args.weights)
    return scaffold(request)
