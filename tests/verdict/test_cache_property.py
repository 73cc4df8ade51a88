"""The verdict cache never lies (issue 20, "What it must show"): for each mutation of a
set, `run` after the mutation gives exactly the verdict `run --no-cache` gives. Each
mutation is chosen so that the fresh verdict differs from the first one (Succeeded ->
Failed); a control mutation (version control's folder) leaves it, so that Unchanged is
checked to be right as well. Real kernels, real SQLite, the real CLI as a subprocess,
with the build disabled (one interpreter for every round: a venv of the test's own that
sees the project's packages and holds a real editable install, made as pip makes one).
Requirements are not among the mutations: with the build disabled they do not reach the
kernel (tests/test_verdict_cache.py checks that an edit of them runs the notebook again)."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path
from typing import Callable

import nbformat
import pytest
from helpers import write_golden, write_notebook

PKG = Path(__file__).resolve().parents[2] / "jupyter_nbvalidation"
SAME = {"Unchanged": "Succeeded"}  # a cache hit stands for the Succeeded job it names


def frozen_site(folder: Path) -> Path:
    """This interpreter's packages in ``folder``, but this project as a copy of its code
    instead of its editable install: the editable install's source is the checkout, whose
    every folder is in the unbuilt environment's identity (verdict_cache.source_digest), and
    other tests (the browser's artifacts) and the cluster's set-up (.cluster) add folders to
    it while these tests run. A copy keeps the key ours, so a cache miss here is the cache's."""
    folder.mkdir()
    for sp in map(Path, site.getsitepackages()):
        for entry in sp.iterdir():
            if entry.name.startswith(("jupyter_nbvalidation", "_editable_impl_jupyter_nbvalidation", "__editable__")) \
                    or (folder / entry.name).exists():
                continue
            (folder / entry.name).symlink_to(entry)
    shutil.copytree(PKG, folder / "jupyter_nbvalidation", ignore=shutil.ignore_patterns("__pycache__"))
    compile_bytecode(folder / "jupyter_nbvalidation")
    return folder


def compile_bytecode(package: Path) -> None:
    """A copy's bytecode, once: where PYTHONDONTWRITEBYTECODE is set (this machine kind) every
    CLI, fork server and runner started from the copy would compile what it imports, every
    time. Bytecode is not in the verdict cache's key (core/folders.EXCLUDED_DIRS), and an
    edited module's bytecode is stale by its source's mtime and size, so Python compiles it again."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True, timeout=300,
                   stdout=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> Path:
    """A venv's interpreter seeing this one's packages (this project as a copy:
    ``frozen_site``), with ``mylib`` installed editable: a ``.pth`` naming its source
    folder and a dist-info whose direct_url.json says editable."""
    base = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base / "venv")], check=True, timeout=120)
    py = base / "venv" / "bin" / "python"
    [sp] = json.loads(subprocess.run([str(py), "-c", "import site, json; print(json.dumps(site.getsitepackages()))"],
                                     capture_output=True, text=True, check=True).stdout)
    sp = Path(sp)
    # a path line (not an import line): the kernel's sandbox shows the folders such lines name
    (sp / "zz_project.pth").write_text(f"{frozen_site(base / 'site')}\n")
    src = base / "src"
    (src / "mylib").mkdir(parents=True)
    (src / "mylib" / "__init__.py").write_text("VALUE = 1\n")
    (sp / "__editable__.mylib-0.1.pth").write_text(f"{src}\n")
    info = sp / "mylib-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mylib\nVersion: 0.1\n")
    (info / "direct_url.json").write_text(json.dumps({"url": src.as_uri(), "dir_info": {"editable": True}}))
    return py


def run(python: Path, folder: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """`jupyter nbvalidation run nbs` in ``folder`` by ``python``: each notebook's verdict."""
    proc = subprocess.run([str(python), "-m", "jupyter_nbvalidation.cli.main", "run", "nbs", "--no-build", "--local",
                           "--golden-suffix", ".golden", "-j", "2", "--data-dir", str(folder / "data"),
                           "-o", "json", *args],
                          cwd=folder, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL,
                          env={**os.environ, "JUPYTER_RUNTIME_DIR": str(folder / "no-servers"), **(env or {})})
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return {row["notebook"]: row["verdict"] for row in json.loads(proc.stdout)}


def check(python: Path, folder: Path, mutated: set[str], env: dict[str, str] | None = None) -> None:
    """After a mutation: `run` (first: a fresh job then stands for the key) gives what
    `run --no-cache` gives, notebook by notebook; the mutated ones fail, the others pass."""
    cached = run(python, folder, env=env)
    fresh = run(python, folder, "--no-cache", env=env)
    assert {nb: SAME.get(v, v) for nb, v in cached.items()} == fresh, (cached, fresh)
    assert {nb for nb, v in fresh.items() if v != "Succeeded"} == mutated, fresh


def set_cell(path: Path, source: str) -> None:
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].source = source
    nbformat.write(nb, str(path))


