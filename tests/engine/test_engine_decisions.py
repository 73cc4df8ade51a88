"""The engine's decisions against the in-memory ports (tests/fake_backend.py):
the phase path, build before validate, timeouts, cancellation, backoff and
the event rules (docs/architecture.md, "The phase path" and "Events").

These run in milliseconds; the same decisions are exercised with real venvs,
kernels and SQLite in test_local_backend.py and test_event_rules.py."""

from __future__ import annotations

import asyncio
import functools
import logging
import time

import pytest
from fake_backend import FakeBackend
from helpers import phases, reasons, wait_async

from jupyter_nbvalidation.backends.base import FAILED, Observation
from jupyter_nbvalidation.core.errors import InputRejected, PermanentFailure, TemporaryFailure
from jupyter_nbvalidation.core.errors import InputRejected as InputError
from jupyter_nbvalidation.core.events import transition_event_name
from jupyter_nbvalidation.core.model import CANCEL_ANNOTATION, Phase, Reason, isotime, new_job
from jupyter_nbvalidation.core.tasks import wait_within
from jupyter_nbvalidation.engine.engine import Engine
from jupyter_nbvalidation.engine.transitions import new_status

pytestmark = pytest.mark.asyncio

WAIT = 10.0  # an upper bound only: every test finishes in milliseconds when the engine decides right

BUILD_PATH = [Phase.INITIALIZING, Phase.BUILDING, Phase.BUILD_COMPLETE, Phase.VALIDATION_RUNNING, Phase.SUCCEEDED]


@pytest.fixture
def run(start_engine):
    """run(backend=None, **engine_kw) -> (engine, backend), started; stopped afterwards (tests/conftest.py)."""
    return functools.partial(start_engine, log=logging.getLogger("nbvalidation.test.engine"), workers=2)


async def _submit(backend: FakeBackend, engine: Engine | None = None, *, build: bool = True,
                  name: str = "nb-1", **spec) -> str:
    spec = {"notebook": {"path": "nb.ipynb"}, **spec}
    if not build:
        spec["podConfig"] = {"buildConfig": {"enabled": False}}
    await backend.submit(new_job(spec, name=name), {})
    return name


async def _until(engine: Engine, name: str, phase: str) -> dict:
    """Wait (store watch, no polling) until the job reaches ``phase``."""
    changed = asyncio.Event()
    unwatch = engine.store.watch(lambda n: changed.set() if n == name else None)
    try:
        async def wait() -> dict:
            while True:
                job = await engine.store.get(name)
                if (job.get("status") or {}).get("phase") == phase:
                    return job
                changed.clear()
                await changed.wait()
        return await wait_within(wait(), WAIT)
    finally:
        unwatch()


async def _events(engine: Engine, job: dict) -> list[dict]:
    await engine.recorder.flush()
    return await engine.store.list_events(job)


# -- the phase path -------------------------------------------------------------

async def test_the_full_phase_path_with_a_build(run):
    engine, backend = await run()
    name = await _submit(backend)
    await _until(engine, name, Phase.BUILDING)
    backend.finish_build(name, reference="env-42")
    await _until(engine, name, Phase.VALIDATION_RUNNING)
    backend.finish_validation(name)
    job = await engine.wait_for_terminal(name, WAIT)
    assert phases(job) == BUILD_PATH
    assert job["status"]["reason"] == Reason.VALIDATION_SUCCEEDED
    assert job["status"]["buildStatus"]["imageReference"] == "env-42"
    assert {c["type"]: c["status"] for c in job["status"]["conditions"]} == {
        "Ready": "True", "BuildReady": "True", "ValidationComplete": "True"}
    assert reasons(await _events(engine, job)) == [
        Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_SUCCEEDED, Reason.VALIDATION_STARTED,
        Reason.VALIDATION_SUCCEEDED]
    await engine.wait_idle(WAIT)
    assert backend.called("cleanup", name), "a terminal job's resources are released"


async def test_build_disabled_goes_straight_to_validation(run):
    engine, backend = await run()
    name = await _submit(backend, build=False)
    await _until(engine, name, Phase.VALIDATION_RUNNING)
    backend.finish_validation(name)
    job = await engine.wait_for_terminal(name, WAIT)
    assert phases(job) == [Phase.INITIALIZING, Phase.VALIDATION_RUNNING, Phase.SUCCEEDED]
    assert backend.called("ensure_build") == []
    assert backend.called("ensure_validation", name)[0] is None  # no built environment to hand over


