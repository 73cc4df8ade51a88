"""Pod faults are retried, never blamed on the notebook (issue 19, points 2 and 3), on the
REAL API server of tests/k8s_harness.py (etcd + kube-apiserver, no kubelet): the test plays
the kubelet and writes the validation Pod's status as a real one does when an image pull
backs off, a pull finds no image, the Pod is deleted (``kubectl delete pod``: a
``deletionTimestamp``, then the runner's SIGTERM report), force-deleted, or evicted.

The engine's retry policy (engine.py) retries a transient ``Fault`` in a fresh Pod
``nvj-<name>-validate-r<n>`` and ends a permanent one (or the last) InfrastructureFailed;
what is asserted here is that the Kubernetes backend classifies each case right and that
the verdict of the Pod that really ran the notebook is the one recorded.

Run: ``.venv/bin/python -m pytest tests/test_k8s_faults.py -q``
"""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from helpers import write_notebook
from k8s_support import (
    LOG,
    NOBUILD,
    RUNNER_IMAGE,
    events_of,
    get_or_none,
    make_env,
    phases,
    reasons,
    summary,
    wait_for,
    wait_object,
)

import jupyter_nbvalidation.backends.kubernetes.objects as obj
import jupyter_nbvalidation.backends.kubernetes.results as res
from jupyter_nbvalidation.backends.kubernetes.client import PODS
from jupyter_nbvalidation.core.model import Phase, Reason

try:  # the harness is loaded as a plugin; import it by whichever name is on sys.path
    import k8s_harness as harness
except ImportError:  # pragma: no cover
    from tests import k8s_harness as harness

pytestmark = pytest.mark.k8s

RETRIED = "ValidationRetried"
INFRA = "InfrastructureFailed"
QPS = 'Failed to pull image "registry.test:5000/nbv/runner:1": pull QPS exceeded'
MISSING = ('failed to pull and unpack image "registry.test:5000/nbv/runner:1": failed to resolve reference '
           '"registry.test:5000/nbv/runner:1": registry.test:5000/nbv/runner:1: not found')
# what the runner in a Pod reports when the kubelet stops it (kubectl delete pod): a "failed" cell
SIGTERM = summary("Failed", reason="RunnerError", failedCellIndex=1,
                  message="The runner was stopped by SIGTERM in cell 2; the kernel was shut down",
                  error={"name": "SIGTERM", "message": "the runner was stopped by SIGTERM"})
BAD = summary("Failed", reason="CellExecutionFailed", failedCellIndex=1,
              message="Cell 2 raised ZeroDivisionError: division by zero",
              error={"name": "ZeroDivisionError", "message": "division by zero"})


@pytest_asyncio.fixture
async def env(kube_apiserver, k8s_namespace, tmp_path):
    e = make_env(kube_apiserver, k8s_namespace, tmp_path / "root", retry_backoff=0.05)
    write_notebook(e.root / "nb.ipynb", ["x = 1", "print(x + 1)"])
    await e.engine.start()
    yield e
    await e.engine.stop()


def pod_path(env, name: str, attempt: int = 0) -> str:
    return PODS.path(env.ns, obj.validation_pod_name(name, attempt))


async def set_waiting(api, ns: str, pod_name: str, reason: str, message: str) -> dict:
    """The kubelet: the Pod is bound, its runner container waits on its image pull."""
    core, pod = await harness._pod_and_node(api, ns, pod_name, "fake-node")
    now = harness._now()
    statuses = [harness._container_status(c, {"waiting": {"reason": reason, "message": message}}, False)
                for c in pod["spec"]["containers"]]
    for cs in statuses:
        cs.pop("containerID", None)
    body = {"status": {"phase": "Pending", "hostIP": "10.0.0.200", "startTime": now,
                       "conditions": harness._conditions(now, False, "ContainersNotReady"),
                       "containerStatuses": statuses}}
    return harness._obj(api, await core.patch_namespaced_pod_status(pod_name, ns, body,
                                                                    _content_type=harness.MERGE))


