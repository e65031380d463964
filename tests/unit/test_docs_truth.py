"""The docs say only what the code has: config keys, lanes, verbs, flags, quoted config numbers, retired terms.

Read from the code, so that a verb, flag or key added later is known without editing this file:

* config keys from the dataclasses of `dit_ar_contract/config.py` (`TOP_KEYS` and the field types);
* lanes and their values from `config/autoresearch.json` through `load_config` (lanes merged with the
  top-level `performance` and `quality`, so the dataclass defaults count too);
* verbs and flags from `pytest_dit_ar.cli.main.build_parser()`, the plugin's `--dit-ar-*` options from
  `pytest_dit_ar/plugin/`.

Checked in README.md, program.md, SKILL.md, AGENTS.md, docs/ and handbook/ (prose and code spans outside
fenced blocks, except where a check says otherwise). Commands written out in full are parsed by
tests/unit/test_docs_commands.py and local paths resolved by tests/unit/test_links.py; this file adds the
names and numbers those do not see, and the paths test_links does not: every repository path README.md,
program.md, docs/design/ and docs/guide/ name, in fenced blocks too and written from a package's folder
(`loop/speed/pairs.py`), exists.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fnmatch
import glob
import io
import os
import re
import sys
import typing
from collections.abc import Mapping
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dit_ar_contract import config as C  # noqa: E402
from tests.unit.test_docs_commands import DOCS as PARSED_ELSEWHERE  # noqa: E402
from tests.unit.test_docs_commands import _split, extract_commands  # noqa: E402
from tests.unit.test_links import _SUFFIX as _PATH_SUFFIX  # noqa: E402
from tests.unit.test_links import DOC_FILES, TOP, _expand_braces, _prose_lines  # noqa: E402

_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")

# Every verb, its options and exit codes: one table, in the commands guide.
COMMANDS_GUIDE = ROOT / "docs" / "guide" / "commands.md"


# -- what the code has ----------------------------------------------------------------------------------
@cache
def config() -> C.Config:
    return C.load_config(ROOT / "config" / "autoresearch.json")


def _dataclass_of(hint) -> type | None:
    for arg in (hint, *typing.get_args(hint)):
        if dataclasses.is_dataclass(arg):
            return arg
        if typing.get_origin(arg) in (Mapping, dict):
            return _dataclass_of(typing.get_args(arg)[1])
    return None


@cache
def schema() -> dict[str, object]:
    """The config's key tree: {key: subtree or None}; a Mapping node (lanes, task_margin) is '*'."""

    def tree(cls: type) -> dict[str, object]:
        hints = typing.get_type_hints(cls)
        out: dict[str, object] = {}
        for f in dataclasses.fields(cls):
            hint, sub = hints[f.name], _dataclass_of(hints[f.name])
            if typing.get_origin(hint) in (Mapping, dict):
                out[f.name] = {"*": tree(sub)} if sub else "*"
            else:
                out[f.name] = tree(sub) if sub else None
        return out

    config_hints = typing.get_type_hints(C.Config)
    lane_hints = typing.get_type_hints(C.Lane)
    top: dict[str, object] = {}
    for key in C.TOP_KEYS:
        hint = config_hints.get(key, lane_hints.get(key))
        sub = _dataclass_of(hint) if hint is not None else None
        if key == "lanes":
            lane = tree(C.Lane)
            lane.pop("name", None)  # the lane's key, not a field in the file
            top[key] = {"*": lane}
        else:
            top[key] = tree(sub) if sub else None
    return top


def _keys(node, out: set[str]) -> set[str]:
    if isinstance(node, dict):
        for key, sub in node.items():
            if key != "*":
                out.add(key)
            _keys(sub, out)
    return out


@cache
def config_keys() -> frozenset[str]:
    return frozenset(_keys(schema(), set()))


@cache
def key_suffixes() -> frozenset[str]:
    """The last word of every multi-word key (`pct`, `gb`, `rounds`, `segments`, ...): a span ending in one
    of them reads as a config key."""
    return frozenset(k.rsplit("_", 1)[1] for k in config_keys() if "_" in k)


def looks_like_key(word: str) -> bool:
    return bool(_SNAKE.match(word)) and word.rsplit("_", 1)[1] in key_suffixes()