async def test_a_failed_validation_fails_the_job(run):
    engine, backend = await run()
    name = await _submit(backend, build=False)
    await _until(engine, name, Phase.VALIDATION_RUNNING)
    backend.finish_validation(name, verdict="Failed", message="cell 0 raised")
    job = await engine.wait_for_terminal(name, WAIT)
    assert job["status"]["phase"] == Phase.FAILED
    assert job["status"]["reason"] == Reason.VALIDATION_FAILED
    assert job["status"]["message"] == "cell 0 raised"
    assert job["status"]["failedCellIndex"] == 0


async def test_rejected_inputs_fail_at_initializing(run):
    engine, backend = await run()
    backend.prepare_error["nb-1"] = InputError("requirements.txt: line 3 is not a requirement", field="requirements")
    name = await _submit(backend)
    job = await engine.wait_for_terminal(name, WAIT)
    assert phases(job) == [Phase.INITIALIZING, Phase.FAILED]
    assert job["status"]["reason"] == Reason.INVALID_INPUT
    assert "line 3" in job["status"]["message"]
    assert backend.called("ensure_build") == [] and backend.called("ensure_validation") == []


# -- build before validate ---------------------------------------------------------

async def test_validation_never_starts_before_the_build_is_recorded(run):
    engine, backend = await run()
    name = await _submit(backend)
    await _until(engine, name, Phase.BUILDING)
    for _ in range(5):  # however often the job is looked at while it builds
        engine.enqueue(name)
        await engine.wait_idle(WAIT)
    assert backend.called("ensure_validation") == []
    backend.finish_build(name, reference="env-7")
    await _until(engine, name, Phase.VALIDATION_RUNNING)
    await engine.wait_idle(WAIT)
    # the validation gets exactly the reference persisted at BuildComplete
    assert set(backend.called("ensure_validation", name)) == {"env-7"}


async def test_a_failed_build_never_validates(run):
    engine, backend = await run()
    name = await _submit(backend)
    await _until(engine, name, Phase.BUILDING)
    backend.finish_build(name, ok=False, message="no matching distribution")
    job = await engine.wait_for_terminal(name, WAIT)
    assert phases(job) == [Phase.INITIALIZING, Phase.BUILDING, Phase.FAILED]
    assert job["status"]["reason"] == Reason.BUILD_FAILED
    assert job["status"]["buildStatus"]["phase"] == "Failed"
    assert "no matching distribution" in job["status"]["message"]
    assert backend.called("ensure_validation") == []


async def test_build_complete_without_a_reference_fails_instead_of_validating(run):
    backend = FakeBackend()
    name = await _submit(backend)
    job = await backend.store.get(name)
    status = new_status(job, Phase.INITIALIZING, Reason.ACCEPTED, "accepted")
    job = await backend.store.update_status(name, status, job["metadata"]["resourceVersion"])
    status = new_status(job, Phase.BUILDING, Reason.BUILD_STARTED, "building")
    job = await backend.store.update_status(name, status, job["metadata"]["resourceVersion"])
    status = new_status(job, Phase.BUILD_COMPLETE, Reason.BUILD_SUCCEEDED, "built")  # no imageReference
    await backend.store.update_status(name, status, job["metadata"]["resourceVersion"])
    engine, _ = await run(backend)
    job = await engine.wait_for_terminal(name, WAIT)
    assert job["status"]["phase"] == Phase.FAILED
    assert job["status"]["reason"] == Reason.BUILD_FAILED
    assert backend.called("ensure_validation") == []


