"""The jobs in this process: a service assembled here (composition.local_service, by the
CLI) on the local data dir, in the client shape of clients/base.py. Its loop runs in the
caller's thread between calls, or (from ``begin`` to ``end``, a batch) in a thread of its
own, so that calls may come from any thread. The service's refusals (ApiError) are
ClientErrors here, as the REST client's."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Coroutine, Iterator, Mapping, Protocol, TypeVar, cast

from jupyter_nbvalidation.clients.base import FOLLOW_POLL, INTERRUPT_GRACE, ClientError, Json
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.model import is_terminal
from jupyter_nbvalidation.service.bisections import ServiceCalls, WaitStopped

if TYPE_CHECKING:
    from jupyter_nbvalidation.service.jobs import JobService

T = TypeVar("T")


class Follower(Protocol):
    """What :meth:`InProcess.run` tells while its job runs (cli.follow.Follower prints it):
    each change of the job, and the build log as it grows while ``wants_log``."""

    offset: int
    log_done: bool

    def update(self, job: dict[str, Any]) -> None: ...

    def wants_log(self, job: Mapping[str, Any]) -> bool: ...

    def log(self, data: bytes, complete: bool, next_offset: int) -> None: ...

    def no_log(self) -> None: ...


class SubmitInterrupted(Exception):
    """Ctrl-C of an in-process ``submit --wait``: its job (as it was left, or None) was cancelled."""

    def __init__(self, name: str, job: dict[str, Any] | None):
        super().__init__(name)
        self.name, self.job = name, job


@contextlib.contextmanager
def client_errors() -> Iterator[None]:
    """The service's refusal (ApiError) as the ClientError every client raises."""
    from jupyter_nbvalidation.service.jobs import ApiError  # deferred: start-up time of the CLI

    try:
        yield
    except ApiError as e:
        raise ClientError(e.message, e.status, e.field) from None


