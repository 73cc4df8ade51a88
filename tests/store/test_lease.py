"""One reconciler per data dir: the SQLite Lease, the change log that lets a
process see the others' writes, and process ownership (pid + start time).
Real SQLite files, real processes; several stores on one file stand for
several servers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest
import pytest_asyncio
from helpers import wait_async

from jupyter_nbvalidation.backends.local import (
    LocalBackend,
    owner_alive,
    proc_start,
    process_record,
    same_process_alive,
)
from jupyter_nbvalidation.core.tasks import cancel_and_wait
from jupyter_nbvalidation.spec.plan import Snapshot, make_plan
from jupyter_nbvalidation.store.lease import StoreLeaseElector, microtime
from jupyter_nbvalidation.store.sqlite import SQLiteJobStore


@pytest_asyncio.fixture
async def two_stores(tmp_path):
    path = tmp_path / "nbvalidation.db"
    a, b = SQLiteJobStore(path=path), SQLiteJobStore(path=path)
    await a.start()
    await b.start()
    yield a, b
    await a.stop()
    await b.stop()


class Campaign:
    def __init__(self, store, identity, **kw):
        self.elector = StoreLeaseElector(store, identity=identity, **kw)
        self.gains = 0
        self.losses = 0
        self.task = asyncio.get_running_loop().create_task(self.elector.run(self.started, self.stopped))

    def started(self):
        self.gains += 1

    def stopped(self):
        self.losses += 1


FAST = {"lease_duration": 2.0, "renew_deadline": 1.5, "retry_period": 0.1}


@pytest.mark.asyncio
async def test_one_holder_release_fails_over_at_once(two_stores):
    a, b = two_stores
    ca = Campaign(a, "a", **FAST)
    await wait_async(lambda: ca.elector.is_leader, 10, "a to lead")
    cb = Campaign(b, "b", **FAST)
    await asyncio.sleep(1.0)  # b keeps trying while a renews
    assert ca.elector.is_leader and not cb.elector.is_leader and cb.gains == 0
    lease = await b.get_lease("reconciler")
    assert lease["holderIdentity"] == "a" and lease["leaseTransitions"] == 0
    assert lease["leaseDurationSeconds"] == 2 and lease["renewTime"] >= lease["acquireTime"]
    # a clean stop releases: b takes over long before the lease would expire
    t0 = time.monotonic()
    await cancel_and_wait(ca.task)
    assert ca.losses == 1
    await wait_async(lambda: cb.elector.is_leader, 10, "b to take over")
    # what this protects: the release is seen at b's next try (retry_period, 0.1 s), not when a's
    # lease runs out; bounded by one lease duration (2 s) so that two busy shared cores do not fail
    # it. The clock-free proof that it was a release follows: leaseTransitions stays 0 (a take-over
    # of an expired lease counts one, as in the next test)
    assert time.monotonic() - t0 < FAST["lease_duration"]
    lease = await a.get_lease("reconciler")
    assert lease["holderIdentity"] == "b" and lease["leaseTransitions"] == 0  # released, not taken from a
    await cancel_and_wait(cb.task)


@pytest.mark.asyncio
async def test_a_holder_that_stops_renewing_is_replaced_after_the_duration(two_stores):
    a, b = two_stores
    # a holder that died (SIGKILL: no release): its record was renewed just now, then never again
    now = microtime()
    assert await a.put_lease("reconciler", {"holderIdentity": "dead", "acquireTime": now, "renewTime": now,
                                            "leaseDurationSeconds": 2, "leaseTransitions": 4}, None)
    t0 = time.monotonic()
    cb = Campaign(b, "b", **FAST)
    await wait_async(lambda: cb.elector.is_leader, 15, "b to take the expired lease")
    waited = time.monotonic() - t0
    assert waited >= 1.5, waited  # not before the holder's lease ran out
    lease = await b.get_lease("reconciler")
    assert lease["holderIdentity"] == "b" and lease["leaseTransitions"] == 5
    await cancel_and_wait(cb.task)


@pytest.mark.asyncio
async def test_a_long_expired_lease_is_taken_at_once(two_stores):
    a, b = two_stores
    old = "2020-01-01T00:00:00.000000Z"
    assert await a.put_lease("reconciler", {"holderIdentity": "gone", "acquireTime": old, "renewTime": old,
                                            "leaseDurationSeconds": 10, "leaseTransitions": 0}, None)
    cb = Campaign(b, "b", lease_duration=10, renew_deadline=7, retry_period=1)
    await wait_async(lambda: cb.elector.is_leader, 5, "b to take a lease that expired long ago")
    await cancel_and_wait(cb.task)


@pytest.mark.asyncio
async def test_conditional_write_lets_one_of_two_racers_win(two_stores):
    a, b = two_stores
    assert await a.put_lease("l", {"holderIdentity": "", "leaseDurationSeconds": 1}, None)
    assert not await b.put_lease("l", {"holderIdentity": "x", "leaseDurationSeconds": 1}, None)  # exists
    rv = (await a.get_lease("l"))["resourceVersion"]
    results = await asyncio.gather(a.put_lease("l", {"holderIdentity": "a", "leaseDurationSeconds": 1}, rv),
                                   b.put_lease("l", {"holderIdentity": "b", "leaseDurationSeconds": 1}, rv))
    assert sorted(results) == [False, True]


@pytest.mark.asyncio
async def test_holder_steps_down_when_another_took_the_lease(two_stores):
    a, b = two_stores
    ca = Campaign(a, "a", **FAST)
    await wait_async(lambda: ca.elector.is_leader, 10, "a to lead")
    # someone overwrote the record (a clock jump made it look expired to them)
    # (a renews every retry period: a renewal between our read and our conditional write makes the
    # write lose the race, so the intruder tries again, as a real one would; seen under load in CI)
    for _ in range(50):
        lease = await b.get_lease("reconciler")
        spec = {**lease, "holderIdentity": "intruder", "renewTime": microtime()}
        if await b.put_lease("reconciler", spec, spec.pop("resourceVersion")):
            break
    else:
        raise AssertionError("the intruder never overwrote the lease")
    await wait_async(lambda: not ca.elector.is_leader, 10, "a to step down")
    assert ca.losses == 1
    await cancel_and_wait(ca.task)


@pytest.mark.asyncio
async def test_other_processes_writes_are_noticed(tmp_path):
    """A job created through one store reaches the watchers of another store on
    the same file (another process) within the poll interval."""
    path = tmp_path / "nbvalidation.db"
    writer_code = f"""
