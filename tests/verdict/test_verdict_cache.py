"""The verdict cache of `jupyter nbvalidation run`: an unchanged notebook is reported with
its earlier Succeeded job and nothing runs; editing the notebook, its golden copy, its
requirements, a file in its folder, the spec or the environment it was validated in runs
exactly that one again; a Failed job never stands in; the same through a running server.
Real kernels and environments; counted by the jobs in the data dir."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import nbformat
from helpers import cli, write_golden, write_notebook


def run(folder: Path, *args: str) -> tuple[int, dict[str, dict]]:
    proc = cli("run", "nbs", "--golden-suffix", ".golden", "-j", "2", "--local", "--data-dir", str(folder / "data"),
               "-o", "json", *args, cwd=folder, timeout=1200, no_servers=True)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return proc.returncode, {row["notebook"]: row for row in json.loads(proc.stdout)}


def jobs(folder: Path) -> int:
    return len([d for d in (folder / "data" / "jobs").iterdir() if not d.name.startswith(".")])  # .pool: kernels


def ran(rows: dict[str, dict]) -> set[str]:
    return {nb for nb, row in rows.items() if row["verdict"] != "Unchanged"}


def test_unchanged_notebooks_run_nothing_and_each_edit_reruns_exactly_its_notebook(tmp_path):
    nbs = tmp_path / "nbs"
    write_golden(write_notebook(nbs / "x" / "nb.ipynb", ["print('x')"]), "x\n")
    write_notebook(nbs / "y" / "nb.ipynb", ["import six\nprint(six.__name__)"])
    (nbs / "y" / "requirements.txt").write_text("six\n")
    write_notebook(nbs / "z" / "nb.ipynb", ["print(open('data.csv').read())"])
    (nbs / "z" / "data.csv").write_text("a,b\n")
    write_notebook(nbs / "w" / "fails.ipynb", ["raise ValueError('never cached')"])
    everything = {"nbs/x/nb.ipynb", "nbs/y/nb.ipynb", "nbs/z/nb.ipynb", "nbs/w/fails.ipynb"}

    code, rows = run(tmp_path)
    assert code == 1 and ran(rows) == everything and jobs(tmp_path) == 4
    first = {nb: row["job"] for nb, row in rows.items()}
    assert rows["nbs/x/nb.ipynb"]["verdict"] == "Succeeded", rows["nbs/x/nb.ipynb"]  # the golden comparison passes

    # nothing changed: the three that succeeded are unchanged, with their earlier job; the failed one runs
    code, rows = run(tmp_path)
    assert ran(rows) == {"nbs/w/fails.ipynb"} and jobs(tmp_path) == 5
    for nb in everything - {"nbs/w/fails.ipynb"}:
        assert rows[nb]["verdict"] == "Unchanged" and rows[nb]["job"] == first[nb]

    def touch_metadata(path: Path) -> None:
        nb = nbformat.read(path, as_version=4)
        nb.metadata["edited"] = nb.metadata.get("edited", 0) + 1
        nbformat.write(nb, str(path))

    edits = [
        ("nbs/x/nb.ipynb", lambda: touch_metadata(nbs / "x" / "nb.golden.ipynb")),
        ("nbs/y/nb.ipynb", lambda: (nbs / "y" / "requirements.txt").write_text("six>=1.0\n")),
        ("nbs/z/nb.ipynb", lambda: (nbs / "z" / "data.csv").write_text("a,b\n1,2\n")),
        ("nbs/x/nb.ipynb", lambda: touch_metadata(nbs / "x" / "nb.ipynb")),
    ]
    count = jobs(tmp_path)
    for notebook, edit in edits:
        edit()
        code, rows = run(tmp_path)
        assert ran(rows) == {notebook, "nbs/w/fails.ipynb"}, (notebook, rows)
        count += 2
        assert jobs(tmp_path) == count
        assert rows[notebook]["verdict"] == "Succeeded", rows

    # the environment y was validated in is evicted: built again, it may resolve six to another
    # version, so y runs again (in the new environment, which then stands for it)
    [y_env] = [d for d in (tmp_path / "data" / "envs").iterdir() if not d.name.startswith(".")
               and json.loads((d / ".nbvalidation-env.json").read_text())["requirements"] == ["six>=1.0"]]
    shutil.rmtree(y_env)
    code, rows = run(tmp_path)
    assert ran(rows) == {"nbs/y/nb.ipynb", "nbs/w/fails.ipynb"}, rows
    assert rows["nbs/y/nb.ipynb"]["verdict"] == "Succeeded" and y_env.is_dir()
    count += 2

    # --no-cache runs every one
    code, rows = run(tmp_path, "--no-cache")
    assert ran(rows) == everything and jobs(tmp_path) == count + 4


def test_the_cache_through_a_running_server(server_proc):
    """The same lookup made by the server (POST unchanged): the CLI's run through it."""
    server = server_proc().start()
    write_notebook(server.root / "a" / "one.ipynb", ["print(1)"])
    write_notebook(server.root / "a" / "two.ipynb", ["raise ValueError('two')"])

    def run_here(*args: str) -> dict[str, dict]:
        proc = cli("run", "a", "--no-build", "-j", "2", "-o", "json", *args, cwd=server.root, timeout=600,
                   env={"JUPYTER_RUNTIME_DIR": str(server.runtime)})
        assert proc.returncode == 1, proc.stdout + proc.stderr
        return {row["notebook"]: row for row in json.loads(proc.stdout)}

    def server_jobs() -> int:
        return len(server.client().request("GET", "jobs", params={"limit": 500})["items"])

    first = run_here()
    assert ran(first) == {"a/one.ipynb", "a/two.ipynb"} and server_jobs() == 2
    again = run_here()
    assert ran(again) == {"a/two.ipynb"} and server_jobs() == 3
    assert again["a/one.ipynb"]["verdict"] == "Unchanged" and again["a/one.ipynb"]["job"] == first["a/one.ipynb"]["job"]
    # another spec (a parameter) is another key: both run; then that one is unchanged too
    assert ran(run_here("-p", "epochs", "1")) == {"a/one.ipynb", "a/two.ipynb"} and server_jobs() == 5
    assert ran(run_here("-p", "epochs", "1")) == {"a/two.ipynb"}
    assert ran(run_here("--no-cache")) == {"a/one.ipynb", "a/two.ipynb"}


