"""Tekton and OpenShift builders, and the ``auto`` strategy, on the REAL API
server (tests/k8s_harness.py). The harness plays the Tekton controller and
the OpenShift build controller on hand-written minimal CRDs
(tests/k8s_manifests/): it writes the run's / Build's status the
way those controllers do. OpenShift's ``instantiate`` subresource cannot be
served by a CRD: a stand-in builder creates the Build the way the OpenShift
API server does (name ``<bc>-<n>``, the BuildConfig's labels and spec).

The CRDs are removed again at the end of the module, so ``auto`` means the
Job builder for the other test modules.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytest_asyncio
from helpers import wait, wait_async, write_notebook
from k8s_support import DIGEST, REGISTRY, WAIT, events_of, make_env, reasons, run_validation, wait_object

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.backends.kubernetes.builders import BuildSettings, BuildSite
from jupyter_nbvalidation.backends.kubernetes.builders.openshift import (
    BC_LABEL,
    BUILD_NUMBER,
    BUILDCONFIGS,
    BUILDS,
    OpenShiftBuilder,
)
from jupyter_nbvalidation.backends.kubernetes.builders.tekton import PIPELINERUNS, TASKRUNS
from jupyter_nbvalidation.backends.kubernetes.children import Children
from jupyter_nbvalidation.backends.kubernetes.client import MERGE_PATCH
from jupyter_nbvalidation.cli.render import describe
from jupyter_nbvalidation.core.model import Phase, Reason

pytestmark = pytest.mark.k8s
MANIFESTS = Path(__file__).parents[2] / "k8s_manifests"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
BUILD_OK = [Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_SUCCEEDED, Reason.VALIDATION_STARTED,
            Reason.VALIDATION_SUCCEEDED]


def _install(h, files: list[str]):
    for f in files:
        h.install_crd(MANIFESTS / f)


def _remove(h, names: list[str], group: str):
    for n in names:
        try:
            h.request("DELETE", f"{CRD_PATH}/{n}")
        except Exception:
            pass
    # until discovery stops serving the group
    wait(lambda: group not in {g["name"] for g in h.request("GET", "/apis").get("groups", [])}, 30,
         f"discovery to stop serving {group}", interval=0.1)


@pytest.fixture(scope="module")
def openshift_crds(kube_apiserver):
    _install(kube_apiserver, ["openshift-buildconfigs.yaml", "openshift-builds.yaml"])
    yield
    _remove(kube_apiserver, ["buildconfigs.build.openshift.io", "builds.build.openshift.io"], "build.openshift.io")


@pytest.fixture(scope="module")
def tekton_crds(kube_apiserver, openshift_crds):
    _install(kube_apiserver, ["tekton-pipelineruns.yaml", "tekton-taskruns.yaml"])
    yield
    _remove(kube_apiserver, ["pipelineruns.tekton.dev", "taskruns.tekton.dev"], "tekton.dev")


class StandInOpenShift(OpenShiftBuilder):
    """``instantiate`` as the OpenShift API server does it."""

    async def instantiate(self, ns: str, bc: dict) -> dict:
        version = int((bc.get("status") or {}).get("lastVersion") or 0) + 1
        name = f"{bc['metadata']['name']}-{version}"
        spec = {k: v for k, v in bc["spec"].items() if k not in ("runPolicy", "triggers")}
        build = {"apiVersion": "build.openshift.io/v1", "kind": "Build",
                 "metadata": {"name": name, "namespace": ns,
                              "labels": {**(bc["metadata"].get("labels") or {}), BC_LABEL: bc["metadata"]["name"],
                                         "buildconfig": bc["metadata"]["name"]},
                              "annotations": {BC_LABEL: bc["metadata"]["name"], BUILD_NUMBER: str(version)},
                              "ownerReferences": [{"apiVersion": "build.openshift.io/v1", "kind": "BuildConfig",
                                                   "name": bc["metadata"]["name"], "uid": bc["metadata"]["uid"],
                                                   "controller": True}]},
                 "spec": spec, "status": {"phase": "New", "config": {"kind": "BuildConfig",
                                                                    "name": bc["metadata"]["name"]}}}
        created = await self.kube.request("POST", BUILDS.path(ns), body=build)
        await self.kube.request("PATCH", BUILDCONFIGS.path(ns, bc["metadata"]["name"]),
                                body={"status": {"lastVersion": version}}, content_type=MERGE_PATCH)
        return created


async def _env(h, ns, tmp_path, **traits):
    e = make_env(h, ns, tmp_path / "root", **traits)
    e.backend.builders["openshift"] = StandInOpenShift(e.backend.build_site)
    write_notebook(e.root / "nb.ipynb", ["x = 1", "print(x + 1)"])
    await e.engine.start()
    return e


@pytest_asyncio.fixture
async def env_factory(kube_apiserver, k8s_namespace, tmp_path):
    envs = []

    async def make(**traits):
        e = await _env(kube_apiserver, k8s_namespace, tmp_path / str(len(envs)), **traits)
        envs.append(e)
        return e

    yield make
    for e in envs:
        await e.engine.stop()


# --------------------------------------------------------------------------
# the harness as the Tekton controller


async def tekton_status(admin, ns, resource, name, status: str, reason: str, message: str = "", results=None,
                        **extra):
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    st = {"startTime": now, "conditions": [{"type": "Succeeded", "status": status, "reason": reason,
                                            "message": message, "lastTransitionTime": now}], **extra}
    if status != "Unknown":
        st["completionTime"] = now
    if results is not None:
        st["results"] = [{"name": k, "value": v} for k, v in results.items()]
    return await admin.request("PATCH", resource.path(ns, name, "status"), body={"status": st},
                               content_type=MERGE_PATCH)


async def succeeded_after_one_build_retry(env, admin, aio_admin, name):
    """The kubelet runs the validation; the job ends Succeeded after one BuildRetried, never BuildFailed."""
    await run_validation(admin, aio_admin, env.ns, name)
    done = await env.terminal(name)
    st = done["status"]
    assert (st["phase"], st.get("buildRetries")) == (Phase.SUCCEEDED, 1), st
    got = reasons(await events_of(admin, env.ns, done["metadata"]["uid"]))
    assert got == [Reason.ACCEPTED, Reason.BUILD_STARTED, "BuildRetried", *BUILD_OK[2:]], got
    return done


async def build_status(admin, ns, name, phase: str, **extra):
    return await admin.request("PATCH", BUILDS.path(ns, name), body={"status": {"phase": phase, **extra}},
                               content_type=MERGE_PATCH)


async def wait_phase(env, name, phase, timeout=WAIT):
    seen: dict = {}

    async def reached() -> dict | None:
        seen["job"] = await env.store.get(name)
        return seen["job"] if (seen["job"].get("status") or {}).get("phase") == phase else None

    return await wait_async(reached, timeout, lambda: f"{name} to reach {phase}: {seen['job'].get('status')}",
                            interval=0.02)


# --------------------------------------------------------------------------
# OpenShift


@pytest.mark.asyncio
async def test_openshift_auto_full_sequence(openshift_crds, env_factory, admin, aio_admin):
    env = await env_factory()
    health = await env.backend.health()
    assert health["defaultBuildStrategy"] == "openshift" and "build.openshift.io" in health["buildStrategyReason"]
    assert set(health["buildStrategies"]) == {"job", "openshift"}
    job = await env.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"requirements": ["six"]}})
    name = job["metadata"]["name"]
    bc_name = obj.build_job_name(name)
    bc = await wait_object(admin, BUILDCONFIGS.path(env.ns, bc_name))
    assert bc["spec"]["strategy"]["type"] == "Docker" and "FROM python@sha256:" in bc["spec"]["source"]["dockerfile"]
    assert bc["spec"]["source"]["configMaps"] == [{"configMap": {"name": obj.build_context_name(name)}}]
    dest = bc["spec"]["output"]["to"]["name"]
    assert bc["spec"]["output"]["to"]["kind"] == "DockerImage" and dest.startswith(f"{REGISTRY}/env:")
    build = await wait_object(admin, BUILDS.path(env.ns, f"{bc_name}-1"))
    for phase in ("Pending", "Running"):
        await build_status(admin, env.ns, build["metadata"]["name"], phase)
    await asyncio.sleep(0.2)
    assert (await env.store.get(name))["status"]["phase"] == Phase.BUILDING
    await build_status(admin, env.ns, build["metadata"]["name"], "Complete", outputDockerImageReference=dest,
                       output={"to": {"imageDigest": DIGEST}})
    running = await wait_phase(env, name, Phase.VALIDATION_RUNNING)
    assert running["status"]["buildStatus"]["imageReference"] == f"{dest.rsplit(':', 1)[0]}@{DIGEST}"
    assert running["status"]["buildStatus"]["strategy"] == "openshift"
    await run_validation(admin, aio_admin, env.ns, name)
    done = await env.terminal(name)
    assert done["status"]["phase"] == Phase.SUCCEEDED
    assert reasons(await events_of(admin, env.ns, done["metadata"]["uid"])) == BUILD_OK
    builds = (await admin.request("GET", BUILDS.path(env.ns)))["items"]
    assert [b["metadata"]["name"] for b in builds] == [f"{bc_name}-1"]  # instantiated once
    text = describe(done, {"phases": []}, [])
    assert "Strategy:     openshift (auto: OpenShift builds are available" in text, text


@pytest.mark.asyncio
@pytest.mark.parametrize("phase", ["Failed", "Error"])
async def test_openshift_failure_is_carried_into_status_and_a_warning(openshift_crds, env_factory, admin, phase):
    env = await env_factory(default_build_strategy="openshift")
    name = (await env.submit(notebook={"path": "nb.ipynb"}))["metadata"]["name"]
    bname = f"{obj.build_job_name(name)}-1"
    await wait_object(admin, BUILDS.path(env.ns, bname))
    await build_status(admin, env.ns, bname, phase, reason="DockerBuildFailed",
                       message="Docker build strategy has failed.",
                       logSnippet="ERROR: No matching distribution; fatal: https://ghp_T0KEN@git.example/o/r")
    done = await env.terminal(name)
    st = done["status"]
    assert st["phase"] == Phase.FAILED and st["reason"] == Reason.BUILD_FAILED
    assert "DockerBuildFailed: Docker build strategy has failed." in st["message"]
    assert "No matching distribution" in st["buildStatus"]["message"]
    assert "https://***@git.example/o/r" in st["buildStatus"]["message"]  # a token alone: redaction.scrub
    events = await events_of(admin, env.ns, done["metadata"]["uid"])
    assert reasons(events) == [Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_FAILED]
    assert events[-1]["type"] == "Warning" and "DockerBuildFailed" in events[-1]["note"]
    assert "ghp_T0KEN" not in json.dumps(done) and "ghp_T0KEN" not in json.dumps(events)


@pytest.mark.asyncio
async def test_openshift_push_refused_is_retried_as_build_2_and_the_true_verdict_follows(openshift_crds, env_factory,
                                                                                         admin, aio_admin):
    """A Build that failed in its push (status.reason PushImageToRegistryFailed) is the registry's fault,
    not the requirements': the engine retries, the builder instantiates Build 2, never BuildFailed."""
    env = await env_factory(default_build_strategy="openshift")
    name = (await env.submit(notebook={"path": "nb.ipynb"}))["metadata"]["name"]
    bc_name = obj.build_job_name(name)
    await wait_object(admin, BUILDS.path(env.ns, f"{bc_name}-1"))
    await build_status(admin, env.ns, f"{bc_name}-1", "Failed", reason="PushImageToRegistryFailed",
                       message="Failed to push the image to the registry.",
                       logSnippet='error: dial tcp 10.0.0.2:5000: connect: connection refused')
    await wait_object(admin, BUILDS.path(env.ns, f"{bc_name}-2"), timeout=60)
    bc = await admin.request("GET", BUILDCONFIGS.path(env.ns, bc_name))
    dest = bc["spec"]["output"]["to"]["name"]
    await build_status(admin, env.ns, f"{bc_name}-2", "Complete", outputDockerImageReference=dest,
                       output={"to": {"imageDigest": DIGEST}})
    await wait_phase(env, name, Phase.VALIDATION_RUNNING)
    await succeeded_after_one_build_retry(env, admin, aio_admin, name)
    builds = (await admin.request("GET", BUILDS.path(env.ns)))["items"]
    assert sorted(b["metadata"]["name"] for b in builds) == [f"{bc_name}-1", f"{bc_name}-2"]


