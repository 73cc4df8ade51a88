"""A registry that does not answer, on the REAL single-node cluster (tests/real_cluster.py,
``bash tools/cluster/up.sh``): never a notebook verdict (issue 19, point 4).

The harness's registry is a Pod (docker-registry) on the node's bridge. "Blocked" is a REJECT
rule (TCP reset) in that Pod's own network namespace, so the server in this process (the
image-reuse lookup) and kaniko in the build Pod (the base image pull, the push) both get
"connection refused/reset" from it, as from a registry that is down; the rule goes away when
the test ends, whatever happens. The engine runs in this process against the cluster's API
server; the real Job controller runs kaniko, the kubelet runs the Pods.

- blocked at submit, then back: the reuse lookup fails, BuildRetried (a Warning naming the
  registry), and once it answers the job builds and ends with the notebook's own verdict;
- blocked while kaniko builds, then back: the build Job fails on the registry, BuildRetried,
  then the true verdict;
- blocked for good: after the last retry the job ends InfrastructureFailed, the message
  naming the registry, never BuildFailed or a cell.

Run alone (marker ``alone``: no other test may use the node meanwhile, so no ``-n``):
``bash tools/cluster/up.sh && .venv/bin/python -m pytest tests/test_k8s_real_registry.py``
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import AsyncIterator

import pytest
import pytest_asyncio
from helpers import wait_async, write_notebook

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.backends.kubernetes.store import JOB_LABEL
from jupyter_nbvalidation.core.model import Phase, Reason

pytestmark = pytest.mark.cluster

LOG = logging.getLogger("nbvalidation.test.real")
BUILD_WAIT = 600.0  # a cold kaniko build (two venvs, pip from the index) on a loaded 2-core machine
RUN_ID = uuid.uuid4().hex[:8]
RETRIED = "BuildRetried"


def fresh(requirement: str) -> str:
    """A requirement set no image was built for yet (an always-true marker new to this run)."""
    return f'{requirement}; platform_machine != "nbv-{uuid.uuid4().hex[:12]}"'


def _registry_netns(host_port: str) -> tuple[str, str]:
    """(the registry Pod's network namespace, its port): the docker-registry process's."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # not a process, or gone
            continue
        if argv[:2] == [b"/usr/bin/docker-registry", b"serve"]:
            pids.append(entry.name)
    assert len(pids) == 1, f"expected the harness's one registry process, found {pids}"
    return f"/proc/{pids[0]}/ns/net", host_port.rsplit(":", 1)[1]


def _iptables(netns: str, op: str, port: str) -> None:
    subprocess.run(["nsenter", f"--net={netns}", "iptables", op, "INPUT", "-p", "tcp", "--dport", port,
                    "-j", "REJECT", "--reject-with", "tcp-reset"], check=True, capture_output=True, timeout=30)


class Registry:
    def __init__(self, host_port: str):
        self.host_port = host_port
        self.netns, self.port = _registry_netns(host_port)
        self.blocked = False

    async def block(self) -> None:
        await asyncio.to_thread(_iptables, self.netns, "-I", self.port)
        self.blocked = True
        LOG.info("registry %s blocked", self.host_port)

    async def answering(self, timeout: float = 120.0) -> None:
        """The precondition of every test here: the registry answers GET /v2/ (a test that
        starts while it does not is about something else; seen once in CI: refused at start)."""
        import urllib.error
        import urllib.request

        def ask() -> bool:
            try:
                with urllib.request.urlopen(f"http://{self.host_port}/v2/", timeout=3):
                    return True
            except urllib.error.HTTPError:
                return True  # it answered (401 and the like are answers)
            except OSError:
                return False

        await wait_async(lambda: asyncio.to_thread(ask), timeout, f"the registry {self.host_port} to answer", interval=1.0)

    async def unblock(self) -> None:
        if self.blocked:
            await asyncio.to_thread(_iptables, self.netns, "-D", self.port)
            self.blocked = False
            LOG.info("registry %s answers again", self.host_port)


@pytest_asyncio.fixture
async def real(real_cluster, tmp_path, request) -> AsyncIterator[object]:
    # a block here is a block for every test using the node: none may run beside these (CI saw
    # another worker's build refused by it, and this module's own tests refused by each other)
    others = sorted({i.module.__name__.rpartition(".")[2] for i in request.session.items if i.module
                     and i.module.__name__.rpartition(".")[2].startswith("test_k8s_real_")} - {__name__.rpartition(".")[2]})
    assert not (os.environ.get("PYTEST_XDIST_WORKER") and others), (
        "the registry tests block the node's registry: run them in a pytest run of their own "
        f"(`pytest -m alone`, as tools/setup-and-test.sh does), not beside {others}")
    registry = Registry(real_cluster.env["NBV_REGISTRY_HOST"])
    ns = real_cluster.namespace()
    stack = contextlib.AsyncExitStack()

    async def start(max_retries: int, retry_backoff: float):
        await registry.answering()
        env = await stack.enter_async_context(real_cluster.engine(
            tmp_path / "root", f"{real_cluster.env['NBV_REGISTRY']}/g{RUN_ID}", namespace=ns, log=LOG,
            engine={"max_retries": max_retries, "retry_backoff": retry_backoff},
            registry_insecure=True, registry_timeout=5.0))
        env.registry = registry
        return env

    try:
        yield start
    finally:
        await registry.unblock()  # whatever happened: the next tests need the registry
        await stack.aclose()


async def events_of(env, job: dict) -> list[dict]:
    evs = await env.backend.store.list_events(job)
    return sorted(evs, key=lambda e: e.get("eventTime") or "")


async def wait_for_event(env, name: str, reason: str, timeout: float) -> dict:
    async def found() -> dict | None:
        job = await env.backend.store.get(name)
        for e in await events_of(env, job):
            if e["reason"] == reason:
                return e
        assert (job.get("status") or {}).get("phase") not in Phase.TERMINAL, json.dumps(job["status"], indent=1)
        return None

    return await wait_async(found, timeout, f"a {reason} event for {name}", interval=0.5)


async def verdict(env, name: str, timeout: float) -> tuple[dict, list[dict]]:
    job = await env.engine.wait_for_terminal(name, timeout)
    await env.engine.wait_idle(30)
    await env.engine.recorder.flush()
    return job, await events_of(env, job)


async def build_pod_running(env, name: str, timeout: float) -> None:
    """A build Pod (kaniko) of the job has started: what it does next needs the registry. Any
    attempt's: a fault before the block (seen once in CI: the first push check refused) makes
    the engine retry as ``-build-r1``, and that attempt's Pod is the one to block."""
    selector = f"{JOB_LABEL}={obj.label_value(name)},{obj.COMPONENT_LABEL}=build"
    async def running() -> bool:
        pods = await env.kube.request("GET", f"/api/v1/namespaces/{env.ns}/pods", query={"labelSelector": selector})
        if any((p.get("status") or {}).get("phase") == "Running" for p in pods.get("items") or []):
            return True
        job = await env.backend.store.get(name)
        assert (job.get("status") or {}).get("phase") not in Phase.TERMINAL, json.dumps(job["status"], indent=1)
        return False

    await wait_async(running, timeout, f"a build Pod of {name} to start", interval=0.3)


def check_retried_then_true_verdict(env, done: dict, evs: list[dict]) -> None:
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED), json.dumps(st, indent=1)
    reasons = [e["reason"] for e in evs]
    retried = [e for e in evs if e["reason"] == RETRIED]
    assert retried and st["buildRetries"] == len(retried), (reasons, st.get("buildRetries"))
    for e in retried:
        assert e["type"] == "Warning", e
        assert env.registry.host_port in e["note"], e["note"]
    # every transition once, and the retries besides them
    assert len(evs) == len(st["transitions"]) + len(retried), (reasons, [t["phase"] for t in st["transitions"]])
    assert [r for r in reasons if r != RETRIED] == [
        Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_SUCCEEDED, Reason.VALIDATION_STARTED,
        Reason.VALIDATION_SUCCEEDED], reasons
    assert "@sha256:" in st["buildStatus"]["imageReference"], st["buildStatus"]


