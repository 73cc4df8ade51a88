"""Helpers of the Kubernetes tests (no fixtures here; those are in
conftest.py): an engine + KubernetesBackend + service against the harness,
and the tests' stand-ins for the Job controller and the kubelet."""

from __future__ import annotations

import copy
import logging
import uuid
from pathlib import Path
from types import SimpleNamespace

from aiohttp import web
from helpers import phases, reasons, wait_async  # noqa: F401 - the Kubernetes tests import them from here

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.backends.kubernetes.backend import KubernetesBackend
from jupyter_nbvalidation.backends.kubernetes.client import EVENTS, JOBS, PODS, Kube, KubeApiError
from jupyter_nbvalidation.engine.engine import Engine
from jupyter_nbvalidation.runner import termination_summary
from jupyter_nbvalidation.service.jobs import JobService

try:  # the harness is loaded as a plugin; import it by whichever name is on sys.path
    import k8s_harness as harness
except ImportError:  # pragma: no cover
    from tests import k8s_harness as harness

REGISTRY = "registry.test:5000/nbv"
DIGEST = "sha256:" + "0123456789abcdef" * 4
RUNNER_IMAGE = "registry.test:5000/nbv/runner:1"
BASE_IMAGE = "python:3.12-slim@sha256:" + "5" * 64  # pinned: no lookup of its digest
NOBUILD = {"podConfig": {"containerImage": RUNNER_IMAGE, "buildConfig": {"enabled": False}}}
LOG = logging.getLogger("nbvalidation.test.k8s")
WAIT = 20.0


class K8sEnv(SimpleNamespace):
    async def submit(self, **spec) -> dict:
        return await self.service.submit(spec)

    async def terminal(self, name: str, timeout: float = WAIT) -> dict:
        job = await self.engine.wait_for_terminal(name, timeout)
        # the watch can report the write before the writer emits its event:
        # let the reconcile that wrote it finish, then the poster
        await self.engine.wait_idle(timeout)
        await self.engine.recorder.flush()
        return job


def make_env(h, ns: str, root: Path, *, kubeconfig: str | None = None, instance: str | None = None,
             **traits) -> K8sEnv:
    root.mkdir(parents=True, exist_ok=True)
    if "registry" not in traits:
        # the stand-in registry.test does not resolve: the server asks it nothing (the base image
        # pinned by digest, no reuse lookups); tests of the registry give their own (a real HTTP one)
        traits = {"registry": REGISTRY, "base_image": BASE_IMAGE, "image_reuse": False, **traits}
    backend = KubernetesBackend(namespace=ns, kubeconfig=kubeconfig or h.admin_kubeconfig, **traits)
    engine = Engine(backend, log=LOG, resync_period=3600)
    if instance:
        engine.recorder.instance = instance
    service = JobService(engine, backend, str(root))
    return K8sEnv(engine=engine, backend=backend, service=service, root=root, ns=ns, store=backend.store)


# --------------------------------------------------------------------------
# playing the Job controller and the kubelet


async def wait_for(fn, timeout: float = WAIT, interval: float = 0.02, what: str = "condition"):
    """``fn()`` (a coroutine function) polled until truthy: helpers.wait_async, with this module's defaults."""
    return await wait_async(fn, timeout, what, interval=interval)


async def get_or_none(kube: Kube, path: str) -> dict | None:
    try:
        return await kube.request("GET", path)
    except KubeApiError as e:
        if e.status == 404:
            return None
        raise


async def wait_object(kube: Kube, path: str, timeout: float = WAIT) -> dict:
    return await wait_for(lambda: get_or_none(kube, path), timeout, what=path)


async def run_builder(admin: Kube, api, ns: str, job_name: str, *, ok: bool = True, digest: str = DIGEST,
                      output: str = "error: pip install failed: No matching distribution found for nosuchpkg"):
    """The Job controller: a pod from the build Job's template (owned by the
    Job), finished by the kubelet with the digest as termination message,
    then the Job's status written in the 1.35 order."""
    pod = await start_builder(admin, ns, job_name)
    await harness.complete_pod(api, ns, pod["metadata"]["name"], exit_code=0 if ok else 1,
                               message=digest if ok else output, container=obj.BUILD_CONTAINER)
    return await harness.complete_job(api, ns, obj.build_job_name(job_name), succeeded=ok)


