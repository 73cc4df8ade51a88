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
import random
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


# --- what the kernel actually read (issue 41): the read-set ---------------------------------------

def dependency(python: Path, name: str, value: int) -> Path:
    """``name`` installed (not editable) in the venv of ``python``, version 1.0 with a RECORD:
    its module, whose source an edit may change while its version stays."""
    sp = next((python.parents[1] / "lib").glob("python*/site-packages"))
    (sp / name).mkdir(exist_ok=True)
    (sp / name / "__init__.py").write_text(f"VALUE = {value}\n")
    info = sp / f"{name}-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "RECORD").write_text(f"{name}/__init__.py,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    return sp / name / "__init__.py"


def helper(path: Path, ok: bool) -> None:
    """A sibling notebook (itself a notebook `run` validates: no cells) that another one reads."""
    nbformat.write(nbformat.v4.new_notebook(metadata={"ok": ok}), str(path))


def test_each_false_pass_of_issue_41_gives_the_fresh_verdict(python, tmp_path):
    """The four cases of issue 41, each against its fresh twin: a script the notebook runs
    loses its run bit; a sibling notebook read under a computed name changes; an editable
    project's data file (not a .py) changes; a dependency's source is edited under the same
    version. Before each change every notebook is Unchanged; after it, `run` says what
    `run --no-cache` says, and the changed one fails."""
    nbs = tmp_path / "nbs"
    write_notebook(nbs / "script" / "nb.ipynb", ["import subprocess\nsubprocess.run(['./tool.sh'], check=True)"])
    (nbs / "script" / "tool.sh").write_text("#!/bin/sh\necho ok\n")
    (nbs / "script" / "tool.sh").chmod(0o755)
    write_notebook(nbs / "computed" / "nb.ipynb", ["import json\n"
                                                   "assert json.load(open('hel' + 'per.ipynb'))['metadata']['ok']"])
    helper(nbs / "computed" / "helper.ipynb", True)
    data = python.parents[2] / "src" / "mylib" / "settings.json"
    data.write_text('{"ok": true}')
    write_notebook(nbs / "data" / "nb.ipynb", ["import json, os, mylib\n"
                                               "path = os.path.join(os.path.dirname(mylib.__file__), 'settings.json')\n"
                                               "assert json.load(open(path))['ok']"])
    source = dependency(python, "depx", 1)
    write_notebook(nbs / "dependency" / "nb.ipynb", ["import depx\nassert depx.VALUE == 1, depx.VALUE"])
    names = {f"nbs/{d}/nb.ipynb" for d in ("script", "computed", "data", "dependency")} | {"nbs/computed/helper.ipynb"}
    assert run(python, tmp_path) == dict.fromkeys(names, "Succeeded")
    assert run(python, tmp_path) == dict.fromkeys(names, "Unchanged")
    failing: set[str] = set()
    for where, change in [
        ("script", lambda: (nbs / "script" / "tool.sh").chmod(0o644)),
        ("computed", lambda: helper(nbs / "computed" / "helper.ipynb", False)),
        ("data", lambda: data.write_text('{"ok": false}')),
        ("dependency", lambda: source.write_text("VALUE = 22\n")),
    ]:
        change()
        failing.add(f"nbs/{where}/nb.ipynb")
        check(python, tmp_path, failing)


