"""Generate the CFG-parallel candidate patch against the unmodified model_under_test/ of a clean checkout.

Usage: python make_patch.py CLEAN_CHECKOUT OUT_DIR   (the checkout's model_under_test/ is reset afterwards)

The patch adds model_under_test/cfg_parallel.py (a copy of this folder's cfg_parallel.py) and two edits to
model_under_test/pipeline.py: the end of ClassConditionalPipeline.__init__ starts the helper, and the guided
branch of generate() gets a CFG-parallel case in front of the existing one. The guided lines themselves stay
as they are, so the patch also applies on top of examples/h200-session/patches/01-exact-batch-cfg.patch.
"""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

NAME = "cfg-parallel.patch"
SUBJECT = "CFG-parallel: the unconditional half of classifier-free guidance on the lane's second GPU"

HELPER_START = '''\
        # CFG-parallel (examples/cfg-parallel): the unconditional half of guidance runs on the lane's second GPU in
        # a helper process started here, once; on the CPU only where options.cfg_parallel asks for it (gloo trials)
        self.cfg_parallel = None
        options = self.spec.get("options") or {}
        if self.guidance > 1.0 and (self.device.type == "cuda" or options.get("cfg_parallel")):
            from . import cfg_parallel

            if not cfg_parallel.in_helper():  # the helper builds this pipeline too, without a helper of its own
                if self.device.type == "cuda" and int(self.spec.get("gpus") or 1) < 2:
                    raise RuntimeError('CFG-parallel needs a lane with "gpus": 2; this worker sees one GPU')
                self.cfg_parallel = cfg_parallel.CFGParallel(
                    cfg_parallel.PipelineFromSpec(self.spec), self.transformer, device=self.device,
                    helper_device=options.get("cfg_parallel_device"))
'''

GUIDED_OLD = '''\
                if self.guidance > 1.0:
                    # classifier-free guidance: a conditional and an unconditional pass
'''
GUIDED_NEW = '''\
                if self.guidance > 1.0 and self.cfg_parallel is not None:
                    # the conditional pass here while the helper runs the unconditional one on its own device
                    eps = self.cfg_parallel.guided_eps(
                        model_input, t, lambda x, t=t: self.predict_noise(x, t, labels), self.guidance)
                elif self.guidance > 1.0:
                    # classifier-free guidance: a conditional and an unconditional pass
'''

INIT_END = '''\
                    f"but the transformer was built for {cfg.sample_size}x{cfg.sample_size}"
                )
'''


def main(root: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout

    if git("status", "--porcelain", "--", "model_under_test"):
        sys.exit(f"{root}/model_under_test has uncommitted changes; use a clean checkout (this script resets it)")

    def edit(path: pathlib.Path, old: str, new: str) -> None:
        text = path.read_text()
        assert text.count(old) == 1, (path, old)  # fails loudly when the baseline moved
        path.write_text(text.replace(old, new))

    pipeline = root / "model_under_test/pipeline.py"
    shutil.copyfile(pathlib.Path(__file__).with_name("cfg_parallel.py"), root / "model_under_test/cfg_parallel.py")
    edit(pipeline, INIT_END, INIT_END + HELPER_START)
    edit(pipeline, GUIDED_OLD, GUIDED_NEW)
    try:
        git("add", "-A", "model_under_test")
        diff = git("diff", "--cached", "-U1", "--", "model_under_test")  # 1 line of context, as the H200 series
        assert diff
        out.mkdir(parents=True, exist_ok=True)
        target = out / NAME
        target.write_text(f"Subject: {SUBJECT}\n\n{diff}")
    finally:
        git("reset", "-q", "--hard")
        git("clean", "-qfd", "--", "model_under_test")
    return target


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python make_patch.py CLEAN_CHECKOUT OUT_DIR")
    print(main(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])))
