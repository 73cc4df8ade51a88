"""Faults on the REAL single-node cluster (tests/real_cluster.py, ``bash tools/cluster/up.sh``)
that tests/backends/kubernetes/test_k8s_faults.py proves against the tests' stand-in kubelet:
an eviction through the Eviction API, a force-deleted Pod (grace 0), an image pull that backs
off (ImagePullBackOff), a cancel during validation, and the job's ``podConfig`` reaching the
Pod and its kernel (and its memory limit holding). The engine and the Kubernetes backend run in
this process against the cluster's API server; the kubelet, containerd and runc do the rest.

Every job disables the build (the runner image of this checkout, ``NBV_RUNNER_IMAGE``), so a
test costs seconds, not a kaniko build. The slow cell of the disruption tests sleeps only in the
first attempt's Pod (its hostname is the Pod's name, ``nvj-<name>-validate``): the retry runs
the notebook at full speed, and the verdict is that retry's.

What a user expects, asserted each time: a fault of the cluster is retried or reported as
infrastructure, never a cell's failure, and never a hang; the job's Events say what happened.

Run: ``bash tools/cluster/up.sh && .venv/bin/python -m pytest tests/backends/kubernetes/test_k8s_real_faults2.py``
"""

from __future__ import annotations

import json
import logging
import time

import pytest
import pytest_asyncio
from helpers import wait_async, write_notebook

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.backends.kubernetes.client import PODS, KubeApiError
from jupyter_nbvalidation.core.model import Phase, Reason

pytestmark = pytest.mark.cluster

LOG = logging.getLogger("nbvalidation.test.real.faults")
NOBUILD = {"buildConfig": {"enabled": False}}
RETRIED = "ValidationRetried"
INFRA = "InfrastructureFailed"
WAIT = 120.0  # a Pod's start and a short notebook on a loaded 2-core machine
# slow in the first attempt's Pod only (its hostname is the Pod's name)
SLOW_FIRST = ("import socket, time\n"
              "if socket.gethostname().endswith('-validate'):\n"
              "    time.sleep(120)")


@pytest_asyncio.fixture
async def real(real_cluster, tmp_path):
    async with real_cluster.engine(tmp_path / "root", real_cluster.env["NBV_REGISTRY"], log=LOG,
                                   engine={"retry_backoff": 0.5}) as env:
        env.cluster = real_cluster
        yield env


async def submit(e, cells: list[str], /, **pod_config) -> str:
    nb = f"nb-{time.monotonic_ns()}.ipynb"
    write_notebook(e.root / nb, cells)
    job = await e.service.submit({"notebook": {"path": nb}, "podConfig": {**NOBUILD, **pod_config}})
    return job["metadata"]["name"]


async def status(env, name: str) -> dict:
    return (await env.backend.store.get(name)).get("status") or {}


async def in_cell(env, name: str, index: int) -> dict:
    """Wait until the job's first Pod runs cell ``index`` (its progress says so)."""
    async def running():
        st = await status(env, name)
        assert st.get("phase") not in Phase.TERMINAL, json.dumps(st, indent=1)
        p = st.get("progress") or {}
        return st if st.get("phase") == Phase.VALIDATION_RUNNING and p.get("currentCellIndex") == index else None

    return await wait_async(running, WAIT, f"job {name} to run cell {index}", interval=0.2)


async def verdict(env, name: str, timeout: float = WAIT) -> tuple[dict, list[dict]]:
    """The job at its end, and its events (oldest first) once the terminal one is posted."""
    done = await env.engine.wait_for_terminal(name, timeout)
    await env.engine.wait_idle(30)
    await env.engine.recorder.flush()
    evs = sorted(await env.backend.store.list_events(done), key=lambda e: e.get("eventTime") or "")
    return done, evs


def reasons(evs: list[dict]) -> list[str]:
    return [e["reason"] for e in evs]


async def pod(env, name: str, attempt: int = 0) -> dict | None:
    try:
        return await env.kube.request("GET", PODS.path(env.ns, obj.validation_pod_name(name, attempt)))
    except KubeApiError as e:
        if e.status == 404:
            return None
        raise


def check_retried_then_succeeded(name: str, done: dict, evs: list[dict], cause: str) -> dict:
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED), json.dumps(st, indent=1)
    assert st["validationRetries"] == 1 and st.get("failedCellIndex") is None, st
    assert all(r.get("status") == "Success" for r in st["results"]), st["results"]
    assert "SIGTERM" not in json.dumps(st), json.dumps(st, indent=1)
    assert [t["phase"] for t in st["transitions"]] == [Phase.INITIALIZING, Phase.VALIDATION_RUNNING, Phase.SUCCEEDED]
    assert reasons(evs) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, RETRIED, Reason.VALIDATION_SUCCEEDED], evs
    retried = evs[2]
    assert retried["type"] == "Warning" and retried["note"].startswith(cause), retried
    return retried


