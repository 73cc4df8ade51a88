"""Every event rule (docs/architecture.md, "Events"), against the real SQLite store. Each test
breaks if its rule is broken (faults are injected around the real store)."""

from __future__ import annotations

import asyncio
import shlex
import sys
import time

import pytest
import pytest_asyncio
from conftest import make_local
from helpers import phases, reasons

from jupyter_nbvalidation.core.model import RETRY_REASONS, EventReason, Phase, Reason, new_job
from jupyter_nbvalidation.engine.transitions import StatusWriteFailed, new_status
from jupyter_nbvalidation.store.base import JobStore, StoreError


class Wrapped(JobStore):
    """Delegates to a real store; subclasses inject faults and record order."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.log_order: list[str] = []

    def __getattr__(self, name):
        # the rest of the SQLite store's surface (its Lease, change log, gc queries) unchanged: the
        # local backend campaigns for the data dir's lease through its store before it reconciles
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    async def start(self):
        await self.inner.start()

    async def stop(self):
        await self.inner.stop()

    async def create(self, job):
        return await self.inner.create(job)

    async def get(self, name):
        return await self.inner.get(name)

    async def list_jobs(self, **kw):
        return await self.inner.list_jobs(**kw)

    async def list_active(self):
        return await self.inner.list_active()

    async def update_status(self, name, status, rv):
        job = await self.inner.update_status(name, status, rv)
        self.log_order.append(f"status:{status.get('phase')}:{status.get('reason')}:{time.monotonic()}")
        return job

    async def set_annotation(self, name, key, value):
        return await self.inner.set_annotation(name, key, value)

    async def delete(self, name):
        return await self.inner.delete(name)

    async def add_event(self, event):
        self.log_order.append(f"event:{event['reason']}:{time.monotonic()}")
        return await self.inner.add_event(event)

    async def list_events(self, job):
        return await self.inner.list_events(job)

    def watch(self, cb):
        return self.inner.watch(cb)


async def _new(env) -> dict:
    job = new_job({"notebook": {"path": "nb.ipynb"}})
    job["metadata"]["uid"] = "uid-" + job["metadata"]["name"]
    return await env.store.create(job)


async def _events(env, job):
    await env.engine.recorder.flush()
    return await env.store.list_events(job)


@pytest_asyncio.fixture
async def started():
    envs = []

    async def make(tmp_path, wrapper=Wrapped, **kw):
        env = make_local(tmp_path, store_wrapper=wrapper, **kw)
        await env.store.start()
        env.engine.recorder.start()
        envs.append(env)
        return env

    yield make
    for env in envs:
        await env.engine.recorder.stop()
        await env.store.stop()


@pytest.mark.asyncio
async def test_flip_not_change(tmp_path, started):
    env = await started(tmp_path)
    job = await _new(env)
    job = await env.engine._move(job, "", Phase.INITIALIZING, Reason.ACCEPTED, "first")
    # a reason/message-only rewrite of the same phase is not a flip
    job = await env.engine._write(job, lambda cur: {**new_status(cur, Phase.INITIALIZING, "StillChecking",
                                                                      "second"), })
    assert job["status"]["message"] == "second"
    # a reconcile that decides nothing writes nothing
    await env.engine._write(job, lambda cur: None)
    job = await env.engine._move(job, Phase.INITIALIZING, Phase.BUILDING, Reason.BUILD_STARTED, "build")
    evs = await _events(env, job)
    assert reasons(evs) == [Reason.ACCEPTED, Reason.BUILD_STARTED]
    assert phases(job) == [Phase.INITIALIZING, Phase.BUILDING]


@pytest.mark.asyncio
async def test_event_only_after_the_status_write_and_with_its_reason(tmp_path, started):
    env = await started(tmp_path)
    job = await _new(env)
    for frm, to, reason in [("", Phase.INITIALIZING, Reason.ACCEPTED),
                            (Phase.INITIALIZING, Phase.BUILDING, Reason.BUILD_STARTED),
                            (Phase.BUILDING, Phase.BUILD_COMPLETE, Reason.BUILD_SUCCEEDED)]:
        job = await env.engine._move(job, frm, to, reason, f"to {to}")
    await env.engine.recorder.flush()
    order = [entry.split(":")[:2] for entry in env.store.log_order]
    assert order == [["status", Phase.INITIALIZING], ["event", Reason.ACCEPTED],
                     ["status", Phase.BUILDING], ["event", Reason.BUILD_STARTED],
                     ["status", Phase.BUILD_COMPLETE], ["event", Reason.BUILD_SUCCEEDED]]
    stored = await env.store.get(job["metadata"]["name"])
    evs = await _events(env, job)
    # events and status never disagree: same reasons, same notes as persisted
    assert [(e["reason"], e["note"]) for e in evs] == [
        (t["reason"], t["message"]) for t in stored["status"]["transitions"]]


class ConflictOnce(Wrapped):
    """Another writer changes the job between our read and our write."""

    def __init__(self, inner):
        super().__init__(inner)
        self.conflicts = 0

    async def update_status(self, name, status, rv):
        if self.conflicts == 0:
            self.conflicts += 1
            await self.inner.set_annotation(name, "other-writer", "was-here")  # bumps resourceVersion
        return await super().update_status(name, status, rv)


@pytest.mark.asyncio
async def test_conflict_rereads_and_emits_once(tmp_path, started):
    env = await started(tmp_path, wrapper=ConflictOnce)
    job = await _new(env)
    job = await env.engine._move(job, "", Phase.INITIALIZING, Reason.ACCEPTED, "accepted")
    assert env.store.conflicts == 1
    assert job["metadata"]["annotations"]["other-writer"] == "was-here"  # re-read, not overwritten
    assert reasons(await _events(env, job)) == [Reason.ACCEPTED]


@pytest.mark.asyncio
async def test_two_writers_racing_emit_one_event(tmp_path, started):
    env = await started(tmp_path)
    job = await _new(env)
    results = await asyncio.gather(*[
        env.engine._move(job, "", Phase.INITIALIZING, Reason.ACCEPTED, f"writer {i}") for i in range(4)])
    assert all(r["status"]["phase"] == Phase.INITIALIZING for r in results)
    evs = await _events(env, job)
    assert reasons(evs) == [Reason.ACCEPTED]
    stored = await env.store.get(job["metadata"]["name"])
    assert evs[0]["note"] == stored["status"]["message"]
    assert len(stored["status"]["transitions"]) == 1


class StatusWritesFail(Wrapped):
    async def update_status(self, name, status, rv):
        raise StoreError("disk I/O error (injected)")


@pytest.mark.asyncio
async def test_failed_status_write_still_emits_a_distinct_warning(tmp_path, started):
    env = await started(tmp_path, wrapper=StatusWritesFail)
    job = await _new(env)
    with pytest.raises(StatusWriteFailed):
        await env.engine._move(job, "", Phase.INITIALIZING, Reason.ACCEPTED, "accepted")
    evs = await _events(env, job)
    assert [(e["reason"], e["type"]) for e in evs] == [("AcceptedStatusUpdateFailed", "Warning")]
    assert "injected" in evs[0]["note"]
    assert (await env.store.get(job["metadata"]["name"]))["status"] == {}  # nothing persisted
    # the fallback reason never correlates with a transition in the timeline
    from jupyter_nbvalidation.core.timeline import compute_timeline

    assert compute_timeline(await env.store.get(job["metadata"]["name"]), evs)["phases"] == []


class EventPostsFail(Wrapped):
    async def add_event(self, event):
        raise StoreError("event sink down (injected)")


@pytest.mark.asyncio
async def test_failing_event_post_never_fails_the_reconcile(tmp_path, notebook):
    env = make_local(tmp_path, store_wrapper=EventPostsFail)
    await env.engine.start()
    try:
        nb = notebook("ok.ipynb", ["x = 6 * 7", "print(x)"])
        job = await env.run(notebook={"path": nb}, podConfig={"buildConfig": {"enabled": False}})
        assert job["status"]["phase"] == Phase.SUCCEEDED, job["status"]
        assert phases(job) == [Phase.INITIALIZING, Phase.VALIDATION_RUNNING, Phase.SUCCEEDED]
        assert env.engine.recorder.failed == 3 and env.engine.recorder.posted == 0
        assert env.engine.errors == 0
    finally:
        await env.engine.stop()


@pytest.mark.asyncio
async def test_transition_table_is_enforced(tmp_path, started):
    env = await started(tmp_path)
    job = await _new(env)
    job = await env.engine._move(job, "", Phase.INITIALIZING, Reason.ACCEPTED, "a")
    with pytest.raises(ValueError, match="not allowed"):
        await env.engine._move(job, Phase.INITIALIZING, Phase.BUILD_COMPLETE, Reason.BUILD_SUCCEEDED, "skip")
    with pytest.raises(ValueError, match="not allowed"):
        new_status(job, Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED, "skip")


@pytest.mark.asyncio
async def test_a_burst_of_transitions_is_posted_completely_and_in_order_per_job():
    """1500 transitions across 300 jobs at once with a slow sink: none dropped,
    each job's events posted in the order they were emitted."""
    import logging

    from jupyter_nbvalidation.core.events import EventRecorder

    posted: dict[str, list[str]] = {}

    async def slow_sink(event):
        await asyncio.sleep(0.002)
        posted.setdefault(event["regarding"]["uid"], []).append(event["reason"])

    recorder = EventRecorder(slow_sink, log=logging.getLogger("test"))
    recorder.start()
    order = [Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_SUCCEEDED, Reason.VALIDATION_STARTED,
             Reason.VALIDATION_SUCCEEDED]
    for reason in order:
        for i in range(300):
            job = {"apiVersion": "v", "kind": "k", "metadata": {"name": f"j{i}", "uid": f"u{i}"}}
            recorder.emit(job, reason=reason, note=reason)
    await recorder.flush()
    await recorder.stop()
    assert recorder.dropped == 0 and recorder.posted == 1500
    assert all(reasons_ == order for reasons_ in posted.values()) and len(posted) == 300