def test_a_read_outside_the_root_makes_the_verdict_uncacheable_and_says_so(python, tmp_path, monkeypatch):
    """The file is reached by its real path, outside the root (a link in the notebook's folder
    leads there): the verdict is not reused, and says so. Without the sandbox, which would hide
    the machine's /tmp where the file is (a link leads to nothing there): what a kernel read
    outside the root is what is tested, wherever it can read."""
    config = tmp_path / "config-sandbox-off"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(json.dumps({"LocalBackend": {"sandbox": "off"}}))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(config))
    (tmp_path / "outside").mkdir()
    outside = tmp_path / "outside" / "value.txt"
    outside.write_text("ok")
    root = tmp_path / "root"
    write_notebook(root / "nbs" / "reads" / "nb.ipynb", ["import os\n"
                                                         "assert open(os.path.realpath('data/value.txt')).read() == 'ok'"])
    (root / "nbs" / "reads" / "data").symlink_to(tmp_path / "outside", target_is_directory=True)
    write_notebook(root / "nbs" / "control" / "nb.ipynb", ["print('control')"])
    assert run(python, root) == {"nbs/reads/nb.ipynb": "Succeeded", "nbs/control/nb.ipynb": "Succeeded"}
    proc = subprocess.run([str(python), "-m", "jupyter_nbvalidation.cli.main", "run", "nbs/reads", "--no-build",
                           "--local", "--data-dir", str(root / "data")], cwd=root, capture_output=True, text=True,
                          timeout=900, stdin=subprocess.DEVNULL,
                          env={**os.environ, "JUPYTER_RUNTIME_DIR": str(root / "no-servers")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "not reused by the verdict cache: the kernel read " + str(outside) in proc.stdout, proc.stdout
    outside.write_text("changed")
    check(python, root, {"nbs/reads/nb.ipynb"})
    assert run(python, root)["nbs/control/nb.ipynb"] == "Unchanged"


def test_random_edits_of_what_the_kernel_reads_never_make_run_and_a_fresh_run_disagree(python, tmp_path):
    """Random edits (content, mode, rename) of files notebooks read under computed names, through
    a script they run, or by listing a folder: after each round `run` and `run --no-cache` agree."""
    seed = int(os.environ.get("NBV_PROPERTY_SEED") or random.SystemRandom().randrange(1 << 30))
    rng = random.Random(seed)
    nbs = tmp_path / "nbs"
    shared = nbs / "shared"
    shared.mkdir(parents=True)
    (shared / "data.txt").write_text("ok")
    write_notebook(nbs / "computed" / "nb.ipynb", ["assert open('../shared/' + 'da' + 'ta.txt').read() == 'ok'"])
    write_notebook(nbs / "listed" / "nb.ipynb", ["import os\nassert 'data.txt' in os.listdir('../shared')"])
    write_notebook(nbs / "script" / "nb.ipynb", ["import subprocess\n"
                                                 "out = subprocess.run(['./tool.sh'], capture_output=True, check=True)\n"
                                                 "assert out.stdout == b'ok\\n', out"])
    write_notebook(nbs / "sibling" / "nb.ipynb", ["import json\n"
                                                  "assert json.load(open('hel' + 'per.ipynb'))['metadata']['ok']"])
    helper(nbs / "sibling" / "helper.ipynb", True)
    tool = nbs / "script" / "tool.sh"
    tool.write_text("#!/bin/sh\necho ok\n")
    tool.chmod(0o755)

    def toggle_content() -> None:
        target = rng.choice([shared / "data.txt", tool, nbs / "sibling" / "helper.ipynb"])
        if target.exists():
            text = target.read_text()
            swaps = [("true", "false"), ("false", "true"), ("ok", "no"), ("no", "ok")]
            old, new = next((a, b) for a, b in swaps if a in text)
            target.write_text(text.replace(old, new))

    def toggle_mode() -> None:
        tool.chmod(tool.stat().st_mode ^ 0o111)

    def rename() -> None:
        a, b = shared / "data.txt", shared / "data.old"
        (a.rename(b) if a.exists() else b.rename(a)) if (a.exists() or b.exists()) else None

    def unrelated() -> None:  # a file no notebook reads, outside every notebook's folder: Unchanged is right
        (shared / "notes.md").write_text(str(rng.random()))

    edits = [toggle_content, toggle_mode, rename, unrelated]
    assert set(run(python, tmp_path).values()) == {"Succeeded"}
    for round_ in range(4):
        done = [rng.choice(edits) for _ in range(rng.randint(1, 2))]
        for edit in done:
            edit()
        cached, fresh = run(python, tmp_path), run(python, tmp_path, "--no-cache")
        assert {nb: SAME.get(v, v) for nb, v in cached.items()} == fresh, (seed, round_, [e.__name__ for e in done],
                                                                          cached, fresh)