def test_an_openshift_build_failed_by_the_registry_or_its_pod_is_a_fault_its_own_failure_is_not():
    store = SimpleNamespace(kube=None, pods=None, build_jobs=None, extra={})
    builder = OpenShiftBuilder(BuildSite(children=Children(store, "ns"), settings=BuildSettings(), inputs=None))

    def observed(reason):
        build = {"metadata": {"name": "nvj-x-build-1"},
                 "status": {"phase": "Failed", "reason": reason, "message": "m https://T0K@r.example/x"}}
        return asyncio.run(builder.observe("ns", build))

    for reason in ("PushImageToRegistryFailed", "BuildPodEvicted", "BuildPodDeleted", "CannotCreateBuildPod"):
        obs = observed(reason)
        assert obs.fault is not None and obs.fault.transient and reason in obs.message, (reason, obs)
        assert "T0K" not in obs.message and "not in its build" in obs.message
    for reason in ("DockerBuildFailed", "GenericBuildFailed", "OutOfMemoryKilled", None):
        assert observed(reason).fault is None, reason


@pytest.mark.asyncio
async def test_openshift_cancel_marks_the_build_cancelled(openshift_crds, env_factory, admin):
    env = await env_factory(default_build_strategy="openshift")
    name = (await env.submit(notebook={"path": "nb.ipynb"}))["metadata"]["name"]
    bname = f"{obj.build_job_name(name)}-1"
    await wait_object(admin, BUILDS.path(env.ns, bname))
    await build_status(admin, env.ns, bname, "Running")
    await wait_phase(env, name, Phase.BUILDING)
    await env.engine.request_cancel(name)
    done = await env.terminal(name)
    assert done["status"]["phase"] == Phase.FAILED and done["status"]["reason"] == Reason.CANCELLED
    build = await admin.request("GET", BUILDS.path(env.ns, bname))
    assert build["status"]["cancelled"] is True


