"""The ``openshift`` strategy: an OpenShift ``BuildConfig`` (Docker strategy,
inline Dockerfile, requirements.txt from the build-context ConfigMap),
instantiated once (``POST buildconfigs/<name>/instantiate``).

- output: ``DockerImage`` ``<registry>/<job>:<content hash>`` when a registry
  is configured (push Secret: ``registry_secret``), else the ImageStreamTag
  ``nvj-<job>:<content hash>`` in the namespace;
- done when the Build's ``status.phase`` is Complete, Failed, Error or
  Cancelled; the reference is ``status.outputDockerImageReference`` pinned to
  ``status.output.to.imageDigest``, falling back to the ImageStreamTag's
  image name when the digest is not set;
- cancel: ``status.cancelled: true`` on the Build (what ``oc cancel-build``
  does);
- a Build that failed for the cluster's or the registry's reason
  (:data:`INFRASTRUCTURE_REASONS`: its push, its Pod) is a transient Fault, never
  BuildFailed; the retry instantiates the BuildConfig again (Build n+1).

``instantiate`` is not idempotent: before calling it the builder looks for a
Build of the BuildConfig (live, not from the cache) and uses the
BuildConfig's ``status.lastVersion``; the Lease makes one server the only
caller. The Builds are watched through an informer (label
``nbvalidation.dev/job``, which OpenShift copies from the BuildConfig).
"""

from __future__ import annotations

from typing import Any

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.backends.base import FAILED, RUNNING, SUCCEEDED, Fault, Observation
from jupyter_nbvalidation.backends.kubernetes.builders.base import Builder, BuildInputs, Watched, pinned, strip_tag
from jupyter_nbvalidation.backends.kubernetes.children import NotOurs, api_failure
from jupyter_nbvalidation.backends.kubernetes.client import KubeApiError, Resource
from jupyter_nbvalidation.backends.kubernetes.store import JOB_LABEL
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.model import build_attempt, isotime
from jupyter_nbvalidation.core.redaction import scrub

BUILDCONFIGS = Resource("build.openshift.io/v1", "buildconfigs")
BUILDS = Resource("build.openshift.io/v1", "builds")
IMAGESTREAMTAGS = Resource("image.openshift.io/v1", "imagestreamtags")
BC_LABEL = "openshift.io/build-config.name"
BUILD_NUMBER = "openshift.io/build.number"
TERMINAL = ("Complete", "Failed", "Error", "Cancelled")
# a failed Build's status.reason (openshift/api build/v1) when the registry or the cluster, not the
# Dockerfile or the requirements, ended it: retried as a fault, never the build's verdict
INFRASTRUCTURE_REASONS = {
    "PushImageToRegistryFailed": "its push to the registry failed",
    "PullBuilderImageFailed": "the builder or base image could not be pulled",
    "FetchSourceFailed": "its build context could not be fetched",
    "CannotCreateBuildPod": "its Pod could not be created",
    "BuildPodDeleted": "its Pod was deleted",
    "BuildPodEvicted": "its Pod was evicted",
    "BuildPodExists": "its Pod already existed",
    "NoBuildContainerStatus": "its Pod reported no container status",
    "CannotRetrieveServiceAccount": "its service account could not be read",
}


