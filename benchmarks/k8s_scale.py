"""300 jobs submitted at once against a real kube-apiserver: do they all get
through, and at what cost? Prints figures; not a test.

    .venv/bin/python benchmarks/k8s_scale.py [--jobs 300] [--workers 16] [--concurrency 32]

Starts the test harness's etcd + kube-apiserver, runs an Engine +
KubernetesBackend (the server side: informers, leader election, event
recorder) in this process, and plays the Job controller and the kubelet
from the same process (bounded by --concurrency): every build Job gets a
builder pod that finishes with a digest and the Job's status writes in the
1.35 order; every validation pod is finished with a passing summary.

Reported: total time from the first submit to the last terminal phase; API
requests per job made by the server's client (an aiohttp trace; watches
apart); Events per job vs. transitions per job (must be equal); the peak
RSS of this process (server + fake controllers: an upper bound for the
server); the reaction latency = from the build Job's final status write
returning to the engine's POST of the validation Pod returning, p50/p99,
under that load.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import copy
import logging
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import k8s_harness as harness  # noqa: E402
from helpers import write_notebook  # noqa: E402
from k8s_reaction import DIGEST, OK, RequestCounter, pct  # noqa: E402

import jupyter_nbvalidation.backends.kubernetes.objects as obj  # noqa: E402
from jupyter_nbvalidation.backends.kubernetes.backend import KubernetesBackend  # noqa: E402
from jupyter_nbvalidation.backends.kubernetes.client import EVENTS, JOBS, PODS, KubeApiError, connect  # noqa: E402
from jupyter_nbvalidation.core.model import Phase  # noqa: E402
from jupyter_nbvalidation.engine.engine import Engine  # noqa: E402
from jupyter_nbvalidation.service.jobs import JobService  # noqa: E402


async def wait_get(kube, path: str, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    pause = 0.05
    while True:
        try:
            return await kube.request("GET", path)
        except KubeApiError as e:
            if e.status != 404 or time.monotonic() > deadline:
                raise
        await asyncio.sleep(pause)
        pause = min(1.0, pause * 1.5)


async def bench(h, args) -> None:
    ns = await asyncio.to_thread(h.create_namespace)
    work = Path(tempfile.mkdtemp(prefix="nbv-scale-"))
    write_notebook(work / "root" / "nb.ipynb", ["print(1)"])
    counter = RequestCounter()
    backend = KubernetesBackend(namespace=ns, kubeconfig=h.admin_kubeconfig, registry="registry.bench/nbv",
                                default_build_strategy="job")
    backend.store.use_client(await connect(h.admin_kubeconfig, trace_configs=[counter.trace]))
    engine = Engine(backend, log=logging.getLogger("bench"), workers=args.workers, resync_period=3600)
    service = JobService(engine, backend, str(work / "root"))
    pod_created: dict[str, float] = {}
    original = backend.kube.request

    async def timed(method, path, **kw):
        out = await original(method, path, **kw)
        if method == "POST" and path.endswith("/pods"):
            pod_created[out["metadata"]["name"]] = time.perf_counter()
        return out

    backend.kube.request = timed
    admin = await connect(h.admin_kubeconfig, pool_size=args.concurrency + 8)
    api = await h.admin_client()
    await engine.start()
    sem = asyncio.Semaphore(args.concurrency)
    build_done: dict[str, float] = {}

    async def controller(name: str) -> None:
        bj_name = obj.build_job_name(name)
        bj = await wait_get(admin, JOBS.path(ns, bj_name))
        async with sem:
            tmpl = bj["spec"]["template"]
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": f"{bj_name}-{uuid.uuid4().hex[:5]}", "namespace": ns,
                                "labels": {**tmpl["metadata"]["labels"], "batch.kubernetes.io/job-name": bj_name},
                                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": bj_name,
                                                     "uid": bj["metadata"]["uid"], "controller": True}]},
                   "spec": copy.deepcopy(tmpl["spec"])}
            pod = await admin.request("POST", PODS.path(ns), body=pod)
            await harness.complete_pod(api, ns, pod["metadata"]["name"], message=DIGEST,
                                       container=obj.BUILD_CONTAINER)
            await harness.complete_job(api, ns, bj_name)
            build_done[name] = time.perf_counter()
        vp = obj.validation_pod_name(name)
        await wait_get(admin, PODS.path(ns, vp))
        async with sem:
            await harness.complete_pod(api, ns, vp, message=OK, container=obj.RUNNER_CONTAINER)

    before = counter.snapshot()
    t0 = time.perf_counter()
    jobs = await asyncio.gather(*(service.submit({"notebook": {"path": "nb.ipynb"}}) for _ in range(args.jobs)))
    names = [j["metadata"]["name"] for j in jobs]
    t_submitted = time.perf_counter() - t0
    await asyncio.gather(*(controller(n) for n in names))
    done = await asyncio.gather(*(engine.wait_for_terminal(n, 600) for n in names))
    total = time.perf_counter() - t0
    await engine.wait_idle(60)
    await engine.recorder.flush()
    used = counter.snapshot() - before
    server_kube = backend.kube
    await engine.stop()
    await server_kube.close()

    phases = collections.Counter(j["status"]["phase"] for j in done)
    transitions = sum(len(j["status"]["transitions"]) for j in done)
    events, cont = [], None
    while True:
        page = await admin.request("GET", EVENTS.path(ns), query={"limit": 500, "continue": cont})
        events += page["items"]
        cont = page["metadata"].get("continue")
        if not cont:
            break
    uids = {j["metadata"]["uid"] for j in done}
    ours = [e for e in events if e["regarding"]["uid"] in uids]
    per = collections.Counter(e["regarding"]["uid"] for e in ours)
    mismatched = sum(1 for j in done if per[j["metadata"]["uid"]] != len(j["status"]["transitions"]))
    reaction = [pod_created[obj.validation_pod_name(n)] - build_done[n] for n in names
                if obj.validation_pod_name(n) in pod_created and n in build_done]
    watches = sum(v for k, v in used.items() if k.startswith("WATCH"))
    requests = sum(v for k, v in used.items() if not k.startswith("WATCH"))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    await admin.close()
    await api.close()

    print(f"jobs: {args.jobs} (build enabled), workers: {args.workers}, fake-controller concurrency: {args.concurrency}")
    print(f"terminal phases: {dict(phases)}")
    print(f"submit of all jobs: {t_submitted:.1f} s; total (first submit -> last terminal): {total:.1f} s")
    print(f"API requests by the server: {requests} = {requests / args.jobs:.1f} per job (+ {watches} watch requests)")
    for k, v in sorted(used.items(), key=lambda kv: -kv[1]):
        print(f"  {k:45s} {v:6d}  {v / args.jobs:5.2f}/job")
    print(f"events: {len(ours)} = {len(ours) / args.jobs:.2f} per job; transitions: {transitions} = "
          f"{transitions / args.jobs:.2f} per job; jobs whose event count != transition count: {mismatched}")
    print(f"reaction (build Job Complete written -> validation Pod created), n={len(reaction)}: "
          f"p50 {pct(reaction, 50) * 1000:.0f} ms, p99 {pct(reaction, 99) * 1000:.0f} ms, "
          f"max {max(reaction) * 1000:.0f} ms")
    print(f"peak RSS of this process (server + fake controllers): {peak_mb:.0f} MiB")
    print(f"engine: reconciles {engine.reconciles}, errors {engine.errors}, "
          f"max event-loop lag {engine.max_loop_lag * 1000:.0f} ms; events posted {engine.recorder.posted}, "
          f"failed {engine.recorder.failed}, dropped {engine.recorder.dropped}")
    assert phases == {Phase.SUCCEEDED: args.jobs}, phases
    assert mismatched == 0


async def run(args) -> None:
    etcd, apiserver = harness.find_binaries()
    work = Path(tempfile.mkdtemp(prefix="nbv-bench-k8s-"))
    (work / "logs").mkdir()
    h = harness.KubeApiServer(etcd_bin=etcd, apiserver_bin=apiserver, work_dir=work, log_dir=work / "logs",
                              version=harness.k8s_version())
    await asyncio.to_thread(h.start)
    try:
        await bench(h, args)
    finally:
        await asyncio.to_thread(h.stop)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=300)
    p.add_argument("--workers", type=int, default=16)  # c.NBValidation.workers default
    p.add_argument("--concurrency", type=int, default=32)
    args = p.parse_args()
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
