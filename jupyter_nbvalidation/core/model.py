"""The NotebookValidationJob document: its phases and their rules, annotations, times and durations.

A job is a Kubernetes-shaped dict (``apiVersion``, ``kind``, ``metadata``,
``spec``, ``status``) in every backend. Field names follow the upstream Go
operator's CRD where it has them. A spec is checked in spec/checks.py. Nothing in here does I/O.
"""

from __future__ import annotations

import copy
import datetime as _dt
import re
import uuid
from typing import Any, Mapping

from jupyter_nbvalidation.core.documents import Job, JobSpec, JobStatus

# The vocabulary (phases, reasons, states) lives in vocabulary.py, standard library
# only, so that the runner shares it; re-exported here, beside the job document.
from jupyter_nbvalidation.core.vocabulary import NOTICE_REASONS as NOTICE_REASONS
from jupyter_nbvalidation.core.vocabulary import REASON_ACTIONS as REASON_ACTIONS
from jupyter_nbvalidation.core.vocabulary import REASON_PHASE as REASON_PHASE
from jupyter_nbvalidation.core.vocabulary import RETRY_REASONS as RETRY_REASONS
from jupyter_nbvalidation.core.vocabulary import VERDICTS as VERDICTS
from jupyter_nbvalidation.core.vocabulary import BuildPhase as BuildPhase
from jupyter_nbvalidation.core.vocabulary import CellStatus as CellStatus
from jupyter_nbvalidation.core.vocabulary import ConditionType as ConditionType
from jupyter_nbvalidation.core.vocabulary import EventReason as EventReason
from jupyter_nbvalidation.core.vocabulary import Phase as Phase
from jupyter_nbvalidation.core.vocabulary import Reason as Reason
from jupyter_nbvalidation.core.vocabulary import ResultReason as ResultReason
from jupyter_nbvalidation.core.vocabulary import RunState as RunState

GROUP = "nbvalidation.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NotebookValidationJob"
PLURAL = "notebookvalidationjobs"


# The only transitions the engine may write (docs/architecture.md, "The phase path"). "" is "no status yet".
ALLOWED_TRANSITIONS: dict[str, frozenset[Phase]] = {
    "": frozenset({Phase.INITIALIZING, Phase.FAILED}),
    Phase.INITIALIZING: frozenset({Phase.BUILDING, Phase.VALIDATION_RUNNING, Phase.FAILED}),
    Phase.BUILDING: frozenset({Phase.BUILD_COMPLETE, Phase.FAILED}),
    Phase.BUILD_COMPLETE: frozenset({Phase.VALIDATION_RUNNING, Phase.FAILED}),
    Phase.VALIDATION_RUNNING: frozenset({Phase.SUCCEEDED, Phase.FAILED}),
    Phase.SUCCEEDED: frozenset(),
    Phase.FAILED: frozenset(),
}

# annotations on a job
CANCEL_ANNOTATION = "nbvalidation.dev/cancel-requested"
WORKDIR_ANNOTATION = "nbvalidation.dev/working-dir"
#: a notebook from git: its source as the job's status records it (JSON {url, ref, commit}),
#: and why it could not be fetched (the job then ends InfrastructureFailed: docs/watching.md)
SOURCE_ANNOTATION = "nbvalidation.dev/source"
SOURCE_FAILURE_ANNOTATION = "nbvalidation.dev/source-failure"
# the server root (its real path) a job's notebook path is relative to: one data dir or namespace
# holds jobs of several roots, and report.ipynb of one root is not report.ipynb of another
ROOT_ANNOTATION = "nbvalidation.dev/root"


def is_terminal(phase: str | None) -> bool:
    return phase in Phase.TERMINAL


def utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def transition_event_type(phase: str) -> str:
    """The event type of a transition into ``phase``: failures are Warnings."""
    return "Warning" if phase == Phase.FAILED else "Normal"


def isotime(t: _dt.datetime | None = None) -> str:
    """RFC 3339 with microseconds, UTC, ``Z`` suffix (MicroTime shape)."""
    t = t or utcnow()
    return t.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(s: str | None) -> _dt.datetime | None:
    if not s:
        return None
    s = s.strip()
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    return _dt.datetime.fromisoformat(s)


_DURATION_RE = re.compile(r"^(?:(\d+(?:\.\d+)?)(ms|s|m|h))+$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: Any) -> float:
    """Go-style duration ("30m", "1h30m", "500ms") or a number of seconds → seconds."""
    if isinstance(value, bool):
        raise ValueError("must be a duration such as '30m' or '90s'")
    if isinstance(value, (int, float)):
        if value <= 0:
            raise ValueError("must be positive")
        return float(value)
    if not isinstance(value, str) or not _DURATION_RE.match(value.strip()):
        raise ValueError("must be a duration such as '30m', '1h30m' or '90s'")
    total = sum(float(n) * _UNIT[u] for n, u in _DURATION_PART.findall(value.strip()))
    if total <= 0:
        raise ValueError("must be positive")
    return total


def format_duration(seconds: float) -> str:
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.3g}s" if seconds < 10 else f"{seconds:.0f}s"
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return (f"{h}h" if h else "") + (f"{m}m" if m or h else "") + f"{s}s"


def build_enabled(spec: Mapping[str, Any]) -> bool:
    return bool(spec.get("podConfig", {}).get("buildConfig", {}).get("enabled", True))


def new_name(notebook_path: str) -> str:
    stem = re.sub(r"[^a-z0-9-]+", "-", notebook_path.rsplit("/", 1)[-1].lower().removesuffix(".ipynb"))
    stem = stem.strip("-")[:40] or "notebook"
    return f"{stem}-{uuid.uuid4().hex[:8]}"


def new_job(spec: JobSpec, *, name: str | None = None, namespace: str = "default",
            labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None) -> Job:
    """A job document as submitted: no status yet (the engine writes it)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name or new_name(spec["notebook"]["path"]),
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": copy.deepcopy(spec),
        "status": {},
    }


def condition_states(status: JobStatus) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status.get("conditions", []) if "type" in c}


def set_condition(status: JobStatus, ctype: str, value: str, reason: str, message: str, now: str) -> None:
    """Set a metav1.Condition; lastTransitionTime only moves when status flips."""
    conds = status.setdefault("conditions", [])
    for c in conds:
        if c["type"] == ctype:
            if c["status"] != value:
                c["lastTransitionTime"] = now
            c["status"], c["reason"], c["message"] = value, reason, message
            return
    conds.append({"type": ctype, "status": value, "reason": reason,
                  "message": message, "lastTransitionTime": now})


# -- attempts: a transient fault (backends.base.Fault) retries a build or a validation -------
def validation_attempt(job: "Job | dict[str, Any]") -> int:
    """Which attempt of the validation the job is at: 0 first, n after n retries
    (``status.validationRetries``). A backend names an attempt's children from it:
    attempt 0 keeps the names it always had, retry n gets fresh ones."""
    return int((job.get("status") or {}).get("validationRetries") or 0)


def build_attempt(job: "Job | dict[str, Any]") -> int:
    """Which attempt of the build the job is at (``status.buildRetries``), as ``validation_attempt``."""
    return int((job.get("status") or {}).get("buildRetries") or 0)
