"""The house's shape, kept: no import circle among the project's modules."""

from __future__ import annotations

import grimp
import networkx as nx

PACKAGES = ("dit_ar_contract", "pytest_dit_ar", "quality_suite", "perf_suite")


def import_circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """One circle (a -> b -> ... -> a) for every group of modules that import each other, directly or not."""
    g = nx.DiGraph()
    for module in sorted(graph.modules):
        g.add_node(module)
        g.add_edges_from((module, imported) for imported in sorted(graph.find_modules_directly_imported_by(module)))
    circles = []
    for group in nx.strongly_connected_components(g):
        if len(group) > 1:
            path = [a for a, _ in nx.find_cycle(g.subgraph(group), source=min(group))]
            start = path.index(min(path))  # the same circle reads the same from run to run
            path = path[start:] + path[:start]
            circles.append(path + [path[0]])
    return sorted(circles)


def test_no_import_circles() -> None:
    """grimp (import-linter's own graph) reads every import, those under TYPE_CHECKING and inside functions
    included: a circle of type-only imports is still two modules that cannot be read one without the other."""
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    circles = import_circles(graph)
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_a_circle_is_found_and_named() -> None:
    graph = grimp.ImportGraph()
    for module in ("p.a", "p.b", "p.c", "p.d"):
        graph.add_module(module)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.c")
    graph.add_import(importer="p.c", imported="p.a")
    graph.add_import(importer="p.c", imported="p.d")
    assert import_circles(graph) == [["p.a", "p.b", "p.c", "p.a"]]
