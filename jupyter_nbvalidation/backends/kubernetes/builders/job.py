"""The ``job`` strategy: a batch/v1 Job ``nvj-<job>-build`` running a
kaniko-compatible executor over the build-context ConfigMap.

- done when the Job's ``Complete`` / ``Failed`` condition is True (the store's
  built-in Job and Pod informers watch both);
- the digest is the builder container's termination message
  (``--digest-file=/dev/termination-log``): the reference is
  ``<repository>@<digest>``;
- a failure names the builder's exit code and the tail of its output; a
  registry that could not be reached or refused for now (kaniko's push or
  pull: connection refused, no such host, i/o timeout, 5xx, 429) is a
  transient ``Fault`` naming the registry (the engine retries the build);
- each attempt (``model.build_attempt``) has its own Job: ``nvj-<job>-build``,
  then ``nvj-<job>-build-r<n>``;
- cancel: the Job is deleted (background propagation: its pod goes with it).
"""

from __future__ import annotations

from typing import Any

import jupyter_nbvalidation.backends.build_failure as build_failure
import jupyter_nbvalidation.backends.kubernetes.objects as obj
import jupyter_nbvalidation.backends.kubernetes.results as res
from jupyter_nbvalidation.backends.base import FAILED, RUNNING, SUCCEEDED, Fault, Observation
from jupyter_nbvalidation.backends.kubernetes.builders.base import Builder
from jupyter_nbvalidation.backends.kubernetes.children import IMAGE_ANNOTATION, NotOurs
from jupyter_nbvalidation.backends.kubernetes.client import CONFIGMAPS, JOBS
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.model import build_attempt
from jupyter_nbvalidation.core.redaction import scrub
from jupyter_nbvalidation.runner.text import strip_ansi


