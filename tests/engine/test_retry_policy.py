"""The retry policy written once in the engine (issue 19, "A retry policy with one
vocabulary"; issue 20, "Infrastructure is not the notebook"), on the in-memory
ports (tests/fake_backend.py): a backend classifies a failure as a Fault, the
engine retries a transient one with backoff up to max_retries, counted in the
status (validationRetries / buildRetries, apart), one Warning event per retry
and no phase flip; a permanent fault, or the last, ends the job Failed /
InfrastructureFailed, never a notebook verdict. The local backend's
classification with real kernels is in test_infrastructure_faults.py."""

from __future__ import annotations

import asyncio
import functools
import logging
import time

import pytest
from fake_backend import FakeBackend
from helpers import phases, reasons

from jupyter_nbvalidation.backends.base import RUNNING, Observation
from jupyter_nbvalidation.core.model import (
    REASON_PHASE,
    RETRY_REASONS,
    EventReason,
    Phase,
    Reason,
    ResultReason,
    isotime,
    new_job,
    validation_attempt,
)
from jupyter_nbvalidation.core.tasks import wait_within
from jupyter_nbvalidation.engine.engine import Engine
from jupyter_nbvalidation.engine.transitions import attempt_started_at

pytestmark = pytest.mark.asyncio

WAIT = 10.0
NO_BUILD_PATH = [Phase.INITIALIZING, Phase.VALIDATION_RUNNING]


@pytest.fixture
def run(start_engine):
    """run(backend=None, **engine_kw) -> (engine, backend), started; stopped afterwards (tests/conftest.py)."""
    return functools.partial(start_engine, log=logging.getLogger("nbvalidation.test.retry"), workers=2,
                             retry_backoff=0.01)


async def _submit(backend: FakeBackend, *, build: bool = False, name: str = "nb-1") -> str:
    spec: dict = {"notebook": {"path": "nb.ipynb"}}
    if not build:
        spec["podConfig"] = {"buildConfig": {"enabled": False}}
    await backend.submit(new_job(spec, name=name), {})
    return name


def _success(backend: FakeBackend, name: str) -> Observation:
    backend.finish_validation(name)  # what a successful run reports
    return backend.validation.pop(name)


def _failure(backend: FakeBackend, name: str) -> Observation:
    backend.finish_validation(name, verdict="Failed", message="Cell 1 raised ValueError")
    return backend.validation.pop(name)


def transitions_and_retries(job: dict, events: list[dict]) -> None:
    """The event invariant with retries: the events are the transitions, in
    order, plus one retry event per counted retry, and nothing else."""
    transition_reasons = [t["reason"] for t in job["status"]["transitions"]]
    assert [e["reason"] for e in events if e["reason"] not in RETRY_REASONS] == transition_reasons
    st = job["status"]
    retried = [e for e in events if e["reason"] in RETRY_REASONS]
    assert len([e for e in retried if e["reason"] == EventReason.VALIDATION_RETRIED]) == st.get("validationRetries", 0)
    assert len([e for e in retried if e["reason"] == EventReason.BUILD_RETRIED]) == st.get("buildRetries", 0)
    assert all(e["type"] == "Warning" and e["action"] == "Retry" for e in retried)


async def _events(engine: Engine, job: dict) -> list[dict]:
    await engine.recorder.flush()
    return await engine.store.list_events(job)


async def test_the_vocabulary_has_one_infrastructure_reason():
    assert REASON_PHASE[Reason.INFRASTRUCTURE_FAILED] == Phase.FAILED
    assert ResultReason.INFRASTRUCTURE_FAILED == "InfrastructureFailed"
    assert RETRY_REASONS == {"ValidationRetried", "BuildRetried"}
    assert not RETRY_REASONS & set(REASON_PHASE), "a retry is not a transition"


async def test_transient_fault_twice_then_success(run):
    engine, backend = await run()
    name = await _submit(backend)
    backend.validation_attempts[name] = [backend.fault("The kernel failed to start: timeout"),
                                         backend.fault("The kernel failed to start: timeout"),
                                         _success(backend, name)]
    job = await engine.wait_for_terminal(name, WAIT)
    st = job["status"]
    assert st["phase"] == Phase.SUCCEEDED and st["reason"] == Reason.VALIDATION_SUCCEEDED
    assert st["validationRetries"] == 2 and "buildRetries" not in st and st["lastRetryTime"]
    assert phases(job) == NO_BUILD_PATH + [Phase.SUCCEEDED], "a retry flips no phase"
    events = await _events(engine, job)
    transitions_and_retries(job, events)
    retried = [e for e in events if e["reason"] == EventReason.VALIDATION_RETRIED]
    assert len(retried) == 2 and all(e["note"] == "The kernel failed to start: timeout" for e in retried)
    # each retry discarded the failed attempt through the backend first
    assert len(backend.called("cancel_validation", name)) >= 2
    assert len(backend.called("ensure_validation", name)) >= 3


