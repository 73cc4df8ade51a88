"""Retries, written once for every backend (docs/architecture.md, "Retries").

A build or a validation attempt that failed with a ``Fault`` (not the notebook's) is
retried when the fault is transient and retries are left: the status counts it
(``buildRetries`` / ``validationRetries``, no phase flip), one Warning event is posted
per retry, and the next attempt waits a jittered, doubling backoff. A permanent fault,
or the last, ends the job Failed with reason InfrastructureFailed. A reconcile that
raised is queued again with a backoff of its own (``backoff``).
"""

from __future__ import annotations

import asyncio
import copy
import random
from typing import cast

from jupyter_nbvalidation.backends.base import Observation
from jupyter_nbvalidation.core.documents import Job, JobStatus, ValidationStatus
from jupyter_nbvalidation.core.model import (
    BuildPhase,
    EventReason,
    Phase,
    Reason,
    ResultReason,
    build_attempt,
    isotime,
    validation_attempt,
)
from jupyter_nbvalidation.core.redaction import scrub
from jupyter_nbvalidation.engine.state import AGAIN, EngineState, Step

#: per phase with attempts: the status counter of its retries, and the event a retry posts
RETRY_COUNTERS: dict[str, tuple[str, EventReason]] = {
    Phase.BUILDING: ("buildRetries", EventReason.BUILD_RETRIED),
    Phase.VALIDATION_RUNNING: ("validationRetries", EventReason.VALIDATION_RETRIED),
}


class Retries(EngineState):
    """The backoffs, and what follows a faulted attempt."""

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
                return AGAIN
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
        return AGAIN
