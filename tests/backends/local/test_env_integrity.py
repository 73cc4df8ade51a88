"""A shared environment is handed on only as its build left it.

Jobs with the same requirements share one built environment (local backend). A
notebook that installs or writes into its environment (``%pip install``, a module
written to site-packages) must not make the next notebook of the same
requirements pass on what that one never declared: its verdict must be its
fresh twin's. Real CLI runs, real virtual environments and kernels.

With the sandbox on, a kernel cannot write into its environment at all (read-only mounts and
Landlock, issue 40: tests/security); these run with LocalBackend.sandbox off, where a kernel
writes with the user's rights and the environment's fingerprint is what stands."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from conftest import make_local
from helpers import cli, wait_async, write_notebook

import jupyter_nbvalidation.backends.local.seal as seal
from jupyter_nbvalidation.backends.local import ENV_MARKER, LAST_USE
from jupyter_nbvalidation.core.model import Phase, Reason

WRITES = ("import os, sysconfig\n"
          "site = sysconfig.get_paths()['purelib']\n"
          "open(os.path.join(site, 'nbv_undeclared.py'), 'w').write('VALUE = 42\\n')")
IMPORTS = "import nbv_undeclared\nprint(nbv_undeclared.VALUE)"


def _run(project: Path, data: Path, *notebooks: str) -> dict[str, dict]:
    config = data.parent / "config-sandbox-off"  # the CLI reads the Jupyter config: the sandbox off
    config.mkdir(exist_ok=True)
    (config / "jupyter_server_config.json").write_text(json.dumps({"LocalBackend": {"sandbox": "off"}}))
    proc = cli("run", *notebooks, "--local", "--data-dir", str(data), "--no-cache", "-j", "1", "-o", "json",
               cwd=project, timeout=600, env={"JUPYTER_RUNTIME_DIR": str(data.parent / "no-servers"),
                                              "JUPYTER_CONFIG_DIR": str(config)})
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    return {o["notebook"]: o for o in json.loads(proc.stdout)}


def test_a_notebook_that_writes_into_its_environment_does_not_pass_the_next_one(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "requirements.txt").write_text("six==1.16.0\n")
    write_notebook(project / "writes.ipynb", ["import six", WRITES])
    write_notebook(project / "imports.ipynb", ["import six", IMPORTS])
    write_notebook(project / "plain.ipynb", ["import six\nprint(six.__version__)"])

    # the fresh twin: the importing notebook alone, in an environment nothing ran in
    twin = _run(project, tmp_path / "twin-data", "imports.ipynb")["imports.ipynb"]
    assert twin["verdict"] == "Failed" and twin["firstFailure"].startswith("cell 2"), twin

    data = tmp_path / "data"
    first = _run(project, data, "writes.ipynb")["writes.ipynb"]
    assert first["verdict"] == "Succeeded", first  # writing into its own environment is its own business
    envs = data / "envs"
    (changed,) = [d for d in envs.iterdir() if not d.name.startswith(".")]
    assert (changed / "lib").is_dir() and list(changed.glob("lib/python*/site-packages/nbv_undeclared.py"))

    second = _run(project, data, "imports.ipynb")["imports.ipynb"]
    assert (second["verdict"], second["firstFailure"]) == (twin["verdict"], twin["firstFailure"]), (second, twin)
    # the changed environment was retired (out of sight), a fresh one built under the same key
    retired = [d.name for d in envs.iterdir() if d.name.startswith(".retired-")]
    assert len(retired) == 1 and retired[0].startswith(f".retired-{changed.name}-"), retired
    assert (envs / changed.name / ENV_MARKER).is_file()
    assert not list((envs / changed.name).glob("lib/python*/site-packages/nbv_undeclared.py"))
    builds = len(list((data / "logs").glob("build-*.log")))
    assert builds == 2

    # an environment only run in (bytecode written beside its sources, its record kept) is reused as it is
    for _ in range(2):
        assert _run(project, data, "plain.ipynb")["plain.ipynb"]["verdict"] == "Succeeded"
    assert len(list((data / "logs").glob("build-*.log"))) == builds
    # the next collection with no job active removes the retired one
    proc = cli("gc", "--local", "--data-dir", str(data), cwd=project, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not [d for d in envs.iterdir() if d.name.startswith(".retired-")]


def _env(tmp_path: Path) -> tuple[Path, Path]:
    env = tmp_path / "env"
    site = env / "lib" / "python3.11" / "site-packages"
    (site / "pkg" / "__pycache__").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("x = 1\n")
    (site / "pkg" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\0" * 16)
    (env / "bin").mkdir()
    (env / "bin" / "python").symlink_to(sys.executable)
    (env / ENV_MARKER).write_text("{}")
    return env, site


def test_the_seal_sees_every_change_bytecode_and_marker_included_and_not_the_last_use(tmp_path):
    env, site = _env(tmp_path)
    manifest = seal.take(env)
    assert seal.verify(env, manifest) == []
    (env / LAST_USE).touch()  # the backend's own: its last use (LRU), never sealed
    os.utime(env / LAST_USE, ns=(1, 1))
    assert seal.verify(env, manifest) == []

    def pyc() -> Path:
        return site / "pkg" / "__pycache__" / "__init__.cpython-311.pyc"

    changes = [
        ("lib/python3.11/site-packages/extra.py", lambda: (site / "extra.py").write_text("")),
        ("lib/python3.11/site-packages/newpkg", lambda: (site / "newpkg").mkdir()),
        ("lib/python3.11/site-packages/pkg/__pycache__/__init__.cpython-311.pyc", lambda: pyc().write_bytes(b"\1" * 16)),
        ("lib/python3.11/site-packages/pkg/__pycache__/other.cpython-311.pyc",
         lambda: (pyc().parent / "other.cpython-311.pyc").write_bytes(b"")),
        ("lib/python3.11/site-packages/pkg/__init__.py", lambda: (site / "pkg" / "__init__.py").chmod(0o755)),
        ("lib/python3.11/site-packages/pkg/__init__.py", lambda: (site / "pkg" / "__init__.py").unlink()),
        ("bin/python", lambda: ((env / "bin" / "python").unlink(), (env / "bin" / "python").symlink_to("/bin/sh"))),
        (ENV_MARKER, lambda: (env / ENV_MARKER).write_text('{"log": "/etc/shadow"}')),
        (LAST_USE, lambda: (env / LAST_USE).symlink_to(tmp_path / "elsewhere")),
    ]
    for i, (path, change) in enumerate(changes):
        env, site = _env(tmp_path / str(i))
        manifest = seal.take(env)
        change()
        assert seal.verify(env, manifest) == [path], path


def test_a_same_size_edit_with_its_mtime_put_back_is_seen_and_a_same_content_copy_is_not(tmp_path):
    """The skip of files whose (inode, size, ctime, mtime, mode) are as sealed is safe: an edit
    that keeps the size and puts the mtime back still moves the ctime, so the file is hashed."""
    env, site = _env(tmp_path)
    module = site / "pkg" / "__init__.py"
    manifest = seal.take(env)
    before = module.stat()
    module.write_text("x = 2\n")  # the same size
    os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = module.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert after.st_ctime_ns != before.st_ctime_ns
    assert seal.verify(env, manifest) == ["lib/python3.11/site-packages/pkg/__init__.py"]

    # the same content in a new inode (a restore, a copy): hashed again, and found as sealed
    module.write_text("x = 1\n")
    assert seal.verify(env, manifest) == []
    copy = tmp_path / "copy"
    shutil.copytree(env, copy, symlinks=True)
    assert seal.verify(copy, manifest) == []


def test_a_file_shared_with_another_path_cannot_be_sealed(tmp_path):
    """A hard link (uv's default from its package cache): an edit through one path would change
    the other, so the build that made it is refused its seal."""
    env, site = _env(tmp_path)
    os.link(site / "pkg" / "__init__.py", tmp_path / "cache-copy.py")
    with pytest.raises(seal.SealError, match="pkg/__init__.py shares its inode"):
        seal.take(env)


def test_a_change_is_described_in_plain_words():
    assert seal.describe(["lib/python3.11/site-packages/six.py"]) == "1 file: six.py"
    assert seal.describe([f"lib/python3.11/site-packages/m{i}.py" for i in range(5)]) == \
        "5 files, e.g. m0.py, m1.py, m2.py"
    assert "no seal" in seal.describe([seal.NO_SEAL])


def test_a_built_environment_has_its_own_files_compiled_and_sealed_and_a_run_changes_nothing(tmp_path):
    """uv installs copies (no file shares an inode with its cache), compiled; a kernel that imports
    them writes no bytecode, so the environment stays as sealed and is reused."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "requirements.txt").write_text("six==1.16.0\n")
    write_notebook(project / "plain.ipynb", ["import six, json, decimal\nprint(six.__version__)"])
    data = tmp_path / "data"
    assert _run(project, data, "plain.ipynb")["plain.ipynb"]["verdict"] == "Succeeded"
    (env,) = [d for d in (data / "envs").iterdir() if not d.name.startswith(".")]
    (six_py,) = env.glob("lib/python*/site-packages/six.py")
    assert list(six_py.parent.glob("__pycache__/six.cpython-*.pyc"))
    shared = [p for p in env.rglob("*") if p.is_file() and not p.is_symlink() and p.stat().st_nlink > 1]
    assert not shared, shared[:5]
    manifest = seal.load(seal.seal_of(data / "envs", env.name))
    assert manifest is not None and "lib" in manifest["files"]
    assert seal.verify(env, manifest) == []
    assert _run(project, data, "plain.ipynb")["plain.ipynb"]["verdict"] == "Succeeded"
    assert seal.verify(env, manifest) == []
    assert len(list((data / "logs").glob("build-*.log"))) == 1


async def _until(local, name: str, ok, timeout: float = 600.0) -> dict:
    seen: dict = {}

    async def there() -> dict | None:
        seen["job"] = job = await local.store.get(name)
        return job if ok(job.get("status") or {}) else None

    return await wait_async(there, timeout, lambda: f"{name}: {seen['job'].get('status')}", interval=0.1)


def _writer(root: Path, go: Path, write_first: bool) -> str:
    """A notebook that writes a module into its environment's site-packages, before or after
    waiting for ``go`` (a file the test makes)."""
    wait = f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.05)"
    write_notebook(root / "writer.ipynb", [WRITES, wait] if write_first else [wait, WRITES])
    return "writer.ipynb"


