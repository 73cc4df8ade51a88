"""The Kubernetes backend on a REAL API server (tests/k8s_harness.py: etcd +
kube-apiserver, no kubelet, no controllers).

The tests play the missing components by writing exactly what those write:
the Job controller (a builder Pod owned by the build Job, then the Job's
status in the 1.35 order, via ``complete_job``) and the kubelet (pod status
with the container's termination message, via ``complete_pod``). Pod logs
need a kubelet, so the backend's "full result from the log" path degrades to
the termination-message summary here, as it must.

Run: ``.venv/bin/python -m pytest -p tests.k8s_harness tests/test_k8s_backend.py -q``
"""

from __future__ import annotations

import asyncio
import base64
import copy
import io
import json
import re
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import pytest
import pytest_asyncio
import yaml
from helpers import plan_for, wait_async, write_notebook
from k8s_support import (
    DIGEST,
    LOG,
    NOBUILD,
    REGISTRY,
    RUNNER_IMAGE,
    WAIT,
    Registry,
    events_of,
    get_or_none,
    make_env,
    phases,
    reasons,
    run_builder,
    run_validation,
    summary,
    wait_for,
    wait_object,
)

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.backends.kubernetes.backend import IMAGE_ANNOTATION
from jupyter_nbvalidation.backends.kubernetes.client import CONFIGMAPS, EVENTS, JOBS, PODS, Kube, KubeApiError, connect
from jupyter_nbvalidation.backends.kubernetes.store import NVJ
from jupyter_nbvalidation.core.model import NOTICE_REASONS, Phase, Reason
from jupyter_nbvalidation.secrets.registry import SecretRegistry
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.spec.plan import Snapshot, make_plan

try:  # the harness is loaded as a plugin; import it by whichever name is on sys.path
    import k8s_harness as harness
except ImportError:  # pragma: no cover
    from tests import k8s_harness as harness

pytestmark = pytest.mark.k8s


# --------------------------------------------------------------------------
# an engine + KubernetesBackend + service against the harness


@pytest_asyncio.fixture
async def env(kube_apiserver, k8s_namespace, tmp_path):
    e = make_env(kube_apiserver, k8s_namespace, tmp_path / "root")
    write_notebook(e.root / "nb.ipynb", ["x = 1", "print(x + 1)"])
    await e.engine.start()
    yield e
    await e.engine.stop()


class Recorder:
    """Every change of the jobs and pods of a namespace, as the API server
    orders them (resourceVersion: one etcd revision counter for all kinds)."""

    def __init__(self, admin: Kube, ns: str):
        self.admin, self.ns = admin, ns
        self.changes: list[tuple[int, str, str, dict]] = []  # (rv, kind, event type, object)
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> "Recorder":
        for kind, path in (("nvj", NVJ.path(self.ns)), ("pod", PODS.path(self.ns))):
            rv = (await self.admin.request("GET", path))["metadata"]["resourceVersion"]
            self._tasks.append(asyncio.create_task(self._watch(kind, path, rv)))
        return self

    async def _watch(self, kind: str, path: str, rv: str) -> None:
        async for ev in self.admin.watch(path, {"resourceVersion": rv}, 600):
            if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                o = ev["object"]
                self.changes.append((int(o["metadata"]["resourceVersion"]), kind, ev["type"], o))

    async def stop(self) -> list[tuple[int, str, str, dict]]:
        await asyncio.sleep(0.2)  # let the last events arrive
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        return sorted(self.changes, key=lambda c: c[0])


@pytest.fixture(scope="session")
def runner_outputs(tmp_path_factory):
    """The real runner on a passing and a failing notebook: (exit code,
    termination message, stdout) of each, as a validation pod would produce."""
    d = tmp_path_factory.mktemp("runner")
    out = {}
    for key, cells in (("ok", ["x = 1", "print(x + 1)"]), ("bad", ["x = 1", "x / 0", "print(3)"])):
        nb = write_notebook(d / f"{key}.ipynb", cells)
        term = d / f"{key}.termination"
        p = subprocess.run([sys.executable, "-m", "jupyter_nbvalidation.runner", str(nb),
                            "--result", str(d / f"{key}.json"), "--executed", str(d / f"{key}.out.ipynb"),
                            "--termination-log", str(term)], capture_output=True, text=True, timeout=120)
        out[key] = (p.returncode, term.read_text(), p.stdout)
    return out


# --------------------------------------------------------------------------
# 1. the full phase sequence with a build


@pytest.mark.asyncio
async def test_build_then_validate_full_sequence(env, admin, aio_admin, runner_outputs):
    rec = await Recorder(admin, env.ns).start()
    write_notebook(env.root / "nb.ipynb", ["x = 1", "print(x + 1)"])
    (env.root / "requirements.txt").write_text("numpy>=2\n# a comment\n")
    job = await env.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"baseImage": "python:3.12"}})
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    ns = env.ns

    # the snapshot: one immutable ConfigMap owned by the job
    cm = await admin.request("GET", CONFIGMAPS.path(ns, obj.input_configmap_name(name)))
    assert set(cm["data"]) == {"notebook.ipynb", "requirements.txt", obj.INPUTS_INDEX}
    # no inputFiles: the notebook's folder travels (the notebook from its own key)
    assert sorted(obj.inputs_index(cm["data"])) == [("input-0000", "requirements.txt"), ("notebook.ipynb", "nb.ipynb")]
    assert cm["metadata"]["ownerReferences"][0]["uid"] == uid and cm["immutable"] is True

    # the build: a context ConfigMap and a batch Job, owned and labelled
    bj = await wait_object(admin, JOBS.path(ns, obj.build_job_name(name)))
    ctx = await admin.request("GET", CONFIGMAPS.path(ns, obj.build_context_name(name)))
    # python:3.12's registry is unreachable here: FROM the tag as given (and never reused)
    assert ctx["data"]["Dockerfile"].splitlines()[1] == "FROM python:3.12"
    assert "pip install --no-cache-dir" in ctx["data"]["Dockerfile"]
    reqs = ctx["data"]["requirements.txt"].splitlines()
    # the kernel's venv: ipykernel and the notebook's requirements, nothing of this project
    assert [r for r in reqs if not r.startswith("#")] == ["ipykernel", "numpy>=2"]
    runner_reqs = ctx["data"]["runner-requirements.txt"].splitlines()
    assert sorted(r.split("==")[0] for r in runner_reqs if not r.startswith("#")) == ["nbclient", "nbformat"]
    spec = bj["spec"]
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 15 * 60
    assert "ttlSecondsAfterFinished" not in spec
    (ctr,) = spec["template"]["spec"]["containers"]
    args = ctr["args"]
    dest = next(a.split("=", 1)[1] for a in args if a.startswith("--destination="))
    assert dest.startswith(f"{REGISTRY}/env:u") and len(dest.rsplit(":", 1)[1]) == 32
    assert {"--dockerfile=Dockerfile", "--context=tar:///workspace/context.tar.gz", "--log-format=text",
            "--digest-file=/dev/termination-log", "--cleanup"} <= set(args)
    assert ctr["terminationMessagePolicy"] == "FallbackToLogsOnError" and ctr["image"] == env.backend.builder_image
    for o in (bj, ctx):
        assert o["metadata"]["labels"]["nbvalidation.dev/job"] == name
        assert [(r["kind"], r["uid"], r.get("controller")) for r in o["metadata"]["ownerReferences"]] == [
            ("NotebookValidationJob", uid, True)]
    assert bj["spec"]["template"]["metadata"]["labels"]["nbvalidation.dev/job"] == name

    cur = await env.store.get(name)
    assert cur["status"]["phase"] == Phase.BUILDING
    assert cur["status"]["buildStatus"]["strategy"] == "job"
    assert (await admin.request("GET", PODS.path(ns), query={"labelSelector": "nbvalidation.dev/component=validation"}))["items"] == []

    await run_builder(admin, aio_admin, ns, name)
    pod = await wait_object(admin, PODS.path(ns, obj.validation_pod_name(name)))
    code, term, _ = runner_outputs["ok"]
    assert code == 0
    await harness.complete_pod(aio_admin, ns, pod["metadata"]["name"], message=term, container=obj.RUNNER_CONTAINER)
    done = await env.terminal(name)
    changes = await rec.stop()

    st = done["status"]
    assert st["phase"] == Phase.SUCCEEDED, st
    assert phases(done) == [Phase.INITIALIZING, Phase.BUILDING, Phase.BUILD_COMPLETE, Phase.VALIDATION_RUNNING,
                            Phase.SUCCEEDED]
    reference = st["buildStatus"]["imageReference"]
    assert reference == f"{REGISTRY}/env@{DIGEST}"  # digest-pinned
    assert st["buildStatus"]["phase"] == "Complete" and st["validationStatus"]["environment"] == reference
    assert st["results"] == []  # no kubelet, no log: the summary has no per-cell list of a success

    # the pod runs exactly the recorded image, safely
    (runner,) = pod["spec"]["containers"]
    assert runner["image"] == reference
    assert runner["command"][:4] == ["/opt/nbv-runner/bin/python", "-m", "jupyter_nbvalidation.runner",
                                     "/input/notebook.ipynb"]
    assert {"--termination-log", "/dev/termination-log", "--result", "--executed"} <= set(runner["command"])
    assert runner["terminationMessagePolicy"] == "File"
    assert runner["securityContext"] == {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                                         "capabilities": {"drop": ["ALL"]}}
    assert {"name": "input", "mountPath": "/input", "readOnly": True} in runner["volumeMounts"]
    assert pod["spec"]["restartPolicy"] == "Never" and pod["spec"]["activeDeadlineSeconds"] == 30 * 60 + 30
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["metadata"]["ownerReferences"][0]["uid"] == uid

    # no validation pod before the status durably said BuildComplete (etcd order)
    complete_rv = min(rv for rv, kind, _, o in changes
                      if kind == "nvj" and (o.get("status") or {}).get("phase") == Phase.BUILD_COMPLETE)
    pod_rvs = [rv for rv, kind, t, o in changes if kind == "pod"
               and o["metadata"]["labels"].get("nbvalidation.dev/component") == "validation"]
    assert pod_rvs and min(pod_rvs) > complete_rv
    at_complete = next(o for rv, kind, _, o in changes if rv == complete_rv)
    assert at_complete["status"]["buildStatus"]["imageReference"] == runner["image"]

    # exactly one events.k8s.io/v1 Event per transition, about the job
    events = await events_of(admin, ns, uid)
    assert [r for r in reasons(events) if r not in NOTICE_REASONS] == [
        Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_SUCCEEDED, Reason.VALIDATION_STARTED,
        Reason.VALIDATION_SUCCEEDED]
    # and, besides them, one Warning: python:3.12's registry is unreachable from here, so the base
    # image has no digest, and image reuse and the verdict key are off for this job
    (notice,) = [e for e in events if e["reason"] in NOTICE_REASONS]
    assert notice["reason"] == "ImageReuseOff" and notice["action"] == "Notice", notice
    assert notice["note"].startswith("Image reuse and the verdict key are off for this job: the base image "
                                     "python:3.12 has no digest"), notice["note"]
    for e in events:
        assert e["type"] == ("Warning" if e is notice else "Normal") and e["eventTime"]  # from events.k8s.io/v1
        assert e["regarding"] == {"apiVersion": "nbvalidation.dev/v1alpha1", "kind": "NotebookValidationJob",
                                  "name": name, "namespace": ns, "uid": uid}
        assert e["reportingController"] == "nbvalidation.dev/notebook-validation-controller"
        assert e["reportingInstance"] and e["action"] and e["note"]
    listed = await env.store.list_events(done)
    assert reasons(listed) == reasons(events)
    assert {(e["apiVersion"], e["kind"]) for e in listed} == {("events.k8s.io/v1", "Event")}
    (built,) = [e for e in events if e["reason"] == Reason.BUILD_SUCCEEDED]
    assert built["note"].startswith(f"Environment ready: {reference}")