@pytest.mark.parametrize("recorded", ["nothing", "a reference without BuildComplete", "BuildComplete without a reference"])
async def test_validation_without_a_recorded_build_fails_instead_of_validating(run, recorded):
    """A job that builds is in ValidationRunning without both a BuildComplete transition and
    its environment reference (a status written by something else than this engine): it is
    never validated (in no environment, or in one no build recorded), it fails."""
    backend = FakeBackend()
    name = await _submit(backend)
    job = await backend.store.get(name)
    path = [(Phase.INITIALIZING, Reason.ACCEPTED), (Phase.VALIDATION_RUNNING, Reason.VALIDATION_STARTED)]
    if recorded == "BuildComplete without a reference":
        path[1:1] = [(Phase.BUILDING, Reason.BUILD_STARTED), (Phase.BUILD_COMPLETE, Reason.BUILD_SUCCEEDED)]
    for phase, reason in path:
        status = new_status(job, phase, reason, reason)
        if recorded == "a reference without BuildComplete":
            status["buildStatus"] = {"phase": "Complete", "imageReference": "env-9"}
        job = await backend.store.update_status(name, status, job["metadata"]["resourceVersion"])
    engine, _ = await run(backend)
    job = await engine.wait_for_terminal(name, WAIT)
    assert phases(job) == [phase for phase, _ in path] + [Phase.FAILED]
    assert job["status"]["reason"] == Reason.VALIDATION_FAILED
    assert job["status"]["message"] == "No built environment is recorded for this job; refusing to validate."
    assert backend.called("ensure_validation") == []


# -- timeouts and cancellation ---------------------------------------------------------

async def test_a_build_that_runs_too_long_times_out_and_is_cancelled(run):
    engine, backend = await run(build_timeout=0.2)
    name = await _submit(backend)
    job = await engine.wait_for_terminal(name, WAIT)
    assert phases(job) == [Phase.INITIALIZING, Phase.BUILDING, Phase.FAILED]
    assert job["status"]["reason"] == Reason.BUILD_TIMED_OUT
    assert job["status"]["buildStatus"]["phase"] == "Failed"
    assert backend.called("cancel_build", name)
    assert backend.called("ensure_validation") == []


async def test_the_spec_timeout_bounds_the_validation(run):
    engine, backend = await run(validation_timeout=3600)
    name = await _submit(backend, build=False, timeout="200ms")
    started = time.monotonic()
    job = await engine.wait_for_terminal(name, WAIT)
    assert time.monotonic() - started >= 0.2
    assert job["status"]["reason"] == Reason.VALIDATION_TIMED_OUT
    assert "200ms" in job["status"]["message"] or "0.2" in job["status"]["message"]
    assert backend.called("cancel_validation", name)


async def test_cancelling_a_build_cancels_it_and_fails_the_job(run):
    engine, backend = await run()
    name = await _submit(backend)
    await _until(engine, name, Phase.BUILDING)
    await engine.request_cancel(name)
    job = await engine.wait_for_terminal(name, WAIT)
    assert job["status"]["reason"] == Reason.CANCELLED
    assert job["status"]["buildStatus"]["message"] == "Cancelled"
    assert backend.called("cancel_build", name)
    assert backend.called("cancel_validation") == []


# -- backoff ----------------------------------------------------------------------

async def test_a_failing_backend_call_is_retried_with_growing_backoff(run):
    engine, backend = await run(max_backoff=0.5)
    delays: list[float] = []
    enqueue_after = engine.enqueue_after

    def record(name: str, delay: float) -> None:
        delays.append(delay)
        enqueue_after(name, delay)

    engine.enqueue_after = record  # type: ignore[method-assign]
    backend.raise_next["ensure_build"] = 3
    name = await _submit(backend)
    await _until(engine, name, Phase.BUILDING)
    await wait_async(lambda: len(backend.called("ensure_build", name)) >= 4, WAIT, "the fourth ensure_build")
    backend.finish_build(name)
    await _until(engine, name, Phase.VALIDATION_RUNNING)
    assert engine.errors == 3
    retries = delays[:3]
    # 0.2 s, 0.4 s, then 0.8 s capped at max_backoff (0.5 s), each with ±20 % jitter
    assert 0.16 <= retries[0] <= 0.24
    assert 0.32 <= retries[1] <= 0.48
    assert 0.40 <= retries[2] <= 0.60
    assert phases(await engine.store.get(name))[:2] == [Phase.INITIALIZING, Phase.BUILDING]


