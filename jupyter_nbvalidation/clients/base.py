"""The one shape of a client: what the CLI's commands, ``run``'s batch (cli/batch.py) and the
pytest plugin need of the jobs, whoever serves them.

Two clients give it: :class:`~jupyter_nbvalidation.clients.in_process.InProcess` (a service
assembled in this process, on the local data dir) and
:class:`~jupyter_nbvalidation.clients.remote.Remote` (a running Jupyter server's REST API,
through clients/http.py). Every call blocks its caller and may come from any thread; a
refusal is a :class:`ClientError` whose ``status`` is the REST API's (404: not there, 4xx:
refused as input, None: the server could not be reached or the wait was stopped).

The search for the cause of a red (why_red/bisect.py) declares the part of this it uses itself
(``SearchClient``): both clients give it.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Protocol

# a job, a spec, a notebook: JSON objects. The service's Jobs are such plain dicts at run time
# (core/documents.py): InProcess hands them on as the REST API's answers are
Json = dict[str, Any]

#: seconds an interrupted run waits for its cancelled jobs to end (kills included)
INTERRUPT_GRACE = 3.0
#: seconds between two looks at a job being followed
FOLLOW_POLL = 0.5


class ClientError(Exception):
    """A call refused (``status``: the HTTP status, ``field``: the spec field at fault) or not
    answered (``status`` None)."""

    def __init__(self, message: str, status: int | None = None, field: str | None = None):
        super().__init__(message)
        self.status = status
        self.field = field


class Client(Protocol):
    """The job operations of a client (see the module's docstring)."""

    def begin(self) -> None:
        """A batch starts: from here to :meth:`end` calls may come from any thread."""

    def end(self, interrupted: bool = False) -> None:
        """The batch is over (``interrupted``: its jobs were cancelled, none is waited for)."""

    def api_path(self, local_path: str) -> str:
        """A filesystem path as a notebook path of the jobs (relative to the root)."""

    def submit(self, spec: Json) -> Json: ...

    def submit_probe(self, spec: Json, probe_of: str) -> Json:
        """A probe job for ``probe_of`` (bisect's steps): never the notebook's verdict."""

    def unchanged(self, spec: Json) -> Json | None:
        """The verdict cache: an earlier Succeeded job standing for ``spec``, or None."""

    def list_jobs(self, notebook: str | None, limit: int) -> list[Json]:
        """Job summaries, newest first (probes are not listed)."""

    def get(self, name: str) -> Json: ...

    def wait(self, name: str, on_update: Callable[[Json], None], timeout: float | None,
             stop: threading.Event | None = None) -> Json:
        """The job once it ended (``on_update`` sees each change); ``stop``, once set, ends the
        wait (ClientError)."""

    def cancel(self, name: str) -> Json: ...

    def delete(self, name: str) -> tuple[int, Json]:
        """(200, what the API answered) once deleted, or (202, …): still running, cancelled."""

    def events(self, name: str) -> list[Json]: ...

    def timeline(self, name: str) -> Json: ...

    def build_log(self, name: str, offset: int) -> tuple[bytes, bool, int]:
        """(the bytes from ``offset``, whether the log is complete, the offset to ask next)."""

    def executed_notebook(self, name: str) -> Json: ...

    def environment(self, name: str) -> Json: ...

    def changes(self, name: str) -> Json:
        """What changed since the notebook's last success before the job (``{"since": null}``
        when there is none; 404 where environments are not recorded)."""

    def lock(self, name: str) -> str: ...