# --------------------------------------------------------------------------
# Tekton


@pytest.mark.asyncio
async def test_tekton_auto_pipelinerun_full_sequence(tekton_crds, env_factory, admin, aio_admin):
    env = await env_factory(tekton_task_resolver="cluster", tekton_task_namespace="openshift-pipelines",
                            registry_secret="push-secret")
    health = await env.backend.health()
    assert health["defaultBuildStrategy"] == "tekton" and "Tekton is installed" in health["buildStrategyReason"]
    job = await env.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"requirements": ["six"]}})
    name = job["metadata"]["name"]
    run_name = obj.build_job_name(name)
    pr = await wait_object(admin, PIPELINERUNS.path(env.ns, run_name))
    task = pr["spec"]["pipelineSpec"]["tasks"][0]
    assert task["taskRef"] == {"resolver": "cluster", "params": [
        {"name": "kind", "value": "task"}, {"name": "name", "value": "buildah"},
        {"name": "namespace", "value": "openshift-pipelines"}]}
    assert "ClusterTask" not in str(pr)
    assert {"name": "source", "configMap": {"name": obj.build_context_name(name)}} in pr["spec"]["workspaces"]
    assert {"name": "dockerconfig", "secret": {"secretName": "push-secret"}} in pr["spec"]["workspaces"]
    image = pr["spec"]["params"][0]["value"]
    assert image.startswith(f"{REGISTRY}/env:")
    ctx = await wait_object(admin, f"/api/v1/namespaces/{env.ns}/configmaps/{obj.build_context_name(name)}")
    assert set(ctx["data"]) == {"Dockerfile", "requirements.txt", "runner-requirements.txt"}
    assert set(ctx["binaryData"]) == {"runner.tar.gz", "context.tar.gz"} and "six" in ctx["data"]["requirements.txt"]
    await tekton_status(admin, env.ns, PIPELINERUNS, run_name, "Unknown", "Running")
    await asyncio.sleep(0.2)
    assert (await env.store.get(name))["status"]["phase"] == Phase.BUILDING
    await tekton_status(admin, env.ns, PIPELINERUNS, run_name, "True", "Succeeded",
                        results={"IMAGE_URL": image, "IMAGE_DIGEST": DIGEST})
    running = await wait_phase(env, name, Phase.VALIDATION_RUNNING)
    bs = running["status"]["buildStatus"]
    assert bs["imageReference"] == f"{REGISTRY}/env@{DIGEST}" and bs["strategy"] == "tekton"
    assert "Tekton is installed" in bs["strategyReason"]
    pod = await wait_object(admin, f"/api/v1/namespaces/{env.ns}/pods/{obj.validation_pod_name(name)}")
    assert pod["spec"]["containers"][0]["image"] == f"{REGISTRY}/env@{DIGEST}"
    await run_validation(admin, aio_admin, env.ns, name)
    done = await env.terminal(name)
    assert done["status"]["phase"] == Phase.SUCCEEDED
    assert reasons(await events_of(admin, env.ns, done["metadata"]["uid"])) == BUILD_OK