# --------------------------------------------------------------------------
# a process that dies between a status write and its event


async def _crash_after_write(env, job, to: str, reason: str, *, now: str | None = None) -> dict:
    """What the engine persists for a transition, without its event: the state a
    process leaves when it dies right after the status write (or with the event
    still queued)."""
    status = new_status(job, to, reason, f"to {to}", now=now)
    return await env.store.update_status(job["metadata"]["name"], status, job["metadata"]["resourceVersion"])


@pytest.mark.asyncio
async def test_transition_events_lost_in_a_crash_are_posted_once_on_restart(tmp_path, started):
    from jupyter_nbvalidation.core.events import transition_event_name

    env = await started(tmp_path)
    job = await _new(env)
    job = await env.engine._move(job, "", Phase.INITIALIZING, Reason.ACCEPTED, "accepted")
    job = await _crash_after_write(env, job, Phase.BUILDING, Reason.BUILD_STARTED)
    job = await _crash_after_write(env, job, Phase.BUILD_COMPLETE, Reason.BUILD_SUCCEEDED)
    # an old job whose last event is missing too, but from before the recovery window
    old = await _new(env)
    old = await _crash_after_write(env, old, Phase.INITIALIZING, Reason.ACCEPTED, now="2026-01-01T00:00:00.000000Z")
    assert reasons(await _events(env, job)) == [Reason.ACCEPTED]

    assert await env.engine.recover_events() == 2
    evs = await _events(env, job)
    assert reasons(evs) == [Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_SUCCEEDED]
    transitions = job["status"]["transitions"]
    # each carries its transition's own time and the transition's fixed name
    assert [e["eventTime"] for e in evs[1:]] == [t["time"] for t in transitions[1:]]
    assert [e["metadata"]["name"] for e in evs] == [transition_event_name(job, i) for i in range(3)]
    assert await _events(env, old) == []  # older than the window: it would have expired

    # again (a second restart), and a late copy from the dead process: still once each
    assert await env.engine.recover_events() == 0
    env.engine.recorder.emit(job, reason=Reason.BUILD_STARTED, note="late copy", transition=1)
    assert reasons(await _events(env, job)) == [Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_SUCCEEDED]
    assert env.engine.events_recovered == 2


