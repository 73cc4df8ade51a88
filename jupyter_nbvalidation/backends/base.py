"""What a backend supplies to the engine: a store and two executors.

The engine decides *when*; a backend knows *how* (a virtual environment or
an image build; a local kernel or a Pod). Every ``ensure_*`` is idempotent
and level-triggered: it starts the work if it is not running, and reports
its state. Backends call ``notify(name)`` when something they run finishes,
so the engine reacts at once instead of polling.

What a job asks for is decided once, by the engine: the validation plan
(plan.py), handed to ``prepare``, ``ensure_build`` and ``ensure_validation``.
A backend carries it out and raises the domain errors of errors.py when it
cannot (docs/architecture.md, "The validation plan" and "Errors").
"""

from __future__ import annotations

from abc import ABC, ABCMeta, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, ClassVar

from traitlets import Float, Int, MetaHasTraits
from traitlets.config import LoggingConfigurable

from jupyter_nbvalidation.core.documents import Job, JobSpec, Progress, RunnerResult
from jupyter_nbvalidation.core.spec_table import runner_options
from jupyter_nbvalidation.core.vocabulary import RunState
from jupyter_nbvalidation.environment.requirements import Requirements
from jupyter_nbvalidation.secrets.registry import SecretRegistry
from jupyter_nbvalidation.spec.plan import Snapshot, ValidationPlan
from jupyter_nbvalidation.store.base import JobStore

# what a backend observes of a build or a run (vocabulary.RunState), by the short names the backends use
RUNNING = RunState.RUNNING
SUCCEEDED = RunState.SUCCEEDED
FAILED = RunState.FAILED


@dataclass(frozen=True)
class Fault:
    """A fault that is not the notebook's: the infrastructure's or ours.

    A backend returns ``Observation(FAILED, fault=Fault(...))`` from
    ``ensure_build`` / ``ensure_validation`` when a build or a run failed for
    a reason that is not the notebook's (or not the requirements'); the engine
    decides what follows (docs/architecture.md, "Retries"): a transient fault
    is retried with backoff up to ``max_retries`` (``status.validationRetries``
    / ``buildRetries``), a permanent one, or the last, ends the job Failed
    with reason InfrastructureFailed, never a notebook verdict."""

    cause: str  # one sentence, the cause first ("The validation Pod was deleted (...)")
    transient: bool  # True: retried with backoff up to max_retries; False: the job ends at once


@dataclass(frozen=True)
class Notice:
    """Something off for a job that is no failure (image reuse off, and why): the
    engine posts it once per job as a Warning event with this ``reason``
    (vocabulary.NOTICE_REASONS) and ``note``; no status change, no transition."""

    reason: str
    note: str


