"""The service's own handlers (thin): a submit and the verdict cache's question carry their files
(upload.py), laid out in a folder of the job's own under the service's uploads folder before the
usual submit reads its snapshot there; a deleted job's folder goes with it; ``/metrics``. Every
other route is service/handlers.py's, each request seen through the caller's view of the service
(service_app.py ``user_view``)."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from jupyter_nbvalidation.hub import metrics
from jupyter_nbvalidation.hub.auth import is_admin
from jupyter_nbvalidation.hub.upload import is_upload, unpack
from jupyter_nbvalidation.service import handlers as rest
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.service.jobs import JobService
from jupyter_nbvalidation.service.tenancy import owner_label

METRICS_SCOPE = "custom:nbvalidation:metrics"


class UploadMixin(rest.BaseHandler):
    @property
    def uploads(self) -> str:
        return str(self.settings["nbvalidation_uploads"])

    def origin(self) -> JobService:
        service: JobService = self.settings["nbvalidation_service"]
        return service

    async def unpacked(self) -> tuple[Any, str]:
        """(the spec, the new folder holding its files) of this request's upload."""
        body = self.json_body()
        if not is_upload(body):
            raise ApiError(400, "InvalidField", "the team's service takes a submit with its files: a body of kind "
                           "NotebookValidationUpload (a user's server sends it; `jupyter nbvalidation` and the "
                           "lab do so through it)", "kind")
        user = self.current_user
        folder = os.path.join(self.uploads, owner_label(user.username), uuid.uuid4().hex)
        try:
            spec = await asyncio.to_thread(unpack, body, folder)
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, folder, True)
            raise
        return spec, folder

    def view_at(self, folder: str) -> JobService:
        user = self.current_user
        return self.origin().as_user(user.username, is_admin(user), root_dir=folder, groups=getattr(user, "groups", ()))


class JobsHandler(UploadMixin, rest.JobsHandler):
    @web.authenticated
    @authorized
    @rest.api
    async def post(self) -> None:
        spec, folder = await self.unpacked()
        try:
            job = await self.view_at(folder).submit(spec, self.get_query_argument("probeOf", None) or None)
        except BaseException:  # nothing created: its files go too
            await asyncio.to_thread(shutil.rmtree, folder, True)
            raise
        self.set_header("Location", self.request.path.rstrip("/") + "/" + job["metadata"]["name"])
        self.send(job, 201)


class UnchangedHandler(UploadMixin, rest.UnchangedHandler):
    @web.authenticated
    @authorized
    @rest.api
    async def post(self) -> None:
        spec, folder = await self.unpacked()
        counters: metrics.Counters = self.settings["nbvalidation_counters"]
        try:
            job = await self.view_at(folder).unchanged(spec)
        finally:
            await asyncio.to_thread(shutil.rmtree, folder, True)
        counters.cache_questions += 1
        counters.cache_hits += job is not None
        self.send({"job": job})


class JobHandler(UploadMixin, rest.JobHandler):
    @web.authenticated
    @authorized
    @rest.api
    async def delete(self, name: str) -> None:
        flag = (self.get_query_argument("cancelOnly", "") or "").lower()
        if flag not in ("", "true", "false", "1", "0"):
            raise ApiError(400, "InvalidField", "cancelOnly must be true or false", "cancelOnly")
        view = self.service
        job = await view.get(name)  # the caller's own (another's: 404)
        code, answer = await view.delete(name, cancel_only=flag in ("true", "1"))
        root = view._root_of(job)
        if answer.get("kind") == "Status" and root and \
                os.path.realpath(root).startswith(os.path.realpath(self.uploads) + os.sep):
            await asyncio.to_thread(shutil.rmtree, root, True)  # removed: its uploaded files go with it
        self.send(answer, code)


class MetricsHandler(rest.BaseHandler):
    """``GET …/nbvalidation/metrics``: for a Hub admin or a holder of ``custom:nbvalidation:admin``
    or ``custom:nbvalidation:metrics`` (a Prometheus' token)."""

    serves_without_store = False

    @web.authenticated
    @authorized
    @rest.api
    async def get(self) -> None:
        user = self.current_user
        scopes = getattr(user, "hub_model", {}).get("scopes") or []
        if not (is_admin(user) or METRICS_SCOPE in scopes):
            raise ApiError(403, "Forbidden", f"the metrics are for the hub's admins and holders of {METRICS_SCOPE}")
        origin: JobService = self.settings["nbvalidation_service"]
        jobs = await metrics.all_jobs(origin.store)
        body = await asyncio.to_thread(metrics.render, jobs, self.settings["nbvalidation_counters"])
        self.set_header("Cache-Control", "no-store")
        self.finish(body, set_content_type=metrics.CONTENT_TYPE)


REPLACED: dict[type, type] = {rest.JobsHandler: JobsHandler, rest.UnchangedHandler: UnchangedHandler,
                              rest.JobHandler: JobHandler}


def routes() -> list[tuple[str, type]]:
    """service/handlers.py's routes, the three above in their place, and ``/metrics``."""
    return [(path, REPLACED.get(handler, handler)) for path, handler in rest.routes()] + \
        [(r"/nbvalidation/metrics/?", MetricsHandler)]