def _sections(node, out: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Every named subtree (target, performance, guardrails, approximate, lpips, ...), for dotted spans."""
    if isinstance(node, dict):
        for key, sub in node.items():
            if isinstance(sub, dict):
                if key != "*":
                    out.setdefault(key, []).append(sub)
                _sections(sub, out)
    return out


@cache
def sections() -> dict[str, list[dict]]:
    return _sections(schema(), {})


def resolves(dotted: str) -> bool:
    """Whether `a.b.c` is a path in the config, starting at the top or at any named section."""
    parts = dotted.split(".")
    starts = [schema()] + sections().get(parts[0], [])
    for start in starts:
        node, rest = start, parts if start is schema() else parts[1:]
        ok = True
        for part in rest:
            if node == "*":
                break  # a free mapping (task_margin.<name>)
            if not isinstance(node, dict):
                ok = False
                break
            if part in node:
                node = node[part]
            elif "*" in node and (part in config().lanes or part.startswith("<")):
                node = node["*"]
            else:
                ok = False
                break
        if ok:
            return True
    return False


@cache
def parser() -> argparse.ArgumentParser:
    from pytest_dit_ar.cli.main import build_parser

    return build_parser()


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def verbs() -> dict[str, argparse.ArgumentParser]:
    return _subparsers(parser())


def visible_flags(p: argparse.ArgumentParser) -> set[str]:
    """The long options a user is told about (help not suppressed), without --help and --config."""
    return {o for a in p._actions if a.help != argparse.SUPPRESS for o in a.option_strings
            if o.startswith("--") and o not in ("--help", "--config")}


@cache
def all_flags() -> frozenset[str]:
    out = {o for a in parser()._actions for o in a.option_strings}
    for p in verbs().values():
        for q in (p, *_subparsers(p).values()):  # `dit-ar fleet up`'s flags too
            out |= {o for a in q._actions for o in a.option_strings}
    return frozenset(out)


@cache
def plugin_flags() -> frozenset[str]:
    text = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "pytest_dit_ar" / "plugin").rglob("*.py"))
    return frozenset(re.findall(r"[\"'](--dit-ar-[a-z-]+)[\"']", text))


@cache
def code_words() -> frozenset[str]:
    """Every identifier-like word in the project's Python, JSON and shell files (what a span may name)."""
    words: set[str] = set()
    for pattern in ("**/*.py", "config/*.json", "**/*.sh", "pyproject.toml"):
        for path in ROOT.glob(pattern):
            if any(part.startswith(".") or part in ("data",) for part in path.relative_to(ROOT).parts[:-1]):
                continue
            if path == Path(__file__).resolve():
                continue  # this file names wrong keys on purpose
            try:
                words |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", path.read_text(encoding="utf-8")))
            except (UnicodeDecodeError, OSError):
                continue
    return frozenset(words)


# -- reading the docs -----------------------------------------------------------------------------------
def paragraphs(text: str) -> list[tuple[int, str, str]]:
    """(first line, heading chain, text) of every prose paragraph or list item outside fenced blocks."""
    out, buf, start, headings = [], [], 0, []
    prose = dict(_prose_lines(text))

    def flush():
        if buf:
            out.append((start, " / ".join(headings), " ".join(buf)))
            buf.clear()

    for number in range(1, len(text.splitlines()) + 1):
        line = prose.get(number)
        if line is None or not line.strip():
            flush()
            continue
        if line.startswith("#"):
            flush()
            level = len(line) - len(line.lstrip("#"))
            headings[level - 1:] = [line.strip("# ").strip()]
            continue
        if re.match(r"\s*([-*]|\d+\.)\s", line) or line.lstrip().startswith("|"):
            flush()
        if not buf:
            start = number
        buf.append(line.strip())
    flush()
    return out


@cache
def spans(text: str) -> tuple[str, ...]:
    return tuple(m.group(1).strip() for m in _SPAN.finditer(text))


def doc_paragraphs(doc: Path) -> list[tuple[int, str, str]]:
    return _repo_paragraphs(doc) if ROOT in doc.parents else paragraphs(doc.read_text(encoding="utf-8"))


@cache
def _repo_paragraphs(doc: Path) -> list[tuple[int, str, str]]:
    return paragraphs(doc.read_text(encoding="utf-8"))


def _rel(doc: Path) -> str:
    try:
        return doc.relative_to(ROOT).as_posix()
    except ValueError:  # a checker's own test page
        return doc.name


def _page(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    return page


# -- config keys ------------------------------------------------------------------------------------------
_DOTTED = re.compile(r"^[a-z][a-z0-9_]*(\.[<>a-z0-9_-]+)+$")
_SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)+$")
_KEY_VALUE = re.compile(r'^"?([a-z][a-z0-9_]*)"?\s*:\s*(-?[0-9.]+|true|false|null|"[^"]*"|\[.*\]|\{.*\})$')


def key_problems(doc: Path) -> list[str]:
    rel = _rel(doc)
    problems = []
    named = set(sections()) | set(C.TOP_KEYS)
    for line, _, text in doc_paragraphs(doc):
        for span in spans(text):
            span = span.rstrip(".,;")
            if _DOTTED.match(span) and span.split(".")[0] in named and not span.endswith((".py", ".md", ".json")):
                if not resolves(span):
                    problems.append(f"{rel}:{line}: `{span}` is not a key path of the config schema")
                continue
            kv = _KEY_VALUE.match(span)
            if kv and _SNAKE.match(kv.group(1)) and kv.group(1) not in config_keys():
                problems.append(f"{rel}:{line}: `{span}` names a config key the schema does not have")
                continue
            if looks_like_key(span) and span not in config_keys() and span not in code_words():
                problems.append(f"{rel}:{line}: `{span}` reads as a config key, but it is neither one nor a name "
                                "in the code")
    return problems


def test_named_config_keys_exist():
    problems = [p for doc in DOC_FILES for p in key_problems(doc)]
    assert not problems, "\n".join(problems)


def test_key_checks_catch_retired_and_misspelt_keys(tmp_path):
    assert "offset_floor_pct" in config_keys() or "offset_floor_pct" not in C.PerfProtocol.__annotations__
    assert {"rounds", "alpha", "min_segments", "gpu_count", "p95_regression_pct", "task_margin"} <= config_keys()
    assert resolves("guardrails.memory_growth_pct") and resolves("quality.approximate.task_margin.<name>")
    assert resolves("lanes.dit-xl2-256.performance.rounds") and resolves("target.gpu_count")
    assert not resolves("performance.confirm_with_fresh_workers") and not resolves("target.gpus")
    page = _page(tmp_path, "Set `confirm_with_fresh_workers: true`, `performance.roundz` and `min_improvment_pct`.\n")
    assert len(key_problems(page)) == 3, key_problems(page)


# -- lanes ------------------------------------------------------------------------------------------------
def lane_like(span: str) -> str | None:
    """The lane a span names, if it looks like one: a lane's family prefix (`dit-`, `pixart-`, `embedded-`)
    followed by more, optionally with `@device` (a foreign lane's label). Presets are not lanes."""
    name = span.split("@", 1)[0]
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", name):
        return None
    families = {lane.split("-", 1)[0] + "-" for lane in config().lanes}
    return name if name.startswith(tuple(families)) else None


@cache
def presets() -> frozenset[str]:
    text = (ROOT / "model_under_test" / "__init__.py").read_text(encoding="utf-8")
    found = re.search(r"PRESETS\s*=\s*\(([^)]*)\)", text)
    named = set(re.findall(r'"([^"]+)"', found.group(1) if found else ""))
    return frozenset({lane.preset for lane in config().lanes.values()} | named)


# Spans that look like lanes but name something else: a scaffolded lane's default name is the family and
# the resolution, which the README quotes as an example of what `scaffold` writes.
NOT_LANES = {"dit-ar", "dit-ar-research-loop"}


def lane_problems(doc: Path) -> list[str]:
    rel = _rel(doc)
    lanes, problems = set(config().lanes), []
    for line, _, text in doc_paragraphs(doc):
        named = set()
        for span in spans(text):
            name = lane_like(span)
            if not name or name in NOT_LANES or (name in presets() and name not in lanes):
                continue
            if name not in lanes:
                problems.append(f"{rel}:{line}: `{span}` looks like a lane, but the config's lanes are {sorted(lanes)}")
            named.add(name)
        if len(lanes) > 3 and len(named & lanes) == len(lanes) - 1 and "lanes" in text.lower():
            problems.append(f"{rel}:{line}: lists {sorted(named & lanes)} as the lanes; the config has "
                            f"{sorted(lanes)} (missing {sorted(lanes - named)})")
    return problems


def test_named_lanes_exist_and_lane_lists_are_complete():
    problems = [p for doc in DOC_FILES for p in lane_problems(doc)]
    assert not problems, "\n".join(problems)


# -- verbs and flags ----------------------------------------------------------------------------------------
_FLAG = re.compile(r"^(--[a-z][a-z0-9-]*)(?:[ =].*)?$")

# Flags of other tools that the docs name on their own, in a code span, and the tool they belong to.
STUDY = "python -m lab.studies.measured_study"
OTHER_TOOLS = {
    "--snapshot-update": "syrupy", "--mpl-generate-path": "pytest-mpl", "--lf": "pytest", "--deselect": "pytest",
    "--fixtures": "pytest", "--durations": "pytest", "--benchmark-skip": "pytest-benchmark",
    "--benchmark-only": "pytest-benchmark", "--benchmark-timer": "pytest-benchmark",
    "--benchmark-compare": "pytest-benchmark", "--benchmark-autosave": "pytest-benchmark",
    "--system-site-packages": "python -m venv", "--nvtx-include": "ncu", "--kernel-name-base": "ncu",
    "--clock-control": "ncu", "--capture-range": "nsys", "--clearenv": "bwrap", "--unshare-all": "bwrap",
    "--die-with-parent": "bwrap", "--new-session": "bwrap", "--ro-bind": "bwrap", "--cpu-affinity": STUDY,
    "--null-segments": STUDY, "--speedups": STUDY, "--load": STUDY, "--nulls": STUDY,
    "--segments-per-speedup": STUDY, "--deadline-s": STUDY, "--pool": STUDY,
    "--trials": STUDY, "--outdir": "python -m build", "--force-reinstall": "pip", "--no-deps": "pip",
    "--no-build-isolation": "pip", "--dev": "bwrap",
    "--dev-bind": "bwrap", "--set": "ncu", "--gres": "slurm", "--cpus-per-task": "slurm",
    "--size": "bwrap", "--cap-drop": "bwrap", "--disable-userns": "bwrap", "--seccomp": "bwrap", "--tmpfs": "bwrap",
    "--remount-ro": "bwrap", "--perms": "bwrap", "--unshare-user": "bwrap", "--no-new-privs": "setpriv",
}


def flag_problems(doc: Path) -> list[str]:
    rel = _rel(doc)
    known, problems = all_flags() | plugin_flags(), []
    for line, _, text in doc_paragraphs(doc):
        for span in spans(text):
            m = _FLAG.match(span)
            if m and m.group(1) not in known and m.group(1) not in OTHER_TOOLS:
                problems.append(f"{rel}:{line}: `{span}`: no verb of `dit-ar`, no option of the plugin and no "
                                "listed other tool has the flag " + m.group(1))
            if span.startswith("--dit-ar-") and m and m.group(1) not in plugin_flags():
                problems.append(f"{rel}:{line}: `{span}` is not an option of the pytest plugin")
    for line, cmd, _argv, args in doc_commands(doc):
        if "[" in cmd:
            continue  # a usage line with optional parts (the commands guide's table, checked below)
        if args is None:
            continue  # command_problems reports it
        lane = getattr(args, "lane", None)
        if lane and lane_like(lane) and args.verb != "scaffold" and lane not in config().lanes:
            problems.append(f"{rel}:{line}: `{cmd}` names lane {lane!r}; the config's lanes are "
                            f"{sorted(config().lanes)}")
    return problems


def test_named_flags_exist():
    problems = [p for doc in DOC_FILES for p in flag_problems(doc)]
    assert not problems, "\n".join(problems)


def doc_commands(doc: Path) -> list[tuple[int, str, list[str], argparse.Namespace | None]]:
    """(line, command, argv, parsed or None) of every dit-ar command a doc writes out."""
    if ROOT in doc.parents:
        return _repo_commands(doc)
    return _commands(doc.read_text(encoding="utf-8"))


@cache
def _repo_commands(doc: Path) -> list[tuple[int, str, list[str], argparse.Namespace | None]]:
    return _commands(doc.read_text(encoding="utf-8"))


def _commands(text: str) -> list[tuple[int, str, list[str], argparse.Namespace | None]]:
    out = []
    for line, cmd in extract_commands(text):
        argv = _split(cmd)[1:]
        out.append((line, cmd, argv, _parse(argv) if "[" not in cmd else None))
    return out


def _parse(argv: list[str]) -> argparse.Namespace | None:
    """The parsed command, a Namespace for --version and --print-completion (exit 0), None when refused."""
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            return parser().parse_args(argv)
    except SystemExit as exc:
        return argparse.Namespace(verb=None) if exc.code == 0 else None


def command_problems(doc: Path) -> list[str]:
    """A written-out command must parse; one that only names a verb and some of its flags (`dit-ar experiment
    --unsandboxed`, `dit-ar init --tag <tag>`) must name a verb and flags that exist."""
    rel, problems = _rel(doc), []
    for line, cmd, argv, args in doc_commands(doc):
        if "[" in cmd or not argv or args is not None:
            continue
        words = [a for a in argv if not a.startswith("-")]
        verb = words[0] if words else None
        if verb not in verbs():
            problems.append(f"{rel}:{line}: `{cmd}`: the CLI has no verb {verb!r} (verbs: {sorted(verbs())})")
            continue
        verb_parser = verbs()[verb]
        if len(words) > 1 and words[1] in _subparsers(verb_parser):  # `dit-ar fleet up ...`
            verb_parser, argv = _subparsers(verb_parser)[words[1]], [a for a in argv if a != words[1]]
            words = words[:1] + words[2:]
        options = {o for a in verb_parser._actions for o in a.option_strings} | {"--config"}
        bad = [a.split("=")[0] for a in argv if a.startswith("--") and a.split("=")[0] not in options]
        placeholder = any(a.startswith("<") or a.isupper() or a in ("…", "...") for a in words[1:] + argv)
        if bad:
            problems.append(f"{rel}:{line}: `{cmd}`: `dit-ar {verb}` has no option {', '.join(bad)}")
        elif len(argv) > 1 and not placeholder and not all(a.startswith("--") for a in argv[1:]):
            problems.append(f"{rel}:{line}: `{cmd}` is rejected by the CLI")
    return problems


def test_every_dit_ar_command_names_a_verb_and_flags_that_exist():
    """test_docs_commands parses program.md's and the handbook's commands; this covers the other docs."""
    problems = [p for doc in DOC_FILES if doc not in PARSED_ELSEWHERE for p in command_problems(doc)]
    assert not problems, "\n".join(problems)


def command_table_rows() -> dict[str, str]:
    text = COMMANDS_GUIDE.read_text(encoding="utf-8")
    section = text.split("| command |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"^\| `dit-ar ([a-z-]+(?: (?!-)[a-z-]+)?)([^`]*)` \|", line)  # `fleet up`: a nested verb
        if m:  # a verb may take several rows (one per mode, e.g. calibrate and calibrate --quality)
            rows[m.group(1)] = rows.get(m.group(1), "") + m.group(2)
    return rows


def table_verbs() -> dict[str, argparse.ArgumentParser]:
    """The verbs the command table has a row for: a verb with verbs of its own (`fleet`) has one row each."""
    out = {}
    for verb, p in verbs().items():
        nested = _subparsers(p)
        out.update({f"{verb} {v}": q for v, q in nested.items()} if nested else {verb: p})
    return out


def test_the_command_table_matches_the_parser():
    rows, parsed = command_table_rows(), table_verbs()
    problems = [f"the command table has no row for `dit-ar {v}`" for v in parsed if v not in rows]
    problems += [f"the command table has `dit-ar {v}`, which the CLI does not have"
                 for v in rows if v not in parsed]
    for verb, usage in rows.items():
        if verb not in parsed:
            continue
        shown = set(re.findall(r"--[a-z][a-z0-9-]*", usage))
        options = visible_flags(parsed[verb])
        problems += [f"commands guide: `dit-ar {verb}` row omits {flag}" for flag in sorted(options - shown)]
        problems += [f"commands guide: `dit-ar {verb}` row shows {flag}, which the verb does not take"
                     for flag in sorted(shown - options - {"--config"})]
    assert not problems, "\n".join(problems)


def test_the_commands_guide_says_which_verbs_take_config():
    without = sorted(v for v, p in verbs().items()
                     if "--config" not in {o for a in p._actions for o in a.option_strings})
    text = COMMANDS_GUIDE.read_text(encoding="utf-8")
    sentence = re.search(r"All verbs but ([^.]*?) take `--config PATH`", text.replace("\n", " "))
    assert sentence, f"{COMMANDS_GUIDE.name} no longer says which verbs take --config"
    named = sorted(re.findall(r"`([a-z]+)`", sentence.group(1)))
    assert named == without, f"{COMMANDS_GUIDE.name} says verbs {named} take no --config; the parser says {without}"


# -- numbers quoted from the config ---------------------------------------------------------------------
@cache
def values(key: str) -> frozenset[float]:
    """Every value `key` has in the loaded config: per lane (merged with the top level and the defaults)."""
    out: set[float] = set()
    cfg = config()
    for node in (cfg.target, *cfg.lanes.values()):
        for holder in (node, getattr(node, "performance", None), getattr(node, "guardrails", None)):
            if holder is not None and dataclasses.is_dataclass(holder) and hasattr(holder, key):
                value = getattr(holder, key)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    out.add(float(value))
        quality = getattr(node, "quality", None)
        if quality is not None:
            for gate in (quality.exact, quality.numerical, quality.approximate):
                value = getattr(gate, key, None)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    out.add(float(value))
    return frozenset(out)


_NUM = r"(\d+(?:\.\d+)?(?:e-?\d+)?)"
_KEY_NUMBER = re.compile(r"`([a-z][a-z0-9_]*)`\s*(?:\(|=\s*|:\s*)" + _NUM + r"\s*(%|\s*%|\b)")
_ALPHA = re.compile(r"(?:\balpha\b|α)\s*(?:=|of|at)?\s*" + _NUM + r"\s*(%?)")
_ROUNDS = re.compile(r"\b(\d+)(?:[- ](?:timed |paired )?rounds? per segment|-round segments?)")
_LANE_PAREN = re.compile(r"`([a-z0-9-]+)`\s*\(([^()]*)\)")
_SPAN_KEY_NUMBER = re.compile(r"^(?:[a-z0-9_-]+\.)*([a-z][a-z0-9_]*)\s*[:=]\s*" + _NUM + r"$")
_SHIPPED_ROUNDS = re.compile(r"shipped (?:`[^`]+` )?lane[^.;]*?\b(\d+) (?:timed )?rounds")