@pytest.mark.asyncio
async def test_an_eviction_through_the_eviction_api_is_retried_and_the_retry_decides(real):
    """``kubectl drain`` / a descheduler: the Eviction API on the running validation Pod. The
    apiserver marks it DisruptionTarget (EvictionByEvictionAPI) and deletes it gracefully, the
    kubelet SIGTERMs the runner mid-cell. Not the notebook's doing: retried in a fresh Pod."""
    name = await submit(real, [SLOW_FIRST, "print('done')"])
    await in_cell(real, name, 0)
    first = obj.validation_pod_name(name)
    t0 = time.monotonic()
    await real.kube.request("POST", PODS.path(real.ns, first) + "/eviction", body={
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": first, "namespace": real.ns}})
    evicted = await pod(real, name)
    assert evicted is not None and evicted["metadata"].get("deletionTimestamp"), evicted  # graceful
    assert any(c["type"] == "DisruptionTarget" and c["reason"] == "EvictionByEvictionAPI"
               for c in evicted["status"]["conditions"]), evicted["status"]["conditions"]
    done, evs = await verdict(real, name)
    print(f"{name}: eviction -> verdict {time.monotonic() - t0:.1f} s")
    check_retried_then_succeeded(name, done, evs, f"The validation Pod {first} was disrupted (EvictionByEvictionAPI")
    retry = await pod(real, name, 1)
    assert retry is not None and retry["status"]["phase"] == "Succeeded", retry and retry["status"]


@pytest.mark.asyncio
async def test_a_force_deleted_pod_is_retried_and_the_retry_decides(real):
    """``kubectl delete pod --force --grace-period=0`` mid-cell: the Pod is gone from the API at
    once (the kubelet kills its containers afterwards). Retried; the retry's verdict stands."""
    name = await submit(real, [SLOW_FIRST, "print('done')"])
    await in_cell(real, name, 0)
    first = obj.validation_pod_name(name)
    t0 = time.monotonic()
    await real.kube.request("DELETE", PODS.path(real.ns, first),
                            body={"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
    assert await pod(real, name) is None  # gone at once
    done, evs = await verdict(real, name)
    print(f"{name}: force deletion -> verdict {time.monotonic() - t0:.1f} s")
    check_retried_then_succeeded(name, done, evs, f"The validation Pod {first} ")


# the kubelet reports ErrImagePull at once and ImagePullBackOff only at a later sync of the Pod
# (seen here after more than 12 s): the executor treats both alike (waiting on a pull), so a short
# deadline keeps the test fast
PULL_DEADLINE = 4.0
PULL_WAITING = ("ErrImagePull", "ImagePullBackOff")


@pytest.mark.asyncio
async def test_an_image_pull_that_keeps_failing_is_retried_then_reported_as_infrastructure(real_cluster, tmp_path):
    """A registry that refuses connections: the real kubelet's ErrImagePull (then, at a later
    sync, ImagePullBackOff). That is not "the image does not exist" (which fails at once,
    test_k8s_real_faults.py): the Pod waits image_pull_deadline, the job is retried in a fresh
    Pod, and when the retries are used up it ends InfrastructureFailed naming the pull,
    never a notebook verdict, in seconds."""
    async with real_cluster.engine(tmp_path / "root", real_cluster.env["NBV_REGISTRY"], log=LOG,
                                   engine={"retry_backoff": 0.5, "max_retries": 1},
                                   image_pull_deadline=PULL_DEADLINE) as env:
        bridge = real_cluster.env["NBV_REGISTRY_HOST"].rsplit(".", 1)[0] + ".1"  # the node: no registry there
        image = f"{bridge}:1/nbv/nosuch:1"
        t0 = time.monotonic()
        name = await submit(env, ["print(1)"], containerImage=image)

        async def pull_waiting():
            st = (await pod(env, name) or {}).get("status") or {}  # the init container pulls first
            for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
                w = (cs.get("state") or {}).get("waiting") or {}
                if w.get("reason") in PULL_WAITING:
                    return w
            return None

        waiting = await wait_async(pull_waiting, WAIT, f"the first Pod of {name} waiting on its pull", interval=0.2)
        assert image in waiting.get("message", ""), waiting
        done, evs = await verdict(env, name)
        took = time.monotonic() - t0
        print(f"{name}: ImagePullBackOff -> InfrastructureFailed in {took:.1f} s")
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.FAILED, INFRA), json.dumps(st, indent=1)
    assert st["message"].startswith(f"The validation Pod could not pull {image}: "), st["message"]
    assert f"for {PULL_DEADLINE:g} s)" in st["message"] and st["message"].endswith("(after 1 retry)"), st["message"]
    assert st.get("failedCellIndex") is None and not st.get("results"), st
    assert reasons(evs) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, RETRIED, INFRA], evs
    assert evs[2]["type"] == "Warning" and "could not pull" in evs[2]["note"], evs[2]
    assert took < WAIT


@pytest.mark.asyncio
async def test_a_cancel_during_validation_ends_cancelled_and_the_kubelet_stops_the_pod(real):
    """A cancel while a cell runs: the job ends Failed/Cancelled at once (no verdict from the
    stopped runner, no retry), and the real kubelet stops and removes the Pod."""
    name = await submit(real, [SLOW_FIRST, "print('never')"])
    await in_cell(real, name, 0)
    t0 = time.monotonic()
    await real.engine.request_cancel(name)
    done, evs = await verdict(real, name, 30)
    print(f"{name}: cancel -> Cancelled {time.monotonic() - t0:.1f} s")
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.CANCELLED), json.dumps(st, indent=1)
    assert st.get("failedCellIndex") is None and not st.get("validationRetries"), st
    assert reasons(evs) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, Reason.CANCELLED], evs
    # the kubelet confirms the deletion: the Pod goes (its runner stopped), none is made for a retry
    await wait_async(lambda: _gone(real, name), 60, f"the Pod of {name} stopped and removed", interval=0.5)
    assert await pod(real, name, 1) is None
    assert (await status(real, name))["phase"] == Phase.FAILED  # nothing wrote over the verdict


