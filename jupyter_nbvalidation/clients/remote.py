"""The jobs through a running Jupyter server's REST API (clients/http.py): the client
shape of clients/base.py, blocking, from any thread."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, cast

from jupyter_nbvalidation.clients.base import ClientError, Json
from jupyter_nbvalidation.clients.http import ServerClient
from jupyter_nbvalidation.core.model import is_terminal


class Remote:
    """The same operations through a running Jupyter server's REST API (blocking, any thread).
    Its answers are JSON of the shapes openapi.py documents."""

    def __init__(self, client: ServerClient):
        self.client = client

    def begin(self) -> None:
        """A batch starts (``base.Client``): the server's engine is already running."""

    def end(self, interrupted: bool = False) -> None:
        """The batch is over: nothing of this process to hand over."""

    def executed_notebook(self, name: str) -> dict[str, Any]:
        return cast(Json, self.client.request("GET", f"jobs/{name}/notebook"))

    def api_path(self, local_path: str) -> str:
        return self.client.api_path(local_path)

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        return cast(Json, self.client.request("POST", "jobs", spec))

    def unchanged(self, spec: dict[str, Any]) -> dict[str, Any] | None:
        """The verdict cache on the server: an earlier Succeeded job standing for ``spec``, or None."""
        return cast("Json | None", self.client.request("POST", "unchanged", spec).get("job"))

    def submit_probe(self, spec: dict[str, Any], probe_of: str) -> dict[str, Any]:
        """A probe job for ``probe_of`` (bisect's steps): never the notebook's verdict."""
        return cast(Json, self.client.request("POST", "jobs", spec, params={"probeOf": probe_of}))

    def list_jobs(self, notebook: str | None, limit: int) -> list[dict[str, Any]]:
        return cast("list[Json]", self.client.request("GET", "jobs", params={"notebook": notebook, "limit": limit})["items"])

    def get(self, name: str) -> dict[str, Any]:
        return cast(Json, self.client.request("GET", f"jobs/{name}"))

    def events(self, name: str) -> list[dict[str, Any]]:
        return cast("list[Json]", self.client.request("GET", f"jobs/{name}/events")["items"])

    def timeline(self, name: str) -> dict[str, Any]:
        return cast(Json, self.client.request("GET", f"jobs/{name}/timeline"))

    def environment(self, name: str) -> dict[str, Any]:
        return cast(Json, self.client.request("GET", f"jobs/{name}/environment"))

    def changes(self, name: str) -> dict[str, Any]:
        return cast(Json, self.client.request("GET", f"jobs/{name}/changes"))

    def lock(self, name: str) -> str:
        return cast(str, self.client.request("GET", f"jobs/{name}/lock", raw=True))

    def cancel(self, name: str) -> dict[str, Any]:
        # cancelOnly: a job that has just finished is left as it ended, not deleted
        return cast(Json, self.client.request("DELETE", f"jobs/{name}", params={"cancelOnly": "true"}))

    def delete(self, name: str) -> tuple[int, dict[str, Any]]:
        job = self.get(name)
        answer = self.client.request("DELETE", f"jobs/{name}")
        return (200 if is_terminal((job.get("status") or {}).get("phase")) else 202), answer

    def build_log(self, name: str, offset: int) -> tuple[bytes, bool, int]:
        return self.client.build_log(name, offset)

    def wait(self, name: str, on_update: Callable[[dict[str, Any]], None], timeout: float | None,
             stop: threading.Event | None = None) -> dict[str, Any]:
        """Polls until the job ended; ``stop``, once set, ends the wait (ClientError)."""
        deadline = time.monotonic() + timeout if timeout else None
        last = None
        while True:
            if stop is not None and stop.is_set():
                raise ClientError(f"stopped waiting for job {name}")
            job = self.get(name)
            version = job["metadata"].get("resourceVersion")
            if version != last:
                on_update(job)
                last = version
            if is_terminal((job.get("status") or {}).get("phase")):
                return job
            if deadline and time.monotonic() > deadline:
                raise ClientError(f"job {name} did not finish within {timeout:.0f}s")
            if stop is not None:
                stop.wait(0.5)
            else:
                time.sleep(0.5)