def test_after_each_mutation_of_what_the_kernel_reads_run_gives_the_fresh_verdict(python, tmp_path):
    nbs, outside = tmp_path / "nbs", tmp_path / "shared"
    outside.mkdir()
    (outside / "value.txt").write_text("1")
    write_notebook(nbs / "cell" / "nb.ipynb", ["assert 1 + 1 == 2"])
    write_notebook(nbs / "sibling" / "nb.ipynb", ["assert open('data.txt').read() == 'ok'"])
    (nbs / "sibling" / "data.txt").write_text("ok")
    write_notebook(nbs / "linked" / "nb.ipynb", ["assert open('data/value.txt').read() == '1'"])
    (nbs / "linked" / "data").symlink_to(outside, target_is_directory=True)
    write_notebook(nbs / "hidden" / "nb.ipynb", ["import json\nassert json.load(open('.conf/s.json'))['ok']"])
    (nbs / "hidden" / ".conf").mkdir()
    (nbs / "hidden" / ".conf" / "s.json").write_text('{"ok": true}')
    write_notebook(nbs / "editable" / "nb.ipynb", ["import mylib\nassert mylib.VALUE == 1, mylib.VALUE"])
    write_golden(write_notebook(nbs / "golden" / "nb.ipynb", ["print('x')"]), "x\n")
    write_notebook(nbs / "control" / "nb.ipynb", ["print('control')"])
    everything = {f"nbs/{d}/nb.ipynb" for d in ("cell", "sibling", "linked", "hidden", "editable", "golden", "control")}

    first = run(python, tmp_path)
    assert first == dict.fromkeys(everything, "Succeeded"), first
    assert run(python, tmp_path) == dict.fromkeys(everything, "Unchanged")

    def golden_says_y() -> None:
        write_golden(nbs / "golden" / "nb.ipynb", "y\n")

    def version_control() -> None:
        (nbs / "control" / ".git").mkdir(exist_ok=True)
        (nbs / "control" / ".git" / "index").write_text("another commit")

    src = python.parents[2] / "src" / "mylib" / "__init__.py"
    mutations: list[tuple[str, Callable[[], object]]] = [
        ("cell", lambda: set_cell(nbs / "cell" / "nb.ipynb", "assert 1 + 1 == 3")),
        ("sibling", lambda: (nbs / "sibling" / "data.txt").write_text("changed")),
        ("linked", lambda: (outside / "value.txt").write_text("2")),
        ("hidden", lambda: (nbs / "hidden" / ".conf" / "s.json").write_text('{"ok": false}')),
        ("editable", lambda: src.write_text("VALUE = 2\n")),
        ("golden", golden_says_y),
        ("control", version_control),
    ]
    failing: set[str] = set()
    for where, mutate in mutations:
        mutate()
        if where != "control":
            failing.add(f"nbs/{where}/nb.ipynb")
        check(python, tmp_path, failing)
    # the control mutation left its notebook's key as it was: Unchanged, and rightly so
    assert run(python, tmp_path)["nbs/control/nb.ipynb"] == "Unchanged"


@pytest.mark.parametrize("var, good, bad", [("TZ", "UTC", "America/New_York"), ("LANG", "C.UTF-8", "en_US.UTF-8")])
def test_after_a_change_of_a_variable_the_kernel_inherits_run_gives_the_fresh_verdict(python, tmp_path, var, good, bad):
    write_notebook(tmp_path / "nbs" / "reads" / "nb.ipynb", [f"import os\nassert os.environ.get({var!r}) == {good!r}"])
    write_notebook(tmp_path / "nbs" / "control" / "nb.ipynb", ["print('control')"])
    assert set(run(python, tmp_path, env={var: good}).values()) == {"Succeeded"}
    assert set(run(python, tmp_path, env={var: good}).values()) == {"Unchanged"}
    check(python, tmp_path, {"nbs/reads/nb.ipynb"}, env={var: bad})
    check(python, tmp_path, set(), env={var: good})  # back: its own key's newest job is a fresh Succeeded


def test_after_a_change_of_the_tools_own_code_run_gives_the_fresh_verdict(python, tmp_path):
    """A copy of the package with its comparison changed (every text now differs), run
    through PYTHONPATH: the earlier Succeeded must not stand for the changed tool."""
    write_golden(write_notebook(tmp_path / "nbs" / "golden" / "nb.ipynb", ["print('x')"]), "x\n")
    copy = tmp_path / "tool"
    shutil.copytree(PKG, copy / "jupyter_nbvalidation",
                    ignore=shutil.ignore_patterns("__pycache__", "labextension", "static"))
    compile_bytecode(copy / "jupyter_nbvalidation")
    env = {"PYTHONPATH": str(copy)}
    assert run(python, tmp_path, env=env) == {"nbs/golden/nb.ipynb": "Succeeded"}
    assert run(python, tmp_path, env=env) == {"nbs/golden/nb.ipynb": "Unchanged"}
    with open(copy / "jupyter_nbvalidation" / "verdict" / "compare.py", "a", encoding="utf-8") as f:
        f.write("\n\ndef texts_equal(*args, **kwargs):  # a change of behaviour\n    return False\n")
    check(python, tmp_path, {"nbs/golden/nb.ipynb"}, env=env)
