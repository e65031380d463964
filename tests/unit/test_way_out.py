"""No refusal leaves the user without a way out.

Every `Refused(...)` of the shipped packages is walked (its words as the source gives them: literals, f-strings,
module constants, `cite(...)`): it names a command, an action, what is accepted instead, or carries `way_out=`.
A refusal whose words come from elsewhere is listed in DYNAMIC with where they come from, and those words are
checked here too. And the way out of a refusal that leaves a candidate commit on the branch (state/way_out.py)
is run: it leaves the commit, and the command it names brings the commit's changes back."""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass
from pathlib import Path

from dit_ar_contract.errors import ConfigError, UnknownKeyError
from pytest_dit_ar.loop.guards import selection
from pytest_dit_ar.loop.workers import memory_plan
from pytest_dit_ar.state.session import INTEGRITY_WAY_OUT
from pytest_dit_ar.state.way_out import session_way_out, unjudged
from quality_suite import classifier, clip, perceptual
from tests.helpers import sources
from tests.helpers.user_repo import user_repo

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dit_ar_contract", "pytest_dit_ar", "quality_suite", "perf_suite")
COMMAND = r"`[^`]+`"
ACTION = (r"\b(run|pass|give|set|use|start|delete|remove|restore|install|fetch|name|pick|keep|commit|rebase|squash|"
          r"wait|let|try again|check out|switch|regenerate|fix|save|rename|put|reinstall|lower|raise|write|move|"
          r"inspect|repair|take|add|copy|judge|read it with)\b")
ACCEPTED = r"\b(must be|expected|at least|between|one of|known|supported|goes with|needs a|is required)\b"
WAY_OUT = re.compile("|".join((COMMAND, ACTION, ACCEPTED)), re.IGNORECASE)

# refusals whose words are made elsewhere: (module, the argument as written) -> where the words come from
DYNAMIC = {
    ("pytest_dit_ar/plugin/session.py", "problem"): "loop/guards/selection.refusal",
    ("pytest_dit_ar/plugin/ending.py", "self.refusal"): "a refusal noted earlier, raised again with its own way out",
    ("pytest_dit_ar/plugin/session.py", "'the harness failed (not the candidate): ' + self.harness_error.splitlines()"
     "[0] + '; nothing was recorded and HEAD was kept; please report it'"): "the session's way out, added when it is "
                                                                           "printed (PluginSession.unconfigure)",
    ("pytest_dit_ar/loop/workers/launch.py", "refusal"): "worker/sandbox.unreadable_refusal ('fix: ...')",
    ("pytest_dit_ar/loop/baseline.py", "layout.reason"): "loop/workers/memory_plan.layout",
    ("pytest_dit_ar/loop/candidate.py", "layout.reason"): "loop/workers/memory_plan.layout",
    ("pytest_dit_ar/loop/speed/measurement.py", "layout.reason"): "loop/workers/memory_plan.layout",
    ("pytest_dit_ar/cli/scaffold_clip.py", "f'--clip-weights {weights}: {exc}'"): "quality_suite/clip_weights",
    ("quality_suite/clip.py", "f'clip_score is a required metric but quality.clip.weights = {weights!r} names no "
     "usable checkpoint: {exc}'"): "quality_suite/clip_weights",
    ("quality_suite/clip.py", "f'clip_score is a required metric but {problem}'"): "clip_weights.unreadable "
                                                                                    "('fix: `chmod`')",
    ("quality_suite/perceptual.py", "f'LPIPS is required (quality.lpips.required) but {backbone_file(net)} is "
     "missing.\\n{reason}'"): "perceptual.unavailable_reason",
}
# the fleet's room is edited elsewhere; these refusals reach the user through `dit-ar fleet` and the fleet's own
# way out (`dit-ar fleet status`), not walked here
ELSEWHERE = ("pytest_dit_ar/fleet/",)


@dataclass(frozen=True)
class Site:
    path: str
    line: int
    argument: str
    words: str | None  # None: made elsewhere
    has_way_out_argument: bool

    def __str__(self) -> str:
        return f"{self.path}:{self.line} Refused({self.argument[:100]})"