# Words that mark a paragraph as history (a protocol or setting that was, not one that is).
HISTORY_WORDS = ("supersed", "retired", "earlier", "old protocol", "no longer", "formerly", "two-block protocol",
                 "of that day", "used then", "at the time", "replaced")


def historical(*texts: str) -> bool:
    return any(word in text.lower() for text in texts for word in HISTORY_WORDS)


def number_problems(doc: Path) -> list[str]:
    rel = _rel(doc)
    problems = []
    for line, heading, text in doc_paragraphs(doc):
        history = historical(text, heading)
        for m in _KEY_NUMBER.finditer(text):
            key, number = m.group(1), float(m.group(2))
            if key in config_keys() and values(key) and number not in values(key) and not history:
                problems.append(f"{rel}:{line}: `{key}` quoted as {m.group(2)}; the config has "
                                f"{sorted(values(key))}")
        if text.lstrip().startswith("|"):
            problems += _table_row(rel, line, text)
        if history:
            continue
        for m in _ALPHA.finditer(text):
            number = float(m.group(1)) / (100 if m.group(2) else 1)
            if number not in values("alpha"):
                problems.append(f"{rel}:{line}: alpha quoted as {m.group(0).strip()}; the config has "
                                f"{sorted(values('alpha'))}")
        for span in spans(text):
            m = _SPAN_KEY_NUMBER.match(span)
            if m and m.group(1) in config_keys() and values(m.group(1)) and float(m.group(2)) not in values(m.group(1)):
                problems.append(f"{rel}:{line}: `{span}`; the config has {m.group(1)} {sorted(values(m.group(1)))}")
        for m in _SHIPPED_ROUNDS.finditer(text):
            if float(m.group(1)) not in values("rounds"):
                problems.append(f"{rel}:{line}: '{m.group(0)}'; the lanes time {sorted(values('rounds'))} rounds")
        for m in _ROUNDS.finditer(text):
            if float(m.group(1)) not in values("rounds"):
                problems.append(f"{rel}:{line}: '{m.group(0)}'; the lanes time {sorted(values('rounds'))} "
                                "rounds per segment")
        for m in _LANE_PAREN.finditer(text):
            lane = config().lanes.get(m.group(1))
            if lane is None:
                continue
            for what, attr in (("steps", "steps"), ("batch", "batch")):
                found = re.search(rf"(\d+) {what}\b|\b{what} (\d+)", m.group(2))
                if found and int(found.group(1) or found.group(2)) != getattr(lane, attr):
                    problems.append(f"{rel}:{line}: `{lane.name}` ({m.group(2)}): the lane has {attr} "
                                    f"{getattr(lane, attr)}")
    return problems


