"""A thin, plain-dict client over ``kubernetes.aio``'s ApiClient.

Why not the generated ``CoreV1Api`` & co.: they (de)serialise every object
through pydantic models, which costs time on the event loop and drifts with
each client release. The server only needs JSON in and JSON out, so
:class:`Kube` uses the library's ApiClient for what it does well (TLS,
authentication, token refresh hooks, the aiohttp session) and exchanges plain
dicts, with one place that maps HTTP errors to :class:`KubeApiError`.

Nothing here blocks the event loop: the kubeconfig / in-cluster files are
read once, in a worker thread, by :func:`connect`; every request is aiohttp.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
import os
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable

import aiohttp
from kubernetes.aio.client import ApiClient, Configuration
from kubernetes.aio.client.rest import RESTResponse
from kubernetes.aio.config import ConfigException, load_kube_config, refresh_token
from kubernetes.aio.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_HOST_ENV_NAME,
    SERVICE_PORT_ENV_NAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)

from jupyter_nbvalidation.core.redaction import scrub

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
DEFAULT_TIMEOUT = 30.0
WATCH_OPEN = "OPEN"  # pseudo event: the watch request was accepted


class KubeApiError(Exception):
    """A request failed: ``status`` is the HTTP status (0 when the API server
    could not be reached), ``reason`` the Status reason (``NotFound``,
    ``AlreadyExists``, ``Conflict``, ``Forbidden``, ``Expired``, ...)."""

    def __init__(self, status: int, reason: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(f"{status} {reason}: {message}" if status else message)
        self.status = status
        self.reason = reason
        self.message = message
        self.details = details or {}


def in_cluster() -> bool:
    return bool(os.environ.get(SERVICE_HOST_ENV_NAME) and os.environ.get(SERVICE_PORT_ENV_NAME)
                and os.path.isfile(SERVICE_TOKEN_FILENAME))


def default_namespace() -> str:
    """The pod's namespace when running in a cluster, else ``default``."""
    try:
        with open(NAMESPACE_FILE, encoding="utf-8") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def _load_kubeconfig(path: str | None, context: str | None) -> tuple[Configuration, Any]:
    """Runs in a worker thread (file I/O, possibly an exec credential plugin):
    a private event loop drives the library's async loader there."""
    cfg = type.__call__(Configuration)
    path = os.path.expanduser(path) if path else None
    # kubernetes.aio.config is not annotated: its loaders are untyped
    loader = asyncio.run(load_kube_config(config_file=path, context=context or None,  # type: ignore[no-untyped-call]
                                          client_configuration=cfg, persist_config=False))
    return cfg, loader


def _refreshes(loader: Any) -> bool:
    """Short-lived credentials (an exec plugin, e.g. EKS/GKE) must be renewed."""
    user = getattr(loader, "_user", None)
    return getattr(loader, "provider", None) == "gcp" or (user is not None and "exec" in user)


def _load_in_cluster() -> tuple[Configuration, float]:
    cfg = type.__call__(Configuration)
    # kubernetes.aio.config is not annotated: its loaders are untyped
    InClusterConfigLoader(token_filename=SERVICE_TOKEN_FILENAME,  # type: ignore[no-untyped-call]
                          cert_filename=SERVICE_CERT_FILENAME, try_refresh_token=False).load_and_set(cfg)
    return cfg, os.path.getmtime(SERVICE_TOKEN_FILENAME)


def _token_refresher(period: float = 60.0) -> Callable[[Configuration], Awaitable[None]]:
    """An async refresh hook for projected service-account tokens (they rotate):
    re-read the token file at most once a ``period``, in a worker thread."""
    state = {"at": _dt.datetime.now().timestamp()}

    async def refresh(cfg: Configuration) -> None:
        now = _dt.datetime.now().timestamp()
        if now - state["at"] < period:
            return
        state["at"] = now

        def read() -> str | None:
            try:
                with open(SERVICE_TOKEN_FILENAME, encoding="utf-8") as f:
                    return f.read().strip() or None
            except OSError:
                return None

        token = await asyncio.to_thread(read)
        if token:
            cfg.api_key["BearerToken"] = f"bearer {token}"

    return refresh