class InProcess(ServiceCalls):
    """The same operations as the REST API, on the local data dir, in this process:
    ``service`` (assembled for ``root_dir``: cli.connect.in_process) opened now, closed by
    :meth:`close`."""

    service: "JobService"
    # the ones opened and not closed yet: a command's end closes them (close_all), so that nothing of
    # theirs is left pending when the process exits ("Task was destroyed but it is pending!")
    _open: "ClassVar[set[InProcess]]" = set()

    def __init__(self, service: "JobService", root_dir: str):
        super().__init__(service, asyncio.new_event_loop())
        self.root_dir = root_dir
        self._thread: threading.Thread | None = None  # this process's loop, while a batch runs (begin)
        self.loop.run_until_complete(self.service.open())
        InProcess._open.add(self)

    def close(self) -> None:
        """The service closed (its store too) and every task still on this loop ended: a second call
        does nothing."""
        if self.loop.is_closed():
            return
        InProcess._open.discard(self)
        if self._thread is not None:  # a batch that did not reach its end (an error on the way)
            self.end(interrupted=True)
        try:
            self.loop.run_until_complete(self.service.close())
        finally:
            left = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
            for task in left:
                task.cancel()
            if left:
                self.loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    @classmethod
    def close_all(cls) -> None:
        """Close every one still open (a command's end, whatever way it ends)."""
        for client in list(cls._open):
            client.close()

    def begin(self) -> None:
        """A batch starts (``base.Client``): the engine starts, and this process's loop
        runs on in a thread of its own, so that every call below may come from any thread
        (each blocks its caller until its answer)."""
        self.loop.run_until_complete(self.service.start())
        self._thread = threading.Thread(target=self.loop.run_forever, name="nbvalidation-batch", daemon=True)
        self._thread.start()

    def end(self, interrupted: bool = False) -> None:
        """The batch is over: the data dir handed over (runs this process started end first,
        unless ``interrupted``: it cancelled its own, nothing of ours runs on) and the engine
        stopped; the loop is this thread's again."""
        async def finish() -> None:
            try:
                await self.service.hand_over(drain=not interrupted)
            finally:
                await self.service.stop()

        try:
            self._call(finish())
        finally:
            if self._thread is not None:
                self.loop.call_soon_threadsafe(self.loop.stop)
                self._thread.join()
                self._thread = None

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        with client_errors():
            if self._thread is not None:
                return asyncio.run_coroutine_threadsafe(coro, self.loop).result()
            return self.loop.run_until_complete(coro)

    def api_path(self, local_path: str) -> str:
        return Path(local_path).resolve().relative_to(Path(self.root_dir).resolve()).as_posix()

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        return cast(Json, self._call(self.service.submit(spec)))

    def unchanged(self, spec: dict[str, Any]) -> dict[str, Any] | None:
        """The verdict cache: an earlier Succeeded job standing for ``spec``, or None."""
        return cast("Json | None", self._call(self.service.unchanged(spec)))

    def wait(self, name: str, on_update: Callable[[dict[str, Any]], None], timeout: float | None,
             stop: threading.Event | None = None) -> dict[str, Any]:
        """As ServiceCalls.wait; only while a batch runs (begin)."""
        assert self._thread is not None, "InProcess.wait: only between begin() and end()"
        with client_errors():
            try:
                return super().wait(name, on_update, timeout, stop)
            except WaitStopped as e:
                raise ClientError(str(e)) from None

    def executed_notebook(self, name: str) -> dict[str, Any]:
        return self._call(self.service.executed_notebook(name))

    def events(self, name: str) -> list[dict[str, Any]]:
        return cast("list[Json]", self._call(self.service.events(name)))

    def timeline(self, name: str) -> dict[str, Any]:
        return self._call(self.service.timeline(name))

    def lock(self, name: str) -> str:
        return self._call(self.service.lock(name))

    def delete(self, name: str) -> tuple[int, dict[str, Any]]:
        return cast("tuple[int, Json]", self._call(self.service.delete(name)))

    def gc(self, job_ttl: float | None, env_cache_max_bytes: int | None) -> dict[str, Any]:
        return self._call(self.service.gc(job_ttl=job_ttl, env_cache_max_bytes=env_cache_max_bytes))

    def build_log(self, name: str, offset: int) -> tuple[bytes, bool, int]:
        chunk = self._call(self.service.build_log(name, offset))
        return chunk.data, chunk.complete, chunk.next_offset

    async def _follow_log(self, name: str, follower: Follower) -> None:
        """The build log as it grows, while this process's engine runs the job."""
        while True:
            job = await self.service.get(name)
            if follower.wants_log(job):
                try:
                    with client_errors():
                        chunk = await self.service.build_log(name, follower.offset)
                    follower.log(chunk.data, chunk.complete, chunk.next_offset)
                except ClientError as e:
                    if e.status != 404:
                        raise
                    follower.no_log()
            if is_terminal((job.get("status") or {}).get("phase")) or follower.log_done:
                return
            await asyncio.sleep(FOLLOW_POLL)

    def check_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The spec as this process's service would take it, or ClientError (exit 2)."""
        with client_errors():
            return cast(Json, self.service.check_spec(spec))

    async def _wait(self, name: str, follower: Follower, timeout: float | None) -> Job:
        logging_task = asyncio.ensure_future(self._follow_log(name, follower))
        try:
            done = await self.service.wait_for_terminal(name, timeout, cast("Callable[[Job], None]", follower.update))
        finally:
            if not logging_task.done():
                logging_task.cancel()
            await asyncio.gather(logging_task, return_exceptions=True)
        if follower.wants_log(done):  # the rest of the log, once the build ended
            await self._follow_log(name, follower)
        return done

    def run(self, spec: dict[str, Any], follower: Follower, timeout: float | None) -> dict[str, Any]:
        """Submit and wait in this process's engine. Ctrl-C or SIGTERM while it waits: the
        job is cancelled (its runner and kernel end), waited for at most INTERRUPT_GRACE s,
        the lease handed back at once, then :class:`SubmitInterrupted`; a second signal ends
        the process at once."""
        async def go() -> dict[str, Any]:
            await self.service.start()
            try:
                job = await self.service.submit(spec)
                name = job["metadata"]["name"]
                work = asyncio.ensure_future(self._wait(name, follower, timeout))
                with loop_interrupts(work) as came:
                    try:
                        done = await work
                    except asyncio.CancelledError:
                        if not came:
                            raise
                        try:
                            await self.service.cancel(name)
                        except Exception:  # ended meanwhile, or the store is away: the wait tells
                            pass
                        try:
                            left = await self.service.wait_for_terminal(name, INTERRUPT_GRACE)
                        except Exception:
                            left = None
                        await self.service.hand_over(drain=False)
                        raise SubmitInterrupted(name, cast("Json | None", left)) from None
                await self.service.hand_over()
                return cast(Json, done)
            finally:
                await self.service.stop()

        return self._call(go())


@contextlib.contextmanager
def loop_interrupts(work: "asyncio.Future[Any]") -> Any:
    """SIGINT and SIGTERM, while ``work`` runs on this thread's loop (an in-process
    ``submit --wait``): the first cancels it (the caller then cancels its job), a second
    one ends the process at once (exit 130). Yields a list that is non-empty once a
    signal came."""
    loop = asyncio.get_running_loop()
    came: list[int] = []

    def on_signal(signum: int) -> None:
        came.append(signum)
        if len(came) > 1:
            os._exit(130)  # the user insists: no more waiting
        work.cancel()

    installed = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(signum, on_signal, signum)
            installed.append(signum)
        except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or no signals here
            pass
    try:
        yield came
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