async def _gone(env, name: str) -> bool:
    return await pod(env, name) is None


MIB = 2**20


@pytest.mark.asyncio
async def test_pod_config_reaches_the_pod_and_what_its_kernel_sees(real):
    """podConfig env, resources, nodeSelector and tolerations: in the Pod's spec as the API
    server stored it, and in the kernel: the variable in its environment, the limits in its
    cgroups (v1 on this node: memory.limit_in_bytes, cpu.cfs_quota_us)."""
    cells = [
        "import os\nassert os.environ.get('NBV_PROBE') == 'seen', dict(os.environ)",
        "limit = int(open('/sys/fs/cgroup/memory/memory.limit_in_bytes').read())\n"
        f"assert limit == 300 * {MIB}, limit",
        "quota = int(open('/sys/fs/cgroup/cpu/cpu.cfs_quota_us').read())\n"
        "period = int(open('/sys/fs/cgroup/cpu/cpu.cfs_period_us').read())\n"
        "assert quota * 2 == period, (quota, period)",
    ]
    tol = [{"key": "nbv.test/dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    name = await submit(real, cells, env=[{"name": "NBV_PROBE", "value": "seen"}],
                        resources={"requests": {"cpu": "100m", "memory": "64Mi"},
                                   "limits": {"cpu": "500m", "memory": "300Mi"}},
                        nodeSelector={"kubernetes.io/hostname": "localhost"}, tolerations=tol)
    done, evs = await verdict(real, name)
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED), json.dumps(st, indent=1)
    assert reasons(evs) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, Reason.VALIDATION_SUCCEEDED], evs
    p = await pod(real, name)
    assert p is not None
    (ctr,) = p["spec"]["containers"]
    assert ctr["resources"] == {"requests": {"cpu": "100m", "memory": "64Mi"},
                                "limits": {"cpu": "500m", "memory": "300Mi"}}, ctr["resources"]
    # the job's variables are the kernel's (the runner's command), not the runner's own environment
    assert "--kernel-env=NBV_PROBE=seen" in ctr["command"] and "NBV_PROBE" not in {v["name"] for v in ctr["env"]}
    assert p["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "localhost"}
    assert p["spec"]["tolerations"][:1] == tol and p["spec"]["nodeName"] == "localhost"
    assert p["status"]["qosClass"] == "Burstable"


@pytest.mark.asyncio
async def test_a_kernel_past_its_memory_limit_fails_the_job_naming_the_limit(real):
    """limits.memory holds: the kernel that allocates past it is killed by the node's OOM
    killer. The job fails (the notebook's own doing, not retried) with a reason that names
    memory, never as infrastructure and never a hang."""
    name = await submit(real, ["x = 1", f"blob = bytearray({400 * MIB})\nblob[::4096] = b'x' * len(blob[::4096])",
                               "print('never')"],
                        resources={"limits": {"memory": "200Mi"}})
    done, evs = await verdict(real, name)
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.VALIDATION_FAILED), json.dumps(st, indent=1)
    assert st["message"] == ("The validation container ran out of memory (OOMKilled), exit code 1: the memory "
                             "limit was exceeded."), st["message"]
    assert not st.get("validationRetries"), st
    assert reasons(evs)[:2] == [Reason.ACCEPTED, Reason.VALIDATION_STARTED] and len(evs) == 3, evs
    assert evs[2]["reason"] == st["reason"]