async def delete_pod(admin, path: str, grace: int | None = None) -> None:
    """``kubectl delete pod`` (the API's graceful deletion: a bound Pod gets a deletionTimestamp
    and stays until its kubelet confirms; ``grace=0``: gone at once, as with ``--force``)."""
    body = {"apiVersion": "v1", "kind": "DeleteOptions"}
    if grace is not None:
        body["gracePeriodSeconds"] = grace
    await admin.request("DELETE", path, body=body)


async def status_of(env, name: str) -> dict:
    return (await env.store.get(name)).get("status") or {}


async def assert_still_running(env, name: str, seconds: float) -> None:
    end = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < end:
        st = await status_of(env, name)
        assert st.get("phase") == Phase.VALIDATION_RUNNING, st
        await asyncio.sleep(0.1)


# --------------------------------------------------------------------------
# image pulls: a waiting state, not a verdict


@pytest.mark.asyncio
async def test_image_pull_back_off_then_running_then_succeeded_is_one_run(env, admin, aio_admin):
    """The issue's false failure: ImagePullBackOff ("pull QPS exceeded") while the kubelet
    retries, then the Pod runs to exit 0: Succeeded, no retry, one Pod."""
    job = await env.submit(notebook={"path": "nb.ipynb"}, **NOBUILD)
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    pod = await wait_object(admin, pod_path(env, name))
    await set_waiting(aio_admin, env.ns, pod["metadata"]["name"], "ErrImagePull", QPS)
    await asyncio.sleep(0.3)
    await set_waiting(aio_admin, env.ns, pod["metadata"]["name"], "ImagePullBackOff",
                      f'Back-off pulling image "{RUNNER_IMAGE}": ErrImagePull: pull QPS exceeded')
    await assert_still_running(env, name, 1.0)
    await harness.start_pod(aio_admin, env.ns, pod["metadata"]["name"])
    await harness.complete_pod(aio_admin, env.ns, pod["metadata"]["name"], message=summary(),
                               container=obj.RUNNER_CONTAINER)
    done = await env.terminal(name)
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED), st
    assert not st.get("validationRetries")
    assert reasons(await events_of(admin, env.ns, uid)) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED,
                                                          Reason.VALIDATION_SUCCEEDED]
    assert await get_or_none(admin, pod_path(env, name, 1)) is None


@pytest.mark.asyncio
async def test_image_pull_back_off_beyond_the_deadline_is_retried_in_a_fresh_pod(kube_apiserver, k8s_namespace,
                                                                                 tmp_path, admin, aio_admin):
    env = make_env(kube_apiserver, k8s_namespace, tmp_path / "root", retry_backoff=0.05, image_pull_deadline=1.0)
    write_notebook(env.root / "nb.ipynb", ["x = 1"])
    await env.engine.start()
    try:
        job = await env.submit(notebook={"path": "nb.ipynb"}, **NOBUILD)
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        first = await wait_object(admin, pod_path(env, name))
        await set_waiting(aio_admin, env.ns, first["metadata"]["name"], "ImagePullBackOff",
                          f'Back-off pulling image "{RUNNER_IMAGE}": ErrImagePull: pull QPS exceeded')
        # no status change comes from the kubelet: the deadline alone ends the wait
        retry = await wait_object(admin, pod_path(env, name, 1), timeout=15)
        assert retry["metadata"]["name"] == f"nvj-{name}-validate-r1"
        assert retry["metadata"]["ownerReferences"][0]["uid"] == uid
        gone = await get_or_none(admin, pod_path(env, name))  # the failed attempt's Pod is deleted
        assert gone is None or gone["metadata"].get("deletionTimestamp"), gone
        await harness.complete_pod(aio_admin, env.ns, retry["metadata"]["name"], message=summary(),
                                   container=obj.RUNNER_CONTAINER)
        done = await env.terminal(name)
        st = done["status"]
        assert st["phase"] == Phase.SUCCEEDED and st["validationRetries"] == 1, st
        evs = await events_of(admin, env.ns, uid)
        assert reasons(evs) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, RETRIED, Reason.VALIDATION_SUCCEEDED]
        retried = evs[2]
        assert retried["type"] == "Warning"
        assert retried["note"].startswith(f"The validation Pod could not pull {RUNNER_IMAGE}: "), retried["note"]
        assert "pull QPS exceeded" in retried["note"]
    finally:
        await env.engine.stop()


