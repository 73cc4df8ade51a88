"""Schedules (``NotebookValidationSchedule``, docs/watching.md, Schedules): a job spec validated
on a cron expression, in the words of a Kubernetes CronJob. :class:`Schedules` is what the REST
routes and the CLI reach, for one view of the service (a Hub user's: only their schedules,
another's is a 404): a manifest checked field by field (an unknown field is a 400 naming it;
the job template by the very checks a submit runs, its fields named under
``spec.jobTemplate.spec``), stored, read back with its status (the next tick, the running job,
the strip of recent verdicts), paused, resumed, deleted (its jobs stay) and triggered. The loop
that creates the jobs on time is scheduler.py."""

from __future__ import annotations

import copy
import datetime as _dt
import re
import uuid
from typing import Any

from jupyter_nbvalidation.core import cron
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.model import Phase, is_terminal, isotime, parse_time
from jupyter_nbvalidation.core.redaction import scrub
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.service.git_source import has_git
from jupyter_nbvalidation.service.jobs import JobService
from jupyter_nbvalidation.service.queries import list_item
from jupyter_nbvalidation.service.strict_json import find_bad_number
from jupyter_nbvalidation.store.base import SCHEDULE_LABEL, AlreadyExists, Conflict, NotFound, StoreError

API_VERSION = "nbvalidation.dev/v1alpha1"
KIND = "NotebookValidationSchedule"
POLICIES = ("Forbid", "Allow", "Replace")
#: a CronJob's name: a DNS label, at most 52 characters (its jobs' names get a suffix)
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$")
RECENT = 10  # the runs status.recent shows (the lab's strip)
DEFAULT_SUCCESSFUL_LIMIT = 10
DEFAULT_FAILED_LIMIT = 10
MAX_HISTORY_LIMIT = 1000
#: where the stored document keeps who made it (never answered): the loop submits as them
CALLER_KEY = "x-caller"


def _bad(field: str, reason: str, status: int = 400, code: str = "InvalidSpec") -> ApiError:
    return ApiError(status, code, f"{field}: {reason}", field)


