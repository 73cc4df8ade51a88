"""A clean kernel and a separate clean runner on the local backend (real engine,
SQLite, runner process and kernel): nothing of the server's environment reaches
either; the job's podConfig.env reaches the kernel and not the runner."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from conftest import make_local
from helpers import wait

PROBE = r'''
import glob, os, sys, site, json
SERVER = json.loads({server!r})
problems = []
if "JUPYTER_TOKEN" in os.environ or "NBV_SERVER_SECRET" in os.environ:
    problems.append("the server's token reached the kernel")
for var in ("JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR", "IPYTHONDIR", "HOME"):
    if os.environ.get(var) == SERVER[var]:
        problems.append(f"{{var}} is the server's")
if "planted_by_startup" in dir(__builtins__) or "planted_by_startup" in globals():
    problems.append("an IPython startup file of the server ran")
if site.ENABLE_USER_SITE or any(p.startswith(SERVER["user_site"]) for p in sys.path):
    problems.append("user site-packages are on sys.path")
for probe, what in (("nbv_server_pythonpath_probe", "the server's PYTHONPATH"),
                    ("nbv_user_site_probe", "the server's user site-packages")):
    try:
        __import__(probe)
        problems.append(what + " reached the kernel")
    except ImportError:
        pass
import nbv_job_probe  # the job's own PYTHONPATH (podConfig.env) does reach the kernel
parent = open(f"/proc/{{os.getppid()}}/cmdline", "rb").read()
if b"jupyter_nbvalidation.runner" in parent:
    runner = open(f"/proc/{{os.getppid()}}/environ", "rb").read().split(b"\0")
    if any(v.startswith(b"PYTHONPATH=") and SERVER["job_path"].encode() in v for v in runner):
        problems.append("the job's podConfig.env reached the runner")
    if any(v.startswith((b"JUPYTER_TOKEN=", b"NBV_SERVER_SECRET=")) for v in runner):
        problems.append("the server's token reached the runner")
elif b"sandbox.py" in parent:  # in the sandbox (runner/sandbox.py) no process of the runner's is seen
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            if b"jupyter_nbvalidation.runner" in open(path, "rb").read():
                problems.append(f"{{path}} is the runner's, seen in the sandbox")
        except OSError:
            pass
else:
    problems.append("the kernel's parent is not the runner")
assert not problems, problems
print("clean")
'''

WAIT = """import os, time
t = time.monotonic()
while not os.path.exists({flag!r}) and time.monotonic() - t < 180:
    time.sleep(0.1)
"""


def runner_environ(job_path: str, timeout: float) -> list[bytes]:
    """The environment of the runner of the kernel that has ``job_path`` in its PYTHONPATH
    (podConfig.env): the first process above the kernel running the runner's module (a
    forked runner shows the fork server's command line), as the probe reads it without
    the sandbox."""
    mark = b"PYTHONPATH=" + job_path.encode()

    def find() -> list[bytes] | None:
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"ipykernel_launcher" not in cmdline or not any(v.startswith(mark) for v in environ):
                continue
            up = pid
            while up not in ("0", "1"):
                up = Path(f"/proc/{up}/stat").read_text().rpartition(")")[2].split()[1]
                if b"jupyter_nbvalidation.runner" in Path(f"/proc/{up}/cmdline").read_bytes():
                    return Path(f"/proc/{up}/environ").read_bytes().split(b"\0")
        return None

    return wait(find, timeout, f"a kernel with {job_path} on its PYTHONPATH (and a runner above it)", interval=0.2)


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A server environment holding what must not reach a validation."""
    srv = tmp_path / "server"
    dirs = {v: srv / v.lower() for v in ("JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR",
                                          "IPYTHONDIR", "HOME")}
    for var, path in dirs.items():
        path.mkdir(parents=True)
        monkeypatch.setenv(var, str(path))
    startup = dirs["IPYTHONDIR"] / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-x.py").write_text("import builtins\nbuiltins.planted_by_startup = 1\nplanted_by_startup = 1\n")
    (dirs["JUPYTER_RUNTIME_DIR"] / "jpserver-1.json").write_text(json.dumps({"token": "s3cret-token"}))
    monkeypatch.setenv("JUPYTER_TOKEN", "s3cret-token")
    monkeypatch.setenv("NBV_SERVER_SECRET", "s3cret-token")
    server_path = tmp_path / "server-pythonpath"
    server_path.mkdir()
    (server_path / "nbv_server_pythonpath_probe.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(server_path))
    job_path = tmp_path / "root" / "job-lib"
    job_path.mkdir(parents=True)
    (job_path / "nbv_job_probe.py").write_text("")
    # the server's user site-packages (under its HOME), with a module in it
    user_site = dirs["HOME"] / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    user_site.mkdir(parents=True)
    (user_site / "nbv_user_site_probe.py").write_text("")
    return {**{k: str(v) for k, v in dirs.items()}, "user_site": str(user_site), "job_path": str(job_path)}


@pytest.mark.asyncio
async def test_kernel_and_runner_see_nothing_of_the_server(tmp_path, notebook, planted):
    env = make_local(tmp_path)
    await env.engine.start()
    try:
        flag = tmp_path / "root" / "clean" / "go"
        nb = notebook("clean/nb.ipynb", [PROBE.format(server=json.dumps(planted)), WAIT.format(flag=str(flag))])
        job = await env.submit(notebook={"path": nb}, podConfig={
            "buildConfig": {"enabled": False}, "env": [{"name": "PYTHONPATH", "value": planted["job_path"]}]})
        # the runner's environment, read from outside while its kernel waits (a sandboxed
        # kernel cannot see the runner's process at all)
        runner = await asyncio.to_thread(runner_environ, planted["job_path"], 120)
        flag.write_text("")
        done = await env.engine.wait_for_terminal(job["metadata"]["name"], env.run_timeout)
    finally:
        await env.engine.stop()
    st = done["status"]
    assert st["phase"] == "Succeeded", (st.get("message"), json.dumps(st.get("results"))[-3000:])
    assert not [v for v in runner if v.startswith(b"PYTHONPATH=") and planted["job_path"].encode() in v], (
        "the job's podConfig.env reached the runner")
    assert not [v for v in runner if v.startswith((b"JUPYTER_TOKEN=", b"NBV_SERVER_SECRET="))], (
        "the server's token reached the runner")


@pytest.mark.asyncio
async def test_the_probe_detects_a_leak(tmp_path, notebook, planted, monkeypatch):
    """The converse: the same probe fails when the server's token does reach the kernel."""
    env = make_local(tmp_path)
    await env.engine.start()
    try:
        nb = notebook("leak/nb.ipynb", [PROBE.format(server=json.dumps(planted))])
        done = await env.run(notebook={"path": nb}, podConfig={
            "buildConfig": {"enabled": False},
            "env": [{"name": "PYTHONPATH", "value": planted["job_path"]},
                    {"name": "JUPYTER_TOKEN", "value": "s3cret-token"}]})
    finally:
        await env.engine.stop()
    assert done["status"]["phase"] == "Failed"
    assert "the server's token reached the kernel" in json.dumps(done["status"])

