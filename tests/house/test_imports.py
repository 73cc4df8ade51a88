"""Imports go one way (docs/architecture.md, "Imports go one way").

The table is read from the page itself, so the page and this check cannot drift. Every import of
the package is read with ``ast``: module-level ones, ones inside functions, and ones under
``if TYPE_CHECKING:`` (a type-only import is still a dependency of the module's meaning, and the
table and the walls are about meaning; counting them also keeps a loop from hiding behind one).
The check fails on

(a) any import cycle between modules,
(b) any import the table does not allow, and
(c) an import inside a function without a one-line comment on its line saying why it is deferred
    (``# deferred: start-up time ...`` or ``# optional: kubernetes``).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import import_graph as graph
from import_graph import components, cycle_through

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "jupyter_nbvalidation"
PAGE = ROOT / "docs" / "architecture.md"


# -- the table ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    members: tuple[str, ...]  # the folders and modules the row is (dotted, relative to the package)
    allowed: tuple[str, ...]  # what it may import: rows (by a member's name) or single modules


def _name(token: str) -> str:
    """`core/`, `app.py`, `backends/base.py`, `__init__.py` -> core, app, backends.base, "" (the package)."""
    token = token.strip().rstrip("/")
    token = token.removesuffix(".py").replace("/", ".")
    if token == "__init__" or token == PKG.name:
        return ""
    return token.removeprefix(PKG.name + ".").removesuffix(".__init__")


def read_table(text: str) -> list[Row]:
    """The rows of the table whose header is ``| folder | may import | ...``: in its first two
    columns, every name in backticks; the other columns are prose."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if [c.strip() for c in line.strip().strip("|").split("|")][:2] == ["folder", "may import"])
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = line.strip().strip("|").split("|")
        members = tuple(_name(t) for t in re.findall(r"`([^`]+)`", cells[0]))
        allowed = tuple(_name(t) for t in re.findall(r"`([^`]+)`", cells[1]))
        assert members, f"a row of the import table names no folder: {line!r}"
        rows.append(Row(members, allowed))
    return rows


class Table:
    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows
        self.row_of_member = {m: row for row in rows for m in row.members}

    def member_of(self, module: str) -> str | None:
        """The most specific row member that covers ``module`` ("" covers only the package itself)."""
        best: str | None = None
        for m in self.row_of_member:
            if module == m or (m and module.startswith(m + ".")):
                if best is None or len(m) > len(best):
                    best = m
        return best

    def row(self, module: str) -> Row | None:
        m = self.member_of(module)
        return None if m is None else self.row_of_member[m]

    def allows(self, importer: str, target: str) -> bool:
        mine, theirs = self.row(importer), self.row(target)
        if mine is None or theirs is None:
            return False
        if mine is theirs:
            return True
        for entry in mine.allowed:
            if entry in self.row_of_member:  # a row: its folder, not a row nested in it
                if self.row_of_member[entry] is theirs:
                    return True
            elif target == entry or target.startswith(entry + "."):  # one module (or a folder that is no row)
                return True
        return False


# -- the imports -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Import:
    importer: str  # dotted, relative to the package ("" is the package's __init__)
    target: str | None  # None: not the package's (a late import of anything still needs its reason)
    path: Path
    line: int
    in_function: bool
    reason: bool  # a `# deferred: ...` / `# optional: ...` comment on one of its lines


def _modules(pkg: Path) -> dict[str, Path]:
    return {graph.module_name(p, pkg): p for p in sorted(pkg.rglob("*.py"))}


def _ours(name: str, prefix: str, modules: dict[str, Path]) -> str | None:
    """``name`` (absolute, dotted) as one of the package's modules, or None."""
    if name == prefix:
        return ""
    if name.startswith(prefix + "."):
        rel = name[len(prefix) + 1:]
        return rel if rel in modules else None
    return None