@pytest.mark.asyncio
async def test_a_job_that_would_reuse_an_environment_changed_by_a_running_one_waits_then_gets_a_fresh_one(tmp_path):
    """The writer has written and still runs: no rename under its kernel; the reader's build is
    retried (a transient fault) until the writer is done, then gets a fresh environment and the
    fresh twin's verdict."""
    local = make_local(tmp_path, backend_kw={"sandbox": "off"}, max_retries=20, retry_backoff=0.2, max_backoff=1.0)
    await local.engine.start()
    try:
        root, go = local.root, local.root / "go"
        (root / "requirements.txt").write_text("six==1.16.0\n")
        writer = (await local.submit(notebook={"path": _writer(root, go, write_first=True)}))["metadata"]["name"]
        await _until(local, writer, lambda st: (st.get("progress") or {}).get("cellsDone", 0) >= 1)
        write_notebook(root / "reader.ipynb", ["import six", IMPORTS])
        reader = (await local.submit(notebook={"path": "reader.ipynb"}))["metadata"]["name"]
        await _until(local, reader, lambda st: (st.get("buildRetries") or 0) >= 1)
        go.touch()
        done = {n: await local.engine.wait_for_terminal(n, 900) for n in (writer, reader)}
        assert done[writer]["status"]["phase"] == Phase.SUCCEEDED, done[writer]["status"]
        st = done[reader]["status"]
        assert st["phase"] == Phase.FAILED and st["reason"] == Reason.VALIDATION_FAILED, st
        assert "nbv_undeclared" in json.dumps(st.get("results") or st), st
        envs = local.backend.root / "envs"
        assert len([d for d in envs.iterdir() if d.name.startswith(".retired-")]) == 1
    finally:
        await local.engine.stop()


