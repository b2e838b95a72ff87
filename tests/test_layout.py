"""The project's structure: no import cycles among its modules, and each
step's entry point where the README says."""

from __future__ import annotations

import ast

from conftest import ROOT

SKIP = {"tests", "benchmarks", "docs", "__pycache__"}


def project_modules() -> dict[str, str]:
    """Module name -> file, for every module of the project."""
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0].startswith(".") or SKIP & set(rel.parts):
            continue
        name = ".".join(rel.with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports, at any depth of its code
    (an import inside a function counts as much as one at the top)."""
    mods = project_modules()
    graph = {m: set() for m in mods}
    for m, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for n in names:
                while n and n not in mods:
                    n = n.rpartition(".")[0]
                if n and n != m:
                    graph[m].add(n)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module."""
    import networkx as nx

    g = nx.DiGraph([(a, b) for a, bs in graph.items() for b in bs])
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


def test_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 40  # the walk found the project
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_graph_and_the_library_entry_point_do_not_need_the_command_line():
    graph = import_graph()

    def reach(m, seen=None):
        seen = set() if seen is None else seen
        for n in graph[m]:
            if n not in seen:
                seen.add(n)
                reach(n, seen)
        return seen

    assert not any(m.startswith("models") for m in reach("graph"))
    assert not any(m == "cli" or m.startswith("cli.") for m in reach("planner"))
    assert not any(m.startswith(("cli", "planner", "studies")) for m in reach("dp_search"))


def source_files():
    """Every Python file of the project outside the tests (benchmarks
    included), relative to the root."""
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0].startswith(".") or rel.parts[0] in ("tests", "docs") or "__pycache__" in rel.parts:
            continue
        yield rel, path


def test_no_module_is_over_600_lines():
    sizes = {str(rel): len(path.read_text().splitlines()) for rel, path in source_files()}
    assert len(sizes) > 60  # the walk found the project, benchmarks included
    assert {f: n for f, n in sizes.items() if n > 600} == {}


def test_the_cost_model_entry_point_re_exports_a_package_of_one_idea_per_module():
    import cost_model

    assert len((ROOT / "cost_model.py").read_text().splitlines()) < 200
    modules = {p.stem for p in (ROOT / "cost").glob("*.py")} - {"__init__"}
    assert modules == {"rules", "time", "edges", "memory", "tables", "evaluate"}
    offered = [getattr(cost_model, name) for name in cost_model.__all__]
    defined = [x for x in offered if callable(x)]
    assert len(defined) > 20 and all(x.__module__.startswith("cost.") for x in defined)  # defined in the package
    graph = import_graph()
    order = ["cost.rules", "cost.time", "cost.edges", "cost.memory", "cost.tables", "cost.evaluate"]
    for i, m in enumerate(order):  # each module imports only those before it in the package
        assert {n for n in graph[m] if n.startswith("cost.")} <= set(order[:i])
