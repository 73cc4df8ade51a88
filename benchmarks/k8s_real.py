"""The Kubernetes backend on the REAL single-node cluster of tools/cluster
(``bash tools/cluster/up.sh``; its ``.cluster/env``). Prints figures; not a test.

    .venv/bin/python benchmarks/k8s_real.py [--env .cluster/env] [--builds 30] [--parallel 3] [--burst 50]

The engine + KubernetesBackend run in this process against the cluster's API
server; the real Job controller runs the kaniko build Jobs, kaniko pushes to
the registry Pod, the kubelet runs the Pods. A fresh namespace and a fresh
registry prefix (``<NBV_REGISTRY>/b<run id>``) per run, so the first job
really builds.

(b) time to verdict (submit -> Succeeded) of a one-cell notebook needing
    ``six``: the first job builds the image (kaniko), the second job of the
    same content finds it in the registry and does not build (BuildReused).
(a) build Job Complete -> validation Pod created: ``--builds`` jobs that all
    build (``image_reuse`` off), ``--parallel`` at a time, FROM the image of
    (b) (its venvs are there, so a build is a short kaniko run). Both moments
    are when an independent watch of this process saw them (a Job MODIFIED
    with Complete=True, the Pod ADDED): API timestamps have 1 s resolution.
(c) ``--burst`` jobs at once on the one node, all of the same content as (b)
    (reused): all terminal, events per transition, API requests per job (the
    server client's, an aiohttp trace), total time.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from helpers import write_notebook  # noqa: E402
from k8s_reaction import RequestCounter, pct  # noqa: E402

import jupyter_nbvalidation.backends.kubernetes.objects as obj  # noqa: E402
from jupyter_nbvalidation.backends.kubernetes.backend import KubernetesBackend  # noqa: E402
from jupyter_nbvalidation.backends.kubernetes.client import EVENTS, JOBS, PODS, KubeApiError, connect  # noqa: E402
from jupyter_nbvalidation.core.model import Phase, parse_time  # noqa: E402
from jupyter_nbvalidation.engine.engine import Engine  # noqa: E402
from jupyter_nbvalidation.service.jobs import JobService  # noqa: E402


def read_env(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


async def namespace(kube) -> str:
    ns = f"nbv-bench-{uuid.uuid4().hex[:6]}"
    await kube.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace",
                                                           "metadata": {"name": ns}})
    for _ in range(600):
        try:
            await kube.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")
            return ns
        except KubeApiError:
            await asyncio.sleep(0.1)
    raise RuntimeError(f"no default ServiceAccount in {ns}")


class Watcher:
    """When this process saw each build Job Complete and each validation Pod created."""

    def __init__(self, kube, ns: str):
        self.kube, self.ns = kube, ns
        self.complete: dict[str, float] = {}  # job name -> seen
        self.pod_added: dict[str, float] = {}
        self.tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        for kind, path in (("job", JOBS.path(self.ns)), ("pod", PODS.path(self.ns))):
            rv = (await self.kube.request("GET", path))["metadata"]["resourceVersion"]
            self.tasks.append(asyncio.create_task(self._watch(kind, path, rv)))

    async def _watch(self, kind: str, path: str, rv: str) -> None:
        while True:
            async for ev in self.kube.watch(path, {"resourceVersion": rv}, 600):
                o = ev.get("object") or {}
                if ev["type"] not in ("ADDED", "MODIFIED"):
                    continue
                rv = o["metadata"]["resourceVersion"]
                now = time.perf_counter()
                job = (o["metadata"].get("labels") or {}).get("nbvalidation.dev/job")
                if not job:
                    continue
                if kind == "job" and any(c.get("type") == "Complete" and c.get("status") == "True"
                                         for c in (o.get("status") or {}).get("conditions") or []):
                    self.complete.setdefault(job, now)
                if kind == "pod" and ev["type"] == "ADDED" and o["metadata"]["name"] == obj.validation_pod_name(job):
                    self.pod_added.setdefault(job, now)

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def breakdown(job: dict) -> str:
    tr = job["status"].get("transitions") or []
    times = [(t["phase"], parse_time(t["time"])) for t in tr]
    parts = []
    for (p0, t0), (p1, t1) in zip(times, times[1:], strict=False):
        parts.append(f"{p0}->{p1} {(t1 - t0).total_seconds():.1f}s")
    return ", ".join(parts)


async def run(args) -> None:
    env = read_env(Path(args.env))
    kubeconfig = env["KUBECONFIG"]
    admin = await connect(kubeconfig)
    ns = await namespace(admin)
    registry = f"{env['NBV_REGISTRY']}/b{uuid.uuid4().hex[:6]}"
    work = Path(tempfile.mkdtemp(prefix="nbv-real-"))
    root = work / "root"
    write_notebook(root / "nb.ipynb", ["import six\nprint(six.__version__)"])
    (root / "requirements.txt").write_text("six==1.16.0\n")
    counter = RequestCounter()
    backend = KubernetesBackend(namespace=ns, kubeconfig=kubeconfig, registry=registry,
                                base_image=env["NBV_BASE_IMAGE"], builder_image=env["NBV_BUILDER_IMAGE"],
                                builder_args=json.loads(env["NBV_BUILDER_ARGS"]),
                                run_as_user=int(env.get("NBV_RUN_AS_USER", "1000")), default_build_strategy="job")
    backend.store.use_client(await connect(kubeconfig, trace_configs=[counter.trace]))
    engine = Engine(backend, log=logging.getLogger("bench"), workers=16, resync_period=3600)
    service = JobService(engine, backend, str(root))
    watcher = Watcher(admin, ns)
    await watcher.start()
    await engine.start()
    print(f"namespace {ns}, registry prefix {registry}, base {env['NBV_BASE_IMAGE']}")

    async def one(timeout: float = 900) -> tuple[dict, float]:
        t0 = time.perf_counter()
        job = await service.submit({"notebook": {"path": "nb.ipynb"}})
        done = await engine.wait_for_terminal(job["metadata"]["name"], timeout)
        return done, time.perf_counter() - t0

    try:
        # (b) first (build) vs second (reused)
        first, t_first = await one()
        second, t_second = await one()
        for j in (first, second):
            assert j["status"]["phase"] == Phase.SUCCEEDED, json.dumps(j["status"], indent=1)
        built = first["status"]["buildStatus"]["imageReference"]
        print(f"(b) time to verdict: first job (kaniko build) {t_first:.1f} s; second job (image reused) "
              f"{t_second:.1f} s; ratio second/first {t_second / t_first:.2f}")
        print(f"    first:  {breakdown(first)}")
        print(f"    second: {breakdown(second)}; reason {second['status']['transitions'][2].get('reason', '')}")

        # (a) build Job Complete -> validation Pod created, over real builds
        if args.builds:
            backend.image_reuse = False
            backend.base_image = built  # its venvs exist: each build is a short kaniko run
            sem = asyncio.Semaphore(args.parallel)

            async def limited():
                async with sem:
                    return await one()

            t0 = time.perf_counter()
            results = await asyncio.gather(*(limited() for _ in range(args.builds)))
            names = [d["metadata"]["name"] for d, _ in results]
            ok = sum(1 for d, _ in results if d["status"]["phase"] == Phase.SUCCEEDED)
            lat = [watcher.pod_added[n] - watcher.complete[n] for n in names
                   if n in watcher.pod_added and n in watcher.complete]
            builds = [parse_time(d["status"]["buildStatus"]["completionTime"])
                      - parse_time(d["status"]["buildStatus"]["startTime"]) for d, _ in results]
            print(f"(a) {args.builds} jobs that build ({args.parallel} at a time), {ok} Succeeded, "
                  f"{time.perf_counter() - t0:.0f} s; build durations median "
                  f"{pct([b.total_seconds() for b in builds], 50):.1f} s")
            print(f"    build Job Complete -> validation Pod created (watch), n={len(lat)}: "
                  f"p50 {pct(lat, 50) * 1000:.0f} ms, p99 {pct(lat, 99) * 1000:.0f} ms, max {max(lat) * 1000:.0f} ms")
            backend.image_reuse = True
            backend.base_image = env["NBV_BASE_IMAGE"]

        # (c) a burst of jobs at once, one node
        if args.burst:
            before = counter.snapshot()
            t0 = time.perf_counter()
            jobs = await asyncio.gather(*(service.submit({"notebook": {"path": "nb.ipynb"}})
                                          for _ in range(args.burst)))
            done = await asyncio.gather(*(engine.wait_for_terminal(j["metadata"]["name"], 1800) for j in jobs))
            total = time.perf_counter() - t0
            await engine.wait_idle(60)
            await engine.recorder.flush()
            used = counter.snapshot() - before
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
            ours = [e for e in events if (e.get("regarding") or {}).get("uid") in uids]
            requests = sum(v for k, v in used.items() if not k.startswith("WATCH"))
            verdicts = [(parse_time(j["status"]["completionTime"]) - parse_time(j["metadata"]["creationTimestamp"]))
                        .total_seconds() for j in done]
            print(f"(c) {args.burst} jobs at once (same content: reused): {dict(phases)}; first submit -> last "
                  f"terminal {total:.1f} s; per-job time to verdict p50 {pct(verdicts, 50):.0f} s, "
                  f"max {max(verdicts):.0f} s")
            print(f"    events {len(ours)} / transitions {transitions} = {len(ours) / transitions:.2f} per transition; "
                  f"API requests by the server {requests} = {requests / args.burst:.1f} per job")
    finally:
        await engine.stop()
        await watcher.stop()
        await backend.kube.close()
        await admin.request("DELETE", f"/api/v1/namespaces/{ns}")
        await admin.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default=str(ROOT / ".cluster" / "env"))
    p.add_argument("--builds", type=int, default=30)
    p.add_argument("--parallel", type=int, default=3)
    p.add_argument("--burst", type=int, default=50)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
