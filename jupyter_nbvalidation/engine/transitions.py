"""The one status-write path, and the status a transition writes.

Every phase change goes through :meth:`Transitions._move` and every status write
through :meth:`Transitions._write`: status first (conditional on the job's
resourceVersion, decided again on a conflict), then exactly one event per phase or
condition flip, for the write that succeeded (docs/architecture.md, "Events").
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import random
from typing import Callable, cast

from jupyter_nbvalidation.core.documents import Event, Job, JobStatus
from jupyter_nbvalidation.core.model import (
    ALLOWED_TRANSITIONS,
    ConditionType,
    Phase,
    build_enabled,
    condition_states,
    isotime,
    parse_time,
    set_condition,
    transition_event_type,
)
from jupyter_nbvalidation.core.redaction import scrub
from jupyter_nbvalidation.engine.state import EngineState
from jupyter_nbvalidation.store.base import Conflict, NoSpace, NotFound, StoreBroken


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


class Transitions(EngineState):
    """Writes a job's status, and posts the event of each flip."""

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
                if isinstance(e, (NoSpace, StoreBroken)):  # waiting will not record it: its waiters are told
                    self._unrecordable[name] = e
                raise StatusWriteFailed(f"status write for {name} failed: {e}") from e
            self._unrecordable.pop(name, None)
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

    # -- events that could not be recorded ------------------------------------------
    def _events_lost(self, event: Event, job: Job) -> None:
        """The recorder could not record ``event`` (after its retries) or dropped it: the job's
        status says its events are incomplete (``status.eventsIncomplete``), once, so that no
        loss is silent; the timeline then falls back to ``status.transitions``."""
        name = job["metadata"]["name"]
        if name in self._marking_lost or (job.get("status") or {}).get("eventsIncomplete"):
            return
        task = asyncio.get_running_loop().create_task(self._mark_events_incomplete(job),
                                                      name=f"nbvalidation-events-lost-{name}")
        self._marking_lost[name] = task
        task.add_done_callback(lambda _: self._marking_lost.pop(name, None))

    async def _mark_events_incomplete(self, job: Job) -> None:
        def decide(cur: Job) -> JobStatus | None:
            st = cur.get("status") or {}
            if st.get("eventsIncomplete"):
                return None
            return cast(JobStatus, {**st, "eventsIncomplete": True})

        try:
            await self._write(job, decide)
        except Exception as e:  # the store refuses even this: /health says why
            self.log.warning("nbvalidation: could not mark %s's events incomplete: %s", job["metadata"]["name"], e)

    async def _marked_lost(self) -> None:
        """Wait (bounded: each write has its retries) for the marks under way."""
        if self._marking_lost:
            await asyncio.wait(list(self._marking_lost.values()), timeout=10)
