"""The shapes of the documents the core passes around, as TypedDicts.

A job (``NotebookValidationJob``), its spec and status, a transition event
(events.k8s.io/v1) and a runner's result document, with the fields the
README ("Job spec", "REST API") and the CRD (k8s/manifests/crd.yaml) give
them. At run time they are plain dicts, read from JSON: phases and reasons
are plain strings there (the members of vocabulary.py compare equal to
them). Fields a document may lack are optional (``total=False``); a status
is ``{}`` until the engine first writes it. Standard library only.
"""

from __future__ import annotations

from typing import Any, TypedDict, Union

#: a duration as a spec gives it: Go style ("30m", "1h30m", "500ms") or seconds
Duration = Union[str, int, float]
#: a Kubernetes quantity ("500m", "2Gi", 1)
Quantity = Union[str, int, float]


# --- metadata ------------------------------------------------------------------


class _ObjectMetaRequired(TypedDict):
    name: str


class ObjectMeta(_ObjectMetaRequired, total=False):
    """``metadata`` of a job: ``uid``, ``resourceVersion`` and ``creationTimestamp`` are set by the store."""

    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]


# --- the spec (model.SPEC_SCHEMA checks it) --------------------------------------


class NotebookRef(TypedDict):
    path: str


class _EnvVarRequired(TypedDict):
    name: str


class EnvVar(_EnvVarRequired, total=False):
    value: str


class Resources(TypedDict, total=False):
    requests: dict[str, Quantity]
    limits: dict[str, Quantity]


class Toleration(TypedDict, total=False):
    key: str
    operator: str
    value: str
    effect: str
    tolerationSeconds: int


class BuildConfig(TypedDict, total=False):
    enabled: bool
    strategy: str
    baseImage: str
    requirementsFile: str
    requirements: list[str]
    timeout: Duration


class PodConfig(TypedDict, total=False):
    containerImage: str
    env: list[EnvVar]
    resources: Resources
    nodeSelector: dict[str, str]
    tolerations: list[Toleration]
    buildConfig: BuildConfig


class _SanitizerRequired(TypedDict):
    regex: str


class Sanitizer(_SanitizerRequired, total=False):
    replace: str
    section: str


class ComparisonConfig(TypedDict, total=False):
    strategy: str  # "exact" | "normalized"
    floatingPointTolerance: float
    relativeTolerance: float
    ignoreTimestamps: bool
    customTimestampPatterns: list[str]
    ignoreOutputTypes: list[str]
    ignoreExecutionCount: bool
    lax: bool
    sanitizers: list[Sanitizer]


class OutputLimits(TypedDict, total=False):
    perCell: int
    total: int


class _JobSpecRequired(TypedDict):
    notebook: NotebookRef


class JobSpec(_JobSpecRequired, total=False):
    goldenNotebook: NotebookRef
    inputFiles: list[str]
    podConfig: PodConfig
    comparisonConfig: ComparisonConfig
    timeout: Duration
    cellTimeout: Duration
    parameters: dict[str, Any]
    outputLimits: OutputLimits


# --- the status (written by the engine only) ---------------------------------------


class Condition(TypedDict):
    """A metav1.Condition (``type``: vocabulary.ConditionType; ``status``: "True" | "False")."""

    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str


class Transition(TypedDict):
    """One entry of ``status.transitions``: a phase the job entered."""

    phase: str
    reason: str
    message: str
    time: str


class BuildStatus(TypedDict, total=False):
    phase: str  # vocabulary.BuildPhase
    startTime: str
    completionTime: str
    strategy: str
    strategyReason: str
    message: str
    imageReference: str | None
    logPath: str
    duration: str


class ValidationStatus(TypedDict, total=False):
    startTime: str
    completionTime: str
    reason: str  # vocabulary.ResultReason, or a Kubernetes reason passed on (OOMKilled, Evicted, ...)
    duration: str
    environment: str


class CellProgress(TypedDict, total=False):
    cellIndex: int
    status: str  # "ok" | "error" | "skipped"
    executionTime: float


class Progress(TypedDict, total=False):
    """``status.progress`` during ValidationRunning (README, "REST API")."""

    cellsTotal: int
    cellsDone: int
    currentCellIndex: int | None
    currentCellStartedAt: str | None
    cells: list[CellProgress]
    updatedAt: str


class JobStatus(TypedDict, total=False):
    phase: str  # vocabulary.Phase; absent before the engine first looks at the job
    reason: str  # vocabulary.Reason
    message: str
    startTime: str
    completionTime: str
    observedGeneration: int
    conditions: list[Condition]
    transitions: list[Transition]
    buildStatus: BuildStatus
    validationStatus: ValidationStatus
    results: list[dict[str, Any]]  # the runner's per-cell results (CRD: objects, unknown fields kept)
    comparisonResult: dict[str, Any] | None
    failedCellIndex: int | None
    progress: Progress
    validationRetries: int  # retries after transient faults (absent = 0); see model.validation_attempt
    buildRetries: int  # as validationRetries, for the build: a counter of its own
    lastRetryTime: str  # when the current attempt (of either) began: its phase deadline counts from here


class _JobRequired(TypedDict):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: JobSpec


class Job(_JobRequired, total=False):
    """A NotebookValidationJob, as stored by every backend."""

    status: JobStatus


# --- events ------------------------------------------------------------------------


class EventMeta(TypedDict):
    name: str
    namespace: str


class ObjectReference(TypedDict):
    apiVersion: str | None
    kind: str | None
    name: str
    namespace: str
    uid: str


class Event(TypedDict):
    """An events.k8s.io/v1 Event regarding a job (events.make_event)."""

    apiVersion: str
    kind: str
    metadata: EventMeta
    eventTime: str
    reason: str
    action: str
    type: str  # "Normal" | "Warning"
    note: str
    regarding: ObjectReference
    reportingController: str
    reportingInstance: str


# --- what a runner reports -------------------------------------------------------------


class RunnerResult(TypedDict, total=False):
    """A runner's result document (runner/protocol.py writes and reads it)."""

    verdict: str  # vocabulary.VERDICTS
    reason: str | None  # vocabulary.ResultReason
    message: str | None
    failedCellIndex: int | None
    results: list[dict[str, Any]]
    comparisonResult: dict[str, Any] | None
    executedNotebook: str | None
    durationSeconds: float
    runner: dict[str, Any]
    detail: str  # "summary": only the termination summary was readable
    cells: dict[str, int]