# --------------------------------------------------------------------------
# 2. failure paths, build disabled, idempotent children


@pytest.mark.asyncio
async def test_build_failed_never_creates_a_pod(env, admin, aio_admin):
    rec = await Recorder(admin, env.ns).start()
    job = await env.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"requirements": ["nosuchpkg"]}})
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    await run_builder(admin, aio_admin, env.ns, name, ok=False)
    done = await env.terminal(name)
    changes = await rec.stop()
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.BUILD_FAILED)
    assert st["buildStatus"]["phase"] == "Failed" and "imageReference" not in st["buildStatus"]
    assert "BackoffLimitExceeded" in st["message"] and "No matching distribution found for nosuchpkg" in st["message"]
    # the installer's own error first, the Job's condition after it (issue 21)
    assert st["message"].startswith("The environment build failed: error: pip install failed: No matching "
                                    "distribution found for nosuchpkg "
                                    "(the image build failed: BackoffLimitExceeded"), st["message"]
    assert phases(done) == [Phase.INITIALIZING, Phase.BUILDING, Phase.FAILED]
    assert st["conditions"] and {c["type"]: c["status"] for c in st["conditions"]}["BuildReady"] == "False"
    # no validation pod, ever (only the builder pod the "Job controller" made)
    assert [o["metadata"]["name"] for _, kind, t, o in changes if kind == "pod" and t == "ADDED"] == [
        o["metadata"]["name"] for _, kind, t, o in changes if kind == "pod" and t == "ADDED"
        and o["metadata"]["name"].startswith(obj.build_job_name(name))]
    events = await events_of(admin, env.ns, uid)
    assert reasons(events) == [Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_FAILED]
    assert events[-1]["type"] == "Warning"


@pytest.mark.asyncio
async def test_validation_exit_1_records_the_failing_cell(env, admin, aio_admin, runner_outputs):
    job = await env.submit(notebook={"path": "nb.ipynb"}, **NOBUILD)
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    code, term, _ = runner_outputs["bad"]
    assert code == 1
    await run_validation(admin, aio_admin, env.ns, name, exit_code=code, message=term)
    done = await env.terminal(name)
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.VALIDATION_FAILED)
    assert st["message"] == "Cell 2 raised ZeroDivisionError: division by zero"
    assert st["failedCellIndex"] == 1
    assert st["results"] == [{"cellIndex": 1, "status": "Failure", "errorName": "ZeroDivisionError",
                              "errorMessage": "division by zero"}]
    assert st["validationStatus"]["reason"] == "CellExecutionFailed"
    assert reasons(await events_of(admin, env.ns, uid)) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED,
                                                          Reason.VALIDATION_FAILED]
    # deterministic: the pod is not replaced or re-run
    pods = await admin.request("GET", PODS.path(env.ns), query={"labelSelector": f"nbvalidation.dev/job={name}"})
    assert len(pods["items"]) == 1


@pytest.mark.asyncio
async def test_infrastructure_failures_name_their_reason(env, admin, aio_admin):
    job = await env.submit(notebook={"path": "nb.ipynb"}, **NOBUILD)
    name = job["metadata"]["name"]
    await run_validation(admin, aio_admin, env.ns, name, exit_code=137, message="")
    done = await env.terminal(name)
    assert done["status"]["reason"] == Reason.VALIDATION_FAILED
    assert done["status"]["message"] == "The validation container exited with code 137 (Error)."
    assert done["status"]["validationStatus"]["reason"] == "Error"

    # exit 0 without a readable result is never a success
    job = await env.submit(notebook={"path": "nb.ipynb"}, **NOBUILD)
    await run_validation(admin, aio_admin, env.ns, job["metadata"]["name"], exit_code=0, message="not json")
    done = await env.terminal(job["metadata"]["name"])
    assert done["status"]["phase"] == Phase.FAILED
    assert "could not be read" in done["status"]["message"]


@pytest.mark.asyncio
async def test_build_disabled_uses_container_image(env, admin, aio_admin):
    job = await env.submit(notebook={"path": "nb.ipynb"}, **NOBUILD)
    name = job["metadata"]["name"]
    pod = await wait_object(admin, PODS.path(env.ns, obj.validation_pod_name(name)))
    assert pod["spec"]["containers"][0]["image"] == RUNNER_IMAGE
    assert await get_or_none(admin, JOBS.path(env.ns, obj.build_job_name(name))) is None
    await run_validation(admin, aio_admin, env.ns, name)
    done = await env.terminal(name)
    assert phases(done) == [Phase.INITIALIZING, Phase.VALIDATION_RUNNING, Phase.SUCCEEDED]
    assert "buildStatus" not in done["status"]
    assert done["status"]["validationStatus"]["environment"] == RUNNER_IMAGE
    # status.environment (issue 21): written by the shared engine, kept through the CRD's status schema
    assert done["status"]["environment"] == f"build disabled: the image {RUNNER_IMAGE}"


@pytest.mark.asyncio
async def test_repeated_child_creation_is_a_no_op(env, admin, aio_admin):
    job = await env.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"requirements": ["six"]}})
    name = job["metadata"]["name"]
    first = await wait_object(admin, JOBS.path(env.ns, obj.build_job_name(name)))
    job = await env.store.get(name)
    for _ in range(3):  # as a second engine (or a restart) would
        env.backend.store.build_jobs.forget(obj.build_job_name(name))  # even with a cold cache: 409 -> adopt
        obs = await env.backend.ensure_build(job, await plan_for(env.backend, job))
        assert obs.state == "Running"
    again = await admin.request("GET", JOBS.path(env.ns, obj.build_job_name(name)))
    assert again["metadata"]["uid"] == first["metadata"]["uid"]
    jobs = await admin.request("GET", JOBS.path(env.ns), query={"labelSelector": f"nbvalidation.dev/job={name}"})
    assert len(jobs["items"]) == 1

    await run_builder(admin, aio_admin, env.ns, name)
    pod = await wait_object(admin, PODS.path(env.ns, obj.validation_pod_name(name)))
    job = await env.store.get(name)
    ref = job["status"]["buildStatus"]["imageReference"]
    for _ in range(3):
        env.backend.store.pods.forget(pod["metadata"]["name"])
        assert (await env.backend.ensure_validation(job, ref, await plan_for(env.backend, job))).state == "Running"
    pods = await admin.request("GET", PODS.path(env.ns), query={"labelSelector": "nbvalidation.dev/component=validation"})
    assert [p["metadata"]["uid"] for p in pods["items"]] == [pod["metadata"]["uid"]]

    # a same-named object that is not ours is never adopted
    other = copy.deepcopy(job)
    other["metadata"]["uid"] = str(uuid.uuid4())
    env.backend.store.build_jobs.forget(obj.build_job_name(name))
    obs = await env.backend.ensure_build(other, await plan_for(env.backend, other))
    assert obs.state == "Failed" and "does not belong to this job" in obs.message


# --------------------------------------------------------------------------
# 3. two engines racing on the same jobs