def test_the_runner_and_the_environment_are_in_the_key(monkeypatch, tmp_path):
    from fake_backend import FakeBackend as Backend  # the port is abstract: its defaults, through the fake

    import jupyter_nbvalidation.verdict.cache as verdict_cache
    import jupyter_nbvalidation.verdict.identity as identity

    backend = Backend()  # the port's defaults: a backend's name and cell timeout are in the key
    args = ({"notebook": {"path": "nb.ipynb"}}, {"notebook.ipynb": b"{}"})
    key = verdict_cache.verdict_key(*args, "built:abc", workdir=None, notebook_path=None, backend=backend)
    assert key == verdict_cache.verdict_key(*args, "built:abc", workdir=None, notebook_path=None, backend=backend)
    assert key != verdict_cache.verdict_key(*args, "built:abd", workdir=None, notebook_path=None, backend=backend)
    assert verdict_cache.verdict_key(*args, None, workdir=None, notebook_path=None, backend=backend) is None
    monkeypatch.setattr(identity, "_runner_digest", "another runner")
    assert key != verdict_cache.verdict_key(*args, "built:abc", workdir=None, notebook_path=None, backend=backend)
    # with the build disabled the environment is this interpreter with every distribution in it
    unbuilt = verdict_cache.installed_distributions(sys.executable)
    assert unbuilt is not None and verdict_cache.installed_distributions("/usr/bin/false") is None
    (tmp_path / "site" / "newpkg-1.0.dist-info").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert verdict_cache.installed_distributions(sys.executable) != unbuilt


