"""Admission written once in the engine (issue 19 point 7): at most
``max_concurrent_builds`` jobs in Building and ``max_concurrent_validations`` in
ValidationRunning; a job waiting for a slot shows reason ``Queued`` (one Normal
event, no transition), goes in submit order, and a slot is freed however the job
holding it ends. Slots are counted from the store, so a restarted engine counts
the jobs an earlier one let in. On the in-memory ports (tests/fake_backend.py)."""

from __future__ import annotations

import asyncio
import functools
import logging

import pytest
from fake_backend import FakeBackend

from jupyter_nbvalidation.core.model import REASON_PHASE, EventReason, Phase, Reason, new_job
from jupyter_nbvalidation.core.tasks import wait_within

pytestmark = pytest.mark.asyncio

WAIT = 10.0


@pytest.fixture
def run(start_engine):
    """run(backend=None, **engine_kw) -> (engine, backend), started; stopped afterwards (tests/conftest.py)."""
    return functools.partial(start_engine, log=logging.getLogger("nbvalidation.test.admission"), workers=4,
                             queue_poll=0.2)


class Peak:
    """The most jobs ever seen at once in each phase (a store watch: every write)."""

    def __init__(self, backend: FakeBackend) -> None:
        self.backend = backend
        self.peak: dict[str, int] = {}
        backend.store.watch(self.look)

    def look(self, _name: str) -> None:
        counts: dict[str, int] = {}
        for job in self.backend.store.jobs.values():
            phase = (job.get("status") or {}).get("phase", "")
            counts[phase] = counts.get(phase, 0) + 1
        for phase, n in counts.items():
            self.peak[phase] = max(self.peak.get(phase, 0), n)


async def _submit(backend: FakeBackend, name: str, *, build: bool) -> str:
    spec: dict = {"notebook": {"path": f"{name}.ipynb"}}
    if not build:
        spec["podConfig"] = {"buildConfig": {"enabled": False}}
    await backend.submit(new_job(spec, name=name), {})
    await asyncio.sleep(0.002)  # distinct submit times
    return name


async def _until(backend: FakeBackend, check, what: str) -> None:
    async def poll() -> None:
        while not check():
            await asyncio.sleep(0.01)

    try:
        await wait_within(poll(), WAIT)
    except asyncio.TimeoutError:
        states = {n: ((j.get("status") or {}).get("phase"), (j.get("status") or {}).get("reason"))
                  for n, j in backend.store.jobs.items()}
        raise AssertionError(f"never: {what}; jobs: {states}") from None


def _st(backend: FakeBackend, name: str) -> dict:
    return backend.store.jobs[name].get("status") or {}


def _in(backend: FakeBackend, phase: str) -> set[str]:
    return {n for n in backend.store.jobs if _st(backend, n).get("phase") == phase}