def words(node: ast.AST, module: object) -> str | None:
    """A refusal's words as the source gives them; '{}' for a part only known at run time, None for none."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(words(v, module) or "{}" if not isinstance(v, ast.FormattedValue) else cited(v.value)
                       for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = words(node.left, module), words(node.right, module)
        return None if left is None and right is None else (left or "{}") + (right or "{}")
    if isinstance(node, ast.Name) and isinstance(getattr(module, node.id, None), str):
        return getattr(module, node.id)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return words(node.func.value, module)
    return None


def cited(node: ast.AST) -> str:
    """`{cite('name')}` in an f-string: the command it writes."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "cite" and node.args \
            and isinstance(node.args[0], ast.Constant):
        return f"`dit-ar guide {node.args[0].value}`"
    return "{}"


def refusal_sites() -> list[Site]:
    sites = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(ELSEWHERE) or path.name == "__main__.py":
                continue
            module = importlib.import_module(rel[:-3].replace("/", ".").removesuffix(".__init__"))
            for node in sources.nodes(path):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == \
                        "Refused" and node.args:
                    sites.append(Site(rel, node.lineno, ast.unparse(node.args[0]), words(node.args[0], module),
                                      any(k.arg == "way_out" for k in node.keywords)))
    return sites


def test_every_refusal_names_a_way_out() -> None:
    sites = refusal_sites()
    assert len(sites) > 100  # the walk sees the refusals
    missing = [str(s) for s in sites if not s.has_way_out_argument and (s.path, s.argument) not in DYNAMIC
               and not (s.words is not None and WAY_OUT.search(s.words.replace("{}", " ")))]
    assert not missing, "refusals without a way out:\n" + "\n".join(missing)
    listed = {(s.path, s.argument) for s in sites}
    assert set(DYNAMIC) <= listed, f"DYNAMIC names refusals that are gone: {set(DYNAMIC) - listed}"


def test_the_words_made_elsewhere_name_a_way_out_too(tmp_path: Path) -> None:
    requests = [selection.Request("faster", "d", {}, (), frozenset(), False),
                selection.Request("exact", " ", {}, (), frozenset(), False),
                selection.Request("exact", "d", {"-k": "x"}, (), frozenset(), False),
                selection.Request("exact", "d", {}, (), frozenset(), True)]
    texts = [selection.refusal(r, (), tmp_path) for r in requests]
    texts.append(memory_plan.layout(memory_plan.MemoryBudget(1000.0, "test"), None, 5000.0).reason)
    texts += [INTEGRITY_WAY_OUT, clip.HOW_TO, classifier.HOW_TO, perceptual.unavailable_reason("alex") or "fetch"]
    texts += [str(ConfigError("c.json", "lanes.x.steps", "'twenty'", "an integer")),
              str(UnknownKeyError("c.json", "lanes.x.stepz", ["steps"]))]
    silent = [t for t in texts if not t or not WAY_OUT.search(t)]
    assert not silent, silent


def test_an_unjudged_commit_has_a_way_out_that_works(tmp_path: Path) -> None:
    user = user_repo(tmp_path)
    assert unjudged(user.root) is None and session_way_out(user.config) == ""  # HEAD is the best
    with (user.root / "model_under_test" / "pipeline.py").open("a") as f:
        f.write("\n# one idea\n")
    sha = user.commit("one idea")
    left = unjudged(user.root)
    assert left is not None and (left.head, left.best, left.commits) == (sha, user.best, 1)
    way = session_way_out(user.config)
    assert way == left.way_out and "`dit-ar experiment`" in way
    commands = re.findall(r"`(git [^`]+)`", left.set_aside)
    user.repo.git.execute(commands[0].split())  # git reset --hard <best>
    assert user.repo.head.commit.hexsha == user.best and unjudged(user.root) is None
    user.repo.git.execute(commands[-1].split())  # git cherry-pick -n <commit>: its changes back
    assert "# one idea" in (user.root / "model_under_test" / "pipeline.py").read_text()
