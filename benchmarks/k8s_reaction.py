"""How fast the Kubernetes backend turns a finished build into a validation Pod,
and how many API requests a job costs. Prints figures; not a test.

    .venv/bin/python benchmarks/k8s_reaction.py [--jobs 60] [--burst 30] [--workers 16]

Starts the test harness's etcd + kube-apiserver (tests/k8s_harness.py; build
the binaries once with tools/testbin/build.sh), then runs an Engine +
KubernetesBackend in this process against it, with a fake Job controller and
the harness's fake kubelet playing the missing components.

For each job: submit (build enabled) -> the fake Job controller finishes the
build Job (builder pod with the digest, then the Job's status writes in the
order of harness.complete_job, the last one setting Complete). t0 is the
moment that last write returned; everything before it happens while nothing
is measured, so the fake components do not compete with the engine for the
event loop during the measurement. Measured:

- "create call": t0 -> the engine's POST of the validation Pod returned;
- "pod seen": t0 -> the Pod's ADDED event reached an independent watch
  (the Pod's creationTimestamp has 1 s resolution, too coarse to use).

Sequential: one job at a time (pure reaction time). Burst: all builds of
``--burst`` jobs finish at once (queueing through ``--workers`` workers).
Requests: every HTTP request the engine's client made (an aiohttp trace),
per job from submit to Succeeded, by verb and resource; long-lived watch
requests are shown apart. The upstream Go operator polls builds every 30 s.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import copy
import logging
import re
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import k8s_harness as harness  # noqa: E402
from helpers import write_notebook  # noqa: E402

import jupyter_nbvalidation.backends.kubernetes.objects as obj  # noqa: E402
from jupyter_nbvalidation.backends.kubernetes.backend import KubernetesBackend  # noqa: E402
from jupyter_nbvalidation.backends.kubernetes.client import JOBS, PODS, connect  # noqa: E402
from jupyter_nbvalidation.engine.engine import Engine  # noqa: E402
from jupyter_nbvalidation.runner import termination_summary  # noqa: E402
from jupyter_nbvalidation.service.jobs import JobService  # noqa: E402

DIGEST = "sha256:" + "0123456789abcdef" * 4
OK = termination_summary({"verdict": "Succeeded", "reason": "ValidationSucceeded", "message": "1 code cell ran",
                          "failedCellIndex": None, "results": [{"cellIndex": 0, "status": "Success"}],
                          "durationSeconds": 0.5})


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


class RequestCounter:
    """An aiohttp trace: every request the engine's client sends."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.trace = aiohttp.TraceConfig()
        self.trace.on_request_start.append(self._start)

    @staticmethod
    def key(method: str, url) -> str:
        path = url.path
        if url.query.get("watch") == "true":
            return f"WATCH {path.rsplit('/', 1)[-1]}"
        parts = path.strip("/").split("/")
        # /api/v1/namespaces/NS/<res>[/name[/sub]]  /apis/G/V/namespaces/NS/<res>[/name[/sub]]
        if "namespaces" in parts:
            i = parts.index("namespaces") + 2
            res = parts[i] if i < len(parts) else "namespaces"
            sub = parts[i + 2] if len(parts) > i + 2 else ""
            named = len(parts) > i + 1
            return f"{method} {res}{'/' + sub if sub else ''}{'' if named or method != 'GET' else ' (list)'}"
        return f"{method} {path}"

    async def _start(self, session, ctx, params) -> None:
        self.counts[self.key(params.method, params.url)] += 1

    def snapshot(self) -> collections.Counter[str]:
        return collections.Counter(self.counts)


class Observer:
    """An independent watch on the namespace's pods: when each appeared."""

    def __init__(self, admin, ns: str):
        self.admin, self.ns = admin, ns
        self.seen: dict[str, float] = {}
        self.waiters: dict[str, asyncio.Event] = collections.defaultdict(asyncio.Event)
        self.task: asyncio.Task | None = None

    async def start(self) -> None:
        rv = (await self.admin.request("GET", PODS.path(self.ns)))["metadata"]["resourceVersion"]
        self.task = asyncio.create_task(self._run(rv))

    async def _run(self, rv: str) -> None:
        async for ev in self.admin.watch(PODS.path(self.ns), {"resourceVersion": rv}, 3600):
            if ev["type"] == "ADDED":
                name = ev["object"]["metadata"]["name"]
                self.seen.setdefault(name, time.perf_counter())
                self.waiters[name].set()

    async def wait(self, name: str, timeout: float = 30) -> float:
        await asyncio.wait_for(self.waiters[name].wait(), timeout)
        return self.seen[name]

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


