"""The ``tekton`` strategy: one Tekton ``PipelineRun`` (or ``TaskRun``) per job
over a buildah Task (the catalog's ``buildah`` or OpenShift Pipelines'),
referenced through a resolver (``cluster``, with the Task's namespace) or by
name in the job's namespace -- never the deprecated ClusterTask.

- workspace ``source``: the build-context ConfigMap (Dockerfile +
  requirements.txt); ``dockerconfig``: the registry Secret, when configured;
- params ``IMAGE`` (``<registry>/<job>:<content hash>``), ``DOCKERFILE``,
  ``CONTEXT``;
- done when ``status.conditions[type=Succeeded]`` is True/False; results
  ``IMAGE_URL`` + ``IMAGE_DIGEST`` give the digest-pinned reference;
- cancel: ``spec.status: Cancelled`` (``TaskRunCancelled`` for a TaskRun);
- a run that failed on the registry (its failed step's log says so, as a kaniko
  build Job's does: ``results.registry_fault``) is a transient Fault, never
  BuildFailed; the retry is a new run, ``nvj-<job>-build-r<n>``.
"""

from __future__ import annotations

from typing import Any

import jupyter_nbvalidation.backends.kubernetes.objects as obj
import jupyter_nbvalidation.backends.kubernetes.results as res
from jupyter_nbvalidation.backends.base import FAILED, RUNNING, SUCCEEDED, Fault, Observation
from jupyter_nbvalidation.backends.kubernetes.builders.base import (
    Builder,
    BuildInputs,
    BuildSite,
    Watched,
    condition,
    pinned,
)
from jupyter_nbvalidation.backends.kubernetes.children import IMAGE_ANNOTATION, NotOurs
from jupyter_nbvalidation.backends.kubernetes.client import KubeApiError, Resource
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.model import isotime
from jupyter_nbvalidation.core.redaction import scrub
from jupyter_nbvalidation.runner.text import strip_ansi

PIPELINERUNS = Resource("tekton.dev/v1", "pipelineruns")
TASKRUNS = Resource("tekton.dev/v1", "taskruns")


