"""The validation Pod ``nvj-<name>-validate``: the runner, in exactly the
image recorded in ``status.buildStatus.imageReference`` (or, build disabled,
``podConfig.containerImage`` / ``runner_image``), with the snapshot mounted.

Its verdict is the runner's result: the full result from the container log
when readable, else the termination-message summary; infrastructure failures
(OOMKilled, image pull, eviction) name their reason. Never a success without
a readable result, and never the result of a pod running another image.

While the Pod runs, its runner (``--progress``) reports each cell in its log;
the executor reads the log's new lines at most once per
``PodSettings.progress_interval`` (``progress.py``) and hands the progress to
the engine (``Observation.extra["progress"]``, and ``"progressPoll"``: when to
ask again), which writes ``status.progress``."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from ..backends.base import FAILED, RUNNING, SUCCEEDED, Observation
from ..errors import InputRejected
from ..model import Phase, ResultReason, build_enabled, isotime
from ..plan import ValidationPlan
from . import objects as obj
from . import results as res
from .progress import PodProgress, holds_run_start
from .children import Children, NotOurs
from .client import PODS

POD_GRACE_SECONDS = 30  # the runner's own --timeout reports before the pod deadline kills it


def print_executed_supported() -> bool:
    """Whether this version's runner has ``--print-executed`` (pods run the
    same version when built from runner_requirements)."""
    try:
        from ..runner import build_parser

        return "--print-executed" in build_parser()._option_string_actions  # type: ignore[attr-defined]
    except Exception:
        return False


@dataclass(frozen=True)
class PodSettings:
    runner_image: str = ""
    service_account: str = ""
    run_as_user: int = 1000
    resources: dict = field(default_factory=dict)
    image_pull_secrets: tuple[str, ...] = ()
    progress_interval: float = 1.0  # seconds between reads of a running Pod's log; 0: no progress


class ValidationExecutor:
    """Runs a job's validation in its Pod, as its plan says (the runner
    arguments, the validation timeout, the kernel's environment, the input
    files mounted into the pod), and reads the verdict."""

    def __init__(self, children: Children, settings: PodSettings, *, log: logging.Logger):
        self.children = children
        self.settings = settings
        self.log = log
        self.print_executed = print_executed_supported()
        self._finished: dict[str, Observation] = {}  # by job uid: a read final validation outcome
        self._progress: dict[str, PodProgress] = {}  # by job uid: the running Pod's log, read so far

    def forget(self, uid: str) -> None:
        self._finished.pop(uid, None)
        self._progress.pop(uid, None)

    def clear(self) -> None:
        self._finished.clear()
        self._progress.clear()

    def pod(self, job: dict, image: str, plan: ValidationPlan) -> dict:
        s = self.settings
        command = obj.runner_command(plan, print_executed=self.print_executed, progress=s.progress_interval > 0)
        return obj.validation_pod(job, image=image, command=command,
                                  deadline_seconds=int(plan.validation_timeout) + POD_GRACE_SECONDS,
                                  run_as_user=s.run_as_user, service_account=s.service_account,
                                  resources=dict(s.resources), image_pull_secrets=list(s.image_pull_secrets),
                                  inputs=list(plan.input_files))

    def image(self, job: dict, reference: str | None) -> str:
        if build_enabled(job["spec"]):
            if not reference:  # the engine never calls without one; never fall back
                raise InputRejected("No built image is recorded for this job.")
            return reference
        return (job["spec"].get("podConfig") or {}).get("containerImage") or self.settings.runner_image

    async def ensure(self, job: dict, reference: str | None, plan: ValidationPlan) -> Observation:
        uid = job["metadata"]["uid"]
        if uid in self._finished:
            return self._finished[uid]
        image = self.image(job, reference)
        pod_name = obj.validation_pod_name(job["metadata"]["name"])

        async def body() -> dict:
            return self.pod(job, image, plan)

        try:
            pod = await self.children.ensure(PODS, self.children.pods(), job, pod_name, body)
        except NotOurs as e:
            return Observation(FAILED, message=str(e), finished_at=isotime(), reference=image,
                               result=res.failure_result(ResultReason.POD_CONFLICT, str(e)))
        running = [c.get("image") for c in pod["spec"].get("containers") or [] if c.get("name") == obj.RUNNER_CONTAINER]
        if running != [image]:
            message = (f"The validation pod {pod_name} runs {running[0] if running else 'no runner'}, not the "
                       f"environment recorded for this job ({image}); refusing its result.")
            return Observation(FAILED, message=message, finished_at=isotime(), reference=image,
                               result=res.failure_result(ResultReason.IMAGE_MISMATCH, message))
        outcome = res.pod_outcome(pod, obj.RUNNER_CONTAINER)
        if not outcome.finished:
            return Observation(RUNNING, message=f"Validating in pod {pod_name}.", reference=image,
                               started_at=outcome.started_at, extra=await self.progress(uid, pod))
        result, log = await self._result(pod, outcome)
        ok = outcome.exit_code == 0 and result.get("verdict") == Phase.SUCCEEDED
        observation = Observation(SUCCEEDED if ok else FAILED, message=result.get("message") or "",
                                  result=result, reference=image, started_at=outcome.started_at,
                                  finished_at=outcome.finished_at or isotime())
        final = await self.final_progress(uid, pod, log)
        if final is not None:
            observation.extra["progress"] = final
        self._finished[uid] = observation
        return observation

    # -- progress --------------------------------------------------------------------------
    async def _read_log(self, pod: dict, query: dict[str, str]) -> str | None:
        try:
            return await self.children.container_log(pod, obj.RUNNER_CONTAINER, **query)
        except Exception as e:  # progress is a view: a read that fails changes nothing
            self.log.debug("nbvalidation: progress of pod %s not read: %s", pod["metadata"]["name"], e)
            return None

    async def progress(self, uid: str, pod: dict) -> dict:
        """``Observation.extra`` of a running Pod: the progress read from its log so
        far (read again when ``progress_interval`` has passed) and when to ask again."""
        interval = self.settings.progress_interval
        if interval <= 0:
            return {}
        state = self._progress.setdefault(uid, PodProgress())
        if state.due(interval):
            await state.read(pod, obj.RUNNER_CONTAINER, lambda q: self._read_log(pod, q))
        extra: dict = {}
        snap = state.snapshot()
        if snap is not None:
            extra["progress"] = snap
        if state.instance is not None:  # started: its log grows (a Pod not started wakes the engine when it starts)
            extra["progressPoll"] = max(0.05, interval - (time.monotonic() - state.read_at))
        return extra

    async def final_progress(self, uid: str, pod: dict, log: str | None) -> dict | None:
        """The progress as the run ended (kept at the terminal phase): from the
        whole log when it holds the run from its start, else after one last read."""
        if self.settings.progress_interval <= 0:
            return None
        state = self._progress.pop(uid, None) or PodProgress()
        if not holds_run_start(log):
            await state.read(pod, obj.RUNNER_CONTAINER, lambda q: self._read_log(pod, q))
        return state.final(log)

    async def result(self, pod: dict, outcome: res.PodOutcome) -> dict:
        """The runner's verdict: the full result from the log when readable,
        else the termination-message summary; infrastructure failures name
        their reason. Never a success without a readable result."""
        return (await self._result(pod, outcome))[0]

    async def _result(self, pod: dict, outcome: res.PodOutcome) -> tuple[dict, str | None]:
        """(the verdict, the whole log when it was read for it)."""
        log = None
        if res.reads_log(outcome):
            log = await self.children.container_log(pod, obj.RUNNER_CONTAINER)
        return res.verdict(outcome, log), log

    async def cancel(self, job: dict) -> None:
        await self.children.delete(PODS, self.children.ns(job), obj.validation_pod_name(job["metadata"]["name"]),
                                   self.children.pods())

    async def executed_notebook(self, job: dict) -> dict | None:
        pod = await self.children.mine(PODS, self.children.pods(), job, obj.validation_pod_name(job["metadata"]["name"]))
        if pod is None:
            return None
        log = await self.children.container_log(pod, obj.RUNNER_CONTAINER)
        if log is None:
            return None
        _, payload = res.parse_log(log)
        return res.decode_executed(payload) if payload else None