async def test_a_temporary_failure_is_requeued_with_backoff_and_at_least_its_delay(run):
    engine, backend = await run(max_backoff=5.0)
    delays: list[float] = []
    enqueue_after = engine.enqueue_after

    def record(name: str, delay: float) -> None:
        delays.append(delay)
        enqueue_after(name, delay)

    engine.enqueue_after = record  # type: ignore[method-assign]
    backend.raise_with["ensure_build"] = TemporaryFailure("creating jobs/x: 429 TooManyRequests", delay=0.3)
    backend.raise_next["ensure_build"] = 2
    name = await _submit(backend)
    await _until(engine, name, Phase.BUILDING)
    await wait_async(lambda: len(backend.called("ensure_build", name)) >= 3, WAIT, "the third ensure_build")
    job = await engine.store.get(name)
    assert job["status"]["phase"] == Phase.BUILDING, "a temporary failure changes no phase"
    assert [w for w in engine.store.writes if w[0] == "status"][-1][1] == Phase.BUILDING
    # the first retry would be 0.2 s ± 20 %: the failure's own delay (0.3 s) is the floor, the second 0.4 s ± 20 %
    assert delays[0] == pytest.approx(0.3)
    assert 0.32 <= delays[1] <= 0.48
    assert engine.backoff(1, delay=60.0) == 5.0, "a failure's delay is capped by max_backoff"
    backend.finish_build(name)
    backend.finish_validation(name)
    done = await engine.wait_for_terminal(name, WAIT)
    assert done["status"]["phase"] == Phase.SUCCEEDED and engine.errors == 2


@pytest.mark.parametrize("where", ["ensure_build", "ensure_validation"])
async def test_a_permanent_failure_fails_the_job_with_its_phases_reason_and_is_not_retried(run, where):
    engine, backend = await run()
    message = "creating pods/nvj-x: 403 Forbidden: pods is forbidden"
    backend.raise_with[where] = PermanentFailure(message)
    backend.raise_next[where] = 1
    name = await _submit(backend)
    if where == "ensure_validation":
        await _until(engine, name, Phase.BUILDING)
        backend.finish_build(name)
    job = await engine.wait_for_terminal(name, WAIT)
    await engine.wait_idle(WAIT)
    assert job["status"]["phase"] == Phase.FAILED
    assert job["status"]["message"] == message
    assert len(backend.called(where, name)) == 1, "never retried"
    assert engine.errors == 0
    if where == "ensure_build":
        assert job["status"]["reason"] == Reason.BUILD_FAILED
        assert job["status"]["buildStatus"]["phase"] == "Failed"
        assert job["status"]["buildStatus"]["message"] == message
        assert backend.called("cancel_build", name)
    else:
        assert job["status"]["reason"] == Reason.VALIDATION_FAILED
    assert reasons(await _events(engine, job))[-1] == job["status"]["reason"]


async def test_a_permanent_failure_may_name_its_reason(run):
    engine, backend = await run()
    backend.raise_with["ensure_build"] = PermanentFailure("the build timed out on the cluster",
                                                          reason=Reason.BUILD_TIMED_OUT)
    backend.raise_next["ensure_build"] = 1
    name = await _submit(backend)
    job = await engine.wait_for_terminal(name, WAIT)
    assert job["status"]["reason"] == Reason.BUILD_TIMED_OUT


async def test_a_snapshot_that_cannot_be_used_fails_at_initializing_and_a_missing_one_later_fails_its_phase(run):
    engine, backend = await run()
    backend.raise_with["read_snapshot"] = InputRejected("The notebook snapshot is missing.", "spec.notebook.path")
    backend.raise_next["read_snapshot"] = 1
    name = await _submit(backend)
    job = await engine.wait_for_terminal(name, WAIT)
    assert phases(job) == [Phase.INITIALIZING, Phase.FAILED]
    assert job["status"]["reason"] == Reason.INVALID_INPUT
    # no golden notebook stored although the spec names one: the plan refuses it, naming the field
    other = await _submit(backend, name="nb-2", goldenNotebook={"path": "g.ipynb"})
    job = await engine.wait_for_terminal(other, WAIT)
    assert job["status"]["reason"] == Reason.INVALID_INPUT and "golden" in job["status"]["message"]
    assert backend.called("prepare", other) == []


async def test_a_permanent_failure_to_cancel_still_cancels_the_job(run):
    engine, backend = await run()
    backend.raise_with["cancel_validation"] = PermanentFailure("deleting pods/x: 403 Forbidden")
    backend.raise_next["cancel_validation"] = 5
    name = await _submit(backend, build=False)
    await _until(engine, name, Phase.VALIDATION_RUNNING)
    await engine.request_cancel(name)
    job = await engine.wait_for_terminal(name, WAIT)
    assert job["status"]["reason"] == Reason.CANCELLED
    assert len(backend.called("cancel_validation", name)) == 1


