"""The walls between the modules (docs/architecture.md, "Walls"), read from
the source with ``ast``: every import counts, also one inside a function (a
late import is still a dependency)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "jupyter_nbvalidation"
NAME = PKG.name


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """The absolute names of the modules ``path`` imports (``from x import y``
    counts as x and as x.y, since y may be a submodule)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def _ours(names: set[str]) -> set[str]:
    return {n for n in names if n == NAME or n.startswith(NAME + ".")}


def _modules(*relative: str) -> list[Path]:
    out: list[Path] = []
    for rel in relative:
        p = PKG / rel
        if p.is_dir():
            out += sorted(p.rglob("*.py"))
        elif p.with_suffix(".py").exists():
            out.append(p.with_suffix(".py"))
    assert out, f"no modules under {relative}"
    return out


def _is(name: str, *prefixes: str) -> bool:
    return any(name == f"{NAME}.{p}" or name.startswith(f"{NAME}.{p}.") for p in prefixes)


# what the engine may know: the ports and the pure core
ENGINE_MAY_IMPORT = ("backends.base", "store.base", "model", "events", "tasks", "errors", "timeline")
SERVICE_LAYER = ("service", "handlers", "app", "cli", "magic", "client", "openapi", "render", "batch", "reports",
                 "pytest_plugin")


def test_the_import_reader_sees_relative_and_late_imports(tmp_path: Path) -> None:
    """The walls below can fail: the reader resolves what they look for."""
    names = _imports(PKG / "k8s" / "backend.py")
    assert f"{NAME}.backends.base" in names  # from ..backends.base import ...
    assert f"{NAME}.k8s.objects" in names  # from . import objects
    assert f"{NAME}.runner" in names or f"{NAME}.runner.build_parser" in names  # a late import in a method


def test_the_engine_imports_only_the_ports_and_the_core() -> None:
    wrong = {n for n in _ours(_imports(PKG / "engine.py"))
             if not _is(n, *ENGINE_MAY_IMPORT) and n != NAME}
    assert not wrong, f"engine.py imports beyond the ports: {sorted(wrong)}"


@pytest.mark.parametrize("path", _modules("backends", "k8s"), ids=lambda p: str(p.relative_to(PKG)))
def test_backends_do_not_import_the_service_layer(path: Path) -> None:
    wrong = {n for n in _ours(_imports(path)) if _is(n, *SERVICE_LAYER)}
    assert not wrong, f"{path.relative_to(PKG)} imports the service layer: {sorted(wrong)}"


@pytest.mark.parametrize("path", _modules("k8s"), ids=lambda p: str(p.relative_to(PKG)))
def test_the_kubernetes_backend_does_not_import_the_local_backend(path: Path) -> None:
    wrong = {n for n in _ours(_imports(path)) if _is(n, "backends.local", "store.sqlite")}
    assert not wrong, f"{path.relative_to(PKG)} imports the local backend: {sorted(wrong)}"


@pytest.mark.parametrize("path", _modules("backends/local", "backends/base", "store"),
                         ids=lambda p: str(p.relative_to(PKG)))
def test_the_local_side_does_not_import_kubernetes(path: Path) -> None:
    names = _imports(path)
    wrong = {n for n in _ours(names) if _is(n, "k8s")} | {n for n in names if n.split(".")[0] == "kubernetes"}
    assert not wrong, f"{path.relative_to(PKG)} imports the Kubernetes backend: {sorted(wrong)}"


@pytest.mark.parametrize("path", _modules("store/base", "backends/base", "model", "timeline", "errors"),
                         ids=lambda p: str(p.relative_to(PKG)))
def test_the_ports_and_the_core_import_no_backend(path: Path) -> None:
    wrong = {n for n in _ours(_imports(path))
             if _is(n, "backends.local", "k8s", "store.sqlite", "engine", *SERVICE_LAYER)}
    assert not wrong, f"{path.relative_to(PKG)} imports an implementation: {sorted(wrong)}"


def test_only_the_service_maps_domain_errors_to_http() -> None:
    """``ApiError`` (an HTTP status) is raised by the service layer only."""
    for path in _modules("backends", "k8s", "store"):
        assert not re.search(r"\bApiError\b", path.read_text()), f"{path.relative_to(PKG)} speaks HTTP"


def test_test_modules_share_fixtures_through_conftest_not_each_other() -> None:
    """A test module imports helpers (helpers.py, k8s_support.py, ...), never another test module."""
    tests = Path(__file__).parent
    for path in sorted(tests.glob("*.py")):
        wrong = {n for n in _imports(path) if n.split(".")[0].startswith("test_")}
        assert not wrong, f"{path.name} imports test modules: {sorted(wrong)}"


# what the runner may not know: it runs inside a validation Pod's image, beside nbclient and nbformat only
RUNNER_MAY_NOT_IMPORT = ("engine", "service", "handlers", "app", "cli", "magic", "client", "k8s", "backends",
                         "store", "events", "openapi")
RUNNER_FOREIGN = ("jupyter_server", "tornado", "kubernetes", "yaml", "traitlets")


@pytest.mark.parametrize("path", _modules("runner"), ids=lambda p: str(p.relative_to(PKG)))
def test_the_runner_imports_no_server_engine_kubernetes_or_yaml(path: Path) -> None:
    names = _imports(path)
    wrong = {n for n in _ours(names) if _is(n, *RUNNER_MAY_NOT_IMPORT)}
    wrong |= {n for n in names if n.split(".")[0] in RUNNER_FOREIGN}
    assert not wrong, f"{path.relative_to(PKG)} imports {sorted(wrong)}"


# the batch side (``run``, its reports, the pytest plugin): jobs only through the CLI's clients and the service
BATCH_SIDE = ("batch", "reports", "pytest_plugin")


@pytest.mark.parametrize("path", _modules(*BATCH_SIDE), ids=lambda p: str(p.relative_to(PKG)))
def test_the_batch_side_reaches_jobs_only_through_the_service_and_the_clients(path: Path) -> None:
    wrong = {n for n in _ours(_imports(path)) if _is(n, "engine", "store", "backends", "k8s")}
    assert not wrong, f"{path.relative_to(PKG)} reaches jobs around the service: {sorted(wrong)}"


@pytest.mark.parametrize("name", ["handlers", "magic"])
def test_handlers_and_magic_reach_jobs_only_through_the_service(name: str) -> None:
    """The REST handlers call the service; the magic calls the REST API (client.py)."""
    wrong = {n for n in _ours(_imports(PKG / f"{name}.py"))
             if _is(n, "engine", "store", "backends", "k8s")}
    assert not wrong, f"{name}.py reaches jobs around the service: {sorted(wrong)}"
