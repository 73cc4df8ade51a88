"""Admission on the REAL single-node cluster (issue 19 point 7): 30 jobs at once
with caps (2 builds, 4 validations): a mix of notebooks that pass and fail over a
few environments, and one environment whose requirements cannot be resolved. Every
verdict right (0 false failures), events = transitions for every job, never more
validation Pods running than the cap (polled), never more jobs in Building than its cap.

Run: ``.venv/bin/python -m pytest tests/test_k8s_real_admission.py`` (cluster up).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid

import pytest
import pytest_asyncio
from helpers import write_notebook

from jupyter_nbvalidation.core.model import REASON_PHASE, Phase, Reason

pytestmark = pytest.mark.cluster

LOG = logging.getLogger("nbvalidation.test.real.admission")
RUN_ID = uuid.uuid4().hex[:8]
BUILDS, VALIDATIONS = 2, 4
WAIT = 1500.0
# the benchmark (docs/benchmarks.md) runs the same test with NBV_ADMISSION_JOBS=50
JOBS = int(os.environ.get("NBV_ADMISSION_JOBS", "30"))


@pytest_asyncio.fixture
async def real(real_cluster, tmp_path):
    async with real_cluster.engine(tmp_path / "root", f"{real_cluster.env['NBV_REGISTRY']}/a{RUN_ID}", log=LOG,
                                   engine={"max_concurrent_builds": BUILDS,
                                           "max_concurrent_validations": VALIDATIONS}) as env:
        yield env


async def _running_pods(env) -> int:
    pods = await env.kube.request("GET", f"/api/v1/namespaces/{env.ns}/pods")
    return sum(1 for p in pods.get("items", [])
               if "validate" in p["metadata"]["name"]
               if (p.get("status") or {}).get("phase") == "Running")


def mix(root) -> list[tuple[dict, str]]:
    """(spec, expected reason) of 30 jobs: three environments, one unresolvable."""
    envs = {"six": ["six==1.16.0"], "tab": ["tabulate==0.9.0"], "bad": [f"nbv-no-such-dist-{RUN_ID}==0.0.1"]}
    jobs: list[tuple[dict, str]] = []
    for i in range(JOBS):
        kind = ["six", "tab", "six", "tab", "bad"][i % 5]
        fails = i % 3 == 0 and kind != "bad"
        mod = "six" if kind == "six" else "tabulate"
        write_notebook(root / f"nb{i}.ipynb", [f"import {mod}", "raise ValueError('boom')" if fails else f"print({i})"])
        expected = Reason.BUILD_FAILED if kind == "bad" else (Reason.VALIDATION_FAILED if fails else Reason.VALIDATION_SUCCEEDED)
        jobs.append(({"notebook": {"path": f"nb{i}.ipynb"}, "podConfig": {"buildConfig": {"requirements": envs[kind]}}},
                     expected))
    return jobs


@pytest.mark.asyncio
async def test_thirty_jobs_at_once_with_caps(real):
    jobs = mix(real.root)
    requests_before = real.backend.kube.requests  # the server's own client (the test polls with another)
    t0 = time.monotonic()
    names = [(await real.service.submit(spec))["metadata"]["name"] for spec, _ in jobs]
    peak = {"pods": 0, "building": 0, "validating": 0}
    stop = asyncio.Event()

    async def watch() -> None:
        while not stop.is_set():
            peak["pods"] = max(peak["pods"], await _running_pods(real))
            active = await real.backend.store.list_active()
            for key, phase in (("building", Phase.BUILDING), ("validating", Phase.VALIDATION_RUNNING)):
                peak[key] = max(peak[key], sum(1 for j in active if (j.get("status") or {}).get("phase") == phase))
            await asyncio.sleep(0.5)

    watcher = asyncio.create_task(watch())
    try:
        done = await asyncio.gather(*(real.engine.wait_for_terminal(n, WAIT) for n in names))
    finally:
        stop.set()
        await watcher
    wall = time.monotonic() - t0
    verdicts = {r: sum(1 for d in done if d["status"]["reason"] == r) for r in {d["status"]["reason"] for d in done}}
    await real.engine.wait_idle(30)
    await real.engine.recorder.flush()
    requests = real.backend.kube.requests - requests_before
    got = [d["status"]["reason"] for d in done]
    assert got == [e for _, e in jobs], [(d["metadata"]["name"], d["status"]["reason"], d["status"]["message"])
                                         for d, (_, e) in zip(done, jobs, strict=True) if d["status"]["reason"] != e]
    for d in done:
        evs = sorted(await real.backend.store.list_events(d), key=lambda e: e.get("eventTime") or "")
        assert [e["reason"] for e in evs if e["reason"] in REASON_PHASE] == \
            [t["reason"] for t in d["status"]["transitions"]], d["metadata"]["name"]
    assert peak["pods"] <= VALIDATIONS and peak["validating"] <= VALIDATIONS and peak["building"] <= BUILDS, peak
    print(f"{JOBS} jobs with caps {BUILDS}/{VALIDATIONS}: wall {wall:.1f} s, peak {peak}, verdicts {verdicts}, "
          f"API requests by the server (its watches included) {requests} = {requests / JOBS:.1f} per job")