@pytest.mark.asyncio
async def test_two_engines_race_without_duplicates(kube_apiserver, k8s_namespace, tmp_path, admin, aio_admin):
    ns = k8s_namespace
    a = make_env(kube_apiserver, ns, tmp_path / "root", instance="engine-a")
    b = make_env(kube_apiserver, ns, tmp_path / "root", instance="engine-b")
    write_notebook(a.root / "nb.ipynb", ["print(1)"])
    await a.engine.start()
    await b.engine.start()
    try:
        names = []
        for i in range(6):
            build = {} if i % 2 else {"podConfig": {"buildConfig": {"requirements": [f"pkg{i}"]}}}
            spec = NOBUILD if i % 2 else build
            job = await (a if i % 3 else b).submit(notebook={"path": "nb.ipynb"}, **spec)
            names.append((job["metadata"]["name"], not i % 2))
        for name, builds in names:
            if builds:
                await run_builder(admin, aio_admin, ns, name)
            await run_validation(admin, aio_admin, ns, name)
        done = [await a.terminal(name) for name, _ in names]
        await b.engine.wait_idle(WAIT)
        await b.engine.recorder.flush()
    finally:
        await a.engine.stop()
        await b.engine.stop()

    instances = set()
    for job, (name, builds) in zip(done, names, strict=True):
        assert job["status"]["phase"] == Phase.SUCCEEDED, job["status"]
        expected = ([Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_SUCCEEDED, Reason.VALIDATION_STARTED,
                     Reason.VALIDATION_SUCCEEDED] if builds else
                    [Reason.ACCEPTED, Reason.VALIDATION_STARTED, Reason.VALIDATION_SUCCEEDED])
        events = await events_of(admin, ns, job["metadata"]["uid"])
        assert reasons(events) == expected, (name, reasons(events))
        assert len(job["status"]["transitions"]) == len(expected)
        instances |= {e["reportingInstance"] for e in events}
        sel = {"labelSelector": f"nbvalidation.dev/job={name}"}
        pods = (await admin.request("GET", PODS.path(ns), query=sel))["items"]
        validation_pods = [p for p in pods if p["metadata"]["labels"]["nbvalidation.dev/component"] == "validation"]
        assert len(validation_pods) == 1
        assert len((await admin.request("GET", JOBS.path(ns), query=sel))["items"]) == (1 if builds else 0)
    assert instances <= {"engine-a", "engine-b"}
    print(f"events reported by: {sorted(instances)}")


# --------------------------------------------------------------------------
# 4. RBAC: a Role without notebookvalidationjobs/status


def _role_without_status(ns: str) -> dict:
    role = yaml.safe_load(harness.ROLE_FILE.read_text())
    role["metadata"] = {"name": "nbv-no-status", "namespace": ns}
    role["rules"] = [r for r in role["rules"] if "notebookvalidationjobs/status" not in r["resources"]]
    assert len(role["rules"]) == len(yaml.safe_load(harness.ROLE_FILE.read_text())["rules"]) - 1
    return role


@pytest.mark.asyncio
async def test_status_write_denied_posts_the_fallback_event(kube_apiserver, k8s_namespace, tmp_path, admin):
    h, ns = kube_apiserver, k8s_namespace
    h.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", _role_without_status(ns))
    h.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "nbv-no-status-alice", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "nbv-no-status"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": harness.LIMITED_USER}]})
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": harness.LIMITED_USER, "groups": [harness.LIMITED_GROUP],
                       "resourceAttributes": {"namespace": ns, "verb": "create", "group": "nbvalidation.dev",
                                              "resource": "notebookvalidationjobs"}}}
    await wait_for(lambda: asyncio.to_thread(
        lambda: h.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"].get("allowed")),
        what="RBAC to apply")

    e = make_env(h, ns, tmp_path / "root", kubeconfig=h.limited_kubeconfig)
    write_notebook(e.root / "nb.ipynb", ["print(1)"])
    await e.engine.start()
    try:
        job = await e.submit(notebook={"path": "nb.ipynb"}, **NOBUILD)  # create is allowed
        uid = job["metadata"]["uid"]
        fallback = await wait_for(lambda: _fallbacks(admin, ns, uid), what="the fallback event")
    finally:
        await e.engine.stop()
    ev = fallback[0]
    assert ev["reason"] == f"{Reason.ACCEPTED}StatusUpdateFailed" and ev["type"] == "Warning"
    assert ev["regarding"]["uid"] == uid and "forbidden" in ev["note"].lower()
    assert e.store is not None
    all_events = await events_of(admin, ns, uid)
    assert Reason.ACCEPTED not in reasons(all_events)  # no transition event for a write that failed
    cr = await admin.request("GET", NVJ.path(ns, job["metadata"]["name"]))
    assert not (cr.get("status") or {}).get("phase")

    # the limited identity gets 403 outside its namespace
    other = h.create_namespace()
    alice = await connect(h.limited_kubeconfig)
    try:
        for path in (NVJ.path(other), PODS.path(other), "/apis/nbvalidation.dev/v1alpha1/notebookvalidationjobs"):
            with pytest.raises(KubeApiError) as err:
                await alice.request("GET", path)
            assert (err.value.status, err.value.reason) == (403, "Forbidden")
    finally:
        await alice.close()


@pytest.mark.asyncio
async def test_the_shipped_role_is_enough(kube_apiserver, k8s_namespace, tmp_path, admin, aio_admin):
    """role.yaml, bound to a plain user, runs a job with a build end to end."""
    h, ns = kube_apiserver, k8s_namespace
    await asyncio.to_thread(harness.limited_in_namespace, h, ns)
    e = make_env(h, ns, tmp_path / "root", kubeconfig=h.limited_kubeconfig)
    write_notebook(e.root / "nb.ipynb", ["print(1)"])
    await e.engine.start()
    try:
        health = await e.backend.health()
        assert health["crdEstablished"] is True, health  # via discovery
        # the stand-in registry.test does not resolve: the one thing /health finds off
        assert health["registryReachable"] is False and health["usable"] is False, health
        assert health["problem"].startswith(f"the registry {REGISTRY} is unreachable"), health
        job = await e.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"requirements": ["six"]}})
        name = job["metadata"]["name"]
        await run_builder(admin, aio_admin, ns, name)
        await run_validation(admin, aio_admin, ns, name)
        done = await e.terminal(name)
        assert len(await e.store.list_events(done)) == 5
    finally:
        await e.engine.stop()
    assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
    assert e.engine.errors == 0 and e.engine.recorder.failed == 0


async def _fallbacks(admin: Kube, ns: str, uid: str) -> list[dict]:
    return [e for e in await events_of(admin, ns, uid) if e["reason"].endswith("StatusUpdateFailed")]


# --------------------------------------------------------------------------
# 5. too large for a ConfigMap


@pytest.mark.asyncio
async def test_notebook_too_large_for_a_configmap_is_refused(env, admin):
    write_notebook(env.root / "big.ipynb", ["s = '" + "x" * (1100 * 1024) + "'"])
    with pytest.raises(ApiError) as err:
        await env.submit(notebook={"path": "big.ipynb"}, **NOBUILD)
    e = err.value
    assert (e.status, e.code, e.field) == (413, "TooLarge", "spec.notebook.path")
    limit = env.backend.max_notebook_bytes_configmap
    assert f"limited here to {limit} bytes" in e.message and "max_notebook_bytes_configmap" in e.message
    assert (await admin.request("GET", NVJ.path(env.ns)))["items"] == []
    assert [c["metadata"]["name"] for c in (await admin.request("GET", CONFIGMAPS.path(env.ns)))["items"]
            if c["metadata"]["name"].startswith("nvj-")] == []


@pytest.mark.asyncio
async def test_spec_checks_refuse_before_anything_is_created(env, admin, kube_apiserver, tmp_path):
    for spec, field, text in [
        ({"podConfig": {"buildConfig": {"strategy": "tekton"}}}, "spec.podConfig.buildConfig.strategy",
         "not available on this cluster"),
        ({"podConfig": {"buildConfig": {"enabled": False}}}, "spec.podConfig.containerImage", "runner_image"),
        # a secret the server reads itself (fromEnv) never reaches a Pod: only a Secret of the namespace does
        ({"podConfig": {"credentials": ["warehouse"]}}, "spec.podConfig.credentials[0]",
         "must be a Secret of the namespace"),
        ({"podConfig": {"serviceAccountName": "default"}}, "spec.podConfig.serviceAccountName",
         "allowed_service_accounts is empty"),
    ]:
        env.backend.secrets = SecretRegistry({"warehouse": {"fromEnv": {"DB_PASSWORD": "HOME"}}})
        with pytest.raises(ApiError) as err:
            await env.submit(notebook={"path": "nb.ipynb"}, **spec)
        assert (err.value.status, err.value.field) == (400, field) and text in err.value.message
    no_registry = make_env(kube_apiserver, env.ns, tmp_path / "root2", registry="")
    write_notebook(no_registry.root / "nb.ipynb", ["1"])
    with pytest.raises(ApiError) as err:
        await no_registry.submit(notebook={"path": "nb.ipynb"})
    assert err.value.field == "spec.podConfig.buildConfig.enabled" and "registry" in err.value.message
    assert (await admin.request("GET", NVJ.path(env.ns)))["items"] == []


@pytest.mark.asyncio
async def test_credentials_on_a_job_made_past_the_service_fail_it_naming_the_field(env, admin):
    """kubectl's way in: no submit checked the job, so the reconciler does, for its owner label. A
    secret its owner may not use, one that is not a Secret of the namespace, a service account the
    admin did not allow: the job fails InvalidInput naming the field, before any Pod."""
    env.backend.secrets = SecretRegistry({"warehouse": {"fromSecret": "wh", "users": ["alice"]},
                                          "server-side": {"fromEnv": {"X": "HOME"}}})
    cases = [("not-bobs", {"nbvalidation.dev/owner": "bob"}, {"credentials": ["warehouse"]},
              "spec.podConfig.credentials[0]: secret 'warehouse': no such secret is available to you"),
             ("server-side", {}, {"credentials": ["server-side"]},
              "spec.podConfig.credentials[0]: secret 'server-side': on the kubernetes backend"),
             ("borrowed-sa", {}, {"serviceAccountName": "admin-sa"},
              "spec.podConfig.serviceAccountName: 'admin-sa' is not a service account")]
    for name, labels, pc, _ in cases:
        await admin.request("POST", NVJ.path(env.ns), body={
            "apiVersion": "nbvalidation.dev/v1alpha1", "kind": "NotebookValidationJob",
            "metadata": {"name": name, "labels": labels},
            "spec": {"notebook": {"path": "nb.ipynb"}, "podConfig": pc}})
    for name, _, _, text in cases:
        st = (await env.terminal(name))["status"]
        assert (st["phase"], st["reason"]) == (Phase.FAILED, "InvalidInput"), st
        assert text in st["message"], st
    assert (await admin.request("GET", PODS.path(env.ns)))["items"] == []


# --------------------------------------------------------------------------
# 6. kubectl describe shows the transition events in order