@pytest.mark.asyncio
async def test_an_image_that_does_not_exist_ends_infrastructure_failed_at_once(env, admin, aio_admin):
    job = await env.submit(notebook={"path": "nb.ipynb"}, **NOBUILD)
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    pod = await wait_object(admin, pod_path(env, name))
    await set_waiting(aio_admin, env.ns, pod["metadata"]["name"], "ErrImagePull", MISSING)
    done = await env.terminal(name)
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.FAILED, INFRA), st
    assert st["message"].startswith(f"The validation Pod could not pull {RUNNER_IMAGE}: the image does not exist")
    assert st.get("failedCellIndex") is None and not st.get("results")
    assert not st.get("validationRetries")
    assert reasons(await events_of(admin, env.ns, uid)) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, INFRA]
    assert await get_or_none(admin, pod_path(env, name, 1)) is None


# --------------------------------------------------------------------------
# a deleted, vanished or evicted Pod: retried, the new Pod's verdict decides


@pytest.mark.asyncio
async def test_a_deleted_pod_is_retried_and_the_new_pods_verdict_decides(env, admin, aio_admin):
    """``kubectl delete pod`` mid-cell: the apiserver sets a deletionTimestamp, the kubelet
    SIGTERMs the runner, which reports cell 2 failed with SIGTERM. That is not the notebook's
    verdict: the job is retried in nvj-<name>-validate-r1, and ends with what that Pod says."""
    job = await env.submit(notebook={"path": "nb.ipynb"}, **NOBUILD)
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    first = await wait_object(admin, pod_path(env, name))
    await harness.start_pod(aio_admin, env.ns, first["metadata"]["name"])
    await delete_pod(admin, pod_path(env, name))
    terminating = await admin.request("GET", pod_path(env, name))
    assert terminating["metadata"].get("deletionTimestamp")  # bound to a node: graceful
    # the runner's report of the SIGTERM (exit 2, "cell 2 failed") as the kubelet writes it
    await harness.complete_pod(aio_admin, env.ns, first["metadata"]["name"], exit_code=2, message=SIGTERM,
                               container=obj.RUNNER_CONTAINER)
    retry = await wait_object(admin, pod_path(env, name, 1))
    await assert_still_running(env, name, 0.3)
    await harness.complete_pod(aio_admin, env.ns, retry["metadata"]["name"], exit_code=1, message=BAD,
                               container=obj.RUNNER_CONTAINER)
    done = await env.terminal(name)
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.VALIDATION_FAILED), st
    assert st["message"] == "Cell 2 raised ZeroDivisionError: division by zero"  # the new Pod's verdict
    assert st["failedCellIndex"] == 1 and [r["status"] for r in st["results"]] == ["Failure"], st["results"]
    assert "SIGTERM" not in str(st)
    assert st["validationRetries"] == 1
    evs = await events_of(admin, env.ns, uid)
    assert reasons(evs) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, RETRIED, Reason.VALIDATION_FAILED]
    assert evs[2]["note"].startswith(f"The validation Pod nvj-{name}-validate was deleted while it ran"), evs[2]
    assert phases(done) == [Phase.INITIALIZING, Phase.VALIDATION_RUNNING, Phase.FAILED]


