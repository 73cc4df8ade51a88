"""``auto``: which build strategy the cluster offers, from API discovery.

Tekton present (``tekton.dev/v1`` serves pipelineruns/taskruns) -> tekton;
else OpenShift builds present (``build.openshift.io/v1`` serves buildconfigs
and builds) -> openshift; else the batch/v1 Job builder. Returns the choice,
the reason in one sentence, and every strategy the cluster offers.
"""

from __future__ import annotations

from jupyter_nbvalidation.backends.kubernetes.client import Kube, KubeApiError


async def _resources(kube: Kube, group_version: str) -> set[str]:
    try:
        doc = await kube.request("GET", f"/apis/{group_version}", timeout=10)
    except KubeApiError as e:
        if e.status in (404, 503):
            return set()
        raise
    return {r.get("name") for r in doc.get("resources") or []}


async def discover(kube: Kube, tekton_kind: str = "PipelineRun") -> tuple[str, str, list[str]]:
    groups = await kube.request("GET", "/apis", timeout=10)
    names = {g.get("name") for g in groups.get("groups") or []}
    available = ["job"]
    tekton = openshift = False
    if "tekton.dev" in names:
        plural = "pipelineruns" if tekton_kind == "PipelineRun" else "taskruns"
        tekton = plural in await _resources(kube, "tekton.dev/v1")
        if tekton:
            available.append("tekton")
    if "build.openshift.io" in names:
        openshift = {"buildconfigs", "builds"} <= await _resources(kube, "build.openshift.io/v1")
        if openshift:
            available.append("openshift")
    if tekton:
        plural = "pipelineruns" if tekton_kind == "PipelineRun" else "taskruns"
        return "tekton", f"auto: Tekton is installed (tekton.dev/v1 serves {plural})", available
    if openshift:
        return "openshift", "auto: OpenShift builds are available (build.openshift.io/v1 serves buildconfigs)", \
            available
    return "job", "auto: neither Tekton (tekton.dev) nor OpenShift builds (build.openshift.io) are served; " \
                  "using a batch/v1 Job with a kaniko executor", available
