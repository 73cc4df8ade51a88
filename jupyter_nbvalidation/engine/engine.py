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

``Engine`` is put together from its concerns, each in a module of this folder
(state.py declares what they share): the work queue and the workers
(work_queue.py), leadership (leadership.py), one reconcile step per persisted
phase (phases.py, runs.py), the one status-write path (transitions.py),
admission (admission.py) and retries (retries.py). This module starts and stops
it and holds the helpers for tests and the CLI.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Callable

from jupyter_nbvalidation.backends.base import Backend
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.events import EventRecorder
from jupyter_nbvalidation.core.model import CANCEL_ANNOTATION, Phase, is_terminal, isotime
from jupyter_nbvalidation.core.tasks import cancel_all, cancel_and_wait, wait_within
from jupyter_nbvalidation.engine.admission import Admission
from jupyter_nbvalidation.engine.leadership import Leadership
from jupyter_nbvalidation.engine.phases import Phases
from jupyter_nbvalidation.engine.retries import Retries
from jupyter_nbvalidation.engine.runs import Runs
from jupyter_nbvalidation.engine.transitions import Transitions
from jupyter_nbvalidation.engine.work_queue import WorkQueue


class Engine(WorkQueue, Leadership, Phases, Runs, Admission, Retries, Transitions):
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
        self.caps = {Phase.BUILDING: max_concurrent_builds or None,
                     Phase.VALIDATION_RUNNING: max_concurrent_validations or None}
        self._admission = asyncio.Lock()
        self._admitted = {Phase.BUILDING: set(), Phase.VALIDATION_RUNNING: set()}
        self._waiting = set()  # jobs told Queued: looked at again when a slot frees
        self.queue_poll = 5.0  # seconds: a queued job looks again at least this often
        self._retry_at = {}  # job name -> loop time before which its retry does not start
        self._noticed = {}  # job uid -> the notice reasons this engine posted for it
        self.progress_interval = 1.0  # seconds: at most one status.progress write per job in this time
        self._progress_at = {}
        self.event_recovery_window = event_recovery_window
        self.recovery_timeout = recovery_timeout
        self.events_recovered = 0
        self._term = 0  # counts leadership gains and losses
        self._handing_back = False  # step_down is giving the lead back (no "lost leadership" warning)
        self.recorder = EventRecorder(self.store.add_event, log=log)
        self.recorder.lost_listeners.append(self._events_lost)
        self._marking_lost = {}
        self._unrecordable = {}
        self._queue = asyncio.Queue()
        self._dirty = set()
        self._processing = set()
        self._timers = {}
        self._failures = {}
        self._plans = {}  # by job uid: computed once, dropped at the end
        self.adopt_source = None  # set by the service (JobService)
        self._tasks = []
        self._election = None
        self._follower_checks = set()
        self._unwatch = None
        self._idle = asyncio.Event()
        self.leading = asyncio.Event()  # set while this engine may reconcile
        self.running = False
        self.reconciles = 0
        self.errors = 0
        self.max_loop_lag = 0.0  # seconds: the longest the event loop was late (stall monitor)
        self._lag_seconds = collections.deque(maxlen=60)  # [second, lag]

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
        await self._marked_lost()  # the losses the last posts met are said on their jobs too
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

    # -- helpers for tests and the CLI -----------------------------------------
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
                    # its status cannot be written (a full disk, a damaged store), or this process lost the
                    # lead because its lease could not be written: nobody will record it, never a hang
                    fault = self._unrecordable.get(name) or (None if self.leading.is_set() else self.store.full_now())
                    if fault is not None:
                        raise fault
                    changed.clear()
                    try:
                        await wait_within(changed.wait(), recheck)
                    except asyncio.TimeoutError:
                        pass

            return await wait_within(wait(), timeout)
        finally:
            unwatch()