@pytest.mark.asyncio
async def test_kubectl_describe_lists_the_events_in_order(env, admin, aio_admin, kube_apiserver):
    job = await env.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"requirements": ["six"]}})
    name = job["metadata"]["name"]
    await run_builder(admin, aio_admin, env.ns, name)
    await run_validation(admin, aio_admin, env.ns, name)
    done = await env.terminal(name)
    assert done["status"]["phase"] == Phase.SUCCEEDED
    # kubectl built beside the API server; its discovery cache stays out of ~/.kube
    kubectl = [harness.kubectl_binary(), "--cache-dir", str(kube_apiserver.work_dir / "kubectl-cache"),
               "--kubeconfig", kube_apiserver.admin_kubeconfig]
    p = await asyncio.to_thread(subprocess.run, [*kubectl, "-n", env.ns, "describe", "nvj", name],
                                capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "Events:" in out, out
    listed = [line.split()[1] for line in out.split("Events:", 1)[1].splitlines()
              if line.strip().startswith(("Normal", "Warning"))]
    assert listed == [Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_SUCCEEDED, Reason.VALIDATION_STARTED,
                      Reason.VALIDATION_SUCCEEDED], out
    # `kubectl get nvj` shows the printer columns
    p = await asyncio.to_thread(subprocess.run, [*kubectl, "-n", env.ns, "get", "nvj", name],
                                capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "Succeeded" in p.stdout and "nb.ipynb" in p.stdout, p.stdout + p.stderr


@pytest.mark.asyncio
async def test_comparison_config_reaches_the_runner_in_the_pod(env, admin):
    """The upstream CRD's comparisonConfig fields pass the API server's schema and
    become the runner's arguments (the local backend runs the same arguments for real)."""
    cc = {"strategy": "normalized", "ignoreTimestamps": False, "customTimestampPatterns": ["-run \\d+"],
          "ignoreOutputTypes": ["stream:stderr", "image/*"], "ignoreExecutionCount": False}
    job = await env.submit(notebook={"path": "nb.ipynb"}, goldenNotebook={"path": "nb.ipynb"},
                           comparisonConfig=cc, **NOBUILD)
    stored = await admin.request("GET", f"/apis/nbvalidation.dev/v1alpha1/namespaces/{env.ns}/notebookvalidationjobs/"
                                        f"{job['metadata']['name']}")
    assert stored["spec"]["comparisonConfig"] == cc  # nothing pruned
    pod = await wait_object(admin, PODS.path(env.ns, obj.validation_pod_name(job["metadata"]["name"])))
    cmd = pod["spec"]["containers"][0]["command"]
    assert cmd[cmd.index("--golden") + 1] == "/input/golden.ipynb"
    for arg in ("--keep-timestamps", "--timestamp-pattern=-run \\d+", "--ignore-output-type=stream:stderr",
                "--ignore-output-type=image/*", "--compare-execution-count"):
        assert arg in cmd, cmd


@pytest.mark.asyncio
async def test_pod_config_env_resources_and_scheduling_reach_the_validation_pod(kube_apiserver, k8s_namespace, tmp_path, admin):
    e = make_env(kube_apiserver, k8s_namespace, tmp_path / "root",
                 validation_resources={"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}})
    write_notebook(e.root / "nb.ipynb", ["print(1)"])
    await e.engine.start()
    try:
        with pytest.raises(ApiError) as err:  # checked at submit, not when the Pod is refused later
            await e.submit(notebook={"path": "nb.ipynb"}, podConfig={
                **NOBUILD["podConfig"], "resources": {"requests": {"memory": "3Gi"}, "limits": {"memory": "2Gi"}}})
        assert err.value.status == 400 and err.value.field == "spec.podConfig.resources.requests.memory"
        with pytest.raises(ApiError) as err:
            await e.submit(notebook={"path": "nb.ipynb"}, podConfig={
                **NOBUILD["podConfig"], "tolerations": [{"key": "gpu", "operator": "Exists", "value": "yes"}]})
        assert err.value.status == 400 and err.value.field == "spec.podConfig.tolerations[0].value"
        gpu = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        job = await e.submit(notebook={"path": "nb.ipynb"}, podConfig={
            **NOBUILD["podConfig"], "env": [{"name": "MPLBACKEND", "value": "Agg"}],
            "resources": {"limits": {"memory": "4Gi", "cpu": 2}},
            "nodeSelector": {"nvidia.com/gpu.present": "true"}, "tolerations": gpu})
        pod = await wait_object(admin, PODS.path(k8s_namespace, obj.validation_pod_name(job["metadata"]["name"])))
    finally:
        await e.engine.stop()
    (ctr,) = pod["spec"]["containers"]
    # the job's variables are the kernel's, handed to the runner in its command, not its own environment
    assert "--kernel-env=MPLBACKEND=Agg" in ctr["command"] and "MPLBACKEND" not in {v["name"] for v in ctr["env"]}
    assert {"name": "HOME", "value": "/tmp"} in ctr["env"]  # the runner's own stay
    # the job's limits over the server's defaults (the API server writes quantities back as strings)
    assert ctr["resources"] == {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "4Gi", "cpu": "2"}}
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    # (the API server's DefaultTolerationSeconds admission adds its not-ready/unreachable ones after ours)
    assert pod["spec"]["tolerations"][:1] == gpu


# --------------------------------------------------------------------------
# a server that died between a status write and its event


@pytest.mark.asyncio
async def test_a_lost_transition_event_is_posted_once_by_the_next_server(kube_apiserver, k8s_namespace, tmp_path,
                                                                      admin, aio_admin):
    from jupyter_nbvalidation.core.events import transition_event_name

    first = make_env(kube_apiserver, k8s_namespace, tmp_path / "root")
    write_notebook(first.root / "nb.ipynb", ["x = 1", "print(x + 1)"])
    await first.engine.start()
    try:
        job = await first.submit(notebook={"path": "nb.ipynb"}, **NOBUILD)
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        await wait_object(admin, PODS.path(k8s_namespace, obj.validation_pod_name(name)))
        await first.engine.wait_idle(WAIT)
        await first.engine.recorder.flush()
    finally:
        await first.engine.stop()
    evs = await events_of(admin, k8s_namespace, uid)
    assert reasons(evs) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED]
    # the ValidationStarted event never arrived: the process died after the status write
    lost = evs[1]
    assert lost["metadata"]["name"] == transition_event_name(job, 1)
    await admin.request("DELETE", EVENTS.path(k8s_namespace, lost["metadata"]["name"]))

    second = make_env(kube_apiserver, k8s_namespace, tmp_path / "root")
    await second.engine.start()
    try:
        await wait_for(lambda: asyncio.sleep(0, second.engine.leading.is_set()), what="leading")
        assert second.engine.events_recovered == 1
        await run_validation(admin, aio_admin, k8s_namespace, name)
        done = await second.terminal(name)
        assert done["status"]["phase"] == Phase.SUCCEEDED
        # a late copy of the lost event (from a process that was only slow) is a 409: recorded once
        second.engine.recorder.emit(done, reason=Reason.VALIDATION_STARTED, note="late copy", transition=1)
        await second.engine.recorder.flush()
    finally:
        await second.engine.stop()
    evs = await events_of(admin, k8s_namespace, uid)
    assert reasons(evs) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, Reason.VALIDATION_SUCCEEDED]
    assert evs[1]["eventTime"] == done["status"]["transitions"][1]["time"]  # when it happened, not when re-posted
    assert [e["metadata"]["name"] for e in evs] == [transition_event_name(done, i) for i in range(3)]


# --------------------------------------------------------------------------
# results without a kubelet: parsing what the real runner prints


def test_runner_output_parsing(runner_outputs):
    import jupyter_nbvalidation.backends.kubernetes.results as res

    code, term, stdout = runner_outputs["bad"]
    full, executed = res.parse_log(stdout)
    assert full["verdict"] == "Failed" and [r["status"] for r in full["results"]] == ["Success", "Failure", "Skipped"]
    assert executed is None  # the runner prints the executed notebook only with --print-executed
    degraded = res.result_from_summary(res.parse_summary(term))
    assert degraded["failedCellIndex"] == 1 and degraded["results"][0]["errorName"] == "ZeroDivisionError"
    assert degraded["cells"] == {"total": 3, "succeeded": 1, "failed": 1, "skipped": 1}


# --------------------------------------------------------------------------
# 7. the REST API, unchanged, with this backend behind a real Jupyter server

API = ("nbvalidation", "api", "v1")


@pytest.fixture
def jp_server_config(kube_apiserver, k8s_namespace):
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_nbvalidation": True}, "allow_unauthenticated_access": False},
        "NBValidation": {"backend": "kubernetes"},
        "KubernetesBackend": {"kubeconfig": kube_apiserver.admin_kubeconfig, "namespace": k8s_namespace,
                              "registry": REGISTRY, "runner_image": RUNNER_IMAGE},
    }


async def rest(jp_fetch, *parts, method="GET", body=None, params=None):
    kw = {"method": method, "params": params or {}}
    if body is not None or method == "POST":
        kw["body"] = json.dumps(body) if body is not None else ""
    if body is not None:  # a body is read only as declared JSON (415 otherwise)
        kw["headers"] = {"Content-Type": "application/json"}
    r = await jp_fetch(*API, *parts, **kw)
    return r.code, json.loads(r.body) if r.body else None


async def rest_job_in(jp_fetch, name: str, phases: tuple[str, ...] | frozenset[str], timeout: float = WAIT) -> dict:
    """``GET /jobs/{name}`` once its phase is one of ``phases`` (polled through helpers.wait_async)."""
    seen: dict = {}

    async def reached() -> dict | None:
        _, seen["job"] = await rest(jp_fetch, "jobs", name)
        return seen["job"] if seen["job"]["status"].get("phase") in phases else None

    return await wait_async(reached, timeout, lambda: f"{name} in {sorted(phases)}: {seen['job']['status']}",
                            interval=0.025)


