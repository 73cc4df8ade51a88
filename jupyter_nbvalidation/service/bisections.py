"""Bisect in the server (issue 22, the lab's **Find the cause**): ``POST /jobs/{name}/bisect``
starts the same search ``jupyter nbvalidation bisect`` runs (why_red.bisect.search), here, for
a failed job with an earlier success; ``GET`` follows it step by step; ``DELETE`` stops it
(its running step's job cancelled).

The search is blocking code (each step waits for a probe job), so it runs in a worker
thread of its own pool (never the loop's default one: a search waits there for minutes, and
the submits it makes need that pool: sharing it could starve them), at most
:data:`MAX_RUNNING` at once, and reaches the service through :class:`ServiceCalls`: each
call is a coroutine scheduled on the server's loop and waited for in that thread, never on
the loop. What a
search has found is kept in memory, one per failed job, until the server stops (the
probe jobs it ran stay in the store, as any job does).
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import Any, Callable, Coroutine, Protocol, TypeVar, cast

import jupyter_nbvalidation.why_red.bisect as bisect_search
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.model import Phase
from jupyter_nbvalidation.service.errors import ApiError

Json = dict[str, Any]
T = TypeVar("T")

MAX_STEPS_LIMIT = 50
KEPT = 100  # searches remembered (the oldest finished ones are forgotten first)
MAX_RUNNING = 4  # searches at once: each holds a thread of its own for its whole length


class SearchService(Protocol):
    """What the searches need of the service (service.jobs.JobService gives it)."""

    async def get(self, name: str) -> Job: ...

    async def list_jobs(self, notebook: str | None, limit: int, continue_token: str | None,
                        probes: bool = False) -> dict[str, Any]: ...

    async def environment_record(self, name: str) -> dict[str, Any]: ...

    async def since_last_success(self, name: str, max_pages: int = 20) -> dict[str, Any]: ...

    async def submit(self, spec: Any, probe_of: str | None = None) -> Job: ...

    async def cancel(self, name: str) -> Job: ...

    async def wait_for_terminal(self, name: str, timeout: float | None = None,
                                on_update: Callable[[Job], None] | None = None) -> Job: ...


class WaitStopped(Exception):
    """:meth:`ServiceCalls.wait` ended by its ``stop`` before the job did."""


class ServiceCalls:
    """The job operations over a JobService whose loop runs in another thread than the
    caller's: each a coroutine scheduled on ``loop`` and waited for in the caller's thread,
    never on the loop; a refusal is the service's ApiError. What a search needs of a client
    (why_red.bisect.SearchClient): the server's searches use it as it is, and
    clients.in_process.InProcess is one with a loop of its own (its refusals ClientErrors,
    as the REST client's)."""

    def __init__(self, service: SearchService, loop: asyncio.AbstractEventLoop):
        self.service, self.loop = service, loop

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def get(self, name: str) -> dict[str, Any]:
        return cast(Json, self._call(self.service.get(name)))

    def list_jobs(self, notebook: str | None, limit: int) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self._call(self.service.list_jobs(notebook, limit, None))["items"]
        return items

    def environment(self, name: str) -> dict[str, Any]:
        return self._call(self.service.environment_record(name))

    def changes(self, name: str) -> dict[str, Any]:
        return self._call(self.service.since_last_success(name))

    def submit_probe(self, spec: dict[str, Any], probe_of: str) -> dict[str, Any]:
        """A probe job for ``probe_of`` (bisect's steps): never the notebook's verdict."""
        return cast(Json, self._call(self.service.submit(spec, probe_of=probe_of)))

    def cancel(self, name: str) -> dict[str, Any]:
        return cast(Json, self._call(self.service.cancel(name)))

    def wait(self, name: str, on_update: Callable[[dict[str, Any]], None], timeout: float | None,
             stop: threading.Event | None = None) -> dict[str, Any]:
        """The job once it ended, waited for on the loop (``on_update`` sees each change
        there); ``stop``, once set, ends the wait (:class:`WaitStopped`)."""
        running = asyncio.run_coroutine_threadsafe(
            self.service.wait_for_terminal(name, timeout, cast("Callable[[Job], None]", on_update)), self.loop)
        while not running.done():
            wait_for([running], timeout=0.25)
            if not running.done() and stop is not None and stop.is_set():
                running.cancel()
                raise WaitStopped(f"stopped waiting for job {name}")
        return cast(Json, running.result())


class Bisections:
    """The server's searches, by failed job name."""

    def __init__(self, service: SearchService):
        self.service = service
        self.runs: dict[str, dict[str, Any]] = {}
        self._stops: dict[str, threading.Event] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._pool = ThreadPoolExecutor(max_workers=MAX_RUNNING, thread_name_prefix="nbvalidation-bisect")

    def get(self, name: str) -> dict[str, Any] | None:
        doc = self.runs.get(name)
        return None if doc is None else {**doc, "steps": list(doc["steps"])}

    async def start(self, name: str, max_steps: int, step_timeout: float | None = None,
                    via: SearchService | None = None) -> tuple[bool, dict[str, Any]]:
        """(started now, the search's document). A search already running for the job is
        answered as it is; a finished one is started again. ``via``: the service as the job's
        user sees it (a JupyterHub service's view), which its steps are submitted through."""
        service = via if via is not None else self.service
        job = await service.get(name)
        if (job.get("status") or {}).get("phase") != Phase.FAILED:
            raise ApiError(409, "Conflict", f"job {name!r} did not fail: nothing to bisect")
        running = self.runs.get(name)
        if running is not None and running["state"] == "running":
            return False, self.get(name) or running
        busy = sum(1 for d in self.runs.values() if d["state"] == "running")
        if busy >= MAX_RUNNING:
            raise ApiError(409, "Conflict", f"{busy} searches for a cause are running here (the most at once); "
                                            "start this one when one of them has ended")
        loop = asyncio.get_running_loop()
        stop = threading.Event()
        doc: dict[str, Any] = {"job": name, "state": "running", "maxSteps": max_steps, "steps": [],
                               "startTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "lines": [], "result": None}
        self.runs[name], self._stops[name] = doc, stop
        self._forget_old()
        current: list[str | None] = [None]

        def say(text: str) -> None:
            loop.call_soon_threadsafe(doc["lines"].append, text)

        def on_step(step: dict[str, Any]) -> None:
            loop.call_soon_threadsafe(doc["steps"].append, step)

        def search() -> dict[str, Any]:
            try:
                return bisect_search.search(ServiceCalls(service, loop), job["spec"]["notebook"]["path"], name,
                                            max_steps, step_timeout, say, current, stop, on_step)
            except bisect_search.Stop as e:
                return {"result": "error", "exitCode": e.code, "message": e.message}
            except (ApiError, WaitStopped) as e:
                if stop.is_set() and current[0] is not None:
                    return {"result": "stopped", "exitCode": 130, "message": f"stopped (step job {current[0]} "
                                                                             "cancelled)", "stepJob": current[0]}
                return {"result": "error", "exitCode": 2, "message": str(e)}

        async def run() -> None:
            try:
                result = await loop.run_in_executor(self._pool, search)
            except Exception as e:  # noqa: BLE001 - a search never takes the server down; it says why it ended
                result = {"result": "error", "exitCode": 3, "message": f"the search failed: {e}"}
            if result.get("result") == "stopped" and result.get("stepJob"):
                try:
                    await service.cancel(str(result["stepJob"]))
                except ApiError:
                    pass
            doc["result"] = {k: v for k, v in result.items() if k != "stepJob"}
            doc["state"] = "stopped" if result.get("result") == "stopped" else "finished"
            doc["completionTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

        self._tasks[name] = asyncio.create_task(run(), name=f"nbvalidation-bisect-{name}")
        return True, self.get(name) or doc

    async def wait(self, name: str) -> dict[str, Any] | None:
        """The job's search once it ended (its document; None when none was started)."""
        task = self._tasks.get(name)
        if task is not None:
            await asyncio.shield(task)
        return self.get(name)

    async def stop(self, name: str) -> dict[str, Any] | None:
        """Stop the job's search (its running step cancelled); its document once it ended."""
        stop, task = self._stops.get(name), self._tasks.get(name)
        if stop is None or task is None:
            return self.get(name)
        stop.set()
        await asyncio.shield(task)
        return self.get(name)

    async def close(self) -> None:
        """The server stops: every search stops, its running step cancelled."""
        for name in list(self._tasks):
            await self.stop(name)
        self._pool.shutdown(wait=False)

    def _forget_old(self) -> None:
        ended = [n for n, d in self.runs.items() if d["state"] != "running"]
        for n in ended[: max(0, len(self.runs) - KEPT)]:
            self.runs.pop(n, None)
            self._stops.pop(n, None)
            self._tasks.pop(n, None)
