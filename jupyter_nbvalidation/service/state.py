"""What the rooms of ``JobService`` share: its settings and state, set up by
``JobService.__init__`` (jobs.py) and declared here once with their types, the few
helpers every room uses, and the methods one room calls that another defines. The rooms
(snapshot.py: the inputs read at submit; queries.py: what a job is and has; history.py:
the earlier jobs of a notebook) subclass it, and ``JobService`` is made of them. A method
declared here raising NotImplementedError is overridden by the room that defines it, which
comes before this class in ``JobService``'s method resolution order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jupyter_nbvalidation.backends.base import Backend
from jupyter_nbvalidation.core.documents import Job, JobSpec
from jupyter_nbvalidation.core.model import ROOT_ANNOTATION
from jupyter_nbvalidation.engine.engine import Engine
from jupyter_nbvalidation.environment.requirements import Requirements
from jupyter_nbvalidation.secrets.registry import Caller, SecretRegistry
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.store.base import JobStore, NotFound, owner_of


class ServiceState:
    """The state of ``JobService`` that its rooms use (see the module's docstring)."""

    # -- settings and state (JobService.__init__) ---------------------------------------
    engine: Engine
    backend: Backend
    root_dir: str
    real_root: str  # the server root's real path, as jobs record it (ROOT_ANNOTATION), read once
    max_notebook_bytes: int
    max_input_files: int
    max_input_bytes: int
    start_problem: str | None  # why the engine has not started (JobService.start_serving)
    # whose request this is (a JupyterHub service's view, JobService.as_user): None sees every job
    # (a single user's server); a name sees only the jobs labelled with it, unless ``admin``
    owner: str | None = None
    admin: bool = False
    at_commit = False  # a view rooted at a commit's tree (git_source.py): its notebook is fetched
    extra_labels: dict[str, str] = {}  # a schedule's run's view: the schedule's label (service/schedules.py)
    extra_annotations: dict[str, str] = {}  # a fetched view's (git_source.py): the source, for the job's status
    golden_root: str | None = None  # where goldenNotebook.path is read, when not the root (its own git source)
    # who asks for the server's secrets (as_user: a Hub user and their groups; else the single-user
    # server's own user): podConfig.credentials are checked at submit for it
    caller: Caller = Caller()

    @property
    def scope_owner(self) -> str | None:
        """The owner the store's queries filter on: None for an unscoped or an admin's view."""
        return None if self.admin else self.owner

    @property
    def store(self) -> JobStore:
        return self.backend.store

    @property
    def secrets(self) -> SecretRegistry:
        """The server's secrets by name (the backend's: it reads their values at the run)."""
        return self.backend.secrets

    async def get(self, name: str) -> Job:
        try:
            job = await self.store.get(name)
        except NotFound:
            raise ApiError(404, "NotFound", f"no job named {name!r}") from None
        if self.scope_owner is not None and owner_of(job) != self.scope_owner:
            # another user's job answers as a job that does not exist: no name leaks
            raise ApiError(404, "NotFound", f"no job named {name!r}")
        return job

    @staticmethod
    def _root_of(job: Job) -> str | None:
        return ((job.get("metadata") or {}).get("annotations") or {}).get(ROOT_ANNOTATION)

    # -- JobService's (jobs.py) and HistoryRoom's (history.py) --------------------------------
    async def submit(self, spec: Any, probe_of: str | None = None, labels: dict[str, str] | None = None) -> Job:
        raise NotImplementedError

    async def unchanged(self, spec: Any, max_pages: int = 20) -> Job | None:
        raise NotImplementedError

    # -- GitSourceRoom's (git_source.py) -----------------------------------------------
    async def _unchanged_git(self, spec: Any) -> Job | None:
        raise NotImplementedError

    # -- SnapshotRoom's (snapshot.py) ---------------------------------------------------
    def _validate(self, spec: Any) -> JobSpec:
        raise NotImplementedError

    async def _prepare(self, spec: Any) -> tuple[dict[str, Any], dict[str, bytes], Path, Requirements, str | None,
                                                 str | None]:
        raise NotImplementedError

    def _submit_annotations(self, spec: dict[str, Any], nb_path: Path, reqs: Requirements) -> dict[str, str]:
        raise NotImplementedError

    # -- ProjectSettingsRoom's (project_settings.py) -------------------------------------
    def _with_project_settings(self, spec: Any) -> Any:
        raise NotImplementedError