class OpenShiftBuilder(Builder):
    strategy = "openshift"
    watched = Watched(BUILDS, "build.openshift.io/v1", "Build")

    def build_config(self, job: Job, inputs: BuildInputs) -> dict[str, Any]:
        b = self.settings
        name = job["metadata"]["name"]
        meta = obj._meta(job, obj.build_job_name(name), "build")
        if inputs.destination:
            to = {"kind": "DockerImage", "name": inputs.destination}
        else:
            to = {"kind": "ImageStreamTag", "name": f"{obj.child_name(name, 'image')}:{inputs.content_hash}"}
        output: dict[str, Any] = {"to": to}
        if b.registry_secret and inputs.destination:
            output["pushSecret"] = {"name": b.registry_secret}
        spec = {
            "runPolicy": "Serial",
            "source": {"type": "Dockerfile", "dockerfile": inputs.dockerfile,
                       "configMaps": [{"configMap": {"name": obj.build_context_name(name)}}]},
            "strategy": {"type": "Docker", "dockerStrategy": {"from": {"kind": "DockerImage",
                                                                        "name": inputs.base_image}}},
            "output": output,
            "completionDeadlineSeconds": max(1, inputs.timeout_seconds),
            "triggers": [],
        }
        if b.service_account:
            spec["serviceAccount"] = b.service_account
        return {"apiVersion": "build.openshift.io/v1", "kind": "BuildConfig", "metadata": meta, "spec": spec}

    async def instantiate(self, ns: str, bc: dict[str, Any]) -> dict[str, Any]:
        """The new Build (the API server creates it from the BuildConfig)."""
        name = bc["metadata"]["name"]
        return await self.kube.request("POST", BUILDCONFIGS.path(ns, name, "instantiate"), body={
            "kind": "BuildRequest", "apiVersion": "build.openshift.io/v1", "metadata": {"name": name}})

    async def _new_build(self, ns: str, bc: dict[str, Any]) -> dict[str, Any]:
        """Instantiate the BuildConfig and put the new Build in the cache."""
        build = await self.instantiate(ns, bc)
        build.setdefault("apiVersion", "build.openshift.io/v1")
        build.setdefault("kind", "Build")
        inf = self.informer()
        if inf is not None:
            inf.put(build)
        return build

    async def _builds_of(self, ns: str, bc_name: str, live: bool) -> list[dict[str, Any]]:
        inf = self.informer()
        if not live and inf is not None and inf.usable:
            found = [x for x in inf.cache.values() if (x["metadata"].get("labels") or {}).get(BC_LABEL) == bc_name
                     or (x["metadata"].get("annotations") or {}).get(BC_LABEL) == bc_name]
        else:
            page = await self.kube.request("GET", BUILDS.path(ns), query={"labelSelector": f"{BC_LABEL}={bc_name}"})
            found = page.get("items") or []
            for x in found:
                x.setdefault("apiVersion", "build.openshift.io/v1")
                x.setdefault("kind", "Build")
                if inf is not None:
                    inf.put(x)

        def number(x: dict[str, Any]) -> int:
            try:
                return int((x["metadata"].get("annotations") or {}).get(BUILD_NUMBER) or 0)
            except ValueError:
                return 0

        return sorted(found, key=number)

    async def ensure(self, job: Job) -> Observation:
        ns, name = self.children.ns(job), job["metadata"]["name"]
        bc_name = obj.build_job_name(name)

        async def body() -> dict[str, Any]:
            inputs = await self.site.inputs(job)
            await self.children.create_context(job, inputs.context)
            return self.build_config(job, inputs)

        try:
            builds = await self._builds_of(ns, bc_name, live=False)
            if not builds:
                bc = await self.children.ensure(BUILDCONFIGS, None, job, bc_name, body)
                builds = await self._builds_of(ns, bc_name, live=True)
                if not builds:
                    builds = [await self._new_build(ns, bc)]
            elif len(builds) <= build_attempt(job) and (builds[-1].get("status") or {}).get("phase") in TERMINAL:
                # a retry after a fault: Build n+1 of the same BuildConfig (looked for live first:
                # instantiate is not idempotent)
                builds = await self._builds_of(ns, bc_name, live=True)
                if len(builds) <= build_attempt(job):
                    bc = await self.kube.request("GET", BUILDCONFIGS.path(ns, bc_name))
                    builds = [*builds, await self._new_build(ns, bc)]
        except NotOurs as e:
            return self.refused(e)
        except KubeApiError as e:
            raise api_failure(e, f"openshift build of {name}") from None
        return await self.observe(ns, builds[-1])

    async def observe(self, ns: str, build: dict[str, Any]) -> Observation:
        st = build.get("status") or {}
        phase = st.get("phase") or "New"
        started = st.get("startTimestamp")
        what = f"build {build['metadata']['name']}"
        if phase not in TERMINAL:
            return Observation(RUNNING, strategy=self.strategy, started_at=started,
                               message=f"OpenShift {what} is {phase}.")
        finished = st.get("completionTimestamp") or isotime()
        if phase in ("Failed", "Error") and st.get("reason") in INFRASTRUCTURE_REASONS:
            cause = scrub(f"The OpenShift {what} failed, not in its build: {INFRASTRUCTURE_REASONS[st['reason']]} "
                          f"({st['reason']}{': ' + str(st['message']) if st.get('message') else ''})")[:1000]
            return Observation(FAILED, strategy=self.strategy, started_at=started, finished_at=finished,
                               message=cause, fault=Fault(cause, True))
        if phase != "Complete":
            message = f"{st.get('reason') or phase}: {st.get('message') or 'the OpenShift ' + what + ' ' + phase.lower()}"
            if st.get("logSnippet"):
                message += f". Build output: {' '.join(str(st['logSnippet']).split())[-600:]}"
            return Observation(FAILED, strategy=self.strategy, started_at=started, finished_at=finished,
                               message=scrub(message)[:1000])
        ref = st.get("outputDockerImageReference") or ""
        digest = (((st.get("output") or {}).get("to") or {}).get("imageDigest") or "").strip()
        to = ((build.get("spec") or {}).get("output") or {}).get("to") or {}
        if not digest and to.get("kind") == "ImageStreamTag":
            digest = await self._istag_digest(ns, to.get("name") or "")
        if not ref or not digest.startswith("sha256:"):
            return Observation(FAILED, strategy=self.strategy, started_at=started, finished_at=finished,
                               message=f"OpenShift {what} completed but no image digest could be read "
                                       "(status.output.to.imageDigest, ImageStreamTag)")
        return Observation(SUCCEEDED, strategy=self.strategy, reference=pinned(strip_tag(ref), digest),
                           started_at=started, finished_at=finished, message=f"Pushed {ref} ({what}).")

    async def _istag_digest(self, ns: str, istag: str) -> str:
        try:
            tag = await self.kube.request("GET", IMAGESTREAMTAGS.path(ns, istag))
        except KubeApiError as e:
            self.log.warning("nbvalidation: reading imagestreamtag %s failed: %s", istag, e)
            return ""
        return str(((tag.get("image") or {}).get("metadata") or {}).get("name") or "")

    async def cancel(self, job: Job) -> None:
        ns = self.children.ns(job)
        bc_name = obj.build_job_name(job["metadata"]["name"])
        try:
            builds = await self._builds_of(ns, bc_name, live=True)
        except KubeApiError as e:
            if e.status == 404:
                return
            raise api_failure(e, "cancelling the build") from None
        for build in builds:
            if ((build.get("status") or {}).get("phase")) in TERMINAL:
                continue
            await self.children.patch(BUILDS, ns, build["metadata"]["name"], {"status": {"cancelled": True}},
                                      self.informer(), f"cancelling build {build['metadata']['name']}")


__all__ = ["OpenShiftBuilder", "BUILDCONFIGS", "BUILDS", "IMAGESTREAMTAGS", "JOB_LABEL"]
