"""The registry away at the reuse lookup is a transient fault, never a silent full
rebuild; /health says whether the registry answers and whether reuse and the verdict
key are on (issue 19 points 4 and 5). A real aiohttp registry stand-in on 127.0.0.1,
real sockets (a closed port for "unreachable")."""

from __future__ import annotations

import logging
import socket

import pytest
from helpers import wait_async, write_notebook
from k8s_support import REGISTRY_DIGEST as DIGEST
from k8s_support import (
    Registry,
    events_of,
    get_or_none,
    make_env,
    reasons,
    run_builder,
    run_validation,
    wait_for,
)

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.backends.base import FAILED
from jupyter_nbvalidation.backends.kubernetes.builders.base import BuildInputs
from jupyter_nbvalidation.backends.kubernetes.client import JOBS
from jupyter_nbvalidation.backends.kubernetes.images import Images, ImageSettings
from jupyter_nbvalidation.backends.kubernetes.registry import RegistryClient, RegistryError
from jupyter_nbvalidation.core.model import NOTICE_REASONS, Phase, Reason
from jupyter_nbvalidation.verdict.cache import ANNOTATION as VERDICT_KEY

LOG = logging.getLogger("test")


def closed_port() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


def images(host: str, insecure: bool = True) -> Images:
    return Images(ImageSettings(registry=f"{host}/nbv", registry_insecure=insecure, registry_timeout=2.0),
                  base_image=lambda job: f"{host}/nbv/base:1", notify=lambda name: None, log=LOG)


def inputs(host: str) -> BuildInputs:
    return BuildInputs(dockerfile="", requirements_txt="", destination=f"{host}/nbv/env:abc", base_image="b",
                       content_hash="abc", timeout_seconds=60, reusable=True)


@pytest.mark.asyncio
@pytest.mark.parametrize("status,transient", [(503, True), (500, True), (429, True), (403, False), (400, False)])
async def test_registry_answers_are_classified(status, transient):
    reg = await Registry(status).start()
    client = RegistryClient(plain_http_hosts={reg.host}, timeout=2.0)
    try:
        with pytest.raises(RegistryError) as e:
            await client.digest(f"{reg.host}/nbv/env:abc")
        assert e.value.transient is transient and e.value.host == reg.host, e.value
    finally:
        await client.close()
        await reg.stop()


@pytest.mark.asyncio
async def test_no_connection_is_transient_and_404_is_not_there():
    host = closed_port()
    client = RegistryClient(plain_http_hosts={host}, timeout=2.0)
    try:
        with pytest.raises(RegistryError) as e:
            await client.digest(f"{host}/nbv/env:abc")
        assert e.value.transient and e.value.host == host
    finally:
        await client.close()
    reg = await Registry(404).start()
    client = RegistryClient(plain_http_hosts={reg.host}, timeout=2.0)
    try:
        assert await client.digest(f"{reg.host}/nbv/env:abc") is None
    finally:
        await client.close()
        await reg.stop()


@pytest.mark.asyncio
async def test_the_reuse_lookup_with_the_registry_away_is_a_transient_fault_naming_it():
    host = closed_port()
    im = images(host)
    try:
        obs = await im.reused(inputs(host), "job")
        assert obs is not None and obs.state == FAILED and obs.fault is not None and obs.fault.transient, obs
        assert obs.fault.cause.startswith(f"The registry {host} could not be reached for the image-reuse lookup"), obs
    finally:
        await im.close()
    reg = await Registry(404).start()  # not there: the ordinary "build it" path
    im = images(reg.host)
    try:
        assert await im.reused(inputs(reg.host), "job") is None
        reg.status = 200
        obs = await im.reused(inputs(reg.host), "job")
        assert obs is not None and obs.reused and obs.reference == f"{reg.host}/nbv/env@{DIGEST}"
        reg.status = 401  # refused: build, as without reuse (not retried)
        assert await im.reused(inputs(reg.host), "job") is None
    finally:
        await im.close()
        await reg.stop()