async def connect(kubeconfig: str | None = None, context: str | None = None, *,
                  trace_configs: list[aiohttp.TraceConfig] | None = None,
                  pool_size: int = 32) -> "Kube":
    """A :class:`Kube` from a kubeconfig file (``kubeconfig`` or $KUBECONFIG /
    ~/.kube/config), or from the in-cluster service account when no kubeconfig
    is given and the process runs in a pod. Raises KubeApiError(0, ...) with
    a message that names the source (never its contents) when it cannot."""
    loader = None
    try:
        if not kubeconfig and not os.environ.get("KUBECONFIG") and in_cluster():
            cfg, _ = await asyncio.to_thread(_load_in_cluster)
            # kubernetes.aio's Configuration declares the hook as None only (it takes a callable)
            cfg.refresh_api_key_hook = _token_refresher()  # type: ignore[assignment]
        else:
            cfg, loader = await asyncio.to_thread(_load_kubeconfig,
                                                  kubeconfig or os.environ.get("KUBECONFIG") or None, context)
    except (ConfigException, OSError, ValueError, KeyError, TypeError) as e:
        source = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config (or in-cluster)"
        raise KubeApiError(0, "ConfigError", f"cannot load the Kubernetes configuration from {source}: "
                                             f"{type(e).__name__}: {scrub(str(e))[:300]}") from None
    cfg.connection_pool_maxsize = pool_size
    if trace_configs:
        cfg.trace_configs = list(trace_configs)
    kube = Kube(ApiClient(configuration=cfg))
    if loader is not None and _refreshes(loader):  # the library's renewal loop (every 60 s)
        kube._refresher = asyncio.get_running_loop().create_task(
            refresh_token(loader, cfg),  # type: ignore[no-untyped-call]  # kubernetes.aio.config is untyped
            name="nbvalidation-kube-credentials")
    return kube


@dataclass
class Resource:
    """Where a kind lives: ``/api/v1`` or ``/apis/<group>/<version>`` + plural."""

    group_version: str  # "v1", "batch/v1", "nbvalidation.dev/v1alpha1"
    plural: str

    def path(self, namespace: str, name: str | None = None, sub: str | None = None) -> str:
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        p = f"{base}/namespaces/{namespace}/{self.plural}"
        if name:
            p += f"/{name}"
        if sub:
            p += f"/{sub}"
        return p


PODS = Resource("v1", "pods")
CONFIGMAPS = Resource("v1", "configmaps")
JOBS = Resource("batch/v1", "jobs")
EVENTS = Resource("events.k8s.io/v1", "events")


