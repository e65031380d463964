"""The house's floors and rooms, kept.

* The picture of the floors in docs/design/README.md (a mermaid flowchart) says what the import contracts of
  pyproject.toml say: every module a layers contract names is drawn in exactly one node, every arrow points down
  the contracts' floors, and every node has an arrow to the floor right below its own.
* No room of `pytest_dit_ar/loop/` or `pytest_dit_ar/fleet/` holds more than 16 modules (`__init__` not counted).
* The loop's top holds only its verbs, the two composers and the rooms: a new file there is a decision.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "docs" / "design" / "README.md"
TOP_PACKAGE = "pytest_dit_ar"


# -- the contracts' floors --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Floor:
    """Where a module stands: its layer in the main layers contract, refined inside a container (the loop) by
    that container's own layers contract (`sub`: 0 for the container's top)."""

    layer: int
    container: str = ""
    sub: int = 0

    def above(self, other: Floor) -> bool:
        """Whether this floor may import `other` (import-linter's layers: a lower layer, never a sibling)."""
        if self.layer != other.layer:
            return self.layer < other.layer
        return bool(self.container) and self.container == other.container and self.sub < other.sub


def importlinter() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]


def _names(layer: str) -> list[str]:
    """The modules of one layer (`a | b` independent siblings, `a : b` siblings that may import each other)."""
    return [name.strip() for name in re.split(r"[|:]", layer) if name.strip()]


def contract_floors(linter: dict) -> dict[str, Floor]:
    """Every module the layers contracts name, with its floor; a container is replaced by the modules inside it."""
    contracts = [c for c in linter["contracts"] if c["type"] == "layers"]
    main = [c for c in contracts if not c.get("containers")]
    assert len(main) == 1, "one layers contract without containers: the house's floors"
    floors = {module: Floor(i) for i, layer in enumerate(main[0]["layers"]) for module in _names(layer)}
    for contract in contracts:
        for container in contract.get("containers", []):
            outer = floors.pop(container)
            for sub, layer in enumerate(contract["layers"]):
                floors.update({f"{container}.{name}": Floor(outer.layer, container, sub) for name in _names(layer)})
    return floors


def right_below(floor: Floor, floors: set[Floor]) -> set[Floor]:
    """The floors an arrow from `floor` must reach so that no floor is skipped: the next one inside its container,
    else the next layer (a container there entered at its top)."""
    if floor.container and any(f.container == floor.container and f.sub == floor.sub + 1 for f in floors):
        return {f for f in floors if f.container == floor.container and f.sub == floor.sub + 1}
    return {f for f in floors if f.layer == floor.layer + 1 and f.sub == 0}


# -- the picture ------------------------------------------------------------------------------------------

@dataclass
class Picture:
    nodes: dict[str, str]  # node id -> label
    arrows: list[tuple[str, str]]
    unread: list[str]  # lines neither a node nor an arrow between node ids


_NODE = re.compile(r'^(\w+)\["([^"]*)"\]$')
_ID = re.compile(r"^\w+$")


def mermaid_block(text: str) -> str:
    found = re.search(r"```mermaid\n(.*?)\n```", text, re.DOTALL)
    assert found, "docs/design/README.md has no mermaid picture of the floors"
    return found.group(1)


def picture(block: str) -> Picture:
    """Nodes written one a line (`id["label"]`), arrows between node ids (`a & b --> c`, chains allowed)."""
    pic = Picture({}, [], [])
    for line in (raw.strip() for raw in block.splitlines()):
        if not line or line.startswith(("%%", "flowchart", "graph")):
            continue
        node = _NODE.match(line)
        if node:
            pic.nodes[node.group(1)] = node.group(2)
            continue
        groups = [[name.strip() for name in part.split("&")] for part in line.split("-->")]
        if len(groups) < 2 or not all(_ID.match(name) for group in groups for name in group):
            pic.unread.append(line)
            continue
        for upper, lower in zip(groups, groups[1:]):
            pic.arrows += [(a, b) for a in upper for b in lower]
    return pic


def drawn_as(module: str) -> tuple[str, ...]:
    """The words a node's label names a module by: its folder below the top package (`loop/speed/`, `cli/`,
    `quality_suite/`), or a plain module's name together with its package's folder (`loop/` and `baseline`)."""
    path = ROOT / module.replace(".", "/")
    rel = module.removeprefix(f"{TOP_PACKAGE}.").replace(".", "/")
    if path.is_dir() or "." not in rel.replace("/", "."):
        return (rel + "/",)
    package, name = rel.rsplit("/", 1)
    return (package + "/", name)


def _words(label: str) -> set[str]:
    return set(re.findall(r"[\w/]+", label.replace("<br/>", " ")))