@pytest.mark.asyncio
async def test_tekton_failure_reason_and_message(tekton_crds, env_factory, admin):
    env = await env_factory()
    name = (await env.submit(notebook={"path": "nb.ipynb"}))["metadata"]["name"]
    run_name = obj.build_job_name(name)
    await wait_object(admin, PIPELINERUNS.path(env.ns, run_name))
    await tekton_status(admin, env.ns, PIPELINERUNS, run_name, "False", "Failed",
                        'Tasks Completed: 1 (Failed: 1), "build" exited with code 1: pip: no matching distribution')
    done = await env.terminal(name)
    assert done["status"]["phase"] == Phase.FAILED and done["status"]["reason"] == Reason.BUILD_FAILED
    assert "Failed: Tasks Completed: 1 (Failed: 1)" in done["status"]["message"]
    events = await events_of(admin, env.ns, done["metadata"]["uid"])
    assert reasons(events) == [Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_FAILED]
    assert events[-1]["type"] == "Warning" and "no matching distribution" in events[-1]["note"]


@pytest.mark.asyncio
async def test_tekton_cancel_sets_spec_status_cancelled(tekton_crds, env_factory, admin):
    env = await env_factory()
    name = (await env.submit(notebook={"path": "nb.ipynb"}))["metadata"]["name"]
    run_name = obj.build_job_name(name)
    await wait_object(admin, PIPELINERUNS.path(env.ns, run_name))
    await tekton_status(admin, env.ns, PIPELINERUNS, run_name, "Unknown", "Running")
    await env.engine.request_cancel(name)
    done = await env.terminal(name)
    assert done["status"]["phase"] == Phase.FAILED and done["status"]["reason"] == Reason.CANCELLED
    assert (await admin.request("GET", PIPELINERUNS.path(env.ns, run_name)))["spec"]["status"] == "Cancelled"