def _table_row(rel: str, line: int, row: str) -> list[str]:
    """A settings-table row: `key` (or `a` / `b`) in the first cell, its value(s) in the second."""
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    if len(cells) < 2:
        return []
    keys = re.findall(r"`([a-z][a-z0-9_]*)`", cells[0])
    if not keys or not all(k in config_keys() for k in keys) or re.sub(r"[`/ a-z0-9_]", "", cells[0]):
        return []
    value = re.sub(r"`[^`]*`", "", cells[1])
    numbers = re.findall(_NUM, value.split("(")[0])
    problems = []
    if len(keys) == len(numbers):
        for key, number in zip(keys, numbers):
            if values(key) and float(number) not in values(key):
                problems.append(f"{rel}:{line}: the table gives `{key}` as {number}; the config has "
                                f"{sorted(values(key))}")
    for number in re.findall(_NUM, " ".join(re.findall(r"\(([^)]*)\)", value))):
        if len(keys) == 1 and values(keys[0]) and float(number) not in values(keys[0]):
            problems.append(f"{rel}:{line}: the table gives `{keys[0]}` as {number}; the config has "
                            f"{sorted(values(keys[0]))}")
    return problems


def test_numbers_quoted_from_the_config_match_it():
    problems = [p for doc in DOC_FILES for p in number_problems(doc)]
    assert not problems, "\n".join(problems)