# -- the plan -------------------------------------------------------------------------

async def test_the_plan_is_computed_once_and_every_backend_call_gets_it(run):
    engine, backend = await run(build_timeout=120, validation_timeout=300)
    name = await _submit(backend, cellTimeout="45s", timeout="10m",
                         comparisonConfig={"strategy": "normalized", "floatingPointTolerance": 0.01})
    await _until(engine, name, Phase.BUILDING)
    for _ in range(3):
        engine.enqueue(name)
        await engine.wait_idle(WAIT)
    backend.finish_build(name)
    await _until(engine, name, Phase.VALIDATION_RUNNING)
    backend.finish_validation(name)
    await engine.wait_for_terminal(name, WAIT)
    await engine.wait_idle(WAIT)
    assert len(backend.called("read_snapshot", name)) == 1, "the snapshot is read once, for the plan"
    plan = backend.plans[0]
    assert all(p is plan for p in backend.plans) and len(backend.plans) >= 4
    assert (plan.build_timeout, plan.validation_timeout, plan.cell_timeout) == (120.0, 600.0, 45.0)
    assert plan.runner_args == ("--comparison", "normalized", "--abs-tol", "0.01",
                                "--cell-timeout", "45", "--timeout", "600")
    assert engine._plans == {}, "a finished job's plan is dropped"


# -- event rules ----------------------------------------------------------------------

async def test_looking_again_without_a_flip_posts_no_event(run):
    engine, backend = await run()
    name = await _submit(backend)
    job = await _until(engine, name, Phase.BUILDING)
    before = await _events(engine, job)
    for _ in range(5):
        engine.enqueue(name)
        await engine.wait_idle(WAIT)
    assert len(backend.called("ensure_build", name)) >= 5
    assert await _events(engine, job) == before
    assert reasons(before) == [Reason.ACCEPTED, Reason.BUILD_STARTED]


async def test_a_rewrite_of_the_same_phase_is_no_flip_and_posts_no_event(run):
    engine, backend = await run()
    name = await _submit(backend)
    job = await _until(engine, name, Phase.BUILDING)
    await engine.wait_idle(WAIT)
    job = await engine._write(job, lambda cur: new_status(cur, Phase.BUILDING, Reason.BUILD_STARTED, "still building"))
    assert job["status"]["message"] == "still building"
    assert reasons(await _events(engine, job)) == [Reason.ACCEPTED, Reason.BUILD_STARTED]


async def test_each_event_follows_its_status_write_once(run):
    engine, backend = await run()
    name = await _submit(backend, build=False)
    await _until(engine, name, Phase.VALIDATION_RUNNING)
    backend.finish_validation(name)
    job = await engine.wait_for_terminal(name, WAIT)
    await engine.recorder.flush()
    log = [entry[:2] for entry in backend.store.writes]
    # events are posted in the background: each one after its own status write, once, in order
    assert [w for w in log if w[0] == "status"] == [
        ("status", Phase.INITIALIZING), ("status", Phase.VALIDATION_RUNNING), ("status", Phase.SUCCEEDED)]
    assert [w for w in log if w[0] == "event"] == [
        ("event", Reason.ACCEPTED), ("event", Reason.VALIDATION_STARTED), ("event", Reason.VALIDATION_SUCCEEDED)]
    for phase, reason in [(Phase.INITIALIZING, Reason.ACCEPTED), (Phase.VALIDATION_RUNNING, Reason.VALIDATION_STARTED),
                          (Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED)]:
        assert log.index(("status", phase)) < log.index(("event", reason))
    events = await _events(engine, job)
    # named after the transition it records, with that transition's reason and message
    assert [e["metadata"]["name"] for e in events] == [transition_event_name(job, i) for i in range(3)]
    assert [(e["reason"], e["note"]) for e in events] == [
        (t["reason"], t["message"]) for t in job["status"]["transitions"]]
    assert [e["type"] for e in events] == ["Normal"] * 3


async def test_a_failure_event_is_a_warning(run):
    engine, backend = await run()
    name = await _submit(backend)
    await _until(engine, name, Phase.BUILDING)
    backend.finish_build(name, ok=False)
    job = await engine.wait_for_terminal(name, WAIT)
    assert [e["type"] for e in await _events(engine, job)] == ["Normal", "Normal", "Warning"]


