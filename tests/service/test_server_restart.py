"""A real Jupyter server killed (SIGKILL) during Building and started again
on the same data dir finishes the job: the half-built environment is never
used, nothing is lost, and each transition has exactly one event."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import phases, pids_alive, reasons, wait, write_notebook

from jupyter_nbvalidation.core.model import Phase, Reason


def test_server_killed_mid_build_resumes(server_proc):
    server = server_proc("first").start()
    write_notebook(server.root / "proj" / "nb.ipynb", ["import tabulate\nprint(tabulate.__version__)"])
    (server.root / "proj" / "requirements.txt").write_text("tabulate==0.9.0\n")
    api = server.client()
    # venv + pip is slow enough to be caught mid-build
    job = api.request("POST", "jobs", {"notebook": {"path": "proj/nb.ipynb"},
                                       "podConfig": {"buildConfig": {"strategy": "venv"}}})
    name = job["metadata"]["name"]
    envs = server.data_dir / "envs"
    wait(lambda: api.request("GET", f"jobs/{name}")["status"].get("phase") == Phase.BUILDING, 30, "Building", interval=0.05)
    tmp_dirs = wait(lambda: [p for p in envs.glob(".tmp-*") if p.is_dir() and (p / "bin").exists()],
                     60, "a half-built environment", interval=0.05)
    pid_files = list(envs.glob(".tmp-*.pid"))
    build_pids = [int(p.read_text()) for p in pid_files if p.read_text().strip()]
    server.kill()
    assert api_unreachable(api)
    # the crash left a half-built environment (and possibly its orphaned build process)
    assert tmp_dirs[0].exists()
    assert not any((envs / d.name.split("-")[1]).exists() for d in tmp_dirs if len(d.name.split("-")) > 1)

    again = server_proc("second")
    again.root, again.data_dir, again.runtime, again.token = server.root, server.data_dir, server.runtime, server.token
    again.start()
    api2 = again.client()
    done = wait(lambda: (lambda j: j if j["status"].get("phase") in Phase.TERMINAL else None)(
        api2.request("GET", f"jobs/{name}")), 240, "the job to finish")
    st = done["status"]
    assert st["phase"] == Phase.SUCCEEDED, st
    assert phases(done) == [Phase.INITIALIZING, Phase.BUILDING, Phase.BUILD_COMPLETE,
                            Phase.VALIDATION_RUNNING, Phase.SUCCEEDED]
    env = Path(st["buildStatus"]["imageReference"])
    assert env.parent == envs and not env.name.startswith(".tmp-")
    assert (env / ".nbvalidation-env.json").is_file()
    assert not list(envs.glob(".tmp-*")), "the half-built environment was not swept"
    assert pids_alive(build_pids) == []
    run = json.loads(next(again.data_dir.glob(f"jobs/{done['metadata']['uid']}/run-*/run.json")).read_text())
    assert run["python"] == str(env / "bin" / "python")
    events = wait(lambda: (lambda e: e if len(e) >= 5 else None)(
        api2.request("GET", f"jobs/{name}/events")["items"]), 10, "events")
    assert reasons(events) == [Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_SUCCEEDED,
                               Reason.VALIDATION_STARTED, Reason.VALIDATION_SUCCEEDED]
    listed = api2.request("GET", "jobs")["items"]
    assert [j["metadata"]["name"] for j in listed] == [name]  # nothing lost, nothing duplicated


def api_unreachable(api) -> bool:
    from jupyter_nbvalidation.clients.http import ClientError

    try:
        api.request("GET", "health", timeout=2)
    except ClientError:
        return True
    return False