async def test_rest_api_with_the_kubernetes_backend(jp_fetch, jp_root_dir, kube_apiserver, k8s_namespace):
    from tornado.httpclient import HTTPClientError

    ns = k8s_namespace
    write_notebook(jp_root_dir / "ok.ipynb", ["print(2 + 2)"])
    code, health = await rest(jp_fetch, "health")
    assert code == 200 and health["backend"] == "kubernetes", health
    # the stand-in registry.test does not resolve: the one thing /health finds off
    assert health["registryReachable"] is False and health["usable"] is False, health
    assert health["problem"].startswith(f"the registry {REGISTRY} is unreachable"), health
    assert health["namespace"] == ns and health["crdEstablished"] is True and health["buildStrategies"] == ["job"]

    code, job = await rest(jp_fetch, "jobs", method="POST",
                           body={"notebook": {"path": "ok.ipynb"}, "podConfig": {"buildConfig": {"enabled": False}}})
    assert code == 201 and job["kind"] == "NotebookValidationJob" and job["metadata"]["namespace"] == ns
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    async with await kube_apiserver.admin_client() as api:
        admin = await connect(kube_apiserver.admin_kubeconfig)
        try:
            await run_validation(admin, api, ns, name)
            cur = await rest_job_in(jp_fetch, name, Phase.TERMINAL)
            assert cur["status"]["phase"] == Phase.SUCCEEDED, cur["status"]
            assert cur["metadata"]["uid"] == uid

            # a second job, building, cancelled through DELETE
            _, second = await rest(jp_fetch, "jobs", method="POST",
                                   body={"notebook": {"path": "ok.ipynb"},
                                         "podConfig": {"buildConfig": {"requirements": ["six"]}}})
            second_name = second["metadata"]["name"]
            await wait_object(admin, JOBS.path(ns, obj.build_job_name(second_name)))
            await rest_job_in(jp_fetch, second_name, (Phase.BUILDING,))
            code, _ = await rest(jp_fetch, "jobs", second_name, method="DELETE")
            assert code == 202
            cur2 = await rest_job_in(jp_fetch, second_name, Phase.TERMINAL)
            assert (cur2["status"]["phase"], cur2["status"]["reason"]) == (Phase.FAILED, Reason.CANCELLED)
            assert await get_or_none(admin, JOBS.path(ns, obj.build_job_name(second_name))) is None
        finally:
            await admin.close()

    _, listed = await rest(jp_fetch, "jobs")
    assert [j["metadata"]["name"] for j in listed["items"]] == [second_name, name]
    _, page = await rest(jp_fetch, "jobs", params={"limit": "1"})
    assert len(page["items"]) == 1 and page["metadata"]["continue"]
    _, rest_page = await rest(jp_fetch, "jobs", params={"limit": "1", "continue": page["metadata"]["continue"]})
    assert [j["metadata"]["name"] for j in page["items"] + rest_page["items"]] == [second_name, name]
    _, filtered = await rest(jp_fetch, "jobs", params={"notebook": "other.ipynb"})
    assert filtered["items"] == []

    async def three_events() -> dict | None:  # events are posted just after the status write
        _, found = await rest(jp_fetch, "jobs", name, "events")
        return found if len(found["items"]) == 3 else None

    events = await wait_async(three_events, WAIT, f"the three events of {name}")
    assert events["apiVersion"] == "events.k8s.io/v1"
    assert reasons(events["items"]) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, Reason.VALIDATION_SUCCEEDED]
    for e in events["items"]:
        assert e["regarding"]["name"] == name and e["regarding"]["uid"] == uid

    _, tl = await rest(jp_fetch, "jobs", name, "timeline")
    assert tl["source"] == "events" and tl["terminal"]
    assert [p["phase"] for p in tl["phases"]] == [Phase.INITIALIZING, Phase.VALIDATION_RUNNING, Phase.SUCCEEDED]

    with pytest.raises(HTTPClientError) as err:  # no kubelet: no pod log, so no executed notebook
        await rest(jp_fetch, "jobs", name, "notebook")
    assert err.value.code == 404
    with pytest.raises(HTTPClientError) as err:
        await rest(jp_fetch, "jobs", "no-such-job")
    assert err.value.code == 404


# --------------------------------------------------------------------------
# the informer: resume after a disconnect, LIST again on 410 Gone


class ScriptedKube:
    """Answers LISTs and WATCHes from a script (no server): each watch call
    pops the next scripted stream; an exception in a stream is raised there."""

    def __init__(self, lists, streams):
        self.lists, self.streams = list(lists), list(streams)
        self.calls: list[tuple[str, dict]] = []

    async def request(self, method, path, query=None, **kw):
        self.calls.append(("LIST", dict(query or {})))
        return self.lists.pop(0)

    async def watch(self, path, query, timeout_seconds):
        self.calls.append(("WATCH", dict(query)))
        if not self.streams:
            await asyncio.sleep(3600)
        stream = self.streams.pop(0)
        if isinstance(stream, Exception):
            raise stream
        yield {"type": "OPEN"}
        for ev in stream:
            if isinstance(ev, Exception):
                raise ev
            yield ev


def _o(name, rv, **status):
    return {"metadata": {"name": name, "resourceVersion": str(rv)}, "status": status}