@pytest.mark.asyncio
async def test_a_force_deleted_pod_is_retried(env, admin, aio_admin):
    """``kubectl delete pod --force --grace-period=0`` while it runs: retried; the new Pod's
    success is the verdict."""
    job = await env.submit(notebook={"path": "nb.ipynb"}, **NOBUILD)
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    first = await wait_object(admin, pod_path(env, name))
    await harness.start_pod(aio_admin, env.ns, first["metadata"]["name"])
    await delete_pod(admin, pod_path(env, name), grace=0)
    retry = await wait_object(admin, pod_path(env, name, 1))
    await harness.complete_pod(aio_admin, env.ns, retry["metadata"]["name"], message=summary(),
                               container=obj.RUNNER_CONTAINER)
    done = await env.terminal(name)
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED), st
    assert st["validationRetries"] == 1 and st.get("failedCellIndex") is None
    evs = await events_of(admin, env.ns, uid)
    assert reasons(evs) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, RETRIED, Reason.VALIDATION_SUCCEEDED]
    assert evs[2]["note"].startswith(f"The validation Pod nvj-{name}-validate "), evs[2]["note"]


@pytest.mark.asyncio
async def test_a_pod_gone_without_a_trace_is_a_transient_fault(kube_apiserver, k8s_namespace, tmp_path, admin):
    """NotFound while the attempt runs, not deleted by this server (its DELETED event is all
    there was, e.g. after a watch gap): a transient fault, not a silent re-creation of the
    same Pod; a Pod this server never saw (another server created it, then it went) is created."""
    from helpers import plan_for

    env = make_env(kube_apiserver, k8s_namespace, tmp_path / "root")
    write_notebook(env.root / "nb.ipynb", ["x = 1"])
    await env.store.start()
    try:
        job = await env.submit(notebook={"path": "nb.ipynb"}, **NOBUILD)
        job = {**job, "status": {"phase": Phase.VALIDATION_RUNNING}}
        plan = await plan_for(env.backend, job)
        ex = env.backend.executor
        assert (await ex.ensure(job, None, plan)).state == "Running"
        await delete_pod(admin, pod_path(env, job["metadata"]["name"]), grace=0)
        await wait_for(lambda: _gone(admin, env, job["metadata"]["name"]), what="the Pod gone")
        await wait_for(lambda: _async(env.store.pods.get(obj.validation_pod_name(job["metadata"]["name"])) is None),
                       what="the informer's DELETED")
        obs = await ex.ensure(job, None, plan)
        assert obs.state == "Failed" and obs.fault is not None and obs.fault.transient, obs
        assert obs.fault.cause == (f"The validation Pod nvj-{job['metadata']['name']}-validate disappeared while "
                                   "it ran (deleted, or its node lost)")
        assert obs.result is None  # no verdict
        assert await get_or_none(admin, pod_path(env, job["metadata"]["name"])) is None  # not re-created
        ex.forget(job["metadata"]["uid"])  # another server's view: it never saw the Pod
        assert (await ex.ensure(job, None, plan)).state == "Running"
        assert await get_or_none(admin, pod_path(env, job["metadata"]["name"])) is not None
    finally:
        await env.backend.stop()
        await env.store.stop()


async def _gone(admin, env, name: str) -> bool:
    return await get_or_none(admin, pod_path(env, name)) is None


async def _async(value):
    return value


@pytest.mark.asyncio
async def test_an_evicted_pod_is_retried_not_failed(env, admin, aio_admin):
    """The kubelet's eviction: phase Failed, reason Evicted, DisruptionTarget, the runner
    killed (exit 137): a retry, never "exited with code 137"."""
    from kubernetes.aio import client

    job = await env.submit(notebook={"path": "nb.ipynb"}, **NOBUILD)
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    first = await wait_object(admin, pod_path(env, name))
    running = await harness.start_pod(aio_admin, env.ns, first["metadata"]["name"])
    now = harness._now()
    (cs,) = running["status"]["containerStatuses"]
    cs.update(ready=False, started=False, state={"terminated": {
        "exitCode": 137, "reason": "Error", "startedAt": now, "finishedAt": now, "containerID": cs["containerID"]}})
    # one write, as the kubelet's eviction manager's status update
    await client.CoreV1Api(aio_admin).patch_namespaced_pod_status(first["metadata"]["name"], env.ns, {"status": {
        "phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory.",
        "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                        "message": "The node was low on resource: memory.", "lastTransitionTime": now}],
        "containerStatuses": [cs]}}, _content_type=harness.MERGE)
    retry = await wait_object(admin, pod_path(env, name, 1))
    await harness.complete_pod(aio_admin, env.ns, retry["metadata"]["name"], message=summary(),
                               container=obj.RUNNER_CONTAINER)
    done = await env.terminal(name)
    assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
    evs = await events_of(admin, env.ns, uid)
    assert reasons(evs) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, RETRIED, Reason.VALIDATION_SUCCEEDED]
    assert "memory" in evs[2]["note"] and "137" not in evs[2]["note"]


