"""What a backend supplies to the engine: a store and two executors.

The engine decides *when*; a backend knows *how* (a virtual environment or
an image build; a local kernel or a Pod). Every ``ensure_*`` is idempotent
and level-triggered: it starts the work if it is not running, and reports
its state. Backends call ``notify(name)`` when something they run finishes,
so the engine reacts at once instead of polling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from traitlets.config import LoggingConfigurable

from ..store.base import JobStore

RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"


@dataclass
class Observation:
    """The state of a build or a validation run, as the backend sees it."""

    state: str  # RUNNING | SUCCEEDED | FAILED
    message: str = ""
    reference: str | None = None  # build: the environment / image reference
    started_at: str | None = None
    finished_at: str | None = None
    log_path: str | None = None
    strategy: str | None = None
    result: dict | None = None  # validation: the runner's result document
    extra: dict = field(default_factory=dict)


class InputError(Exception):
    """The job's inputs cannot be used (missing snapshot, unreadable requirements)."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class Backend(LoggingConfigurable):
    """Base class of the local and Kubernetes backends."""

    #: short name shown by /health
    name = "abstract"

    store: JobStore

    #: whether several servers can share this backend's store, so that only
    #: an elected leader may reconcile (see ``run_election``)
    elects_leader = False

    async def start(self, notify: Callable[[str], None]) -> None:
        raise NotImplementedError

    async def run_election(self, on_started_leading: Callable[[], None],
                           on_stopped_leading: Callable[[], None]) -> None:
        """Campaign for leadership until cancelled, calling the callbacks as
        leadership is gained and lost (only when ``elects_leader``)."""
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    def supported_fields(self) -> set[str]:
        """The spec fields this backend honours; any other is rejected."""
        raise NotImplementedError

    def check_spec(self, spec: dict) -> None:
        """Backend-specific value checks; raise model.SpecError."""

    async def submit(self, job: dict, files: dict[str, bytes]) -> dict:
        """Create the job and store its input snapshot (``notebook.ipynb``,
        optional ``golden.ipynb`` and ``requirements.txt``)."""
        raise NotImplementedError

    async def prepare(self, job: dict) -> str:
        """Initializing: check the stored inputs; return a sentence on what
        was detected. Raise InputError when they cannot be used."""
        raise NotImplementedError

    def build_strategy(self, job: dict) -> str:
        """The build strategy this job will use (recorded in buildStatus)."""
        raise NotImplementedError

    def build_strategy_reason(self, job: dict) -> str | None:
        """Why that strategy (recorded as buildStatus.strategyReason), if worth saying."""
        return None

    async def ensure_build(self, job: dict) -> Observation:
        raise NotImplementedError

    async def cancel_build(self, job: dict) -> None:
        raise NotImplementedError

    async def ensure_validation(self, job: dict, reference: str | None) -> Observation:
        """Start (once) or observe the validation run. ``reference`` is read
        by the engine from the persisted status (BuildComplete), never
        computed here."""
        raise NotImplementedError

    async def cancel_validation(self, job: dict) -> None:
        raise NotImplementedError

    async def cleanup(self, job: dict) -> None:
        """A job reached a terminal phase: release what it holds."""

    async def executed_notebook(self, job: dict) -> dict | None:
        raise NotImplementedError

    async def build_log(self, job: dict) -> str | None:
        raise NotImplementedError

    async def health(self) -> dict[str, Any]:
        raise NotImplementedError
