"""A fresh user's repository, the mistakes a first user makes, and the way out of each (docs/guide/your-own-model.md).

The harness comes from the wheel, installed into a fresh virtual environment (tests/helpers/venv.py); the project is
a tiny PixArt-Sigma saved with save_pretrained on a CPU lane, judged on CLIP scores from a tiny open_clip model with
seeded random weights in a hub cache folder (tests/helpers/tiny_clip.py; nothing is downloaded). In order:

* the scaffold names this machine's CPU as the target of a CPU lane, and `doctor` lists the lane's own metric;
* a commit that deletes a corpus case: DISCARD-SCOPE, reset, its reason once, the way back, no pytest banner;
* a refusal that leaves a candidate commit (a dirty tree): its line and its way out, nothing else; `status` and
  `recover` say the same; the printed `git reset --hard <best>` leaves the commit;
* a quantization candidate: a verdict, and after a discard the branch back on the best; or a refusal of the
  quality tests' own, with its way out, which leaves the commit;
* a keep, then a new session on the same baseline commit: the first session's stored outputs are "not reusable
  here (another session's key)", never "tampered";
* `dit-ar case ID`: the seed this session gives a case, not the number in its id, and its image.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import git as gitpython
import pytest

from pytest_dit_ar.loop.speed.patching import SLEEP_WRAPPER, wrap_build
from pytest_dit_ar.worker import sandbox
from tests.helpers.loop import DELAY_LINE, FAST_PERF
from tests.helpers.tiny_clip import hub_cache
from tests.helpers.tiny_pipelines import save_tiny
from tests.helpers.venv import Venv, build_wheel, make_venv

pytestmark = [pytest.mark.extended, pytest.mark.slow]
INT8 = wrap_build("int8", """
import torch
pipe = _build_int8(spec)
torch.ao.quantization.quantize_dynamic(pipe.pipe.transformer, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
return pipe
""")


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    base = tmp_path_factory.mktemp("own-model")
    return make_venv(base / "venv", str(build_wheel(base / "dist")))


def commit_all(repo: Path, message: str) -> str:
    r = gitpython.Repo(repo)
    r.git.add("-A")
    r.git.commit("-qm", message)
    return r.head.commit.hexsha


def head(repo: Path) -> str:
    return gitpython.Repo(repo).head.commit.hexsha


def experiment(venv: Venv, repo: Path, cls: str, what: str, expect: int | None) -> list[str]:
    proc = venv.dit_ar(repo, "experiment", "--classification", cls, "--description", what, expect=expect)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout.rstrip().splitlines()


def scaffolded(venv: Venv, tmp_path: Path) -> Path:
    repo = tmp_path / "my-t2i"
    gitpython.Repo.init(repo).git.config("user.email", "tests@example.invalid")
    gitpython.Repo(repo).git.config("user.name", "dit-ar tests")
    pipeline = save_tiny("PixArtSigmaPipeline", repo / "weights" / "tiny")
    hub_cache(tmp_path / "clip-cache")
    commit_all(repo, "a tiny PixArt-Sigma")
    venv.dit_ar(repo, "scaffold", "--pipeline", "weights/tiny", "--device", "cpu", "--steps", "2", "--cases", "4",
                "--clip-weights", str(tmp_path / "clip-cache"))
    config_path = repo / "config" / "autoresearch.json"
    config = json.loads(config_path.read_text())
    assert config["target"]["device"] == "cpu" and "A5500" not in (repo / "program.md").read_text()
    lane = config["default_lane"]
    config["lanes"][lane]["performance"] = FAST_PERF
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    init = repo / "model_under_test" / "__init__.py"
    init.write_text(init.read_text() + SLEEP_WRAPPER.format(delay=0.3))  # a cost a later candidate removes
    if sandbox.privileged():  # save_pretrained writes 0600 files; the workers run as nobody
        subprocess.run(["chmod", "-R", "a+rX", str(pipeline.resolve())], check=True)
    commit_all(repo, "Set up dit-ar")
    return repo


def test_a_users_mistakes_each_end_with_a_way_out(venv: Venv, tmp_path: Path) -> None:
    repo = scaffolded(venv, tmp_path)
    doctor = venv.dit_ar(repo, "doctor").stdout
    assert "target: " in doctor and "a CPU (target.device cpu)" in doctor and "A5500" not in doctor
    assert "  clip_score: usable" in doctor and "other metrics (not for this lane): judge_accuracy" in doctor
    assert "  judge_accuracy:" not in doctor
    assert venv.dit_ar(repo, "guide", "your-own-model").stdout.startswith("# Use it on your own model")
    venv.dit_ar(repo, "init", "--tag", "first")
    venv.dit_ar(repo, "baseline", "--quiet")
    baseline = best = head(repo)
    corpus = next((repo / "corpus").glob("*.jsonl"))

    # a commit that deletes a corpus case: discarded on scope, not refused
    corpus.write_text("".join(corpus.read_text().splitlines(keepends=True)[:-1]))
    dropped = commit_all(repo, "drop a case")
    lines = experiment(venv, repo, "exact", "drop a case", expect=1)
    out = "\n".join(lines)
    assert lines[-1] == "VERDICT: DISCARD-SCOPE" and head(repo) == best, out
    assert "test session starts" not in out and out.count(f"corpus/{corpus.name}") == 1, out
    assert f"`git cherry-pick -n {dropped[:10]}`" in out and "REFUSED" not in out
    assert "HEAD is the best" in venv.dit_ar(repo, "status").stdout

    # a refusal that leaves a candidate commit: its line and its way out, nothing else
    with (repo / "model_under_test" / "pipeline.py").open("a") as f:
        f.write("\n# a comment: the same program\n")
    comment = commit_all(repo, "a comment")
    (repo / "scratch.txt").write_text("left over\n")
    lines = experiment(venv, repo, "exact", "a comment", expect=2)
    assert len(lines) == 2 and lines[0].startswith("REFUSED: the working tree is not clean"), lines
    set_aside = f"`git reset --hard {best[:10]}`"
    assert lines[1].startswith("way out: ") and set_aside in lines[1] and "`dit-ar experiment`" in lines[1], lines
    status = venv.dit_ar(repo, "status").stdout
    assert "not judged yet" in status and set_aside in status, status
    assert set_aside in venv.dit_ar(repo, "recover", expect=2).stderr  # refused (the dirty tree), with the way out
    (repo / "scratch.txt").unlink()
    recover = venv.dit_ar(repo, "recover").stdout
    assert "not judged yet" in recover and set_aside in recover and head(repo) == comment, recover
    gitpython.Repo(repo).git.execute(["git", "reset", "--hard", best[:10]])  # the printed way out
    assert head(repo) == best

    # a quantization candidate: a verdict (after a discard the branch is back on the best, the way back printed), or
    # a refusal of the quality tests' own: its line, then its way out, which leaves the commit
    with (repo / "model_under_test" / "__init__.py").open("a") as f:
        f.write(INT8)
    int8 = commit_all(repo, "dynamic int8 quantization of the transformer's Linear layers")
    lines = experiment(venv, repo, "quantization", "int8 Linear", expect=None)
    out = "\n".join(lines)
    if lines[-1].startswith("VERDICT: ") and lines[-1] != "VERDICT: KEEP":
        assert head(repo) == best and "`git cherry-pick -n" in out, out
    elif not lines[-1].startswith("VERDICT: "):
        assert lines[-2].startswith("REFUSED: ") and lines[-1].startswith("way out: ") and head(repo) == int8, out
        assert set_aside in lines[-1] and "tampered" not in out, out
        gitpython.Repo(repo).git.execute(["git", "reset", "--hard", best[:10]])  # the printed way out
    best = head(repo)

    # a keep (the sleep removed), whose outputs the harness stores for the next experiments
    init = repo / "model_under_test" / "__init__.py"
    init.write_text("\n".join(f"{DELAY_LINE}0.0" if line.startswith(DELAY_LINE) else line
                              for line in init.read_text().splitlines()) + "\n")
    kept = commit_all(repo, "drop the sleep before generate")
    lines = experiment(venv, repo, "exact", "drop the sleep", expect=0)
    assert lines[-1] == "VERDICT: KEEP" and head(repo) == kept, "\n".join(lines[-30:])
    assert list((repo / ".autoresearch" / "best-outputs").glob("*.pt"))

    # a new session on the same baseline commit: the stored outputs are another session's, not tampered
    case_id = json.loads(corpus.read_text().splitlines()[0])["id"]
    first_seed = seed_of(venv.dit_ar(repo, "case", case_id, "--baseline").stdout)
    gitpython.Repo(repo).git.checkout("-q", baseline)
    venv.dit_ar(repo, "init", "--tag", "second")
    venv.dit_ar(repo, "baseline", "--quiet")
    gitpython.Repo(repo).git.cherry_pick(kept)
    lines = experiment(venv, repo, "exact", "drop the sleep, again", expect=None)
    out = "\n".join(lines)
    assert lines[-1].startswith("VERDICT: ") and "tampered" not in out, out
    assert "another session's key" in out, out

    # one case by hand: this session's seed (not the number in its id), and its image
    shown = venv.dit_ar(repo, "case", case_id).stdout
    seed, corpus_seed = seed_of(shown), int(re.search(r"corpus seed (\d+)", shown).group(1))
    assert seed not in (corpus_seed, first_seed) and f"s{corpus_seed}" in case_id
    png = Path(re.search(r"image: (\S+\.png)", shown).group(1))
    assert png.is_file() and png.stat().st_size > 0 and ".autoresearch/cases/" in png.as_posix()


def seed_of(text: str) -> int:
    return int(re.search(r"seed: (\d+) in this session", text).group(1))
