"""The TUI's structure: no import cycle among cockpit's modules, every message in one module."""

from __future__ import annotations

import grimp


def strongly_connected(graph: grimp.ImportGraph) -> list[set[str]]:
    """Tarjan's algorithm over the import graph: every group of modules that import each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    counter = 0

    for root in sorted(graph.modules):
        if root in index:
            continue
        # iterative depth-first search: (module, iterator over its imports)
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph.modules:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    group.add(m)
                    if m == node:
                        break
                if len(group) > 1:
                    groups.append(group)
    return groups


def test_no_import_cycle_among_cockpit_modules():
    # Imports inside functions and under TYPE_CHECKING count too: a cycle is a cycle.
    graph = grimp.build_graph("cockpit")
    cycles = strongly_connected(graph)
    assert not cycles, "modules that import each other: " + "; ".join(", ".join(sorted(c)) for c in cycles)


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        graph.add_import(importer=a, imported=b)
    assert strongly_connected(graph) == [{"p.a", "p.b", "p.c"}]