@pytest.mark.asyncio
async def test_a_job_whose_environment_changed_while_it_waited_for_its_run_gets_a_fresh_one_and_its_own_verdict(
        tmp_path):
    """The reader reused the environment while it was intact, then waited for its turn (one
    validation at a time) while the writer wrote into it. Found right before its kernel starts:
    the environment is retired and built again at the same reference, the reader is validated in
    the fresh one and gets its fresh twin's verdict (the undeclared module is not there); the
    EnvironmentRetired notice says so (without the look before its kernel starts it passed; before
    issue 40's rebuild it ended InfrastructureFailed)."""
    local = make_local(tmp_path, backend_kw={"max_parallel_validations": 1, "sandbox": "off"},
                       max_retries=20, retry_backoff=0.2, max_backoff=1.0)
    await local.engine.start()
    try:
        root, go = local.root, local.root / "go"
        (root / "requirements.txt").write_text("six==1.16.0\n")
        writer = (await local.submit(notebook={"path": _writer(root, go, write_first=False)}))["metadata"]["name"]
        await _until(local, writer, lambda st: st.get("phase") == Phase.VALIDATION_RUNNING)
        write_notebook(root / "reader.ipynb", ["import six", IMPORTS])
        reader = (await local.submit(notebook={"path": "reader.ipynb"}))["metadata"]["name"]
        await _until(local, reader, lambda st: bool((st.get("buildStatus") or {}).get("imageReference")))
        go.touch()
        done = {n: await local.engine.wait_for_terminal(n, 900) for n in (writer, reader)}
        assert done[writer]["status"]["phase"] == Phase.SUCCEEDED, done[writer]["status"]
        st = done[reader]["status"]
        assert st["phase"] == Phase.FAILED and st["reason"] == Reason.VALIDATION_FAILED, st
        assert "nbv_undeclared" in json.dumps(st.get("results") or st), st  # ModuleNotFoundError: its own
        assert st["buildStatus"]["imageReference"] == done[writer]["status"]["buildStatus"]["imageReference"]
        events = await local.events(done[reader])
        notes = [e for e in events if e["reason"] == "EnvironmentRetired"]
        assert len(notes) == 1 and notes[0]["type"] == "Warning", events
        assert "right before this job's kernel started" in notes[0]["note"], notes
        assert "nbv_undeclared.py" in notes[0]["note"] and "rebuilt" in notes[0]["note"], notes
        envs = local.backend.root / "envs"
        assert len([d for d in envs.iterdir() if d.name.startswith(".retired-")]) == 1
        (fresh,) = [d for d in envs.iterdir() if not d.name.startswith(".")]
        assert not list(fresh.glob("lib/python*/site-packages/nbv_undeclared.py"))
        assert local.backend._env_changes(fresh.name) == []  # the fresh one is sealed
    finally:
        await local.engine.stop()