def test_number_checks_catch_stale_figures(tmp_path):
    page = ("The lane times `rounds` (20) with alpha 0.05 over 20 rounds per segment; `embedded-cpu` (CPU,\n"
            "12 steps, batch 2).\n\n| `min_segments` / `max_segments` | 2 / 9 | budget |\n\n"
            "The contract is one A5500 (`target.gpu_count: 1`); the shipped lane has 25 steps and 20 rounds.\n")
    found = number_problems(_page(tmp_path, page))
    assert len(found) == 7, found
    history = "The superseded two-block protocol timed `rounds` (20) per block at alpha 0.05.\n"
    assert number_problems(_page(tmp_path, history)) == []


def test_p95_sample_minimum_quoted_is_the_guardrails():
    """Where a page says from how many samples the p95 guardrail is judged, it is perf_suite's number."""
    from perf_suite import guardrails

    minimum = getattr(guardrails, "MIN_SAMPLES_FOR_P95", None)
    problems = []
    for doc in DOC_FILES:
        rel = doc.relative_to(ROOT).as_posix()
        for line, _, text in doc_paragraphs(doc):
            if "p95" not in text or historical(text):
                continue
            for m in re.finditer(r"(?:at least|from) (\d+) (?:timed )?(?:candidate )?(?:rounds|samples)", text):
                if minimum is None or int(m.group(1)) != minimum:
                    problems.append(f"{rel}:{line}: '{m.group(0)}' for the p95 guardrail; perf_suite/guardrails.py "
                                    f"has MIN_SAMPLES_FOR_P95 = {minimum}")
    assert not problems, "\n".join(problems)


