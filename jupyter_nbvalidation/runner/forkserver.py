"""A fork server for runners (``python -m jupyter_nbvalidation.runner.forkserver FD``).

Starting a runner costs a new interpreter and its imports (nbformat, nbclient,
jupyter_client, zmq): about 0.6 s of CPU for every notebook, a third of what a
small notebook costs. This process pays that once: it imports what a runner
imports, then waits on the socket ``FD`` (an ``AF_UNIX`` ``SOCK_SEQPACKET``
socket its parent, the local backend, keeps the other end of). For each request
it forks a **new process** that becomes one runner for one run, exactly as
``python -m jupyter_nbvalidation.runner ARGS`` would be, and is never reused:

* its own session and process group (``setsid``), ``stdin`` from ``/dev/null``,
  ``stdout`` and ``stderr`` on the log file passed with the request;
* its environment is the request's, whole (``os.environ`` replaced, so the
  kernel it starts inherits nothing of this process or of an earlier run), its
  working directory the request's; the random generators are reseeded and the
  temporary-folder cache reset, so nothing computed for one run is reused by
  another;
* it runs :func:`.cli.main` and leaves with its exit status (``atexit``
  handlers run, as at the end of an interpreter).

What is shared is only what an interpreter holds once it has imported those
modules and before it has done anything: this process starts no thread, no
event loop and no zmq context before it forks (it refuses to serve otherwise),
and the kernel a runner starts is always a new interpreter of its own. This
process reads no job data: a request carries the runner's arguments (paths and
options) and its environment, built from an allow-list (``runner_environment``);
a job's own variables go to the kernel through a file, never through here.

Messages (JSON, one per packet; the log file descriptor rides with a request
as ``SCM_RIGHTS``)::

    -> {"id": N, "argv": [...], "env": {...}, "cwd": "..."}   + [log fd]
    <- {"ready": true, "pid": P}                               once, after the imports
    <- {"id": N, "pid": CHILD} | {"id": N, "error": "..."}
    <- {"pid": CHILD, "exit": CODE}                            CODE < 0: killed by signal -CODE

When the other end closes, this process exits; runners still running go on
(as runners started any other way do) and are reaped by init or a subreaper.
Linux and other POSIX systems with ``fork`` only.
"""

from __future__ import annotations

import atexit
import json
import os
import random
import selectors
import signal
import socket
import sys
import tempfile
import threading
import traceback
from typing import Any

MAX_MESSAGE = 1 << 20
# what a runner imports, loaded once here (see :mod:`.execute` and :mod:`.verdict`)
PRELOAD = (
    "nbformat",
    "nbclient",
    "nbclient.exceptions",
    "jupyter_client.kernelspec",
    "jupyter_client.manager",
    "jupyter_client.asynchronous",
    "zmq.asyncio",
    "jupyter_nbvalidation.runner.cli",
)


def _send(sock: socket.socket, doc: dict[str, Any]) -> None:
    try:
        sock.send(json.dumps(doc).encode())
    except OSError:
        pass  # the parent is gone; the loop sees the end of the socket next


def _exit_code(status: int) -> int:
    try:
        return os.waitstatus_to_exitcode(status)
    except ValueError:  # pragma: no cover - stopped, not ended
        return 255


def _become_runner(request: dict[str, Any], log_fd: int, close: list[int], started: int) -> int:
    """In the forked child: turn into the runner of one run, and run it. ``started``
    is closed once this process leads its own session (its parent waits for that)."""

    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a new interpreter has it (and its kernel)
    for fd in close:
        try:
            os.close(fd)
        except OSError:
            pass
    os.setsid()
    os.close(started)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    code = 2
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # found again from this run's TMPDIR
        random.seed()
        import jupyter_nbvalidation.runner.cli as cli  # deferred: start-up time (imported in the fork server's warm-up, before the first fork)

        argv = [str(a) for a in request["argv"]]
        sys.argv = [os.path.join(os.path.dirname(cli.__file__), "__main__.py"), *argv]
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except BaseException:
        traceback.print_exc()
        code = 2
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    return code  # pragma: no cover - os._exit does not return


def serve(fd: int) -> int:
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    for name in PRELOAD:
        __import__(name)
    if threading.active_count() != 1:  # never fork a process with threads
        _send(sock, {"ready": False, "error": f"{threading.active_count()} threads after the imports"})
        return 1
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent's Ctrl-C is for the parent; it closes the socket
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    children: set[int] = set()
    _send(sock, {"ready": True, "pid": os.getpid()})

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                children.clear()
                return
            if pid == 0:
                return
            if pid in children:
                children.discard(pid)
                _send(sock, {"pid": pid, "exit": _exit_code(status)})

    while True:
        for key, _ in selector.select():
            if key.fileobj == wake_r:
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                reap()
                continue
            try:
                data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 4)
            except InterruptedError:
                continue
            except OSError:
                data, fds = b"", []
            if not data:
                for f in fds:
                    os.close(f)
                return 0  # the parent closed its end (or died)
            handle(sock, data, fds, children, [fd, wake_r, wake_w, selector.fileno()])
            reap()


def handle(sock: socket.socket, data: bytes, fds: list[int], children: set[int], close: list[int]) -> None:
    request: dict[str, Any] = {}
    try:
        request = json.loads(data)
        if len(fds) != 1 or not isinstance(request.get("argv"), list) or not isinstance(request.get("env"), dict) \
                or not isinstance(request.get("cwd"), str):
            raise ValueError("a request needs argv, env, cwd and one log file descriptor")
        started_r, started_w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(started_r)
            os.close(started_w)
            raise
    except (ValueError, OSError) as e:
        for f in fds:
            os.close(f)
        _send(sock, {"id": request.get("id"), "error": str(e)})
        return
    if pid == 0:
        _become_runner(request, fds[0], [*close, started_r], started_w)
    children.add(pid)
    os.close(fds[0])
    os.close(started_w)
    # the pid is sent once it names a process group: a kill of the group right after it
    # arrives (a cancel) reaches the runner, as it would one started by exec
    while os.read(started_r, 1):
        pass
    os.close(started_r)
    _send(sock, {"id": request.get("id"), "pid": pid})


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].isdigit():
        sys.stderr.write("usage: python -m jupyter_nbvalidation.runner.forkserver FD\n")
        return 2
    return serve(int(args[0]))


if __name__ == "__main__":
    sys.exit(main())