@pytest.mark.asyncio
async def test_registry_state_says_unreachable_then_back(monkeypatch):
    monkeypatch.setattr("jupyter_nbvalidation.backends.kubernetes.images.PROBE_TTL", 0.0)
    reg = await Registry(200).start()
    im = images(reg.host)
    try:
        st = await im.registry_state(f"{reg.host}/nbv/base:1")
        assert st["registryReachable"] and st["imageReuse"] == {"enabled": True, "reason": None}, st
        assert st["verdictKey"]["enabled"], st
        reg.status = 503
        st = await im.registry_state(f"{reg.host}/nbv/base@{DIGEST}")
        assert not st["registryReachable"] and "503" in st["registryProblem"], st
        assert not st["imageReuse"]["enabled"] and "unreachable" in st["imageReuse"]["reason"], st
        reg.status = 200
        st = await im.registry_state(f"{reg.host}/nbv/base@{DIGEST}")
        assert st["registryReachable"] and st["imageReuse"]["enabled"], st
    finally:
        await im.close()
        await reg.stop()


@pytest.mark.asyncio
async def test_registry_state_says_plain_http_without_registry_insecure():
    reg = await Registry(200).start()
    im = images(reg.host, insecure=False)
    try:
        st = await im.registry_state("python:3.12-slim@" + DIGEST)
        assert st["registryReachable"], st
        assert not st["imageReuse"]["enabled"] and "registry_insecure" in st["imageReuse"]["reason"], st
        assert not st["verdictKey"]["enabled"] and "plain HTTP" in st["verdictKey"]["reason"], st
        # and its lookups are not taken for a registry that is away (no retry of a build that would push)
        with pytest.raises(RegistryError) as e:
            await im.registry_client.digest(f"{reg.host}/nbv/env:abc")
        assert not e.value.transient and "registry_insecure" in str(e.value), e.value
    finally:
        await im.close()
        await reg.stop()


# -- through the engine, on the stand-in apiserver (tests/k8s_harness.py) -----------------------

async def _run_until(env, name: str, predicate, timeout: float = 60.0):
    seen: dict = {}

    async def reached() -> dict | None:
        seen["job"] = job = await env.store.get(name)
        return job if predicate(job) else None

    return await wait_async(reached, timeout, lambda: f"{name}: {seen['job'].get('status')}", interval=0.1)


@pytest.mark.asyncio
async def test_registry_away_at_the_reuse_lookup_is_retried_then_infrastructure_failed(
        kube_apiserver, k8s_namespace, tmp_path, admin):
    host = closed_port()
    env = make_env(kube_apiserver, k8s_namespace, tmp_path / "root", registry=f"{host}/nbv", registry_insecure=True,
                   base_image=f"{host}/nbv/base@{DIGEST}", retry_backoff=0.05, max_retries=1)
    write_notebook(env.root / "nb.ipynb", ["x = 1"])
    await env.engine.start()
    try:
        job = await env.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"requirements": ["six"]}})
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        done = await env.terminal(name)
        st = done["status"]
        assert (st["phase"], st["reason"]) == (Phase.FAILED, "InfrastructureFailed"), st
        assert st["message"].startswith(f"The registry {host} could not be reached for the image-reuse lookup"), st
        assert st["message"].endswith("(after 1 retry)"), st["message"]
        assert st.get("buildRetries") == 1, st
        got = reasons(await events_of(admin, env.ns, uid))
        assert got.count("BuildRetried") == 1 and got[-1] == "InfrastructureFailed", got
        # never a full build that would fail at its push for the same cause
        for n in (0, 1):
            assert await get_or_none(admin, JOBS.path(env.ns, obj.build_job_name(name, n))) is None
    finally:
        await env.engine.stop()


