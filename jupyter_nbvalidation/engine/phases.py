"""The reconcile: one step per persisted phase.

Each reconcile reads the job as stored and decides its next step from its persisted
phase: a terminal job is forgotten, a cancelled one stopped, a new one accepted, an
Initializing one planned and admitted to its build (or, with the build disabled, to
its validation), a BuildComplete one admitted to its validation. The two phases with
work in flight, Building and ValidationRunning, are stepped in runs.py. An error the
same call would raise again (``PermanentFailure``, ``InputRejected``) fails the job
with its phase's reason.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from jupyter_nbvalidation.core.documents import Job, JobStatus
from jupyter_nbvalidation.core.errors import InputRejected, PermanentFailure
from jupyter_nbvalidation.core.model import (
    CANCEL_ANNOTATION,
    SOURCE_ANNOTATION,
    SOURCE_FAILURE_ANNOTATION,
    BuildPhase,
    Phase,
    Reason,
    build_enabled,
    is_terminal,
)
from jupyter_nbvalidation.core.redaction import scrub
from jupyter_nbvalidation.engine.state import AGAIN, Again, EngineState, Step
from jupyter_nbvalidation.spec.notes import environment_sentence
from jupyter_nbvalidation.spec.plan import Timeouts, ValidationPlan, make_plan, timeouts
from jupyter_nbvalidation.store.base import NotFound


class Phases(EngineState):
    """Drives a job one step from the phase it is in."""

    async def reconcile(self, name: str) -> float | None:
        """Drive one job as far as it can go now; returns a requeue delay."""
        self.reconciles += 1
        for _ in range(12):
            try:
                job = await self.store.get(name)
            except NotFound:
                return None
            result = await self._step(job)
            if not isinstance(result, Again):
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

        source = _source((job["metadata"].get("annotations") or {}).get(SOURCE_ANNOTATION)) \
            if phase == Phase.INITIALIZING and "source" not in (job.get("status") or {}) else None

        def patch(st: JobStatus) -> None:
            if source is not None:  # a job made past the service whose fetch failed: where it was to come from
                st["source"] = source
            if phase == Phase.BUILDING:
                st.setdefault("buildStatus", {}).update({"phase": BuildPhase.FAILED, "message": scrub(message),
                                                         "completionTime": st["completionTime"]})

        if isinstance(e, PermanentFailure) and phase != Phase.INITIALIZING:
            self.log.warning("nbvalidation: %s failed for good in %s: %s", job["metadata"]["name"], phase, message)
        await self._move(job, phase, Phase.FAILED, reason, message, patch)
        return AGAIN

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
            return AGAIN

        annotations = job["metadata"].get("annotations") or {}
        if phase == "":
            source = _source(annotations.get(SOURCE_ANNOTATION))

            def accept(st: JobStatus) -> None:
                if source is not None:  # a notebook from git: where it came from (docs/watching.md)
                    st["source"] = source

            await self._move(job, "", Phase.INITIALIZING, Reason.ACCEPTED,
                             "Accepted; checking inputs and detecting dependencies.", accept)
            return AGAIN

        if phase == Phase.INITIALIZING and self.adopt_source is not None and _unfetched(job):
            # made past the service (kubectl) with its notebook in git: fetched here, by the
            # leader's service, as a submit would have (a spec it refuses: InvalidInput)
            await self.adopt_source(job)
            return AGAIN

        if phase == Phase.INITIALIZING and annotations.get(SOURCE_FAILURE_ANNOTATION):
            # its notebook could not be fetched at submit (service/git_source.py): not the notebook's fault
            raise PermanentFailure(scrub(annotations[SOURCE_FAILURE_ANNOTATION]),
                                   reason=Reason.INFRASTRUCTURE_FAILED)

        if phase == Phase.INITIALIZING:
            # the plan is computed here (and again by an engine that takes over); an
            # input it cannot use fails the job (InvalidInput, via _step)
            plan = await self.plan_of(job)
            detected = await self.backend.prepare(job, plan)
            environment = environment_sentence(plan, self.backend.unbuilt_environment(job))
            wait = await self._admit(job, Phase.BUILDING if build_enabled(spec) else Phase.VALIDATION_RUNNING)
            if wait is not None:
                return wait
            source = _source(annotations.get(SOURCE_ANNOTATION)) if "source" not in status else None
            if build_enabled(spec):
                def start_build(st: JobStatus) -> None:
                    if source is not None:  # fetched after it was accepted (a job made past the service)
                        st["source"] = source
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
                    if source is not None:
                        st["source"] = source
                    st["environment"] = environment

                await self._move(job, phase, Phase.VALIDATION_RUNNING, Reason.VALIDATION_STARTED,
                                 "Build disabled; validating in the configured environment.", unbuilt)
            return AGAIN

        if phase == Phase.BUILDING:
            return await self._building(job)

        if phase == Phase.BUILD_COMPLETE:
            if not (status.get("buildStatus") or {}).get("imageReference"):
                await self._move(job, phase, Phase.FAILED, Reason.BUILD_FAILED,
                                 "BuildComplete was recorded without an environment reference.")
                return AGAIN
            wait = await self._admit(job, Phase.VALIDATION_RUNNING)
            if wait is not None:
                return wait
            await self._move(job, phase, Phase.VALIDATION_RUNNING, Reason.VALIDATION_STARTED,
                             f"Validating in {status['buildStatus']['imageReference']}.")
            return AGAIN

        if phase == Phase.VALIDATION_RUNNING:
            return await self._validating(job)
        raise ValueError(f"job {job['metadata']['name']} has an unknown phase {phase!r}")

    async def plan_of(self, job: Job) -> ValidationPlan:
        """The job's validation plan, computed once from its spec and stored
        snapshot (plan.py) and handed to every backend call; an engine that
        takes over computes the same one again."""
        uid = job["metadata"]["uid"]
        plan = self._plans.get(uid)
        if plan is None:
            snapshot = await self.backend.read_snapshot(job)
            plan = await asyncio.to_thread(make_plan, job, snapshot, build_timeout=self.build_timeout,
                                           validation_timeout=self.validation_timeout,
                                           **self.backend.runner_defaults())
            self._plans[uid] = plan
        return plan

    def _timeouts(self, job: Job) -> Timeouts:
        return timeouts(job["spec"], build_timeout=self.build_timeout, validation_timeout=self.validation_timeout,
                        **self.backend.runner_defaults())

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


def _unfetched(job: Job) -> bool:
    """A job whose notebook (or golden notebook) is in git and that no service fetched yet (no
    source annotation, nor a failed fetch's)."""
    spec: Any = job["spec"]
    annotations = job["metadata"].get("annotations") or {}
    return (any(isinstance(spec.get(k), dict) and spec[k].get("git") for k in ("notebook", "goldenNotebook"))
            and SOURCE_ANNOTATION not in annotations and SOURCE_FAILURE_ANNOTATION not in annotations)


def _source(text: str | None) -> dict[str, str] | None:
    """``status.source`` from the job's source annotation (JSON written at submit), or None."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
