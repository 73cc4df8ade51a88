"""Reading what a finished Pod says: the build's image digest, the runner's
verdict (termination message summary, or the full result from the log), and
the executed notebook (a log line, when the runner printed it).

The runner's exit status (see :mod:`jupyter_nbvalidation.runner`): 0 the
notebook succeeded, 1 it failed (deterministic: never retried), 2 the runner
could not run. Anything else (OOM kill, eviction, deadline, a missing image)
is an infrastructure failure, reported with its reason.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any, cast

# the runner's report is read where it is written (one protocol module)
from jupyter_nbvalidation.core.documents import RunnerResult
from jupyter_nbvalidation.core.vocabulary import CellStatus, Phase, ResultReason
from jupyter_nbvalidation.runner.protocol import decode_executed as decode_executed
from jupyter_nbvalidation.runner.protocol import environment_from_log as environment_from_log
from jupyter_nbvalidation.runner.protocol import parse_log as parse_log
from jupyter_nbvalidation.runner.protocol import parse_summary

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")

# waiting reasons after which a container will not start by itself
FATAL_WAITING = frozenset({"InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError"})
# waiting on an image pull: the kubelet retries (ErrImagePull, then ImagePullBackOff with a
# growing delay), so a pull that fails now (a registry away, "pull QPS exceeded") may succeed later
PULL_WAITING = frozenset({"ErrImagePull", "ImagePullBackOff"})
# what the kubelet / containerd / a registry say when the image itself does not exist:
# waiting for it is pointless
IMAGE_MISSING_RE = re.compile(r"\bnot found\b|manifest unknown|name unknown|repository does not exist|"
                              r"code = NotFound|MANIFEST_UNKNOWN|NAME_UNKNOWN", re.IGNORECASE)
# ...unless what was not found is the registry's host (a DNS or network fault)
NETWORK_RE = re.compile(r"no such host|connection refused|i/o timeout|dial tcp|TLS handshake|"
                        r"context deadline exceeded|server misbehaving|connection reset", re.IGNORECASE)
# a Pod's status.reason when the node or the cluster, not the run, ended it
DISRUPTED_REASONS = frozenset({"Evicted", "Preempting", "NodeLost", "Shutdown", "Terminated",
                               "NodeShutdown", "UnexpectedAdmissionError"})


# what a kaniko executor says when a registry (the destination, or the base image's) could not be
# reached or refused for now: a line about a push / pull / registry API call ...
# (kaniko's base image pull reads "failed to get filesystem from image: read tcp a->host:port: ...")
REGISTRY_CALL_RE = re.compile(r"push|pull|retrieving image|registry|/v2/|from image|get(?:ting)? image|"
                              r"image manifest", re.IGNORECASE)
# ... that failed on the network, or with a 5xx / 429 answer
REGISTRY_FAULT_RE = re.compile(
    r"connection refused|no such host|i/o timeout|connection reset|network is unreachable|no route to host|"
    r"TLS handshake timeout|context deadline exceeded|server misbehaving|EOF$|"
    r"\b(?:429|50[0-4])\b|too many requests|toomanyrequests|service unavailable|bad gateway|gateway timeout",
    re.IGNORECASE)
REGISTRY_HOST_RE = re.compile(r"https?://([^/\s\"']+)/v2/")
# the peer of a TCP connection that broke ("read tcp 10.0.0.5:5523->10.0.0.2:5000: ...")
TCP_PEER_RE = re.compile(r"\b(?:dial|read|write) tcp \S*?->(\S+?:\d+)")


def registry_fault(output: str, destination: str = "") -> str | None:
    """The registry fault in a failed kaniko build's output, as one sentence naming
    the registry ("The build could not reach the registry <host>: <kaniko's line>"),
    or None when the build failed for another reason (the requirements, the Dockerfile)."""
    for line in reversed([ln.strip() for ln in output.splitlines() if ln.strip()]):
        if REGISTRY_CALL_RE.search(line) and REGISTRY_FAULT_RE.search(line):
            m = REGISTRY_HOST_RE.search(line) or TCP_PEER_RE.search(line)
            host = m.group(1) if m else (destination.split("/", 1)[0] if "/" in destination else "")
            return f"The build could not reach the registry {host or '(unknown)'}: {line[-400:]}"
    return None


def container_status(pod: dict[str, Any], name: str) -> dict[str, Any] | None:
    cs: dict[str, Any]  # a ContainerStatus object
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == name:
            return cs
    return None


def terminated(pod: dict[str, Any], name: str) -> dict[str, Any] | None:
    cs = container_status(pod, name) or {}
    return (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")


def fatal_waiting(pod: dict[str, Any], name: str) -> tuple[str, str] | None:
    cs = container_status(pod, name) or {}
    waiting = (cs.get("state") or {}).get("waiting") or {}
    if waiting.get("reason") in FATAL_WAITING:
        return waiting["reason"], waiting.get("message") or ""
    return None


@dataclass(frozen=True)
class PullWait:
    """A container of the Pod waits for its image."""

    container: str
    image: str
    reason: str  # ErrImagePull | ImagePullBackOff | InvalidImageName | ErrImageNeverPull
    message: str  # the kubelet's
    missing: bool  # the image does not exist (or can never be pulled): waiting is pointless


def image_missing(reason: str, message: str) -> bool:
    """Whether a pull failure says the image does not exist (or will never be
    pulled), not that the registry could not be reached or refused for now."""
    if reason in ("InvalidImageName", "ErrImageNeverPull"):
        return True
    return bool(IMAGE_MISSING_RE.search(message)) and not NETWORK_RE.search(message)


def pull_wait(pod: dict[str, Any]) -> PullWait | None:
    """The first container (init containers first) that waits on its image pull."""
    st = pod.get("status") or {}
    for cs in [*(st.get("initContainerStatuses") or []), *(st.get("containerStatuses") or [])]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason") or ""
        if reason in PULL_WAITING or reason in ("InvalidImageName", "ErrImageNeverPull"):
            message = waiting.get("message") or ""
            return PullWait(cs.get("name") or "", cs.get("image") or "", reason, message,
                            image_missing(reason, message))
    return None


def _epoch(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def disruption(pod: dict[str, Any], container: str) -> str | None:
    """Why the Pod's run was ended by the cluster, not by the notebook, or None:
    a ``DisruptionTarget`` condition (eviction, preemption, the taint manager, the
    pod GC, a node shutdown: Kubernetes >= 1.26), a ``status.reason`` such as
    Evicted / Preempting / NodeLost / Shutdown, or a deletion (``deletionTimestamp``;
    whether we deleted it is the caller's to know). A runner that had finished
    before the disruption keeps its result: None then."""
    meta = pod.get("metadata") or {}
    st = pod.get("status") or {}
    name = meta.get("name") or "?"
    term = terminated(pod, container)
    finished = _epoch((term or {}).get("finishedAt"))

    def before(at: float | None) -> bool:  # the runner ended (by itself) before the disruption
        return finished is not None and at is not None and finished < at

    for c in st.get("conditions") or []:
        if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            if before(_epoch(c.get("lastTransitionTime"))):
                return None
            why = c.get("reason") or "DisruptionTarget"
            return f"The validation Pod {name} was disrupted ({why}" + (f": {c['message']}" if c.get("message") else "") + ")"
    reason = st.get("reason") or ""
    if reason in DISRUPTED_REASONS:
        message = st.get("message") or ""
        return f"The validation Pod {name} was stopped by its node ({reason}" + (f": {message}" if message else "") + ")"
    deleted = meta.get("deletionTimestamp")
    if deleted:
        at = _epoch(deleted)
        requested = None if at is None else at - float(meta.get("deletionGracePeriodSeconds") or 0)
        if before(requested):
            return None
        return f"The validation Pod {name} was deleted while it ran (deletion requested at {_iso(requested) or deleted})"
    return None


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def digest_of(pod: dict[str, Any], container: str) -> str | None:
    term = terminated(pod, container) or {}
    if term.get("exitCode") != 0:
        return None
    text = (term.get("message") or "").strip()
    return text if DIGEST_RE.match(text) else None


def result_from_summary(summary: dict[str, Any]) -> RunnerResult:
    """A result document from the summary alone (no pod log): the per-cell
    list holds what the summary knows, the failing cell."""
    result: dict[str, Any] = {
        "verdict": summary.get("verdict"),
        "reason": summary.get("reason"),
        "message": summary.get("message"),
        "failedCellIndex": summary.get("failedCellIndex"),
        "durationSeconds": summary.get("durationSeconds"),
        "results": [],
        "comparisonResult": None,
        "detail": "summary",  # the full per-cell results were not readable
    }
    failed = summary.get("failedCellIndex")
    if failed is not None:
        entry: dict[str, Any] = {"cellIndex": failed, "status": CellStatus.FAILURE}
        err = summary.get("error") or {}
        if err.get("name"):
            entry["errorName"] = err["name"]
        if err.get("message"):
            entry["errorMessage"] = err["message"]
        result["results"].append(entry)
    cmp_ = summary.get("comparison")
    if cmp_:
        result["comparisonResult"] = {**cmp_, "diffs": []}
    if summary.get("cells"):
        result["cells"] = summary["cells"]
    # a result document; parse_summary checked the verdict (durationSeconds is None when the summary lacks it)
    return cast(RunnerResult, result)


@dataclass
class PodOutcome:
    """What a validation Pod says about the run."""

    finished: bool
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    summary: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def pod_outcome(pod: dict[str, Any], container: str) -> PodOutcome:
    st = pod.get("status") or {}
    phase = st.get("phase") or "Pending"
    term = terminated(pod, container)
    started = st.get("startTime")
    if term is not None and phase in ("Succeeded", "Failed"):
        return PodOutcome(True, exit_code=term.get("exitCode"), reason=term.get("reason") or "",
                          message=term.get("message") or "", started_at=term.get("startedAt") or started,
                          finished_at=term.get("finishedAt"), summary=parse_summary(term.get("message")))
    if phase == "Failed":  # e.g. Evicted or DeadlineExceeded before/without a container result
        return PodOutcome(True, reason=st.get("reason") or ResultReason.POD_FAILED,
                          message=st.get("message") or "the validation pod failed", started_at=started)
    if phase == "Succeeded":
        return PodOutcome(True, reason=ResultReason.NO_RESULT, message="the pod succeeded without a container status",
                          started_at=started)
    waiting = fatal_waiting(pod, container)
    if waiting is not None:
        return PodOutcome(True, reason=waiting[0], message=waiting[1], started_at=started)
    return PodOutcome(False, started_at=started)


def reads_log(outcome: PodOutcome) -> bool:
    """Whether the verdict of ``outcome`` comes from the runner's log: the runner
    ended by itself (exit 0, 1 or 2), not killed for memory."""
    return outcome.exit_code in (0, 1, 2) and not (outcome.reason == ResultReason.OOM_KILLED and outcome.exit_code != 0)


def verdict(outcome: PodOutcome, log: str | None) -> RunnerResult:
    """The runner's verdict of a finished Pod: the full result from its log when
    readable, else the termination-message summary; infrastructure failures
    name their reason. Never a success without a readable result."""
    code = outcome.exit_code
    if outcome.reason == ResultReason.OOM_KILLED and code != 0:
        # the kernel (the biggest process) was killed for memory; the runner then
        # reports a dead kernel, but the cause is the container's memory limit
        return failure_result(ResultReason.OOM_KILLED, "The validation container ran out of memory (OOMKilled)"
                                           + (f", exit code {code}: the memory limit was exceeded."
                                              if code is not None else ": the memory limit was exceeded."))
    if code in (0, 1, 2):
        full = parse_log(log)[0] if log is not None else None
        if full is not None and (full.get("verdict") == Phase.SUCCEEDED) == (code == 0):
            return cast(RunnerResult, full)  # the runner's result line (runner/protocol.py writes it)
        if outcome.summary is not None and (outcome.summary.get("verdict") == Phase.SUCCEEDED) == (code == 0):
            return result_from_summary(outcome.summary)
        if code == 0:
            return failure_result(ResultReason.NO_RESULT, "The runner exited 0 but its result could not be read "
                                              "(no termination message, no readable log).")
        return failure_result(ResultReason.RUNNER_ERROR if code == 2 else ResultReason.VALIDATION_FAILED,
                              f"The runner exited with {code} without a readable result"
                              + (f": {outcome.message[:500]}" if outcome.message else "."))
    if code is not None:
        return failure_result(outcome.reason or ResultReason.CONTAINER_FAILED,
                              f"The validation container exited with code {code}"
                              + (f" ({outcome.reason})" if outcome.reason else "") + ".")
    return failure_result(outcome.reason or ResultReason.POD_FAILED,
                          f"The validation pod failed: {outcome.reason}"
                          + (f": {outcome.message}" if outcome.message else ""))


def failure_result(reason: str, message: str) -> RunnerResult:
    return {"verdict": Phase.FAILED, "reason": reason, "message": message, "failedCellIndex": None,
            "results": [], "comparisonResult": None}
