"""What the rooms of the local backend share: the settings and state ``LocalBackend``
(backend.py) sets up, declared once with their types, and the methods one room calls
that another room or ``LocalBackend`` defines. The rooms (environments.py, runs.py,
retention.py, builds.py, interpreters.py, artefacts.py) subclass it; ``LocalBackend`` fulfils it. Declarations only: the
attributes are annotations (the traits and ``__init__`` of backend.py give them their
values), and each method here is overridden by the class that defines it, which comes
before this one in ``LocalBackend``'s method resolution order."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from jupyter_nbvalidation.backends.base import Observation
from jupyter_nbvalidation.backends.local.disk import _Build, _Run
from jupyter_nbvalidation.backends.local.forkserver import RunnerForkServer
from jupyter_nbvalidation.backends.local.pool import KernelPool
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.environment.requirements import Requirements
from jupyter_nbvalidation.secrets.registry import SecretRegistry
from jupyter_nbvalidation.spec.plan import Snapshot, ValidationPlan
from jupyter_nbvalidation.store.lease import StoreLeaseElector
from jupyter_nbvalidation.store.sqlite import SQLiteJobStore


class LocalState:
    """The state of ``LocalBackend`` that its rooms use (see the module's docstring)."""

    # -- settings (LocalBackend's traits) ------------------------------------------
    name: str  # the Backend port's
    secrets: SecretRegistry  # the Backend port's (c.NBValidation.secrets)
    data_dir: str
    python: str
    pythons: list[str]
    unbuilt_python: str
    build_tool: str
    uv_path: str
    kernel_packages: list[str]
    niceness: int
    fork_runners: bool
    job_ttl: float
    env_cache_max_bytes: int
    env_min_idle: float
    max_folder_files: int
    max_folder_bytes: int
    run_disk_limit: int
    keep_outputs_dir: str
    gc_interval: float
    log: logging.Logger  # LoggingConfigurable's

    # -- state (LocalBackend.__init__) ----------------------------------------------
    store: SQLiteJobStore
    _notify: Callable[[str], None]
    _builds: dict[str, _Build]  # by env key
    _job_build: dict[str, _Build]  # by job uid
    _runs: dict[str, _Run]  # by job uid
    _unbuilt_records: dict[str, tuple[str, dict[str, Any]]]
    _build_slots: asyncio.Semaphore
    _run_slots: asyncio.Semaphore
    _python_version: str | None
    _interpreters: list[tuple[str, str]] | None  # LocalBackend.pythons: (path, version), asked once
    _keys: dict[str, str]  # env key by job uid
    _env_notes: dict[str, str]  # by job uid: its environment was found changed, retired and rebuilt
    identity: str
    elector: StoreLeaseElector | None
    last_gc: dict[str, Any] | None
    _forkserver: RunnerForkServer | None
    _sandbox: dict[str, Any] | None
    _bounds: dict[str, Any] | None
    _pool: KernelPool | None  # pre-started kernels (pool.py), made at start

    # -- LocalBackend's (backend.py) ------------------------------------------------
    @property
    def root(self) -> Path:
        raise NotImplementedError

    def job_dir(self, job: Job) -> Path:
        raise NotImplementedError

    def env_dir(self, key: str) -> Path:
        raise NotImplementedError

    def owner(self) -> dict[str, Any]:
        raise NotImplementedError

    def _mine(self, owner: dict[str, Any] | None) -> bool:
        raise NotImplementedError

    def _niced(self, argv: list[str]) -> list[str]:
        raise NotImplementedError

    async def _check_python(self) -> None:
        raise NotImplementedError

    def build_pythons(self) -> list[tuple[str, str]]:
        raise NotImplementedError

    def _wants_other_python(self, python_requires: tuple[str, str] | None) -> bool:
        raise NotImplementedError

    async def _know_pythons_for(self, python_requires: tuple[str, str] | None) -> None:
        raise NotImplementedError

    async def sandbox_state(self) -> dict[str, Any]:
        raise NotImplementedError

    def _sandbox_config(self, job: Job, run_dir: Path) -> dict[str, Any]:
        raise NotImplementedError

    def private_paths(self) -> frozenset[str]:
        raise NotImplementedError

    if TYPE_CHECKING:  # backends/base.py's: declared only (Backend's comes after this class in LocalBackend's MRO)
        async def collect_more(self, report: dict[str, Any]) -> None: ...

    def build_strategy(self, job: Job) -> str:
        raise NotImplementedError

    def _snapshot(self, job: Job) -> Snapshot:
        raise NotImplementedError

    # -- EnvironmentsRoom's (environments.py) -----------------------------------------
    def _interpreter_for(self, python_requires: tuple[str, str] | None) -> tuple[str, str | None] | None:
        raise NotImplementedError

    def _use_env(self, key: str) -> bool:
        raise NotImplementedError

    def _read_marker(self, key: str) -> dict[str, Any]:
        raise NotImplementedError

    def _unplanned_env_key(self, job: Job) -> str:
        raise NotImplementedError

    async def _record_environment(self, job: Job, python: str, reference: str | None) -> None:
        raise NotImplementedError

    @staticmethod
    def _touch_env(reference: str | None) -> None:
        raise NotImplementedError

    def _env_changes(self, key: str) -> list[str]:
        raise NotImplementedError

    def _retire_env(self, key: str, when: str, changed: list[str]) -> None:
        raise NotImplementedError

    async def _env_users(self, key: str, uid: str) -> list[str]:
        raise NotImplementedError

    async def _built_record(self, python: str, marker: dict[str, Any] | None) -> dict[str, Any]:
        raise NotImplementedError

    async def _rebuild_env(self, job: Job, plan: ValidationPlan, key: str) -> Observation:
        raise NotImplementedError

    # -- BuildsRoom's (builds.py) ------------------------------------------------------
    async def _build_or_adopt(self, build: _Build, requirements: Requirements, strategy: str,
                              log_path: str) -> Observation:
        raise NotImplementedError

    # -- RunsRoom's (runs.py) --------------------------------------------------------
    def _working_folder(self, job: Job) -> tuple[str | None, str | None, str | None]:
        raise NotImplementedError

    def _remove_copies(self, job: Job) -> None:
        raise NotImplementedError

    async def cleanup(self, job: Job) -> None:
        raise NotImplementedError

    # -- RetentionRoom's (retention.py) ------------------------------------------------
    async def collect(self, job_ttl: float | None = None, env_cache_max_bytes: int | None = None) -> dict[str, Any]:
        raise NotImplementedError

