"""Several servers on one namespace, and outages, on the REAL API server.

- two `jupyter server` processes with the kubernetes backend on one
  namespace: exactly one reconciles (the Lease holder), the other serves the
  REST API; SIGKILL the leader mid-job and the other finishes every job, with
  no duplicate child and no duplicate event; SIGTERM the leader and it hands
  the Lease over on the way out, so the follower leads within a retry period;
- the kube-apiserver stopped for 30 s in the middle of 20 running jobs, then
  restarted on the same etcd: /health reports the outage, the last known
  jobs are still served, every job reaches its right terminal phase, no event
  is duplicated;
- a server SIGKILLed mid-Building and restarted: same.

Short lease timings (4 s / 3 s / 0.5 s) keep failover quick here.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio
from conftest import ServerProcess
from helpers import wait_async, write_notebook
from k8s_support import (
    BASE_IMAGE,
    NOBUILD,
    REGISTRY,
    WAIT,
    events_of,
    make_env,
    reasons,
    run_builder,
    run_validation,
    wait_object,
)

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.backends.kubernetes.client import JOBS, PODS, WATCH_OPEN
from jupyter_nbvalidation.core.model import Phase, Reason

pytestmark = pytest.mark.k8s
LEASE = {"lease_duration": 4.0, "renew_deadline": 3.0, "retry_period": 0.5}
BUILD_OK = [Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_SUCCEEDED, Reason.VALIDATION_STARTED,
            Reason.VALIDATION_SUCCEEDED]
NOBUILD_OK = [Reason.ACCEPTED, Reason.VALIDATION_STARTED, Reason.VALIDATION_SUCCEEDED]


class K8sServer(ServerProcess):
    """A `jupyter server` with the kubernetes backend on ``ns``."""

    def __init__(self, tmp_path, name, h, ns):
        super().__init__(tmp_path, name, extra_args=[
            "--NBValidation.backend=kubernetes", f"--KubernetesBackend.kubeconfig={h.admin_kubeconfig}",
            f"--KubernetesBackend.namespace={ns}", f"--KubernetesBackend.registry={REGISTRY}",
            "--KubernetesBackend.default_build_strategy=job",
            # the stand-in registry.test does not resolve: ask it nothing (as k8s_support.make_env)
            f"--KubernetesBackend.base_image={BASE_IMAGE}", "--KubernetesBackend.image_reuse=False",
            *(f"--KubernetesBackend.{k}={v}" for k, v in LEASE.items())])

    def api(self, method: str, path: str, body=None):
        return self.client().request(method, path, body)

    def health(self) -> dict:
        return self.api("GET", "health")


async def call(server: K8sServer, method: str, path: str, body=None):
    return await asyncio.to_thread(server.api, method, path, body)


async def until(fn, timeout=WAIT, what="condition"):
    return await wait_async(fn, timeout, what, interval=0.1)


async def job_phase(admin, ns, name) -> str:
    job = await admin.request("GET", f"/apis/nbvalidation.dev/v1alpha1/namespaces/{ns}/notebookvalidationjobs/{name}")
    return (job.get("status") or {}).get("phase", "")


async def assert_no_duplicates(admin, ns, name, builds: bool):
    sel = {"labelSelector": f"nbvalidation.dev/job={name}"}
    pods = (await admin.request("GET", PODS.path(ns), query=sel))["items"]
    assert len([p for p in pods if p["metadata"]["labels"]["nbvalidation.dev/component"] == "validation"]) == 1
    assert len((await admin.request("GET", JOBS.path(ns), query=sel))["items"]) == (1 if builds else 0)


@pytest.fixture
def k8s_servers(tmp_path, kube_apiserver, k8s_namespace):
    servers = []
    (tmp_path / "root").mkdir(exist_ok=True)
    write_notebook(tmp_path / "root" / "nb.ipynb", ["x = 1", "print(x + 1)"])

    def make(name: str) -> K8sServer:
        s = K8sServer(tmp_path, name, kube_apiserver, k8s_namespace)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


async def one_leader(a: K8sServer, b: K8sServer):
    """Wait until exactly one of the two leads and both have read the Lease;
    answer (leader, follower, their /health answers)."""

    async def leaders():
        hs = [await asyncio.to_thread(s.health) for s in (a, b)]
        lead = [s for s, h in zip((a, b), hs, strict=True) if h["engine"]["leading"]]
        # and the follower has read the Lease at least once (it campaigns every retry_period); a
        # server whose backend has not started yet answers without "leader" (not yet, either)
        seen = all((h.get("leader") or {}).get("holder") for h in hs)
        return (lead, hs) if len(lead) == 1 and seen else None

    (leader,), hs = await until(leaders, what="exactly one leader, known to both")
    follower = b if leader is a else a
    return leader, follower, hs[(a, b).index(leader)], hs[(a, b).index(follower)]


@pytest.mark.asyncio
async def test_two_servers_one_leader_and_failover(k8s_servers, k8s_namespace, admin, aio_admin):
    ns = k8s_namespace
    a, b = k8s_servers("a"), k8s_servers("b")
    await asyncio.gather(asyncio.to_thread(a.start), asyncio.to_thread(b.start))
    leader, follower, lh, fh = await one_leader(a, b)
    assert fh["leader"]["holder"] == lh["leader"]["identity"]
    # the follower serves the REST API: submit through it
    built = (await call(follower, "POST", "jobs", {"notebook": {"path": "nb.ipynb"}}))["metadata"]["name"]
    plain = (await call(follower, "POST", "jobs", {"notebook": {"path": "nb.ipynb"}, **NOBUILD}))["metadata"]["name"]
    await wait_object(admin, JOBS.path(ns, obj.build_job_name(built)))
    await wait_object(admin, PODS.path(ns, obj.validation_pod_name(plain)))
    assert (await asyncio.to_thread(follower.health))["engine"]["reconciles"] == 0  # exactly one reconciles
    assert (await call(follower, "GET", f"jobs/{built}"))["status"]["phase"] == Phase.BUILDING
    leader.kill()  # mid-job: one Building, one ValidationRunning
    await until(lambda: asyncio.to_thread(lambda: follower.health()["engine"]["leading"]), timeout=15,
                what="failover")
    await run_builder(admin, aio_admin, ns, built)
    await run_validation(admin, aio_admin, ns, built)
    await run_validation(admin, aio_admin, ns, plain)
    for name in (built, plain):
        await until(lambda name=name: _terminal(admin, ns, name), what=name)
    await asyncio.sleep(1.0)  # any late duplicate would show up now
    for name, builds in ((built, True), (plain, False)):
        job = await call(follower, "GET", f"jobs/{name}")
        assert job["status"]["phase"] == Phase.SUCCEEDED
        assert reasons(await events_of(admin, ns, job["metadata"]["uid"])) == (BUILD_OK if builds else NOBUILD_OK)
        await assert_no_duplicates(admin, ns, name, builds)


@pytest.mark.asyncio
async def test_graceful_stop_hands_the_lease_over_at_once(k8s_servers, k8s_namespace, admin):
    """A leader stopped with SIGTERM (a rolling restart) releases its Lease on the
    way out, so the follower takes over in about one retry period instead of
    waiting for the lease to expire. The release is seen in the Lease's own history
    (a watch from before the stop: every write arrives), not inferred from a time,
    which a loaded machine stretches either way."""
    ns = k8s_namespace
    a, b = k8s_servers("a"), k8s_servers("b")
    await asyncio.gather(asyncio.to_thread(a.start), asyncio.to_thread(b.start))
    leader, follower, lh, fh = await one_leader(a, b)
    lease_name = lh["leader"]["lease"].split("/", 1)[1]
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
    lease = await admin.request("GET", f"{leases}/{lease_name}")
    assert lease["spec"]["holderIdentity"] == lh["leader"]["identity"]
    holders: list[tuple[str, float | None]] = []  # (holderIdentity, leaseDurationSeconds) of each write
    opened = asyncio.Event()

    async def history() -> None:
        query = {"fieldSelector": f"metadata.name={lease_name}",
                 "resourceVersion": lease["metadata"]["resourceVersion"]}
        async for ev in admin.watch(leases, query, 120):
            if ev["type"] == WATCH_OPEN:
                opened.set()
            elif ev["type"] == "MODIFIED":
                spec = ev["object"]["spec"]
                holders.append((spec.get("holderIdentity") or "", spec.get("leaseDurationSeconds")))

    watcher = asyncio.create_task(history())
    try:
        await asyncio.wait_for(opened.wait(), 30)
        await asyncio.to_thread(leader.stop)  # SIGTERM: the server's shutdown runs the extension's stop
        assert leader.proc.returncode is not None
        await until(lambda: asyncio.to_thread(lambda: follower.health()["engine"]["leading"]),
                    timeout=60, what="the follower leading")
        await until(lambda: asyncio.sleep(0, any(h == fh["leader"]["identity"] for h, _ in holders)),
                    timeout=30, what="the follower's write in the Lease's history")
    finally:
        watcher.cancel()
    assert (await admin.request("GET", f"{leases}/{lease_name}"))["spec"]["holderIdentity"] == \
        fh["leader"]["identity"]
    # after the stopped leader's last renewal, the Lease was released (no holder, 1 s) before
    # the follower took it: without the release the history goes leader -> follower directly
    names = [h for h, _ in holders]
    taken = names.index(fh["leader"]["identity"])
    assert ("", 1) in holders[:taken], holders
    assert set(names[:taken]) <= {lh["leader"]["identity"], ""}, holders


async def _terminal(admin, ns, name):
    return await job_phase(admin, ns, name) in (Phase.SUCCEEDED, Phase.FAILED)


@pytest.mark.asyncio
async def test_server_killed_mid_building_and_restarted(k8s_servers, k8s_namespace, admin, aio_admin):
    ns = k8s_namespace
    s = k8s_servers("one")
    await asyncio.to_thread(s.start)
    await until(lambda: asyncio.to_thread(lambda: s.health()["engine"]["leading"]), what="leading")
    name = (await call(s, "POST", "jobs", {"notebook": {"path": "nb.ipynb"}}))["metadata"]["name"]
    await wait_object(admin, JOBS.path(ns, obj.build_job_name(name)))
    assert await job_phase(admin, ns, name) == Phase.BUILDING
    s.kill()
    await run_builder(admin, aio_admin, ns, name)  # the build finishes while no server runs
    s2 = k8s_servers("two")
    await asyncio.to_thread(s2.start)
    await wait_object(admin, PODS.path(ns, obj.validation_pod_name(name)), timeout=20)
    await run_validation(admin, aio_admin, ns, name)
    await until(lambda: _terminal(admin, ns, name), what="terminal")
    await asyncio.sleep(0.5)
    job = await call(s2, "GET", f"jobs/{name}")
    assert job["status"]["phase"] == Phase.SUCCEEDED
    assert reasons(await events_of(admin, ns, job["metadata"]["uid"])) == BUILD_OK
    await assert_no_duplicates(admin, ns, name, True)


@pytest_asyncio.fixture
async def ha_env(kube_apiserver, k8s_namespace, tmp_path):
    e = make_env(kube_apiserver, k8s_namespace, tmp_path / "root", default_build_strategy="job", **LEASE)
    write_notebook(e.root / "nb.ipynb", ["x = 1", "print(x + 1)"])
    await e.engine.start()
    yield e
    await e.engine.stop()


@pytest.mark.asyncio
async def test_apiserver_down_30s_in_the_middle_of_20_jobs(ha_env, admin, aio_admin, kube_apiserver):
    env, ns = ha_env, ha_env.ns
    await until(lambda: asyncio.sleep(0, env.engine.leading.is_set()), what="leading")
    jobs = []
    for i in range(20):
        builds = i % 2 == 0
        job = await env.submit(notebook={"path": "nb.ipynb"}, **({} if builds else NOBUILD))
        jobs.append((job["metadata"]["name"], builds, i % 5 == 4))  # every 5th fails its validation
    for name, builds, _ in jobs:
        await wait_object(admin, (JOBS.path(ns, obj.build_job_name(name)) if builds
                                  else PODS.path(ns, obj.validation_pod_name(name))))
    for name, builds, _ in jobs[:6]:  # a few builds finish right before the outage
        if builds:
            await run_builder(admin, aio_admin, ns, name)
    t0 = time.monotonic()
    await asyncio.to_thread(kube_apiserver.stop_apiserver)
    health = await until(lambda: _down(env), timeout=15, what="outage on /health")
    assert health["api"]["since"] and health["api"]["lastError"] and not health["usable"]
    assert "unreachable" in health["problem"]
    listed, _ = await env.store.list_jobs()  # the last known state is still served
    assert {j["metadata"]["name"] for j in listed} == {n for n, _, _ in jobs}
    assert (await env.service.get(jobs[0][0]))["metadata"]["name"] == jobs[0][0]
    await asyncio.sleep(max(0.0, 30 - (time.monotonic() - t0)))
    await asyncio.to_thread(kube_apiserver.start_apiserver)
    await until(lambda: _up(env), timeout=30, what="recovery on /health")
    for name, builds, _ in jobs:
        if builds:
            if await job_phase(admin, ns, name) == Phase.BUILDING:
                await run_builder(admin, aio_admin, ns, name)
    for name, _builds, fails in jobs:
        await wait_object(admin, PODS.path(ns, obj.validation_pod_name(name)), timeout=40)
        await run_validation(admin, aio_admin, ns, name, exit_code=1 if fails else 0,
                             message=None if not fails else _failed_summary())
    for name, _builds, fails in jobs:
        done = await env.terminal(name, timeout=60)
        assert done["status"]["phase"] == (Phase.FAILED if fails else Phase.SUCCEEDED), done["status"]
    await asyncio.sleep(0.5)
    for name, builds, fails in jobs:
        job = await env.store.get(name)
        expected = (BUILD_OK if builds else NOBUILD_OK)[:-1] + [Reason.VALIDATION_FAILED if fails
                                                                else Reason.VALIDATION_SUCCEEDED]
        assert reasons(await events_of(admin, ns, job["metadata"]["uid"])) == expected, name
        await assert_no_duplicates(admin, ns, name, builds)


def _failed_summary() -> str:
    from k8s_support import summary

    return summary("Failed", failedCellIndex=1, message="cell 1 raised ZeroDivisionError",
                   results=[{"cellIndex": 0, "status": "Success"}, {"cellIndex": 1, "status": "Failed"}])


async def _down(env):
    h = await env.backend.health()
    return h if not h["api"]["apiReachable"] else None


async def _up(env):
    h = await env.backend.health()
    # usable but for the stand-in registry (registry.test never resolves), which /health names last
    back = h["usable"] or (h["problem"] or "").startswith("the registry ")
    return h if h["api"]["apiReachable"] and back else None
