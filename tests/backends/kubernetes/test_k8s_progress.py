"""status.progress on Kubernetes: the validation Pod's runner prints its progress
records (``--progress``) and the executor reads the Pod's log as it grows
(k8s/progress.py), feeding the same ProgressReader as the local backend.

The log stand-in answers as the real kubelet does (checked on the real node of
tools/cluster: ``timestamps=true`` prefixes RFC 3339 times with nanoseconds,
trailing zeros trimmed; ``sinceTime`` counts in whole seconds; ``limitBytes``
cuts mid-line; a long line keeps one timestamp). The protocol tests run the
real runner; the wiring test runs the engine and the backend on the real
kube-apiserver harness with the stand-in for the kubelet's log.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import subprocess
import sys
import time

import pytest
from helpers import plan_for, write_notebook
from k8s_support import NOBUILD, make_env, summary, wait_for, wait_object

import jupyter_nbvalidation.backends.kubernetes.objects as obj
import jupyter_nbvalidation.backends.kubernetes.results as res
from jupyter_nbvalidation.backends.kubernetes.client import PODS
from jupyter_nbvalidation.backends.kubernetes.progress import PodProgress, container_instance, parse_stamp
from jupyter_nbvalidation.core.model import Phase
from jupyter_nbvalidation.runner.protocol import (
    PROGRESS_PREFIX,
    TERMINATION_LOG_LIMIT,
    ProgressReader,
    parse_log,
    parse_summary,
    progress_line,
)

try:
    import k8s_harness as harness
except ImportError:  # pragma: no cover
    from tests import k8s_harness as harness

T0 = dt.datetime(2026, 12, 1, 15, 54, 30, tzinfo=dt.timezone.utc)


def stamp(ns: int) -> str:
    """``T0`` + ``ns`` nanoseconds as the kubelet writes it (Go's RFC3339Nano: zeros trimmed)."""
    seconds, nanos = divmod(ns, 10**9)
    whole = (T0 + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")
    return whole + (("." + f"{nanos:09d}".rstrip("0")) if nanos else "") + "Z"


class KubeletLog:
    """A container's log as the kubelet serves it (``GET pods/{name}/log``)."""

    def __init__(self) -> None:
        self.lines: list[tuple[int, str]] = []  # (ns after T0, text)
        self.queries: list[dict] = []
        self.unreadable = False  # 404 / 400 "waiting to start": the backend's read gives None

    def write(self, at_ns: int, *texts: str) -> None:
        self.lines += [(at_ns, t) for t in texts]

    def rotate(self, keep: int) -> None:
        """The kubelet rotated the file: only the last ``keep`` lines are served."""
        self.lines = self.lines[-keep:]

    def plain(self) -> str:
        return "".join(t + "\n" for _, t in self.lines)

    async def __call__(self, query: dict) -> str | None:
        self.queries.append(dict(query))
        await asyncio.sleep(0)
        if self.unreadable:
            return None
        since = None
        if "sinceTime" in query:  # whole seconds, as the API server passes it on
            parsed = dt.datetime.strptime(query["sinceTime"], "%Y-%m-%dT%H:%M:%S%z")
            since = int((parsed - T0).total_seconds()) * 10**9
        stamped = query.get("timestamps") == "true"
        out = "".join((f"{stamp(at)} " if stamped else "") + t + "\n"
                      for at, t in self.lines if since is None or at >= since)
        data = out.encode()
        if "limitBytes" in query:
            data = data[: int(query["limitBytes"])]
        return data.decode("utf-8", "replace")


def pod(container_id: str = "containerd://aaa", uid: str = "u1", started: bool = True) -> dict:
    cs = {"name": obj.RUNNER_CONTAINER, "containerID": container_id, "state": {"running": {}}} if started else \
        {"name": obj.RUNNER_CONTAINER, "state": {"waiting": {"reason": "ContainerCreating"}}}
    return {"metadata": {"name": "nvj-x-validate", "namespace": "ns", "uid": uid},
            "status": {"phase": "Running" if started else "Pending", "containerStatuses": [cs]}}


def plan(total: int) -> str:
    return progress_line({"event": "plan", "cellsTotal": total})


def start(i: int) -> str:
    return progress_line({"event": "start", "cellIndex": i, "time": "2026-12-01T15:54:30.000Z"})


def end(i: int, status: str = "Success", seconds: str = "0.500s") -> str:
    return progress_line({"event": "end", "cellIndex": i, "status": status, "executionTime": seconds})


async def read(p: PodProgress, log: KubeletLog, the_pod: dict | None = None, limit: int | None = None) -> bool:
    if limit is None:
        return await p.read(the_pod or pod(), obj.RUNNER_CONTAINER, log)
    return await p.read(the_pod or pod(), obj.RUNNER_CONTAINER, log, limit=limit)


def test_parse_stamp_orders_trimmed_fractions():
    assert parse_stamp("2026-12-01T15:54:30.562419301Z") == ("2026-12-01T15:54:30", 562419301)
    assert parse_stamp("2026-12-01T15:54:30.12Z") == ("2026-12-01T15:54:30", 120000000)
    assert parse_stamp("2026-12-01T15:54:30Z") == ("2026-12-01T15:54:30", 0)
    # as strings ".12Z" sorts after ".123Z"; as stamps it comes before
    assert parse_stamp("2026-12-01T15:54:30.12Z") < parse_stamp("2026-12-01T15:54:30.123Z")
    for bad in ("NBVALIDATION-PROGRESS", "2026-12-01 15:54:30Z", "2026-12-01T15:54:30.x1Z", ""):
        assert parse_stamp(bad) is None


@pytest.mark.asyncio
async def test_a_growing_log_gives_each_record_once():
    log, p = KubeletLog(), PodProgress()
    log.write(0, "nbvalidation runner starting", plan(3), start(1))
    assert await read(p, log) is True
    assert p.snapshot() == {"cellsTotal": 3, "cellsDone": 0, "currentCellIndex": 1,
                            "currentCellStartedAt": "2026-12-01T15:54:30.000Z", "cells": []}
    assert "sinceTime" not in log.queries[0] and log.queries[0]["timestamps"] == "true"
    assert await read(p, log) is False  # nothing new: nothing fed twice
    # more lines in the same second, two with the very same timestamp
    log.write(400_000_000, end(1), start(2))
    log.write(400_000_000, "kernel noise")
    assert await read(p, log) is True
    assert log.queries[-1]["sinceTime"] == "2026-12-01T15:54:30Z"  # whole seconds
    log.write(400_000_000, end(2, "Failure"))  # a 4th line at that same nanosecond
    log.write(2_000_000_000, start(3), end(3))
    assert await read(p, log) is True
    assert await read(p, log) is False
    snap = p.snapshot()
    assert snap["cellsDone"] == 3 and snap["currentCellIndex"] is None
    assert [(c["cellIndex"], c["status"]) for c in snap["cells"]] == [(1, "ok"), (2, "error"), (3, "ok")]
    whole = ProgressReader()
    whole.feed_text(log.plain())
    assert snap == whole.snapshot()  # the same as the local backend's reader over the same lines


@pytest.mark.asyncio
async def test_a_pod_not_started_is_not_read_and_an_unreadable_log_changes_nothing():
    log, p = KubeletLog(), PodProgress()
    log.write(0, plan(2))
    assert await read(p, log, pod(started=False)) is False
    assert log.queries == [] and p.snapshot() is None  # no request before the container exists
    log.unreadable = True  # 404 (pod gone for now), 400 (waiting to start), an API server away
    assert await read(p, log) is False and p.snapshot() is None
    log.unreadable = False
    assert await read(p, log) is True and p.snapshot()["cellsTotal"] == 2


@pytest.mark.asyncio
async def test_rotation_drops_old_lines_never_new_ones():
    log, p = KubeletLog(), PodProgress()
    log.write(0, plan(4), start(0))
    log.write(1_000_000_000, end(0), start(1))
    await read(p, log)
    log.write(3_000_000_000, end(1), start(2))
    log.rotate(keep=2)  # the kubelet rotated: only the newest file is served
    await read(p, log)
    log.write(5_000_000_000, end(2))
    log.rotate(keep=1)
    await read(p, log)
    snap = p.snapshot()
    assert snap["cellsTotal"] == 4 and [c["cellIndex"] for c in snap["cells"]] == [0, 1, 2]
    # at the end: the whole log lost the start of the run, so what was read stands
    assert p.final(log.plain()) == snap


@pytest.mark.asyncio
async def test_a_restarted_container_starts_afresh():
    log, p = KubeletLog(), PodProgress()
    log.write(0, plan(2), start(0), end(0), start(1))
    await read(p, log, pod("containerd://first"))
    assert p.snapshot()["cellsDone"] == 1
    again = KubeletLog()  # a new container (or a new Pod of that name): a new log, a new run
    again.write(9_000_000_000, plan(2), start(0))
    assert await read(p, again, pod("containerd://second")) is True
    assert "sinceTime" not in again.queries[0]  # read from its start
    assert p.snapshot()["cellsDone"] == 0 and p.snapshot()["currentCellIndex"] == 0
    assert await read(p, again, pod("containerd://second", uid="u2")) is True  # a new Pod: afresh too
    assert container_instance(pod("containerd://x", uid="u9"), obj.RUNNER_CONTAINER) == "u9/containerd://x"


@pytest.mark.asyncio
async def test_a_line_longer_than_a_read_is_stepped_over():
    log, p = KubeletLog(), PodProgress()
    log.write(0, plan(2), start(0))
    await read(p, log, limit=1000)
    log.write(1_000_000_000, "x" * 5000)  # a kernel's output: longer than a read
    log.write(2_000_000_000, end(0), start(1))
    for _ in range(4):
        await read(p, log, limit=1000)
    log.write(3_000_000_000, end(1))
    for _ in range(3):
        await read(p, log, limit=1000)
    snap = p.snapshot()
    assert snap["cellsDone"] == 2 and snap["currentCellIndex"] is None
    assert all(int(q["limitBytes"]) == 1000 for q in log.queries)


@pytest.mark.asyncio
async def test_more_of_one_second_than_a_read_holds_goes_on_and_final_repairs_it():
    log, p = KubeletLog(), PodProgress()
    log.write(0, plan(3), start(0))
    await read(p, log, limit=400)
    log.write(1_000_000_000, *(["y" * 90] * 10), end(0))  # a burst of one second, then a record
    log.write(2_000_000_000, start(1), end(1))
    for _ in range(6):
        await read(p, log, limit=400)
    assert [c["cellIndex"] for c in p.snapshot()["cells"]] == [1]  # end(0) was in the burst: stepped over
    final = p.final(log.plain())  # the whole log, read for the verdict, holds the run from its start
    assert [c["cellIndex"] for c in final["cells"]] == [0, 1] and final["cellsDone"] == 2


# -- the real runner: records and results on one log ---------------------------------------


@pytest.fixture(scope="module")
def runner_log(tmp_path_factory):
    """The real runner as the Pod runs it (--progress, --print-executed, --termination-log)."""
    d = tmp_path_factory.mktemp("runner")
    nb = write_notebook(d / "nb.ipynb", ["# md\nTitle", "x = 1", "print('y' * 300)", "x / 0", "print(3)"])
    term = d / "termination"
    p = subprocess.run([sys.executable, "-m", "jupyter_nbvalidation.runner", str(nb), "--result", str(d / "r.json"),
                        "--executed", str(d / "out.ipynb"), "--termination-log", str(term), "--progress",
                        "--print-executed"], capture_output=True, text=True, timeout=180)
    return p.returncode, term.read_text(), p.stdout + p.stderr


@pytest.mark.asyncio
async def test_progress_records_leave_the_result_protocol_whole(runner_log):
    code, term, text = runner_log
    assert code == 1
    assert any(line.startswith(PROGRESS_PREFIX) for line in text.splitlines())
    full, executed = parse_log(text)
    assert full is not None and full["failedCellIndex"] == 3 and executed
    assert res.decode_executed(executed)["cells"]
    assert len(term.encode()) <= TERMINATION_LOG_LIMIT and parse_summary(term)["failedCellIndex"] == 3
    outcome = res.PodOutcome(True, exit_code=1, summary=parse_summary(term))
    assert res.verdict(outcome, text) == full  # the full result, not the summary
    # the Pod's log, timestamped and read in pieces, gives what the local backend reads
    log, p = KubeletLog(), PodProgress()
    for i, line in enumerate(text.splitlines()):
        log.write(i * 300_000_000, line)
    lines, log.lines = log.lines, []
    for line in lines:
        log.lines.append(line)
        await read(p, log, limit=2000)
    local = ProgressReader()
    local.feed(text.encode())
    assert p.snapshot() == local.snapshot() == p.final(text)
    assert local.snapshot()["cellsTotal"] == 4 and local.snapshot()["cellsDone"] == 3


# -- the engine and the backend on the API server harness ----------------------------------


@pytest.mark.k8s
@pytest.mark.asyncio
async def test_status_progress_advances_while_the_pod_runs(kube_apiserver, k8s_namespace, tmp_path, admin, aio_admin):
    env = make_env(kube_apiserver, k8s_namespace, tmp_path / "root", progress_interval=0.2)
    write_notebook(env.root / "nb.ipynb", ["x = 1", "y = 2", "z = 3"])
    log = KubeletLog()
    reads: list[dict] = []

    async def container_log(the_pod, container, **query):  # the kubelet's part
        assert container == obj.RUNNER_CONTAINER
        reads.append(the_pod)
        return await log(query)

    env.backend.children.container_log = container_log
    await env.engine.start()
    try:
        job = await env.submit(notebook={"path": "nb.ipynb"}, **NOBUILD)
        name = job["metadata"]["name"]
        pod_name = obj.validation_pod_name(name)
        created = await wait_object(admin, PODS.path(env.ns, pod_name))
        command = created["spec"]["containers"][0]["command"]
        assert "--progress" in command
        await asyncio.sleep(0.5)
        assert reads == []  # not started: never read
        await harness.start_pod(aio_admin, env.ns, pod_name)

        async def progress() -> dict | None:
            st = (await env.store.get(name)).get("status") or {}
            assert st.get("phase") == Phase.VALIDATION_RUNNING, st
            return st.get("progress")

        log.write(0, plan(3), start(0))
        assert (await wait_for(progress, what="first progress"))["currentCellIndex"] == 0
        log.write(1_000_000_000, end(0), start(1))
        await wait_for(lambda: _done(progress, 1), what="cell 0 done")
        t0, n0 = time.monotonic(), len(reads)
        log.write(2_000_000_000, end(1), start(2))
        p = await wait_for(lambda: _done(progress, 2), what="cell 1 done")
        assert p["currentCellIndex"] == 2 and p["updatedAt"]
        await asyncio.sleep(1.0)
        # at most one read per progress_interval (0.2 s), give or take the reconcile it rides on
        assert len(reads) - n0 <= (time.monotonic() - t0) / 0.2 + 3
        log.write(3_000_000_000, end(2), "NBVALIDATION-RESULT {}")
        await harness.complete_pod(aio_admin, env.ns, pod_name, exit_code=0, message=summary(),
                                   container=obj.RUNNER_CONTAINER)
        done = await env.terminal(name)
        st = done["status"]
        assert st["phase"] == Phase.SUCCEEDED
        assert st["progress"]["cellsDone"] == 3 and st["progress"]["currentCellIndex"] is None
        assert [c["cellIndex"] for c in st["progress"]["cells"]] == [0, 1, 2]
    finally:
        await env.engine.stop()


async def _done(progress, n: int) -> dict | None:
    p = await progress()
    return p if p and p["cellsDone"] >= n else None


@pytest.mark.k8s
@pytest.mark.asyncio
async def test_no_progress_when_turned_off(kube_apiserver, k8s_namespace, tmp_path):
    env = make_env(kube_apiserver, k8s_namespace, tmp_path / "root", progress_interval=0)
    write_notebook(env.root / "nb.ipynb", ["x = 1"])
    await env.engine.start()
    try:
        job = await env.submit(notebook={"path": "nb.ipynb"}, **NOBUILD)
        body = env.backend.executor.pod(job, "img", await plan_for(env.backend, job))
        assert "--progress" not in body["spec"]["containers"][0]["command"]
        assert await env.backend.executor.progress(job["metadata"]["uid"], pod()) == (None, None)
    finally:
        await env.engine.stop()
    assert json.dumps(env.backend.executor.settings.progress_interval) == "0.0"