async def test_retry_status_says_what_and_why_before_the_next_attempt(run):
    engine, backend = await run(retry_backoff=30.0)  # the retry waits: its status can be read
    name = await _submit(backend)
    backend.validation_attempts[name] = [backend.fault("The runner could not start a kernel.")]
    deadline = time.monotonic() + WAIT
    while not (job := await engine.store.get(name))["status"].get("validationRetries"):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    st = job["status"]
    assert st["phase"] == Phase.VALIDATION_RUNNING
    assert st["message"] == "Retrying (1/3) after: The runner could not start a kernel."
    calls = len(backend.called("ensure_validation", name))
    engine.enqueue(name)  # a notification does not cut the backoff short
    await asyncio.sleep(0.2)
    assert len(backend.called("ensure_validation", name)) == calls
    events = await _events(engine, job)
    assert reasons(events) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, EventReason.VALIDATION_RETRIED]


async def test_transient_fault_four_times_fails_after_three_retries(run):
    engine, backend = await run()
    name = await _submit(backend)
    backend.validation_attempts[name] = [backend.fault("The kernel failed to start.") for _ in range(4)]
    backend.validation[name] = _success(backend, name)  # a fifth attempt would pass: there is none
    job = await engine.wait_for_terminal(name, WAIT)
    st = job["status"]
    assert st["phase"] == Phase.FAILED and st["reason"] == Reason.INFRASTRUCTURE_FAILED
    assert st["message"] == "The kernel failed to start. (after 3 retries)"
    assert st["validationRetries"] == 3
    assert st["validationStatus"]["reason"] == ResultReason.INFRASTRUCTURE_FAILED
    assert st.get("failedCellIndex") is None, "a fault blames no cell"
    assert len(backend.called("ensure_validation", name)) == 4
    transitions_and_retries(job, await _events(engine, job))


async def test_permanent_fault_fails_at_once(run):
    engine, backend = await run()
    name = await _submit(backend)
    backend.validation_attempts[name] = [backend.fault("No space left on device in /data/run-1.", transient=False)]
    backend.validation[name] = _success(backend, name)
    job = await engine.wait_for_terminal(name, WAIT)
    st = job["status"]
    assert st["reason"] == Reason.INFRASTRUCTURE_FAILED
    assert st["message"] == "No space left on device in /data/run-1."
    assert "validationRetries" not in st
    assert len(backend.called("ensure_validation", name)) == 1
    events = await _events(engine, job)
    assert reasons(events)[-1] == Reason.INFRASTRUCTURE_FAILED
    assert events[-1]["type"] == "Warning"
    transitions_and_retries(job, events)


async def test_a_notebook_failure_is_never_retried(run):
    engine, backend = await run()
    name = await _submit(backend)
    backend.validation_attempts[name] = [_failure(backend, name)]
    backend.validation[name] = _success(backend, name)
    job = await engine.wait_for_terminal(name, WAIT)
    st = job["status"]
    assert st["reason"] == Reason.VALIDATION_FAILED and st["failedCellIndex"] == 0
    assert "validationRetries" not in st
    assert len(backend.called("ensure_validation", name)) == 1


async def test_max_retries_zero_ends_at_the_first_transient_fault(run):
    engine, backend = await run(max_retries=0)
    name = await _submit(backend)
    backend.validation_attempts[name] = [backend.fault("The kernel failed to start.")]
    job = await engine.wait_for_terminal(name, WAIT)
    assert job["status"]["reason"] == Reason.INFRASTRUCTURE_FAILED
    assert job["status"]["message"] == "The kernel failed to start."


async def test_build_retries_have_their_own_counter(run):
    engine, backend = await run()
    name = await _submit(backend, build=True)
    backend.finish_build(name, reference="env-7")
    built = backend.build.pop(name)
    backend.build_attempts[name] = [backend.fault("The package index was unreachable."), built]
    backend.validation_attempts[name] = [backend.fault("The kernel failed to start."), _success(backend, name)]
    job = await engine.wait_for_terminal(name, WAIT)
    st = job["status"]
    assert st["phase"] == Phase.SUCCEEDED
    assert st["buildRetries"] == 1 and st["validationRetries"] == 1
    assert backend.called("ensure_build", name)[-1] == 1, "the backend saw the build's attempt number"
    events = await _events(engine, job)
    assert reasons(events) == [Reason.ACCEPTED, Reason.BUILD_STARTED, EventReason.BUILD_RETRIED,
                               Reason.BUILD_SUCCEEDED, Reason.VALIDATION_STARTED, EventReason.VALIDATION_RETRIED,
                               Reason.VALIDATION_SUCCEEDED]
    transitions_and_retries(job, events)


