"""The validation Pod ``nvj-<name>-validate`` (retry n after a transient fault:
``nvj-<name>-validate-r<n>``, ``model.validation_attempt``): the runner, in exactly
the image recorded in ``status.buildStatus.imageReference`` (or, build disabled,
``podConfig.containerImage`` / ``runner_image``), with the snapshot mounted.

Its verdict is the runner's result: the full result from the container log
when readable, else the termination-message summary. Never a success without
a readable result, and never the result of a pod running another image.

What is not the notebook's is a ``Fault`` (``backends.base``), never a verdict,
and it is decided *before* the runner's result is read (a deleted Pod's runner
reports the SIGTERM it got as a failed cell):

- the Pod was deleted (a ``deletionTimestamp`` this server did not set, or gone
  while it ran), evicted, preempted, its node lost or shut down (``status.reason``,
  a ``DisruptionTarget`` condition): transient, the engine retries in a fresh Pod;
- its image cannot be pulled (ErrImagePull / ImagePullBackOff): the Pod is still
  running (the kubelet retries) until ``PodSettings.image_pull_deadline`` from the
  first time it was seen waiting, then transient; an image that does not exist
  (not found, manifest unknown, InvalidImageName, ErrImageNeverPull): permanent, at once;
- its container cannot be created (CreateContainerConfigError): permanent.

While the Pod runs, its runner (``--progress``) reports each cell in its log;
the executor reads the log's new lines at most once per
``PodSettings.progress_interval`` (``progress.py``) and hands the progress to
the engine (``Observation.progress``, and ``progress_poll``: when to ask
again), which writes ``status.progress``."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import jupyter_nbvalidation.backends.kubernetes.objects as obj
import jupyter_nbvalidation.backends.kubernetes.results as res
from jupyter_nbvalidation.backends.base import FAILED, RUNNING, SUCCEEDED, Fault, Observation
from jupyter_nbvalidation.backends.kubernetes.children import Children, NotOurs
from jupyter_nbvalidation.backends.kubernetes.client import PODS
from jupyter_nbvalidation.backends.kubernetes.progress import PodProgress, holds_run_start
from jupyter_nbvalidation.core.documents import Job, Progress, RunnerResult
from jupyter_nbvalidation.core.errors import InputRejected
from jupyter_nbvalidation.core.model import Phase, ResultReason, build_enabled, isotime, validation_attempt
from jupyter_nbvalidation.spec.plan import ValidationPlan

POD_GRACE_SECONDS = 30  # the runner's own --timeout reports before the pod deadline kills it


def print_executed_supported() -> bool:
    """Whether this version's runner has ``--print-executed`` (pods run the
    same version when built from runner_requirements)."""
    try:
        from jupyter_nbvalidation.runner import (
            build_parser,  # deferred: start-up time (the runner's parser, only to build a Pod's command)
        )

        return "--print-executed" in build_parser()._option_string_actions
    except Exception:
        return False


@dataclass(frozen=True)
class PodSettings:
    runner_image: str = ""
    service_account: str = ""
    run_as_user: int = 1000
    resources: dict[str, Any] = field(default_factory=dict)
    image_pull_secrets: tuple[str, ...] = ()
    progress_interval: float = 1.0  # seconds between reads of a running Pod's log; 0: no progress
    image_pull_deadline: float = 300.0  # seconds a Pod may wait on a failing image pull before a Fault


class ValidationExecutor:
    """Runs a job's validation in its Pod, as its plan says (the runner
    arguments, the validation timeout, the kernel's environment, the input
    files mounted into the pod), and reads the verdict."""

    def __init__(self, children: Children, settings: PodSettings, *, log: logging.Logger,
                 secret_of: Callable[[str], str | None] = lambda name: None):
        self.children = children
        self.settings = settings
        self.secret_of = secret_of  # a secret's name (podConfig.credentials) -> its Kubernetes Secret
        self.log = log
        self.print_executed = print_executed_supported()
        # by job uid: (attempt, its read final outcome: a verdict or a Fault)
        self._finished: dict[str, tuple[int, Observation]] = {}
        # by job uid: (attempt, the running Pod's log, read so far)
        self._progress: dict[str, tuple[int, PodProgress]] = {}
        self._seen: dict[str, set[str]] = {}  # by job uid: the names of the Pods seen (or created) here
        self._deleted: dict[str, set[str]] = {}  # by job uid: the names of the Pods this server deleted
        # by job uid, then pod uid: time.monotonic() when the Pod was first seen waiting on its image pull
        self._pull_since: dict[str, dict[str, float]] = {}

    def forget(self, uid: str) -> None:
        self._finished.pop(uid, None)
        self._progress.pop(uid, None)
        self._seen.pop(uid, None)
        self._deleted.pop(uid, None)
        self._pull_since.pop(uid, None)

    def clear(self) -> None:
        self._finished.clear()
        self._progress.clear()
        self._seen.clear()
        self._deleted.clear()
        self._pull_since.clear()

    def pod(self, job: Job, image: str, plan: ValidationPlan, attempt: int = 0) -> dict[str, Any]:
        s = self.settings
        command = obj.runner_command(plan, print_executed=self.print_executed, progress=s.progress_interval > 0)
        return obj.validation_pod(job, image=image, command=command,
                                  deadline_seconds=int(plan.validation_timeout) + POD_GRACE_SECONDS,
                                  run_as_user=s.run_as_user, service_account=s.service_account,
                                  resources=dict(s.resources), image_pull_secrets=list(s.image_pull_secrets),
                                  inputs=list(plan.input_files), attempt=attempt,
                                  secrets=[self._kube_secret(n) for n in plan.credentials],
                                  token=bool((job["spec"].get("podConfig") or {}).get("serviceAccountName")))

    def _kube_secret(self, name: str) -> str:
        secret = self.secret_of(name)
        if secret is None:  # submit refused it; a job made past the service was checked at Initializing
            raise InputRejected(f"spec.podConfig.credentials: secret {name!r} is not a Kubernetes Secret "
                                "(fromSecret)", "spec.podConfig.credentials")
        return secret

    def image(self, job: Job, reference: str | None) -> str:
        if build_enabled(job["spec"]):
            if not reference:  # the engine never calls without one; never fall back
                raise InputRejected("No built image is recorded for this job.")
            return reference
        return (job["spec"].get("podConfig") or {}).get("containerImage") or self.settings.runner_image

    async def ensure(self, job: Job, reference: str | None, plan: ValidationPlan) -> Observation:
        uid = job["metadata"]["uid"]
        attempt = validation_attempt(job)
        done = self._finished.get(uid)
        if done is not None and done[0] == attempt:
            return done[1]
        image = self.image(job, reference)
        ns = self.children.ns(job)
        pod_name = obj.validation_pod_name(job["metadata"]["name"], attempt)
        seen = self._seen.setdefault(uid, set())
        informer = self.children.pods()
        try:
            pod = await self.children.read(PODS, informer, ns, pod_name)
            if pod is None and pod_name in seen:
                # the cache may just not hold it (a relist, a forget): only the API server's 404 says gone
                pod = await self.children.read(PODS, None, ns, pod_name)
                if pod is not None and informer is not None:
                    informer.put(pod)
            if pod is None:
                if pod_name in seen:  # it ran, and is gone: deleted (force), or its node lost
                    return self._fault(uid, attempt, image, transient=True, pod=None, cause=(
                        f"The validation Pod {pod_name} disappeared while it ran (deleted, or its node lost)"))
                pod = await self.children.create(PODS, self.pod(job, image, plan, attempt), job, informer)
            elif not obj.owned_by(pod, job):
                raise NotOurs(f"pods/{pod_name} already exists in namespace {ns} and does not belong to this job")
        except NotOurs as e:
            return Observation(FAILED, message=str(e), finished_at=isotime(), reference=image,
                               result=res.failure_result(ResultReason.POD_CONFLICT, str(e)))
        seen.add(pod_name)
        running = [c.get("image") for c in pod["spec"].get("containers") or [] if c.get("name") == obj.RUNNER_CONTAINER]
        if running != [image]:
            message = (f"The validation pod {pod_name} runs {running[0] if running else 'no runner'}, not the "
                       f"environment recorded for this job ({image}); refusing its result.")
            return Observation(FAILED, message=message, finished_at=isotime(), reference=image,
                               result=res.failure_result(ResultReason.IMAGE_MISMATCH, message))
        fault = await self._pod_fault(uid, attempt, pod, image)
        if fault is not None:
            return fault
        outcome = res.pod_outcome(pod, obj.RUNNER_CONTAINER)
        if not outcome.finished:
            wait = res.pull_wait(pod)
            if wait is not None:  # not a verdict: the kubelet pulls again, until image_pull_deadline
                since = self._pull_since[uid][pod["metadata"].get("uid") or pod_name]
                left = self.settings.image_pull_deadline - (time.monotonic() - since)
                return Observation(RUNNING, reference=image, started_at=outcome.started_at, message=(
                    f"The validation Pod {pod_name} waits for its image {wait.image or image} ({wait.reason}: "
                    f"{wait.message or 'no message'}); the kubelet retries the pull for {max(0.0, left):.0f} s more."),
                    progress_poll=max(0.05, left))  # to end the wait at the deadline
            progress, poll = await self.progress(uid, pod, attempt)
            return Observation(RUNNING, message=f"Validating in pod {pod_name}.", reference=image,
                               started_at=outcome.started_at, progress=progress, progress_poll=poll)
        result, log = await self._result(pod, outcome)
        ok = outcome.exit_code == 0 and result.get("verdict") == Phase.SUCCEEDED
        observation = Observation(SUCCEEDED if ok else FAILED, message=result.get("message") or "",
                                  result=result, reference=image, started_at=outcome.started_at,
                                  finished_at=outcome.finished_at or isotime())
        observation.progress = await self.final_progress(uid, pod, log)
        self._finished[uid] = (attempt, observation)
        return observation

    # -- faults: what is not the notebook's -----------------------------------------------
    async def _pod_fault(self, uid: str, attempt: int, pod: dict[str, Any], image: str) -> Observation | None:
        """The Fault of a Pod whose run the cluster ended or cannot start, else None
        (decided before the runner's result is read: see the module's docstring)."""
        meta = pod["metadata"]
        name = meta["name"]
        cause = res.disruption(pod, obj.RUNNER_CONTAINER)
        if cause is not None:
            if name in self._deleted.get(uid, ()) and "deleted while it ran" in cause:
                cause = f"The validation Pod {name} was deleted by this server (cancelled)"
            return self._fault(uid, attempt, image, transient=True, pod=pod, cause=cause)
        wait = res.pull_wait(pod)
        if wait is not None:
            pulled = wait.image or image
            if wait.missing:
                return self._fault(uid, attempt, image, transient=False, pod=pod, cause=(
                    f"The validation Pod could not pull {pulled}: the image does not exist "
                    f"({wait.reason}: {wait.message or 'no message'})"))
            pod_uid = meta.get("uid") or name
            waits = self._pull_since.setdefault(uid, {})
            if pod_uid not in waits:
                self.log.info("nbvalidation: validation Pod %s waits for its image %s (%s: %s); waiting up to "
                              "%g s (image_pull_deadline)", name, pulled, wait.reason, wait.message,
                              self.settings.image_pull_deadline)
            since = waits.setdefault(pod_uid, time.monotonic())
            if time.monotonic() - since >= self.settings.image_pull_deadline:
                return self._fault(uid, attempt, image, transient=True, pod=pod, cause=(
                    f"The validation Pod could not pull {pulled}: {wait.message or wait.reason} "
                    f"({wait.reason} for {self.settings.image_pull_deadline:g} s)"))
            return None
        waiting = res.fatal_waiting(pod, obj.RUNNER_CONTAINER)
        if waiting is not None:
            return self._fault(uid, attempt, image, transient=False, pod=pod, cause=(
                f"The validation Pod {name} cannot start its container ({waiting[0]}"
                + (f": {waiting[1]}" if waiting[1] else "") + ")"))
        return None

    def _fault(self, uid: str, attempt: int, image: str, *, transient: bool, cause: str,
               pod: dict[str, Any] | None) -> Observation:
        """A failed attempt that is not the notebook's: no runner result is read
        (what a stopped runner reports is not a verdict); the progress as the attempt
        ended, with no cell running any more."""
        observation = Observation(FAILED, message=cause, reference=image, finished_at=isotime(),
                                  fault=Fault(cause, transient))
        kept = self._progress.pop(uid, None)
        snap = kept[1].snapshot() if kept is not None and kept[0] == attempt else None
        if snap is not None:
            snap["currentCellIndex"] = snap["currentCellStartedAt"] = None
            observation.progress = snap
        self._pull_since.pop(uid, None)
        self._finished[uid] = (attempt, observation)
        self.log.info("nbvalidation: validation attempt %d of job uid %s: %s (%s)", attempt, uid, cause,
                      "transient" if transient else "permanent")
        return observation

    # -- progress --------------------------------------------------------------------------
    async def _read_log(self, pod: dict[str, Any], query: dict[str, str]) -> str | None:
        try:
            return await self.children.container_log(pod, obj.RUNNER_CONTAINER, **query)
        except Exception as e:  # progress is a view: a read that fails changes nothing
            self.log.debug("nbvalidation: progress of pod %s not read: %s", pod["metadata"]["name"], e)
            return None

    async def progress(self, uid: str, pod: dict[str, Any], attempt: int = 0) -> tuple[Progress | None, float | None]:
        """A running Pod's ``Observation.progress`` (read from its log so far, again when
        ``progress_interval`` has passed) and ``progress_poll`` (when to ask again)."""
        interval = self.settings.progress_interval
        if interval <= 0:
            return None, None
        kept = self._progress.get(uid)
        if kept is None or kept[0] != attempt:  # a new attempt: its own run, its own records
            kept = self._progress[uid] = (attempt, PodProgress())
        state = kept[1]
        if state.due(interval):
            await state.read(pod, obj.RUNNER_CONTAINER, lambda q: self._read_log(pod, q))
        poll = None
        if state.instance is not None:  # started: its log grows (a Pod not started wakes the engine when it starts)
            poll = max(0.05, interval - (time.monotonic() - state.read_at))
        return state.snapshot(), poll

    async def final_progress(self, uid: str, pod: dict[str, Any], log: str | None) -> Progress | None:
        """The progress as the run ended (kept at the terminal phase): from the
        whole log when it holds the run from its start, else after one last read."""
        if self.settings.progress_interval <= 0:
            return None
        kept = self._progress.pop(uid, None)
        state = kept[1] if kept is not None else PodProgress()
        if not holds_run_start(log):
            await state.read(pod, obj.RUNNER_CONTAINER, lambda q: self._read_log(pod, q))
        return state.final(log)

    async def result(self, pod: dict[str, Any], outcome: res.PodOutcome) -> RunnerResult:
        """The runner's verdict: the full result from the log when readable,
        else the termination-message summary; infrastructure failures name
        their reason. Never a success without a readable result."""
        return (await self._result(pod, outcome))[0]

    async def _result(self, pod: dict[str, Any], outcome: res.PodOutcome) -> tuple[RunnerResult, str | None]:
        """(the verdict, the whole log when it was read for it)."""
        log = None
        if res.reads_log(outcome):
            log = await self.children.container_log(pod, obj.RUNNER_CONTAINER)
        return res.verdict(outcome, log), log

    async def cancel(self, job: Job) -> None:
        """Delete the Pod of the job's current attempt (and of any earlier one still
        there); idempotent. The engine calls it on cancel and timeout, and to discard
        a failed attempt before it retries in a fresh Pod."""
        ns = self.children.ns(job)
        deleted = self._deleted.setdefault(job["metadata"]["uid"], set())
        for attempt in range(validation_attempt(job), -1, -1):
            name = obj.validation_pod_name(job["metadata"]["name"], attempt)
            deleted.add(name)
            await self.children.delete(PODS, ns, name, self.children.pods())

    async def environment_probe(self, job: Job) -> tuple[dict[str, Any], str | None] | None:
        """(the probe document its runner printed before the notebook ran, the Pod's start
        time), from the validation Pod's log; None before the runner printed it or once the
        Pod is gone."""
        pod = await self.children.mine(PODS, self.children.pods(), job,
                                       obj.validation_pod_name(job["metadata"]["name"], validation_attempt(job)))
        if pod is None:
            return None
        log = await self.children.container_log(pod, obj.RUNNER_CONTAINER)
        doc = res.environment_from_log(log) if log is not None else None
        return None if doc is None else (doc, (pod.get("status") or {}).get("startTime"))

    async def executed_notebook(self, job: Job) -> dict[str, Any] | None:
        pod = await self.children.mine(PODS, self.children.pods(), job,
                                       obj.validation_pod_name(job["metadata"]["name"], validation_attempt(job)))
        if pod is None:
            return None
        log = await self.children.container_log(pod, obj.RUNNER_CONTAINER)
        if log is None:
            return None
        _, payload = res.parse_log(log)
        return res.decode_executed(payload) if payload else None