@dataclass
class Observation:
    """The state of a build or a validation run, as the backend sees it."""

    state: RunState  # RUNNING | SUCCEEDED | FAILED
    message: str = ""
    reference: str | None = None  # build: the environment / image reference
    started_at: str | None = None
    finished_at: str | None = None
    log_path: str | None = None
    strategy: str | None = None
    result: RunnerResult | None = None  # validation: the runner's result document
    #: build: an image already in the registry stands for this build (nothing was built)
    reused: bool = False
    #: build: an environment already built stands for this build; when it was built (buildStatus.builtAt)
    built_at: str | None = None
    #: validation: the cells run so far (status.progress without updatedAt), when the runner said any
    progress: Progress | None = None
    #: validation, RUNNING: ask again within this many seconds (a backend that reads progress only
    #: when asked, from a Pod's log; or the deadline of a wait)
    progress_poll: float | None = None
    #: validation, RUNNING: the run adopted from an earlier engine died; the next ``ensure_validation``
    #: starts it again (local backend)
    again: bool = False
    fault: Fault | None = None  # FAILED only: not the notebook's failure (see Fault)
    notices: list[Notice] = field(default_factory=list)  # posted once per job (see Notice)


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond the port's required operations, declared once
    (``Backend.capabilities``); the service and the engine read it, never probe."""

    #: requirements may name local paths inside the root (their content is in the cache key)
    local_requirement_paths: bool = False
    #: ... and they travel with the job, packed into its snapshot at submit (local_sources.py):
    #: the backend builds where the server's files are not
    local_paths_travel: bool = False
    #: the Debian packages of a discovered environment's ``apt.txt`` are installed (into the image),
    #: as repo2docker does; without it apt.txt is named in the verdict as not run
    system_packages: bool = False
    #: requirements may use constraints files (``-c``)
    constraint_files: bool = False
    #: index URLs may carry credentials (kept out of everything stored)
    index_credentials: bool = False
    #: retention and the environment cache cap on request (``POST /gc``: ``Backend.collect``)
    garbage_collection: bool = False
    #: without spec.inputFiles, the notebook's folder (and below) travels in the job's snapshot as
    #: ``inputs/<path>``, read at submit (``Backend.folder_files``): the kernel runs where the
    #: server's files are not; False: the backend copies the folder when an attempt starts
    folder_in_snapshot: bool = False
    #: each job's environment record (environment_record.py: Python, every distribution with its
    #: exact version and source), taken when its validation starts (``Backend.environment_record``)
    environment_records: bool = False


def lease_traits(duration: float, deadline: float, period: float, lease: str) -> "tuple[Float[float, float], Float[float, float], Float[float, float]]":
    """``lease_duration``, ``renew_deadline`` and ``retry_period`` of a backend
    whose servers elect one reconciler over ``lease`` (election.py's rules)."""
    return (Float(duration, help=f"Seconds {lease} holds without renewal: a holder that died is replaced after "
                                 "at most this (+ retry_period).").tag(config=True),
            Float(deadline, help="Seconds the holder keeps reconciling without a successful renewal before it "
                                 "stops (less than lease_duration).").tag(config=True),
            Float(period, help="Seconds between renewals (the holder) and attempts to take the lease (the "
                               "others).").tag(config=True))


class _PortMeta(MetaHasTraits, ABCMeta):
    """A backend is configurable (traitlets) and abstract (abc): both metaclasses."""


class Backend(LoggingConfigurable, ABC, metaclass=_PortMeta):
    """Base class of the local and Kubernetes backends: the port.

    The required operations are abstract (a backend without one cannot be made);
    every other operation has the default a backend without it gets. Of those,
    ``run_election`` is needed only when ``elects_leader``, and ``collect``,
    ``snapshot_files`` and ``environment_record`` only with the capability that
    names them; their defaults raise NotImplementedError."""

    #: short name shown by /health
    name = "abstract"

    store: JobStore

    # the server's default of a runner option (spec_table.Runner.default: NAME is the trait default_NAME)
    default_cell_timeout = Int(600, help="Per-cell timeout in seconds unless the job or notebook sets one."
                               ).tag(config=True)
    max_retries = Int(3, help="Retries of a build or a validation that failed because of a transient fault "
                              "that is not the notebook's (a kernel that failed to start, a deleted Pod); "
                              "counted apart for the build and the validation. After the last the job ends "
                              "Failed with reason InfrastructureFailed. NBValidation.max_retries overrides it."
                      ).tag(config=True)
    retry_backoff = Float(2.0, help="Seconds before the first such retry, doubling for each next one (jittered, "
                                    "capped by the engine's max_backoff). NBValidation.retry_backoff overrides it."
                          ).tag(config=True)

    #: whether several servers can share this backend's store, so that only
    #: an elected leader may reconcile (see ``run_election``)
    elects_leader = False

    #: what this backend can do beyond the required operations
    capabilities: ClassVar[Capabilities] = Capabilities()

    #: the server's secrets by name (c.NBValidation.secrets; composition.assemble sets it): a job's
    #: podConfig.credentials are read from it at the run, never stored
    secrets: SecretRegistry = SecretRegistry({})

    @abstractmethod
    async def start(self, notify: Callable[[str], None]) -> None:
        raise NotImplementedError

    async def run_election(self, on_started_leading: Callable[[], None],
                           on_stopped_leading: Callable[[], None]) -> None:
        """Campaign for leadership until cancelled, calling the callbacks as
        leadership is gained and lost (only when ``elects_leader``)."""
        raise NotImplementedError

    @abstractmethod
    async def stop(self) -> None:
        raise NotImplementedError

    @abstractmethod
    def supported_fields(self) -> set[str]:
        """The spec fields this backend honours; any other is rejected."""
        raise NotImplementedError

    def check_spec(self, spec: JobSpec) -> None:
        """Backend-specific value checks; raise model.SpecError."""

    @abstractmethod
    async def submit(self, job: Job, files: dict[str, bytes]) -> Job:
        """Create the job and store its input snapshot (``notebook.ipynb``,
        optional ``golden.ipynb`` and ``requirements.txt``)."""
        raise NotImplementedError

    @abstractmethod
    async def read_snapshot(self, job: Job) -> Snapshot:
        """The input snapshot stored at submit, as the engine's plan needs it
        (plan.make_plan). Raise errors.InputRejected when it is gone,
        errors.TemporaryFailure when it may not be stored yet."""
        raise NotImplementedError

    async def prepare(self, job: Job, plan: ValidationPlan) -> str:
        """Initializing: what this backend checks of the plan beyond
        make_plan's checks; return a sentence on what was detected. Raise
        errors.InputRejected when the inputs cannot be used here."""
        return f"{plan.detected}."

    def unbuilt_environment(self, job: Job) -> str:
        """Where a job that disables its build is validated, for ``status.environment``
        ("the server's interpreter")."""
        return "the server's interpreter"

    def build_python_version(self) -> str | None:
        """The Python version built environments get ("3.11.7"), checked at submit against
        the version a repository asks for (runtime.txt, requires-python); None when not
        known here (a base image's Python is known only once it runs)."""
        return None

    def build_pythons(self) -> list[tuple[str, str]]:
        """(path, version) of the other base interpreters environments can be built with,
        one of which the build picks when the repository asks for a Python that
        :meth:`build_python_version` is not. Runs interpreters: called in a worker thread.
        Default: none."""
        return []

    @abstractmethod
    def build_strategy(self, job: Job) -> str:
        """The build strategy this job will use (recorded in buildStatus)."""
        raise NotImplementedError

    def build_strategy_reason(self, job: Job) -> str | None:
        """Why that strategy (recorded as buildStatus.strategyReason), if worth saying."""
        return None

    @abstractmethod
    async def ensure_build(self, job: Job, plan: ValidationPlan) -> Observation:
        """Start (once per attempt, ``model.build_attempt(job)``) or observe the
        build. A failure that is not the requirements' carries a ``Fault``."""
        raise NotImplementedError

    @abstractmethod
    async def cancel_build(self, job: Job) -> None:
        """Stop the job's build. Idempotent: the engine also calls it to discard a
        failed attempt before a retry, and again on cancel or timeout."""
        raise NotImplementedError

    @abstractmethod
    async def ensure_validation(self, job: Job, reference: str | None, plan: ValidationPlan) -> Observation:
        """Start (once) or observe the validation run. ``reference`` is read
        by the engine from the persisted status (BuildComplete), never
        computed here. One run per attempt (``model.validation_attempt(job)``):
        retry n gets a fresh run (fresh children). A failure that is not the
        notebook's carries a ``Fault``."""
        raise NotImplementedError

    @abstractmethod
    async def cancel_validation(self, job: Job) -> None:
        """Stop the job's validation run. Idempotent: the engine also calls it to
        discard a failed attempt before a retry (the next ``ensure_validation``
        then sees ``model.validation_attempt(job)`` one higher and must start a
        fresh run), and again on cancel or timeout."""
        raise NotImplementedError

    async def cleanup(self, job: Job) -> None:
        """A job reached a terminal phase: release what it holds."""

    # -- optional operations: each has the default a backend without it gets ------------
    def unsupported_reason(self, field: str) -> str | None:
        """Why ``field`` (a spec field this backend rejects) is not supported here, if
        there is more to say than "not supported by this backend"."""
        return None

    def check_working_folder(self, folder: str, root: str | None) -> None:
        """Submit: the notebook's folder, which the kernel works in, is within this
        backend's bounds, or raise errors.InputRejected naming it. Walks the folder:
        the service calls it in a thread."""

    def folder_files(self, folder: str, root: str | None) -> dict[str, bytes]:
        """Submit, ``capabilities.folder_in_snapshot``: the files of the notebook's folder
        that travel with the job (``inputs/<path relative to the folder>``: what the local
        backend's copy of it holds), within this backend's bounds, or raise
        errors.InputRejected naming it. Reads the folder: the service calls it in a thread."""
        return {}

    def add_private_paths(self, paths: list[str]) -> None:
        """The server's own folders (its Jupyter runtime dir: the token, the connection
        files of the user's kernels), which no notebook's kernel may see, where this
        backend can hide them (the local backend's sandbox). Default: nothing to do."""

    def runner_defaults(self) -> dict[str, Any]:
        """The server's default of every runner option whose row in the spec table names
        one (``spec_table.Runner.default``: NAME, held by this backend's trait
        ``default_NAME``), by NAME: the plan's keywords (``make_plan(..., **defaults)``),
        and part of the verdict cache's key."""
        return {option.default: getattr(self, "default_" + option.default)
                for _, option in runner_options() if option.default}

    def git_dir(self) -> str | None:
        """Where this backend keeps notebooks fetched from git (service/git_fetch.py), when it
        has a folder of its own for them (the local backend: inside its data dir, which kernels
        do not see); None: the service's default."""
        return None

    def private_paths(self) -> frozenset[str]:
        """Real paths never part of a notebook's folder as its kernel sees it (e.g. a
        data dir inside the folder): left out of its copy and its verdict key."""
        return frozenset()

    def owns(self, name: str) -> bool:
        """Whether this process runs something for job ``name`` that outlives its lead
        (a follower then stops it when the holder finishes or cancels the job)."""
        return False

    def admission_caps(self) -> tuple[int | None, int | None]:
        """(builds, validations) at once that this backend's own deprecated settings cap
        (e.g. LocalBackend.max_parallel_*), each None when unset; set, they win over
        NBValidation.max_concurrent_*."""
        return (None, None)

    def default_admission_caps(self) -> tuple[int | None, int | None]:
        """The caps of an engine made without the settings (tests, benchmarks); None: no cap."""
        return (None, None)

    async def drain(self, timeout: float | None = None) -> None:
        """After a hand-over: wait (killing nothing) until what this process started
        has ended, so that the next holder adopts its outcome."""

    async def delete_job(self, job: Job) -> None:
        """Remove a terminal job and what it holds (default: its store record)."""
        await self.store.delete(job["metadata"]["name"])

    async def collect(self, job_ttl: float | None = None, env_cache_max_bytes: int | None = None) -> dict[str, Any]:
        """Retention and the environment cache cap, now (``capabilities.garbage_collection``);
        ends with :meth:`collect_more`."""
        raise NotImplementedError

    def add_collect_hook(self, hook: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        """What a collection also removes that is not the backend's own (the service's cache of
        notebooks from git): ``hook`` runs after the backend's own collection (on request and
        in its periodic loop) and its answer is merged into the report."""
        self.__dict__.setdefault("_collect_hooks", []).append(hook)

    async def collect_more(self, report: dict[str, Any]) -> None:
        for hook in self.__dict__.get("_collect_hooks", []):
            try:
                report.update(await hook())
            except Exception as e:  # one cache's trouble never stops the backend's own collection
                self.log.warning("nbvalidation: garbage collection of %s failed: %s", hook, e)

    @abstractmethod
    async def executed_notebook(self, job: Job) -> dict[str, Any] | None:
        raise NotImplementedError

    @abstractmethod
    async def build_log(self, job: Job) -> str | None:
        raise NotImplementedError

    async def snapshot_files(self, job: Job) -> dict[str, bytes]:
        """The files stored with the job at submit (``notebook.ipynb``, ``golden.ipynb``,
        ``requirements.txt``, ``inputs/<path>``), by name; empty when they are gone
        (``capabilities.environment_records``: the change summary reads them)."""
        raise NotImplementedError

    async def environment_record(self, job: Job) -> dict[str, Any] | None:
        """The job's environment record (``capabilities.environment_records``); None
        until its validation has started."""
        raise NotImplementedError

    @abstractmethod
    async def health(self) -> dict[str, Any]:
        raise NotImplementedError

    # -- the verdict cache (verdict_cache.py) ---------------------------------------------
    async def verdict_environment(self, spec: JobSpec, requirements: Requirements) -> str | None:
        """The kernel's environment a job of ``spec`` with ``requirements`` would
        get now, as the verdict cache keys it; None when that cannot be known here
        (the notebook then always runs: never a false "unchanged")."""
        return None

    async def same_verdict_environment(self, job: Job, environment: str) -> bool:
        """Whether the environment ``job`` was validated in is still the one a run
        would get now (``environment``: what ``verdict_environment`` gives now; not
        evicted, not built again since): the verdict cache reuses a verdict only in
        the very environment it was given in."""
        return False