@pytest.mark.asyncio
async def test_informer_resumes_and_relists_on_410():
    from jupyter_nbvalidation.backends.kubernetes.informer import Informer

    seen = []
    kube = ScriptedKube(
        lists=[{"metadata": {"resourceVersion": "10"}, "items": [_o("a", 5), _o("b", 7)]},
               {"metadata": {"resourceVersion": "40"}, "items": [_o("a", 30, phase="x")]}],
        streams=[
            [{"type": "MODIFIED", "object": _o("a", 11)}, {"type": "BOOKMARK", "object": _o("", 15)},
             KubeApiError(0, "Unreachable", "connection reset")],  # resume from 15
            [{"type": "ADDED", "object": _o("c", 16)},
             {"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "too old"}}],  # LIST again
            KubeApiError(410, "Expired", "too old resource version"),  # the HTTP form of 410
        ])
    kube.lists.insert(2, {"metadata": {"resourceVersion": "50"}, "items": [_o("a", 30, phase="x")]})
    inf = Informer(kube, "/x", on_change=lambda o, d: seen.append((o["metadata"]["name"], d)), log=LOG,
                   max_backoff=0.01)
    task = asyncio.create_task(inf.run())
    await wait_for(lambda: asyncio.sleep(0, len([c for c in kube.calls if c[0] == "WATCH"]) >= 4), timeout=5)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    watches = [q["resourceVersion"] for kind, q in kube.calls if kind == "WATCH"]
    assert watches == ["10", "15", "40", "50"]
    assert all(q["allowWatchBookmarks"] == "true" for kind, q in kube.calls if kind == "WATCH")
    assert [k for k, _ in kube.calls] == ["LIST", "WATCH", "WATCH", "LIST", "WATCH", "LIST", "WATCH"]
    assert set(inf.cache) == {"a"} and inf.cache["a"]["status"] == {"phase": "x"}
    assert ("b", True) in seen and ("c", True) in seen  # gone at the re-LIST: reported deleted
    assert inf.errors == 1 and inf.lists == 3


@pytest.mark.asyncio
async def test_engine_keeps_going_across_an_apiserver_restart(env, admin, aio_admin, kube_apiserver):
    job = await env.submit(notebook={"path": "nb.ipynb"}, **NOBUILD)
    name = job["metadata"]["name"]
    await wait_object(admin, PODS.path(env.ns, obj.validation_pod_name(name)))
    watches_before = env.store.pods.watches
    await asyncio.to_thread(kube_apiserver.restart_apiserver)
    await run_validation(admin, aio_admin, env.ns, name)
    done = await env.terminal(name, timeout=90)
    assert done["status"]["phase"] == Phase.SUCCEEDED
    assert env.store.pods.watches > watches_before  # the watch was resumed (or re-listed), not lost
    assert reasons(await events_of(admin, env.ns, done["metadata"]["uid"])) == [
        Reason.ACCEPTED, Reason.VALIDATION_STARTED, Reason.VALIDATION_SUCCEEDED]


@pytest.mark.asyncio
async def test_client_reads_long_text_answers_whole_and_bounded(admin):
    """Kube.text (pod logs) on a multi-megabyte answer: all of it, or at most the limit."""
    whole = await admin.text("/openapi/v2", timeout=60)
    assert len(whole) > 2**20 and json.loads(whole)["swagger"] == "2.0"
    part = await admin.text("/openapi/v2", timeout=60, limit=300_000)
    assert len(part) == 300_000 and whole.startswith(part)


@pytest.mark.asyncio
async def test_client_with_an_exec_credential_plugin(kube_apiserver, tmp_path):
    """Kubeconfigs of managed clusters get short-lived tokens from a plugin:
    loaded off the loop, then renewed by a background task closed with the client."""
    h = kube_apiserver
    plugin = tmp_path / "token-plugin"
    plugin.write_text("#!/bin/sh\n" "cat <<EOF\n" + json.dumps({
        "apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
        "status": {"token": h.admin_token}}) + "\nEOF\n")
    plugin.chmod(0o700)
    cfg = yaml.safe_load(Path(h.admin_kubeconfig).read_text())
    cfg["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
                                        "interactiveMode": "Never"}}
    path = tmp_path / "exec.kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    kube = await connect(str(path))
    try:
        assert kube._refresher is not None and not kube._refresher.done()
        assert (await kube.request("GET", "/version"))["gitVersion"] == h.version
        assert (await kube.request("GET", "/api/v1/namespaces"))["kind"] == "NamespaceList"  # authenticated
    finally:
        await kube.close()
    assert kube._refresher is None
    with pytest.raises(KubeApiError) as err:
        await connect(str(tmp_path / "missing.kubeconfig"))
    assert err.value.reason == "ConfigError" and "missing.kubeconfig" in err.value.message


# --------------------------------------------------------------------------
# jupyter nbvalidation install


def test_install_prints_and_applies(kube_apiserver, k8s_namespace, capsys):
    from jupyter_nbvalidation.backends.kubernetes.install import install

    h, ns = kube_apiserver, k8s_namespace
    assert install(ns, True, None) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["CustomResourceDefinition", "CustomResourceDefinition", "Role",
                                         "ServiceAccount", "RoleBinding", "NetworkPolicy"]
    assert [d["metadata"]["name"] for d in docs[:2]] == ["notebookvalidationjobs.nbvalidation.dev",
                                                          "notebookvalidationschedules.nbvalidation.dev"]
    assert all(d["metadata"]["namespace"] == ns for d in docs[2:])
    assert docs[4]["subjects"][0]["namespace"] == ns

    for what in ("created", "replaced"):  # idempotent; the CRD exists already (harness)
        assert install(ns, False, h.admin_kubeconfig) == 0
        out = capsys.readouterr().out
        assert f"role/nbvalidation-server in {ns} {what}" in out, out
        assert "customresourcedefinition/notebookvalidationjobs.nbvalidation.dev replaced" in out
        assert "customresourcedefinition/notebookvalidationschedules.nbvalidation.dev replaced" in out
    rb = h.request("GET", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings/nbvalidation-server")
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": "nbvalidation", "namespace": ns}]
    # the limited identity cannot install the CRD: a clear error, exit 1
    assert install(ns, False, h.limited_kubeconfig) == 1
    assert "403" in capsys.readouterr().err


# --------------------------------------------------------------------------
# builds: the context kaniko reads, content tags, image reuse (k8s_support.Registry:
# Docker Registry HTTP API v2 manifest HEADs over plain HTTP), input files


BASE_DIGEST = "sha256:" + "b" * 64
PUSHED = "sha256:" + "e" * 64


@pytest_asyncio.fixture
async def registry():
    r = await Registry().start()
    r.manifests[("nbv/base", "1")] = BASE_DIGEST
    yield r
    await r.stop()


@pytest_asyncio.fixture
async def renv(kube_apiserver, k8s_namespace, tmp_path, registry):
    e = make_env(kube_apiserver, k8s_namespace, tmp_path / "root", registry=f"{registry.host}/nbv",
                 registry_insecure=True, builder_args=["--cache=true", "--insecure-pull"],
                 base_image=f"{registry.host}/nbv/base:1")
    write_notebook(e.root / "nb.ipynb", ["import six", "print(six.__name__)"])
    await e.engine.start()
    yield e
    await e.engine.stop()


def _untar(blob: bytes) -> dict[str, tarfile.TarInfo | bytes]:
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        return {m.name: (m, tar.extractfile(m).read() if m.isfile() else b"") for m in tar.getmembers()}


async def _build_job_or_none(admin, ns, name):
    return await get_or_none(admin, JOBS.path(ns, obj.build_job_name(name)))


@pytest.mark.asyncio
async def test_build_context_is_a_tar_of_regular_files_pinned_by_base_digest(renv, admin, registry):
    job = await renv.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"requirements": ["six"]}})
    name = job["metadata"]["name"]
    bj = await wait_object(admin, JOBS.path(renv.ns, obj.build_job_name(name)))
    ctx = await admin.request("GET", CONFIGMAPS.path(renv.ns, obj.build_context_name(name)))
    (ctr,) = bj["spec"]["template"]["spec"]["containers"]
    args = ctr["args"]
    # kaniko reads the context from one tar (a ConfigMap volume's keys are
    # symlinks into ..data/, which its COPY would copy as dangling links)
    assert args[:2] == ["--context=tar:///workspace/context.tar.gz", "--dockerfile=Dockerfile"]
    assert bj["spec"]["template"]["spec"]["volumes"][0]["configMap"]["items"] == [
        {"key": "context.tar.gz", "path": "context.tar.gz"}]
    # plain-text logs, the plain-HTTP registry, then builder_args, in that order
    assert args[args.index("--log-format=text"):] == ["--log-format=text", "--insecure", "--insecure-pull",
                                                      "--cache=true"]
    files = _untar(base64.b64decode(ctx["binaryData"]["context.tar.gz"]))
    assert sorted(files) == ["Dockerfile", "requirements.txt", "runner-requirements.txt", "runner.tar.gz"]
    assert all(info.isreg() for info, _ in files.values())
    docker_file = files["Dockerfile"][1].decode()
    assert docker_file == ctx["data"]["Dockerfile"]
    assert docker_file.splitlines()[1] == f"FROM {registry.host}/nbv/base@{BASE_DIGEST}"
    # the runner goes into its own venv, the kernel (ipykernel + requirements) into another
    assert "-r /tmp/nbv-build/runner-requirements.txt" in docker_file and "/opt/nbv-runner" in docker_file
    assert "/opt/nbv-kernel/bin/python $pipi -r /tmp/nbv-build/requirements.txt" in docker_file
    assert [r for r in files["requirements.txt"][1].decode().splitlines() if not r.startswith("#")] == [
        "ipykernel", "six"]
    runner = _untar(files["runner.tar.gz"][1])
    assert any(p in runner for p in ("jupyter_nbvalidation/runner.py", "jupyter_nbvalidation/runner/__init__.py"))
    assert all(p.startswith("jupyter_nbvalidation/") and p.endswith(".py") for p in runner)
    # the tag is the content: the registry was asked for it (plain HTTP), then the build pushes there
    dest = next(a.split("=", 1)[1] for a in args if a.startswith("--destination="))
    repo, tag = dest.rsplit(":", 1)
    assert repo == f"{registry.host}/nbv/env" and re.fullmatch(r"[0-9a-f]{32}", tag)
    assert ("HEAD", f"/v2/nbv/env/manifests/{tag}", None) in registry.requests
    assert ("HEAD", "/v2/nbv/base/manifests/1", None) in registry.requests


@pytest.mark.asyncio
async def test_same_content_is_built_once_and_then_reused(renv, admin, aio_admin, registry):
    ns = renv.ns
    spec = {"notebook": {"path": "nb.ipynb"}, "podConfig": {"buildConfig": {"requirements": ["six"]}}}
    first = (await renv.submit(**spec))["metadata"]["name"]
    bj = await wait_object(admin, JOBS.path(ns, obj.build_job_name(first)))
    dest = bj["metadata"]["annotations"][IMAGE_ANNOTATION]
    # a second job of the same content while the first builds: it waits, no second build
    second = (await renv.submit(**spec))["metadata"]["name"]
    await wait_for(lambda: _message_has(renv, second, "Waiting for the build of the same image"),
                   what="the second job to wait")
    assert await _build_job_or_none(admin, ns, second) is None
    # the first build pushes (the fake registry now has the tag) and completes
    registry.manifests[("nbv/env", dest.rsplit(":", 1)[1])] = PUSHED
    await run_builder(admin, aio_admin, ns, first, digest=PUSHED)
    for name in (first, second):
        await run_validation(admin, aio_admin, ns, name)
    done = {n: await renv.terminal(n) for n in (first, second)}
    assert done[first]["status"]["phase"] == done[second]["status"]["phase"] == Phase.SUCCEEDED
    reference = f"{registry.host}/nbv/env@{PUSHED}"
    for n in (first, second):
        assert done[n]["status"]["buildStatus"]["imageReference"] == reference
        pod = await admin.request("GET", PODS.path(ns, obj.validation_pod_name(n)))
        assert pod["spec"]["containers"][0]["image"] == reference
    assert await _build_job_or_none(admin, ns, second) is None  # never built
    ev = {n: reasons(await events_of(admin, ns, done[n]["metadata"]["uid"])) for n in (first, second)}
    assert ev[first] == [Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_SUCCEEDED, Reason.VALIDATION_STARTED,
                         Reason.VALIDATION_SUCCEEDED]
    assert ev[second] == [Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_REUSED, Reason.VALIDATION_STARTED,
                          Reason.VALIDATION_SUCCEEDED]
    assert "no build ran" in done[second]["status"]["buildStatus"]["message"]
    # a third job of the same content, later: reused at once
    third = (await renv.submit(**spec))["metadata"]["name"]
    await run_validation(admin, aio_admin, ns, third)
    assert (await renv.terminal(third))["status"]["buildStatus"]["imageReference"] == reference
    assert await _build_job_or_none(admin, ns, third) is None
    # other requirements: another tag, a build
    other = (await renv.submit(notebook={"path": "nb.ipynb"},
                               podConfig={"buildConfig": {"requirements": ["six==1.16.0"]}}))["metadata"]["name"]
    obj_other = await wait_object(admin, JOBS.path(ns, obj.build_job_name(other)))
    assert obj_other["metadata"]["annotations"][IMAGE_ANNOTATION] != dest


@pytest.mark.asyncio
@pytest.mark.parametrize("build_slots", [1, None], ids=["queued-for-a-build-slot", "waiting-for-the-same-image"])
async def test_a_failed_build_is_shared_by_the_jobs_waiting_on_it_and_never_cached(renv, admin, aio_admin,
                                                                                   build_slots):
    """Three jobs of the same image: one build Job; when it fails, the other two (queued for the
    one build slot, or waiting for the build of the same image) end BuildFailed with its message,
    never built; a job submitted after the failure builds again (a failure is never cached)."""
    ns = renv.ns
    renv.engine.caps[Phase.BUILDING] = build_slots
    renv.engine.queue_poll = 0.2
    spec = {"notebook": {"path": "nb.ipynb"}, "podConfig": {"buildConfig": {"requirements": ["nosuchpkg==1"]}}}
    names = []
    for _ in range(3):
        names.append((await renv.submit(**spec))["metadata"]["name"])
        await asyncio.sleep(0.01)
    first, *others = names
    await wait_object(admin, JOBS.path(ns, obj.build_job_name(first)))
    wanted = "Waiting for a build slot" if build_slots else "Waiting for the build of the same image"

    async def all_wait():
        for n in others:
            st = (await renv.store.get(n)).get("status") or {}
            if wanted not in (st.get("message") or "") and not (
                    build_slots is None and await _message_has(renv, n, wanted)):
                return False
        return True

    await wait_for(all_wait, what=f"the other jobs to wait ({wanted})")
    await asyncio.sleep(1.1)  # creationTimestamp is in whole seconds: the failure comes a second later
    await run_builder(admin, aio_admin, ns, first, ok=False,
                      output="ERROR: No matching distribution found for nosuchpkg==1")
    done = [await renv.terminal(n) for n in names]
    assert [d["status"]["reason"] for d in done] == [Reason.BUILD_FAILED] * 3, [d["status"] for d in done]
    for d in done:
        assert "No matching distribution found for nosuchpkg==1" in d["status"]["message"], d["status"]["message"]
    for d in done[1:]:
        assert f"the build of this image for job {first}, which failed while this job waited for it; not built " \
               "again" in d["status"]["message"], d["status"]["message"]
        assert await _build_job_or_none(admin, ns, d["metadata"]["name"]) is None  # never built
        assert reasons(await events_of(admin, ns, d["metadata"]["uid"]))[-1] == Reason.BUILD_FAILED
    # submitted after the failure: built again
    later = (await renv.submit(**spec))["metadata"]["name"]
    await wait_object(admin, JOBS.path(ns, obj.build_job_name(later)))


