"""Write the candidates of `dit-ar demo` as patch files, each against the unmodified model_under_test/.

    python -m lab.tools.make_demo_patches        # -> pytest_dit_ar/cli/demo_patches/*.patch

Each patch has one line of context, so any subset applies in order: the demo keeps some candidates and
resets others, and every later one must still apply (tests/unit/test_demo_patches.py checks every combination).
The header lines (Subject, Classification, Expect) are read by the demo; `git apply` skips them.
Run it again whenever model_under_test/ changes; it refuses when a candidate no longer fits.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "pytest_dit_ar" / "cli" / "demo_patches"
PIPELINE = "model_under_test/pipeline.py"
EMBEDDED = "model_under_test/embedded.py"
STEP = ("                    eps = self.predict_noise(model_input, t, labels)\n"
        "                latents = self.scheduler.step(eps, t, latents).prev_sample\n")
LOAD = "    transformer, scheduler, vae = load_class_conditional_folder(spec, need_vae=False)\n"


@dataclass(frozen=True)
class Edit:
    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Candidate:
    name: str
    subject: str
    classification: str
    expect: str
    edits: tuple[Edit, ...]


CANDIDATES = (
    Candidate("01-exact-batch-cfg", "run the two classifier-free guidance passes as one batched forward", "exact",
              "an exact speedup: expected KEEP",
              (Edit(PIPELINE, "                    eps_cond = self.predict_noise(model_input, t, labels)\n"
                              "                    eps_uncond = self.predict_noise(model_input, t, null)\n",
                    "                    both = self.predict_noise(torch.cat([model_input, model_input]), t, "
                    "torch.cat([labels, null]))\n"
                    "                    eps_cond, eps_uncond = both.chunk(2)\n"),)),
    Candidate("02-approximate-half-steps", "halve the number of sampling steps", "approximate",
              "fewer denoiser evaluations: the approximate gate (task quality within a margin)",
              (Edit(PIPELINE, "        self.steps = int(steps)\n", "        self.steps = max(1, int(steps) // 2)\n"),)),
    Candidate("03-numerical-int8-dynamic", "dynamic int8 quantization of every Linear",
              "numerical", "the audit raises the class to quantization; its tolerance claim: each task score within "
              "its resolution and no case beyond tau_q, against the baseline and the parent",
              (Edit(EMBEDDED, "from __future__ import annotations\n\n",
                    "from __future__ import annotations\n\nimport torch\n\n"),
               Edit(EMBEDDED, LOAD, LOAD + "    transformer = torch.ao.quantization.quantize_dynamic(\n"
                                           "        transformer.float(), {torch.nn.Linear}, dtype=torch.qint8)\n"))),
    Candidate("04-exact-wasted-pass", "evaluate one extra denoiser pass per step (slower)", "exact",
              "a slower change: expected DISCARD-PERFORMANCE",
              (Edit(PIPELINE, STEP, STEP.replace("                latents", "                self.predict_noise("
                                                 "model_input, t, labels)  # computed and thrown away\n"
                                                 "                latents")),)),
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def patch_text(repo: Path, cand: Candidate) -> str:
    for edit in cand.edits:
        path = repo / edit.path
        text = path.read_text()
        if text.count(edit.old) != 1:
            sys.exit(f"{cand.name}: {edit.path} no longer contains the text this candidate edits exactly once")
        path.write_text(text.replace(edit.old, edit.new))
    diff = git(repo, "diff", "-U1", "--", "model_under_test")
    git(repo, "checkout", "-q", "--", "model_under_test")
    return f"Subject: {cand.subject}\nClassification: {cand.classification}\nExpect: {cand.expect}\n\n{diff}"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        shutil.copytree(ROOT / "model_under_test", repo / "model_under_test",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        git(repo, "init", "-q")
        git(repo, "add", "-A")
        git(repo, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "baseline")
        OUT.mkdir(parents=True, exist_ok=True)
        for old in OUT.glob("*.patch"):
            old.unlink()
        for cand in CANDIDATES:
            (OUT / f"{cand.name}.patch").write_text(patch_text(repo, cand))
    print(f"wrote {len(CANDIDATES)} patches to {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