class Kube:
    """JSON requests through one ``kubernetes.aio`` ApiClient."""

    def __init__(self, api: ApiClient):
        self.api = api
        self.requests = 0
        self._refresher: asyncio.Task[None] | None = None

    @property
    def host(self) -> str:
        cfg: Configuration = self.api.configuration  # ApiClient is untyped; Kube's is made with a Configuration
        return cfg.host

    async def close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            await asyncio.gather(self._refresher, return_exceptions=True)
            self._refresher = None
        await self.api.close()  # type: ignore[no-untyped-call]  # kubernetes.aio's ApiClient.close is untyped

    async def __aenter__(self) -> "Kube":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _send(self, method: str, path: str, query: dict[str, Any] | None, body: Any, content_type: str,
                    timeout: float | aiohttp.ClientTimeout, accept: str = JSON) -> RESTResponse:
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        headers = {"Accept": accept, "Content-Type": content_type}
        try:
            _, url, headers, body, _ = await self.api.param_serialize(
                method, path, query_params=params, header_params=headers, body=body,
                auth_settings=["BearerToken"])
            self.requests += 1
            return await self.api.call_api(method, url, header_params=headers, body=body,
                                           _request_timeout=timeout)
        except asyncio.CancelledError:
            raise
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            raise KubeApiError(0, "Unreachable", f"{method} {path}: the API server at {self.host} "
                                                 f"did not answer: {type(e).__name__}: {scrub(str(e))[:300]}") from None

    @staticmethod
    def _error(status: int, raw: bytes, method: str, path: str) -> KubeApiError:
        try:
            st = json.loads(raw)
        except ValueError:
            st = {}
        if not isinstance(st, dict):
            st = {}
        message = st.get("message") or raw.decode(errors="replace")[:300] or f"HTTP {status}"
        reason = st.get("reason") or {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
                                      409: "Conflict", 410: "Expired", 422: "Invalid"}.get(status, "Error")
        return KubeApiError(status, reason, scrub(message), st.get("details"))

    async def request(self, method: str, path: str, *, query: dict[str, Any] | None = None, body: Any = None,
                      content_type: str = JSON, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """One request; the decoded JSON answer. Raises KubeApiError."""
        resp = await self._send(method, path, query, body, content_type, timeout)
        try:
            raw = await resp.read()  # type: ignore[no-untyped-call]  # kubernetes.aio's RESTResponse is untyped
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise KubeApiError(0, "Unreachable", f"{method} {path}: reading the answer failed: {e}") from None
        if not 200 <= resp.status < 300:
            raise self._error(resp.status, raw, method, path)
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            raise KubeApiError(resp.status, "BadResponse", f"{method} {path}: the answer is not JSON") from None

    async def text(self, path: str, *, query: dict[str, Any] | None = None, timeout: float = DEFAULT_TIMEOUT,
                   limit: int = 16 * 2**20) -> str:
        """A plain-text GET (pod logs), at most ``limit`` bytes."""
        resp = await self._send("GET", path, query, None, JSON, timeout, accept="*/*")
        try:
            if resp.status < 300:
                chunks, total = [], 0
                while total <= limit:  # read() returns what one chunk holds: loop to the end
                    chunk = await resp.response.content.read(min(2**16, limit + 1 - total))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    total += len(chunk)
                raw = b"".join(chunks)
            else:
                raw = await resp.read()  # type: ignore[no-untyped-call]  # kubernetes.aio's RESTResponse is untyped
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise KubeApiError(0, "Unreachable", f"GET {path}: reading the answer failed: {e}") from None
        finally:
            _finish(resp.response)
        if not 200 <= resp.status < 300:
            raise self._error(resp.status, raw, "GET", path)
        return raw[:limit].decode("utf-8", errors="replace")

    async def watch(self, path: str, query: dict[str, Any], timeout_seconds: int) -> AsyncIterator[dict[str, Any]]:
        """The events of one watch request, decoded (``{"type", "object"}``),
        after a first ``{"type": WATCH_OPEN}`` once the server accepted it.
        Ends when the server closes the stream (after ``timeout_seconds``)."""
        q = dict(query, watch="true", timeoutSeconds=timeout_seconds)
        t = aiohttp.ClientTimeout(total=None, connect=DEFAULT_TIMEOUT, sock_read=timeout_seconds + 30)
        resp = await self._send("GET", path, q, None, JSON, t)
        try:
            if not 200 <= resp.status < 300:
                raw = await resp.read()  # type: ignore[no-untyped-call]  # kubernetes.aio's RESTResponse is untyped
                raise self._error(resp.status, raw, "GET", path)
            yield {"type": WATCH_OPEN}
            content = resp.response.content
            while True:
                try:
                    line = await content.readline()
                except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
                    raise KubeApiError(0, "Unreachable", f"watch {path} broke: {type(e).__name__}: {e}") from None
                if not line:
                    return
                line = line.strip()
                if not line:
                    continue
                try:
                    yield json.loads(line)
                except ValueError:
                    raise KubeApiError(0, "BadResponse", f"watch {path}: an event is not JSON") from None
        finally:
            _finish(resp.response)


def _finish(response: aiohttp.ClientResponse) -> None:
    """Give the connection back when the body was read to the end; close it
    when it was abandoned half-way (a cancelled watch)."""
    if response.content.at_eof():
        response.release()
    else:
        response.close()
