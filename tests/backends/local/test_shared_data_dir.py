"""Several processes on one data dir: real Jupyter servers and real
``jupyter nbvalidation submit --wait`` CLI processes, real kernels, one
SQLite file. Only the lease holder reconciles; every job is validated
exactly once, with the right verdict and one event per transition; a
SIGKILLed holder is replaced and its job still ends with the right verdict."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from helpers import wait, write_notebook

from jupyter_nbvalidation.backends.local import same_process_alive
from jupyter_nbvalidation.core.model import Phase

NOBUILD = {"podConfig": {"buildConfig": {"enabled": False}}}


def _holder(*apis) -> str:
    """The lease holder's identity, once one of the servers holds it (a server
    answers /health a moment before its first lease attempt)."""
    def look():
        health = [api.request("GET", "health")["lease"] for api in apis]
        held = [h for h in health if h["isHolder"]]
        return held[0]["holderIdentity"] if held else None

    return wait(look, 60, "a server to hold the lease")


def _terminal(api, name):
    job = api.request("GET", f"jobs/{name}")
    return job if job["status"].get("phase") in Phase.TERMINAL else None


def _cli(root: Path, data_dir: Path, nb: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jupyter_nbvalidation.cli.main", "submit", str(root / nb), "--wait",
                             "--local", "--root-dir", str(root), "--data-dir", str(data_dir), "-o", "json", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "JUPYTER_RUNTIME_DIR": str(root.parent / "cli-runtime")})


def _check_job(data_dir: Path, job: dict, events: list[dict]) -> None:
    """Validated exactly once (one attempt folder, one runner started); one event per transition."""
    st = job["status"]
    runs = sorted((data_dir / "jobs" / job["metadata"]["uid"]).glob("run-*"))
    assert [r.name for r in runs] == ["run-1"], (job["metadata"]["name"], [r.name for r in runs])
    owner = json.loads((runs[0] / "owner.json").read_text())
    assert owner.get("runner"), owner  # started once, by one engine
    assert (runs[0] / "result.json").is_file()
    transitions = st["transitions"]
    # A job that waited for an admission slot also has a Normal Queued event, which is not a
    # transition (the phase does not change): at most one per admission point, the build's (in
    # Initializing) and the validation's (in BuildComplete); every other event is exactly one
    # transition's.
    queued = [e for e in events if e["reason"] == "Queued"]
    assert len(queued) <= 2 and all(e["type"] == "Normal" for e in queued), (
        job["metadata"]["name"], [e["reason"] for e in events])
    moved = [e for e in events if e["reason"] != "Queued"]
    assert len(moved) == len(transitions), (job["metadata"]["name"], [e["reason"] for e in events])
    assert [e["reason"] for e in moved] == [t["reason"] for t in transitions]
    assert len({e["metadata"]["name"] for e in events}) == len(events)


def test_two_servers_and_two_clis_validate_every_job_exactly_once(server_proc, tmp_path):
    a, b = server_proc("a"), server_proc("b")  # same tmp_path: one root, one data dir
    for s in (a, b):
        s.extra_args = ["--LocalBackend.max_parallel_validations=3"]
        s.start()
    root, data_dir = a.root, a.data_dir
    apis = [a.client(), b.client()]
    # who holds the lease: exactly one of the two
    holder = _holder(*apis)
    health = [api.request("GET", "health")["lease"] for api in apis]
    assert [h["holderIdentity"] for h in health] == [holder, holder]
    assert sorted(h["isHolder"] for h in health) == [False, True], health

    expected: dict[str, str] = {}  # notebook -> verdict
    for i in range(40):
        nb = f"nb{i:02d}.ipynb"
        if i % 7 == 3:
            write_notebook(root / nb, [f"x = {i}", "raise ValueError('planted failure')"])
            expected[nb] = Phase.FAILED
        else:
            write_notebook(root / nb, [f"print({i} * 2)"])
            expected[nb] = Phase.SUCCEEDED
    build_every = 5  # nb00, nb05, ...: build an environment (one shared key: built once, reused)
    cli_nbs = [f"nb{i:02d}.ipynb" for i in range(34, 40)]  # two streams of three sequential CLIs
    rest_nbs = [f"nb{i:02d}.ipynb" for i in range(34)]

    def spec(nb: str) -> dict:
        i = int(nb[2:4])
        return {"notebook": {"path": nb}, **({} if i % build_every == 0 else NOBUILD)}

    def cli_stream(nbs: list[str]) -> list[tuple[str, int, dict]]:
        out = []
        for nb in nbs:
            extra = () if int(nb[2:4]) % build_every == 0 else ("--no-build",)
            p = _cli(root, data_dir, nb, *extra)
            stdout, stderr = p.communicate(timeout=1800)
            assert p.returncode in (0, 1), (nb, p.returncode, stderr[-2000:])
            out.append((nb, p.returncode, json.loads(stdout)))
        return out

    with ThreadPoolExecutor(2) as pool:
        streams = [pool.submit(cli_stream, cli_nbs[0::2]), pool.submit(cli_stream, cli_nbs[1::2])]
        names: dict[str, str] = {}
        for k, nb in enumerate(rest_nbs):
            job = apis[k % 2].request("POST", "jobs", spec(nb))
            names[job["metadata"]["name"]] = nb
        cli_results = [r for s in streams for r in s.result(timeout=3000)]

    for nb, code, job in cli_results:
        assert job["status"]["phase"] == expected[nb], (nb, job["status"])
        assert code == (0 if expected[nb] == Phase.SUCCEEDED else 1)
        names[job["metadata"]["name"]] = nb
    assert len(names) == 40
    for name, nb in names.items():
        done = wait(lambda name=name: _terminal(apis[0], name), 1800, f"{nb} to finish")
        assert done["status"]["phase"] == expected[nb], (nb, done["status"])
        if expected[nb] == Phase.FAILED:
            assert "planted failure" in json.dumps(done["status"]), done["status"]
        events = wait(lambda done=done, name=name: (lambda e: e if len(e) >= len(done["status"]["transitions"]) else None)(
            apis[1].request("GET", f"jobs/{name}/events")["items"]), 30, f"{nb}'s events")
        _check_job(data_dir, done, events)
    built = [j for j in apis[0].request("GET", "jobs", params={"limit": 100})["items"]
             if (j["status"].get("buildStatus") or {}).get("imageReference")]
    assert len(built) == 8
    assert len({j["status"]["buildStatus"]["imageReference"] for j in built}) == 1
    assert len([d for d in (data_dir / "envs").iterdir() if not d.name.startswith(".")]) == 1


def test_sigkill_of_the_holder_mid_run_a_follower_takes_over(server_proc, tmp_path):
    a, b = server_proc("a").start(), server_proc("b").start()  # same tmp_path: one root, one data dir
    servers = {s.client().request("GET", "health")["lease"]["identity"]: s for s in (a, b)}
    holder_id = _holder(a.client(), b.client())
    holder = servers[holder_id]
    follower = b if holder is a else a
    api = follower.client()
    write_notebook(a.root / "slow.ipynb", ["import time\ntime.sleep(6)", "print('slept')"])
    write_notebook(a.root / "slowbad.ipynb", ["import time\ntime.sleep(6)", "assert False, 'planted'"])
    good = api.request("POST", "jobs", {"notebook": {"path": "slow.ipynb"}, **NOBUILD})["metadata"]["name"]
    bad = api.request("POST", "jobs", {"notebook": {"path": "slowbad.ipynb"}, **NOBUILD})["metadata"]["name"]
    # both runners started by the holder (its owner record names it)
    def running(name):
        job = api.request("GET", f"jobs/{name}")
        if job["status"].get("phase") != Phase.VALIDATION_RUNNING:
            return None
        owner = job["metadata"]["uid"]
        f = a.data_dir / "jobs" / owner / "run-1" / "owner.json"
        doc = json.loads(f.read_text()) if f.is_file() else {}
        return doc if doc.get("runner") else None

    owners = [wait(lambda n=n: running(n), 120, f"{n} to be running") for n in (good, bad)]
    assert {o["holder"] for o in owners} == {holder_id}
    holder.kill()
    killed_at = time.monotonic()
    # the follower takes the lease within its duration (generous margin on a loaded machine)
    new = wait(lambda: (lambda h: h if h["lease"]["isHolder"] else None)(api.request("GET", "health")),
                60, "the follower to take the lease")
    assert new["lease"]["holderIdentity"] == new["lease"]["identity"] != holder_id
    took = time.monotonic() - killed_at
    assert took < 60
    try:
        done = {n: wait(lambda n=n: _terminal(api, n), 300, f"{n} to finish") for n in (good, bad)}
        assert done[good]["status"]["phase"] == Phase.SUCCEEDED, done[good]["status"]
        assert done[bad]["status"]["phase"] == Phase.FAILED, done[bad]["status"]
        assert "planted" in json.dumps(done[bad]["status"])
        for n, job in done.items():
            runs = sorted((a.data_dir / "jobs" / job["metadata"]["uid"]).glob("run-*"))
            # the dead holder's runner lived on (its own session): it was adopted, not run again
            assert [r.name for r in runs] == ["run-1"], [r.name for r in runs]
            events = api.request("GET", f"jobs/{n}/events")["items"]
            assert [e["reason"] for e in events] == [t["reason"] for t in job["status"]["transitions"]]
        # a job submitted after the kill is validated by the new holder
        late = api.request("POST", "jobs", {"notebook": {"path": "slow.ipynb"}, **NOBUILD})["metadata"]["name"]
        late_job = wait(lambda: _terminal(api, late), 300, "the late job")
        assert late_job["status"]["phase"] == Phase.SUCCEEDED
        late_owner = json.loads(next((a.data_dir / "jobs" / late_job["metadata"]["uid"]).glob("run-*/owner.json"))
                                .read_text())
        assert late_owner["holder"] == new["lease"]["identity"]
    finally:
        for o in owners:  # the killed server's runners, if still there (verified pid + start)
            if same_process_alive(o.get("runner")):
                os.killpg(o["runner"]["pid"], signal.SIGKILL)


def test_cli_beside_a_holder_only_submits_and_waits(server_proc, tmp_path):
    s = server_proc("a").start()
    write_notebook(s.root / "nb.ipynb", ["print('hello')"])
    holder = _holder(s.client())
    p = _cli(s.root, s.data_dir, "nb.ipynb", "--no-build")
    stdout, stderr = p.communicate(timeout=600)
    assert p.returncode == 0, stderr[-2000:]
    job = json.loads(stdout)
    assert job["status"]["phase"] == Phase.SUCCEEDED
    owner = json.loads(next((s.data_dir / "jobs" / job["metadata"]["uid"]).glob("run-*/owner.json")).read_text())
    assert owner["holder"] == holder  # the server ran it; the CLI never held the lease
    assert s.client().request("GET", "health")["lease"]["holderIdentity"] == holder