# -- retired protocol terms --------------------------------------------------------------------------------
RETIRED = re.compile(r"wilcoxon|(?<!paired\s)bootstrap(?!_resamples)|confirming block|confirmation (?:block|result)|"
                     r"confirm_with_fresh_workers|"
                     r"second block|mann[- ]whitney")


def retired_problems(doc: Path) -> list[str]:
    rel = _rel(doc)
    return [f"{rel}:{line}: names {RETIRED.search(text.lower()).group(0)!r} as if it were the verdict; the speed "
            "verdict is the sequential test over segments (docs/design/speed-verdict.md). Mark history as superseded."
            for line, heading, text in doc_paragraphs(doc)
            if RETIRED.search(text.lower()) and not historical(text, heading)]


def test_no_page_claims_a_retired_protocol():
    problems = [p for doc in DOC_FILES for p in retired_problems(doc)]
    assert not problems, "\n".join(problems)


def test_retired_terms_are_caught_unless_marked_as_history(tmp_path):
    now = "A win must pass a paired Wilcoxon test, confirmed by a second block in fresh processes.\n"
    then = "The superseded protocol used a Wilcoxon test and a confirming block.\n"
    assert len(retired_problems(_page(tmp_path, now))) == 1
    assert retired_problems(_page(tmp_path, then)) == []
    quality = "A set metric's bound comes from a paired bootstrap over cases (`bootstrap_resamples`).\n"
    assert retired_problems(_page(tmp_path, quality)) == []