@pytest.mark.asyncio
async def test_a_rebuilt_environment_found_changed_too_is_infrastructure_named(tmp_path):
    """Bounded: the environment is found changed before the kernel starts, and again after its
    rebuild (injected: the seal check's answer after Building's look; the builds are real). The
    job is never validated in it, and ends InfrastructureFailed naming both findings; no third build."""
    local = make_local(tmp_path, backend_kw={"sandbox": "off"})
    root = local.root
    (root / "requirements.txt").write_text("six==1.16.0\n")
    write_notebook(root / "nb.ipynb", ["import six"])
    await local.engine.start()
    try:
        first = await local.run(notebook={"path": "nb.ipynb"})  # built, sealed
        assert first["status"]["phase"] == Phase.SUCCEEDED, first["status"]
        real = local.backend._env_changes
        looks: list[str] = []

        def always_changed(key: str) -> list[str]:  # the fault: every look after Building's finds a change
            looks.append(key)
            found = real(key)
            return found if len(looks) == 1 else found or [f"{key}/lib/python3/site-packages/injected.py"]

        local.backend._env_changes = always_changed
        done = await local.run(notebook={"path": "nb.ipynb"})
        events = await local.events(done)
    finally:
        await local.engine.stop()
    st = done["status"]
    assert st["phase"] == Phase.FAILED and st["reason"] == Reason.INFRASTRUCTURE_FAILED, st
    assert "rebuilt one was found changed too" in st["message"] and "injected.py" in st["message"], st
    assert not st.get("results"), st
    assert [e["reason"] for e in events].count("EnvironmentRetired") == 1, events
    assert len(list((local.backend.root / "logs").glob("build-*.log"))) == 2  # the first build and one rebuild
    # the reuse at Building, the look before the kernel, the look after the rebuild
    assert len(looks) == 3, looks
