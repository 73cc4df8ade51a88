"""The local backend's side of the runner fork server (:mod:`..runner.forkserver`).

:class:`RunnerForkServer` starts the fork server when the first runner is
needed, asks it for each runner, and hands back a :class:`ForkedRunner`: what
the backend uses of an ``asyncio.subprocess.Process`` (``pid``,
``returncode``, ``wait()``). Each runner is a new process of its own session,
killed by its process group like an exec'd one; only its start is cheaper.

Nothing here blocks the event loop: the socket is non-blocking and read by a
reader callback. When the fork server cannot start or serve, :meth:`spawn`
returns None and the caller starts the runner as a new interpreter; when it
dies, the runners it forked go on and are watched by pid and start time until
they end (their verdict is in their result file; the exit status is lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import sys
from typing import Any, Callable

import jupyter_nbvalidation.runner.hygiene as hygiene
from jupyter_nbvalidation.core.tasks import wait_within

MODULE = "jupyter_nbvalidation.runner.forkserver"
READY_TIMEOUT = 60.0  # seconds for the fork server's imports
SPAWN_TIMEOUT = 30.0  # seconds for a fork; a fork server that takes longer is killed (it restarts)
ORPHAN_POLL = 0.2  # seconds between looks at a runner whose fork server is gone
UNKNOWN_EXIT = 255  # the exit status of a runner whose fork server died before reporting it
MAX_MESSAGE = 1 << 16


class ForkedRunner:
    """One runner forked by the fork server (single use, like any runner process)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._start = hygiene.live_start_time(pid)
        self._ended: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._watch: asyncio.Task[None] | None = None

    async def wait(self) -> int:
        return await asyncio.shield(self._ended)

    def _exit(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
        if not self._ended.done():
            self._ended.set_result(self.returncode)

    def _orphaned(self) -> None:
        """The fork server is gone: watch the process itself until it ends."""
        if self._ended.done() or self._watch is not None:
            return

        async def watch() -> None:
            while self._start is not None and hygiene.live_start_time(self.pid) == self._start:
                await asyncio.sleep(ORPHAN_POLL)
            self._exit(UNKNOWN_EXIT)

        self._watch = asyncio.get_running_loop().create_task(watch())


class RunnerForkServer:
    """One fork server per local backend, started on first use, stopped with it."""

    def __init__(self, *, env: dict[str, str], cwd: str, wrap: Callable[[list[str]], list[str]],
                 log_path: str, log: logging.Logger | None = None) -> None:
        self.env = env
        self.cwd = cwd
        self.wrap = wrap  # e.g. nice -n N
        self.log_path = log_path
        self.log = log or logging.getLogger(__name__)
        self.proc: asyncio.subprocess.Process | None = None
        self.broken: str | None = None  # why it cannot serve: every runner is exec'd from then on
        self._sock: socket.socket | None = None
        self._ids = itertools.count(1)
        self._ready: asyncio.Future[dict[str, Any]] | None = None
        self._pending: dict[int, asyncio.Future[ForkedRunner | str]] = {}  # a runner, or why there is none
        self._runners: dict[int, ForkedRunner] = {}
        self._lock = asyncio.Lock()

    # -- the fork server process ----------------------------------------------
    async def _ensure(self) -> bool:
        async with self._lock:
            if self._sock is not None:
                return True
            if self.broken is not None:
                return False
            try:
                await self._start()
                return True
            except (OSError, asyncio.TimeoutError, ConnectionError, RuntimeError) as e:
                self.broken = str(e) or type(e).__name__
                self.log.warning("nbvalidation: the runner fork server could not start (%s); each runner "
                                 "starts a new interpreter instead", self.broken)
                await self._close()
                return False

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            out = await asyncio.to_thread(self._open_log)
            with out:
                self.proc = await asyncio.create_subprocess_exec(
                    *self.wrap([sys.executable, "-m", MODULE, str(theirs.fileno())]),
                    stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
                    pass_fds=(theirs.fileno(),), start_new_session=True, env=self.env, cwd=self.cwd)
        except BaseException:
            mine.close()  # not ours to read yet: nothing else would close it
            raise
        finally:
            theirs.close()
        mine.setblocking(False)
        self._sock = mine
        self._ready = loop.create_future()
        loop.add_reader(mine.fileno(), self._on_readable)
        hello = await wait_within(asyncio.shield(self._ready), READY_TIMEOUT)
        if not hello.get("ready"):
            raise RuntimeError(hello.get("error") or "refused to serve")

    def _open_log(self) -> Any:
        os.makedirs(self.cwd, exist_ok=True)
        return open(self.log_path, "ab")

    def _on_readable(self) -> None:
        sock = self._sock
        while sock is not None:
            try:
                data = sock.recv(MAX_MESSAGE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self._lost("its socket closed")
                return
            try:
                doc = json.loads(data)
            except ValueError:
                continue
            self._dispatch(doc)

    def _dispatch(self, doc: dict[str, Any]) -> None:
        if "ready" in doc:
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(doc)
        elif "exit" in doc:
            runner = self._runners.pop(doc.get("pid"), None)  # type: ignore[arg-type]
            if runner is not None:
                runner._exit(int(doc["exit"]))
        else:
            fut = self._pending.pop(doc.get("id"), None)  # type: ignore[arg-type]
            if isinstance(doc.get("pid"), int):
                # registered at once: its exit may be the very next message
                runner = ForkedRunner(doc["pid"])
                self._runners[runner.pid] = runner
                if fut is None or fut.done():  # its caller was cancelled: never a runner nobody waits for
                    hygiene.kill_group(runner.pid, signal.SIGKILL)
                else:
                    fut.set_result(runner)
            elif fut is not None and not fut.done():
                fut.set_result(str(doc.get("error") or "no reason given"))

    def _lost(self, why: str) -> None:
        """The fork server is gone (or stopped): nothing more will come from it."""
        if self._sock is not None:
            loop = asyncio.get_running_loop()
            with contextlib.suppress(Exception):
                loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
            if why:
                self.log.warning("nbvalidation: the runner fork server ended (%s); it restarts for the next run",
                                 why)
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(ConnectionError(why or "stopped"))
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError(why or "stopped"))
        self._pending.clear()
        for runner in self._runners.values():
            runner._orphaned()
        self._runners.clear()

    async def _close(self) -> None:
        self._lost("")
        proc, self.proc = self.proc, None
        if proc is not None and proc.returncode is None:
            try:
                await wait_within(asyncio.shield(proc.wait()), 5.0)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()

    async def stop(self) -> None:
        """End the fork server (runners it forked are not touched: the backend stops those)."""
        async with self._lock:
            await self._close()

    # -- runners ----------------------------------------------------------------
    async def spawn(self, argv: list[str], env: dict[str, str], cwd: str, log_fd: int) -> ForkedRunner | None:
        """A new runner ``python -m jupyter_nbvalidation.runner ARGV`` with exactly
        ``env``, working in ``cwd``, its output on ``log_fd``; None when the fork
        server cannot serve (start one another way)."""
        if not await self._ensure():
            return None
        sock = self._sock
        assert sock is not None
        request_id = next(self._ids)
        fut: asyncio.Future[ForkedRunner | str] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = fut
        try:
            socket.send_fds(sock, [json.dumps({"id": request_id, "argv": argv, "env": env, "cwd": cwd}).encode()],
                            [log_fd])
        except OSError as e:  # full (never seen: one small packet at a time) or gone
            self._pending.pop(request_id, None)
            self._lost(f"cannot send: {e}")
            return None
        try:
            # cancelled (or timed out), the future is cancelled too: a runner forked
            # after all is then killed as its pid arrives (_dispatch)
            reply = await wait_within(fut, SPAWN_TIMEOUT)
        except asyncio.CancelledError:
            got = fut.result() if fut.done() and not fut.cancelled() and fut.exception() is None else None
            if isinstance(got, ForkedRunner):  # its pid came as we were cancelled
                hygiene.kill_group(got.pid, signal.SIGKILL)
            raise
        except asyncio.TimeoutError:  # stuck: not trusted again until it is restarted
            if self.proc is not None and self.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
            return None
        except ConnectionError:
            return None
        if isinstance(reply, str):
            self.log.warning("nbvalidation: the runner fork server could not fork (%s)", reply)
            return None
        return reply