@pytest.mark.asyncio
async def test_retries_used_up_end_infrastructure_failed_with_the_cause_first(kube_apiserver, k8s_namespace,
                                                                             tmp_path, admin, aio_admin):
    env = make_env(kube_apiserver, k8s_namespace, tmp_path / "root", retry_backoff=0.05, max_retries=1)
    write_notebook(env.root / "nb.ipynb", ["x = 1"])
    await env.engine.start()
    try:
        job = await env.submit(notebook={"path": "nb.ipynb"}, **NOBUILD)
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        for attempt in (0, 1):
            await wait_object(admin, pod_path(env, name, attempt))
            await delete_pod(admin, pod_path(env, name, attempt))  # unbound: gone at once
        done = await env.terminal(name)
        st = done["status"]
        assert (st["phase"], st["reason"]) == (Phase.FAILED, INFRA), st
        # the last attempt's cause first
        assert st["message"].startswith(f"The validation Pod nvj-{name}-validate-r1 "), st["message"]
        assert st["message"].endswith("(after 1 retry)") and "while it ran" in st["message"], st["message"]
        assert st.get("failedCellIndex") is None
        assert reasons(await events_of(admin, env.ns, uid)) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED,
                                                              RETRIED, INFRA]
        assert await get_or_none(admin, pod_path(env, name, 2)) is None
    finally:
        await env.engine.stop()


@pytest.mark.asyncio
async def test_a_cancelled_job_deletes_the_pod_of_its_attempt(env, admin, aio_admin):
    job = await env.submit(notebook={"path": "nb.ipynb"}, **NOBUILD)
    name = job["metadata"]["name"]
    first = await wait_object(admin, pod_path(env, name))
    await harness.start_pod(aio_admin, env.ns, first["metadata"]["name"])
    await delete_pod(admin, pod_path(env, name), grace=0)
    retry = await wait_object(admin, pod_path(env, name, 1))
    await harness.start_pod(aio_admin, env.ns, retry["metadata"]["name"])
    await env.engine.request_cancel(name)
    done = await env.terminal(name)
    assert done["status"]["reason"] == Reason.CANCELLED, done["status"]

    async def deleting():
        p = await get_or_none(admin, pod_path(env, name, 1))
        return p is None or bool(p["metadata"].get("deletionTimestamp"))

    await wait_for(deleting, what="the retry's Pod deleted")


# --------------------------------------------------------------------------
# the classification itself (what a real kubelet writes)


def _pod(**status) -> dict:
    return {"metadata": {"name": "p", "uid": "u"}, "status": status}


def test_pull_failures_that_say_the_image_does_not_exist_are_permanent():
    for reason, message in [("ErrImagePull", MISSING),
                            ("ImagePullBackOff", 'Back-off pulling image "r/x:1": ErrImagePull: manifest unknown'),
                            ("ErrImagePull", "rpc error: code = NotFound desc = failed to pull and unpack image"),
                            ("InvalidImageName", 'Failed to apply default image tag "R/X": invalid reference'),
                            ("ErrImageNeverPull", 'Container image "x" is not present with pull policy of Never')]:
        assert res.image_missing(reason, message), (reason, message)
    for reason, message in [("ErrImagePull", QPS),
                            ("ImagePullBackOff", 'Back-off pulling image "r/x:1"'),
                            ("ErrImagePull", 'dial tcp: lookup registry.test: no such host'),
                            ("ErrImagePull", 'failed to resolve reference: host not found: dial tcp 10.0.0.1:5000: '
                                             'i/o timeout'),
                            ("ErrImagePull", "unexpected status from HEAD request: 503 Service Unavailable"),
                            ("ErrImagePull", "429 Too Many Requests")]:
        assert not res.image_missing(reason, message), (reason, message)
    pod = _pod(phase="Pending", initContainerStatuses=[
        {"name": "inputs", "image": "r/x:1", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "m"}}}],
        containerStatuses=[{"name": "runner", "state": {"waiting": {"reason": "PodInitializing"}}}])
    wait = res.pull_wait(pod)
    assert wait is not None and (wait.container, wait.image, wait.missing) == ("inputs", "r/x:1", False)
    assert not res.pod_outcome(pod, "runner").finished  # a waiting state, not a result