# -- repository paths ---------------------------------------------------------------------------------------
PATH_DOCS = sorted({ROOT / "README.md", ROOT / "program.md"} | set((ROOT / "docs" / "design").glob("*.md"))
                   | set((ROOT / "docs" / "guide").glob("*.md")))
# A token is a path of this repository when it has a `/` and starts with a top-level entry or a folder of the
# product's package (`loop/`, `fleet/`, `worker/`, ...), or ends like a file of ours. Another project's file is
# written as a URL (not checked).
PACKAGE_FOLDERS = frozenset(p.name for p in (ROOT / "pytest_dit_ar").iterdir() if (p / "__init__.py").is_file())
FILE_ENDINGS = (".py", ".md", ".sh", ".json")
_PATH_TOKEN = re.compile(r"(?<![\w/.~$<@%-])[A-Za-z0-9_][\w.{},*-]*/[\w./{},*:#-]*")


@cache
def repository_entries() -> frozenset[str]:
    """Every file and folder of the checkout (relative, posix), outside hidden folders and caches."""
    out = set()
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        rel = Path(folder).relative_to(ROOT).as_posix()
        prefix = "" if rel == "." else rel + "/"
        out.update(prefix + name for name in (*dirs, *files))
    return frozenset(out)


def path_like(token: str) -> bool:
    first = token.split("/", 1)[0]
    return first in TOP or first in PACKAGE_FOLDERS or token.endswith(FILE_ENDINGS)