async def test_a_status_write_that_fails_posts_the_fallback_warning_not_the_transition(run):
    engine, backend = await run(write_retries=2)
    name = await _submit(backend)
    job = await _until(engine, name, Phase.BUILDING)
    backend.store.fail_status_writes = 2  # both attempts of the next transition's write
    backend.finish_build(name)
    await engine.recorder.flush()
    await wait_async(lambda: engine.errors != 0, WAIT, "the engine to count the failed write", interval=0.01)
    await engine.recorder.flush()
    events = await _events(engine, job)
    assert reasons(events) == [Reason.ACCEPTED, Reason.BUILD_STARTED, f"{Reason.BUILD_SUCCEEDED}StatusUpdateFailed"]
    assert events[-1]["type"] == "Warning"
    # the engine retries; the transition's own event follows its (now successful) write
    job = await _until(engine, name, Phase.VALIDATION_RUNNING)
    assert Reason.BUILD_SUCCEEDED in reasons(await _events(engine, job))


async def test_transitions_missing_their_events_are_posted_once_after_a_restart(run):
    backend = FakeBackend()
    name = await _submit(backend)
    job = await backend.store.get(name)
    # a process wrote two transitions and died before posting their events
    for phase, reason in [(Phase.INITIALIZING, Reason.ACCEPTED), (Phase.BUILDING, Reason.BUILD_STARTED)]:
        job = await backend.store.update_status(name, new_status(job, phase, reason, reason),
                                                job["metadata"]["resourceVersion"])
    engine, _ = await run(backend)
    await engine.wait_idle(WAIT)
    await engine.recorder.flush()
    assert engine.events_recovered == 2
    assert reasons(await _events(engine, job)) == [Reason.ACCEPTED, Reason.BUILD_STARTED]
    await engine.stop()
    # the next start finds nothing missing
    again, _ = await run(backend)
    await again.wait_idle(WAIT)
    await again.recorder.flush()
    assert again.events_recovered == 0
    assert reasons(await _events(again, job)) == [Reason.ACCEPTED, Reason.BUILD_STARTED]


async def test_a_cancel_request_on_a_terminal_job_changes_nothing(run):
    engine, backend = await run()
    name = await _submit(backend, build=False)
    await _until(engine, name, Phase.VALIDATION_RUNNING)
    backend.finish_validation(name)
    job = await engine.wait_for_terminal(name, WAIT)
    await backend.store.set_annotation(name, CANCEL_ANNOTATION, isotime())
    engine.enqueue(name)
    await engine.wait_idle(WAIT)
    after = await backend.store.get(name)
    assert after["status"] == job["status"]
    assert reasons(await _events(engine, job))[-1] == Reason.VALIDATION_SUCCEEDED


# -- every verdict says its environment (issue 21) --------------------------------

async def test_the_environment_is_written_when_the_build_is_planned_and_kept_on_the_verdict(run):
    engine, backend = await run()
    await backend.submit(new_job({"notebook": {"path": "nb.ipynb"}}, name="nb-env"),
                         {"requirements.txt": b"six==1.16.0\ntabulate\n"})
    building = await _until(engine, "nb-env", Phase.BUILDING)
    said = backend.plans[-1].detected
    assert said.startswith("2 requirements") and building["status"]["environment"] == said
    backend.finish_build("nb-env")
    await _until(engine, "nb-env", Phase.VALIDATION_RUNNING)
    backend.finish_validation("nb-env", verdict="Failed", message="cell 1: KeyError: 'x'")
    job = await engine.wait_for_terminal("nb-env", WAIT)
    assert job["status"]["environment"] == said and job["status"]["message"] == "cell 1: KeyError: 'x'"

    name = await _submit(backend, build=False, name="nb-unbuilt")
    await _until(engine, name, Phase.VALIDATION_RUNNING)
    backend.finish_validation(name)
    job = await engine.wait_for_terminal(name, WAIT)
    assert job["status"]["environment"] == "build disabled: the server's interpreter"


def _module_not_found(module: str, message: str = "cell 2: ModuleNotFoundError: No module named") -> Observation:
    result = {"verdict": "Failed", "reason": "CellExecutionFailed", "message": f"{message} '{module}'",
              "failedCellIndex": 1, "durationSeconds": 0.01,
              "results": [{"cellIndex": 0, "status": "Success"},
                          {"cellIndex": 1, "status": "Failure", "errorName": "ModuleNotFoundError",
                           "errorMessage": f"No module named '{module}'"}]}
    return Observation(state=FAILED, result=result, started_at=isotime(), finished_at=isotime())