# -- "Unchanged" means a fresh run now gives the same verdict (issue 20): each mutation below
# made `run` answer Unchanged where `run --no-cache` failed. Real kernels, in-process, no build.

def run_env(folder: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, dict]:
    proc = cli("run", "nbs", "--no-build", "--local", "--data-dir", str(folder / "data"), "-o", "json", *args,
               cwd=folder, timeout=600, env={"JUPYTER_RUNTIME_DIR": str(folder / "no-servers"), **(env or {})})
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return {row["notebook"]: row for row in json.loads(proc.stdout)}


def verdict(rows: dict[str, dict]) -> str:
    [row] = rows.values()
    return row["verdict"]


def test_a_newer_failure_with_the_same_key_is_never_hidden_by_an_older_success(tmp_path):
    # a file outside the notebook's folder is not in the key (the kernel reads the real
    # one, through its copy's mirror): the same key can give two verdicts, and the newest
    # one is the one that stands
    settings = tmp_path / "settings.json"
    settings.write_text('{"ok": true}')
    write_notebook(tmp_path / "nbs" / "nb.ipynb", ["import json\nassert json.load(open('../settings.json'))['ok']"])
    assert verdict(run_env(tmp_path)) == "Succeeded"
    assert verdict(run_env(tmp_path)) == "Unchanged"
    settings.write_text('{"ok": false}')
    assert verdict(run_env(tmp_path, "--no-cache")) == "Failed"
    assert verdict(run_env(tmp_path)) == "Failed"  # was Unchanged: the older Succeeded job of the same key
    settings.write_text('{"ok": true}')
    assert verdict(run_env(tmp_path)) == "Succeeded"  # runs: the newest with the key failed
    assert verdict(run_env(tmp_path)) == "Unchanged"


def test_a_hidden_file_beside_the_notebook_is_in_the_key(tmp_path):
    # the kernel's copy of the folder holds hidden files, so the key does too (one walk:
    # core/folders.walk_folder); version control's folder is in neither
    settings = tmp_path / "nbs" / "hidden" / ".settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"ok": true}')
    write_notebook(tmp_path / "nbs" / "nb.ipynb",
                   ["import json\nassert json.load(open('hidden/.settings.json'))['ok']"])
    assert verdict(run_env(tmp_path)) == "Succeeded"
    (tmp_path / "nbs" / ".git").mkdir()
    (tmp_path / "nbs" / ".git" / "index").write_text("changes with every commit")
    assert verdict(run_env(tmp_path)) == "Unchanged"
    settings.write_text('{"ok": false}')
    assert verdict(run_env(tmp_path)) == "Failed"  # was Unchanged: hidden entries were left out of the key


def test_the_locale_and_time_zone_the_kernel_inherits_are_in_the_key(tmp_path):
    write_notebook(tmp_path / "nbs" / "nb.ipynb", ["import os\nassert os.environ.get('TZ') == 'UTC', os.environ.get('TZ')"])
    assert verdict(run_env(tmp_path, env={"TZ": "UTC"})) == "Succeeded"
    assert verdict(run_env(tmp_path, env={"TZ": "UTC"})) == "Unchanged"
    assert verdict(run_env(tmp_path, "--no-cache", env={"TZ": "America/New_York"})) == "Failed"
    assert verdict(run_env(tmp_path, env={"TZ": "UTC"})) == "Unchanged"  # its own key's newest job succeeded
    assert verdict(run_env(tmp_path, env={"TZ": "America/New_York"})) == "Failed"  # was Unchanged
    assert verdict(run_env(tmp_path, env={"TZ": "UTC", "LC_ALL": "C.UTF-8"})) == "Succeeded"  # another key: runs