@pytest.mark.asyncio
async def test_tekton_taskrun_by_task_name(tekton_crds, env_factory, admin, aio_admin):
    env = await env_factory(tekton_run_kind="TaskRun", tekton_task="buildah-ns")
    name = (await env.submit(notebook={"path": "nb.ipynb"}))["metadata"]["name"]
    run_name = obj.build_job_name(name)
    tr = await wait_object(admin, TASKRUNS.path(env.ns, run_name))
    assert tr["spec"]["taskRef"] == {"kind": "Task", "name": "buildah-ns"}
    image = tr["spec"]["params"][0]["value"]
    await tekton_status(admin, env.ns, TASKRUNS, run_name, "True", "Succeeded",
                        results={"IMAGE_URL": image, "IMAGE_DIGEST": DIGEST})
    await run_validation(admin, aio_admin, env.ns, name)
    done = await env.terminal(name)
    assert done["status"]["phase"] == Phase.SUCCEEDED
    assert done["status"]["buildStatus"]["imageReference"] == f"{REGISTRY}/env@{DIGEST}"


PUSH_REFUSED_BY_BUILDAH = (
    "STEP 9/9: RUN set -e; ...\nCOMMIT registry.test/env:abc\n"
    'Error: pushing image "registry.test/env:abc" to "docker://registry.test/env:abc": writing blob: '
    'Patch "https://registry.test/v2/env/blobs/uploads/0f": dial tcp 10.0.0.2:5000: connect: connection refused\n')


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["TaskRun", "PipelineRun"])
async def test_tekton_push_refused_is_retried_as_a_new_run(tekton_crds, env_factory, admin, aio_admin, monkeypatch,
                                                           kind):
    """A run whose failed step's log says the registry refused the push (buildah's words) is the
    registry's fault: retried as run ``-build-r1``, and the true verdict follows; a failed step whose
    log is the requirements' stays BuildFailed (test_tekton_failure_reason_and_message: no log)."""
    env = await env_factory(tekton_run_kind=kind, tekton_task="buildah-ns")
    resource = TASKRUNS if kind == "TaskRun" else PIPELINERUNS
    asked = []

    async def container_log(pod, container, **query):  # the kubelet's log of the failed step (fault injection)
        asked.append((pod["metadata"]["name"], container, query))
        return PUSH_REFUSED_BY_BUILDAH

    monkeypatch.setattr(env.backend.build_site.children, "container_log", container_log)
    name = (await env.submit(notebook={"path": "nb.ipynb"}))["metadata"]["name"]
    first = obj.build_job_name(name)
    run = await wait_object(admin, resource.path(env.ns, first))
    steps = {"podName": f"{first}-pod", "steps": [{"name": "build", "container": "step-build",
                                                   "terminated": {"exitCode": 1, "reason": "Error"}}]}
    if kind == "PipelineRun":  # the failed step is in the run's TaskRun
        tr_name = f"{first}-build"
        await admin.request("POST", TASKRUNS.path(env.ns), body={
            "apiVersion": "tekton.dev/v1", "kind": "TaskRun", "metadata": {"name": tr_name, "namespace": env.ns},
            "spec": {"taskRef": {"kind": "Task", "name": "buildah-ns"}}})
        await tekton_status(admin, env.ns, TASKRUNS, tr_name, "False", "Failed", "step build exited 1", **steps)
        steps = {"childReferences": [{"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "name": tr_name,
                                      "pipelineTaskName": "build"}]}
    await tekton_status(admin, env.ns, resource, first, "False", "Failed", '"step-build" exited with code 1', **steps)
    retry = await wait_object(admin, resource.path(env.ns, obj.build_job_name(name, 1)), timeout=60)
    assert asked and asked[0] == (f"{first}-pod", "step-build", {"tailLines": 40}), asked
    image = run["spec"]["params"][0]["value"]
    await tekton_status(admin, env.ns, resource, retry["metadata"]["name"], "True", "Succeeded",
                        results={"IMAGE_URL": image, "IMAGE_DIGEST": DIGEST})
    await succeeded_after_one_build_retry(env, admin, aio_admin, name)