def names_an_entry(token: str, doc: Path) -> bool:
    """Whether a path (globs and `{a,b}` allowed) exists from the root, from the doc's folder, or as the tail of
    a repository path (`fleet/work.py` is `pytest_dit_ar/fleet/work.py`)."""
    for variant in _expand_braces(token):
        variant = variant.rstrip("/")
        if any(ch in variant for ch in "*?["):
            if not (glob.glob(str(ROOT / variant)) or glob.glob(str(doc.parent / variant))
                    or fnmatch.filter(repository_entries(), "*/" + variant)):
                return False
        elif not ((ROOT / variant).exists() or (doc.parent / variant).exists()
                  or any(entry.endswith("/" + variant) for entry in repository_entries())):
            return False
    return True


def path_problems(doc: Path) -> list[str]:
    rel, problems = _rel(doc), []
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
        for m in _PATH_TOKEN.finditer(line):
            token = _PATH_SUFFIX.sub("", m.group(0).rstrip(".,;:#"))
            if "://" in line[m.start():m.end() + 3] or not path_like(token):
                continue
            if not names_an_entry(token, doc):
                problems.append(f"{rel}:{number}: `{token}` names no file or folder of the repository")
    return problems


def test_every_repository_path_the_docs_name_exists():
    problems = [p for doc in PATH_DOCS for p in path_problems(doc)]
    assert not problems, "\n".join(problems)


def test_path_checks_catch_moved_and_retired_files(tmp_path):
    page = ("The verdict is `loop/verdict.py`; the pairs `loop/speed/pairs.py`, the judge fleet/work.py and\n"
            "`pytest_dit_ar/loop/clean_rounds.py` (moved), `loop/findings.py` (merged), see docs/design/*.md and\n"
            "perf_suite/{sequential,roofline}.py, https://github.com/a/b/blob/main/x.py and owner/repo.\n"
            "```bash\nbash lab/device/ladder.sh && bash lab/device/wave4_ladder.sh   # retired\n```\n"
            "The picture of `docs/design/no_such_page.md#floors`.\n")
    found = path_problems(_page(tmp_path, page))
    assert [p.split(": ", 1)[1] for p in found] == [
        "`pytest_dit_ar/loop/clean_rounds.py` names no file or folder of the repository",
        "`loop/findings.py` names no file or folder of the repository",
        "`lab/device/wave4_ladder.sh` names no file or folder of the repository",
        "`docs/design/no_such_page.md` names no file or folder of the repository"], found
