"""The one vocabulary: every phase, reason and state name a job document, an
event, a runner result or a backend observation carries.

String enums whose values are the strings stored before they were enums, so
JSON, SQLite, the CRD and the lab are unchanged: a member *is* its string
(``Phase.SUCCEEDED == "Succeeded"``, it hashes alike, ``json.dumps`` writes
the string), and ``str()`` and f-strings give the value on every Python
(3.11 changed how a ``(str, Enum)`` member formats; :class:`StrEnum` pins it).
A document read back from a store holds plain strings, which compare equal
to the members.

Standard library only: the runner imports it (runner.SHARED_MODULES), and
model.py re-exports it; tools/gen_ts_vocabulary.py writes the lab's copy.
"""

from __future__ import annotations

import enum
from typing import ClassVar


class StrEnum(str, enum.Enum):
    """A ``(str, Enum)`` whose ``str()`` and ``format()`` are its value."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)


class Phase(StrEnum):
    """``status.phase`` of a job (docs/architecture.md, "The phase path")."""

    INITIALIZING = "Initializing"
    BUILDING = "Building"
    BUILD_COMPLETE = "BuildComplete"
    VALIDATION_RUNNING = "ValidationRunning"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    #: the phases in the order a job goes through them
    ORDER: ClassVar[tuple[Phase, ...]]
    #: the phases a job never leaves
    TERMINAL: ClassVar[frozenset[Phase]]


Phase.ORDER = tuple(Phase)
Phase.TERMINAL = frozenset({Phase.SUCCEEDED, Phase.FAILED})


class Reason(StrEnum):
    """Why a job entered its phase: ``status.reason``, ``status.transitions[].reason``
    and the reason of its transition event."""

    ACCEPTED = "Accepted"
    BUILD_STARTED = "BuildStarted"
    BUILD_SUCCEEDED = "BuildSucceeded"
    BUILD_REUSED = "BuildReused"  # BuildComplete without a build: the same environment exists already
    BUILD_FAILED = "BuildFailed"
    BUILD_TIMED_OUT = "BuildTimedOut"
    VALIDATION_STARTED = "ValidationStarted"
    VALIDATION_SUCCEEDED = "ValidationSucceeded"
    VALIDATION_FAILED = "ValidationFailed"
    VALIDATION_TIMED_OUT = "ValidationTimedOut"
    CANCELLED = "Cancelled"
    INVALID_INPUT = "InvalidInput"
    # a fault that is not the notebook's (backends.base.Fault): permanent, or its retries used up
    INFRASTRUCTURE_FAILED = "InfrastructureFailed"


class EventReason(StrEnum):
    """Reasons of events that record no transition (no phase flip): a timeline skips them."""

    VALIDATION_RETRIED = "ValidationRetried"  # a transient fault: the validation runs again
    BUILD_RETRIED = "BuildRetried"  # a transient fault: the build runs again
    # admission (c.NBValidation.max_concurrent_builds / _validations): the job waits for a slot,
    # in Initializing (a build slot) or BuildComplete (a validation slot); also status.reason meanwhile
    QUEUED = "Queued"
    # a Warning once per job (Kubernetes): image reuse and the verdict cache are off for it, and why
    # (a plain-HTTP registry without c.KubernetesBackend.registry_insecure, a base image without a
    # digest, a registry lookup refused); no phase flip
    IMAGE_REUSE_OFF = "ImageReuseOff"
    # a Warning once per job (local): the cached environment of its requirements was found changed
    # since it was built (seal.py), so it was retired, never run in again, and built afresh; no phase flip
    ENVIRONMENT_RETIRED = "EnvironmentRetired"


class ResultReason(StrEnum):
    """The ``reason`` of a runner's result document (and of ``status.validationStatus``)."""

    VALIDATION_SUCCEEDED = "ValidationSucceeded"
    CELL_EXECUTION_FAILED = "CellExecutionFailed"
    GOLDEN_MISMATCH = "GoldenMismatch"
    # the golden comparison could not be made because of the job's own comparison settings (a
    # sanitizer or timestamp pattern over its time budget): the user's to fix, never infrastructure
    COMPARISON_FAILED = "ComparisonFailed"
    CELL_TIMED_OUT = "CellTimedOut"
    VALIDATION_TIMED_OUT = "ValidationTimedOut"
    KERNEL_DIED = "KernelDied"
    KERNEL_START_FAILED = "KernelStartFailed"
    INVALID_NOTEBOOK = "InvalidNotebook"
    # not a notebook outcome: bad arguments, an internal error, or the runner was
    # stopped by a signal. Always exit status 2.
    RUNNER_ERROR = "RunnerError"
    # given by the server when no runner result says why: the run failed without
    # one, or (Kubernetes) the validation Pod's outcome; a container's or Pod's own
    # Kubernetes reason (Evicted, ErrImagePull, ...) is passed on as it is
    VALIDATION_FAILED = "ValidationFailed"
    NO_RESULT = "NoResult"
    # (also local: the kernel went past podConfig.resources.limits.memory, runner/limits.py)
    OOM_KILLED = "OOMKilled"
    # local: the run wrote more than c.LocalBackend.run_disk_limit (runner/limits.py)
    DISK_LIMIT_EXCEEDED = "DiskLimitExceeded"
    CONTAINER_FAILED = "ContainerFailed"
    POD_FAILED = "PodFailed"
    POD_CONFLICT = "PodConflict"
    IMAGE_MISMATCH = "ImageMismatch"
    # the run failed for a reason that is not the notebook's (a backends.base.Fault)
    INFRASTRUCTURE_FAILED = "InfrastructureFailed"