async def test_build_faults_used_up_end_infrastructure_failed(run):
    engine, backend = await run(max_retries=1)
    name = await _submit(backend, build=True)
    backend.build_attempts[name] = [backend.fault("The registry was unreachable."),
                                    backend.fault("The registry was unreachable.")]
    job = await engine.wait_for_terminal(name, WAIT)
    st = job["status"]
    assert st["reason"] == Reason.INFRASTRUCTURE_FAILED
    assert st["message"] == "The registry was unreachable. (after 1 retry)"
    assert st["buildStatus"]["phase"] == "Failed" and st["buildRetries"] == 1
    assert backend.called("ensure_validation", name) == []


async def test_a_new_engine_resumes_mid_retry_with_the_counter_from_status(run):
    engine, backend = await run(retry_backoff=30.0)
    name = await _submit(backend)
    backend.validation_attempts[name] = [backend.fault("The kernel failed to start.") for _ in range(5)]
    deadline = time.monotonic() + WAIT
    while not (await engine.store.get(name))["status"].get("validationRetries"):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    await engine.stop()  # dies in its backoff
    backend2 = FakeBackend()
    backend2.store = backend.store
    backend2.validation_attempts = backend.validation_attempts
    backend2.files = backend.files
    engine2, _ = await run(backend2)
    job = await engine2.wait_for_terminal(name, WAIT)
    st = job["status"]
    assert st["reason"] == Reason.INFRASTRUCTURE_FAILED and st["validationRetries"] == 3
    # the new engine ran attempts 1, 2 and 3 only: 3 retries in all, not 3 more
    assert validation_attempt(job) == 3
    assert len(backend2.called("ensure_validation", name)) == 3
    transitions_and_retries(job, await _events(engine2, job))


async def test_the_validation_deadline_counts_from_the_attempt(run):
    engine, backend = await run()
    name = await _submit(backend)
    await wait_within(_until_phase(engine, name, Phase.VALIDATION_RUNNING), WAIT)
    job = await engine.store.get(name)
    st = job["status"]
    entered = attempt_started_at(st, Phase.VALIDATION_RUNNING)
    assert entered is not None
    st2 = {**st, "lastRetryTime": isotime()}
    assert attempt_started_at(st2, Phase.VALIDATION_RUNNING) > entered
    # a retry before the phase was entered (a build's) does not move the validation's start
    st3 = {**st, "lastRetryTime": "2000-01-01T00:00:00.000000Z"}
    assert attempt_started_at(st3, Phase.VALIDATION_RUNNING) == entered


async def test_a_retried_validation_gets_its_full_time(run):
    engine, backend = await run(validation_timeout=1.0, retry_backoff=0.01)
    name = await _submit(backend)
    # the first attempt runs for 0.7 s, then faults; the second runs 0.7 s and passes:
    # 1.4 s in the phase, more than its 1 s, but each attempt within it
    backend.validation_attempts[name] = [Observation(RUNNING)]
    await wait_within(_until_phase(engine, name, Phase.VALIDATION_RUNNING), WAIT)
    await asyncio.sleep(0.7)
    backend.validation_attempts[name] = [backend.fault("The kernel failed to start."), Observation(RUNNING)]
    engine.enqueue(name)
    deadline = time.monotonic() + WAIT
    while not (await engine.store.get(name))["status"].get("validationRetries"):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.7)
    backend.validation_attempts[name][1] = _success(backend, name)
    engine.enqueue(name)
    job = await engine.wait_for_terminal(name, WAIT)
    assert job["status"]["reason"] == Reason.VALIDATION_SUCCEEDED, job["status"]["message"]


async def _until_phase(engine: Engine, name: str, phase: str) -> None:
    while (await engine.store.get(name)).get("status", {}).get("phase") != phase:
        await asyncio.sleep(0.01)


async def test_describe_and_the_verdict_line_show_retries_and_the_error(run):
    import jupyter_nbvalidation.cli.render as render
    from jupyter_nbvalidation.core.timeline import compute_timeline

    engine, backend = await run()
    name = await _submit(backend)
    backend.validation_attempts[name] = [backend.fault("The kernel failed to start.") for _ in range(4)]
    job = await engine.wait_for_terminal(name, WAIT)
    events = await _events(engine, job)
    text = render.describe(job, compute_timeline(job, events), events)
    assert "Retries:      validation 3 (last " in text
    assert text.count("ValidationRetried") == 3
    assert render.verdict_line(job).startswith(f"⚠ {name}: Error (InfrastructureFailed) The kernel failed to start.")
    # the timeline draws each phase once: the retries are not phases
    assert [p["phase"] for p in compute_timeline(job, events)["phases"]] == NO_BUILD_PATH + [Phase.FAILED]