@pytest.mark.asyncio
async def test_a_strategy_the_cluster_lacks_is_refused(env_factory):
    from jupyter_nbvalidation.service.errors import ApiError

    env = await env_factory()
    env.backend.available_strategies = ["job"]
    with pytest.raises(ApiError) as err:
        await env.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"strategy": "tekton"}})
    assert err.value.status == 400 and "not available" in err.value.message


def test_openshift_digest_falls_back_to_the_imagestreamtag():
    class FakeKube:
        async def request(self, method, path, **kw):
            assert path.endswith("/imagestreamtags/nvj-x-image:abc"), path
            return {"image": {"metadata": {"name": DIGEST}}}

    store = SimpleNamespace(kube=FakeKube(), pods=None, build_jobs=None, extra={})
    builder = OpenShiftBuilder(BuildSite(children=Children(store, "ns"), settings=BuildSettings(), inputs=None))
    build = {"metadata": {"name": "nvj-x-build-1"},
             "spec": {"output": {"to": {"kind": "ImageStreamTag", "name": "nvj-x-image:abc"}}},
             "status": {"phase": "Complete", "outputDockerImageReference":
                        "image-registry.openshift-image-registry.svc:5000/ns/nvj-x-image:abc"}}
    obs = asyncio.run(builder.observe("ns", build))
    assert obs.state == "Succeeded"
    assert obs.reference == f"image-registry.openshift-image-registry.svc:5000/ns/nvj-x-image@{DIGEST}"