class CellStatus(StrEnum):
    """``results[].status`` of one cell in a runner's result document."""

    SUCCESS = "Success"
    FAILURE = "Failure"
    SKIPPED = "Skipped"


class BuildPhase(StrEnum):
    """``status.buildStatus.phase``."""

    RUNNING = "Running"
    COMPLETE = "Complete"
    FAILED = "Failed"


class ConditionType(StrEnum):
    """The ``type`` of a ``status.conditions[]`` entry (its ``status`` is "True" or "False")."""

    READY = "Ready"
    BUILD_READY = "BuildReady"
    VALIDATION_COMPLETE = "ValidationComplete"


class RunState(StrEnum):
    """What a backend observes of a build or a validation run (``Observation.state``)."""

    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


#: a runner's verdict: the terminal phase its run leads to
VERDICTS: frozenset[Phase] = frozenset({Phase.SUCCEEDED, Phase.FAILED})

# what the controller did, per transition reason (events.k8s.io/v1 ``action``); keyed by
# the members, looked up with the plain strings of stored documents too
REASON_ACTIONS: dict[str, str] = {
    Reason.ACCEPTED: "Accept",
    Reason.BUILD_STARTED: "Build",
    Reason.BUILD_SUCCEEDED: "Build",
    Reason.BUILD_REUSED: "Build",
    Reason.BUILD_FAILED: "Build",
    Reason.BUILD_TIMED_OUT: "Build",
    Reason.VALIDATION_STARTED: "Validate",
    Reason.VALIDATION_SUCCEEDED: "Validate",
    Reason.VALIDATION_FAILED: "Validate",
    Reason.VALIDATION_TIMED_OUT: "Validate",
    Reason.CANCELLED: "Cancel",
    Reason.INVALID_INPUT: "Accept",
    Reason.INFRASTRUCTURE_FAILED: "Reconcile",
}

#: the events that are not transitions (their action is "Retry"): one per retry of an attempt
RETRY_REASONS: frozenset[str] = frozenset({EventReason.VALIDATION_RETRIED, EventReason.BUILD_RETRIED})

#: the events that say what is off for a job (action "Notice"): once per job, no transition, no status change
NOTICE_REASONS: frozenset[str] = frozenset({EventReason.IMAGE_REUSE_OFF, EventReason.ENVIRONMENT_RETIRED})

# the phase each transition reason leads to (how a timeline is read from events)
REASON_PHASE: dict[str, Phase] = {
    Reason.ACCEPTED: Phase.INITIALIZING,
    Reason.BUILD_STARTED: Phase.BUILDING,
    Reason.BUILD_SUCCEEDED: Phase.BUILD_COMPLETE,
    Reason.BUILD_REUSED: Phase.BUILD_COMPLETE,
    Reason.VALIDATION_STARTED: Phase.VALIDATION_RUNNING,
    Reason.VALIDATION_SUCCEEDED: Phase.SUCCEEDED,
    Reason.BUILD_FAILED: Phase.FAILED,
    Reason.BUILD_TIMED_OUT: Phase.FAILED,
    Reason.VALIDATION_FAILED: Phase.FAILED,
    Reason.VALIDATION_TIMED_OUT: Phase.FAILED,
    Reason.CANCELLED: Phase.FAILED,
    Reason.INVALID_INPUT: Phase.FAILED,
    Reason.INFRASTRUCTURE_FAILED: Phase.FAILED,
}