@pytest.mark.parametrize("requirements, module, hint", [
    # the origin's words are requirements.py's (the other half of issue 21 changes them): {origin}
    (None, "sympy", ("No module named 'sympy': the environment was built with no requirements declared",
                     "; declare sympy in requirements.txt beside the notebook.")),
    (b"numpy\n", "sympy.abc", ("No module named 'sympy.abc': the environment was built from {origin}; "
                               "declare sympy there", ".")),
    (b"scikit-learn\nSymPy==1.12\n", "sympy", None),  # declared: not a missing declaration
])
async def test_a_module_not_found_says_where_the_environment_came_from(run, requirements, module, hint):
    engine, backend = await run()
    files = {"requirements.txt": requirements} if requirements is not None else {}
    await backend.submit(new_job({"notebook": {"path": "nb.ipynb"}}, name="nb-mod"), files)
    await _until(engine, "nb-mod", Phase.BUILDING)
    origin = backend.plans[-1].requirements.origin
    backend.finish_build("nb-mod")
    await _until(engine, "nb-mod", Phase.VALIDATION_RUNNING)
    backend.validation["nb-mod"] = _module_not_found(module)
    backend._wake("nb-mod")
    job = await engine.wait_for_terminal("nb-mod", WAIT)
    message = job["status"]["message"]
    assert message.startswith(f"cell 2: ModuleNotFoundError: No module named '{module}'"), message  # its own first
    if hint is None:
        assert "declare" not in message, message
    else:
        start, end = hint
        said = message.split(". ", 1)[1]
        assert said.startswith(start.format(origin=origin)) and said.endswith(end), message


async def test_a_module_not_found_with_the_build_disabled_names_the_interpreter(run):
    engine, backend = await run()
    name = await _submit(backend, build=False, name="nb-mod-unbuilt")
    await _until(engine, name, Phase.VALIDATION_RUNNING)
    backend.validation[name] = _module_not_found("sympy")
    backend._wake(name)
    job = await engine.wait_for_terminal(name, WAIT)
    assert ("the build is disabled, so the notebook ran in the server's interpreter; install sympy there"
            in job["status"]["message"]), job["status"]["message"]


# -- events that cannot be recorded ------------------------------------------------

@pytest.mark.parametrize("fault", ["always", "twice"])
async def test_an_event_that_cannot_be_recorded_is_never_dropped_silently(run, fault):
    """A store that refuses an event: tried again a bounded number of times; when it stays
    refused, the job's status says its events are incomplete (and the verdict is unchanged).
    A refusal that passes (a busy store) records the event, and nothing is flagged."""
    from jupyter_nbvalidation.core.errors import StoreError

    backend = FakeBackend()
    recorded = backend.store.add_event
    refused: list[str] = []

    async def add_event(event: dict) -> dict:
        if event["reason"] == Reason.VALIDATION_STARTED and (fault == "always" or len(refused) < 2):
            refused.append(event["reason"])
            raise StoreError("database is locked")
        return await recorded(event)

    backend.store.add_event = add_event
    engine, backend = await run(backend)
    name = await _submit(backend, build=False)
    await _until(engine, name, Phase.VALIDATION_RUNNING)
    backend.finish_validation(name)
    job = await engine.wait_for_terminal(name, WAIT)
    assert job["status"]["phase"] == Phase.SUCCEEDED
    events = reasons(await _events(engine, job))
    if fault == "always":
        assert len(refused) == engine.recorder.post_retries  # bounded
        assert Reason.VALIDATION_STARTED not in events
        job = await wait_async(lambda: _flagged(engine, name), WAIT, "status.eventsIncomplete")
        assert job["status"]["phase"] == Phase.SUCCEEDED  # the mark changes nothing else
    else:
        assert len(refused) == 2 and Reason.VALIDATION_STARTED in events
        await engine.wait_idle(WAIT)
        assert "eventsIncomplete" not in (await engine.store.get(name))["status"]


async def _flagged(engine: Engine, name: str) -> dict | None:
    job = await engine.store.get(name)
    return job if job["status"].get("eventsIncomplete") else None
