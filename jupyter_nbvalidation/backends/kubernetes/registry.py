"""Asking an image registry (Docker Registry HTTP API v2) for a manifest's
digest, without pulling anything: ``HEAD /v2/<name>/manifests/<reference>``.

Used for image reuse: a built image's tag is a hash of everything that goes
into it (the base image's digest, the Dockerfile, the requirements, the
runner), so a tag that exists already is that same environment, and its
digest is recorded instead of building again; and to pin the base image by
digest. Anonymous access only (with the registry's bearer-token challenge
answered anonymously): the server never reads registry credentials; a
registry that refuses is "unknown", and the build runs as without reuse.

aiohttp (from the ``kubernetes`` extra); nothing blocks the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from dataclasses import dataclass

import aiohttp

from jupyter_nbvalidation.core.tasks import wait_within

DOCKER_HUB = "registry-1.docker.io"
MANIFEST_TYPES = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


class RegistryError(Exception):
    """The registry could not say (unreachable, refused, unexpected answer).

    ``transient``: the registry may answer soon (no connection, no answer within
    the timeout, 5xx, 429); a refusal (401/403) or an odd answer is not."""

    def __init__(self, message: str, *, transient: bool = False, host: str = "") -> None:
        super().__init__(message)
        self.transient = transient
        self.host = host


def transient_status(status: int) -> bool:
    """An HTTP status a registry answers while it is overloaded or away for a moment."""
    return status == 429 or status >= 500


@dataclass(frozen=True)
class ImageRef:
    host: str  # as in the reference ("docker.io" for Docker Hub)
    repository: str  # path inside the registry (library/python for "python")
    tag: str | None
    digest: str | None

    @property
    def api_host(self) -> str:
        return DOCKER_HUB if self.host in ("docker.io", "index.docker.io") else self.host

    @property
    def name(self) -> str:
        """The repository as written in image references (host/path)."""
        return f"{self.host}/{self.repository}"


def parse_reference(image: str) -> ImageRef:
    """``[host[:port]/]path[:tag][@sha256:...]`` with Docker's defaults
    (no host: docker.io, one path component: library/, no tag: latest)."""
    rest, _, digest = image.partition("@")
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        host, path = first, remainder
    else:
        host, path = "docker.io", rest
    last = path.rsplit("/", 1)[-1]
    tag = None
    if ":" in last:
        path, tag = path.rsplit(":", 1)
    if host == "docker.io" and "/" not in path:
        path = f"library/{path}"
    if not digest and not tag:
        tag = "latest"
    return ImageRef(host=host, repository=path, tag=tag, digest=digest or None)


class RegistryClient:
    """``digest(image)``: the manifest digest the registry serves for a
    reference, ``None`` when it has no such manifest (404)."""

    def __init__(self, *, plain_http_hosts: set[str] | None = None, timeout: float = 10.0):
        self.plain_http_hosts = set(plain_http_hosts or ())
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    def _scheme(self, host: str) -> str:
        return "http" if host in self.plain_http_hosts else "https"

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        return self._session

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()

    async def digest(self, image: str) -> str | None:
        try:
            return await wait_within(self._digest(parse_reference(image)), self.timeout)
        except asyncio.TimeoutError:
            host = parse_reference(image).api_host
            raise RegistryError(f"no answer from {host} within {self.timeout:g}s", transient=True, host=host) from None
        except aiohttp.ClientSSLError as e:  # TLS refused (e.g. a plain-HTTP registry asked over https): not a blip
            host = parse_reference(image).api_host
            hint = "" if host in self.plain_http_hosts else (
                " (a plain-HTTP registry needs c.KubernetesBackend.registry_insecure)")
            raise RegistryError(f"{host}: {type(e).__name__}: {e}{hint}", host=host) from None
        except aiohttp.ClientError as e:
            host = parse_reference(image).api_host
            raise RegistryError(f"{host}: {type(e).__name__}: {e}", transient=True, host=host) from None
        except ValueError as e:  # a host no URL can hold (an IDNA label too long, ...)
            raise RegistryError(f"{image!r} is not an image reference a registry can be asked about ({e})") from None

    async def _digest(self, ref: ImageRef) -> str | None:
        url = f"{self._scheme(ref.api_host)}://{ref.api_host}/v2/{ref.repository}/manifests/{ref.digest or ref.tag}"
        headers = {"Accept": MANIFEST_TYPES}
        session = self.session()
        for attempt in range(2):
            async with session.head(url, headers=headers, allow_redirects=True) as r:
                if r.status == 401 and attempt == 0:
                    token = await self._anonymous_token(r.headers.get("WWW-Authenticate", ""), ref)
                    if token:
                        headers["Authorization"] = f"Bearer {token}"
                        continue
                if r.status == 404:
                    return None
                if r.status != 200:
                    raise RegistryError(f"{ref.api_host} answered {r.status} for {ref.repository}",
                                        transient=transient_status(r.status), host=ref.api_host)
                digest = r.headers.get("Docker-Content-Digest")
            if digest:
                return digest
            # a registry that does not say on HEAD: the digest of the manifest's bytes
            async with session.get(url, headers=headers, allow_redirects=True) as r:
                if r.status != 200:
                    raise RegistryError(f"{ref.api_host} answered {r.status} for {ref.repository}",
                                        transient=transient_status(r.status), host=ref.api_host)
                return r.headers.get("Docker-Content-Digest") or "sha256:" + hashlib.sha256(await r.read()).hexdigest()
        raise RegistryError(f"{ref.api_host} refused anonymous access to {ref.repository}", host=ref.api_host)

    async def ping(self, host: str) -> str | None:
        """Whether the registry at ``host`` answers ``GET /v2/`` (any HTTP answer,
        401 included, is an answer): None when it does, else why not."""
        try:
            async with self.session().get(f"{self._scheme(host)}://{host}/v2/", allow_redirects=False,
                                          timeout=aiohttp.ClientTimeout(total=self.timeout)) as r:
                if transient_status(r.status):
                    return f"{host} answered {r.status}"
                return None
        except asyncio.TimeoutError:
            return f"no answer from {host} within {self.timeout:g}s"
        except aiohttp.ClientError as e:
            return f"{host}: {type(e).__name__}: {e}"

    async def _anonymous_token(self, challenge: str, ref: ImageRef) -> str | None:
        if not challenge.lower().startswith("bearer "):
            return None
        params = dict(_CHALLENGE.findall(challenge))
        realm = params.pop("realm", None)
        if not realm:
            return None
        params.setdefault("scope", f"repository:{ref.repository}:pull")
        async with self.session().get(realm, params=params) as r:
            if r.status != 200:
                return None
            body = await r.json(content_type=None)
        token: str | None = body.get("token") or body.get("access_token")  # the token endpoint's JSON strings
        return token
