"""Reading what a finished Pod says: the build's image digest, the runner's
verdict (termination message summary, or the full result from the log), and
the executed notebook (a log line, when the runner printed it).

The runner's exit status (see :mod:`jupyter_nbvalidation.runner`): 0 the
notebook succeeded, 1 it failed (deterministic: never retried), 2 the runner
could not run. Anything else (OOM kill, eviction, deadline, a missing image)
is an infrastructure failure, reported with its reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# the runner's report is read where it is written (one protocol module)
from ..runner.protocol import decode_executed, parse_log, parse_summary  # noqa: F401
from ..vocabulary import CellStatus, Phase, ResultReason
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")

# waiting reasons after which a container will not start by itself (ErrImagePull
# alone may be a passing network problem: the kubelet retries it, then backs off)
FATAL_WAITING = frozenset({"ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                           "CreateContainerConfigError"})


def container_status(pod: dict, name: str) -> dict | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == name:
            return cs
    return None


def terminated(pod: dict, name: str) -> dict | None:
    cs = container_status(pod, name) or {}
    return (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")


def fatal_waiting(pod: dict, name: str) -> tuple[str, str] | None:
    cs = container_status(pod, name) or {}
    waiting = (cs.get("state") or {}).get("waiting") or {}
    if waiting.get("reason") in FATAL_WAITING:
        return waiting["reason"], waiting.get("message") or ""
    return None


def digest_of(pod: dict, container: str) -> str | None:
    term = terminated(pod, container) or {}
    if term.get("exitCode") != 0:
        return None
    text = (term.get("message") or "").strip()
    return text if DIGEST_RE.match(text) else None


def result_from_summary(summary: dict) -> dict:
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
    return result


@dataclass
class PodOutcome:
    """What a validation Pod says about the run."""

    finished: bool
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    summary: dict | None = None
    extra: dict = field(default_factory=dict)


def pod_outcome(pod: dict, container: str) -> PodOutcome:
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


def verdict(outcome: PodOutcome, log: str | None) -> dict:
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
            return full
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


def failure_result(reason: str, message: str) -> dict:
    return {"verdict": Phase.FAILED, "reason": reason, "message": message, "failedCellIndex": None,
            "results": [], "comparisonResult": None}
