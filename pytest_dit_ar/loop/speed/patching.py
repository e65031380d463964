"""Source patches for the mutable model's entry point, written once.

Each patch is Python source appended to `model_under_test/__init__.py`: it defines a new `build_pipeline(spec)`
around the previous one (kept as `_build_<tag>`). The study slows a project copy with `SLEEP_WRAPPER`; the tests
write their candidates (a changed `generate()`, a build that does something first) with `wrap_generate` and
`wrap_build`. The harness never imports the model to do this: the patch is text, the model is built in a worker.
"""

from __future__ import annotations

import textwrap

DELAY_LINE = "_STUDY_DELAY_S = "  # the line of SLEEP_WRAPPER that holds the delay (tests rewrite it)


def _indent(source: str, spaces: int) -> str:
    return textwrap.indent(textwrap.dedent(source).strip("\n"), " " * spaces)


def wrap_build(tag: str, body: str) -> str:
    """A new `build_pipeline(spec)` whose body is `body` (any indentation); it may call `_build_<tag>(spec)`, the
    previous one, and must return a pipeline."""
    return f"""

_build_{tag} = build_pipeline


def build_pipeline(spec):
{_indent(body, 4)}
"""


def wrap_generate(tag: str, body: str, setup: str = "") -> str:
    """A new `build_pipeline` whose pipeline's `generate(requests)` runs `body` (any indentation): `_gen(requests)`
    is the previous generate, `pipe` the built pipeline; `setup` runs once after the build."""
    prepared = f"{_indent(setup, 4)}\n" if setup.strip() else ""
    return f"""

_build_{tag} = build_pipeline


def build_pipeline(spec):
    pipe = _build_{tag}(spec)
    _gen = pipe.generate
{prepared}
    def generate(requests):
{_indent(body, 8)}

    pipe.generate = generate
    return pipe
"""


# The study's slowed copy: the model sleeps before each generate(), an avoidable and exactly equivalent cost a
# candidate may remove. A template: `SLEEP_WRAPPER.format(delay=seconds)`.
SLEEP_WRAPPER = f"""

import time as _study_time
{DELAY_LINE}{{delay}}
""" + wrap_generate("study", "_study_time.sleep(_STUDY_DELAY_S)\nreturn _gen(requests)")


def sleep_patch(delay_s: float, tag: str = "study") -> str:
    """`SLEEP_WRAPPER` with its delay; another `tag` gives a wrapper of its own (its own `_<TAG>_DELAY_S`), so
    a tree already slowed by one (the tests' project copies) can be slowed again (the study's speedup arms)."""
    if tag == "study":
        return SLEEP_WRAPPER.format(delay=delay_s)
    var = f"_{tag.upper()}_DELAY_S"
    return f"\n\nimport time as _{tag}_time\n{var} = {delay_s}\n" + wrap_generate(
        tag, f"_{tag}_time.sleep({var})\nreturn _gen(requests)")