async def _message_has(env, name: str, text: str) -> bool:
    job = await env.store.get(name)
    obs = await env.backend.ensure_build(job, await plan_for(env.backend, job))
    return text in obs.message


@pytest.mark.asyncio
async def test_reuse_answers_the_registry_token_challenge(kube_apiserver, k8s_namespace, tmp_path, admin, aio_admin):
    reg = await Registry(token=True).start()
    reg.manifests[("nbv/base", "1")] = BASE_DIGEST
    e = make_env(kube_apiserver, k8s_namespace, tmp_path / "root", registry=f"{reg.host}/nbv",
                 registry_insecure=True, base_image=f"{reg.host}/nbv/base:1")
    write_notebook(e.root / "nb.ipynb", ["x = 1"])
    try:
        job = {"metadata": {"name": "probe", "uid": "u-probe", "namespace": k8s_namespace},
               "spec": {"notebook": {"path": "nb.ipynb"}, "podConfig": {"buildConfig": {"requirements": ["six"]}}}}
        plan = make_plan(job, Snapshot(frozenset({"notebook.ipynb"})), build_timeout=900, validation_timeout=1800,
                         cell_timeout=600)
        inputs = await e.backend.build_inputs(job, plan)
        assert inputs.reusable and inputs.base_image == f"{reg.host}/nbv/base@{BASE_DIGEST}"
        reg.manifests[("nbv/env", inputs.content_hash)] = PUSHED
        await e.engine.start()
        name = (await e.submit(notebook={"path": "nb.ipynb"},
                               podConfig={"buildConfig": {"requirements": ["six"]}}))["metadata"]["name"]
        await run_validation(admin, aio_admin, k8s_namespace, name)
        done = await e.terminal(name)
        assert done["status"]["buildStatus"]["imageReference"] == f"{reg.host}/nbv/env@{PUSHED}"
        assert await _build_job_or_none(admin, k8s_namespace, name) is None
        assert ("GET", "/token scope=repository:nbv/env:pull service=fake", None) in reg.requests
        assert ("HEAD", f"/v2/nbv/env/manifests/{inputs.content_hash}", "Bearer t0k3n") in reg.requests
    finally:
        await e.engine.stop()
        await reg.stop()


@pytest.mark.asyncio
async def test_build_failure_message_has_no_ansi_codes(env, admin, aio_admin):
    job = await env.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"requirements": ["nosuchpkg"]}})
    name = job["metadata"]["name"]
    await run_builder(admin, aio_admin, env.ns, name, ok=False,
                      output="\x1b[31mERROR\x1b[0m\x1b[36m[0001]\x1b[0m error building image: exit status 1")
    st = (await env.terminal(name))["status"]
    assert "ERROR[0001] error building image: exit status 1" in st["message"] and "\x1b" not in st["message"]
    assert "\x1b" not in st["buildStatus"]["message"]


@pytest.mark.asyncio
async def test_input_files_reach_the_working_directory_of_the_pod(env, admin):
    blob = bytes(range(256)) * 4
    (env.root / "data.csv").write_bytes(b"a,b\n1,2\n")
    (env.root / "sub").mkdir()
    (env.root / "sub" / "blob.bin").write_bytes(blob)
    (env.root / "other.txt").write_text("not named: does not travel")
    job = await env.submit(notebook={"path": "nb.ipynb"}, inputFiles=["data.csv", "sub/*"], **NOBUILD)
    name = job["metadata"]["name"]
    cm = await admin.request("GET", CONFIGMAPS.path(env.ns, obj.input_configmap_name(name)))
    index = json.loads(cm["data"][obj.INPUTS_INDEX])
    by_path = {p: base64.b64decode(cm["binaryData"][k]) for k, p in index}
    assert by_path == {"data.csv": b"a,b\n1,2\n", "sub/blob.bin": blob}
    pod = await wait_object(admin, PODS.path(env.ns, obj.validation_pod_name(name)))
    spec = pod["spec"]
    items = spec["volumes"][0]["configMap"]["items"]
    assert {i["path"]: i["key"] for i in items} == {"notebook.ipynb": "notebook.ipynb",
                                                    **{f"inputs/{p}": k for k, p in index}}
    (init,) = spec["initContainers"]
    assert init["image"] == RUNNER_IMAGE and init["command"] == ["sh", "-c", "cp -RL /input/inputs/. /tmp/work/"]
    cmd = spec["containers"][0]["command"]
    assert cmd[cmd.index("--cwd") + 1] == "/tmp/work"
    assert {"name": "work", "mountPath": "/tmp/work"} in spec["containers"][0]["volumeMounts"]
    assert {"name": "work", "mountPath": "/tmp/work"} in init["volumeMounts"]


@pytest.mark.asyncio
async def test_the_notebooks_folder_travels_without_input_files(env, admin, monkeypatch):
    """No spec.inputFiles: the notebook's folder and below travel in the input ConfigMap, as the
    local backend copies them (the same walk: .git, virtual environments, __pycache__ left out),
    each content once (the notebook itself is projected from its notebook.ipynb key); nothing
    above the folder."""
    proj = env.root / "proj"
    write_notebook(proj / "nb.ipynb", ["print(open('data.csv').read())"])
    (proj / "data.csv").write_bytes(b"a,b\n1,2\n")
    (proj / "sub").mkdir()
    (proj / "sub" / "blob.bin").write_bytes(bytes(range(256)))
    (proj / "sub" / "same.csv").write_bytes(b"a,b\n1,2\n")
    for hidden in (".git", "__pycache__", "venv"):
        (proj / hidden).mkdir()
        (proj / hidden / "secret").write_text("never travels")
    (proj / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    # the server's runtime dir (its tokens) and a kubeconfig, should they be in the folder
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(proj / "runtime"))
    (proj / "runtime").mkdir()
    (proj / "runtime" / "jpserver-1.json").write_text('{"token": "never travels"}')
    monkeypatch.setenv("KUBECONFIG", str(proj / "kube.yaml"))
    (proj / "kube.yaml").write_text("token: never travels")
    (env.root / "above.txt").write_text("not in the folder")
    job = await env.submit(notebook={"path": "proj/nb.ipynb"}, **NOBUILD)
    name = job["metadata"]["name"]
    cm = await admin.request("GET", CONFIGMAPS.path(env.ns, obj.input_configmap_name(name)))
    index = json.loads(cm["data"][obj.INPUTS_INDEX])
    assert sorted(p for _k, p in index) == ["data.csv", "nb.ipynb", "sub/blob.bin", "sub/same.csv"]
    keys = dict((p, k) for k, p in index)
    assert keys["nb.ipynb"] == "notebook.ipynb" and keys["sub/same.csv"] == keys["data.csv"]
    assert sorted(cm["binaryData"]) == sorted({keys["data.csv"], keys["sub/blob.bin"]})
    assert base64.b64decode(cm["binaryData"][keys["sub/blob.bin"]]) == bytes(range(256))
    assert "never travels" not in json.dumps(cm)
    pod = await wait_object(admin, PODS.path(env.ns, obj.validation_pod_name(name)))
    items = {i["path"]: i["key"] for i in pod["spec"]["volumes"][0]["configMap"]["items"]}
    assert items == {"notebook.ipynb": "notebook.ipynb", **{f"inputs/{p}": k for k, p in index}}


def _missing_file_summary(path: str) -> str:
    message = f"[Errno 2] No such file or directory: '{path}'"
    return summary("Failed", message=f"Cell 2 raised FileNotFoundError: {message}", failedCellIndex=1,
                   results=[{"cellIndex": 0, "status": "Success"},
                            {"cellIndex": 1, "status": "Failure", "errorName": "FileNotFoundError",
                             "errorMessage": message}])


@pytest.mark.asyncio
@pytest.mark.parametrize("input_files", [None, ["data.csv"]], ids=["the-folder", "input-files"])
async def test_a_missing_relative_file_says_what_travelled(env, admin, aio_admin, input_files):
    """The runner's FileNotFoundError for a relative path (from its termination summary, the Pod's
    log not readable here): the job's message says what travelled, the folder or the files named."""
    proj = env.root / "proj"
    write_notebook(proj / "nb.ipynb", ["print(1)", "open('other.csv')"])
    (proj / "data.csv").write_text("a\n1\n")
    extra = {"inputFiles": input_files} if input_files else {}
    job = await env.submit(notebook={"path": "proj/nb.ipynb"}, **extra, **NOBUILD)
    name = job["metadata"]["name"]
    await run_validation(admin, aio_admin, env.ns, name, exit_code=1, message=_missing_file_summary("other.csv"))
    st = (await env.terminal(name))["status"]
    assert (st["phase"], st["reason"], st["failedCellIndex"]) == (Phase.FAILED, Reason.VALIDATION_FAILED, 1), st
    message = st["message"]
    assert message.startswith("Cell 2 raised FileNotFoundError: [Errno 2] No such file or directory: 'other.csv' "
                              "('other.csv' is relative to the kernel's working folder, which holds "), message
    if input_files:
        assert "only the files spec.inputFiles named (data.csv: 1 file, read at submit); add 'other.csv' to " \
               "inputFiles" in message, message
    else:
        assert "the notebook's folder (proj) and everything below it as it was at submit (2 files); 'other.csv' " \
               "was not among them, and nothing above that folder travels" in message, message