def test_a_symlinked_folder_beside_the_notebook_is_in_the_key(tmp_path):
    outside = tmp_path / "shared-data"
    outside.mkdir()
    (outside / "value.txt").write_text("1")
    (tmp_path / "nbs").mkdir()
    (tmp_path / "nbs" / "data").symlink_to(outside, target_is_directory=True)
    (outside / "loop").symlink_to(outside, target_is_directory=True)  # a cycle is walked once
    write_notebook(tmp_path / "nbs" / "nb.ipynb", ["assert open('data/value.txt').read() == '1'"])
    assert verdict(run_env(tmp_path)) == "Succeeded"
    assert verdict(run_env(tmp_path)) == "Unchanged"
    (outside / "value.txt").write_text("2")
    assert verdict(run_env(tmp_path)) == "Failed"  # was Unchanged: os.walk did not follow the link


def test_an_editable_install_is_keyed_by_its_source(monkeypatch, tmp_path):
    import jupyter_nbvalidation.verdict.cache as verdict_cache

    site = tmp_path / "site"
    src = tmp_path / "src" / "mylib"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("VALUE = 1\n")
    info = site / "mylib-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "direct_url.json").write_text(json.dumps({"url": (tmp_path / "src").as_uri(),
                                                      "dir_info": {"editable": True}}))
    monkeypatch.syspath_prepend(str(site))
    before = verdict_cache.installed_distributions(sys.executable)
    assert before is not None and before == verdict_cache.installed_distributions(sys.executable)
    (src / "__init__.py").write_text("VALUE = 2\n")  # same name, same version, other code
    assert verdict_cache.installed_distributions(sys.executable) != before
    (src / "node_modules").mkdir()
    (src / "node_modules" / "x.py").write_text("")  # left out, as in a folder's key
    after = verdict_cache.installed_distributions(sys.executable)
    (src / "settings.json").write_text('{"not": "code"}')  # a data file beside the modules: in the key (issue 41)
    assert verdict_cache.installed_distributions(sys.executable) != after


def test_what_can_change_a_verdict_is_in_the_key_and_only_that(monkeypatch, tmp_path):
    """The runner's identity (verdict/identity.py): an edit to the runner or to a module a
    verdict's judgement runs through (the comparison first) voids every cached verdict; an
    edit to the CLI, the server's engine and service, or the docs keeps them (issue 39)."""
    import jupyter_nbvalidation.verdict.identity as identity

    copy = tmp_path / "pkg"
    shutil.copytree(identity._PKG, copy, ignore=shutil.ignore_patterns("__pycache__", "labextension", "static"))
    (tmp_path / "docs").mkdir()
    shutil.copy(identity._PKG.parent / "docs" / "architecture.md", tmp_path / "docs" / "architecture.md")
    monkeypatch.setattr(identity, "_PKG", copy)

    def fresh() -> str:
        monkeypatch.setattr(identity, "_runner_digest", None)
        return identity.runner_identity()

    def edit(path: Path) -> None:
        with open(path, "a", encoding="utf-8") as f:
            f.write("\n# a change of behaviour\n")

    first = fresh()
    for kept in ("cli/main.py", "engine/engine.py", "service/jobs.py", "../docs/architecture.md"):
        edit(copy / kept)
        assert fresh() == first, kept  # the cache holds
    for module in ("verdict/compare.py", "runner/execute.py", *identity.VERDICT_MODULES):
        edit(copy / module)
        changed = fresh()
        assert changed != first, module  # the cache is void
        first = changed