async def wait_job(admin, ns: str, name: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await admin.request("GET", JOBS.path(ns, name))
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.01)


MERGE = "application/merge-patch+json"


def _cond(ctype: str, reason: str, message: str, now: str) -> dict:
    return {"type": ctype, "status": "True", "lastProbeTime": now, "lastTransitionTime": now,
            "reason": reason, "message": message}


async def build_almost_done(admin, api, ns: str, job_name: str) -> str:
    """The fake Job controller, up to the last step: a builder pod owned by
    the build Job, finished by the fake kubelet with the digest, and the Job's
    first two status writes (the sequence of harness.complete_job)."""
    bj_name = obj.build_job_name(job_name)
    bj = await wait_job(admin, ns, bj_name)
    tmpl = bj["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"{bj_name}-{uuid.uuid4().hex[:5]}", "namespace": ns,
                        "labels": {**tmpl["metadata"]["labels"], "batch.kubernetes.io/job-name": bj_name},
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": bj_name,
                                             "uid": bj["metadata"]["uid"], "controller": True}]},
           "spec": copy.deepcopy(tmpl["spec"])}
    pod = await admin.request("POST", PODS.path(ns), body=pod)
    await harness.complete_pod(api, ns, pod["metadata"]["name"], message=DIGEST, container=obj.BUILD_CONTAINER)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    path = JOBS.path(ns, bj_name, "status")
    await admin.request("PATCH", path, content_type=MERGE, body={"status": {
        "startTime": now, "active": 1, "ready": 0, "terminating": 0, "uncountedTerminatedPods": {}}})
    await admin.request("PATCH", path, content_type=MERGE, body={"status": {
        "active": 0, "ready": 0, "terminating": 0, "succeeded": 1,
        "conditions": [_cond("SuccessCriteriaMet", "CompletionsReached", "Reached expected number", now)]}})
    return now