def picture_problems(pic: Picture, floors: dict[str, Floor]) -> list[str]:
    problems = [f"unread line (nodes one a line as id[\"label\"], arrows between ids): {line}" for line in pic.unread]
    floor_of: dict[str, Floor] = {}
    for module, floor in floors.items():
        holders = [n for n, label in pic.nodes.items() if set(drawn_as(module)) <= _words(label)]
        if len(holders) != 1:
            problems.append(f"{module}: drawn in {holders or 'no node'}, not in exactly one")
        elif floor_of.setdefault(holders[0], floor) != floor:
            problems.append(f"node {holders[0]} holds modules of two floors ({floor_of[holders[0]]}, {floor})")
    problems += [f"node {n} names no module of the contracts" for n in pic.nodes if n not in floor_of]
    for a, b in pic.arrows:
        if a not in floor_of or b not in floor_of:
            problems.append(f"arrow {a} --> {b}: {a if a not in floor_of else b} is not a node of the contracts")
        elif not floor_of[a].above(floor_of[b]):
            problems.append(f"arrow {a} --> {b} does not point down the contracts' floors")
    all_floors = set(floors.values())
    for node, floor in floor_of.items():
        targets = right_below(floor, all_floors)
        if targets and not any(a == node and floor_of.get(b) in targets for a, b in pic.arrows):
            problems.append(f"node {node} has no arrow to the floor right below it")
    return problems


def test_the_picture_of_the_floors_follows_the_import_contracts() -> None:
    problems = picture_problems(picture(mermaid_block(README.read_text(encoding="utf-8"))),
                                contract_floors(importlinter()))
    assert not problems, "docs/design/README.md's picture and pyproject.toml's contracts differ:\n" + \
        "\n".join(problems)


def test_the_floors_are_read_from_both_layers_contracts() -> None:
    floors = contract_floors(importlinter())
    assert floors["pytest_dit_ar.cli"] == floors["pytest_dit_ar.plugin"] == Floor(0)
    assert floors["pytest_dit_ar.loop.speed"] == floors["pytest_dit_ar.loop.quality"]
    assert floors["pytest_dit_ar.loop.experiment"].above(floors["pytest_dit_ar.loop.speed"])
    assert floors["pytest_dit_ar.loop.workers"].above(floors["pytest_dit_ar.state"])
    assert not floors["pytest_dit_ar.report"].above(floors["pytest_dit_ar.loop.guards"])  # siblings, not floors
    assert not floors["pytest_dit_ar.loop.speed"].above(floors["pytest_dit_ar.loop.quality"])
    assert "pytest_dit_ar.loop" not in floors
    assert drawn_as("pytest_dit_ar.loop.speed") == ("loop/speed/",)
    assert drawn_as("pytest_dit_ar.loop.baseline") == ("loop/", "baseline")
    assert drawn_as("quality_suite") == ("quality_suite/",)


def _tampered(old: str, new: str) -> list[str]:
    text = mermaid_block(README.read_text(encoding="utf-8"))
    assert old in text, old
    return picture_problems(picture(text.replace(old, new)), contract_floors(importlinter()))


def test_a_tampered_picture_is_refused() -> None:
    assert any("speed --> verbs does not point down" in p
               for p in _tampered("verbs --> speed & quality", "speed & quality --> verbs"))
    assert any("speed --> quality does not point down" in p
               for p in _tampered("speed & quality --> guards", "speed --> quality\n    speed & quality --> guards"))
    assert any("pytest_dit_ar.loop.workers: drawn in no node" in p
               for p in _tampered('workers["loop/workers/"]', 'workers["loop/"]'))
    assert any("libraries has no arrow to the floor right below" in p
               for p in _tampered("    libraries --> contract", ""))
    assert any("fleet has no arrow to the floor right below" in p
               for p in _tampered("fleet --> verbs & report", "fleet --> guards"))
    assert any("nowhere is not a node" in p for p in _tampered("faces --> fleet", "faces --> fleet & nowhere"))


def test_a_contract_that_changes_is_no_longer_drawn() -> None:
    pic = picture(mermaid_block(README.read_text(encoding="utf-8")))
    linter = importlinter()
    main = next(c for c in linter["contracts"] if c["type"] == "layers" and not c.get("containers"))
    new_floor = dict(main, layers=[*main["layers"][:2], "pytest_dit_ar.newfloor", *main["layers"][2:]])
    added = dict(linter, contracts=[new_floor if c is main else c for c in linter["contracts"]])
    assert "pytest_dit_ar.newfloor: drawn in no node" in "\n".join(picture_problems(pic, contract_floors(added)))
    swapped = dict(main, layers=[*main["layers"][:3], main["layers"][4], main["layers"][3], *main["layers"][5:]])
    reordered = dict(linter, contracts=[swapped if c is main else c for c in linter["contracts"]])
    assert any("state --> libraries does not point down" in p
               for p in picture_problems(pic, contract_floors(reordered)))