import asyncio, sys
sys.path.insert(0, {os.getcwd()!r})
from jupyter_nbvalidation.store.sqlite import SQLiteJobStore
async def main():
    s = SQLiteJobStore(path={str(path)!r})
    await s.start()
    job = {{"metadata": {{"name": "from-elsewhere"}}, "spec": {{"notebook": {{"path": "x.ipynb"}}}}}}
    await s.create(job)
    await s.set_annotation("from-elsewhere", "k", "v")
    await s.stop()
asyncio.run(main())
"""
    reader = SQLiteJobStore(path=path)
    await reader.start()
    seen: list[tuple[str, float]] = []
    reader.watch(lambda name: seen.append((name, time.monotonic())))
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", writer_code)
    assert await proc.wait() == 0
    written = time.monotonic()
    await wait_async(lambda: len(seen) >= 1, 10, "the other process's write to be noticed")
    assert seen[0][0] == "from-elsewhere"
    assert reader.changes_seen >= 1
    # within a couple of poll intervals of the writer's exit (generous on a loaded machine)
    assert seen[0][1] - written < 5
    await reader.stop()


# -- ownership ------------------------------------------------------------------------
def test_process_start_time_defeats_pid_reuse():
    me = process_record(os.getpid())
    assert me["start"] == proc_start(os.getpid()) and me["start"] is not None
    assert same_process_alive(me)
    assert not same_process_alive({**me, "start": me["start"] + 1})  # same pid, another process
    p = subprocess.Popen(["sleep", "0"])
    p.wait()
    assert proc_start(p.pid) is None and not same_process_alive({"pid": p.pid, "start": 1})
    assert owner_alive({"host": "another-machine", "pid": p.pid, "start": 1})  # never assumed dead


def _fake_run(data_dir, uid, owner, runner):
    run = data_dir / "jobs" / uid / "run-1"
    run.mkdir(parents=True)
    (run / "owner.json").write_text(json.dumps({**owner, "runner": runner}))
    return run


def _plan(job: dict):
    return make_plan(job, Snapshot(frozenset({"notebook.ipynb"})), build_timeout=900, validation_timeout=1800,
                     cell_timeout=600)


@pytest.mark.asyncio
async def test_a_run_of_a_live_engine_is_waited_for_never_killed_nor_run_again(tmp_path):
    backend = LocalBackend(data_dir=str(tmp_path / "data"))
    await backend.store.start()
    backend._notify = lambda name: None
    # another engine (a live process) started a runner (another live process)
    other_engine = subprocess.Popen(["sleep", "300"])
    runner = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        owner = {"holder": "someone-else", "host": os.uname().nodename, **process_record(other_engine.pid)}
        job = {"metadata": {"name": "j", "uid": "u1"}, "spec": {"notebook": {"path": "n.ipynb"}}}
        run = _fake_run(backend.root, "u1", owner, process_record(runner.pid))
        obs = await backend.ensure_validation(job, None, _plan(job))
        assert obs.state == "Running"
        await asyncio.sleep(2 * 0.5 + 0.5)
        obs = await backend.ensure_validation(job, None, _plan(job))
        assert obs.state == "Running"
        await backend.cancel_validation(job)  # its owner lives: not ours to stop
        assert runner.poll() is None
        obs = await backend.ensure_validation(job, None, _plan(job))  # adopted again
        assert sorted(p.name for p in run.parent.iterdir()) == ["run-1"]
        # the runner writes its verdict and ends: it is read, nothing ran twice
        (run / "result.json").write_text(json.dumps({"verdict": "Succeeded", "message": "fine"}))
        runner.kill()
        runner.wait()
        async def ended():
            obs = await backend.ensure_validation(job, None, _plan(job))
            return obs if obs.state != "Running" else None

        obs = await wait_async(ended, 10, "the adopted run's verdict to be read", interval=0.1)
        assert obs.state == "Succeeded" and obs.message == "fine"
        assert sorted(p.name for p in run.parent.iterdir()) == ["run-1"]
    finally:
        for p in (other_engine, runner):
            p.kill()
            p.wait()
        await backend.stop()
        await backend.store.stop()


@pytest.mark.asyncio
async def test_a_dead_engines_runner_is_stopped_only_on_cancel_and_a_dead_run_is_redone(tmp_path):
    backend = LocalBackend(data_dir=str(tmp_path / "data"))
    await backend.store.start()
    backend._notify = lambda name: None
    dead = subprocess.Popen(["sleep", "0"])
    dead.wait()
    runner = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        owner = {"holder": "crashed", "host": os.uname().nodename, "pid": dead.pid, "start": 12345}
        job = {"metadata": {"name": "j", "uid": "u2"}, "spec": {"notebook": {"path": "n.ipynb"}}}
        run = _fake_run(backend.root, "u2", owner, process_record(runner.pid))
        # a dead holder's runner still at work: adopted (waited for), not killed
        assert (await backend.ensure_validation(job, None, _plan(job))).state == "Running"
        await asyncio.sleep(1.0)
        assert runner.poll() is None
        # cancelled: its owner is provably dead, so its runner (verified pid + start) is stopped
        await backend.cancel_validation(job)
        assert runner.wait(10) is not None
        # a pid that now names another process is never signalled
        impostor = subprocess.Popen(["sleep", "300"])
        (run / "owner.json").write_text(json.dumps({**owner, "runner": {"pid": impostor.pid, "start": 1}}))
        await backend.cancel_validation(job)
        await asyncio.sleep(0.3)
        assert impostor.poll() is None
        impostor.kill()
        impostor.wait()
        # the attempt will never finish (runner and owner gone, no result): a new one is made
        assert backend._locate(job)[0].name == "run-2"
    finally:
        if runner.poll() is None:
            runner.kill()
        await backend.stop()
        await backend.store.stop()