def test_a_disruption_wins_over_the_runners_report_unless_the_runner_had_finished_before():
    def terminated(finished: str) -> list[dict]:
        return [{"name": "runner", "state": {"terminated": {"exitCode": 2, "finishedAt": finished}}}]

    deleted = {"deletionTimestamp": "2026-12-02T10:00:30Z", "deletionGracePeriodSeconds": 30}
    pod = {"metadata": {"name": "p", **deleted}, "status": {"phase": "Failed",
                                                            "containerStatuses": terminated("2026-12-02T10:00:02Z")}}
    assert res.disruption(pod, "runner") == ("The validation Pod p was deleted while it ran (deletion requested "
                                             "at 2026-12-02T10:00:00Z)")
    # a runner that had ended before the deletion was asked for: its result stands
    pod["status"]["containerStatuses"] = terminated("2026-12-02T09:59:58Z")
    assert res.disruption(pod, "runner") is None
    assert res.disruption({"metadata": {"name": "p"}, "status": {"phase": "Running"}}, "runner") is None
    for reason in ("Evicted", "Preempting", "NodeLost", "Shutdown"):
        cause = res.disruption(_pod(phase="Failed", reason=reason, message="why"), "runner")
        assert cause == f"The validation Pod p was stopped by its node ({reason}: why)"
    cause = res.disruption(_pod(phase="Running", conditions=[
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
         "message": "Preempted", "lastTransitionTime": "2026-12-02T10:00:00Z"}]), "runner")
    assert cause == "The validation Pod p was disrupted (PreemptionByScheduler: Preempted)"


def test_attempts_have_their_own_pod_names():
    assert obj.validation_pod_name("abc") == "nvj-abc-validate"
    assert obj.validation_pod_name("abc", 0) == "nvj-abc-validate"
    assert obj.validation_pod_name("abc", 2) == "nvj-abc-validate-r2"
    long = obj.validation_pod_name("x" * 80, 3)
    assert len(long) <= 63 and long != obj.validation_pod_name("x" * 80, 2)
    LOG.debug("names: %s", long)


# --------------------------------------------------------------------------
# the build: a registry away is not the requirements' failure (issue 19 point 4)

PUSH_REFUSED = ("INFO[0012] Pushing image to registry.test:5000/nbv/env:abc\n"
                "error pushing image: failed to push to destination registry.test:5000/nbv/env:abc: "
                'Patch "https://registry.test:5000/v2/nbv/env/blobs/uploads/x": dial tcp 10.0.0.9:5000: '
                "connect: connection refused")
PIP_FAILED = ("ERROR: Could not find a version that satisfies the requirement nosuchpkg (from versions: none)\n"
              "ERROR: No matching distribution found for nosuchpkg\n"
              "error building image: error building stage: failed to execute command: waiting for process to "
              "exit: exit status 1")