# -- rooms ------------------------------------------------------------------------------------------------

MAX_MODULES = 16
LOOP = ROOT / TOP_PACKAGE / "loop"
FLEET = ROOT / TOP_PACKAGE / "fleet"
# Rooms over the limit, each with the count it may not pass and why it stands. Remove an entry once the room is split.
OVER: dict[str, tuple[int, str]] = {}


def _packages(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def rooms() -> list[Path]:
    """The loop's rooms and the fleet, and any room inside them (the loop's top is not a room: see below)."""
    found, todo = [], [*_packages(LOOP), FLEET]
    while todo:
        room = todo.pop()
        found.append(room)
        todo += _packages(room)
    return sorted(found)


def modules(room: Path) -> list[str]:
    return sorted(p.stem for p in room.glob("*.py") if p.name != "__init__.py")


def crowded(found: list[Path], limit: int, over: dict[str, tuple[int, str]], root: Path = ROOT) -> list[str]:
    problems = []
    for room in found:
        rel = room.relative_to(root).as_posix()
        allowed = over.get(rel, (limit, ""))[0]
        if len(modules(room)) > allowed:
            problems.append(f"{rel}/ holds {len(modules(room))} modules (at most {allowed}): split it into rooms")
    return problems


def test_no_room_holds_more_than_16_modules() -> None:
    assert crowded(rooms(), MAX_MODULES, OVER) == []


def test_every_room_over_the_limit_still_is() -> None:
    """An exception whose room has been split (or is gone) must be removed, so the limit binds it again."""
    counts = {room.relative_to(ROOT).as_posix(): len(modules(room)) for room in rooms()}
    stale = [rel for rel in OVER if counts.get(rel, 0) <= MAX_MODULES]
    assert not stale, f"rooms no longer over {MAX_MODULES} modules: drop them from OVER: {stale}"


def test_a_crowded_room_is_named(tmp_path: Path) -> None:
    for room, count in (("loop/speed", 17), ("loop/quality", 16), ("fleet", 18)):
        (tmp_path / room).mkdir(parents=True)
        for i in range(count):
            (tmp_path / room / f"m{i}.py").touch()
        (tmp_path / room / "__init__.py").touch()
    found = [tmp_path / "fleet", tmp_path / "loop" / "quality", tmp_path / "loop" / "speed"]
    assert crowded(found, 16, {"fleet": (17, "")}, tmp_path) == [
        "fleet/ holds 18 modules (at most 17): split it into rooms",
        "loop/speed/ holds 17 modules (at most 16): split it into rooms"]


# -- the loop's top ------------------------------------------------------------------------------------------

VERBS = {"baseline", "experiment", "revalidate", "init_session", "case", "verdict", "conclusion"}
COMPOSERS = {"evidence", "candidate"}  # they compose the rooms for the verbs
LOOP_ROOMS = {"speed", "quality", "guards", "workers"}


def top_surprises(loop: Path) -> list[str]:
    """What the loop's top holds beyond, or lacks of, the verbs, the composers and the rooms."""
    held = {p.stem for p in loop.glob("*.py") if p.name != "__init__.py"} | {p.name for p in _packages(loop)}
    expected = VERBS | COMPOSERS | LOOP_ROOMS
    return [f"loop/{name}: not a verb, a composer or a room of the loop" for name in sorted(held - expected)] + \
        [f"loop/{name}: missing" for name in sorted(expected - held)]


def test_the_loops_top_holds_only_its_verbs_composers_and_rooms() -> None:
    assert top_surprises(LOOP) == []


def test_a_new_file_at_the_loops_top_is_named(tmp_path: Path) -> None:
    for name in VERBS | COMPOSERS | {"helpers"}:
        (tmp_path / f"{name}.py").touch()
    for room in LOOP_ROOMS - {"workers"}:
        (tmp_path / room).mkdir()
    assert top_surprises(tmp_path) == ["loop/helpers: not a verb, a composer or a room of the loop",
                                       "loop/workers: missing"]


def test_the_loops_contract_orders_the_same_top_and_rooms() -> None:
    contract = next(c for c in importlinter()["contracts"] if c.get("containers") == [f"{TOP_PACKAGE}.loop"])
    top, *lower = contract["layers"]
    assert set(_names(top)) == VERBS | COMPOSERS
    assert {name for layer in lower for name in _names(layer)} == LOOP_ROOMS


def test_the_design_readme_gives_every_room_its_line() -> None:
    text = README.read_text(encoding="utf-8")
    missing = [room.relative_to(ROOT).as_posix() for room in rooms()
               if f"| `{room.relative_to(ROOT).as_posix()}/` |" not in text]
    assert not missing, f"docs/design/README.md's rooms table has no line for {missing}"
