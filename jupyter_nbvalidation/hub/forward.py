"""A user's server on a hub that runs the team's validation service: its REST routes (the ones
the lab panel, the magic and ``run --server`` use) forward every request to the service, with
the server's own Hub token (``JUPYTERHUB_API_TOKEN``), so the user does nothing. A submit (and
the verdict cache's question) carries the notebook and its inputs (upload.py), read from this
server's root; every answer (the job, its executed notebook, build log, environment record,
lock, the search for the cause) comes back as the service gave it. Asynchronous throughout
(tornado's AsyncHTTPClient; the files are read in a thread): the server's loop never waits."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import httpclient, web

from jupyter_nbvalidation.hub.upload import pack
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.service.handlers import PREFIX, BaseHandler, api
from jupyter_nbvalidation.service.strict_json import dumps

#: set in a user server's environment by ``hub-config`` (c.Spawner.environment): the service's
#: URL with its prefix, e.g. http://127.0.0.1:10101/services/nbvalidation/
SERVICE_URL_ENV = "NBVALIDATION_SERVICE_URL"
#: the answer's headers passed back as they are
PASSED_HEADERS = ("Content-Type", "Retry-After", "X-Build-Log-Complete", "X-Build-Log-Next-Offset",
                  "Content-Disposition", "Cache-Control", "Allow", "WWW-Authenticate")
#: the submits whose body is a spec whose inputs travel with it
UPLOADED = ("jobs", "unchanged")
CONNECT_TIMEOUT = 10.0
REQUEST_TIMEOUT = 300.0


def service_url() -> str | None:
    """The team's service this server forwards to, or None (it serves its own jobs)."""
    url = os.environ.get(SERVICE_URL_ENV, "").strip()
    return url.rstrip("/") + "/" if url else None


class ForwardHandler(BaseHandler):
    """Every route of the REST API, forwarded to the team's service."""

    serves_without_store = True  # no store here: the service answers for its own

    @property
    def target(self) -> str:
        return str(self.settings["nbvalidation_forward_url"])

    async def _forward(self, method: str, path: str) -> None:
        body: bytes | None = None
        headers = {"Accept": self.request.headers.get("Accept", "application/json")}
        token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        if token:
            headers["Authorization"] = f"token {token}"
        if method in ("POST", "PATCH"):
            body = self.request.body or b""
            if path.strip("/") in UPLOADED:  # the files are not on the service's disk: they travel
                spec = self.json_body()
                root = str(self.settings.get("server_root_dir") or self.settings["nbvalidation_root_dir"])
                upload = await asyncio.to_thread(pack, spec, root)
                body = (await asyncio.to_thread(dumps, upload)).encode("utf-8")
            headers["Content-Type"] = "application/json"
        url = self.target + PREFIX + "/" + path
        if self.request.query:
            url += "?" + self.request.query
        request = httpclient.HTTPRequest(url, method=method, headers=headers, body=body,
                                         allow_nonstandard_methods=True, follow_redirects=False,
                                         connect_timeout=CONNECT_TIMEOUT, request_timeout=REQUEST_TIMEOUT)
        try:
            response = await httpclient.AsyncHTTPClient().fetch(request, raise_error=False)
        except (OSError, httpclient.HTTPClientError) as e:
            raise ApiError(503, "ServiceUnavailable", f"the team's validation service at {self.target} is not "
                                                      f"reachable: {e}") from None
        if response.code == 599:  # tornado's own: no answer (refused, timed out)
            raise ApiError(503, "ServiceUnavailable", f"the team's validation service at {self.target} is not "
                                                      f"reachable: {response.error}")
        self.set_status(response.code)
        for name in PASSED_HEADERS:
            value = response.headers.get(name)
            if value is not None:
                self.set_header(name, value)
        location = response.headers.get("Location")
        if location:  # the new job, as this server serves it
            self.set_header("Location", self.request.path.rstrip("/") + "/" + location.rstrip("/").rsplit("/", 1)[-1])
        self.finish(response.body or b"")

    @web.authenticated
    @authorized
    @api
    async def get(self, path: str) -> None:
        await self._forward("GET", path)

    @web.authenticated
    @authorized
    @api
    async def post(self, path: str) -> None:
        await self._forward("POST", path)

    @web.authenticated
    @authorized
    @api
    async def delete(self, path: str) -> None:
        await self._forward("DELETE", path)

    @web.authenticated
    @authorized
    @api
    async def patch(self, path: str) -> None:  # a schedule's pause and resume
        await self._forward("PATCH", path)


def routes() -> list[tuple[str, type]]:
    return [(rf"/{PREFIX}/(?P<path>.*)", ForwardHandler)]


def forward_settings(url: str, root_dir: str) -> dict[str, Any]:
    return {"nbvalidation_forward_url": url, "nbvalidation_root_dir": root_dir}