async def test_build_and_validation_caps_fifo_and_queued_reason(run):
    backend = FakeBackend()
    peak = Peak(backend)
    engine, _ = await run(backend, max_concurrent_builds=2, max_concurrent_validations=1)
    names = [await _submit(backend, f"nb-{i}", build=True) for i in range(5)]
    await _until(backend, lambda: _in(backend, Phase.BUILDING) == {"nb-0", "nb-1"}
                 and all(_st(backend, n).get("reason") == "Queued" for n in names[2:]), "2 build, 3 queued")
    st = _st(backend, "nb-2")
    assert st["phase"] == Phase.INITIALIZING
    assert st["message"] == "Waiting for a build slot (2 of 2 in use)."
    assert _st(backend, "nb-4")["message"] == "Waiting for a build slot (2 of 2 in use; 2 queued before it)."
    assert not backend.called("ensure_build", "nb-2")
    # FIFO: the first slot freed goes to the earliest submitted waiting job
    backend.finish_build("nb-1")
    await _until(backend, lambda: "nb-2" in _in(backend, Phase.BUILDING), "nb-2 builds")
    assert _st(backend, "nb-2")["reason"] == Reason.BUILD_STARTED  # Queued cleared by the transition
    assert _in(backend, Phase.BUILDING) == {"nb-0", "nb-2"}
    assert _st(backend, "nb-3")["reason"] == "Queued"
    # nb-1 validates (1 of 1); a second built job waits in BuildComplete
    await _until(backend, lambda: _in(backend, Phase.VALIDATION_RUNNING) == {"nb-1"}, "nb-1 validates")
    backend.finish_build("nb-0")
    await _until(backend, lambda: _st(backend, "nb-0").get("phase") == Phase.BUILD_COMPLETE
                 and _st(backend, "nb-0").get("reason") == "Queued", "nb-0 queued for validation")
    assert _st(backend, "nb-0")["message"] == "Waiting for a validation slot (1 of 1 in use)."
    for n in names:
        if n not in ("nb-0", "nb-1"):
            await _until(backend, lambda n=n: n in _in(backend, Phase.BUILDING)
                         or _st(backend, n).get("phase") != Phase.INITIALIZING, f"{n} builds")
            backend.finish_build(n)
    for _ in names:
        running = _in(backend, Phase.VALIDATION_RUNNING)
        await _until(backend, lambda: len(_in(backend, Phase.VALIDATION_RUNNING)) == 1
                     or all(_st(backend, n).get("phase") == Phase.SUCCEEDED for n in names), "one validates")
        running = _in(backend, Phase.VALIDATION_RUNNING)
        for n in running:
            backend.finish_validation(n)
        await _until(backend, lambda running=running: not (running & _in(backend, Phase.VALIDATION_RUNNING)), "it ends")
    await _until(backend, lambda: all(_st(backend, n).get("phase") == Phase.SUCCEEDED for n in names), "all pass")
    assert peak.peak[Phase.BUILDING] == 2 and peak.peak[Phase.VALIDATION_RUNNING] == 1
    # validation order follows submit order among the jobs that were built
    starts = [n for m, n, _ in backend.calls if m == "ensure_validation"]
    first = list(dict.fromkeys(starts))
    assert first == ["nb-1", "nb-0", "nb-2", "nb-3", "nb-4"]
    await engine.recorder.flush()
    for n in names:
        job = backend.store.jobs[n]
        events = [e for e in backend.store.events if e["regarding"]["uid"] == job["metadata"]["uid"]]
        transitions = [e["reason"] for e in events if e["reason"] in REASON_PHASE]
        assert transitions == [t["reason"] for t in job["status"]["transitions"]], n
        queued = [e for e in events if e["reason"] == EventReason.QUEUED]
        assert all(e["type"] == "Normal" for e in queued)
        assert len(queued) <= 2, n  # at most once per wait (a build slot, a validation slot)
    assert any(e["reason"] == "Queued" for e in backend.store.events)


async def test_slot_freed_on_cancel_fault_and_failure(run):
    backend = FakeBackend()
    peak = Peak(backend)
    engine, _ = await run(backend, max_concurrent_validations=1, max_retries=0)
    names = [await _submit(backend, f"v-{i}", build=False) for i in range(4)]
    await _until(backend, lambda: _in(backend, Phase.VALIDATION_RUNNING) == {"v-0"}
                 and all(_st(backend, n).get("reason") == "Queued" for n in names[1:]), "one runs, three wait")
    assert _st(backend, "v-1")["phase"] == Phase.INITIALIZING
    await engine.request_cancel("v-0")
    await _until(backend, lambda: _in(backend, Phase.VALIDATION_RUNNING) == {"v-1"}, "cancel frees the slot")
    assert _st(backend, "v-0")["reason"] == Reason.CANCELLED
    backend.validation["v-1"] = backend.fault("the node went away", transient=False)
    backend._wake("v-1")
    await _until(backend, lambda: _in(backend, Phase.VALIDATION_RUNNING) == {"v-2"}, "a fault frees the slot")
    assert _st(backend, "v-1")["reason"] == Reason.INFRASTRUCTURE_FAILED
    backend.finish_validation("v-2", verdict="Failed")
    await _until(backend, lambda: _in(backend, Phase.VALIDATION_RUNNING) == {"v-3"}, "a failure frees the slot")
    backend.finish_validation("v-3")
    await _until(backend, lambda: _st(backend, "v-3").get("phase") == Phase.SUCCEEDED, "the last passes")
    assert _st(backend, "v-2")["reason"] == Reason.VALIDATION_FAILED
    assert peak.peak[Phase.VALIDATION_RUNNING] == 1