async def run_build_attempt(admin, api, ns: str, job_name: str, attempt: int, *, ok: bool, output: str = "") -> None:
    """The Job controller and the kubelet for the build Job of ``attempt``."""
    import copy
    import uuid

    from k8s_support import DIGEST

    from jupyter_nbvalidation.backends.kubernetes.client import JOBS

    bj_name = obj.build_job_name(job_name, attempt)
    bj = await wait_object(admin, JOBS.path(ns, bj_name))
    tmpl = bj["spec"]["template"]
    pod = await admin.request("POST", PODS.path(ns), body={
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{bj_name}-{uuid.uuid4().hex[:5]}", "namespace": ns,
                     "labels": {**tmpl["metadata"]["labels"], "batch.kubernetes.io/job-name": bj_name},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": bj_name,
                                          "uid": bj["metadata"]["uid"], "controller": True}]},
        "spec": copy.deepcopy(tmpl["spec"])})
    await harness.complete_pod(api, ns, pod["metadata"]["name"], exit_code=0 if ok else 1,
                               message=DIGEST if ok else output, container=obj.BUILD_CONTAINER)
    await harness.complete_job(api, ns, bj_name, succeeded=ok)


@pytest.mark.asyncio
async def test_a_build_the_registry_refused_is_retried_in_a_fresh_build_job(env, admin, aio_admin):
    from jupyter_nbvalidation.backends.kubernetes.client import JOBS

    job = await env.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"requirements": ["six"]}})
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    await run_build_attempt(admin, aio_admin, env.ns, name, 0, ok=False, output=PUSH_REFUSED)
    await run_build_attempt(admin, aio_admin, env.ns, name, 1, ok=True)
    assert obj.build_job_name(name, 1) == f"nvj-{name}-build-r1"
    gone = await get_or_none(admin, JOBS.path(env.ns, obj.build_job_name(name)))
    assert gone is None or gone["metadata"].get("deletionTimestamp"), gone
    pod = await wait_object(admin, pod_path(env, name))
    await harness.complete_pod(aio_admin, env.ns, pod["metadata"]["name"], message=summary(),
                               container=obj.RUNNER_CONTAINER)
    done = await env.terminal(name)
    st = done["status"]
    assert st["phase"] == Phase.SUCCEEDED and st["buildRetries"] == 1, st
    evs = await events_of(admin, env.ns, uid)
    assert reasons(evs) == [Reason.ACCEPTED, Reason.BUILD_STARTED, "BuildRetried", Reason.BUILD_SUCCEEDED,
                            Reason.VALIDATION_STARTED, Reason.VALIDATION_SUCCEEDED]
    note = evs[2]["note"]
    assert note.startswith("The build could not reach the registry registry.test:5000: "), note
    assert "connection refused" in note and "sha256" not in note


@pytest.mark.parametrize("log", [PUSH_REFUSED, None], ids=["with-its-log", "log-gone"])
@pytest.mark.asyncio
async def test_a_push_refused_after_the_digest_was_written_is_the_registrys_fault(env, admin, aio_admin, log):
    """kaniko writes ``--digest-file`` (the termination message) once the image is built, then
    pushes: a push the registry refused ends the Pod with exit 1 and only the digest as its
    message (seen in CI on the real node, as BuildFailed: a false failure). Its log names the
    registry; without the log it is still the push's fault, retried, never BuildFailed."""
    from k8s_support import DIGEST

    kubelet = env.backend.children.container_log

    async def container_log(pod, container, **query):  # the kubelet's part: kaniko's output
        return log if container == obj.BUILD_CONTAINER else await kubelet(pod, container, **query)

    env.backend.children.container_log = container_log
    job = await env.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"requirements": ["six"]}})
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    await run_build_attempt(admin, aio_admin, env.ns, name, 0, ok=False, output=DIGEST)
    await run_build_attempt(admin, aio_admin, env.ns, name, 1, ok=True)
    pod = await wait_object(admin, pod_path(env, name))
    await harness.complete_pod(aio_admin, env.ns, pod["metadata"]["name"], message=summary(),
                               container=obj.RUNNER_CONTAINER)
    st = (await env.terminal(name))["status"]
    assert (st["phase"], st["buildRetries"]) == (Phase.SUCCEEDED, 1), st
    evs = await events_of(admin, env.ns, uid)
    assert reasons(evs) == [Reason.ACCEPTED, Reason.BUILD_STARTED, "BuildRetried", Reason.BUILD_SUCCEEDED,
                            Reason.VALIDATION_STARTED, Reason.VALIDATION_SUCCEEDED]
    note = evs[2]["note"]
    assert note.startswith("The build could not reach the registry registry.test:5000: "), note
    assert ("connection refused" in note) if log else ("its push to registry.test:5000/" in note), note


