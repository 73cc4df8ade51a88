"""Import cycles of a module graph (module -> the modules it imports): shared by the import
table's check (tests/house/test_imports.py) and the Kubernetes backend's wall (tests/house/test_walls.py)."""

from __future__ import annotations


def components(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (each is one or more loops)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    counter = [0]

    def strong(v: str) -> None:  # Tarjan's, iterative enough for a package's depth
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(comp)

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def cycle_through(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    """One shortest cycle through a strongly connected component, from its first module by name
    (its modules in order, the first repeated last)."""
    start = min(comp)
    prev: dict[str, str | None] = {start: None}
    frontier, last = [start], None
    while frontier and last is None:
        following = []
        for v in frontier:
            successors = sorted(graph.get(v, set()) & comp)
            if start in successors:
                last = v
                break
            for w in successors:
                if w not in prev:
                    prev[w] = v
                    following.append(w)
        frontier = following
    path: list[str] = []
    step = last
    while step is not None:
        path.append(step)
        step = prev[step]
    return path[::-1] + [start]


def one_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first repeated last), or None."""
    found = components(graph)
    return cycle_through(graph, min(found, key=min)) if found else None