def _imports_of(pkg: Path, path: Path, modules: dict[str, Path]) -> list[Import]:
    """``path``'s imports (import_graph.read_imports) as the table sees them: each statement's
    modules of the package (``import x.y`` names x.y; ``from x import y`` names x.y when y is a
    module, else x), and a late statement naming none of them, with its reason or not."""
    me, prefix = graph.module_name(path, pkg), pkg.name
    by_statement: dict[int, list[graph.Import]] = {}
    for record in graph.read_imports(path, pkg.parent):
        by_statement.setdefault(record.line, []).append(record)
    found: list[Import] = []
    for line, records in by_statement.items():
        targets: set[str] = set()
        for r in records:
            t = _ours(r.name, prefix, modules)
            if t is None and r.source is not None:
                t = _ours(r.source, prefix, modules)
            if t is not None:
                targets.add(t)
        in_function, why = records[0].in_function, records[0].reason is not None
        found.extend(Import(me, t, path, line, in_function, why) for t in sorted(targets) if t != me)
        if in_function and not targets:  # not ours: it still needs its reason
            found.append(Import(me, None, path, line, True, why))
    return found


def read_imports(pkg: Path) -> tuple[dict[str, Path], list[Import]]:
    """Every import of the package's modules: the package's own (``import x.y`` names x.y;
    ``from x import y`` names x.y when y is a module, else x), and any import inside a function."""
    modules = _modules(pkg)
    found: list[Import] = []
    for path in modules.values():
        found += _imports_of(pkg, path, modules)
    return modules, found


# -- the checks --------------------------------------------------------------------------------

@dataclass
class Report:
    cycles: list[list[str]] = field(default_factory=list)
    loops: list[list[str]] = field(default_factory=list)  # every module of each strongly connected component
    forbidden: list[str] = field(default_factory=list)
    unplaced: list[str] = field(default_factory=list)  # modules no row of the table covers
    unexplained: list[str] = field(default_factory=list)  # imports in functions without a reason


def _show(module: str) -> str:
    return module or "__init__"


def check(pkg: Path, table: Table) -> Report:
    modules, imports = read_imports(pkg)
    report = Report()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in sorted(imports, key=lambda i: (str(i.path), i.line)):
        where = f"{imp.path.relative_to(pkg.parent)}:{imp.line}"
        if imp.in_function and not imp.reason:
            report.unexplained.append(where)
        if imp.target is None:
            continue
        graph[imp.importer].add(imp.target)
        if not table.allows(imp.importer, imp.target):
            report.forbidden.append(f"{where}: {_show(imp.importer)} -> {_show(imp.target)}")
    report.unexplained = list(dict.fromkeys(report.unexplained))
    report.forbidden = list(dict.fromkeys(report.forbidden))
    report.unplaced = sorted(_show(m) for m in modules if table.row(m) is None)
    found = sorted((cycle_through(graph, comp), sorted(comp)) for comp in components(graph))
    report.cycles = [[_show(m) for m in c] for c, _ in found]
    report.loops = [[_show(m) for m in members] for _, members in found]
    return report


def _table() -> Table:
    return Table(read_table(PAGE.read_text()))


# -- the tests ---------------------------------------------------------------------------------

def test_the_table_is_read_from_the_page_and_covers_the_package() -> None:
    table = _table()
    assert len(table.rows) >= 15, table.rows
    for name in ("core", "verdict", "runner", "environment", "why_red", "store", "secrets", "backends", "backends.local",
                 "backends.kubernetes", "engine", "service", "clients", "cli", "composition", "app", "magic",
                 "pytest_plugin", ""):
        assert name in table.row_of_member, f"the import table has no row for {_show(name)}"
    modules = _modules(PKG)
    for row in table.rows:  # every name the table gives is a module or a folder of the package
        for name in row.members + row.allowed:
            assert name in modules or (PKG / name.replace(".", "/")).is_dir(), f"the import table names {name!r}: no such module"
    unplaced = sorted(m for m in modules if table.row(m) is None)
    assert not unplaced, f"modules no row of the import table covers: {unplaced}"


def test_the_runners_row_is_what_the_runner_ships() -> None:
    """The runner's row names exactly the modules ``runner.SHARED_MODULES`` copies beside runner/
    (less the empty package files and the version string)."""
    tree = ast.parse((PKG / "runner" / "__init__.py").read_text())
    shared = next(ast.literal_eval(node.value) for node in tree.body
                  if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "SHARED_MODULES" for t in node.targets))
    shipped = {_name(f) for f in shared} - {"", "_version", "core", "verdict"}
    assert set(_table().row_of_member["runner"].allowed) == shipped