@pytest.mark.asyncio
async def test_a_push_kaniko_may_not_make_fails_with_its_words_not_the_digest(env, admin, aio_admin):
    from k8s_support import DIGEST

    async def container_log(pod, container, **query):
        return "INFO[0030] Pushing image to registry.test:5000/nbv/env:abc\nerror pushing image: UNAUTHORIZED: " \
               "authentication required\n"

    env.backend.children.container_log = container_log
    job = await env.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"requirements": ["six"]}})
    name = job["metadata"]["name"]
    await run_build_attempt(admin, aio_admin, env.ns, name, 0, ok=False, output=DIGEST)
    st = (await env.terminal(name))["status"]
    assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.BUILD_FAILED) and not st.get("buildRetries"), st
    assert "UNAUTHORIZED: authentication required" in st["message"] and "sha256:" not in st["message"], st["message"]


@pytest.mark.asyncio
async def test_a_build_whose_requirements_fail_is_not_retried(env, admin, aio_admin):
    job = await env.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"requirements": ["nosuchpkg"]}})
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    await run_build_attempt(admin, aio_admin, env.ns, name, 0, ok=False, output=PIP_FAILED)
    done = await env.terminal(name)
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.BUILD_FAILED), st
    assert "No matching distribution found for nosuchpkg" in st["message"] and not st.get("buildRetries")
    assert reasons(await events_of(admin, env.ns, uid)) == [Reason.ACCEPTED, Reason.BUILD_STARTED,
                                                          Reason.BUILD_FAILED]


def test_registry_faults_in_kaniko_output_name_the_registry():
    dest = "registry.test:5000/nbv/env:abc"
    assert res.registry_fault(PUSH_REFUSED, dest).startswith("The build could not reach the registry registry.test:5000:")
    for line in ['error checking push permissions -- make sure you entered the correct tag name, and that you are '
                 'authenticated correctly, and try again: checking push permission for "registry.test:5000/nbv/env:'
                 'abc": creating push check transport for registry.test:5000 failed: Get '
                 '"https://registry.test:5000/v2/": dial tcp: lookup registry.test: no such host',
                 'error building image: retrieving image "docker.io/library/python@sha256:0": GET '
                 'https://index.docker.io/v2/library/python/manifests/sha256:0: TOOMANYREQUESTS: rate limit',
                 'error pushing image: PUT https://registry.test:5000/v2/nbv/env/manifests/abc: '
                 'unexpected status code 503 Service Unavailable',
                 'error pushing image: Get "https://registry.test:5000/v2/": net/http: TLS handshake timeout',
                 # the real kaniko v1.24 when the registry resets the base image pull (tests/test_k8s_real_registry.py)
                 'error building image: error building stage: failed to get filesystem from image: read tcp '
                 '10.244.77.5:55232->registry.test:5000: read: connection reset by peer']:
        cause = res.registry_fault(line, dest)
        assert cause is not None and cause.startswith("The build could not reach the registry "), line
    assert "index.docker.io" in res.registry_fault('retrieving image "x": GET https://index.docker.io/v2/x: 429', dest)
    assert res.registry_fault("failed to get filesystem from image: read tcp 10.0.0.5:1->10.0.0.2:5000: read: "
                              "connection reset by peer", dest).startswith("The build could not reach the registry "
                                                                           "10.0.0.2:5000: ")
    assert res.registry_fault(PIP_FAILED, dest) is None
    assert res.registry_fault("WARNING: Retrying after connection broken by 'NewConnectionError(Connection "
                              "refused)': /simple/six/\nERROR: No matching distribution found for six", dest) is None
    assert res.registry_fault("error pushing image: UNAUTHORIZED: authentication required", dest) is None