@pytest.mark.asyncio
async def test_engine_start_recovers_events_before_it_reconciles(tmp_path, notebook):
    """Started on a store that holds a transition without its event, the engine
    posts that event before any later one of the same job: the order stays."""
    nb = notebook("ok.ipynb", ["print(6 * 7)"])
    dead = make_local(tmp_path)  # the process that died: it accepted the job, its event was lost
    await dead.store.start()
    job = await dead.service.submit({"notebook": {"path": nb}, "podConfig": {"buildConfig": {"enabled": False}}})
    job = await _crash_after_write(dead, job, Phase.INITIALIZING, Reason.ACCEPTED)
    await dead.store.stop()

    env = make_local(tmp_path)
    await env.engine.start()
    try:
        done = await env.engine.wait_for_terminal(job["metadata"]["name"], 120)
        await env.engine.wait_idle(30)
        assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
        evs = await _events(env, done)
        assert reasons(evs) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, Reason.VALIDATION_SUCCEEDED]
        assert evs[0]["eventTime"] == done["status"]["transitions"][0]["time"]
        assert env.engine.events_recovered == 1
    finally:
        await env.engine.stop()


class SeesRetries(Wrapped):
    """Records the stored retry counter at the moment each retry event is posted."""

    def __init__(self, inner):
        super().__init__(inner)
        self.counter_at_retry_event: list[int] = []

    async def add_event(self, event):
        if event["reason"] == EventReason.VALIDATION_RETRIED:
            job = await self.inner.get(event["regarding"]["name"])
            self.counter_at_retry_event.append(job["status"].get("validationRetries", 0))
        return await super().add_event(event)