def test_the_checker_finds_a_planted_loop_a_forbidden_import_and_an_unexplained_late_import(tmp_path: Path) -> None:
    """The checks below can fail: a tiny package with a loop, an import against the table and a late
    import without its reason is reported for each, and nothing else is."""
    pkg = tmp_path / "tinypkg"
    for folder in ("core", "service"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "a.py").write_text("from tinypkg.core.b import B\nA = 1\n")
    (pkg / "core" / "b.py").write_text("def f():\n    from tinypkg.core import a  # deferred: start-up time\n    return a\nB = 2\n")
    (pkg / "core" / "c.py").write_text("import tinypkg.service.api as api\n")  # core may import nothing of the package
    api = ("import tinypkg.core.a\n"
           "def late():\n    import json\n    return json\n"
           "def optional():\n    import kubernetes  # optional: kubernetes\n    return kubernetes\n")
    (pkg / "service" / "api.py").write_text(api)
    page = ("| folder | may import | why |\n| --- | --- | --- |\n| `core/`, `__init__.py` | nothing | leaf |\n"
            "| `service/` | `core/` | |\n")
    report = check(pkg, Table(read_table(page)))
    assert report.cycles == [["core.a", "core.b", "core.a"]]
    assert report.forbidden == ["tinypkg/core/c.py:1: core.c -> service.api"]
    assert report.unexplained == ["tinypkg/service/api.py:3"]
    assert report.unplaced == []
    # an import under TYPE_CHECKING is read: service.api -> core.c closes a loop with the forbidden one
    (pkg / "service" / "api.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tinypkg.core.c\n" + api)
    assert check(pkg, Table(read_table(page))).cycles == [["core.a", "core.b", "core.a"], ["core.c", "service.api", "core.c"]]


def test_no_import_cycle_between_modules() -> None:
    report = check(PKG, _table())
    assert not report.cycles, "import cycles (every import counts: late and TYPE_CHECKING ones too):\n" + "\n".join(
        f"{' -> '.join(c)}   (the loop holds {', '.join(m)})" for c, m in zip(report.cycles, report.loops, strict=True))


def test_every_import_is_one_the_table_allows() -> None:
    found = check(PKG, _table()).forbidden
    assert not found, "imports the table in docs/architecture.md does not allow:\n" + "\n".join(found)


def test_every_import_inside_a_function_says_why_it_is_deferred() -> None:
    found = check(PKG, _table()).unexplained
    assert not found, ("imports inside a function without `# deferred: <start-up time ...>` or "
                       "`# optional: <dependency>` on their line:\n" + "\n".join(found))


def test_the_one_reader_gives_each_imported_name_its_place_and_reason(tmp_path: Path) -> None:
    """import_graph.read_imports, the reader every wall derives from: one record per imported name,
    relative imports made absolute, function-level and TYPE_CHECKING ones marked, the reason read."""
    (tmp_path / "p" / "q").mkdir(parents=True)
    (tmp_path / "p" / "q" / "m.py").write_text(
        "from typing import TYPE_CHECKING\nfrom . import a, b\nif TYPE_CHECKING:\n    import p.t\n"
        "def f():\n    import json  # deferred: start-up time\n")
    records = graph.read_imports(tmp_path / "p" / "q" / "m.py", tmp_path)
    assert [(r.module, r.name, r.source, r.line, r.in_function, r.type_checking, r.reason) for r in records] == [
        ("p.q.m", "typing.TYPE_CHECKING", "typing", 1, False, False, None),
        ("p.q.m", "p.q.a", "p.q", 2, False, False, None),
        ("p.q.m", "p.q.b", "p.q", 2, False, False, None),
        ("p.q.m", "p.t", None, 4, False, True, None),
        ("p.q.m", "json", None, 6, True, False, "deferred: start-up time"),
    ]
    assert [r.runs_on_import for r in records] == [True, True, True, False, False]
