"""The two phases with work in flight: Building and ValidationRunning.

Each step checks the attempt's deadline, waits out a retry's backoff, asks the
backend (``ensure_build`` / ``ensure_validation``: idempotent, level-triggered) and
records what it reports. Build first, then validate: the validation gets exactly the
environment reference persisted at BuildComplete, and refuses to run without one.
"""

from __future__ import annotations

import copy
import time
from typing import cast

from jupyter_nbvalidation.backends.base import FAILED, RUNNING, SUCCEEDED, Observation
from jupyter_nbvalidation.core.documents import Job, JobStatus, Progress, ValidationStatus
from jupyter_nbvalidation.core.model import (
    BuildPhase,
    Phase,
    Reason,
    ResultReason,
    build_enabled,
    format_duration,
    isotime,
    parse_time,
    utcnow,
)
from jupyter_nbvalidation.core.redaction import scrub
from jupyter_nbvalidation.engine.state import AGAIN, EngineState, Step
from jupyter_nbvalidation.engine.transitions import StatusWriteFailed, attempt_started_at, phase_entered_at
from jupyter_nbvalidation.spec.notes import missing_module_hint
from jupyter_nbvalidation.spec.plan import missing_file_hint
from jupyter_nbvalidation.store.base import Conflict


class Runs(EngineState):
    """The steps of Building and ValidationRunning."""

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
            return AGAIN
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
            if obs.built_at:
                bs["builtAt"] = obs.built_at
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
        return AGAIN

    async def _validating(self, job: Job) -> Step:
        status = job["status"]
        reference = None
        if build_enabled(job["spec"]):
            # the invariant: exactly the reference persisted at BuildComplete
            reference = (status.get("buildStatus") or {}).get("imageReference")
            if not reference or phase_entered_at(status, Phase.BUILD_COMPLETE) is None:
                await self._move(job, Phase.VALIDATION_RUNNING, Phase.FAILED, Reason.VALIDATION_FAILED,
                                 "No built environment is recorded for this job; refusing to validate.")
                return AGAIN
        deadline = self._deadline(job, Phase.VALIDATION_RUNNING, self._timeouts(job).validation)
        if time.time() >= deadline:
            await self._cancel(job, Phase.VALIDATION_RUNNING)
            limit = format_duration(
                deadline - (attempt_started_at(status, Phase.VALIDATION_RUNNING) or utcnow()).timestamp())
            await self._move(job, Phase.VALIDATION_RUNNING, Phase.FAILED, Reason.VALIDATION_TIMED_OUT,
                             f"The validation did not finish within {limit}.")
            return AGAIN
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
        return AGAIN

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
            if ok and isinstance(result.get("readSet"), dict):  # the verdict cache re-checks it (verdict/readset.py)
                st["readSet"] = result["readSet"]
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
        uncacheable = (result.get("readSet") or {}).get("uncacheable") if ok else None
        if uncacheable:  # the verdict cache will not reuse it (verdict/readset.py): say why
            message = f"{message.rstrip().rstrip('.')}. Not reused by the verdict cache: {uncacheable}."
        message = scrub(message)
        if ok:
            await self._move(job, Phase.VALIDATION_RUNNING, Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED,
                             message, record)
        else:
            await self._move(job, Phase.VALIDATION_RUNNING, Phase.FAILED, Reason.VALIDATION_FAILED,
                             message, record)
