"""What the engine's parts share: the state ``Engine`` (engine.py) sets up, declared
once with its types, and the methods one part calls that another part defines.

``Engine`` is one class put together from its concerns, each in a module of its own
and each a subclass of ``EngineState``: the work queue and its workers
(work_queue.py), leadership (leadership.py), the reconcile step of each persisted
phase (phases.py; the two phases with a build or a run in flight, runs.py), the one
status-write path (transitions.py), admission (admission.py) and retries
(retries.py). Declarations only, as backends/local/state.py is for the local
backend's rooms: the attributes are annotations (``Engine.__init__`` gives them
their values), and each method here is overridden by the part that defines it,
which comes before this class in ``Engine``'s method resolution order.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Awaitable, Callable, Union

from jupyter_nbvalidation.backends.base import Backend, Observation
from jupyter_nbvalidation.core.documents import Job, JobStatus
from jupyter_nbvalidation.core.events import EventRecorder
from jupyter_nbvalidation.spec.plan import Timeouts, ValidationPlan
from jupyter_nbvalidation.store.base import JobStore


class Again:
    """A step wrote a transition: look at the job again now."""


AGAIN = Again()
#: what a step returns: a requeue delay (seconds), None (nothing to wait for) or AGAIN
Step = Union[float, None, Again]


class EngineState:
    """The state of ``Engine`` that its parts use (see the module's docstring)."""

    # -- the engine's own (engine.py) -------------------------------------------------
    backend: Backend
    store: JobStore
    log: Any
    recorder: EventRecorder
    build_timeout: float
    validation_timeout: float
    running: bool
    leading: asyncio.Event  # set while this engine may reconcile
    _tasks: list[asyncio.Task[None]]
    _unwatch: Callable[[], None] | None
    _marking_lost: dict[str, asyncio.Task[None]]  # by job name: status.eventsIncomplete being written (transitions.py)
    _unrecordable: dict[str, Exception]  # by job name: why its last status write could not be made (no space, damage)
    max_loop_lag: float  # seconds: the longest the event loop was late (stall monitor)
    _lag_seconds: collections.deque[list[float]]  # [second, lag]

    # -- the work queue (work_queue.py) -------------------------------------------------
    workers: int
    resync_period: float
    _queue: asyncio.Queue[str]
    _dirty: set[str]
    _processing: set[str]
    _timers: dict[str, asyncio.TimerHandle]
    _failures: dict[str, int]
    _idle: asyncio.Event
    _follower_checks: set[asyncio.Task[None]]
    reconciles: int
    errors: int

    # -- leadership (leadership.py) -------------------------------------------------
    event_recovery_window: float
    recovery_timeout: float
    events_recovered: int
    _term: int  # counts leadership gains and losses
    _handing_back: bool  # step_down is giving the lead back (no "lost leadership" warning)
    _election: asyncio.Task[None] | None

    # -- admission (admission.py) -------------------------------------------------
    #: at most this many jobs in Building / ValidationRunning at once (None: no cap)
    caps: dict[str, int | None]
    _admission: asyncio.Lock
    _admitted: dict[str, set[str]]
    _waiting: set[str]  # jobs told Queued: looked at again when a slot frees
    queue_poll: float  # seconds: a queued job looks again at least this often

    # -- retries (retries.py) -------------------------------------------------
    max_retries: int
    retry_backoff: float
    max_backoff: float
    _retry_at: dict[str, float]  # job name -> loop time before which its retry does not start

    # -- the phases (phases.py, runs.py) -------------------------------------------------
    _plans: dict[str, ValidationPlan]  # by job uid: computed once, dropped at the end
    # a job made past the service whose notebook is in git: the service fetches it and stores its
    # snapshot and source annotations (service/git_source.py); None: no service in this process
    adopt_source: Callable[[Job], Awaitable[None]] | None
    _noticed: dict[str, set[str]]  # job uid -> the notice reasons this engine posted for it
    progress_interval: float  # seconds: at most one status.progress write per job in this time
    _progress_at: dict[str, float]

    # -- the status writes (transitions.py) -------------------------------------------------
    conflict_retries: int
    write_retries: int

    # -- work_queue.py's -------------------------------------------------
    def enqueue(self, name: str) -> None:
        raise NotImplementedError

    async def _resync_once(self) -> None:
        raise NotImplementedError

    # -- phases.py's -------------------------------------------------
    async def reconcile(self, name: str) -> float | None:
        raise NotImplementedError

    async def plan_of(self, job: Job) -> ValidationPlan:
        raise NotImplementedError

    def _timeouts(self, job: Job) -> Timeouts:
        raise NotImplementedError

    async def _forget(self, job: Job) -> None:
        raise NotImplementedError

    async def _cancel(self, job: Job, phase: str | None) -> None:
        raise NotImplementedError

    # -- runs.py's -------------------------------------------------
    async def _building(self, job: Job) -> Step:
        raise NotImplementedError

    async def _validating(self, job: Job) -> Step:
        raise NotImplementedError

    # -- admission.py's -------------------------------------------------
    def _release(self, name: str, phase: str | None = None) -> None:
        raise NotImplementedError

    async def _admit(self, job: Job, phase: str) -> float | None:
        raise NotImplementedError

    # -- retries.py's -------------------------------------------------
    def backoff(self, failures: int, delay: float | None = None) -> float:
        raise NotImplementedError

    def _backing_off(self, job: Job) -> float | None:
        raise NotImplementedError

    async def _fault(self, job: Job, phase: str, obs: Observation) -> Step:
        raise NotImplementedError

    # -- transitions.py's -------------------------------------------------
    async def _write(self, job: Job, decide: Callable[[Job], JobStatus | None]) -> Job:
        raise NotImplementedError

    async def _move(self, job: Job, frm: str, to: str, reason: str, message: str,
                    patch: Callable[[JobStatus], None] | None = None) -> Job:
        raise NotImplementedError
