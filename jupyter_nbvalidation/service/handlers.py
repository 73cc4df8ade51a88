"""REST handlers under ``{base_url}nbvalidation/api/v1``. Thin: parse, call
the service, answer JSON. Every route needs Jupyter authentication and
authorization (resource ``nbvalidation``); errors share one JSON shape."""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Awaitable, Callable, cast

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web

from jupyter_nbvalidation.composition import NBValidationSettings
from jupyter_nbvalidation.service.errors import ApiError, store_api_error
from jupyter_nbvalidation.service.jobs import JobService
from jupyter_nbvalidation.service.openapi import openapi_document
from jupyter_nbvalidation.service.schedules import Schedules
from jupyter_nbvalidation.service.strict_json import MAX_BODY_BYTES, check_json_content_type, dumps, loads_strict

PREFIX = "nbvalidation/api/v1"
AUTH_RESOURCE = "nbvalidation"
NAME = r"(?P<name>[^/]+)"  # any segment: an unknown name is a JSON 404 from the service


def api(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Map ApiError to its status and the stable error body."""

    @functools.wraps(method)
    async def wrapper(self: "BaseHandler", *args: Any, **kwargs: Any) -> Any:
        try:
            problem = None if self.serves_without_store else self.service.start_problem
            if problem:  # the store could not be opened (yet)
                raise ApiError(503, "StoreUnavailable", f"The job store is not available: {problem}.")
            return await method(self, *args, **kwargs)
        except ApiError as e:
            self.set_status(e.status)
            self.set_header("Content-Type", "application/json")
            if e.retry_after is not None:
                self.set_header("Retry-After", str(e.retry_after))
            self.finish(dumps(e.to_json()))
        except Exception as e:
            err = store_api_error(e)
            if err is None:
                raise
            self.set_status(err.status)
            self.set_header("Content-Type", "application/json")
            self.set_header("Retry-After", "1")
            self.finish(dumps(err.to_json()))

    return wrapper


class BaseHandler(ExtensionHandlerMixin, APIHandler):
    auth_resource = AUTH_RESOURCE
    serves_without_store = False  # True: answers while the engine could not start (health, the schema)

    @property
    def service(self) -> JobService:
        service: JobService = self.settings["nbvalidation_service"]
        scope = self.settings.get("nbvalidation_user_scope")  # a JupyterHub service: the caller's view
        return scope(self, service) if scope is not None else service

    # Unauthenticated requests get 401 (Jupyter's default for API handlers is
    # 403, which hides the difference between "who are you" and "not allowed").
    def check_xsrf_cookie(self) -> None:
        if hasattr(self, "_jupyter_current_user") and not self.current_user:
            self.set_header("WWW-Authenticate", 'token realm="jupyter"')
            raise web.HTTPError(401, "authentication required")
        return super().check_xsrf_cookie()

    def get_login_url(self) -> str:
        if not self.current_user:
            self.set_header("WWW-Authenticate", 'token realm="jupyter"')
            raise web.HTTPError(401, "authentication required")
        return super().get_login_url()

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Tornado errors (auth, XSRF, 404 routes, crashes) in our one shape."""
        self.set_header("Content-Type", "application/json")
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = self._reason
        if isinstance(exc, web.HTTPError) and exc.log_message:
            message = exc.log_message % exc.args if exc.args else exc.log_message
        code = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
                405: "MethodNotAllowed", 413: "TooLarge", 415: "UnsupportedMediaType"}.get(status_code, "InternalError")
        if status_code == 405:
            self.set_header("Allow", ", ".join(m for m in ("GET", "POST", "PUT", "PATCH", "DELETE")
                                               if m.lower() in type(self).__dict__))
        if status_code >= 500:
            message = "Internal error; see the server log."
        self.finish(dumps({"error": {"code": code, "message": message, "field": None}}))

    def send(self, obj: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(dumps(obj))

    def json_body(self) -> Any:
        """Standard JSON only (see strict_json.loads_strict): no NaN/Infinity, no
        overlong numbers, bounded depth and size; a refusal is a 400/413."""
        if not self.request.body:
            raise ApiError(400, "BadRequest", "the request body must be a JSON job spec")
        check_json_content_type(self.request.headers.get("Content-Type"))
        if len(self.request.body) > MAX_BODY_BYTES:
            raise ApiError(413, "TooLarge", f"the request body is {len(self.request.body)} bytes; the limit is "
                                            f"{MAX_BODY_BYTES} bytes")
        try:
            return loads_strict(self.request.body)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise ApiError(400, "MalformedJSON", f"the request body is not valid JSON: {e}") from None

    def int_arg(self, name: str, default: int, lo: int, hi: int) -> int:
        raw = self.get_query_argument(name, None)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ApiError(400, "InvalidField", f"{name} must be an integer", name) from None
        if not lo <= value <= hi:
            raise ApiError(400, "InvalidField", f"{name} must be between {lo} and {hi}", name)
        return value


class JobsHandler(BaseHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self) -> None:
        limit = self.int_arg("limit", 50, 1, cast(NBValidationSettings, self.extensionapp).max_page_size)
        probes = (self.get_query_argument("probes", "false") or "false").lower()
        if probes not in ("true", "false"):
            raise ApiError(400, "InvalidField", "probes must be true or false", "probes")
        schedule = self.get_query_argument("schedule", None) or None
        if schedule is not None:  # a schedule's runs (its series), newest first
            self.send(await Schedules(self.service).jobs(schedule, limit))
            return
        self.send(await self.service.list_jobs(self.get_query_argument("notebook", None), limit,
                                          self.get_query_argument("continue", None) or None, probes == "true"))

    @web.authenticated
    @authorized
    @api
    async def post(self) -> None:
        job = await self.service.submit(self.json_body(), self.get_query_argument("probeOf", None) or None)
        self.set_header("Location", self.request.path.rstrip("/") + "/" + job["metadata"]["name"])
        self.send(job, 201)


class UnchangedHandler(BaseHandler):
    @web.authenticated
    @authorized
    @api
    async def post(self) -> None:
        # the verdict cache: the earlier Succeeded job standing for this spec's inputs, or null
        self.send({"job": await self.service.unchanged(self.json_body())})


class JobHandler(BaseHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, name: str) -> None:
        self.send(await self.service.get(name))

    @web.authenticated
    @authorized
    @api
    async def delete(self, name: str) -> None:
        # a finished job is removed (200, a Status); a running one is cancelled (202, the job).
        # ?cancelOnly=true never removes: a Cancel button racing the job's end leaves it as it ended
        flag = (self.get_query_argument("cancelOnly", "") or "").lower()
        if flag not in ("", "true", "false", "1", "0"):
            raise ApiError(400, "InvalidField", "cancelOnly must be true or false", "cancelOnly")
        code, answer = await self.service.delete(name, cancel_only=flag in ("true", "1"))
        self.send(answer, code)


class EventsHandler(BaseHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, name: str) -> None:
        self.send({"apiVersion": "events.k8s.io/v1", "kind": "EventList",
                   "items": await self.service.events(name)})


class TimelineHandler(BaseHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, name: str) -> None:
        self.send(await self.service.timeline(name))


NOTEBOOK_CHUNK = 1 << 20


class NotebookHandler(BaseHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, name: str) -> None:
        # read and serialised in a thread, sent in pieces: a large notebook never stalls the loop
        # (its size is bounded by the job's outputLimits, runner/outputs.py)
        nb = await self.service.executed_notebook(name)
        body = (await asyncio.to_thread(dumps, nb)).encode("utf-8")
        del nb
        self.set_status(200)
        self.set_header("Content-Type", "application/json")
        view = memoryview(body)
        for start in range(0, len(body), NOTEBOOK_CHUNK):
            self.write(bytes(view[start:start + NOTEBOOK_CHUNK]))
            await self.flush()
        self.finish()


class BuildLogHandler(BaseHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, name: str) -> None:
        chunk = await self.service.build_log(name, self.int_arg("offset", 0, 0, 2**62))
        self.set_header("X-Build-Log-Complete", "true" if chunk.complete else "false")
        self.set_header("X-Build-Log-Next-Offset", str(chunk.next_offset))
        self.set_header("Cache-Control", "no-store")
        self.finish(chunk.data, set_content_type="text/plain; charset=utf-8")


class EnvironmentHandler(BaseHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, name: str) -> None:
        self.send(await self.service.environment_record(name))


class LockHandler(BaseHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, name: str) -> None:
        text = await self.service.lock(name)
        self.set_header("Content-Disposition", f'attachment; filename="{name}.lock.txt"')
        self.set_header("Cache-Control", "no-store")
        self.finish(text.encode(), set_content_type="text/plain; charset=utf-8")


class BisectHandler(BaseHandler):
    """The lab's Find the cause: a search for the package changes that turned a failed job red."""

    @web.authenticated
    @authorized
    @api
    async def get(self, name: str) -> None:
        self.send(await self.service.bisect_status(name))

    @web.authenticated
    @authorized
    @api
    async def post(self, name: str) -> None:
        from jupyter_nbvalidation.service.bisections import MAX_STEPS_LIMIT  # deferred: start-up time of the server

        started, doc = await self.service.bisect_start(name, self.int_arg("maxSteps", 12, 1, MAX_STEPS_LIMIT))
        self.send(doc, 202 if started else 200)

    @web.authenticated
    @authorized
    @api
    async def delete(self, name: str) -> None:
        self.send(await self.service.bisect_stop(name))


class ChangesHandler(BaseHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, name: str) -> None:
        self.send(await self.service.since_last_success(name))


class NotificationsHandler(BaseHandler):
    """The caller's notifications (a schedule's series that changed colour), newest first."""

    @web.authenticated
    @authorized
    @api
    async def get(self) -> None:
        self.send(await self.service.notifications(self.int_arg("limit", 50, 1, 500)))


class NotificationSeenHandler(BaseHandler):
    @web.authenticated
    @authorized
    @api
    async def post(self, name: str) -> None:
        self.send(await self.service.notification_seen(name))


class ProjectSettingsHandler(BaseHandler):
    """The project settings file of a notebook's project (service/project_settings.py): GET reads
    what applies to ``?notebook=PATH``, PUT replaces that notebook's own entry."""

    @web.authenticated
    @authorized
    @api
    async def get(self) -> None:
        self.send(await self.service.project_settings(self.get_query_argument("notebook", None)))

    @web.authenticated
    @authorized
    @api
    async def put(self) -> None:
        self.send(await self.service.put_project_settings(self.json_body()))


class SchedulesHandler(BaseHandler):
    """NotebookValidationSchedules (service/schedules.py): the caller's, and a new one."""

    @web.authenticated
    @authorized
    @api
    async def get(self) -> None:
        self.send(await Schedules(self.service).list())

    @web.authenticated
    @authorized
    @api
    async def post(self) -> None:
        doc = await Schedules(self.service).create(self.json_body())
        self.set_header("Location", self.request.path.rstrip("/") + "/" + doc["metadata"]["name"])
        self.send(doc, 201)


class ScheduleHandler(BaseHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, name: str) -> None:
        self.send(await Schedules(self.service).get(name))

    @web.authenticated
    @authorized
    @api
    async def patch(self, name: str) -> None:
        # {"spec": {"suspend": true|false}}: pause or resume (nothing else changes in place)
        self.send(await Schedules(self.service).set_suspend(name, self.json_body()))

    @web.authenticated
    @authorized
    @api
    async def delete(self, name: str) -> None:
        self.send(await Schedules(self.service).delete(name))  # its jobs stay


class ScheduleTriggerHandler(BaseHandler):
    @web.authenticated
    @authorized
    @api
    async def post(self, name: str) -> None:
        job = await Schedules(self.service).trigger(name)  # a run still going: 409
        self.set_header("Location", f"{self.base_url}{PREFIX}/jobs/{job['metadata']['name']}")
        self.send(job, 201)


class ScheduleJobsHandler(BaseHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, name: str) -> None:
        limit = self.int_arg("limit", 50, 1, cast(NBValidationSettings, self.extensionapp).max_page_size)
        self.send(await Schedules(self.service).jobs(name, limit))


class HealthHandler(BaseHandler):
    serves_without_store = True
    @web.authenticated
    @authorized
    @api
    async def get(self) -> None:
        self.send(await self.service.health())


class OpenAPIHandler(BaseHandler):
    serves_without_store = True
    @web.authenticated
    @authorized
    @api
    async def get(self) -> None:
        self.send(openapi_document(self.base_url))


def routes() -> list[tuple[str, type]]:
    p = f"/{PREFIX}"
    return [
        (rf"{p}/jobs/?", JobsHandler),
        (rf"{p}/jobs/{NAME}/?", JobHandler),
        (rf"{p}/jobs/{NAME}/events/?", EventsHandler),
        (rf"{p}/jobs/{NAME}/timeline/?", TimelineHandler),
        (rf"{p}/jobs/{NAME}/notebook/?", NotebookHandler),
        (rf"{p}/jobs/{NAME}/buildlog/?", BuildLogHandler),
        (rf"{p}/jobs/{NAME}/environment/?", EnvironmentHandler),
        (rf"{p}/jobs/{NAME}/lock/?", LockHandler),
        (rf"{p}/jobs/{NAME}/bisect/?", BisectHandler),
        (rf"{p}/jobs/{NAME}/changes/?", ChangesHandler),
        (rf"{p}/schedules/?", SchedulesHandler),
        (rf"{p}/schedules/{NAME}/?", ScheduleHandler),
        (rf"{p}/schedules/{NAME}/trigger/?", ScheduleTriggerHandler),
        (rf"{p}/schedules/{NAME}/jobs/?", ScheduleJobsHandler),
        (rf"{p}/notifications/?", NotificationsHandler),
        (rf"{p}/notifications/{NAME}/seen/?", NotificationSeenHandler),
        (rf"{p}/unchanged/?", UnchangedHandler),
        (rf"{p}/project-settings/?", ProjectSettingsHandler),
        (rf"{p}/health/?", HealthHandler),
        (rf"{p}/openapi.json", OpenAPIHandler),
    ]
