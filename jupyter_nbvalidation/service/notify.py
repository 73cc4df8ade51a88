"""Red without being asked (issue 45; docs/watching.md, "When it turns red"): when a job of a
schedule's series (label ``store.base.SCHEDULE_LABEL``, one owner, one notebook) ends, the
service decides by itself whether the series changed colour, and tells the owner:

- ``turned-red``: Failed with a notebook verdict (a cell, the golden comparison, a timeout, a
  build) after the series' last verdict was a success. The change summary (what ``GET
  /jobs/{name}/changes`` gives), then the culprit: the commit when the source commit changed
  and the environment did not (no search); otherwise the search for the cause
  (service/bisections.py, the one ``POST /jobs/{name}/bisect`` starts, in its worker threads),
  bounded by ``NBValidation.auto_bisect_max_steps``, whose first step validates the new
  commit with the last success's pins: still red, the commit; green, the package culprit.
- ``infrastructure-failed``: Failed with InfrastructureFailed, when the one before was not
  (no search: nothing of the notebook's is in question).
- ``back-to-green``: Succeeded after a red.

A series that stays red sends nothing more until it has been green. What was decided and sent
is kept on the job (annotation :data:`NOTIFICATION_ANNOTATION`, in the store of either
backend), so a restart never sends it again, and ``GET /notifications`` lists it for the lab.
Only the engine that reconciles posts transition events, so only it notifies. Secret values
(the job's credentials, the webhooks' keys) are masked in every string of a payload.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Iterable, Mapping, Protocol

from jupyter_nbvalidation.core.documents import Event, Job
from jupyter_nbvalidation.core.model import is_terminal, parse_time
from jupyter_nbvalidation.core.redaction import scrub
from jupyter_nbvalidation.core.vocabulary import REASON_PHASE
from jupyter_nbvalidation.secrets.registry import SecretNotAvailable, SecretRegistry
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.service.history import is_probe
from jupyter_nbvalidation.service.smtp_mail import Mail
from jupyter_nbvalidation.service.smtp_mail import send as send_mail
from jupyter_nbvalidation.service.webhook import Webhook, deliver
from jupyter_nbvalidation.store.base import SCHEDULE_LABEL, JobStore, owner_of
from jupyter_nbvalidation.why_red.culprit import (
    NOTIFICATION_ANNOTATION,
    colour,
    commit_culprit,
    commit_of,
    environment_changed,
    notification_of,
    packages_culprit,
    unknown_culprit,
)

TURNED_RED, INFRASTRUCTURE, BACK_TO_GREEN = "turned-red", "infrastructure-failed", "back-to-green"
SERIES_PAGES = 20  # pages of 100 of a notebook's jobs looked through for the series' previous verdict
LISTED_PAGES = 20  # pages of 200 of jobs looked through for GET /notifications


def series_of(job: Mapping[str, Any]) -> str | None:
    return ((job.get("metadata") or {}).get("labels") or {}).get(SCHEDULE_LABEL)


def decide(job: Mapping[str, Any], earlier: Iterable[Mapping[str, Any]]) -> str | None:
    """The notification ``job`` calls for, given its series' earlier finished jobs (newest
    first): None when the series did not change colour."""
    now = colour(job)
    colours = [c for c in (colour(j) for j in earlier) if c is not None]
    if now == "infra":
        return INFRASTRUCTURE if not colours or colours[0] != "infra" else None
    verdicts = [c for c in colours if c != "infra"]  # an outage says nothing of the notebook
    if now == "red":
        return TURNED_RED if verdicts and verdicts[0] == "green" else None
    if now == "green":
        return BACK_TO_GREEN if verdicts and verdicts[0] == "red" else None
    return None


def masked(value: Any, secrets: Iterable[str]) -> Any:
    """Every string in ``value`` without the secret values, URL user-info, ``key=value`` secrets."""
    values = [s for s in secrets if s]
    if isinstance(value, str):
        return scrub(value, values)
    if isinstance(value, Mapping):
        return {masked(k, values): masked(v, values) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [masked(v, values) for v in value]
    return value


class NotifyService(Protocol):
    """What the notifier needs of the service (service.jobs.JobService gives it)."""

    @property
    def store(self) -> JobStore: ...

    @property
    def secrets(self) -> SecretRegistry: ...

    @property
    def scope_owner(self) -> str | None: ...

    def as_user(self, owner: str) -> Any: ...

    async def get(self, name: str) -> Job: ...

    async def since_last_success(self, name: str) -> dict[str, Any]: ...

    async def bisect_start(self, name: str, max_steps: int) -> tuple[bool, dict[str, Any]]: ...

    async def bisect_wait(self, name: str) -> dict[str, Any] | None: ...


class Notifier:
    """The trigger and the senders, over the service (``JobService``: the origin, every job)."""

    def __init__(self, service: NotifyService, *, webhooks: list[Webhook], max_steps: int = 6,
                 attempts: int = 5, backoff: float = 1.0, timeout: float = 10.0, public_url: str = "",
                 log: Any):
        self.service, self.webhooks, self.max_steps = service, webhooks, max_steps
        self.attempts, self.backoff, self.timeout, self.public_url = attempts, backoff, timeout, public_url
        self.log = log
        self.mail: Mail | None = None  # e-mail too (NBValidation.smtp_*)
        self.mail_secret = ""  # the SMTP login's secret (keys username, password), "" for none
        self._tasks: set[asyncio.Task[None]] = set()
        self._handling: set[str] = set()  # jobs being decided here (an event and a resume at once)
        self.handled = 0  # jobs looked at (tests wait for it)

    def on_event(self, event: Event, job: Job) -> None:
        """An engine's event listener: a terminal transition of a scheduled job starts the
        decision in a task of its own (never in the reconcile, never blocking the loop)."""
        phase = (job.get("status") or {}).get("phase")
        if not is_terminal(phase) or REASON_PHASE.get(event["reason"]) != phase or series_of(job) is None \
                or is_probe(job):
            return
        task = asyncio.get_running_loop().create_task(self._handle(job["metadata"]["name"]),
                                                      name=f"nbvalidation-notify-{job['metadata']['name']}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def idle(self) -> None:
        """Wait for the decisions and deliveries under way (tests; a clean stop)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _handle(self, name: str) -> None:
        try:
            await self.handle(name)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a notification never takes the server down; it is logged
            self.log.exception("nbvalidation: the notification for job %s failed", name)
        finally:
            self.handled += 1

    async def _earlier(self, job: Job) -> list[Job]:
        """The series' jobs listed after ``job`` (older than it), newest first."""
        store, series, owner = self.service.store, series_of(job), owner_of(job)
        name = job["metadata"]["name"]
        out: list[Job] = []
        token, seen = None, False
        for _ in range(SERIES_PAGES):
            items, token = await store.list_jobs(notebook=job["spec"]["notebook"]["path"], limit=100,
                                                 continue_token=token, owner=owner)
            for other in items:
                if not seen:
                    seen = other["metadata"]["name"] == name
                elif series_of(other) == series and owner_of(other) == owner and not is_probe(other):
                    out.append(other)
            if not token or any(colour(j) is not None for j in out):
                break
        return out

    async def resume(self, within: float = 3600.0) -> int:
        """Take up what a stopped server left (the leader, once it leads): each scheduled job
        that ended in the last ``within`` seconds whose notification was never decided, or was
        being decided (nothing sent yet). One that was being sent is left as it is: a receiver
        may have it already. Returns how many were sent now."""
        cutoff = time.time() - within
        sent, token = 0, None
        for _ in range(LISTED_PAGES):
            items, token = await self.service.store.list_jobs(limit=200, continue_token=token)
            for job in items:
                done = _seconds((job.get("status") or {}).get("completionTime"))
                if series_of(job) is None or colour(job) is None or is_probe(job) or done is None or done < cutoff:
                    continue
                raw = (job["metadata"].get("annotations") or {}).get(NOTIFICATION_ANNOTATION)
                if raw is None or _state(raw) == "deciding":
                    sent += await self.handle(job["metadata"]["name"], resume=True) is not None
            oldest = _seconds(items[-1]["metadata"].get("creationTimestamp")) if items else None
            if not token or (oldest is not None and oldest < cutoff - 86400):
                break
        return sent

    async def handle(self, name: str, resume: bool = False) -> dict[str, Any] | None:
        """Decide and send the notification job ``name`` calls for (once): its record, or None.
        ``resume``: also one left being decided by a server that stopped."""
        if name in self._handling:
            return None
        self._handling.add(name)
        try:
            return await self._decide_and_send(name, resume)
        finally:
            self._handling.discard(name)

    async def _decide_and_send(self, name: str, resume: bool) -> dict[str, Any] | None:
        store = self.service.store
        job = await store.get(name)
        raw = (job["metadata"].get("annotations") or {}).get(NOTIFICATION_ANNOTATION)
        if (raw is not None and not (resume and _state(raw) == "deciding")) or series_of(job) is None:
            return None  # decided already (before a restart, or by another engine)
        event = decide(job, await self._earlier(job))
        if event is None:
            return None
        record: dict[str, Any] = {"event": event, "state": "deciding", "time": _now(), "schedule": series_of(job)}
        await store.set_annotation(name, NOTIFICATION_ANNOTATION, json.dumps(record))
        changes: dict[str, Any] | None = None
        culprit: dict[str, Any] | None = None
        if event == TURNED_RED:
            changes, culprit = await self._cause(job)
        secrets = await self._secret_values(job)
        payload = masked(self.payload(job, event, changes, culprit), secrets)
        record = {**record, "state": "sending", "changes": payload["changes"], "culprit": payload["culprit"],
                  "schedule": payload["schedule"]}
        await store.set_annotation(name, NOTIFICATION_ANNOTATION, json.dumps(record))
        body = json.dumps(payload, sort_keys=True).encode()
        sends = [self._send(hook, body, event) for hook in self.webhooks]
        if self.mail is not None:
            sends.append(self._mail(self.mail, payload))
        deliveries = await asyncio.gather(*sends)
        record = {**record, "state": "sent" if all(d["delivered"] for d in deliveries) else "undelivered",
                  "deliveries": list(deliveries)}
        await store.set_annotation(name, NOTIFICATION_ANNOTATION, json.dumps(record))
        return record

    async def _send(self, hook: Webhook, body: bytes, event: str) -> dict[str, Any]:
        key: bytes | None = hook.key.encode() if hook.key else None
        if hook.secret:
            try:
                values = await asyncio.to_thread(self.service.secrets.values, hook.secret)
            except SecretNotAvailable as e:
                self.log.warning("nbvalidation: webhook %s: its key's secret cannot be read (%s); not sent",
                                 hook.shown, e.reason)
                return {"url": hook.shown, "delivered": False, "attempts": 0,
                        "error": f"the HMAC key's secret {hook.secret!r} cannot be read"}
            chosen = values.get(hook.secret_key) if hook.secret_key else (
                next(iter(values.values())) if len(values) == 1 else values.get("key"))
            if not chosen:
                return {"url": hook.shown, "delivered": False, "attempts": 0,
                        "error": f"the secret {hook.secret!r} has no key {hook.secret_key or 'key'!r}"}
            key = chosen.encode()
        return await deliver(hook, body, key, event, attempts=self.attempts, backoff=self.backoff,
                             timeout=self.timeout, log=self.log)

    async def _mail(self, mail: Mail, payload: dict[str, Any]) -> dict[str, Any]:
        login = None
        if self.mail_secret:
            try:
                values = await asyncio.to_thread(self.service.secrets.values, self.mail_secret)
            except SecretNotAvailable:
                values = {}
            if not values.get("username") or not values.get("password"):
                return {"url": mail.shown, "delivered": False, "attempts": 0,
                        "error": f"the SMTP login's secret {self.mail_secret!r} cannot be read, or lacks "
                                 "username and password"}
            login = (values["username"], values["password"])
        return await send_mail(mail, payload, login, attempts=self.attempts, backoff=self.backoff, log=self.log)

    async def _secret_values(self, job: Job) -> list[str]:
        """The values a payload must not carry: the job's credentials and the webhooks' keys."""
        names = list(((job.get("spec") or {}).get("podConfig") or {}).get("credentials") or [])
        names += [h.secret for h in self.webhooks if h.secret] + ([self.mail_secret] if self.mail_secret else [])
        out = [h.key for h in self.webhooks if h.key]
        for secret in names:
            try:
                out += list((await asyncio.to_thread(self.service.secrets.values, secret)).values())
            except SecretNotAvailable:
                continue
        return out

    async def _cause(self, job: Job) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """The change summary and the culprit of a turned-red job (see the module's docstring)."""
        name = job["metadata"]["name"]
        view = self.service if owner_of(job) is None else self.service.as_user(str(owner_of(job)))
        try:
            changes = await view.since_last_success(name)
        except ApiError as e:
            return None, unknown_culprit(f"what changed is not known: {e.message}")
        if not changes.get("since"):
            return changes, unknown_culprit("no earlier success of this notebook to compare with")
        try:
            before = await view.get(changes["since"]["name"])
        except ApiError:
            before = None
        commit = commit_of(job)
        commit_moved = bool(commit and before is not None and commit_of(before) and commit_of(before) != commit)
        env_moved = environment_changed(changes)
        if commit_moved and not env_moved:
            assert commit is not None
            return changes, commit_culprit(commit, changes, "the environment did not change")
        if not env_moved:
            return changes, unknown_culprit("neither the source commit nor the environment changed since the last "
                                            f"success: {changes.get('sentence', '')}")
        if self.max_steps <= 0:
            return changes, unknown_culprit("the environment changed (" + str(changes.get("sentence", ""))
                                            + "); no search for the cause (auto_bisect_max_steps = 0)")
        result = await self._search(view, name)
        kind = result.get("result")
        if kind in ("found", "incomplete") and result.get("culprits"):
            return changes, packages_culprit(result)
        if kind == "notebook" and commit_moved:
            assert commit is not None
            return changes, commit_culprit(commit, changes, "it fails with the last success's environment too")
        return changes, unknown_culprit(str(result.get("message") or "the search found no cause"), result)

    async def _search(self, view: NotifyService, name: str) -> dict[str, Any]:
        """The search for the cause (the one POST /jobs/{name}/bisect starts), waited for."""
        try:
            await view.bisect_start(name, self.max_steps)
            doc = await view.bisect_wait(name)
        except ApiError as e:
            return {"result": "error", "message": f"the search for the cause could not run: {e.message}"}
        return dict((doc or {}).get("result") or {"result": "error", "message": "the search ended without a result"})

    def payload(self, job: Job, event: str, changes: dict[str, Any] | None,
                culprit: dict[str, Any] | None) -> dict[str, Any]:
        st = job.get("status") or {}
        source = st.get("source") or {}
        name = job["metadata"]["name"]
        return {
            "event": event,
            "job": {"name": name, "owner": owner_of(job), "notebook": job["spec"]["notebook"]["path"],
                    "source": {k: source.get(k) for k in ("url", "ref", "commit")} if source else None,
                    "phase": st.get("phase"), "reason": st.get("reason"), "message": st.get("message", ""),
                    "completionTime": st.get("completionTime")},
            "schedule": series_of(job),
            "changes": changes,
            "culprit": culprit,
            "url": f"{self.public_url.rstrip('/')}/nbvalidation/api/v1/jobs/{name}" if self.public_url else None,
        }

    # -- the lab's list (GET /notifications, POST /notifications/{name}/seen) --------------------
    async def listed(self, view: NotifyService, limit: int = 50) -> list[dict[str, Any]]:
        """The notifications of the jobs ``view`` sees, newest first."""
        found: list[dict[str, Any]] = []
        token = None
        for _ in range(LISTED_PAGES):
            items, token = await view.store.list_jobs(limit=200, continue_token=token, owner=view.scope_owner)
            for job in items:
                doc = notification_of(job)
                if doc is not None:
                    found.append(doc)
            if not token or len(found) >= limit:
                break
        found.sort(key=lambda d: str(d.get("time") or ""), reverse=True)
        return found[:limit]


def _seconds(text: str | None) -> float | None:
    try:
        when = parse_time(text)
    except ValueError:
        return None
    return None if when is None else when.timestamp()


def _state(raw: str) -> str | None:
    try:
        return str(json.loads(raw).get("state"))
    except (ValueError, AttributeError):
        return None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
