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
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_local
from helpers import wait_async, write_notebook

from jupyter_nbvalidation.backends.local import ENV_MARKER, LAST_USE, RECORD_FILE
from jupyter_nbvalidation.backends.local.environments import env_fingerprint
from jupyter_nbvalidation.core.model import Phase, Reason

JUPYTER = shutil.which("jupyter", path=os.path.dirname(sys.executable)) or "jupyter"

WRITES = ("import os, sysconfig\n"
          "site = sysconfig.get_paths()['purelib']\n"
          "open(os.path.join(site, 'nbv_undeclared.py'), 'w').write('VALUE = 42\\n')")
IMPORTS = "import nbv_undeclared\nprint(nbv_undeclared.VALUE)"


def _run(project: Path, data: Path, *notebooks: str) -> dict[str, dict]:
    config = data.parent / "config-sandbox-off"  # the CLI reads the Jupyter config: the sandbox off
    config.mkdir(exist_ok=True)
    (config / "jupyter_server_config.json").write_text(json.dumps({"LocalBackend": {"sandbox": "off"}}))
    proc = subprocess.run([JUPYTER, "nbvalidation", "run", *notebooks, "--local", "--data-dir", str(data),
                           "--no-cache", "-j", "1", "-o", "json"], cwd=project, capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL,
                          env={**os.environ, "JUPYTER_RUNTIME_DIR": str(data.parent / "no-servers"),
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
    proc = subprocess.run([JUPYTER, "nbvalidation", "gc", "--local", "--data-dir", str(data)], cwd=project,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not [d for d in envs.iterdir() if d.name.startswith(".retired-")]


def test_the_fingerprint_sees_what_a_kernel_can_change_and_not_what_running_writes(tmp_path):
    env = tmp_path / "env"
    site = env / "lib" / "python3.11" / "site-packages"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("x = 1\n")
    (env / "bin").mkdir()
    (env / "bin" / "python").symlink_to(sys.executable)
    before = env_fingerprint(env)
    assert before == env_fingerprint(env)

    # bytecode beside the sources, this backend's own files at the top: not changes
    (site / "pkg" / "__pycache__").mkdir()
    (site / "pkg" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\0" * 16)
    for own in (ENV_MARKER, LAST_USE, RECORD_FILE, f".{RECORD_FILE}.1.abc.tmp"):
        (env / own).write_text("{}")
    assert env_fingerprint(env) == before

    # a new module, a new package, a file rewritten, a link repointed: changes
    for change in (lambda: (site / "extra.py").write_text(""),
                   lambda: (site / "newpkg").mkdir(),
                   lambda: (site / "pkg" / "__init__.py").write_text("x = 22\n"),
                   lambda: ((env / "bin" / "python").unlink(), (env / "bin" / "python").symlink_to("/bin/sh"))):
        change()
        after = env_fingerprint(env)
        assert after != before
        before = after


async def _until(local, name: str, ok, timeout: float = 180.0) -> dict:
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
        done = {n: await local.engine.wait_for_terminal(n, 300) for n in (writer, reader)}
        assert done[writer]["status"]["phase"] == Phase.SUCCEEDED, done[writer]["status"]
        st = done[reader]["status"]
        assert st["phase"] == Phase.FAILED and st["reason"] == Reason.VALIDATION_FAILED, st
        assert "nbv_undeclared" in json.dumps(st.get("results") or st), st
        envs = local.backend.root / "envs"
        assert len([d for d in envs.iterdir() if d.name.startswith(".retired-")]) == 1
    finally:
        await local.engine.stop()


@pytest.mark.asyncio
async def test_a_job_whose_environment_changed_while_it_waited_for_its_run_is_not_validated_in_it(tmp_path):
    """The reader reused the environment while it was intact, then waited for its turn (one
    validation at a time) while the writer wrote into it: it ends InfrastructureFailed, saying
    so, and runs no cell (without the look before its kernel starts it passed)."""
    local = make_local(tmp_path, backend_kw={"max_parallel_validations": 1, "sandbox": "off"})
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
        done = {n: await local.engine.wait_for_terminal(n, 300) for n in (writer, reader)}
        assert done[writer]["status"]["phase"] == Phase.SUCCEEDED, done[writer]["status"]
        st = done[reader]["status"]
        assert st["phase"] == Phase.FAILED and st["reason"] == Reason.INFRASTRUCTURE_FAILED, st
        assert "changed after it was built" in st["message"], st
        assert not st.get("results"), st
    finally:
        await local.engine.stop()