@pytest.mark.asyncio
async def test_a_retry_is_one_event_after_its_status_write_and_never_a_transition(tmp_path, notebook):
    """Events = transitions + one ValidationRetried per retry (a real kernel that fails to
    start once): the retry event comes after the write that counted it, flips nothing,
    and a restart's recovery posts nothing for it."""
    marker = tmp_path / "failed-once"
    wrapper = tmp_path / "flaky-python"
    wrapper.write_text(f'#!/bin/sh\nif [ "$2" = "ipykernel_launcher" ] && [ ! -e {shlex.quote(str(marker))} ]; then\n'
                       f'  touch {shlex.quote(str(marker))}; exit 1\nfi\nexec {shlex.quote(sys.executable)} "$@"\n')
    wrapper.chmod(0o755)
    nb = notebook("ok.ipynb", ["print(6 * 7)"])
    # the stand-in keeps its state outside the run (the marker), which a sandboxed kernel cannot
    # write (it writes only its run's folders): the retry's events are what is tested, without the sandbox
    env = make_local(tmp_path, store_wrapper=SeesRetries, backend_kw={"sandbox": "off", "kernel_pool_size": 0},
                     retry_backoff=0.05)  # (the pool off: the run's own kernel start is the one that fails)
    env.backend.unbuilt_python = str(wrapper)
    await env.engine.start()
    try:
        done = await env.run(notebook={"path": nb}, podConfig={"buildConfig": {"enabled": False}})
        st = done["status"]
        assert st["phase"] == Phase.SUCCEEDED and st["validationRetries"] == 1, st["message"]
        evs = await _events(env, done)
        assert reasons(evs) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, EventReason.VALIDATION_RETRIED,
                                Reason.VALIDATION_SUCCEEDED]
        assert [e["reason"] for e in evs if e["reason"] not in RETRY_REASONS] == [t["reason"] for t in st["transitions"]]
        assert phases(done) == [Phase.INITIALIZING, Phase.VALIDATION_RUNNING, Phase.SUCCEEDED]
        assert env.store.counter_at_retry_event == [1], "the retry event follows the write that counted it"
        assert await env.engine.recover_events() == 0
        assert len(await _events(env, done)) == 4
    finally:
        await env.engine.stop()
