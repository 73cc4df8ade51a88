"""The runner stands alone: its imports stay inside a wall (checked on the source
with ``ast``), importing it loads no server part, and it runs in a fresh virtual
environment holding only nbclient, nbformat and ipykernel."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_notebook
from import_graph import read_imports

PKG = Path(__file__).resolve().parents[2] / "jupyter_nbvalidation"
SOURCE_ROOT = PKG.parent
FORBIDDEN_TOP = {"jupyter_server", "tornado", "traitlets", "kubernetes", "kubernetes_asyncio", "yaml",
                 "aiohttp", "jupyterlab", "jupyter_core", "sqlite3", "IPython"}
# what the runner may import of this package (pure modules; the closure is checked too)
ALLOWED_OWN = {"jupyter_nbvalidation", "jupyter_nbvalidation.runner", "jupyter_nbvalidation.core",
               "jupyter_nbvalidation.verdict", "jupyter_nbvalidation.verdict.compare",
               "jupyter_nbvalidation.verdict.flatten", "jupyter_nbvalidation.verdict.sanitize",
               "jupyter_nbvalidation.verdict.inherited", "jupyter_nbvalidation.verdict.probe",
               "jupyter_nbvalidation.verdict.markers", "jupyter_nbvalidation.core.priority", "jupyter_nbvalidation.core.tasks",
               "jupyter_nbvalidation.core.vocabulary", "jupyter_nbvalidation._version",
               "jupyter_nbvalidation.core.deferred_imports", "jupyter_nbvalidation.verdict.readset"}
THIRD_PARTY_OK = {"nbformat", "nbclient", "jupyter_client"}


def _imports(path: Path, top_level_only: bool = False, root: Path = SOURCE_ROOT) -> set[str]:
    """Absolute names of every module ``path`` imports (top level or in functions; with
    ``top_level_only``, only what importing it runs: not in a function, not under TYPE_CHECKING),
    read by import_graph.read_imports: ``from x import y`` counts as x, and as x.y when y is a module."""
    out = set()
    for r in read_imports(path, root):
        if top_level_only and not r.runs_on_import:
            continue
        if r.source is None:
            out.add(r.name)
            continue
        out.add(r.source)
        if _file_of(r.name) is not None:  # `from . import hygiene` imports a module
            out.add(r.name)
    return out


def _file_of(module: str) -> Path | None:
    base = SOURCE_ROOT / Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def test_nothing_under_the_runner_imports_the_server_engine_kubernetes_or_yaml():
    files = sorted((PKG / "runner").glob("*.py"))
    assert {f.name for f in files} >= {"__init__.py", "__main__.py", "execute.py", "verdict.py", "protocol.py"}
    # the package's own __init__ runs first wherever the runner is imported: what it imports at
    # its top level is part of the runner (its functions, the server's and the magic's entry
    # points, import the rest only when called)
    todo = [*files, PKG / "__init__.py"]
    seen: set[Path] = set()
    problems = []
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imports(path, top_level_only=path == PKG / "__init__.py"):
            top = name.split(".")[0]
            if top == "jupyter_nbvalidation":
                owner = name
                if not (owner in ALLOWED_OWN or name.startswith("jupyter_nbvalidation.runner.")):
                    problems.append(f"{path.relative_to(SOURCE_ROOT)} imports {name}")
                    continue
                f = _file_of(name)
                if f is not None:
                    todo.append(f)
                    # importing a.b.c runs a/__init__.py and a/b/__init__.py first
                    todo.extend(d / "__init__.py" for d in f.parents if d != PKG and PKG in d.parents)
            elif top in FORBIDDEN_TOP:
                problems.append(f"{path.relative_to(SOURCE_ROOT)} imports {name}")
            elif top not in sys.stdlib_module_names and top not in THIRD_PARTY_OK and top != "__future__":
                problems.append(f"{path.relative_to(SOURCE_ROOT)} imports {name} (not stdlib, nbformat, nbclient)")
    assert not problems, problems
    # the walk reached the shared pure modules and checked them too; they are exactly
    # what an image's runner venv gets beside runner/ (k8s/objects.runner_files)
    from jupyter_nbvalidation.runner import SHARED_MODULES

    outside = {p.relative_to(PKG).as_posix() for p in seen if p.relative_to(PKG).parts[0] != "runner"}
    assert outside == set(SHARED_MODULES)


def test_the_wall_check_sees_a_forbidden_import(tmp_path):
    """The checker itself: an import of the server (relative or absolute) is found."""
    # written beside a copy's runner/, not into the package's: a file there changes the runner's
    # identity (verdict/identity.py), so the verdict key of any `run` under way in another worker
    probe = tmp_path / PKG.name / "runner" / "_wall_probe_tmp.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("def f():\n    from ..service import ApiError\n    import yaml\n")
    found = _imports(probe, root=tmp_path)
    assert "jupyter_nbvalidation.service" in found and "yaml" in found


def test_importing_the_runner_and_the_package_loads_no_server_part():
    code = ("import sys, json, jupyter_nbvalidation, jupyter_nbvalidation.runner, jupyter_nbvalidation.runner.protocol;"
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    loaded = {m.split(".")[0] for m in json.loads(out.stdout)}
    assert not loaded & (FORBIDDEN_TOP | {"nbformat", "nbclient", "jupyter_client"}), loaded & FORBIDDEN_TOP
    # the extension entry points still work (they import the server part when called)
    code = ("import jupyter_nbvalidation as p; pts = p._jupyter_server_extension_points();"
            "print(pts[0]['module'], pts[0]['app'].__name__, p._jupyter_labextension_paths()[0]['dest'],"
            " callable(p.load_ipython_extension))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["jupyter_nbvalidation", "NBValidation", "jupyter-nbvalidation", "True"]


def _uv() -> str:
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not os.access(uv, os.X_OK):
        pytest.fail("uv is needed to build the fresh virtual environment (pip install uv)")
    return uv


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory):
    """A fresh venv with only nbclient, nbformat and ipykernel (and what they need)."""
    env = tmp_path_factory.mktemp("bare") / "venv"
    uv = _uv()
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(env)], check=True, capture_output=True,
                   timeout=300)
    subprocess.run([uv, "pip", "install", "-q", "--python", str(env / "bin" / "python"),
                    "nbclient", "nbformat", "ipykernel"], check=True, capture_output=True, timeout=600)
    return env


def test_runner_runs_in_a_venv_with_only_nbclient_nbformat_and_ipykernel(bare_venv, tmp_path):
    python = bare_venv / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import jupyter_server"], capture_output=True)
    assert probe.returncode != 0  # the venv really lacks the server (ipykernel brings tornado, not the server)
    nb = write_notebook(tmp_path / "nb.ipynb", [
        "import importlib.util\nprint([m for m in ('jupyter_server', 'yaml', 'kubernetes', 'jupyter_nbvalidation') "
        "if importlib.util.find_spec(m)])",
        "print(6 * 7)",
    ])
    # exactly the files an image's runner venv gets (k8s/objects.runner_files), nothing else of the source
    from jupyter_nbvalidation.backends.kubernetes.objects import runner_files

    site = tmp_path / "runner-site"
    for rel, data in runner_files().items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    assert not (site / "jupyter_nbvalidation" / "service" / "jobs.py").exists()
    env = {"PATH": f"{bare_venv / 'bin'}:/usr/bin:/bin", "PYTHONPATH": str(site), "HOME": str(tmp_path)}
    proc = subprocess.run([str(python), "-m", "jupyter_nbvalidation.runner", str(nb), "--result",
                           str(tmp_path / "r.json"), "--executed", str(tmp_path / "x.ipynb"), "--progress"],
                          capture_output=True, text=True, timeout=180, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from jupyter_nbvalidation.runner.protocol import parse_log, parse_progress

    result, _ = parse_log(proc.stdout)
    assert result["verdict"] == "Succeeded" and result["runner"]["python"] == str(python)
    records = parse_progress(proc.stdout)
    assert [(e["event"], e.get("cellIndex")) for e in records] == [
        ("plan", None), ("start", 0), ("end", 0), ("start", 1), ("end", 1)]
    assert records[0]["cellsTotal"] == 2 and [e["status"] for e in records if e["event"] == "end"] == ["Success"] * 2
    executed = json.loads((tmp_path / "x.ipynb").read_text())
    texts = ["".join(c["outputs"][0]["text"]) for c in executed["cells"]]
    # the kernel sees none of the runner's PYTHONPATH (so not the runner's package either)
    assert texts == ["[]\n", "42\n"]
