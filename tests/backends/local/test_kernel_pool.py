"""Issue 43: pre-started kernels (backends/local/pool.py, runner/pool.py), on the real local
backend (engine, SQLite, runner processes, kernels in the sandbox where the machine has one).

One backend with the pool on: its first run finds no slot and starts its own kernel (the
cold twin); that run's key is then warmed, and the next run of the same key takes the slot
(the pool's counters say which). What the two kernels show, their verdicts, their read-sets,
the verdict-cache key and the environment record must be the same."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path

import pytest
from conftest import make_local
from helpers import leftover_processes, wait_async, write_notebook

NOBUILD = {"buildConfig": {"enabled": False}}

# first statement: sys.modules and the namespace before the probe imports or defines anything
PROBE = r'''_nbv_mods, _nbv_ns = sorted(__import__("sys").modules), sorted(get_ipython().user_ns)
import json, os, re, sys, time
_ip = get_ipython()
_home = os.environ["HOME"]
_tmp = os.path.dirname(os.path.dirname(_home))  # the runner's temporary folder: <tmp>/kernel/home
_cwd = os.getcwd()
_run = os.environ["NBVALIDATION_RUN_ID"]
def _norm(value):
    text = json.dumps(value, sort_keys=True, default=str)
    text = text.replace(_tmp, "<TMP>").replace(_cwd, "<CWD>").replace(_run, "<RUN>")
    return json.loads(re.sub(r"(socket|pipe|anon_inode|eventfd):\[?\d+\]?", r"\1:N", text))
_fds = {}  # what is open (the numbers differ from one kernel to the next: its threads open sockets in any order)
for _fd in sorted(os.listdir("/proc/self/fd"), key=int):
    try:
        _fds[_fd] = os.readlink(f"/proc/self/fd/{_fd}")
    except OSError:
        pass
print("PROBE " + json.dumps(_norm({
    "modules": _nbv_mods, "namespace": _nbv_ns, "path": sys.path, "environ": dict(os.environ),
    "cwd": _cwd, "listing": sorted(os.listdir(".")), "dh": [str(d) for d in _ip.user_ns["_dh"]],
    "fds": sorted(_fds.values()), "extensions": sorted(_ip.extension_manager.loaded), "flags": list(sys.flags),
    "tz": [time.tzname, time.timezone, os.environ.get("TZ")], "argv": sys.argv,
    "count": _ip.execution_count, "history": len(_ip.user_ns["In"]),
    "mounts": sorted(ln.split()[4] for ln in open("/proc/self/mountinfo")), "umask": os.umask(0o22),
    "uid": [os.getuid(), os.getgid()], "pid": os.getpid(), "ppid": os.getppid(),
}), sort_keys=True))'''


async def _executed_probe(env, job: dict) -> dict:
    nb = await env.backend.executed_notebook(job)
    text = "".join(o.get("text", "") for o in nb["cells"][0].get("outputs", []) if o.get("name") == "stdout")
    line = next((ln for ln in text.splitlines() if ln.startswith("PROBE ")), None)
    assert line, f"the probe printed nothing: {json.dumps(nb['cells'][0].get('outputs'))[-2000:]}"
    return json.loads(line[len("PROBE "):])


async def _run_pair(tmp_path: Path, rel: str, sources: list[str], files: dict[str, str] | None = None,
                    **spec) -> tuple[object, dict, dict]:
    """The same notebook run twice on one backend with the pool on: (env, cold job, pooled job)."""
    env = make_local(tmp_path, backend_kw={"kernel_pool_size": 1})
    for name, text in (files or {}).items():
        (env.root / name).parent.mkdir(parents=True, exist_ok=True)
        (env.root / name).write_text(text)
    write_notebook(env.root / rel, sources)
    await env.engine.start()
    try:
        pool = env.backend._pool
        cold = await env.run(notebook={"path": rel}, podConfig=NOBUILD, **spec)
        assert (pool.missed, pool.taken) == (1, 0), pool.state()
        # the slot its run asked for: started off the critical path, ready before the next run
        await wait_async(lambda: pool.count() == 1 and all(
            s.ready.done() for s in pool._slots[next(iter(pool._slots))]), 120, lambda: f"a ready slot: {pool.state()}")
        pooled = await env.run(notebook={"path": rel}, podConfig=NOBUILD, **spec)
        assert (pool.missed, pool.taken) == (1, 1), pool.state()
        return env, cold, pooled
    finally:
        await env.engine.stop()


def _host_mount_points() -> set[str]:
    with open("/proc/self/mountinfo") as f:
        return {ln.split()[4] for ln in f}


async def _sample_host_mounts(into: set[str]) -> None:
    """The host's mount points while the pair runs: a kernel's sandbox starts from a copy of
    the host's table, which others change meanwhile (the real node's Pods mount and unmount
    their volumes beside this test in CI)."""
    while True:
        into |= _host_mount_points()
        await asyncio.sleep(0.1)


@pytest.mark.asyncio
async def test_a_pooled_kernel_shows_what_a_cold_kernel_shows(tmp_path):
    host: set[str] = set()
    sampler = asyncio.get_running_loop().create_task(_sample_host_mounts(host))
    try:
        env, cold, pooled = await _run_pair(tmp_path, "nb.ipynb", [PROBE, "print('second cell')"],
                                            files={"data.txt": "data\n"})
    finally:
        sampler.cancel()
    for job in (cold, pooled):
        assert job["status"]["phase"] == "Succeeded", job["status"].get("message")
    seen_cold, seen_pooled = await _executed_probe(env, cold), await _executed_probe(env, pooled)
    differ = {k: (seen_cold[k], seen_pooled[k]) for k in seen_cold if seen_cold[k] != seen_pooled[k]}
    # a new process each: its pid and its parent's (the sandbox's namespace gives the same ones)
    differ.pop("pid", None), differ.pop("ppid", None)
    # the mounts: the same, but for the host's own that came or went between the two starts
    # (never one of the sandbox's: those are in no host table)
    mounts = differ.pop("mounts", None)
    if mounts is not None:
        changed = set(mounts[0]) ^ set(mounts[1])
        assert changed <= host, f"mounts only one kernel has, not the host's: {sorted(changed - host)}"
    assert not differ, json.dumps(differ, indent=1)[:6000]
    assert seen_pooled["cwd"] == "<CWD>" and seen_pooled["listing"] == ["data.txt", "nb.ipynb"]
    # nothing the runner did before the notebook counts: its cells are executions 1 and 2
    executed = await env.backend.executed_notebook(pooled)
    assert [c["execution_count"] for c in executed["cells"]] == [1, 2]


def _comparable(job: dict) -> dict:
    st = job["status"]
    results = [{k: v for k, v in r.items() if k != "executionTime"} for r in st.get("results") or []]
    return {"phase": st["phase"], "reason": st.get("reason"), "message": st.get("message"),
            "validation": {k: v for k, v in (st.get("validationStatus") or {}).items() if "Time" not in k and k != "duration"},
            "results": results, "failedCellIndex": st.get("failedCellIndex"), "readSet": st.get("readSet"),
            "environment": st.get("environment"),
            "verdictKey": (job["metadata"].get("annotations") or {}).get("nbvalidation.dev/verdict-key")}


@pytest.mark.asyncio
@pytest.mark.parametrize("case", ["reads", "fails"])
async def test_the_same_verdict_read_set_and_environment_record_whichever_kernel_ran(tmp_path, case):
    """A notebook in a subfolder reading files of its folder and of the root (the read-set), and
    one whose cell fails: verdict, read-set, cache key and environment record the same."""
    sources = ["print(open('local.txt').read()); print(open('../shared.csv').read())",
               "import json\nprint(sorted(__import__('os').listdir('.')))"]
    if case == "fails":
        sources.append("1 / 0")
    env, cold, pooled = await _run_pair(tmp_path, "sub/nb.ipynb", sources,
                                        files={"sub/local.txt": "local\n", "shared.csv": "a,b\n1,2\n"})
    assert cold["status"]["phase"] == ("Succeeded" if case == "reads" else "Failed"), cold["status"].get("message")
    assert _comparable(cold) == _comparable(pooled)
    if case == "reads":
        assert cold["status"].get("readSet"), "the read-set was recorded"
    records = [await env.backend.environment_record(job) for job in (cold, pooled)]
    assert records[0] is not None
    for record in records:
        for field in ("recordedAt", "startTime", "time", "job", "uid", "name"):
            record.pop(field, None)
    assert records[0] == records[1]
    # the executed notebooks: the same outputs (the first cell's text is the files' contents)
    outputs = [[c.get("outputs") for c in (await env.backend.executed_notebook(j))["cells"]] for j in (cold, pooled)]
    assert outputs[0] == outputs[1]


def _left(pool_dir: Path, run_ids: list[str]) -> list:
    """Slot folders and processes (the slots' runners, launchers, kernels) still there."""
    import jupyter_nbvalidation.runner.hygiene as hygiene

    return [*pool_dir.glob("slot-*"), *(pid for run_id in run_ids for pid in hygiene.find(run_id))]


@pytest.mark.asyncio
async def test_an_idle_pool_holds_nothing_and_a_stopped_engine_leaves_nothing(tmp_path, notebook):
    """Past kernel_pool_idle_ttl after its key's last use, a slot is stopped; a stopped engine
    leaves no slot, no process, no folder."""
    nb = notebook("idle/nb.ipynb", ["print(1)"])
    env = make_local(tmp_path, backend_kw={"kernel_pool_size": 1})
    await env.engine.start()
    pool = env.backend._pool
    pool_dir = Path(env.backend.data_dir) / "jobs" / ".pool"
    try:
        done = await env.run(notebook={"path": nb}, podConfig=NOBUILD)
        assert done["status"]["phase"] == "Succeeded"
        await wait_async(lambda: pool.state()["ready"] == 1, 120, lambda: f"a ready slot: {pool.state()}")
        slot = next(s for slots in pool._slots.values() for s in slots)
        assert _alive(slot.run_id)
        # its key last used more than a second ago: with a TTL of one second it is idle now
        pool.idle_ttl = 1
        pool.want(slot.spec, used=False)
        await wait_async(lambda: pool.count() == 0 and not _left(pool_dir, [slot.run_id]), 60,
                         lambda: f"the idle slot gone: {pool.state()} {_left(pool_dir, [slot.run_id])}")
        # used again: a slot again, held until the engine stops
        pool.idle_ttl = 600
        done = await env.run(notebook={"path": nb}, podConfig=NOBUILD)
        assert done["status"]["phase"] == "Succeeded"
        await wait_async(lambda: pool.state()["ready"] == 1, 120, lambda: f"a ready slot: {pool.state()}")
        run_ids = [s.run_id for slots in pool._slots.values() for s in slots]
        assert all(_alive(run_id) for run_id in run_ids)
    finally:
        await env.engine.stop()
    assert _left(pool_dir, run_ids) == []


def _alive(run_id: str) -> bool:
    import jupyter_nbvalidation.runner.hygiene as hygiene

    return bool(hygiene.find(run_id))


def _python_in_slots(tmp_path: Path, line: str) -> Path:
    """A stand-in interpreter: a kernel started in a pre-started slot (its working folder is the
    slot's, under jobs/.pool) does ``line`` (a shell line) first; then every kernel runs the real
    interpreter. (The tests using it turn the sandbox off: the stand-in lies outside the runs.)"""
    wrapper = tmp_path / "slot-python"
    wrapper.write_text('#!/bin/sh\nif [ "$2" = "ipykernel_launcher" ]; then\n'
                       f'  case "$PWD" in */.pool/slot-*) {line} ;; esac\nfi\nexec {shlex.quote(sys.executable)} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


@pytest.mark.asyncio
async def test_a_run_cancelled_while_its_pre_started_kernel_starts_leaves_nothing(tmp_path, notebook):
    """A run that took a slot still starting, cancelled while it waits for it: the slot (no
    longer among those kept) is stopped with it, not left running until the process ends."""
    nb = notebook("nb.ipynb", ["print(1)"])
    # a cold run's kernel starts at once; a slot's takes 30 s
    env = make_local(tmp_path, backend_kw={"kernel_pool_size": 1, "sandbox": "off"})
    env.backend.unbuilt_python = str(_python_in_slots(tmp_path, "sleep 30"))
    await env.engine.start()
    pool = env.backend._pool
    try:
        first = await env.run(notebook={"path": nb}, podConfig=NOBUILD)
        assert first["status"]["phase"] == "Succeeded", first["status"].get("message")
        job = await env.submit(notebook={"path": nb}, podConfig=NOBUILD)
        # it took the starting slot (and its successor started): it waits for it now
        await wait_async(lambda: pool.started == 2 and (pool.taken, pool.missed) == (0, 1) and pool.count() == 1, 60,
                         lambda: pool.state())
        await env.engine.request_cancel(job["metadata"]["name"])
        await env.engine.wait_for_terminal(job["metadata"]["name"], 60)
    finally:
        await env.engine.stop()
    # nothing of either slot is left: no runner, no kernel, no stand-in still sleeping
    await wait_async(lambda: leftover_processes(tmp_path, "") == [], 10, lambda: leftover_processes(tmp_path, ""))
    assert list((Path(env.backend.data_dir) / "jobs" / ".pool").glob("slot-*")) == []


@pytest.mark.asyncio
async def test_a_pre_started_kernel_that_failed_to_start_costs_the_run_nothing(tmp_path, notebook):
    """A slot's kernel fails to start (off the critical path): the next run starts its own,
    with the verdict a cold run gives; no retry is counted (the run's own start did not fail)."""
    nb = notebook("nb.ipynb", ["x = 6 * 7", "print(x)"])
    env = make_local(tmp_path, backend_kw={"kernel_pool_size": 1, "sandbox": "off"})
    env.backend.unbuilt_python = str(_python_in_slots(tmp_path, "exit 1"))
    await env.engine.start()
    pool = env.backend._pool
    try:
        cold = await env.run(notebook={"path": nb}, podConfig=NOBUILD)
        await wait_async(lambda: pool.started == 1 and pool.count() == 0, 60,
                         lambda: f"the slot failed: {pool.state()}")
        again = await env.run(notebook={"path": nb}, podConfig=NOBUILD)
        reasons = [e["reason"] for e in await env.events(again)]
    finally:
        await env.engine.stop()
    assert (pool.taken, pool.missed) == (0, 2), pool.state()
    assert again["status"]["phase"] == "Succeeded" and "validationRetries" not in again["status"], again["status"]
    assert _comparable(cold) == _comparable(again)
    assert "ValidationRetried" not in reasons and reasons[-1] == "ValidationSucceeded", reasons


@pytest.mark.asyncio
@pytest.mark.parametrize("expected", [1, 3])
async def test_no_kernel_is_pre_started_for_a_run_that_will_not_come(tmp_path, notebook, expected):
    """An engine that knows how many runs it will start (the CLI's `run` of N notebooks, `submit`)
    pre-starts a kernel only while one of them is still to come: `submit` and `run` of one
    notebook start none, `run` of 3 (one at a time) starts 2, each used, and nothing is left."""
    nb = notebook("nb.ipynb", ["print(1)"])
    env = make_local(tmp_path, backend_kw={"kernel_pool_size": 1, "kernel_pool_runs_expected": expected})
    await env.engine.start()
    pool = env.backend._pool
    try:
        for _ in range(expected):
            done = await env.run(notebook={"path": nb}, podConfig=NOBUILD)
            assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
            if pool.count():  # the next run's slot: ready before it asks (the pool's own tests race it)
                await wait_async(lambda: pool.state()["ready"] == pool.count(), 120, lambda: pool.state())
        assert (pool.started, pool.taken, pool.count()) == (expected - 1, expected - 1, 0), pool.state()
    finally:
        await env.engine.stop()
