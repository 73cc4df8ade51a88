"""The one reader of a module's imports, and the import cycles of a module graph (module -> the
modules it imports): shared by the import table's check (tests/house/test_imports.py), the walls
(tests/house/test_walls.py), the runner's wall (tests/runner/test_runner_standalone.py), the bisect
search's wall (tests/cli/test_commands.py) and the masker's source (tests/core/test_redaction.py).
Each of them derives what it asserts on from the same records."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

# the one-line reason an import inside a function must carry, on one of its lines
REASON = re.compile(r"#.*\b(deferred|optional):\s*\S")


@dataclass(frozen=True)
class Import:
    """One imported name of one import statement."""

    module: str  # the importing module, dotted from the root it was read under
    name: str  # what is imported, absolute: `import a.b` -> a.b; `from a import b` -> a.b (b may be no module)
    source: str | None  # a `from` import's module (a), None for `import a.b`
    line: int
    in_function: bool  # inside a function or a lambda (run when called, not when imported)
    type_checking: bool  # under `if TYPE_CHECKING:` (never run)
    reason: str | None  # the `deferred: ...` / `optional: ...` comment on one of its lines

    @property
    def runs_on_import(self) -> bool:
        return not self.in_function and not self.type_checking


def module_name(path: Path, root: Path) -> str:
    """``root``/a/b/c.py -> a.b.c; a package's ``__init__.py`` is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def read_imports(path: Path, root: Path) -> list[Import]:
    """Every import of ``path`` (module-level ones, ones in functions, ones under ``if
    TYPE_CHECKING:``), one record per imported name, relative imports made absolute."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    me = module_name(path, root)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool, type_checking: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                text = "\n".join(lines[child.lineno - 1: (child.end_lineno or child.lineno)])
                m = REASON.search(text)
                reason = text[m.start(1):].split("\n")[0].strip() if m else None
                if isinstance(child, ast.Import):
                    found.extend(Import(me, alias.name, None, child.lineno, in_function, type_checking, reason)
                                 for alias in child.names)
                else:
                    if child.level:  # relative
                        base = package.split(".") if package else []
                        base = base[: len(base) - (child.level - 1)]
                        absolute = ".".join([*base, *([child.module] if child.module else [])])
                    else:
                        absolute = child.module or ""
                    found.extend(Import(me, f"{absolute}.{alias.name}", absolute, child.lineno, in_function,
                                        type_checking, reason) for alias in child.names)
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    visit(ast.Module(body=[stmt], type_ignores=[]), inside, True)
                for stmt in child.orelse:
                    visit(ast.Module(body=[stmt], type_ignores=[]), inside, type_checking)
                visit(child.test, inside, type_checking)
                continue
            visit(child, inside, type_checking)

    visit(ast.parse(source, str(path)), False, False)
    return found


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
