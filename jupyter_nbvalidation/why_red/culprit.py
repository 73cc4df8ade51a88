"""A red job's culprit, as the notifications (service/notify.py), ``describe`` and the reports
name it (docs/watching.md, "When it turns red"), and the notification kept on a job
(annotation :data:`NOTIFICATION_ANNOTATION`). Pure: no I/O, no service."""

from __future__ import annotations

import json
from typing import Any, Mapping

from jupyter_nbvalidation.core.model import Phase
from jupyter_nbvalidation.core.vocabulary import Reason

NOTIFICATION_ANNOTATION = "nbvalidation.dev/notification"  # the notification decided for the job (JSON)
SEEN_ANNOTATION = "nbvalidation.dev/notification-seen"  # when its owner marked it seen


def colour(job: Mapping[str, Any]) -> str | None:
    """``green``, ``red`` (a notebook verdict), ``infra`` (InfrastructureFailed) or None
    (unfinished, or cancelled: no verdict)."""
    st = job.get("status") or {}
    if st.get("phase") == Phase.SUCCEEDED:
        return "green"
    if st.get("phase") != Phase.FAILED or st.get("reason") == Reason.CANCELLED:
        return None
    return "infra" if st.get("reason") == Reason.INFRASTRUCTURE_FAILED else "red"


def commit_of(job: Mapping[str, Any]) -> str | None:
    return ((job.get("status") or {}).get("source") or {}).get("commit")


def environment_changed(changes: Mapping[str, Any]) -> bool:
    return bool((changes.get("packages") or {}).get("changedAny") or changes.get("python")
                or changes.get("baseImage"))


def commit_culprit(commit: str, changes: Mapping[str, Any] | None, how: str) -> dict[str, Any]:
    """The culprit when it is the source: the commits between the two runs as the summary lists
    them (``changes.commits.items``: newest first), else the failing job's commit alone."""
    listed = ((changes or {}).get("commits") or {}).get("items") or []
    commits = [{"sha": c["commit"], "subject": c.get("subject", ""), "files": list(c.get("files") or [])}
               for c in listed if isinstance(c, Mapping) and c.get("commit")] or \
        [{"sha": commit, "subject": "", "files": []}]
    count = max(len(commits), int(((changes or {}).get("commits") or {}).get("count") or 0))
    named = ", ".join(f"{c['sha'][:12]}" + (f" {c['subject']!r}" if c["subject"] else "") for c in commits[:5])
    more = f" (+{count - min(len(commits), 5)} more)" if count > min(len(commits), 5) else ""
    word = "commit" if count == 1 else "commits"
    return {"kind": "commit", "commit": commit, "commits": commits,
            "message": f"the {word} {named}{more} ({how})"}


def packages_culprit(result: Mapping[str, Any]) -> dict[str, Any]:
    found = list(result.get("culprits") or [])
    return {"kind": "packages", "packages": found, "complete": result.get("result") == "found",
            "search": {k: result.get(k) for k in ("result", "validations", "maxSteps", "lastSuccess")},
            "message": str(result.get("message", ""))}


def unknown_culprit(message: str, result: Mapping[str, Any] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"kind": "unknown", "message": message}
    if result is not None:
        doc["search"] = {k: result.get(k) for k in ("result", "validations", "maxSteps", "lastSuccess")}
    return doc


def notification_of(job: Mapping[str, Any]) -> dict[str, Any] | None:
    """The notification kept on a job, as the REST API and the reports show it; None without one."""
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(NOTIFICATION_ANNOTATION)
    if not raw:
        return None
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    st = job.get("status") or {}
    return {"id": job["metadata"]["name"], "event": record.get("event"), "time": record.get("time"),
            "state": record.get("state"), "schedule": record.get("schedule"),
            "job": {"name": job["metadata"]["name"], "notebook": (job.get("spec") or {}).get("notebook", {}).get("path"),
                    "phase": st.get("phase"), "reason": st.get("reason")},
            "culprit": record.get("culprit"), "changes": record.get("changes"),
            "deliveries": record.get("deliveries") or [], "seen": annotations.get(SEEN_ANNOTATION)}


def culprit_of(job: Mapping[str, Any] | None, changes: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """A red job's culprit for describe and the reports: the one its notification named, else,
    without a search, the commits between the last success and it when only they changed
    (``changes.commits``, a notebook from git); None when it is not known."""
    if job is None:
        return None
    note = notification_of(job)
    if note is not None and note.get("culprit"):
        return dict(note["culprit"])
    if colour(job) != "red" or not changes or not changes.get("since") or environment_changed(changes):
        return None
    commit = commit_of(job)
    if commit and ((changes.get("commits") or {}).get("count") or 0) > 0:
        return commit_culprit(commit, changes, "the environment did not change")
    return None


def culprit_line(culprit: Mapping[str, Any] | None) -> str:
    """``"the cause: commit: the commit 9636f9a3693b 'x is two' (…)"``, or ""."""
    if not culprit:
        return ""
    return f"the cause ({culprit.get('kind')}): {culprit.get('message', '')}"