@pytest.mark.asyncio
async def test_registry_back_after_a_retry_the_build_goes_ahead(kube_apiserver, k8s_namespace, tmp_path, admin):
    reg = await Registry(503).start()
    env = make_env(kube_apiserver, k8s_namespace, tmp_path / "root", registry=f"{reg.host}/nbv",
                   registry_insecure=True, base_image=f"{reg.host}/nbv/base@{DIGEST}", retry_backoff=0.5,
                   max_retries=3)
    write_notebook(env.root / "nb.ipynb", ["x = 1"])
    await env.engine.start()
    try:
        job = await env.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"requirements": ["six"]}})
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        await _run_until(env, name, lambda j: (j.get("status") or {}).get("buildRetries"))
        reg.status = 404  # back, and the image is not there: the ordinary build
        seen: dict = {}

        async def a_build() -> dict | None:
            seen["found"] = [await get_or_none(admin, JOBS.path(env.ns, obj.build_job_name(name, n))) for n in range(4)]
            return next((b for b in seen["found"] if b is not None), None)

        built = await wait_async(a_build, 60, f"a build Job of {name}", interval=0.1)
        found = seen["found"]
        assert built is not None and built["metadata"]["name"].startswith(f"nvj-{name}-build-r"), built
        assert found[0] is None  # the first attempt never built
        st = (await env.store.get(name))["status"]
        assert st["phase"] == Phase.BUILDING, st
        evs = [e for e in await events_of(admin, env.ns, uid) if e["reason"] == "BuildRetried"]
        assert evs and evs[0]["note"].startswith(f"The registry {reg.host} could not be reached"), evs
        assert "503" in evs[0]["note"], evs
    finally:
        await env.engine.stop()
        await reg.stop()


# -- what is off, said once per job and by /health (issue 19 point 5) -----------------------------

TRANSITIONS = [Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_SUCCEEDED, Reason.VALIDATION_STARTED,
               Reason.VALIDATION_SUCCEEDED]


async def _notices(admin, ns: str, uid: str) -> tuple[list[dict], list[str]]:
    evs = await events_of(admin, ns, uid)
    return [e for e in evs if e["reason"] in NOTICE_REASONS], [e["reason"] for e in evs
                                                               if e["reason"] not in NOTICE_REASONS]


@pytest.mark.asyncio
async def test_a_plain_http_registry_without_registry_insecure_is_one_warning_per_job_and_in_health(
        kube_apiserver, k8s_namespace, tmp_path, admin, aio_admin):
    """kaniko is told the registry is plain HTTP (builder_args), the server is not: its lookups
    over https fail, so the base image has no digest, nothing is reused and no verdict key is
    written. One Warning ImageReuseOff per job says so (also across a server restart), /health
    says so, and the job still gets its own verdict."""
    reg = await Registry(200).start()
    traits = dict(registry=f"{reg.host}/nbv", base_image=f"{reg.host}/nbv/base:1",
                  builder_args=[f"--insecure-registry={reg.host}"])
    env = make_env(kube_apiserver, k8s_namespace, tmp_path / "root", **traits)
    write_notebook(env.root / "nb.ipynb", ["x = 1"])
    await env.engine.start()
    second = None
    try:
        job = await env.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"requirements": ["six"]}})
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        assert VERDICT_KEY not in job["metadata"].get("annotations", {}), job["metadata"]
        await wait_for(lambda: get_or_none(admin, JOBS.path(env.ns, obj.build_job_name(name))), what="the build")

        async def noticed():
            return (await _notices(admin, env.ns, uid))[0]

        await wait_for(noticed, what="the ImageReuseOff event")
        # another server takes over mid-build: the notice is not posted again (its name is fixed)
        await env.engine.stop()
        second = make_env(kube_apiserver, k8s_namespace, tmp_path / "root", **traits)
        await second.engine.start()
        await second.engine.wait_idle(10)
        await run_builder(admin, aio_admin, env.ns, name)
        await run_validation(admin, aio_admin, env.ns, name)
        done = await second.terminal(name)
        assert (done["status"]["phase"], done["status"]["reason"]) == (Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED)
        notices, others = await _notices(admin, env.ns, uid)
        assert others == TRANSITIONS, others
        assert len(notices) == 1, notices
        (n,) = notices
        assert n["type"] == "Warning" and n["reason"] == "ImageReuseOff" and n["action"] == "Notice", n
        assert n["note"].startswith("Image reuse and the verdict key are off for this job: the base image "
                                    f"{reg.host}/nbv/base:1 has no digest"), n["note"]
        assert "c.KubernetesBackend.registry_insecure" in n["note"], n["note"]
        # the build ran FROM the tag (no digest), and nothing was reused
        bj = await admin.request("GET", JOBS.path(env.ns, obj.build_job_name(name)))
        args = bj["spec"]["template"]["spec"]["containers"][0]["args"]
        assert f"--insecure-registry={reg.host}" in args and "--insecure" not in args, args
        health = await second.backend.health()
        assert health["registryReachable"], health
        assert not health["imageReuse"]["enabled"] and "registry_insecure" in health["imageReuse"]["reason"], health
        assert not health["verdictKey"]["enabled"] and "plain HTTP" in health["verdictKey"]["reason"], health
    finally:
        await env.engine.stop()
        if second is not None:
            await second.engine.stop()
        await reg.stop()