class TektonBuilder(Builder):
    strategy = "tekton"

    def __init__(self, site: BuildSite):
        super().__init__(site)
        self.kind = site.settings.tekton_run_kind
        self.resource = PIPELINERUNS if self.kind == "PipelineRun" else TASKRUNS
        self.watched = Watched(self.resource, "tekton.dev/v1", self.kind)

    # -- the object --------------------------------------------------------------
    def task_ref(self, ns: str) -> dict[str, Any]:
        b = self.settings
        if b.tekton_task_resolver:
            params = [{"name": "kind", "value": "task"}, {"name": "name", "value": b.tekton_task}]
            if b.tekton_task_resolver == "cluster":
                params.append({"name": "namespace", "value": b.tekton_task_namespace or ns})
            return {"resolver": b.tekton_task_resolver, "params": params}
        return {"kind": "Task", "name": b.tekton_task}

    def run_object(self, job: Job, inputs: BuildInputs) -> dict[str, Any]:
        b = self.settings
        ns = job["metadata"]["namespace"]
        name = job["metadata"]["name"]
        meta = obj._meta(job, obj.current_build_name(job), "build")
        meta["annotations"] = {IMAGE_ANNOTATION: inputs.destination}
        source = {"name": "source", "configMap": {"name": obj.build_context_name(name)}}
        workspaces = [source]
        if b.registry_secret:
            workspaces.append({"name": "dockerconfig", "secret": {"secretName": b.registry_secret}})
        task_params = [{"name": "IMAGE", "value": inputs.destination},
                       {"name": "DOCKERFILE", "value": "./Dockerfile"}, {"name": "CONTEXT", "value": "."}]
        timeout = f"{max(1, inputs.timeout_seconds)}s"
        if self.kind == "TaskRun":
            spec = {"taskRef": self.task_ref(ns), "params": task_params, "workspaces": workspaces,
                    "timeout": timeout}
            if b.service_account:
                spec["serviceAccountName"] = b.service_account
        else:
            pipeline = {
                "params": [{"name": "image", "type": "string"}],
                "workspaces": [{"name": w["name"]} for w in workspaces],
                "results": [{"name": r, "value": f"$(tasks.build.results.{r})"} for r in ("IMAGE_URL", "IMAGE_DIGEST")],
                "tasks": [{"name": "build", "taskRef": self.task_ref(ns),
                           "params": [{"name": "IMAGE", "value": "$(params.image)"}, *task_params[1:]],
                           "workspaces": [{"name": w["name"], "workspace": w["name"]} for w in workspaces]}],
            }
            spec = {"pipelineSpec": pipeline, "params": [{"name": "image", "value": inputs.destination}],
                    "workspaces": workspaces, "timeouts": {"pipeline": timeout}}
            if b.service_account:
                spec["taskRunTemplate"] = {"serviceAccountName": b.service_account}
        return {"apiVersion": "tekton.dev/v1", "kind": self.kind, "metadata": meta, "spec": spec}

    # -- the interface -----------------------------------------------------------------
    async def ensure(self, job: Job) -> Observation:
        async def body() -> dict[str, Any]:
            inputs = await self.site.inputs(job)
            await self.children.create_context(job, inputs.context)
            return self.run_object(job, inputs)

        try:
            run = await self.children.ensure(self.resource, self.informer(), job,
                                             obj.current_build_name(job), body)
        except NotOurs as e:
            return self.refused(e)
        return await self.observe(run)

    async def observe(self, run: dict[str, Any]) -> Observation:
        st = run.get("status") or {}
        started = st.get("startTime")
        cond = condition(run, "Succeeded")
        what = f"{self.kind} {run['metadata']['name']}"
        if cond is None or cond.get("status") not in ("True", "False"):
            detail = f" ({cond.get('reason')})" if cond and cond.get("reason") else ""
            return Observation(RUNNING, strategy=self.strategy, started_at=started,
                               message=f"Building with {what}{detail}.")
        finished = st.get("completionTime") or cond.get("lastTransitionTime") or isotime()
        if cond["status"] == "False":
            cause = await self._registry_fault(run)
            if cause is not None:  # not the requirements': the registry was away or refused for now
                cause = scrub(cause)
                return Observation(FAILED, strategy=self.strategy, started_at=started, finished_at=finished,
                                   message=cause, fault=Fault(cause, True))
            message = f"{cond.get('reason') or 'Failed'}: {cond.get('message') or what + ' failed'}"
            return Observation(FAILED, strategy=self.strategy, started_at=started, finished_at=finished,
                               message=scrub(message)[:1000])
        results = {r.get("name"): r.get("value") for r in st.get("results") or []
                   if isinstance(r, dict) and isinstance(r.get("value"), str)}
        url = (results.get("IMAGE_URL") or "").strip()
        digest = (results.get("IMAGE_DIGEST") or "").strip()
        if not url:
            url = ((run["metadata"].get("annotations") or {}).get(IMAGE_ANNOTATION) or "")
        if not digest.startswith("sha256:") or not url:
            return Observation(FAILED, strategy=self.strategy, started_at=started, finished_at=finished,
                               message=f"{what} succeeded but reported no IMAGE_DIGEST/IMAGE_URL result")
        return Observation(SUCCEEDED, strategy=self.strategy, reference=pinned(url, digest), started_at=started,
                           finished_at=finished, message=f"Pushed {url} ({what}).")

    async def _registry_fault(self, run: dict[str, Any]) -> str | None:
        """The registry fault its failed step's log names (the tail the kubelet still
        has), or None: another cause, or no log to tell (then it is the build's failure,
        as the run's condition says). A PipelineRun's failed step is in its TaskRuns."""
        destination = (run["metadata"].get("annotations") or {}).get(IMAGE_ANNOTATION, "")
        ns = run["metadata"].get("namespace") or ""
        task_runs = [run]
        if self.kind == "PipelineRun":
            task_runs = []
            for ref in (run.get("status") or {}).get("childReferences") or []:
                if ref.get("kind") == "TaskRun" and ref.get("name"):
                    try:
                        task_runs.append(await self.kube.request("GET", TASKRUNS.path(ns, ref["name"])))
                    except KubeApiError as e:
                        self.log.debug("nbvalidation: TaskRun %s of %s: %s", ref["name"], run["metadata"]["name"], e)
        for tr in task_runs:
            st = tr.get("status") or {}
            pod = st.get("podName")
            for step in st.get("steps") or []:
                term = step.get("terminated") or {}
                if not pod or term.get("exitCode") in (None, 0):
                    continue
                container = step.get("container") or f"step-{step.get('name')}"
                log = await self.children.container_log({"metadata": {"namespace": ns, "name": pod}}, container,
                                                        tailLines=40)
                cause = res.registry_fault(strip_ansi(log or ""), destination)
                if cause is not None:
                    return cause
        return None

    async def cancel(self, job: Job) -> None:
        """Cancel the run of the current attempt (an earlier one has ended: that is why there is a retry)."""
        value = "Cancelled" if self.kind == "PipelineRun" else "TaskRunCancelled"
        await self.children.patch(self.resource, self.children.ns(job),
                                  obj.current_build_name(job),
                                  {"spec": {"status": value}}, self.informer(), f"cancelling {self.resource.plural}")