async def start_builder(admin: Kube, ns: str, job_name: str) -> dict:
    """The Job controller's first step: the build Job's pod (owned by the Job), not finished."""
    bj_name = obj.build_job_name(job_name)
    bj = await wait_object(admin, JOBS.path(ns, bj_name))
    tmpl = bj["spec"]["template"]
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{bj_name}-{uuid.uuid4().hex[:5]}", "namespace": ns,
                     "labels": {**tmpl["metadata"]["labels"], "batch.kubernetes.io/job-name": bj_name,
                                "job-name": bj_name, "batch.kubernetes.io/controller-uid": bj["metadata"]["uid"]},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": bj_name,
                                          "uid": bj["metadata"]["uid"], "controller": True}]},
        "spec": copy.deepcopy(tmpl["spec"]),
    }
    return await admin.request("POST", PODS.path(ns), body=pod)


def summary(verdict: str = "Succeeded", **kw) -> str:
    result = {"verdict": verdict, "reason": "ValidationSucceeded" if verdict == "Succeeded" else "CellExecutionFailed",
              "message": "2 code cells ran without errors", "failedCellIndex": None, "durationSeconds": 1.5,
              "results": [{"cellIndex": 0, "status": "Success"}, {"cellIndex": 1, "status": "Success"}],
              "comparisonResult": None, "executedNotebook": "/tmp/executed.ipynb"}
    result.update(kw)
    return termination_summary(result)


async def run_validation(admin: Kube, api, ns: str, job_name: str, *, exit_code: int = 0,
                         message: str | None = None) -> dict:
    """The kubelet: the validation pod ran and its runner wrote the summary."""
    pod_name = obj.validation_pod_name(job_name)
    await wait_object(admin, PODS.path(ns, pod_name))
    return await harness.complete_pod(api, ns, pod_name, exit_code=exit_code,
                                      message=summary() if message is None else message,
                                      container=obj.RUNNER_CONTAINER)


async def events_of(admin: Kube, ns: str, uid: str) -> list[dict]:
    page = await admin.request("GET", EVENTS.path(ns))
    evs = [e for e in page.get("items") or [] if (e.get("regarding") or {}).get("uid") == uid]
    return sorted(evs, key=lambda e: (e["eventTime"], e["metadata"]["name"]))


# --------------------------------------------------------------------------
# the stand-in registry

REGISTRY_DIGEST = "sha256:" + "a" * 64  # what a Registry(200) answers for every manifest


class Registry:
    """The tests' one stand-in registry: a real aiohttp server on 127.0.0.1 answering the
    Docker Registry HTTP API v2's manifest requests (HEAD/GET /v2/<name>/manifests/<ref>)
    over plain HTTP.

    ``status`` None: a registry holding ``manifests[(repository, tag)] = digest`` (200 with the
    digest, else 404); with ``token``, 401 with a bearer challenge until the token from /token
    is shown. ``status`` an HTTP status: every manifest request answers it (200 with ``REGISTRY_DIGEST``;
    404, 401, 503...: a fault to inject), ``GET /v2/`` too when it is 5xx. ``requests``: each
    manifest request (method, path, Authorization) and each token request, in order."""

    def __init__(self, status: int | None = None, *, token: bool = False):
        self.status = status
        self.manifests: dict[tuple[str, str], str] = {}
        self.token = token
        self.requests: list[tuple[str, str, str | None]] = []

    async def start(self) -> Registry:
        app = web.Application()
        app.router.add_route("*", "/v2/{repo:.+}/manifests/{ref}", self._manifest)
        app.router.add_get("/v2/", self._base)
        app.router.add_get("/token", self._token)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.host = "127.0.0.1:%d" % site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        await self._runner.cleanup()

    async def _base(self, request: web.Request) -> web.Response:
        return web.Response(status=self.status if self.status is not None and self.status >= 500 else 200)

    async def _manifest(self, request: web.Request) -> web.Response:
        self.requests.append((request.method, request.path, request.headers.get("Authorization")))
        if self.status is not None:
            if self.status == 200:
                return web.Response(status=200, headers={"Docker-Content-Digest": REGISTRY_DIGEST})
            return web.Response(status=self.status)
        if self.token and request.headers.get("Authorization") != "Bearer t0k3n":
            return web.Response(status=401, headers={"WWW-Authenticate": (
                f'Bearer realm="http://{self.host}/token",service="fake",'
                f'scope="repository:{request.match_info["repo"]}:pull"')})
        digest = self.manifests.get((request.match_info["repo"], request.match_info["ref"]))
        if digest is None:
            return web.Response(status=404)
        return web.Response(status=200, headers={"Docker-Content-Digest": digest,
                                                 "Content-Type": "application/vnd.oci.image.manifest.v1+json"})

    async def _token(self, request: web.Request) -> web.Response:
        self.requests.append(("GET", f"/token scope={request.query.get('scope')} "
                                     f"service={request.query.get('service')}", None))
        return web.json_response({"token": "t0k3n"})