@pytest.mark.asyncio
async def test_a_refused_reuse_lookup_is_a_warning_and_in_health_and_the_build_runs(
        kube_apiserver, k8s_namespace, tmp_path, admin, aio_admin):
    """The registry answers, but refuses an anonymous lookup (403): the build runs in full (not
    retried: a refusal is not the registry away), one Warning names the refusal, /health too."""
    reg = await Registry(403).start()
    env = make_env(kube_apiserver, k8s_namespace, tmp_path / "root", registry=f"{reg.host}/nbv",
                   registry_insecure=True, base_image=f"{reg.host}/nbv/base@{DIGEST}")
    write_notebook(env.root / "nb.ipynb", ["x = 1"])
    await env.engine.start()
    try:
        job = await env.submit(notebook={"path": "nb.ipynb"}, podConfig={"buildConfig": {"requirements": ["six"]}})
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        await run_builder(admin, aio_admin, env.ns, name)
        await run_validation(admin, aio_admin, env.ns, name)
        done = await env.terminal(name)
        assert (done["status"]["phase"], done["status"]["reason"]) == (Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED)
        assert not done["status"].get("buildRetries"), done["status"]
        notices, others = await _notices(admin, env.ns, uid)
        assert others == TRANSITIONS, others
        assert len(notices) == 1 and notices[0]["type"] == "Warning", notices
        note = notices[0]["note"]
        assert note.startswith(f"Image reuse is off for this job: the registry refused the image-reuse lookup of "
                               f"{reg.host}/nbv/env:"), note
        assert "answered 403" in note, note
        health = await env.backend.health()
        assert health["registryReachable"], health
        assert not health["imageReuse"]["enabled"] and "refused the image-reuse lookup" in \
            health["imageReuse"]["reason"], health
        # the registry lets the lookups in again: /health says reuse is back on
        reg.status = 404
        other = await env.submit(notebook={"path": "nb.ipynb"},
                                 podConfig={"buildConfig": {"requirements": ["six==1.16.0"]}})
        await wait_for(lambda: get_or_none(admin, JOBS.path(env.ns, obj.build_job_name(other["metadata"]["name"]))),
                       what="the second build")
        health = await env.backend.health()
        assert health["imageReuse"] == {"enabled": True, "reason": None}, health
        assert not (await _notices(admin, env.ns, other["metadata"]["uid"]))[0]
    finally:
        await env.engine.stop()
        await reg.stop()
