"""Lifecycle: DELETE removes a finished job with its events and files and
still cancels a running one; retention removes old finished jobs; the
environment cache is capped with least-recently-used eviction that never
touches an environment a job still uses; `jupyter nbvalidation delete` and
`gc`. Real server (pytest-jupyter), real engine, kernels, venvs, SQLite."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from helpers import cli, wait_async, write_notebook
from helpers import rest_call as call
from helpers import rest_wait_terminal as wait_terminal
from tornado.httpclient import HTTPClientError

from jupyter_nbvalidation.core.model import Phase, Reason
from jupyter_nbvalidation.store.base import NotFound

NOBUILD = {"podConfig": {"buildConfig": {"enabled": False}}}



async def error(jp_fetch, *parts, **kw):
    with pytest.raises(HTTPClientError) as e:
        await call(jp_fetch, *parts, **kw)
    return e.value.code, json.loads(e.value.response.body)["error"]



async def test_delete_finished_removes_job_events_and_files(jp_fetch, jp_root_dir, tmp_path):
    data = tmp_path / "nbv-data"
    write_notebook(jp_root_dir / "ok.ipynb", ["print(2 + 2)"])
    job = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "ok.ipynb"}, **NOBUILD})
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    done = await wait_terminal(jp_fetch, name, 900)
    assert done["status"]["phase"] == Phase.SUCCEEDED
    assert (data / "jobs" / uid / "run-1" / "executed.ipynb").is_file()
    assert (await call(jp_fetch, "jobs", name, "events"))["items"]
    # cancelOnly on a finished job changes nothing
    r = await call(jp_fetch, "jobs", name, method="DELETE", params={"cancelOnly": "true"}, raw=True)
    assert r.code == 200 and json.loads(r.body)["metadata"]["name"] == name
    assert (data / "jobs" / uid).is_dir()
    r = await call(jp_fetch, "jobs", name, method="DELETE", raw=True)
    assert r.code == 200
    body = json.loads(r.body)
    assert body["kind"] == "Status" and body["details"]["name"] == name
    for path in ((name,), (name, "events"), (name, "notebook"), (name, "timeline")):
        code, err = await error(jp_fetch, "jobs", *path)
        assert code == 404
    assert not (data / "jobs" / uid).exists()
    code, _ = await error(jp_fetch, "jobs", name, method="DELETE")
    assert code == 404
    code, err = await error(jp_fetch, "jobs", name, method="DELETE", params={"cancelOnly": "maybe"})
    assert code == 400 and err["field"] == "cancelOnly"


async def test_delete_running_cancels_and_keeps_it(jp_fetch, jp_root_dir, tmp_path):
    write_notebook(jp_root_dir / "slow.ipynb", ["import time\ntime.sleep(60)"])
    job = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "slow.ipynb"}, **NOBUILD})
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    async def running() -> bool:
        return (await call(jp_fetch, "jobs", name))["status"].get("phase") == Phase.VALIDATION_RUNNING

    await wait_async(running, 600, f"{name} to run its slow cell", interval=0.1)
    r = await call(jp_fetch, "jobs", name, method="DELETE", raw=True)
    assert r.code == 202 and json.loads(r.body)["metadata"]["name"] == name
    done = await wait_terminal(jp_fetch, name, 300)
    assert (done["status"]["phase"], done["status"]["reason"]) == (Phase.FAILED, Reason.CANCELLED)
    assert (tmp_path / "nbv-data" / "jobs" / uid).is_dir()  # cancelled, not removed
    r = await call(jp_fetch, "jobs", name, method="DELETE", raw=True)  # now it has ended: removed
    assert r.code == 200 and not (tmp_path / "nbv-data" / "jobs" / uid).exists()


@pytest.mark.asyncio
async def test_retention_removes_only_old_finished_jobs(local, notebook):
    nb = notebook("ok.ipynb", ["print(1)"])
    old = await local.run(timeout=900, notebook={"path": nb}, **NOBUILD)
    fresh = await local.run(timeout=900, notebook={"path": nb}, **NOBUILD)
    slow = await local.submit(notebook={"path": notebook("slow.ipynb", ["import time\ntime.sleep(600)"])}, **NOBUILD)
    # the old one finished two hours ago (as stored)
    st = dict(old["status"], completionTime="2020-01-01T00:00:00.000000Z")
    old = await local.store.update_status(old["metadata"]["name"], st, old["metadata"]["resourceVersion"])
    old_dir, fresh_dir = local.backend.job_dir(old), local.backend.job_dir(fresh)
    assert old_dir.is_dir() and await local.events(old)
    report = await local.backend.collect(job_ttl=3600, env_cache_max_bytes=0)
    assert [j["name"] for j in report["jobs"]] == [old["metadata"]["name"]]
    with pytest.raises(NotFound):
        await local.store.get(old["metadata"]["name"])
    assert await local.store.list_events(old) == []
    assert not old_dir.exists()
    # the fresh one and the one not finished stay
    assert (await local.store.get(fresh["metadata"]["name"]))["status"]["phase"] == Phase.SUCCEEDED
    assert fresh_dir.is_dir() and await local.events(fresh)
    assert (await local.store.get(slow["metadata"]["name"]))["status"].get("phase") not in Phase.TERMINAL
    # ttl 0: keep everything
    assert (await local.backend.collect(job_ttl=0, env_cache_max_bytes=0))["jobs"] == []
    assert (await local.backend.collect(job_ttl=3600, env_cache_max_bytes=0))["jobs"] == []
    await local.engine.request_cancel(slow["metadata"]["name"])
    await local.engine.wait_for_terminal(slow["metadata"]["name"], 300)


def _fake_env(envs: Path, key: str, mib: int, last_use: float) -> Path:
    """A published environment folder (marker + payload) with a given last use."""
    d = envs / key
    d.mkdir(parents=True)
    (d / ".nbvalidation-env.json").write_text(json.dumps({"key": key}))
    (d / "payload").write_bytes(os.urandom(mib * 2**20))
    (d / ".last-use").touch()
    os.utime(d / ".last-use", (last_use, last_use))
    os.utime(d / ".nbvalidation-env.json", (last_use, last_use))
    return d


@pytest.mark.asyncio
async def test_lru_eviction_never_removes_an_environment_in_use(local, notebook):
    local.backend.env_min_idle = 0
    # the job runs until the test lets it go (the project root is in the kernel's view)
    release = local.root / "release"
    nb = notebook("slow.ipynb", [f"import os, time\nwhile not os.path.exists({str(release)!r}):\n    time.sleep(0.05)",
                                 "print('done')"])
    job = await local.submit(notebook={"path": nb})  # builds a real environment
    name = job["metadata"]["name"]
    try:
        async def running() -> dict | None:
            job = await local.store.get(name)
            assert job["status"].get("phase") not in Phase.TERMINAL, job["status"]
            return job if job["status"].get("phase") == Phase.VALIDATION_RUNNING else None

        job = await wait_async(running, 900, f"{name} to run", interval=0.1)
        real = Path(job["status"]["buildStatus"]["imageReference"])
        envs = real.parent
        now = time.time()
        os.utime(real / ".last-use", (now - 9000, now - 9000))  # the least recently used of all
        a = _fake_env(envs, "a" * 20, 2, now - 3000)
        b = _fake_env(envs, "b" * 20, 2, now - 2000)
        c = _fake_env(envs, "c" * 20, 2, now - 1000)
        real_bytes = sum(e["bytes"] for e in local.backend._env_entries() if e["key"] == real.name)
        # room for the real one and one fake: the two least recently used fakes go, the real one stays
        report = await local.backend.collect(job_ttl=0, env_cache_max_bytes=real_bytes + 3 * 2**20)
        assert [e["key"] for e in report["envs"]] == [a.name, b.name]
        assert real.is_dir() and c.is_dir() and not a.exists() and not b.exists()
        assert not list(envs.glob(".evict-*"))
        # a cap nothing can meet: still never the one in use
        report = await local.backend.collect(job_ttl=0, env_cache_max_bytes=1)
        assert [e["key"] for e in report["envs"]] == [c.name] and real.is_dir()
        assert (await local.store.get(name))["status"]["phase"] == Phase.VALIDATION_RUNNING  # in use all along
    finally:  # whatever happened above, the job is not left waiting
        release.touch()
    done = await local.engine.wait_for_terminal(name, 900)
    assert done["status"]["phase"] == Phase.SUCCEEDED  # validated in its environment to the end
    # once no job uses it, it is evicted like any other
    report = await local.backend.collect(job_ttl=0, env_cache_max_bytes=1)
    assert [e["key"] for e in report["envs"]] == [real.name] and not real.exists()


def test_cli_delete_and_gc(tmp_path):
    root, data = tmp_path / "root", tmp_path / "data"
    write_notebook(root / "ok.ipynb", ["print('ok')"])
    common = ["--local", "--root-dir", str(root), "--data-dir", str(data)]
    where = {"cwd": tmp_path, "timeout": 600, "no_servers": True}
    first = cli("submit", str(root / "ok.ipynb"), "--wait", "--no-build", "-o", "json", *common, **where)
    assert first.returncode == 0, first.stderr
    second = cli("submit", str(root / "ok.ipynb"), "--wait", "--no-build", "-o", "json", *common, **where)
    assert second.returncode == 0, second.stderr
    j1, j2 = json.loads(first.stdout), json.loads(second.stdout)
    out = cli("delete", j1["metadata"]["name"], *common, **where)
    assert out.returncode == 0 and "deleted" in out.stdout, out.stderr
    assert not (data / "jobs" / j1["metadata"]["uid"]).exists()
    gone = cli("describe", j1["metadata"]["name"], *common, **where)
    assert gone.returncode == 2 and "no job named" in gone.stderr
    kept = cli("gc", "--job-ttl", "3600", *common, **where)
    assert kept.returncode == 0 and "0 job(s)" in kept.stdout, kept.stderr
    time.sleep(1.5)
    gc = cli("gc", "--job-ttl", "1", *common, **where)
    assert gc.returncode == 0, gc.stderr
    assert f"removed job {j2['metadata']['name']}" in gc.stdout and "1 job(s)" in gc.stdout
    assert not (data / "jobs" / j2["metadata"]["uid"]).exists()
    listed = cli("list", "-o", "json", *common, **where)
    assert json.loads(listed.stdout)["items"] == []