async def build_complete(admin, ns: str, job_name: str, since: str) -> float:
    """The Job controller's last write: Complete. Returns t0, when it returned."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    await admin.request("PATCH", JOBS.path(ns, obj.build_job_name(job_name), "status"), content_type=MERGE,
                        body={"status": {"completionTime": now, "conditions": [
                            _cond("SuccessCriteriaMet", "CompletionsReached", "Reached expected number", since),
                            _cond("Complete", "CompletionsReached", "Reached expected number", now)]}})
    return time.perf_counter()


async def run(args: argparse.Namespace) -> None:
    etcd, apiserver = harness.find_binaries()
    work = Path(tempfile.mkdtemp(prefix="nbv-bench-k8s-"))
    (work / "logs").mkdir()
    h = harness.KubeApiServer(etcd_bin=etcd, apiserver_bin=apiserver, work_dir=work, log_dir=work / "logs",
                              version=harness.k8s_version())
    await asyncio.to_thread(h.start)
    try:
        await bench(h, args, work)
    finally:
        await asyncio.to_thread(h.stop)


async def bench(h, args: argparse.Namespace, work: Path) -> None:
    ns = await asyncio.to_thread(h.create_namespace)
    root = work / "root"
    write_notebook(root / "nb.ipynb", ["print(1)"])
    counter = RequestCounter()
    backend = KubernetesBackend(namespace=ns, kubeconfig=h.admin_kubeconfig, registry="registry.bench/nbv")
    backend.store.use_client(await connect(h.admin_kubeconfig, trace_configs=[counter.trace]))
    engine = Engine(backend, log=logging.getLogger("bench"), workers=args.workers, resync_period=3600)
    service = JobService(engine, backend, str(root))

    created: dict[str, float] = {}
    original = backend.kube.request

    async def timed_request(method, path, **kw):
        out = await original(method, path, **kw)
        if method == "POST" and path.endswith("/pods") and (kw.get("body") or {}).get("metadata", {}).get(
                "labels", {}).get(obj.COMPONENT_LABEL) == "validation":
            created[out["metadata"]["name"]] = time.perf_counter()
        return out

    backend.kube.request = timed_request  # type: ignore[method-assign]
    spec = {"notebook": {"path": "nb.ipynb"}, "podConfig": {"buildConfig": {"requirements": ["six"]}}}
    admin = await connect(h.admin_kubeconfig)
    api = await h.admin_client()
    observer = Observer(admin, ns)
    await engine.start()
    await observer.start()
    try:
        async def one(measure: bool = True) -> tuple[float, float, str]:
            job = await service.submit(copy.deepcopy(spec))
            name = job["metadata"]["name"]
            since = await build_almost_done(admin, api, ns, name)
            await engine.wait_idle(10)
            t0 = await build_complete(admin, ns, name, since)
            pod_name = obj.validation_pod_name(name)
            seen = await observer.wait(pod_name)
            await harness.complete_pod(api, ns, pod_name, message=OK, container=obj.RUNNER_CONTAINER)
            done = await engine.wait_for_terminal(name, 30)
            assert done["status"]["phase"] == "Succeeded", done["status"]
            await engine.wait_idle(10)
            return created[pod_name] - t0, seen - t0, name

        for _ in range(3):  # warm-up: first CR write, pydantic models of the fake components
            await one()
        await engine.recorder.flush()

        before = counter.snapshot()
        seq = [await one() for _ in range(args.jobs)]
        await engine.recorder.flush()
        per_job = counter.snapshot() - before

        # burst: all builds finish at once
        jobs = [await service.submit(copy.deepcopy(spec)) for _ in range(args.burst)]
        names = [j["metadata"]["name"] for j in jobs]
        sinces = [await build_almost_done(admin, api, ns, n) for n in names]
        await engine.wait_idle(10)
        t0s = await asyncio.gather(*(build_complete(admin, ns, n, t) for n, t in zip(names, sinces, strict=True)))
        burst = []
        for n, t0 in zip(names, t0s, strict=True):
            seen = await observer.wait(obj.validation_pod_name(n))
            burst.append((created[obj.validation_pod_name(n)] - t0, seen - t0))
        for n in names:
            await harness.complete_pod(api, ns, obj.validation_pod_name(n), message=OK, container=obj.RUNNER_CONTAINER)
        for n in names:
            await engine.wait_for_terminal(n, 60)
        await engine.wait_idle(10)
        await engine.recorder.flush()
        stats = (engine.recorder.posted, engine.recorder.failed, engine.recorder.dropped, engine.errors)
    finally:
        await observer.stop()
        await engine.stop()
        await api.close()
        await admin.close()
        await backend.kube.close()

    def row(label: str, values: list[float]) -> str:
        ms = [v * 1000 for v in values]
        return (f"  {label:<44} {pct(ms, 50):8.1f} {pct(ms, 90):8.1f} {pct(ms, 99):8.1f} {max(ms):8.1f}")

    print(f"\nk8s reaction: kube-apiserver {h.version} (test harness, loopback), engine workers={args.workers}, "
          f"Python {sys.version.split()[0]}")
    print(f"  {'latency from build Job Complete (ms)':<44} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8}")
    print(row(f"sequential ({args.jobs} jobs): pod create call returned", [a for a, _, _ in seq]))
    print(row(f"sequential ({args.jobs} jobs): pod ADDED seen by a watch", [b for _, b, _ in seq]))
    print(row(f"burst ({args.burst} builds at once): pod create call", [a for a, _ in burst]))
    print(row(f"burst ({args.burst} builds at once): pod ADDED seen", [b for _, b in burst]))
    print("  (the upstream operator polls builds every 30 s: 0-30 s, 15 s on average)")
    print(f"  events posted {stats[0]}, failed {stats[1]}, dropped {stats[2]}; reconcile errors {stats[3]}\n")
    watches = {k: v for k, v in per_job.items() if k.startswith("WATCH")}
    plain = {k: v for k, v in per_job.items() if not k.startswith("WATCH")}
    total = sum(plain.values())
    print(f"API requests per job, submit -> Succeeded with a build ({args.jobs} jobs): "
          f"{total / args.jobs:.2f} (+ {sum(watches.values())} watch renewals in total)")
    for k, v in sorted(plain.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {re.sub(' +', ' ', k):<44} {v / args.jobs:6.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=60)
    p.add_argument("--burst", type=int, default=30)
    p.add_argument("--workers", type=int, default=16)  # c.NBValidation.workers default
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