async def test_restart_counts_slots_from_the_store(run):
    backend = FakeBackend()
    peak = Peak(backend)
    first, _ = await run(backend, max_concurrent_validations=1)
    await _submit(backend, "r-0", build=False)
    await _until(backend, lambda: _in(backend, Phase.VALIDATION_RUNNING) == {"r-0"}, "r-0 runs")
    await first.stop()
    # a new engine (a restart, or the server that took the lead) on the same store
    second, _ = await run(backend, max_concurrent_validations=1)
    await _submit(backend, "r-1", build=False)
    await _until(backend, lambda: _st(backend, "r-1").get("reason") == "Queued", "r-1 waits")
    assert _st(backend, "r-1")["message"] == "Waiting for a validation slot (1 of 1 in use)."
    await asyncio.sleep(0.5)  # several polls: still waiting
    assert _in(backend, Phase.VALIDATION_RUNNING) == {"r-0"}
    backend.finish_validation("r-0")
    await _until(backend, lambda: _st(backend, "r-1").get("phase") == Phase.VALIDATION_RUNNING, "r-1 runs")
    assert peak.peak[Phase.VALIDATION_RUNNING] == 1


async def test_no_cap_means_no_queue(run):
    backend = FakeBackend()
    await run(backend)
    names = [await _submit(backend, f"u-{i}", build=False) for i in range(6)]
    await _until(backend, lambda: _in(backend, Phase.VALIDATION_RUNNING) == set(names), "all run")
    assert not any(e["reason"] == "Queued" for e in backend.store.events)


async def test_local_cap_one_second_notebook_queued_both_verdicts_right(tmp_path, notebook):
    """Real kernels: with one validation slot the second notebook waits (Queued) while
    the first runs, then runs; a pass and a failure, each its own verdict."""
    from conftest import make_local

    env = make_local(tmp_path, max_concurrent_validations=1)
    await env.engine.start()
    try:
        slow = notebook("slow.ipynb", ["import time; time.sleep(3)", "print('ok')"])
        bad = notebook("bad.ipynb", ["raise ValueError('boom')"])
        off = {"buildConfig": {"enabled": False}}
        first = await env.submit(notebook={"path": slow}, podConfig=off)
        await asyncio.sleep(0.01)
        second = await env.submit(notebook={"path": bad}, podConfig=off)
        seen: list[tuple[str, str]] = []

        def look(job: dict) -> None:
            st = job.get("status") or {}
            seen.append((st.get("phase", ""), st.get("reason", "")))

        a = await env.engine.wait_for_terminal(first["metadata"]["name"], 180)
        b = await env.engine.wait_for_terminal(second["metadata"]["name"], 180, on_update=look)
        assert a["status"]["phase"] == Phase.SUCCEEDED, a["status"]["message"]
        assert b["status"]["phase"] == Phase.FAILED and b["status"]["reason"] == Reason.VALIDATION_FAILED
        events = await env.events(b)
        assert [e["reason"] for e in events].count("Queued") == 1
        assert [e["reason"] for e in events if e["reason"] in REASON_PHASE] == \
            [t["reason"] for t in b["status"]["transitions"]]
        queued_at = next(e for e in events if e["reason"] == "Queued")
        assert "validation slot (1 of 1 in use)" in queued_at["note"]
        # it waited while the first ran: its validation began after the first's ended
        assert b["status"]["validationStatus"]["startTime"] >= a["status"]["validationStatus"]["completionTime"]
    finally:
        await env.engine.stop()


async def test_a_failed_build_is_shared_by_the_jobs_waiting_on_it_and_never_cached(tmp_path, notebook):
    """Three notebooks with the same unresolvable requirements, one build slot: one
    build, all three BuildFailed with its message; a job submitted after the failure
    builds again (a failure is never cached: the index may have changed)."""
    from conftest import make_local

    env = make_local(tmp_path, max_concurrent_builds=1)
    await env.engine.start()
    try:
        nbs = [notebook(f"bad/nb{i}.ipynb", [f"print({i})"]) for i in range(3)]
        (env.root / "bad" / "requirements.txt").write_text("--no-index\nnbv-no-such-package-anywhere==1.0\n")
        names = []
        for nb in nbs:
            names.append((await env.submit(notebook={"path": nb}))["metadata"]["name"])
            await asyncio.sleep(0.01)
        done = await asyncio.gather(*(env.engine.wait_for_terminal(n, 180) for n in names))
        assert [d["status"]["reason"] for d in done] == [Reason.BUILD_FAILED] * 3, \
            [d["status"]["message"] for d in done]
        assert all("nbv-no-such-package-anywhere" in d["status"]["message"] for d in done), \
            [d["status"]["message"] for d in done]
        logs = list((env.backend.root / "logs").glob("build-*.log"))
        assert len(logs) == 1, logs  # built once
        again = await env.run(notebook={"path": nbs[0]})
        assert again["status"]["reason"] == Reason.BUILD_FAILED
        assert len(list((env.backend.root / "logs").glob("build-*.log"))) == 2  # a fresh run builds again
    finally:
        await env.engine.stop()