def test_an_upgraded_distribution_of_the_run_voids_the_key(monkeypatch, tmp_path):
    """The distributions a run goes through count by their RECORD (every file they installed,
    with its hash): another version, or the same version with other content, voids the key;
    a distribution no run goes through does not count."""
    import jupyter_nbvalidation.verdict.identity as identity

    site = tmp_path / "site"

    def install(name: str, version: str, record: str) -> None:
        info = site / f"{name}-{version}.dist-info"
        for old in site.glob(f"{name}-*.dist-info"):
            shutil.rmtree(old)
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "RECORD").write_text(record)

    def fresh() -> str:
        monkeypatch.setattr(identity, "_runner_digest", None)
        return identity.runner_identity()

    before = fresh()
    install("nbformat", "99.0", "nbformat/__init__.py,sha256=aaaa,10\n")
    monkeypatch.syspath_prepend(str(site))  # found before the real one, as an import would
    assert dict(identity.run_distributions())["nbformat"].version == "99.0"
    first = fresh()
    assert first != before
    install("nbformat", "99.0", "nbformat/__init__.py,sha256=bbbb,10\n")  # rebuilt: same version, other content
    second = fresh()
    assert second != first
    install("nbformat", "99.1", "nbformat/__init__.py,sha256=bbbb,10\n")  # upgraded
    third = fresh()
    assert third not in (first, second)
    install("unrelated-tool", "1.0", "unrelated_tool/__init__.py,sha256=cccc,10\n")
    assert fresh() == third
    install("unrelated-tool", "2.0", "unrelated_tool/__init__.py,sha256=dddd,10\n")
    assert fresh() == third


def test_the_verdict_modules_cover_what_the_runner_imports():
    """Every module the runner imports beside runner/ (runner.SHARED_MODULES) is either one a
    verdict's judgement runs through or named, with the reason, as judging nothing."""
    import ast

    import jupyter_nbvalidation.verdict.identity as identity
    from jupyter_nbvalidation.runner import SHARED_MODULES

    assert set(SHARED_MODULES) <= set(identity.VERDICT_MODULES) | set(identity.SHARED_BUT_NOT_JUDGING)
    assert not set(identity.VERDICT_MODULES) & set(identity.SHARED_BUT_NOT_JUDGING)
    for module in (*identity.VERDICT_MODULES, *identity.SHARED_BUT_NOT_JUDGING):
        assert (identity._PKG / module).is_file(), module
    for module in identity.SHARED_BUT_NOT_JUDGING:
        if module.endswith("__init__.py"):  # empty: at most a docstring
            body = ast.parse((identity._PKG / module).read_text(encoding="utf-8")).body
            assert all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body), module


def test_a_notebook_that_opts_out_always_runs_and_a_wrong_setting_is_refused(tmp_path):
    # "nbvalidation": {"cache": false} in the notebook's metadata: no verdict key, so never Unchanged
    write_notebook(tmp_path / "nbs" / "nb.ipynb", ["print('always')"])
    nb = nbformat.read(tmp_path / "nbs" / "nb.ipynb", as_version=4)
    nb.metadata["nbvalidation"] = {"cache": False}
    nbformat.write(nb, str(tmp_path / "nbs" / "nb.ipynb"))
    assert verdict(run_env(tmp_path)) == "Succeeded"
    assert verdict(run_env(tmp_path)) == "Succeeded"  # ran again: not Unchanged
    nb.metadata["nbvalidation"] = {"cache": True}
    nbformat.write(nb, str(tmp_path / "nbs" / "nb.ipynb"))
    assert verdict(run_env(tmp_path)) == "Succeeded"
    assert verdict(run_env(tmp_path)) == "Unchanged"
    # a value of the wrong type or a key it does not know: refused at submit, naming it; nothing runs
    for bad, named in (({"cache": "no"}, "metadata.nbvalidation.cache: must be bool"),
                       ({"cahce": False}, "metadata.nbvalidation.cahce: not a setting")):
        nb.metadata["nbvalidation"] = bad
        nbformat.write(nb, str(tmp_path / "nbs" / "nb.ipynb"))
        proc = cli("submit", "nbs/nb.ipynb", "--local", "--data-dir", str(tmp_path / "data"), cwd=tmp_path,
                   timeout=300, no_servers=True)
        assert proc.returncode == 2 and named in proc.stderr, proc.stdout + proc.stderr
