"""The walls between the modules (docs/architecture.md, "Walls"), read from
the source with ``ast``: every import counts, also one inside a function (a
late import is still a dependency)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
from import_graph import module_name, one_cycle, read_imports

PKG = Path(__file__).resolve().parents[2] / "jupyter_nbvalidation"
NAME = PKG.name


def _module_name(path: Path) -> str:
    return module_name(path, PKG.parent)


def _imports(path: Path) -> set[str]:
    """The absolute names of the modules ``path`` imports (import_graph.read_imports: ``from x
    import y`` counts as x and as x.y, since y may be a submodule)."""
    records = read_imports(path, PKG.parent)
    return {r.name for r in records} | {r.source for r in records if r.source is not None}


def _ours(names: set[str]) -> set[str]:
    return {n for n in names if n == NAME or n.startswith(NAME + ".")}


def _modules(*relative: str) -> list[Path]:
    out: list[Path] = []
    for rel in relative:
        p = PKG / rel.replace(".", "/")
        if p.is_dir():
            out += sorted(p.rglob("*.py"))
        elif p.with_suffix(".py").exists():
            out.append(p.with_suffix(".py"))
    assert out, f"no modules under {relative}"
    return out


def _is(name: str, *prefixes: str) -> bool:
    return any(name == f"{NAME}.{p}" or name.startswith(f"{NAME}.{p}.") for p in prefixes)


# what the engine may know: the ports and the pure core
ENGINE_MAY_IMPORT = ("backends.base", "store.base", "core.model", "core.events", "core.tasks", "core.errors", "core.timeline", "spec.plan",
                     "spec.notes", "core.vocabulary", "core.documents", "core.redaction")
SERVICE_LAYER = ("service", "service.handlers", "app", "cli", "magic", "clients", "service.openapi", "cli.render", "cli.batch", "cli.reports",
                 "pytest_plugin")


def test_the_import_reader_sees_relative_and_late_imports(tmp_path: Path) -> None:
    """The walls below can fail: the reader resolves what they look for."""
    names = _imports(PKG / "backends" / "kubernetes" / "executor.py")
    assert f"{NAME}.backends.base" in names  # from ..backends.base import ...
    assert f"{NAME}.backends.kubernetes.objects" in names  # from . import objects
    assert f"{NAME}.runner" in names or f"{NAME}.runner.build_parser" in names  # a late import in a function


@pytest.mark.parametrize("path", _modules("engine"), ids=lambda p: str(p.relative_to(PKG)))
def test_the_engine_imports_only_the_ports_and_the_core(path: Path) -> None:
    wrong = {n for n in _ours(_imports(path))
             if not _is(n, *ENGINE_MAY_IMPORT, "engine") and n != NAME}
    assert not wrong, f"{path.relative_to(PKG)} imports beyond the ports: {sorted(wrong)}"


@pytest.mark.parametrize("path", _modules("backends", "backends.kubernetes"), ids=lambda p: str(p.relative_to(PKG)))
def test_backends_do_not_import_the_service_layer(path: Path) -> None:
    wrong = {n for n in _ours(_imports(path)) if _is(n, *SERVICE_LAYER)}
    assert not wrong, f"{path.relative_to(PKG)} imports the service layer: {sorted(wrong)}"


@pytest.mark.parametrize("path", _modules("backends.kubernetes"), ids=lambda p: str(p.relative_to(PKG)))
def test_the_kubernetes_backend_does_not_import_the_local_backend(path: Path) -> None:
    wrong = {n for n in _ours(_imports(path)) if _is(n, "backends.local", "store.sqlite")}
    assert not wrong, f"{path.relative_to(PKG)} imports the local backend: {sorted(wrong)}"


@pytest.mark.parametrize("path", _modules("backends/local", "backends/base", "store"),
                         ids=lambda p: str(p.relative_to(PKG)))
def test_the_local_side_does_not_import_kubernetes(path: Path) -> None:
    names = _imports(path)
    wrong = {n for n in _ours(names) if _is(n, "backends.kubernetes")} | {n for n in names if n.split(".")[0] == "kubernetes"}
    assert not wrong, f"{path.relative_to(PKG)} imports the Kubernetes backend: {sorted(wrong)}"


@pytest.mark.parametrize("path", _modules("store/base", "backends/base", "core.model", "core.timeline", "core.errors", "spec.plan",
                                          "spec.notes", "spec.runner_args", "environment.requirements", "verdict.cache", "core.vocabulary",
                                          "core.documents", "core.spec_table"),
                         ids=lambda p: str(p.relative_to(PKG)))
def test_the_ports_and_the_core_import_no_backend(path: Path) -> None:
    wrong = {n for n in _ours(_imports(path))
             if _is(n, "backends.local", "backends.kubernetes", "store.sqlite", "engine", *SERVICE_LAYER)}
    assert not wrong, f"{path.relative_to(PKG)} imports an implementation: {sorted(wrong)}"


@pytest.mark.parametrize("name", ["core.vocabulary", "core.documents", "core.spec_table", "core.redaction"])
def test_the_vocabulary_and_the_document_types_need_only_the_standard_library(name: str) -> None:
    """The phases, reasons, spec table and document shapes are shared by the runner (in an
    image beside nbclient and nbformat only), the server and the lab's generators. The
    spec table is a leaf: documents takes the spec's TypedDicts from it. The one masker
    of credentials (redaction) is pure and a leaf too: everything that shows text uses it."""
    names = _imports(_modules(name)[0])
    wrong = {n for n in names if n.split(".")[0] not in sys.stdlib_module_names and n != "__future__"
             and not n.startswith("__future__.")
             and not (name == "core.documents" and _is(n, "core.spec_table"))}
    assert not wrong, f"{name}.py imports {sorted(wrong)}"


def test_only_the_service_maps_domain_errors_to_http() -> None:
    """``ApiError`` (an HTTP status) is raised by the service layer only."""
    for path in _modules("backends", "backends.kubernetes", "store"):
        assert not re.search(r"\bApiError\b", path.read_text()), f"{path.relative_to(PKG)} speaks HTTP"


def test_test_modules_share_fixtures_through_conftest_not_each_other() -> None:
    """A test module imports helpers (helpers.py, k8s_support.py, ...), never another test module."""
    tests = Path(__file__).parents[1]
    for path in sorted(tests.rglob("*.py")):
        wrong = {n for n in _imports(path) if n.split(".")[0].startswith("test_")}
        assert not wrong, f"{path.name} imports test modules: {sorted(wrong)}"


# what the runner may not know: it runs inside a validation Pod's image, beside nbclient and nbformat only
RUNNER_MAY_NOT_IMPORT = ("engine", "service", "service.handlers", "app", "cli", "magic", "clients", "backends.kubernetes", "backends",
                         "store", "core.events", "service.openapi", "secrets")
RUNNER_FOREIGN = ("jupyter_server", "tornado", "kubernetes", "yaml", "traitlets")


@pytest.mark.parametrize("path", _modules("runner"), ids=lambda p: str(p.relative_to(PKG)))
def test_the_runner_imports_no_server_engine_kubernetes_or_yaml(path: Path) -> None:
    names = _imports(path)
    wrong = {n for n in _ours(names) if _is(n, *RUNNER_MAY_NOT_IMPORT)}
    wrong |= {n for n in names if n.split(".")[0] in RUNNER_FOREIGN}
    assert not wrong, f"{path.relative_to(PKG)} imports {sorted(wrong)}"


# the batch side (``run``, its reports, the pytest plugin): jobs only through the CLI's clients and the service
BATCH_SIDE = ("cli.batch", "cli.reports", "pytest_plugin")


@pytest.mark.parametrize("path", _modules(*BATCH_SIDE), ids=lambda p: str(p.relative_to(PKG)))
def test_the_batch_side_reaches_jobs_only_through_the_service_and_the_clients(path: Path) -> None:
    wrong = {n for n in _ours(_imports(path)) if _is(n, "engine", "store", "backends", "backends.kubernetes")}
    assert not wrong, f"{path.relative_to(PKG)} reaches jobs around the service: {sorted(wrong)}"


@pytest.mark.parametrize("name", ["service.handlers", "magic", "cli", "cli.batch"])
def test_handlers_magic_and_cli_reach_jobs_only_through_the_service(name: str) -> None:
    """The REST handlers call the service; the magic calls the REST API (client.py); the CLI
    (and its batch runner) the REST API or a service assembled by ``composition.local_service``:
    none of them builds or touches an engine, a backend or a store itself."""
    wrong = {n for n in _ours(_imports(_modules(name)[0]))
             if _is(n, "engine", "store", "backends", "backends.kubernetes") and not _is(n, "backends.kubernetes.install")}
    # (``jupyter nbvalidation install`` applies the CRD and Role to a cluster: no job involved)
    assert not wrong, f"{name}.py reaches jobs around the service: {sorted(wrong)}"


# -- the Kubernetes backend: no import cycle among its modules ----------------------------

K8S_MODULES = _modules("backends.kubernetes")


def _module_file(name: str) -> Path | None:
    rel = Path(*name.split(".")[1:])
    for candidate in (PKG / rel.with_suffix(".py"), PKG / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _k8s_graph() -> dict[str, set[str]]:
    """module -> the k8s modules it imports (by name, every import: late ones and
    TYPE_CHECKING ones too; a name that is no module file, ``from x import y``'s y, is dropped)."""
    graph: dict[str, set[str]] = {}
    for path in K8S_MODULES:
        me = _module_name(path)
        graph[me] = {n for n in _ours(_imports(path))
                     if _is(n, "backends.kubernetes") and n != me and _module_file(n) is not None}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (the modules on it, first repeated last), or None: the
    finder the import table's check uses (tests/import_graph.py)."""
    return one_cycle(graph)


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check below can fail: a two- and a three-module cycle are found, a chain is not."""
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    graph = _k8s_graph()
    assert f"{NAME}.backends.kubernetes.children" in graph[f"{NAME}.backends.kubernetes.builders.job"]  # the reader sees relative imports


def test_the_kubernetes_modules_import_each_other_without_a_cycle() -> None:
    cycle = _cycle(_k8s_graph())
    assert cycle is None, "import cycle among the Kubernetes modules: " + " -> ".join(cycle or [])


def test_no_kubernetes_builder_or_executor_reaches_into_the_backend() -> None:
    """Builders, the executor and the child helpers get what they need passed in
    (``children.Children``, ``builders.BuildSite``), never the backend object."""
    graph = _k8s_graph()
    for module, imports in graph.items():
        if module != f"{NAME}.backends.kubernetes.backend":
            assert f"{NAME}.backends.kubernetes.backend" not in imports, f"{module} imports k8s/backend.py"
    for path in _modules("backends/kubernetes/builders", "backends/kubernetes/executor", "backends/kubernetes/children", "backends/kubernetes/images", "backends/kubernetes/snapshot"):
        text = path.read_text()
        assert not re.search(r"\bbackend\._|\.backend\b", text), f"{path.relative_to(PKG)} reaches into the backend"


@pytest.mark.parametrize("path", K8S_MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_each_kubernetes_module_imports_alone(path: Path) -> None:
    """First in a fresh interpreter, each module imports (an import cycle that
    only some import orders survive fails here)."""
    import subprocess
    import sys

    name = _module_name(path)
    done = subprocess.run([sys.executable, "-c", f"import importlib; importlib.import_module({name!r})"],
                          capture_output=True, text=True, timeout=120, cwd=PKG.parent)
    assert done.returncode == 0, f"importing {name} alone failed:\n{done.stderr[-2000:]}"

@pytest.mark.parametrize("name", ["service.handlers", "cli", "cli.batch", "magic", "app"])
def test_entry_points_read_no_engine_or_backend_internals(name: str) -> None:
    """No entry point reaches into the engine or the backend behind the service
    (``service.engine``, ``api.backend``, the engine's ``_dirty`` / ``_processing`` /
    ``_timers``): /health and the idle check read ``service.health()`` and ``engine.activity()``."""
    tree = ast.parse((_modules(name)[0]).read_text())
    wrong = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if node.attr in ("_dirty", "_processing", "_timers", "_plans"):
                wrong.add(node.attr)
            if name != "app" and node.attr in ("engine", "backend", "backend_impl"):
                wrong.add(node.attr)
    assert not wrong, f"{name}.py reads {sorted(wrong)} around the service"


# -- one composition root ---------------------------------------------------------------

def test_engines_and_services_are_assembled_in_one_place() -> None:
    """composition.assemble builds the engine and the service, for the server extension and
    for the CLI without a server alike (so both read the same settings); nothing else does."""
    builders = {}
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("Engine", "JobService"):
                builders.setdefault(str(path.relative_to(PKG)), set()).add(node.func.id)
    assert builders == {"composition.py": {"Engine", "JobService"}}, builders


def _probes(tree: ast.AST) -> list[str]:
    """``getattr``/``hasattr`` calls whose object is a backend or a store (by its name:
    ``backend``, ``self.backend``, ``store``, ``self.store``, ``api``, ``self.api``)."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr") and node.args):
            target = ast.unparse(node.args[0])
            if target.split(".")[-1] in ("backend", "store"):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_probe_finder_sees_a_probe() -> None:
    tree = ast.parse("x = getattr(self.backend, 'drain', None)\ny = hasattr(store, 'outage')\nz = getattr(args, 'lax')")
    assert [p.split(":")[0] for p in _probes(tree)] == ["1", "2"]


def test_nothing_probes_a_backend_or_a_store_for_what_it_can_do() -> None:
    """What a backend can do is declared once (``Backend.capabilities``) and every optional
    operation is on the port with its default: no module asks an object whether it has one."""
    probes = {str(p.relative_to(PKG)): found for p in sorted(PKG.rglob("*.py"))
              if (found := _probes(ast.parse(p.read_text())))}
    assert probes == {}, probes