@pytest.mark.asyncio
async def test_input_files_over_the_configmap_limit_are_refused(env, admin):
    (env.root / "big.bin").write_bytes(b"\0" * (1024 * 1024))
    with pytest.raises(ApiError) as err:
        await env.submit(notebook={"path": "nb.ipynb"}, inputFiles=["big.bin"], **NOBUILD)
    e = err.value
    assert (e.status, e.code, e.field) == (413, "TooLarge", "spec.inputFiles")
    assert "1 input file(s)" in e.message and f"limited here to {env.backend.max_notebook_bytes_configmap}" in e.message
    assert (await admin.request("GET", NVJ.path(env.ns)))["items"] == []


@pytest.mark.asyncio
@pytest.mark.parametrize("over", ["bytes", "snapshot", "files"])
async def test_a_folder_over_the_limit_is_refused_at_submit(env, admin, over):
    """Without spec.inputFiles the folder travels: over the ConfigMap limit (by the folder's
    own bytes, or with the notebook and requirements around it) or over max_folder_files, it
    is refused naming the folder, its size, the limit and the way out; nothing is created."""
    limit = env.backend.max_notebook_bytes_configmap
    proj = env.root / "proj"
    write_notebook(proj / "nb.ipynb", ["x = 1"])
    if over == "bytes":
        (proj / "big.bin").write_bytes(b"\0" * (limit + 10))
    elif over == "snapshot":  # the folder's bytes fit; with the ConfigMap's keys and index they do not
        nb_size = (proj / "nb.ipynb").stat().st_size
        (proj / "big.bin").write_bytes(b"\1" * (limit - nb_size - 10))
    else:
        env.backend.max_folder_files = 3
        for i in range(4):
            (proj / f"f{i}.txt").write_text(str(i))
    with pytest.raises(ApiError) as err:
        await env.submit(notebook={"path": "proj/nb.ipynb"}, **NOBUILD)
    e = err.value
    assert (e.status, e.code, e.field) == (413, "TooLarge", "spec.notebook.path"), e.message
    assert f"the notebook's folder {proj.resolve()}" in e.message and "spec.inputFiles" in e.message, e.message
    if over == "files":
        assert "over 3 files" in e.message and "c.KubernetesBackend.max_folder_files" in e.message, e.message
    else:
        assert f"limited here to {limit} bytes" in e.message, e.message
        assert "max_notebook_bytes_configmap" in e.message, e.message
    if over == "bytes":
        assert f"2 files, {limit + 10 + (proj / 'nb.ipynb').stat().st_size} bytes" in e.message, e.message
    assert (await admin.request("GET", NVJ.path(env.ns)))["items"] == []
    assert (await admin.request("GET", CONFIGMAPS.path(env.ns)))["items"] == [], "nothing created"


@pytest.mark.asyncio
async def test_built_images_run_the_runner_apart_from_the_kernel(env, admin, aio_admin):
    job = await env.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"requirements": ["six"]}})
    name = job["metadata"]["name"]
    await run_builder(admin, aio_admin, env.ns, name)
    pod = await wait_object(admin, PODS.path(env.ns, obj.validation_pod_name(name)))
    cmd = pod["spec"]["containers"][0]["command"]
    assert cmd[:3] == ["/opt/nbv-runner/bin/python", "-m", "jupyter_nbvalidation.runner"]
    assert cmd[cmd.index("--python") + 1] == "/opt/nbv-kernel/bin/python"
    # no inputFiles: the notebook's folder (nb.ipynb alone) is copied into the working directory
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["inputs"]


def test_install_print_needs_no_kubernetes_client(tmp_path):
    """``install --print`` with the kubernetes client and aiohttp not importable;
    applying then says in one sentence what is missing."""
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('kubernetes', 'aiohttp'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from jupyter_nbvalidation.cli.main import main\n"
        "code = main(sys.argv[1:])\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'aiohttp')]\n"
        "sys.exit(code)\n")
    def run(*a: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", blocker, "install", *a], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
    p = run("--print", "-n", "team-a")
    assert p.returncode == 0, p.stderr
    docs = list(yaml.safe_load_all(p.stdout))
    assert [d["kind"] for d in docs] == ["CustomResourceDefinition", "CustomResourceDefinition", "Role", "ServiceAccount",
                                         "RoleBinding", "NetworkPolicy"]
    p = run("-n", "team-a")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1 and "jupyter-nbvalidation[kubernetes]" in p.stderr


@pytest.mark.asyncio
async def test_oom_killed_container_wins_over_the_runners_dead_kernel(env):
    """A real node: the OOM killer takes the kernel, the runner exits 1 ("kernel
    died"), the container is reported terminated with reason OOMKilled."""
    import jupyter_nbvalidation.backends.kubernetes.results as res

    pod = {"metadata": {"name": "p", "namespace": env.ns}, "status": {"phase": "Failed", "containerStatuses": [
        {"name": obj.RUNNER_CONTAINER, "state": {"terminated": {
            "exitCode": 1, "reason": "OOMKilled",
            "message": summary("Failed", reason="KernelDied", message="The kernel died")}}}]}}
    result = await env.backend.executor.result(pod, res.pod_outcome(pod, obj.RUNNER_CONTAINER))
    assert result["reason"] == "OOMKilled" and "memory" in result["message"], result


# --------------------------------------------------------------------------
# the verdict cache's environment on Kubernetes: registry digests (the fake registry)


@pytest.mark.asyncio
async def test_the_verdict_cache_knows_the_kubernetes_environment_by_its_registry_digests(registry):
    """Built: the content tag of the image a build would push (so the base image moving to
    another digest, or other requirements, is another environment); a hit only while the
    registry serves, at that tag, the very image the earlier job's Pod ran. Build disabled:
    the image by its digest now. A digest not known: no environment, the notebook runs."""
    from jupyter_nbvalidation.backends.kubernetes.backend import KubernetesBackend
    from jupyter_nbvalidation.environment.requirements import Requirements

    backend = KubernetesBackend(namespace="unused", kubeconfig="/nonexistent", registry=f"{registry.host}/nbv",
                                registry_insecure=True, base_image=f"{registry.host}/nbv/base:1",
                                runner_image=f"{registry.host}/nbv/runner:1")
    six = Requirements(origin="test", lines=["six"], display_lines=["six"])
    built = {"notebook": {"path": "nb.ipynb"}}
    try:
        env = await backend.verdict_environment(built, six)
        assert env is not None and env.startswith(f"built:{registry.host}/nbv/env:"), env
        tag = env.rsplit(":", 1)[1]
        # the same inputs: the same environment; the inputs a build of this job would use: the same tag
        assert await backend.verdict_environment(built, six) == env
        assert await backend.verdict_environment(
            built, Requirements(origin="test", lines=["six==1.16.0"], display_lines=["six==1.16.0"])) != env

        ran = {"spec": built, "status": {"buildStatus": {"imageReference": f"{registry.host}/nbv/env@{PUSHED}"}}}
        assert not await backend.same_verdict_environment(ran, env)  # the registry has no such image (lost)
        registry.manifests[("nbv/env", tag)] = PUSHED
        assert await backend.same_verdict_environment(ran, env)
        registry.manifests[("nbv/env", tag)] = "sha256:" + "f" * 64  # built again: maybe other versions inside
        assert not await backend.same_verdict_environment(ran, env)
        assert not await backend.same_verdict_environment({"spec": built, "status": {}}, env)  # never built

        # the base image's tag moves to another digest: another environment (after the minute it is cached)
        registry.manifests[("nbv/base", "1")] = "sha256:" + "c" * 64
        backend.images._base_digests.clear()
        moved = await backend.verdict_environment(built, six)
        assert moved is not None and moved != env
        # a base image its registry does not have: not known
        del registry.manifests[("nbv/base", "1")]
        backend.images._base_digests.clear()
        assert await backend.verdict_environment(built, six) is None
        # a reference no registry can be asked about (a host over DNS's limits): not known, no error
        odd = {"notebook": {"path": "nb.ipynb"}, "podConfig": {"buildConfig": {"baseImage": "a" * 300 + ".com/x"}}}
        assert await backend.verdict_environment(odd, six) is None
        # a pinned base image needs no registry
        pinned = {"notebook": {"path": "nb.ipynb"},
                  "podConfig": {"buildConfig": {"baseImage": f"{registry.host}/nbv/base@{BASE_DIGEST}"}}}
        assert (await backend.verdict_environment(pinned, six)) == env

        # build disabled: the image the Pod would run, by its digest now
        unbuilt = {"notebook": {"path": "nb.ipynb"}, "podConfig": {"buildConfig": {"enabled": False}}}
        assert await backend.verdict_environment(unbuilt, Requirements(origin="none")) is None  # not in the registry
        registry.manifests[("nbv/runner", "1")] = DIGEST
        backend.images._base_digests.clear()
        plain = await backend.verdict_environment(unbuilt, Requirements(origin="none"))
        assert plain == f"unbuilt:{registry.host}/nbv/runner@{DIGEST}"
        assert await backend.same_verdict_environment({"spec": unbuilt, "status": {}}, plain)
        registry.manifests[("nbv/runner", "1")] = PUSHED
        backend.images._base_digests.clear()  # (a tag's digest is asked again after a minute)
        assert await backend.verdict_environment(unbuilt, Requirements(origin="none")) != plain
        own = {**unbuilt, "podConfig": {**unbuilt["podConfig"], "containerImage": f"{registry.host}/nbv/own@{DIGEST}"}}
        assert await backend.verdict_environment(own, Requirements(origin="none")) == f"unbuilt:{registry.host}/nbv/own@{DIGEST}"
    finally:
        await backend.images.close()