def _only(obj: Any, where: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _bad(where or "body", "must be an object")
    for key in obj:
        if key not in allowed:
            raise _bad(f"{where}.{key}" if where else str(key), f"unknown field (known: {', '.join(allowed)})")
    return obj


def check_manifest(body: Any, seconds_field: bool = False) -> dict[str, Any]:
    """The schedule's manifest, its fields checked (not the job template's: Schedules.create):
    ``{"metadata": {"name"}, "spec": {...}}`` with the defaults filled in, or ApiError 400
    naming the field."""
    bad = find_bad_number(body, "")
    if bad:
        raise _bad(bad[0].lstrip("."), bad[1])
    if not isinstance(body, dict):
        raise ApiError(400, "InvalidSpec", "the request body must be a NotebookValidationSchedule object")
    _only(body, "", ("apiVersion", "kind", "metadata", "spec", "status"))  # status: read-only, not read
    if body.get("apiVersion", API_VERSION) != API_VERSION:
        raise _bad("apiVersion", f"must be {API_VERSION}")
    if body.get("kind", KIND) != KIND:
        raise _bad("kind", f"must be {KIND}")
    meta = _only(body.get("metadata"), "metadata", ("name",))
    name = meta.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise _bad("metadata.name", "must be 1-52 characters of a-z, 0-9 and '-', starting and ending with a "
                                    "letter or digit")
    spec = _only(body.get("spec"), "spec", ("schedule", "suspend", "concurrencyPolicy", "jobTemplate",
                                            "successfulJobsHistoryLimit", "failedJobsHistoryLimit"))
    check_cron(spec.get("schedule"), seconds_field)
    suspend = spec.get("suspend", False)
    if not isinstance(suspend, bool):
        raise _bad("spec.suspend", "must be true or false")
    policy = spec.get("concurrencyPolicy", "Forbid")
    if policy not in POLICIES:
        raise _bad("spec.concurrencyPolicy", f"must be one of {', '.join(POLICIES)}")
    if policy != "Forbid":
        raise _bad("spec.concurrencyPolicy", f"{policy} is not supported here: a schedule never runs two of its "
                                             "jobs at once (Forbid: a tick that finds its last run still going is "
                                             "skipped and counted)")
    limits = {}
    for key, default in (("successfulJobsHistoryLimit", DEFAULT_SUCCESSFUL_LIMIT),
                         ("failedJobsHistoryLimit", DEFAULT_FAILED_LIMIT)):
        value = spec.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_HISTORY_LIMIT:
            raise _bad(f"spec.{key}", f"must be a whole number from 0 to {MAX_HISTORY_LIMIT}")
        limits[key] = value
    template = _only(spec.get("jobTemplate"), "spec.jobTemplate", ("spec",))
    if not isinstance(template.get("spec"), dict):
        raise _bad("spec.jobTemplate.spec", "required: the NotebookValidationJob spec each run gets")
    return {"metadata": {"name": name},
            "spec": {"schedule": spec["schedule"], "suspend": suspend, "concurrencyPolicy": policy,
                     "jobTemplate": {"spec": template["spec"]}, **limits}}


def check_cron(text: Any, seconds_field: bool = False) -> cron.Cron:
    if not isinstance(text, str):
        raise _bad("spec.schedule", "required: a cron expression (five fields, in UTC) or @hourly, @daily, @weekly")
    try:
        parsed = cron.parse(text, seconds=seconds_field)
        parsed.next_after(_dt.datetime.now(_dt.timezone.utc))
    except cron.CronError as e:
        raise _bad("spec.schedule", str(e)) from None
    return parsed


def _credential_in(obj: Any, where: str) -> str | None:
    """The field of the first string in ``obj`` that the one masker would change (a credential)."""
    if isinstance(obj, str):
        return where if scrub(obj) != obj else None
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        found = _credential_in(value, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}")
        if found:
            return found
    return None


def next_tick(doc: dict[str, Any], seconds_field: bool = True) -> _dt.datetime:
    """When the schedule is next due: the first tick after the last one looked at (its
    creation, before any)."""
    st = doc.get("status") or {}
    after = parse_time(st.get("lastTickTime")) or parse_time(doc["metadata"]["creationTimestamp"])
    assert after is not None
    return cron.parse(doc["spec"]["schedule"], seconds=seconds_field).next_after(after)


def run_item(job: Job) -> dict[str, Any]:
    """One run of the strip: ``{job, phase, reason, commit, finished}``."""
    st = job.get("status") or {}
    source = st.get("source") or {}  # a git source's record
    return {"job": job["metadata"]["name"], "phase": st.get("phase") or "Pending", "reason": st.get("reason"),
            "commit": source.get("commit") if isinstance(source, dict) else None,
            "finished": st.get("completionTime")}


class Schedules:
    """The schedules one view of the service sees (its owner's; a single user's server: all)."""

    def __init__(self, service: JobService):
        self.service = service
        self.seconds_field = service.schedule_seconds_field
        if not service.store.schedules_supported:
            raise ApiError(501, "Unsupported", f"schedules are not available on the {service.backend.name} backend "
                                               "(its store cannot hold them)")

    @property
    def owner(self) -> str | None:
        return self.service.owner

    # -- reading -----------------------------------------------------------------------------
    async def _stored(self, name: str) -> dict[str, Any]:
        try:
            return await self.service.store.get_schedule(name, self.owner)
        except NotFound:  # another user's schedule answers as one that does not exist
            raise ApiError(404, "NotFound", f"no schedule named {name!r}") from None

    async def answer(self, doc: dict[str, Any]) -> dict[str, Any]:
        """The document as the API answers it: the stored one, with its status completed (the
        next tick, the running job or null, the recent runs) and what it keeps to itself left out."""
        out = copy.deepcopy(doc)
        out.pop(CALLER_KEY, None)
        st = out.setdefault("status", {})
        name = out["metadata"]["name"]
        jobs = await self.service.store.schedule_jobs(name, self.owner, RECENT)
        active = st.get("active")
        st["active"] = next((j["metadata"]["name"] for j in jobs if j["metadata"]["name"] == active
                             and not is_terminal((j.get("status") or {}).get("phase"))), None)
        if active and st["active"] is None and not any(j["metadata"]["name"] == active for j in jobs):
            st["active"] = await self._still_running(active)
        st["nextScheduleTime"] = None if out["spec"]["suspend"] else isotime(next_tick(out, self.seconds_field))
        st.setdefault("lastScheduleTime", None)
        st.setdefault("skipped", 0)
        st["recent"] = [run_item(j) for j in jobs]
        return out

    async def _still_running(self, name: str) -> str | None:
        try:
            job = await self.service.store.get(name)
        except NotFound:
            return None
        return None if is_terminal((job.get("status") or {}).get("phase")) else name

    async def get(self, name: str) -> dict[str, Any]:
        return await self.answer(await self._stored(name))

    async def list(self) -> dict[str, Any]:
        items = [await self.answer(doc) for _, doc in await self.service.store.list_schedules(self.owner)]
        return {"apiVersion": API_VERSION, "kind": f"{KIND}List", "items": items}

    async def jobs(self, name: str, limit: int) -> dict[str, Any]:
        """The schedule's runs, newest first (its series)."""
        await self._stored(name)
        items = [list_item(j) for j in await self.service.store.schedule_jobs(name, self.owner, limit)]
        return {"apiVersion": "v1", "kind": "NotebookValidationJobList", "items": items, "metadata": {"continue": None}}

    # -- changing ----------------------------------------------------------------------------
    async def create(self, body: Any) -> dict[str, Any]:
        doc = check_manifest(body, self.seconds_field)
        await self.check_template(doc["spec"]["jobTemplate"]["spec"])
        caller = self.service.caller
        doc.update(apiVersion=API_VERSION, kind=KIND)
        doc["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=isotime())
        doc["status"] = {"lastScheduleTime": None, "lastTickTime": None, "skipped": 0, "active": None}
        doc[CALLER_KEY] = {"user": caller.user, "groups": sorted(caller.groups)}
        try:
            stored = await self.service.store.create_schedule(doc, self.owner)
        except AlreadyExists:
            raise ApiError(409, "AlreadyExists", f"a schedule named {doc['metadata']['name']!r} already exists",
                           "metadata.name") from None
        self.service.schedule_changed()
        return await self.answer(stored)

    async def check_template(self, spec: Any) -> None:
        """The job template by the checks a submit runs, nothing fetched or created: a 400
        names its field under ``spec.jobTemplate.spec``."""
        service = self.service
        held = _credential_in(spec, "spec.jobTemplate.spec")
        if held:  # a schedule keeps its template: a credential in it would be stored and answered
            raise _bad(held, "holds a credential (a URL's user name or password, or a key=value secret); a "
                             "schedule stores its job template, so name a secret the server holds instead "
                             "(podConfig.credentials, notebook.git.credentialsSecret: docs/secrets.md)")
        try:
            if has_git(spec):
                checked, _ = service._git_checked(spec)
                service._check_credentials(checked)
            elif service.owner is not None:
                raise _bad("spec.notebook.git", "on the team's service a schedule takes its notebook from git "
                                                "(the service keeps no folder of yours between runs)")
            else:
                await service._prepare(copy.deepcopy(spec))
        except ApiError as e:
            field = e.field or "spec"
            where = "spec.jobTemplate." + field if field.startswith("spec") else f"spec.jobTemplate.spec.{field}"
            message = e.message.replace(f"{field}:", f"{where}:", 1) if e.message.startswith(field) else \
                f"{where}: {e.message}"
            raise ApiError(e.status, e.code, message, where) from None

    async def set_suspend(self, name: str, body: Any) -> dict[str, Any]:
        """PATCH: ``{"spec": {"suspend": true|false}}``, the one field that changes in place."""
        patch = _only(body, "", ("spec",))
        spec = _only(patch.get("spec"), "spec", ("suspend",))
        if "suspend" not in spec or not isinstance(spec["suspend"], bool):
            raise _bad("spec.suspend", "give true (pause) or false (resume); the other fields do not change in "
                                       "place (delete the schedule and create it again)")
        for _ in range(5):
            doc = await self._stored(name)
            was = doc["spec"]["suspend"]
            doc["spec"]["suspend"] = spec["suspend"]
            if was and not spec["suspend"]:  # resumed: ticks missed while paused are not caught up
                doc.setdefault("status", {})["lastTickTime"] = isotime()
            try:
                stored = await self.service.store.replace_schedule(doc, self.owner)
            except Conflict:
                continue
            self.service.schedule_changed()
            return await self.answer(stored)
        raise ApiError(409, "Conflict", f"schedule {name!r} kept changing; try again")

    async def delete(self, name: str) -> dict[str, Any]:
        doc = await self._stored(name)
        try:
            await self.service.store.delete_schedule(name, self.owner)
        except NotFound:
            raise ApiError(404, "NotFound", f"no schedule named {name!r}") from None
        self.service.schedule_changed()
        return {"apiVersion": "v1", "kind": "Status", "status": "Success",
                "details": {"name": name, "uid": doc["metadata"]["uid"], "kind": KIND},
                "message": "the schedule is deleted; its jobs are kept"}

    async def trigger(self, name: str) -> Job:
        """Run now (``POST …/trigger``), never beside a run of its own still going (a 409)."""
        doc = await self._stored(name)
        job = await fire(self.service, self.owner, doc, None)
        assert job is not None  # a trigger runs or raises
        return job


# -- a run: the loop's tick (scheduler.py) or a trigger ------------------------------------------
async def _running(service: JobService, name: str | None) -> bool:
    if not name:
        return False
    try:
        job = await service.store.get(name)
    except NotFound:
        return False
    return not is_terminal((job.get("status") or {}).get("phase"))


def runner_view(service: JobService, owner: str | None, doc: dict[str, Any]) -> JobService:
    """The service as the schedule's maker submits (their owner label, their secrets), labelled
    with the schedule: its jobs are its series."""
    view = service
    caller = doc.get(CALLER_KEY) or {}
    if owner:
        view = service.as_user(caller.get("user") or owner, groups=caller.get("groups") or ())
    view = copy.copy(view)
    view.extra_labels = {**view.extra_labels, SCHEDULE_LABEL: doc["metadata"]["name"]}
    return view


async def fire(service: JobService, owner: str | None, doc: dict[str, Any], tick: _dt.datetime | None
               ) -> Job | None:
    """One run of schedule ``doc``: at ``tick`` (the loop's; a tick that finds the last run still
    going is skipped and counted, None returned) or now (``tick`` None: a trigger, which a run
    still going refuses with a 409). The schedule's lock makes a tick and a trigger one at a
    time; the tick is written before the job is submitted (a conditional write: two servers never
    both run one tick), the job's name after."""
    name = doc["metadata"]["name"]
    async with service.schedule_lock(owner, name):
        doc = await service.store.get_schedule(name, owner)  # as it is now, under the lock
        st = doc.setdefault("status", {})
        done = parse_time(st.get("lastTickTime"))
        if tick is not None and done is not None and done >= tick:  # run already (another server, a race)
            return None
        if tick is not None and doc["spec"].get("suspend"):  # paused since the loop looked: no tick runs
            return None
        if tick is not None:
            st["lastTickTime"] = isotime(tick)
        if await _running(service, st.get("active")):
            if tick is None:
                raise ApiError(409, "Conflict", f"schedule {name!r} still runs job {st['active']}; a schedule never "
                                                "runs two of its jobs at once")
            st["skipped"] = int(st.get("skipped") or 0) + 1
            st["message"] = f"the tick at {isotime(tick)} was skipped: job {st['active']} was still running"
            await service.store.replace_schedule(doc, owner)
            return None
        st["active"] = None
        if tick is not None:  # claimed: another server that read the same version fails its write
            doc = await service.store.replace_schedule(doc, owner)
            st = doc["status"]
        try:
            job = await runner_view(service, owner, doc).submit(copy.deepcopy(doc["spec"]["jobTemplate"]["spec"]))
        except ApiError as e:
            if tick is None:
                raise
            st["message"] = f"the run at {isotime(tick)} could not be submitted: {e.message}"
            await service.store.replace_schedule(doc, owner)
            return None
        st.update(active=job["metadata"]["name"], lastScheduleTime=isotime(), message=None)
        for _ in range(5):
            try:
                await service.store.replace_schedule(doc, owner)
                break
            except Conflict:  # a pause written meanwhile: keep it, add the run
                fresh = await service.store.get_schedule(name, owner)
                fresh["status"].update(active=st["active"], lastScheduleTime=st["lastScheduleTime"], message=None)
                doc, st = fresh, fresh["status"]
        return job


async def prune(service: JobService, owner: str | None, doc: dict[str, Any]) -> int:
    """The schedule's finished runs past its history limits removed (oldest first), never its
    running one; how many. Best effort: a job that cannot be removed now is tried next time."""
    kept: dict[str, int] = {Phase.SUCCEEDED: doc["spec"].get("successfulJobsHistoryLimit", DEFAULT_SUCCESSFUL_LIMIT),
            Phase.FAILED: doc["spec"].get("failedJobsHistoryLimit", DEFAULT_FAILED_LIMIT)}
    seen: dict[str, int] = {Phase.SUCCEEDED: 0, Phase.FAILED: 0}
    removed = 0
    for job in await service.store.schedule_jobs(doc["metadata"]["name"], owner):
        phase = (job.get("status") or {}).get("phase")
        if phase not in seen:
            continue
        seen[phase] += 1
        if seen[phase] > kept[phase]:
            try:
                await service.backend.delete_job(job)
                removed += 1
            except (NotFound, StoreError):
                continue
    return removed