@pytest.mark.asyncio
async def test_a_registry_blocked_at_submit_is_retried_and_the_true_verdict_follows(real):
    env = await real(max_retries=6, retry_backoff=2.0)
    write_notebook(env.root / "nb.ipynb", ["import six\nprint(six.__version__)"])
    await env.registry.block()
    job = await env.service.submit({"notebook": {"path": "nb.ipynb"},
                                    "podConfig": {"buildConfig": {"requirements": [fresh("six==1.16.0")]}}})
    name = job["metadata"]["name"]
    first = await wait_for_event(env, name, RETRIED, 120)
    assert "image-reuse lookup" in first["note"], first["note"]
    await env.registry.unblock()
    back = time.monotonic()
    done, evs = await verdict(env, name, BUILD_WAIT)
    print(f"{name}: registry back -> verdict {time.monotonic() - back:.1f} s")
    check_retried_then_true_verdict(env, done, evs)


@pytest.mark.asyncio
async def test_a_registry_blocked_while_kaniko_builds_is_retried_and_the_true_verdict_follows(real):
    env = await real(max_retries=6, retry_backoff=2.0)
    write_notebook(env.root / "nb.ipynb", ["import six\nassert six.__version__ == '1.16.0'"])
    job = await env.service.submit({"notebook": {"path": "nb.ipynb"},
                                    "podConfig": {"buildConfig": {"requirements": [fresh("six==1.16.0")]}}})
    name = job["metadata"]["name"]
    await build_pod_running(env, name, BUILD_WAIT)
    await env.registry.block()
    await wait_for_event(env, name, RETRIED, BUILD_WAIT)
    await env.registry.unblock()
    done, evs = await verdict(env, name, BUILD_WAIT)
    check_retried_then_true_verdict(env, done, evs)
    # the failed build attempt was the registry's fault, and says so, not the requirements'
    assert not any(e["reason"] == Reason.BUILD_FAILED for e in evs)


@pytest.mark.asyncio
async def test_a_registry_blocked_for_good_ends_as_infrastructure_naming_the_registry(real):
    env = await real(max_retries=2, retry_backoff=0.5)
    write_notebook(env.root / "nb.ipynb", ["print(1)"])
    await env.registry.block()
    job = await env.service.submit({"notebook": {"path": "nb.ipynb"},
                                    "podConfig": {"buildConfig": {"requirements": [fresh("six==1.16.0")]}}})
    done, evs = await verdict(env, job["metadata"]["name"], 300)
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.INFRASTRUCTURE_FAILED), json.dumps(st, indent=1)
    assert env.registry.host_port in st["message"], st["message"]
    assert st.get("failedCellIndex") is None and not st.get("results"), json.dumps(st, indent=1)
    reasons = [e["reason"] for e in evs]
    assert reasons.count(RETRIED) == 2 == st["buildRetries"], reasons
    assert reasons[-1] == Reason.INFRASTRUCTURE_FAILED and Reason.BUILD_FAILED not in reasons, reasons
    # no validation Pod was ever made for it
    pods = await env.kube.request("GET", f"/api/v1/namespaces/{env.ns}/pods",
                                  query={"labelSelector": f"nbvalidation.dev/job={job['metadata']['name']},"
                                                          "nbvalidation.dev/component=validation"})
    assert not pods.get("items"), [p["metadata"]["name"] for p in pods["items"]]
