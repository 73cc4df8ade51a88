"""HA failover with the API server down, on the REAL single-node cluster (tests/real_cluster.py,
``bash tools/cluster/up.sh``); test_k8s_ha.py proves it against the harness's stand-ins.

Two engines with the Kubernetes backend (in this process) share one namespace: one holds the
Lease and reconciles. Four validations run in real Pods (two that pass, two whose cell fails)
when the test kills the cluster's kube-apiserver (SIGKILL to the process tools/cluster/up.sh
started; etcd, the kubelet and the Pods go on). Both engines report the outage on /health and
still serve the jobs they know. The leader then dies (stopped) while the API server is down,
and the validations finish meanwhile. The API server is started again with the same command
line (its PID file updated, so tools/cluster/down.sh stops the new one); the other engine takes
the Lease and ends every job with the notebook's own verdict: no retry, no second Pod, each
transition's Event once.

Marker ``alone`` (tests/conftest.py ALONE_MODULES): it stops the API server every other
real-node test uses, so lane K runs it after them, without ``-n``. The API server is started
again whatever happens (``finally``).

Run: ``bash tools/cluster/up.sh && .venv/bin/python -m pytest tests/backends/kubernetes/test_k8s_real_ha.py``
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import AsyncIterator

import pytest
from helpers import wait, wait_async, write_notebook

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.backends.kubernetes.client import PODS
from jupyter_nbvalidation.core.model import Phase, Reason
from jupyter_nbvalidation.engine.engine import Engine
from jupyter_nbvalidation.service.jobs import JobService

pytestmark = pytest.mark.cluster

LOG = logging.getLogger("nbvalidation.test.real.ha")
LEASE = {"lease_duration": 4.0, "renew_deadline": 3.0, "retry_period": 0.5}
SLOW = 12  # seconds of each notebook's slow cell: the outage and the leader's death land in it
WAIT = 120.0


class ApiServer:
    """The cluster's kube-apiserver process (tools/cluster/up.sh's PID file), stopped and
    started again with the command line it runs with."""

    def __init__(self, state: Path, kubectl):
        self.pidfile = state / "run" / "kube-apiserver.pid"
        self.log = state / "logs" / "kube-apiserver.log"
        self.kubectl = kubectl
        pid = int(self.pidfile.read_text())
        self.argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
        assert self.argv and self.argv[0].endswith(b"kube-apiserver"), self.argv

    def _pid(self) -> int:
        return int(self.pidfile.read_text())

    @staticmethod
    def _alive(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
        except FileNotFoundError:
            return False

    def stop(self) -> None:
        """SIGKILL, as a crash or the loss of its machine (a SIGTERM drains for 60 s first)."""
        pid = self._pid()
        os.kill(pid, signal.SIGKILL)
        wait(lambda: not self._alive(pid), 30, f"kube-apiserver ({pid}) to exit")

    def start(self) -> None:
        """As up.sh's start_bg: its own session, the log appended, the PID in the PID file
        (``sh`` writes its own PID, then execs the server in its place)."""
        with open(self.log, "ab") as out:
            subprocess.run(["setsid", "-f", "sh", "-c", 'echo $$ > "$0"; exec "$@"', str(self.pidfile), *self.argv],
                           stdin=subprocess.DEVNULL, stdout=out, stderr=out, check=True, timeout=30)
        wait(lambda: self.kubectl("get", "--raw", "/readyz", check=False).stdout.strip() == "ok", 180,
             "kube-apiserver to be ready again")

    def node_ready(self) -> bool:
        """The node Ready and without the unreachable taint (the node lifecycle controller's,
        when the kubelet could not renew its Lease for its grace period): the tests after this
        one schedule Pods."""
        p = self.kubectl("get", "node", "localhost", "-o", "json", check=False)
        if p.returncode:
            return False
        node = json.loads(p.stdout)
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])
        return ready and not any(t["key"].startswith("node.kubernetes.io/") for t in node["spec"].get("taints") or [])

    @property
    def running(self) -> bool:
        return self._alive(self._pid())


@contextlib.asynccontextmanager
async def engine(cluster, ns: str, root: Path) -> AsyncIterator[SimpleNamespace]:
    backend = cluster.backend(ns, cluster.env["NBV_REGISTRY"], **LEASE)
    eng = Engine(backend, log=LOG, resync_period=3600)
    await eng.start()
    try:
        yield SimpleNamespace(engine=eng, backend=backend, service=JobService(eng, backend, str(root)))
    finally:
        if eng.running:
            await eng.stop()


async def phase_of(e, name: str) -> str:
    return ((await e.backend.store.get(name)).get("status") or {}).get("phase", "")


@pytest.mark.asyncio
async def test_the_leader_dies_while_the_api_server_is_down_and_the_other_finishes_every_job(real_cluster, tmp_path):
    cluster = real_cluster
    apiserver = ApiServer(Path(cluster.env["NBV_CLUSTER_STATE"]), cluster.kubectl)
    ns = cluster.namespace()
    root = tmp_path / "root"
    root.mkdir()
    notebooks = {}
    for i, fails in enumerate((False, True, False, True)):
        nb = f"nb{i}.ipynb"
        write_notebook(root / nb, ["import time", f"time.sleep({SLOW})", "1 / 0" if fails else "print('ok')"])
        notebooks[nb] = fails
    async with engine(cluster, ns, root) as a, engine(cluster, ns, root) as b:
        async def one_leader():
            lead = [e for e in (a, b) if e.engine.leading.is_set()]
            return lead[0] if len(lead) == 1 else None

        leader = await wait_async(one_leader, 30, "exactly one leader", interval=0.1)
        follower = b if leader is a else a
        jobs = {}
        for nb, fails in notebooks.items():
            job = await follower.service.submit({"notebook": {"path": nb}, "podConfig": {"buildConfig": {"enabled": False}}})
            jobs[job["metadata"]["name"]] = fails

        async def all_in_slow_cell():
            for name in jobs:
                st = (await leader.backend.store.get(name)).get("status") or {}
                if st.get("phase") != Phase.VALIDATION_RUNNING or (st.get("progress") or {}).get("currentCellIndex") != 1:
                    return False
            return True

        await wait_async(all_in_slow_cell, WAIT, "every job in its slow cell", interval=0.2)
        t0 = time.monotonic()
        try:
            await asyncio.to_thread(apiserver.stop)
            down_at = time.monotonic()

            async def outage_on_health():
                hs = [await e.backend.health() for e in (a, b)]
                return hs if all(not h["api"]["apiReachable"] and not h["usable"] for h in hs) else None

            hs = await wait_async(outage_on_health, 30, "the outage on both engines' /health", interval=0.2)
            seen_at = time.monotonic()
            assert all("unreachable" in h["problem"] for h in hs), [h["problem"] for h in hs]
            assert all(h["networkPolicy"]["installed"] is None for h in hs), hs  # not asked meanwhile
            listed, _ = await follower.backend.store.list_jobs()  # the last known state is still served
            assert {j["metadata"]["name"] for j in listed} == set(jobs)
            await leader.engine.stop()  # the leader dies during the outage
            stopped_at = time.monotonic()
            print(f"stop {down_at - t0:.1f} s; outage on /health {seen_at - down_at:.1f} s; "
                  f"leader stopped {stopped_at - seen_at:.1f} s")
            # the validations end meanwhile (the kubelet runs them without the API server)
            await asyncio.sleep(max(0.0, SLOW + 2 - (time.monotonic() - down_at)))
        finally:
            if not apiserver.running:
                await asyncio.to_thread(apiserver.start)
            up_at = time.monotonic()
            await wait_async(lambda: asyncio.to_thread(apiserver.node_ready), 120, "the node Ready again", interval=1)
        back = time.monotonic()
        await wait_async(lambda: asyncio.sleep(0, follower.engine.leading.is_set()), 60,
                         "the other engine to take the Lease", interval=0.1)
        took_lease = time.monotonic() - back
        done = {name: await follower.engine.wait_for_terminal(name, WAIT) for name in jobs}
        await follower.engine.wait_idle(30)
        await follower.engine.recorder.flush()
        print(f"API server down {up_at - t0:.1f} s (its restart included); the node Ready {back - up_at:.1f} s "
              f"later; then the Lease taken in {took_lease:.1f} s, all verdicts in {time.monotonic() - back:.1f} s")
        for name, fails in jobs.items():
            st = done[name]["status"]
            if fails:
                assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.VALIDATION_FAILED), json.dumps(st, indent=1)
                assert st["failedCellIndex"] == 2 and st["message"] == "Cell 3 raised ZeroDivisionError: division by zero"
            else:
                assert (st["phase"], st["reason"]) == (Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED), json.dumps(st, indent=1)
            assert not st.get("validationRetries"), st
            evs = sorted(await follower.backend.store.list_events(done[name]), key=lambda e: e.get("eventTime") or "")
            final = Reason.VALIDATION_FAILED if fails else Reason.VALIDATION_SUCCEEDED
            assert [e["reason"] for e in evs] == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, final], evs
            pods = (await follower.backend.kube.request("GET", PODS.path(ns), query={
                "labelSelector": f"nbvalidation.dev/job={name},nbvalidation.dev/component=validation"}))["items"]
            assert [p["metadata"]["name"] for p in pods] == [obj.validation_pod_name(name)], pods