class JobBuilder(Builder):
    strategy = "job"

    async def build_objects(self, job: Job) -> tuple[dict[str, Any], dict[str, Any]]:
        """The build-context ConfigMap and the build Job of ``job``."""
        s = self.settings
        inputs = await self.site.inputs(job)
        ctx = obj.build_context_configmap(job, inputs.context)
        bj = obj.build_job(job, builder_image=s.builder_image, destination=inputs.destination,
                           deadline_seconds=inputs.timeout_seconds, service_account=s.service_account,
                           registry_secret=s.registry_secret, extra_args=list(s.builder_args),
                           attempt=build_attempt(job))
        bj["metadata"].setdefault("annotations", {})[IMAGE_ANNOTATION] = inputs.destination
        return ctx, bj

    async def started(self, job: Job) -> bool:
        """Whether the build Job of ``job`` exists (then no reuse check is due)."""
        return await self.children.read(JOBS, self.children.build_jobs(), self.children.ns(job),
                                        obj.current_build_name(job)) is not None

    async def ensure(self, job: Job) -> Observation:
        async def body() -> dict[str, Any]:
            ctx, bj = await self.build_objects(job)
            await self.children.create(CONFIGMAPS, ctx, job)
            return bj

        try:
            bj = await self.children.ensure(JOBS, self.children.build_jobs(), job,
                                            obj.current_build_name(job), body)
        except NotOurs as e:
            return self.refused(e)
        return await self.observe(bj)

    async def observe(self, bj: dict[str, Any]) -> Observation:
        st = bj.get("status") or {}
        true = {c.get("type"): c for c in st.get("conditions") or [] if c.get("status") == "True"}
        destination = (bj["metadata"].get("annotations") or {}).get(IMAGE_ANNOTATION, "")
        repository = destination.rsplit(":", 1)[0] if ":" in destination.rsplit("/", 1)[-1] else destination
        started = st.get("startTime")
        if "Complete" in true:
            digest = await self._digest(bj)
            if digest is None:
                return Observation(FAILED, strategy="job", started_at=started, finished_at=st.get("completionTime"),
                                   message=f"build job {bj['metadata']['name']} completed but its pod reported no "
                                           "image digest (expected sha256:... as the termination message)")
            return Observation(SUCCEEDED, reference=f"{repository}@{digest}", strategy="job", started_at=started,
                               finished_at=st.get("completionTime") or true["Complete"].get("lastTransitionTime"),
                               message=f"Pushed {destination}.")
        if "Failed" in true:
            cond = true["Failed"]
            failed = await self._failed_builder(bj)
            output = strip_ansi(failed[1].get("message") or "") if failed else ""  # the log's tail, as kept
            cause = res.registry_fault(output, destination)
            in_push = cause is None and res.DIGEST_RE.match(output.strip()) is not None
            if in_push:
                # kaniko writes the digest file once the image is built, before it pushes: a build
                # that failed after that failed in the push, never in the requirements. Its log says
                # why when the kubelet still has it (a refused registry is retried; anything else,
                # such as a push it may not make, fails with kaniko's words); without the log, it is
                # the registry's fault, as a push that did not complete is
                digest, output = output.strip(), await self._log_tail(failed[0] if failed else None)
                cause = res.registry_fault(output, destination)
                if cause is None and not output.strip():
                    cause = (f"The build could not reach the registry {destination.split('/', 1)[0] or '(unknown)'}: "
                             f"the image was built ({digest}) but its push to {destination} did not complete")
            if cause is not None:  # not the requirements': the registry was away or refused for now
                cause = scrub(cause)
                return Observation(FAILED, strategy="job", started_at=started, message=cause,
                                   finished_at=cond.get("lastTransitionTime"), fault=Fault(cause, True))
            head = f"{cond.get('reason') or 'Failed'}: {cond.get('message') or 'the build job failed'}"
            installer = build_failure.cause_lines(output.splitlines())
            if installer:  # the installer's own error first (issue 21), the Job's condition after it
                message = (f"{build_failure.cut_words(' '.join(installer), build_failure.CAUSE_LIMIT)} "
                           f"(the image build failed: {head.rstrip('.')}; the whole log: GET …/buildlog)")
            elif in_push:  # kaniko's own words from its log, not the digest it wrote before the push
                message = f"{head}. The image was built, its push failed: {' '.join(output.split())[-600:]}"
            else:
                detail = await self._failure_detail(bj)
                message = head + (f". Builder output: {detail}" if detail else "")
            return Observation(FAILED, strategy="job", started_at=started,
                               finished_at=cond.get("lastTransitionTime"), message=scrub(message))
        return Observation(RUNNING, strategy="job", started_at=started,
                           message=f"Building {destination} (job {bj['metadata']['name']}).")

    async def _digest(self, bj: dict[str, Any]) -> str | None:
        for pod in await self.children.pods_of(bj):
            digest = res.digest_of(pod, obj.BUILD_CONTAINER)
            if digest:
                return digest
        return None

    async def _failed_builder(self, bj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The build Pod whose builder container failed, with that container's termination
        record (its message: the log's tail as the kubelet kept it); None when there is none."""
        for pod in await self.children.pods_of(bj):
            term = res.terminated(pod, obj.BUILD_CONTAINER) or {}
            if term.get("exitCode") not in (None, 0):
                return pod, term
        return None

    async def _log_tail(self, pod: dict[str, Any] | None) -> str:
        """The end of the failed builder container's log ('' when the kubelet has none)."""
        if pod is None:
            return ""
        return strip_ansi(await self.children.container_log(pod, obj.BUILD_CONTAINER, tailLines=40) or "")

    async def _failure_detail(self, bj: dict[str, Any]) -> str:
        for pod in await self.children.pods_of(bj):
            term = res.terminated(pod, obj.BUILD_CONTAINER) or {}
            if term.get("exitCode") not in (None, 0):
                text = " ".join(strip_ansi(term.get("message") or "").split())
                return f"exit code {term['exitCode']} ({term.get('reason') or 'Error'})" + (
                    f": {text[-600:]}" if text else "")
            waiting = res.fatal_waiting(pod, obj.BUILD_CONTAINER)
            if waiting:
                return strip_ansi(f"{waiting[0]}: {waiting[1]}")[:600]
        return ""

    async def cancel(self, job: Job) -> None:
        """Delete the build Job of the current attempt (and of any earlier one); idempotent."""
        for attempt in range(build_attempt(job), -1, -1):
            await self.children.delete(JOBS, self.children.ns(job),
                                       obj.build_job_name(job["metadata"]["name"], attempt),
                                       self.children.build_jobs())

    async def build_log(self, job: Job) -> str | None:
        """The builder container's log: what kaniko wrote so far while the build
        Pod runs, all of it afterwards (None before the Pod started)."""
        bj = await self.children.mine(JOBS, self.children.build_jobs(), job,
                                      obj.current_build_name(job))
        if bj is None:
            return None
        for pod in await self.children.pods_of(bj):
            text = await self.children.container_log(pod, obj.BUILD_CONTAINER)
            if text is not None:
                return text
        return None
