"""The phase engine: a level-triggered, idempotent, event-driven reconcile loop.

Written once for every backend. Each reconcile reads the job as stored,
decides the next step from its persisted phase, acts through the backend,
and records phase changes through :meth:`Engine._write` — the one path that
writes status first and then emits exactly one event per flip
(docs/architecture.md, "Events").

Build first, then validate: validation is only started from the
ValidationRunning phase, which can only be entered after BuildComplete was
durably written, and the environment it gets is the reference read from
that persisted status.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import datetime
import random
import time
from typing import Any, Callable, Union, cast

from jupyter_nbvalidation.backends.base import FAILED, RUNNING, SUCCEEDED, Backend, Observation
from jupyter_nbvalidation.core.documents import Job, JobStatus, Progress, Transition, ValidationStatus
from jupyter_nbvalidation.core.errors import InputRejected, PermanentFailure, TemporaryFailure
from jupyter_nbvalidation.core.events import EventRecorder, transition_event_name
from jupyter_nbvalidation.core.model import (
    ALLOWED_TRANSITIONS,
    CANCEL_ANNOTATION,
    BuildPhase,
    ConditionType,
    EventReason,
    Phase,
    Reason,
    ResultReason,
    build_attempt,
    build_enabled,
    condition_states,
    format_duration,
    is_terminal,
    isotime,
    parse_time,
    set_condition,
    transition_event_type,
    utcnow,
    validation_attempt,
)
from jupyter_nbvalidation.core.plan import Timeouts, ValidationPlan, make_plan, missing_file_hint, timeouts
from jupyter_nbvalidation.core.redaction import scrub
from jupyter_nbvalidation.core.tasks import cancel_all, cancel_and_wait, wait_within
from jupyter_nbvalidation.environment.notes import environment_sentence, missing_module_hint
from jupyter_nbvalidation.store.base import Conflict, NotFound


class _Again:
    """A step wrote a transition: look at the job again now."""


_AGAIN = _Again()
#: what a step returns: a requeue delay (seconds), None (nothing to wait for) or _AGAIN
Step = Union[float, None, _Again]


class StatusWriteFailed(Exception):
    """A status write failed for good (after retries)."""


def new_status(job: Job, phase: str, reason: str, message: str, now: str | None = None) -> JobStatus:
    """A copy of the job's status moved to ``phase``; conditions, times and
    the transition history follow. Raises if the transition is not allowed."""
    status = copy.deepcopy(job.get("status") or {})
    before = status.get("phase", "")
    if phase != before and phase not in ALLOWED_TRANSITIONS[before]:
        raise ValueError(f"transition {before or '(none)'} -> {phase} is not allowed")
    now = now or isotime()
    message = scrub(message)
    status["phase"], status["reason"], status["message"] = phase, reason, message
    status["observedGeneration"] = job["metadata"].get("generation", 1)
    if phase != before:
        status.setdefault("transitions", []).append(
            {"phase": phase, "reason": reason, "message": message, "time": now})
    status.setdefault("startTime", now)
    set_condition(status, ConditionType.READY, "True" if phase == Phase.SUCCEEDED else "False", reason, message, now)
    if phase == Phase.BUILD_COMPLETE:
        set_condition(status, ConditionType.BUILD_READY, "True", reason, message, now)
    elif phase == Phase.FAILED and before in ("", Phase.INITIALIZING, Phase.BUILDING):
        if build_enabled(job["spec"]):
            set_condition(status, ConditionType.BUILD_READY, "False", reason, message, now)
    if phase in Phase.TERMINAL:
        status["completionTime"] = now
        set_condition(status, ConditionType.VALIDATION_COMPLETE,
                      "True" if before == Phase.VALIDATION_RUNNING else "False", reason, message, now)
    return status


def flipped(before: JobStatus, after: JobStatus) -> bool:
    """Rule 1: an event for a phase or condition-status flip, not a rewrite."""
    return (before.get("phase", "") != after.get("phase", "")
            or condition_states(before) != condition_states(after))


def phase_entered_at(status: JobStatus, phase: str) -> datetime.datetime | None:
    for t in reversed(status.get("transitions", [])):
        if t.get("phase") == phase:
            return parse_time(t.get("time"))
    return None


def attempt_started_at(status: JobStatus, phase: str) -> datetime.datetime | None:
    """When the current attempt of ``phase`` began: the phase's entry, or the
    last retry (``status.lastRetryTime``) when that came later. A phase's
    deadline counts from here, so a retried attempt gets its full time."""
    entered = phase_entered_at(status, phase)
    retried = parse_time(status.get("lastRetryTime"))
    if entered is not None and retried is not None and retried > entered:
        return retried
    return entered


#: per phase with attempts: the status counter of its retries, and the event a retry posts
RETRY_COUNTERS: dict[str, tuple[str, EventReason]] = {
    Phase.BUILDING: ("buildRetries", EventReason.BUILD_RETRIED),
    Phase.VALIDATION_RUNNING: ("validationRetries", EventReason.VALIDATION_RETRIED),
}


class Engine:
    """Owns the work queue, the workers and the event recorder."""

    def __init__(self, backend: Backend, *, log: Any, build_timeout: float = 15 * 60,
                 validation_timeout: float = 30 * 60, workers: int = 16, resync_period: float = 300.0,
                 conflict_retries: int = 5, write_retries: int = 3, max_backoff: float = 60.0,
                 event_recovery_window: float = 24 * 3600.0, recovery_timeout: float = 60.0,
                 max_retries: int | None = None, retry_backoff: float | None = None,
                 max_concurrent_builds: int | None = None, max_concurrent_validations: int | None = None):
        """``max_retries`` / ``retry_backoff``: the retries of an attempt that failed
        with a transient Fault and the first retry's delay; by default the
        backend's settings (Backend.max_retries, Backend.retry_backoff)."""
        self.backend = backend
        self.store = backend.store
        self.log = log
        self.build_timeout = build_timeout
        self.validation_timeout = validation_timeout
        self.workers = workers
        self.resync_period = resync_period
        self.conflict_retries = conflict_retries
        self.write_retries = write_retries
        self.max_backoff = max_backoff
        self.max_retries = int(backend.max_retries if max_retries is None else max_retries)
        self.retry_backoff = float(backend.retry_backoff if retry_backoff is None else retry_backoff)
        if self.max_retries < 0 or self.retry_backoff < 0:
            raise ValueError("max_retries and retry_backoff must not be negative")
        if max_concurrent_builds is None or max_concurrent_validations is None:
            # an engine made without the settings (composition.assemble passes them): the backend's own
            builds, validations = backend.default_admission_caps()
            max_concurrent_builds = builds if max_concurrent_builds is None else max_concurrent_builds
            max_concurrent_validations = validations if max_concurrent_validations is None else max_concurrent_validations
        # admission: at most this many jobs in Building / ValidationRunning at once (None or 0: no cap)
        self.caps: dict[str, int | None] = {Phase.BUILDING: max_concurrent_builds or None,
                                            Phase.VALIDATION_RUNNING: max_concurrent_validations or None}
        self._admission = asyncio.Lock()
        self._admitted: dict[str, set[str]] = {Phase.BUILDING: set(), Phase.VALIDATION_RUNNING: set()}
        self._waiting: set[str] = set()  # jobs told Queued: looked at again when a slot frees
        self.queue_poll = 5.0  # seconds: a queued job looks again at least this often
        self._retry_at: dict[str, float] = {}  # job name -> loop time before which its retry does not start
        self._noticed: dict[str, set[str]] = {}  # job uid -> the notice reasons this engine posted for it
        self.progress_interval = 1.0  # seconds: at most one status.progress write per job in this time
        self._progress_at: dict[str, float] = {}
        self.event_recovery_window = event_recovery_window
        self.recovery_timeout = recovery_timeout
        self.events_recovered = 0
        self._term = 0  # counts leadership gains and losses
        self._handing_back = False  # step_down is giving the lead back (no "lost leadership" warning)
        self.recorder = EventRecorder(self.store.add_event, log=log)
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._failures: dict[str, int] = {}
        self._plans: dict[str, ValidationPlan] = {}  # by job uid: computed once, dropped at the end
        self._tasks: list[asyncio.Task[None]] = []
        self._election: asyncio.Task[None] | None = None
        self._follower_checks: set[asyncio.Task[None]] = set()
        self._unwatch: Callable[[], None] | None = None
        self._idle = asyncio.Event()
        self.leading = asyncio.Event()  # set while this engine may reconcile
        self.running = False
        self.reconciles = 0
        self.errors = 0
        self.max_loop_lag = 0.0  # seconds: the longest the event loop was late (stall monitor)
        self._lag_seconds: collections.deque[list[float]] = collections.deque(maxlen=60)  # [second, lag]

    # -- lifecycle ----------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        await self.store.start()
        await self.backend.start(self.enqueue)
        self.recorder.start()
        self._unwatch = self.store.watch(self.enqueue)
        self.running = True
        for i in range(self.workers):
            self._tasks.append(loop.create_task(self._worker(), name=f"nbvalidation-worker-{i}"))
        self._tasks.append(loop.create_task(self._resync_loop(), name="nbvalidation-resync"))
        self._tasks.append(loop.create_task(self._lag_monitor(), name="nbvalidation-loop-lag"))
        if self.backend.elects_leader:
            # several servers on one store: only the leader reconciles; the
            # others serve the REST API and the UI from the same store
            self._election = loop.create_task(
                self.backend.run_election(self.became_leader, self.lost_leadership), name="nbvalidation-election")
            self._tasks.append(self._election)
        else:
            self.became_leader()

    def became_leader(self) -> None:
        """Start reconciling: missing transition events are posted first,
        then every active job is looked at again."""
        self._term += 1
        self._tasks = [t for t in self._tasks if not t.done()]  # earlier take-overs (a flapping lease)
        self._tasks.append(asyncio.get_running_loop().create_task(self._take_over(self._term)))

    async def _take_over(self, term: int) -> None:
        try:
            await wait_within(self.recover_events(), self.recovery_timeout)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # best effort (docs/architecture.md, Events): never keeps the engine from reconciling
            self.log.warning("nbvalidation: recovering missing events failed: %s", e)
        if term != self._term:  # lost leadership meanwhile
            return
        self.leading.set()
        self.log.info("nbvalidation: this server reconciles jobs")
        await self._resync_once()

    def lost_leadership(self) -> None:
        """Stop picking up work; an in-flight reconcile finishes (its writes
        are conditional on resourceVersion, so an overlap cannot duplicate)."""
        self._term += 1
        for admitted in self._admitted.values():
            admitted.clear()
        self._waiting.clear()
        if self.leading.is_set():
            if self._handing_back:  # step_down: given back, not taken by another server
                self.log.info("nbvalidation: handed the lead back")
            else:
                self.log.warning("nbvalidation: lost leadership; another server reconciles now")
        self.leading.clear()

    async def recover_events(self) -> int:
        """Post the event of every recorded transition that has none.

        A transition's event is posted after its status write; a process that
        dies in between (or with events still queued) leaves the transition in
        ``status.transitions`` without its event. Each missing one is posted
        now, with the transition's own time, under the transition's fixed event
        name, so that a copy still on its way from another process is recorded
        once. Runs before this engine reconciles, so a job's events stay in
        order. Transitions older than the store keeps events (or than
        ``event_recovery_window``) are left alone: their events would have
        expired anyway. Returns how many were posted."""
        now = time.time()
        window = self.event_recovery_window
        if self.store.event_ttl is not None:
            window = min(window, self.store.event_ttl - 300)
        cutoff = now - window
        jobs: list[Job] = []
        token = None
        while True:
            page, token = await self.store.list_jobs(limit=500, continue_token=token)
            jobs += page
            if not token:
                break
        recent: dict[str, tuple[Job, list[tuple[int, Transition]]]] = {}
        for job in jobs:
            transitions = (job.get("status") or {}).get("transitions") or []
            mine = [(i, t) for i, t in enumerate(transitions)
                    if (when := parse_time(t.get("time"))) is not None and when.timestamp() >= cutoff]
            if mine:
                recent[job["metadata"]["uid"]] = (job, mine)
        events = await self.store.list_events_of([job for job, _ in recent.values()])
        posted = 0
        for uid, (job, mine) in recent.items():
            names = {e["metadata"]["name"] for e in events.get(uid, [])}
            reasons = {e.get("reason") for e in events.get(uid, [])}  # a phase, so its reason, comes once per job
            for i, t in mine:
                if transition_event_name(job, i) in names or t.get("reason") in reasons:
                    continue
                self.recorder.emit(job, reason=t.get("reason", ""), note=t.get("message", ""),
                                   type_=transition_event_type(t.get("phase", "")), transition=i,
                                   event_time=t.get("time"))
                posted += 1
        if posted:
            self.log.warning("nbvalidation: posted %d transition event(s) missing after a restart", posted)
        self.events_recovered += posted
        return posted

    async def _resync_once(self) -> None:
        try:
            for job in await self.store.list_active():
                self.enqueue(job["metadata"]["name"])
        except Exception as e:
            self.log.warning("nbvalidation: resync failed: %s", e)

    async def step_down(self) -> None:
        """Stop campaigning and release the lead (a follower takes over at once);
        the store stays readable. Used by a CLI engine once its job is done."""
        self._handing_back = True
        try:
            if self._election is not None:
                await cancel_and_wait(self._election)
            self.lost_leadership()
        finally:
            self._handing_back = False

    def activity(self) -> dict[str, int]:
        """Jobs queued, being reconciled, and waiting for a timer in this process."""
        return {"queued": len(self._dirty), "processing": len(self._processing), "timers": len(self._timers)}

    def busy(self) -> bool:
        return any(self.activity().values())

    async def stop(self) -> None:
        self.running = False
        if self._unwatch:
            self._unwatch()
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()
        await cancel_and_wait(*self._follower_checks)
        await cancel_all(self._tasks)
        await self.recorder.stop()
        await self.backend.stop()
        await self.store.stop()

    async def _lag_monitor(self, interval: float = 0.01) -> None:
        """Measure how late the shared event loop wakes us: a blocking call
        anywhere on the loop shows up here (reported by /health)."""
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(interval)
            now = loop.time()
            lag = now - before - interval
            self.max_loop_lag = max(self.max_loop_lag, lag)
            second = int(now)
            if self._lag_seconds and self._lag_seconds[-1][0] == second:
                self._lag_seconds[-1][1] = max(self._lag_seconds[-1][1], lag)
            else:
                self._lag_seconds.append([second, lag])

    def loop_lag_within(self, seconds: int) -> float:
        """The longest event-loop stall within the last ``seconds`` (≤ 60)."""
        if not self._lag_seconds:
            return 0.0
        newest = self._lag_seconds[-1][0]
        return max(lag for sec, lag in self._lag_seconds if sec > newest - seconds)

    async def _resync_loop(self) -> None:
        """Safety net: enqueue every non-terminal job now and then."""
        while True:
            await asyncio.sleep(self.resync_period)
            if self.leading.is_set():
                await self._resync_once()

    # -- work queue (one in-flight reconcile per job) -------------------------
    def enqueue(self, name: str) -> None:
        if not self.running:
            return
        if not self.leading.is_set() and self.backend.owns(name):  # its processes outlive a lead (local)
            # a follower still runs something it started while it led: stop its own
            # process when the holder finishes or cancels the job
            task = asyncio.get_running_loop().create_task(self._follower_check(name))
            self._follower_checks.add(task)
            task.add_done_callback(self._follower_checks.discard)
        if name in self._dirty:
            return
        self._dirty.add(name)
        self._idle.clear()
        if name not in self._processing:
            self._queue.put_nowait(name)

    async def _follower_check(self, name: str) -> None:
        try:
            job = await self.store.get(name)
        except NotFound:
            job = None
        except Exception as e:
            self.log.debug("nbvalidation: follower check of %s failed: %s", name, e)
            return
        if self.leading.is_set():
            return  # leads again: the reconcile takes care of it
        if job is None:
            return
        phase = (job.get("status") or {}).get("phase")
        if is_terminal(phase):
            await self._forget(job)
        elif CANCEL_ANNOTATION in (job["metadata"].get("annotations") or {}):
            await self._cancel(job, phase)

    def enqueue_after(self, name: str, delay: float) -> None:
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        existing = self._timers.get(name)
        if existing is not None:
            if existing.when() <= when:
                return
            existing.cancel()

        def fire() -> None:
            self._timers.pop(name, None)
            self.enqueue(name)

        self._timers[name] = loop.call_at(when, fire)

    async def _worker(self) -> None:
        # not `while True`: should anything below swallow the stop's
        # cancellation (asyncio code that does exists), the worker still ends
        while self.running:
            await self.leading.wait()
            name = await self._queue.get()
            if not self.leading.is_set():  # lost leadership while waiting: leave it queued
                self._queue.put_nowait(name)
                continue
            self._dirty.discard(name)
            self._processing.add(name)
            try:
                delay = await self.reconcile(name)
                self._failures.pop(name, None)
                if delay is not None:
                    self.enqueue_after(name, delay)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                # a TemporaryFailure (and anything unforeseen) leaves the phase as it is and
                # comes back with capped, jittered exponential backoff, at least its own delay
                self.errors += 1
                n = self._failures.get(name, 0) + 1
                self._failures[name] = n
                backoff = self.backoff(n, e.delay if isinstance(e, TemporaryFailure) else None)
                self.log.warning("nbvalidation: reconcile of %s failed (%s); retrying in %.1fs",
                                 name, e, backoff)
                self.enqueue_after(name, backoff)
            finally:
                self._processing.discard(name)
                if name in self._dirty:
                    self._queue.put_nowait(name)
                if not self._dirty and not self._processing:
                    self._idle.set()

    def retry_delay(self, retry: int) -> float:
        """Seconds before the ``retry``-th retry of a faulted attempt:
        ``retry_backoff`` doubling, jittered by ±20 %, capped by ``max_backoff``."""
        return min(self.max_backoff, self.retry_backoff * 2.0 ** (retry - 1)) * (0.8 + 0.4 * random.random())

    def backoff(self, failures: int, delay: float | None = None) -> float:
        """Seconds before the ``failures``-th retry: 0.2 s doubling, jittered
        by ±20 %, capped by ``max_backoff``; at least ``delay`` (a
        TemporaryFailure's own, itself capped by ``max_backoff``)."""
        wait = min(self.max_backoff, 0.2 * 2.0 ** (failures - 1)) * (0.8 + 0.4 * random.random())
        return max(wait, min(self.max_backoff, delay or 0.0))

    # -- the plan ---------------------------------------------------------------
    async def plan_of(self, job: Job) -> ValidationPlan:
        """The job's validation plan, computed once from its spec and stored
        snapshot (plan.py) and handed to every backend call; an engine that
        takes over computes the same one again."""
        uid = job["metadata"]["uid"]
        plan = self._plans.get(uid)
        if plan is None:
            snapshot = await self.backend.read_snapshot(job)
            limits = self._timeouts(job)
            plan = await asyncio.to_thread(make_plan, job, snapshot, build_timeout=limits.build,
                                           validation_timeout=limits.validation, cell_timeout=limits.cell)
            self._plans[uid] = plan
        return plan

    def _timeouts(self, job: Job) -> Timeouts:
        return timeouts(job["spec"], build_timeout=self.build_timeout, validation_timeout=self.validation_timeout,
                        cell_timeout=self.backend.default_cell_timeout)

    async def _forget(self, job: Job) -> None:
        """A terminal job: its plan is dropped, the backend releases what it holds."""
        self._plans.pop(job["metadata"]["uid"], None)
        self._noticed.pop(job["metadata"]["uid"], None)
        self._retry_at.pop(job["metadata"]["name"], None)
        self._release(job["metadata"]["name"])
        try:
            await self.backend.cleanup(job)
        except PermanentFailure as e:
            self.log.warning("nbvalidation: cleaning up %s failed for good: %s", job["metadata"]["name"], e)

    async def _cancel(self, job: Job, phase: str | None) -> None:
        """Stop what runs for the job; a permanent failure to do so is logged
        (the job ends all the same), a temporary one retried."""
        try:
            if phase == Phase.BUILDING:
                await self.backend.cancel_build(job)
            elif phase == Phase.VALIDATION_RUNNING:
                await self.backend.cancel_validation(job)
        except PermanentFailure as e:
            self.log.warning("nbvalidation: cancelling the %s of %s failed for good: %s",
                             "build" if phase == Phase.BUILDING else "validation", job["metadata"]["name"], e)

    # -- the one write path ---------------------------------------------------
    async def _write(self, job: Job, decide: Callable[[Job], JobStatus | None]) -> Job:
        """Write the status ``decide(job)`` returns, if any. On a conflict,
        re-read and decide again; only the write that succeeds emits, and it
        emits only when the persisted before-state and the written
        after-state differ by a flip (docs/architecture.md, "Events" rules 1-4)."""
        name = job["metadata"]["name"]
        attempts_left = self.write_retries
        for _ in range(self.conflict_retries):
            status = decide(job)
            if status is None:
                return job
            before = job.get("status") or {}
            try:
                written = await self.store.update_status(name, status, job["metadata"]["resourceVersion"])
            except Conflict:
                await asyncio.sleep(0.005 + 0.01 * random.random())
                job = await self.store.get(name)
                continue
            except NotFound:
                raise
            except Exception as e:
                attempts_left -= 1
                if attempts_left > 0:
                    await asyncio.sleep(0.05 * (self.write_retries - attempts_left))
                    job = await self.store.get(name)
                    continue
                if flipped(before, status):
                    self.recorder.emit(
                        job, reason=f"{status['reason']}StatusUpdateFailed", type_="Warning",
                        note=f"Could not record phase {status['phase']} ({status['reason']}): {e}")
                raise StatusWriteFailed(f"status write for {name} failed: {e}") from e
            after = written.get("status") or {}
            left = before.get("phase", "")
            if left in self._admitted and after.get("phase", "") != left:
                self._release(name, left)  # a slot freed: the queued jobs look again
            if flipped(before, after):
                # a phase change records status.transitions[-1]: its event gets that entry's fixed name
                index = (len(after.get("transitions") or []) - 1
                         if before.get("phase", "") != after.get("phase", "") else None)
                self.recorder.emit(written, reason=after.get("reason", ""), note=after.get("message", ""),
                                   type_=transition_event_type(after.get("phase", "")), transition=index)
            return written
        raise Conflict(f"status of {name} kept changing; giving up for now")

    async def _move(self, job: Job, frm: str, to: str, reason: str, message: str,
                    patch: Callable[[JobStatus], None] | None = None) -> Job:
        """Transition ``frm -> to`` if the job is still in ``frm``."""

        def decide(cur: Job) -> JobStatus | None:
            st = cur.get("status") or {}
            if st.get("phase", "") != frm:
                return None  # someone else moved it; the next reconcile looks again
            status = new_status(cur, to, reason, message)
            if patch:
                patch(status)
            return status

        return await self._write(job, decide)

    # -- reconcile ------------------------------------------------------------
    async def reconcile(self, name: str) -> float | None:
        """Drive one job as far as it can go now; returns a requeue delay."""
        self.reconciles += 1
        for _ in range(12):
            try:
                job = await self.store.get(name)
            except NotFound:
                return None
            result = await self._step(job)
            if not isinstance(result, _Again):
                return result
        return 0.0

    async def _step(self, job: Job) -> Step:
        phase = (job.get("status") or {}).get("phase", "")
        try:
            return await self._decide(job)
        except (PermanentFailure, InputRejected) as e:
            # the same call would fail the same way: the job fails with its phase's reason
            if is_terminal(phase) or phase == "":
                raise
            return await self._fail(job, phase, e)

    async def _fail(self, job: Job, phase: str, e: PermanentFailure | InputRejected) -> Step:
        defaults: dict[str, Reason] = {Phase.INITIALIZING: Reason.INVALID_INPUT, Phase.BUILDING: Reason.BUILD_FAILED,
                                       Phase.BUILD_COMPLETE: Reason.BUILD_FAILED}
        default = defaults.get(phase, Reason.VALIDATION_FAILED)
        reason = getattr(e, "reason", None) or default
        message = str(e)
        await self._cancel(job, phase)  # whatever still runs for it stops (a no-op when nothing does)

        def patch(st: JobStatus) -> None:
            if phase == Phase.BUILDING:
                st.setdefault("buildStatus", {}).update({"phase": BuildPhase.FAILED, "message": scrub(message),
                                                         "completionTime": st["completionTime"]})

        if isinstance(e, PermanentFailure) and phase != Phase.INITIALIZING:
            self.log.warning("nbvalidation: %s failed for good in %s: %s", job["metadata"]["name"], phase, message)
        await self._move(job, phase, Phase.FAILED, reason, message, patch)
        return _AGAIN

    async def _decide(self, job: Job) -> Step:
        status = job.get("status") or {}
        phase = status.get("phase", "")
        spec = job["spec"]
        if is_terminal(phase):
            await self._forget(job)
            return None

        if CANCEL_ANNOTATION in (job["metadata"].get("annotations") or {}):
            await self._cancel(job, phase)

            def cancel_patch(st: JobStatus) -> None:
                if phase == Phase.BUILDING:
                    st.setdefault("buildStatus", {}).update({"phase": BuildPhase.FAILED, "message": "Cancelled"})

            await self._move(job, phase, Phase.FAILED, Reason.CANCELLED, "Cancelled by the user.", cancel_patch)
            return _AGAIN

        if phase == "":
            await self._move(job, "", Phase.INITIALIZING, Reason.ACCEPTED,
                             "Accepted; checking inputs and detecting dependencies.")
            return _AGAIN

        if phase == Phase.INITIALIZING:
            # the plan is computed here (and again by an engine that takes over); an
            # input it cannot use fails the job (InvalidInput, via _step)
            plan = await self.plan_of(job)
            detected = await self.backend.prepare(job, plan)
            environment = environment_sentence(plan, self.backend.unbuilt_environment(job))
            wait = await self._admit(job, Phase.BUILDING if build_enabled(spec) else Phase.VALIDATION_RUNNING)
            if wait is not None:
                return wait
            if build_enabled(spec):
                def start_build(st: JobStatus) -> None:
                    st["environment"] = environment
                    st["buildStatus"] = {"phase": BuildPhase.RUNNING, "startTime": st["transitions"][-1]["time"],
                                         "strategy": self.backend.build_strategy(job)}
                    why = self.backend.build_strategy_reason(job)
                    if why:
                        st["buildStatus"]["strategyReason"] = why

                await self._move(job, phase, Phase.BUILDING, Reason.BUILD_STARTED,
                                 f"Building the environment: {detected}", start_build)
            else:
                def unbuilt(st: JobStatus) -> None:
                    st["environment"] = environment

                await self._move(job, phase, Phase.VALIDATION_RUNNING, Reason.VALIDATION_STARTED,
                                 "Build disabled; validating in the configured environment.", unbuilt)
            return _AGAIN

        if phase == Phase.BUILDING:
            return await self._building(job)

        if phase == Phase.BUILD_COMPLETE:
            if not (status.get("buildStatus") or {}).get("imageReference"):
                await self._move(job, phase, Phase.FAILED, Reason.BUILD_FAILED,
                                 "BuildComplete was recorded without an environment reference.")
                return _AGAIN
            wait = await self._admit(job, Phase.VALIDATION_RUNNING)
            if wait is not None:
                return wait
            await self._move(job, phase, Phase.VALIDATION_RUNNING, Reason.VALIDATION_STARTED,
                             f"Validating in {status['buildStatus']['imageReference']}.")
            return _AGAIN

        if phase == Phase.VALIDATION_RUNNING:
            return await self._validating(job)
        raise ValueError(f"job {job['metadata']['name']} has an unknown phase {phase!r}")

    # -- admission ------------------------------------------------------------
    def _release(self, name: str, phase: str | None = None) -> None:
        """``name`` no longer holds a slot (of ``phase``, or any): the queued jobs look again."""
        freed = False
        for p, admitted in self._admitted.items():
            if phase in (None, p) and name in admitted:
                admitted.discard(name)
                freed = True
        self._waiting.discard(name)
        if freed or phase is not None:
            for waiting in sorted(self._waiting):
                self.enqueue(waiting)

    @staticmethod
    def _wants(job: Job, phase: str) -> bool:
        """Whether ``job`` waits for a slot of ``phase`` (the phase it enters next)."""
        st = job.get("status") or {}
        if CANCEL_ANNOTATION in (job["metadata"].get("annotations") or {}):
            return False
        now = st.get("phase", "")
        if phase == Phase.BUILDING:
            return now == Phase.INITIALIZING and build_enabled(job["spec"])
        return now == Phase.BUILD_COMPLETE or (now == Phase.INITIALIZING and not build_enabled(job["spec"]))

    async def _admit(self, job: Job, phase: str) -> float | None:
        """None when ``job`` may enter ``phase`` now (its slot is held from here), else
        the delay before it looks again, after recording it as Queued.

        The slots in use are counted from the store (every job in ``phase``: right after
        a restart and on the server that took the lead) together with the jobs this engine
        let in whose move the store may not show yet. Jobs wait in submit order: a job goes
        only when fewer jobs submitted before it wait for the same slot than slots are free."""
        cap = self.caps.get(phase)
        name = job["metadata"]["name"]
        if not cap:
            return None
        async with self._admission:
            active = await self.store.list_active()
            names = {j["metadata"]["name"]: j for j in active}
            admitted = self._admitted[phase]
            for n in list(admitted):  # the store shows it past that phase (or ended): its slot is free
                j = names.get(n)
                if j is None or ((j.get("status") or {}).get("phase", "") not in (phase, "")
                                 and not self._wants(j, phase)):
                    admitted.discard(n)
            in_use = {n for n, j in names.items() if (j.get("status") or {}).get("phase") == phase} | admitted
            in_use.discard(name)
            free = cap - len(in_use)
            waiting = sorted((j for j in active if self._wants(j, phase) and j["metadata"]["name"] not in in_use),
                             key=lambda j: (j["metadata"].get("creationTimestamp") or "", j["metadata"]["name"]))
            ahead = next((i for i, j in enumerate(waiting) if j["metadata"]["name"] == name), 0)
            if ahead < free:
                admitted.add(name)
                self._waiting.discard(name)
                return None
            self._waiting.add(name)
        what = "build" if phase == Phase.BUILDING else "validation"
        message = f"Waiting for a {what} slot ({len(in_use)} of {cap} in use"
        message += f"; {ahead} queued before it)." if ahead else ")."
        await self._queued(job, message)
        return self.queue_poll

    async def _queued(self, job: Job, message: str) -> None:
        """status.reason Queued with ``message`` (no phase or condition flip: no transition
        event); one Normal ``Queued`` event when the job starts waiting."""
        st = job.get("status") or {}
        if st.get("reason") == EventReason.QUEUED:
            return  # told already: the message is not rewritten while it waits
        wrote = [False]

        def decide(cur: Job) -> JobStatus | None:
            cs = cur.get("status") or {}
            wrote[0] = False
            if cs.get("phase") != st.get("phase") or cs.get("reason") == EventReason.QUEUED:
                return None
            status = copy.deepcopy(cs)
            status["reason"], status["message"] = EventReason.QUEUED.value, message
            for c in status.get("conditions") or []:
                if c.get("type") == ConditionType.READY:
                    c["reason"], c["message"] = EventReason.QUEUED.value, message
            wrote[0] = True
            return status

        written = await self._write(job, decide)
        if wrote[0]:
            self.recorder.emit(written, reason=EventReason.QUEUED, note=message, type_="Normal", action="Queue")

    def _post_notices(self, job: Job, obs: Observation) -> None:
        """One Warning event per job and notice reason (what is off for it: image reuse,
        and why), under a fixed name (posted twice, recorded once); no status change."""
        posted = self._noticed.setdefault(job["metadata"]["uid"], set()) if obs.notices else set()
        for n in obs.notices:
            if n.reason in posted:
                continue
            posted.add(n.reason)
            self.recorder.emit(job, reason=n.reason, note=n.note, type_="Warning", action="Notice", notice=True)
            self.log.warning("nbvalidation: %s: %s", job["metadata"]["name"], scrub(n.note))

    def _deadline(self, job: Job, phase: str, limit: float) -> float:
        started = attempt_started_at(job.get("status") or {}, phase) or utcnow()
        return started.timestamp() + limit

    def _backing_off(self, job: Job) -> float | None:
        """Seconds until a retry of this job may start (a notification that came
        meanwhile does not cut the backoff short), or None."""
        name = job["metadata"]["name"]
        at = self._retry_at.get(name)
        if at is None:
            return None
        left = at - asyncio.get_running_loop().time()
        if left <= 0:
            del self._retry_at[name]
            return None
        return left

    async def _fault(self, job: Job, phase: str, obs: Observation) -> Step:
        """An attempt failed with a Fault (not the notebook's): retry it (a
        transient fault, retries left) or end the job InfrastructureFailed. Written
        here once for every backend; backends only classify."""
        fault = obs.fault
        assert fault is not None
        name = job["metadata"]["name"]
        counter, event_reason = RETRY_COUNTERS[phase]
        attempt = build_attempt if phase == Phase.BUILDING else validation_attempt
        used = attempt(job)
        cause = scrub(fault.cause.strip() or "An infrastructure fault.")
        what = "build" if phase == Phase.BUILDING else "validation"
        # the failed attempt stops and is discarded, whatever follows (idempotent)
        await self._cancel(job, phase)
        if fault.transient and used < self.max_retries:
            n = used + 1
            message = f"Retrying ({n}/{self.max_retries}) after: {cause}"
            wrote = [False]

            def retry(cur: Job) -> JobStatus | None:
                st = cur.get("status") or {}
                wrote[0] = False
                if st.get("phase") != phase or attempt(cur) != used:
                    return None  # moved on, or another engine counted this retry already
                status = copy.deepcopy(st)
                status[counter] = n  # type: ignore[literal-required]
                status["lastRetryTime"] = isotime()
                status["message"] = message
                status.pop("progress", None)  # the failed attempt's
                wrote[0] = True
                return status

            self._progress_at.pop(name, None)
            written = await self._write(job, retry)  # no phase flip: no transition event
            if not wrote[0]:
                return _AGAIN
            # after the write succeeded: one Warning event per retry (best effort)
            self.recorder.emit(written, reason=event_reason, note=cause, type_="Warning", action="Retry")
            delay = self.retry_delay(n)
            self._retry_at[name] = asyncio.get_running_loop().time() + delay
            self.log.warning("nbvalidation: %s of %s retried (%d/%d) in %.1fs after: %s",
                             what, name, n, self.max_retries, delay, cause)
            return delay

        message = cause if not used else f"{cause} (after {used} {'retry' if used == 1 else 'retries'})"
        self.log.warning("nbvalidation: %s of %s failed because of the infrastructure: %s", what, name, message)
        self._retry_at.pop(name, None)
        self._progress_at.pop(name, None)
        result = obs.result or {}

        def record(st: JobStatus) -> None:
            now = st["completionTime"]
            if phase == Phase.BUILDING:
                st.setdefault("buildStatus", {}).update({"phase": BuildPhase.FAILED, "message": scrub(message),
                                                         "completionTime": obs.finished_at or now})
                if obs.log_path:
                    st["buildStatus"]["logPath"] = obs.log_path
                return
            vs = {"startTime": obs.started_at, "completionTime": obs.finished_at or now,
                  "reason": ResultReason.INFRASTRUCTURE_FAILED, "environment": obs.reference}
            st["validationStatus"] = cast(ValidationStatus, {k: v for k, v in vs.items() if v is not None})
            # what ran is kept, but a fault is never a cell's failure: no blame
            st["results"] = result.get("results", [])
            st["failedCellIndex"] = None
            st.pop("comparisonResult", None)
            st.pop("progress", None)

        await self._move(job, phase, Phase.FAILED, Reason.INFRASTRUCTURE_FAILED, message, record)
        return _AGAIN

    async def _building(self, job: Job) -> Step:
        status = job["status"]
        # the timeouts need no snapshot (plan.timeouts): a job whose plan cannot be had still times out
        deadline = self._deadline(job, Phase.BUILDING, self._timeouts(job).build)
        if time.time() >= deadline:
            await self._cancel(job, Phase.BUILDING)
            limit = format_duration(deadline - (attempt_started_at(status, Phase.BUILDING) or utcnow()).timestamp())

            def timed_out(st: JobStatus) -> None:
                st.setdefault("buildStatus", {}).update({"phase": BuildPhase.FAILED, "message": f"Timed out after {limit}.",
                                                         "completionTime": st["completionTime"]})

            await self._move(job, Phase.BUILDING, Phase.FAILED, Reason.BUILD_TIMED_OUT,
                             f"The environment build did not finish within {limit}.", timed_out)
            return _AGAIN
        waiting = self._backing_off(job)
        if waiting is not None:  # a retry's backoff
            return min(waiting, max(0.05, deadline - time.time()))
        obs = await self.backend.ensure_build(job, await self.plan_of(job))
        self._post_notices(job, obs)
        if obs.state == RUNNING:
            return max(0.05, deadline - time.time())
        if obs.state == FAILED and obs.fault is not None:
            return await self._fault(job, Phase.BUILDING, obs)
        ok = obs.state == SUCCEEDED

        def record(st: JobStatus) -> None:
            bs = st.setdefault("buildStatus", {})
            now = st["transitions"][-1]["time"]
            bs.update({"phase": BuildPhase.COMPLETE if ok else BuildPhase.FAILED, "message": scrub(obs.message),
                       "completionTime": obs.finished_at or now})
            if obs.strategy:
                bs["strategy"] = obs.strategy
            if obs.log_path:
                bs["logPath"] = obs.log_path
            if ok:
                bs["imageReference"] = obs.reference
            started = parse_time(bs.get("startTime"))
            finished = parse_time(bs["completionTime"])
            if started and finished:
                bs["duration"] = format_duration((finished - started).total_seconds())

        if ok:
            reason = Reason.BUILD_REUSED if obs.reused else Reason.BUILD_SUCCEEDED
            await self._move(job, Phase.BUILDING, Phase.BUILD_COMPLETE, reason,
                             f"Environment ready: {obs.reference}. {obs.message}".strip(), record)
        else:
            await self._move(job, Phase.BUILDING, Phase.FAILED, Reason.BUILD_FAILED,
                             f"The environment build failed: {obs.message}", record)
        return _AGAIN

    async def _validating(self, job: Job) -> Step:
        status = job["status"]
        reference = None
        if build_enabled(job["spec"]):
            # the invariant: exactly the reference persisted at BuildComplete
            reference = (status.get("buildStatus") or {}).get("imageReference")
            if not reference or phase_entered_at(status, Phase.BUILD_COMPLETE) is None:
                await self._move(job, Phase.VALIDATION_RUNNING, Phase.FAILED, Reason.VALIDATION_FAILED,
                                 "No built environment is recorded for this job; refusing to validate.")
                return _AGAIN
        deadline = self._deadline(job, Phase.VALIDATION_RUNNING, self._timeouts(job).validation)
        if time.time() >= deadline:
            await self._cancel(job, Phase.VALIDATION_RUNNING)
            limit = format_duration(
                deadline - (attempt_started_at(status, Phase.VALIDATION_RUNNING) or utcnow()).timestamp())
            await self._move(job, Phase.VALIDATION_RUNNING, Phase.FAILED, Reason.VALIDATION_TIMED_OUT,
                             f"The validation did not finish within {limit}.")
            return _AGAIN
        waiting = self._backing_off(job)
        if waiting is not None:  # a retry's backoff
            return min(waiting, max(0.05, deadline - time.time()))
        obs = await self.backend.ensure_validation(job, reference, await self.plan_of(job))
        self._post_notices(job, obs)
        if obs.state == RUNNING:
            delay = max(0.05, deadline - time.time())
            wait = await self._write_progress(job, obs.progress)
            poll = obs.progress_poll  # a backend that reads progress only when asked (a Pod's log)
            return min(x for x in (delay, wait, poll) if x is not None)
        if obs.state == FAILED and obs.fault is not None:
            return await self._fault(job, Phase.VALIDATION_RUNNING, obs)
        await self._finish_validation(job, obs)
        return _AGAIN

    async def _write_progress(self, job: Job, progress: Progress | None) -> float | None:
        """``status.progress`` during ValidationRunning: written when it changed,
        at most once per ``progress_interval`` per job, never an event (no phase
        or condition flips). Returns how long to wait before a held-back write."""
        if not progress:
            return None
        name = job["metadata"]["name"]
        stored = dict((job.get("status") or {}).get("progress") or {})
        stored.pop("updatedAt", None)
        if stored == progress:
            return None
        wait = self.progress_interval - (time.monotonic() - self._progress_at.get(name, float("-inf")))
        if wait > 0:
            return wait

        def decide(cur: Job) -> JobStatus | None:
            st = cur.get("status") or {}
            if st.get("phase") != Phase.VALIDATION_RUNNING:
                return None
            status = copy.deepcopy(st)
            status["progress"] = {**progress, "updatedAt": isotime()}
            return status

        self._progress_at[name] = time.monotonic()
        try:
            await self._write(job, decide)
        except (Conflict, StatusWriteFailed) as e:  # progress only: the next change writes it again
            self.log.debug("nbvalidation: progress of %s not written: %s", name, e)
        return None

    async def _finish_validation(self, job: Job, obs: Observation) -> None:
        result = obs.result or {}
        ok = obs.state == SUCCEEDED and result.get("verdict") == Phase.SUCCEEDED

        def record(st: JobStatus) -> None:
            vs = {"startTime": obs.started_at, "completionTime": obs.finished_at or st["completionTime"],
                  "reason": result.get("reason") or (ResultReason.VALIDATION_SUCCEEDED if ok else ResultReason.VALIDATION_FAILED)}
            if result.get("durationSeconds") is not None:
                vs["duration"] = format_duration(result["durationSeconds"])
            if obs.reference:
                vs["environment"] = obs.reference
            st["validationStatus"] = cast(ValidationStatus, {k: v for k, v in vs.items() if v is not None})
            st["results"] = result.get("results", [])
            if result.get("comparisonResult") is not None:
                st["comparisonResult"] = result["comparisonResult"]
            st["failedCellIndex"] = result.get("failedCellIndex")
            ended: Progress | None = obs.progress
            if ended:  # as the run ended: done/total
                st["progress"] = {**ended, "updatedAt": isotime()}

        self._progress_at.pop(job["metadata"]["name"], None)
        message = result.get("message") or obs.message or ("Validation succeeded." if ok else "Validation failed.")
        if not ok and result.get("reason") == ResultReason.CELL_EXECUTION_FAILED:
            # a FileNotFoundError for a relative path: say what travelled with the job
            plan = self._plans.get(job["metadata"]["uid"])
            hint = missing_file_hint(job, result, folder_in_snapshot=self.backend.capabilities.folder_in_snapshot,
                                     input_files=len(plan.input_files) if plan is not None else 0)
            if hint:
                message = f"{message.rstrip('.')} ({hint})."
        if not ok:
            # a module the job did not declare: where its environment came from, where to declare it
            module_hint = missing_module_hint(self._plans.get(job["metadata"]["uid"]), result,
                                              self.backend.unbuilt_environment(job))
            if module_hint:
                message = f"{message.rstrip().rstrip('.')}. {module_hint}"
        message = scrub(message)
        if ok:
            await self._move(job, Phase.VALIDATION_RUNNING, Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED,
                             message, record)
        else:
            await self._move(job, Phase.VALIDATION_RUNNING, Phase.FAILED, Reason.VALIDATION_FAILED,
                             message, record)

    # -- helpers for tests and the CLI -----------------------------------------
    async def wait_idle(self, timeout: float | None = None) -> None:
        if not self.leading.is_set() and not self._processing:
            return  # a follower reconciles nothing: its queue waits for leadership
        await wait_within(self._idle.wait(), timeout)

    async def request_cancel(self, name: str) -> Job:
        job = await self.store.set_annotation(name, CANCEL_ANNOTATION, isotime())
        self.enqueue(name)
        return job

    async def wait_for_terminal(self, name: str, timeout: float | None = None,
                                on_update: Callable[[Job], None] | None = None,
                                recheck: float = 5.0) -> Job:
        """Wait until a job is terminal (store watch: the SQLite store also sees
        other processes' writes); ``on_update`` sees the job each time it changes.
        The job is read again every ``recheck`` seconds anyway, so a missed
        notification can delay the answer but never lose it."""
        changed = asyncio.Event()

        def on_change(n: str) -> None:
            if n == name:
                changed.set()

        unwatch = self.store.watch(on_change)
        try:
            async def wait() -> Job:
                while True:
                    job = await self.store.get(name)
                    if on_update is not None:
                        on_update(job)
                    if is_terminal((job.get("status") or {}).get("phase")):
                        return job
                    changed.clear()
                    try:
                        await wait_within(changed.wait(), recheck)
                    except asyncio.TimeoutError:
                        pass

            return await wait_within(wait(), timeout)
        finally:
            unwatch()
