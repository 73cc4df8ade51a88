"""A pre-started kernel: the runner started before its notebook is known (issue 43;
docs/kernel.md, "Pre-started kernels")::

    python -m jupyter_nbvalidation.runner --pool-slot SLOT.json

``SLOT.json`` is ``{"python", "cwd", "sandbox", "bounds", "kernelEnv"}``: what the
runner of a run gets as ``--python``, ``--sandbox``, ``--bounds`` and
``--kernel-env-file``, and ``cwd``, an empty folder of the slot. The kernel is started
exactly as for a run (:class:`.execute._Execution`: the same kernelspec, sandbox,
bounds, environment, priority), in that folder, and nothing else is done in it; then
``NBVALIDATION-POOL ready`` is printed on stdout (``NBVALIDATION-POOL failed <why>`` and
exit 3 when it cannot start).

The runner then waits for one line on stdin, ``{"argv": [...], "cwd": ..., "log": ...}``:
the runner's arguments of the run that takes it, the kernel's working folder in the
run's copy (placed by the backend into the folder the kernel was started in), and the
run's log. EOF (the pool discards the slot, or its server is gone), SIGTERM, or the
kernel's death end it: the kernel is stopped, nothing is left.

On the line the kernel is *bound*, before anything of the notebook runs, by a silent
request of the runner's (``user_expressions``: no execution count, no history, nothing
in the user namespace): its working directory and IPython's ``_dh``. The kernel's
environment (``podConfig.env``, the locale, ``TZ``), its sandbox, its bounds and its
interpreter are those of the slot, which the backend gives a run only when they are
the ones the run asks (the pool's key), so nothing else is set. ``sys.path`` holds
``''`` (the working directory), not a path. ``NBVALIDATION-POOL bound`` is printed,
stdout and stderr go to the run's log, and the runner goes on as ``cli.main(argv)``
with that kernel. A kernel is used once.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import uuid
from dataclasses import dataclass
from typing import Any, Sequence

import jupyter_nbvalidation.runner.cli as cli
import jupyter_nbvalidation.runner.hygiene as hygiene
from jupyter_nbvalidation.core.tasks import wait_within
from jupyter_nbvalidation.runner.environment import RUN_ID_VAR
from jupyter_nbvalidation.runner.execute import DEFAULT_STARTUP_TIMEOUT, _Execution
from jupyter_nbvalidation.runner.kernel import maybe_await, read_log, shell_reply
from jupyter_nbvalidation.runner.limits import RunBounds, folder_bytes
from jupyter_nbvalidation.runner.options import RunnerOptions

PREFIX = "NBVALIDATION-POOL "
READY, BOUND, FAILED = "ready", "bound", "failed"
EXIT_NOT_USED = 3  # the kernel could not start, died while it waited, or could not be bound
BIND_TIMEOUT = 10.0
# the kernel's working folder and IPython's directory history, as a kernel started there has them
BIND = ("(lambda os, ns, cwd: (os.chdir(cwd), ns['_dh'].__setitem__(slice(None), [type(ns['_dh'][0])(cwd)])"
        " if ns.get('_dh') else None, os.getcwd())[-1])(__import__('os'), get_ipython().user_ns, {cwd!r})")


@dataclass
class Prestarted:
    """A kernel started for a run not yet known: what ``_Execution.run`` takes over."""

    loop: asyncio.AbstractEventLoop
    km: Any
    kc: Any
    log_file: Any
    tmp: str
    pgid: int | None
    kernel_pid: int | None
    bounds: RunBounds | None

    def bounds_for(self, asked: RunBounds | None, tmp: str) -> RunBounds | None:
        """The slot's bounds (its cgroup, and the limits its kernel was started with: the ones
        the run asks, by the pool's key) measuring the run's folders from now on."""
        if self.bounds is None:
            return asked
        self.bounds.paths = [*(asked.paths if asked is not None else []), tmp]
        self.bounds.baseline = folder_bytes(self.bounds.paths)
        return self.bounds


def _say(what: str) -> None:
    sys.stdout.write(PREFIX + what + "\n")
    sys.stdout.flush()


def _read_slot(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("python"), str) or not isinstance(doc.get("cwd"), str):
        raise ValueError(f"{path}: must hold a JSON object with python and cwd")
    return doc


async def _start(execution: _Execution, loop: asyncio.AbstractEventLoop) -> Prestarted:
    """The kernel started as ``_Execution.run`` starts it; raises with the log's reason."""
    from jupyter_client.kernelspec import KernelSpecManager  # optional: missing -> the slot fails
    from jupyter_client.manager import AsyncKernelManager  # optional: missing -> the slot fails

    tmp = execution.temp_dir = hygiene.make_temp_dir(execution.run_id)
    km = await execution._kernel_manager(KernelSpecManager, AsyncKernelManager, tmp)
    log_file = open(os.path.join(tmp, "kernel.log"), "wb")
    try:
        kc = await execution._start_kernel(km, log_file, DEFAULT_STARTUP_TIMEOUT)
    except BaseException:
        await _stop(execution, km, None, log_file)
        raise
    return Prestarted(loop=loop, km=km, kc=kc, log_file=log_file, tmp=tmp, pgid=execution._pgid,
                      kernel_pid=execution._kernel_pid, bounds=execution.bounds)


async def _stop(execution: _Execution, km: Any, kc: Any, log_file: Any) -> None:
    """The slot's kernel, and all it started, gone with its folders."""
    await execution._shutdown(km, kc, graceful=False)
    log_file.close()
    await asyncio.to_thread(hygiene.kill_all, execution.run_id, descendants_of=os.getpid())
    if execution.bounds is not None:
        await asyncio.to_thread(execution.bounds.release)
    if execution.temp_dir:
        shutil.rmtree(execution.temp_dir, ignore_errors=True)


async def _wait_for_go(pre: Prestarted) -> dict[str, Any] | None:
    """The run's line on stdin; None on EOF, SIGTERM or the kernel's death."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    ended: asyncio.Future[None] = loop.create_future()

    def end() -> None:
        if not ended.done():
            ended.set_result(None)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, end)
    pidfd = None
    if pre.kernel_pid and hasattr(os, "pidfd_open"):
        with contextlib.suppress(OSError):
            pidfd = os.pidfd_open(pre.kernel_pid)
            loop.add_reader(pidfd, end)  # the kernel exited
    line_task: asyncio.Future[Any] = loop.create_task(reader.readline())
    try:
        await asyncio.wait([line_task, ended], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(signum)
        if pidfd is not None:
            loop.remove_reader(pidfd)
            os.close(pidfd)
    if ended.done() or not line_task.done():
        line_task.cancel()
        return None
    try:
        go = json.loads(line_task.result() or b"null")
    except ValueError:
        return None
    if not (isinstance(go, dict) and isinstance(go.get("argv"), list) and isinstance(go.get("cwd"), str)
            and isinstance(go.get("log"), str)):
        return None
    return go


async def _bind(pre: Prestarted, cwd: str) -> bool:
    """The kernel in the run's working folder (see the module), before any cell: True when it says so."""
    if not await maybe_await(pre.km.is_alive()):
        return False
    msg_id = pre.kc.execute("", silent=True, store_history=False, user_expressions={"cwd": BIND.format(cwd=cwd)})
    reply = await wait_within(shell_reply(pre.kc, msg_id), BIND_TIMEOUT)
    try:
        value = reply["content"]["user_expressions"]["cwd"]["data"]["text/plain"]
        return bool(ast.literal_eval(value) == cwd)
    except Exception:
        return False


def _to_log(path: str) -> None:
    """stdout and stderr into the run's log (the pool reads nothing more of this process)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m jupyter_nbvalidation.runner --pool-slot SLOT.json\n")
        return 2
    try:
        slot = _read_slot(argv[0])
    except (OSError, ValueError) as e:
        _say(f"{FAILED} {e}")
        return 2
    reaper = hygiene.set_child_subreaper()
    import nbformat  # deferred: the runner's start-up time (its other modes do not need it here)

    empty = nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
    execution = _Execution(
        empty, python=str(slot["python"]), cwd=str(slot["cwd"]), options=RunnerOptions(),
        deadline=None, run_timeout=None, allow_errors=False, on_progress=None,
        run_id=os.environ.get(RUN_ID_VAR) or uuid.uuid4().hex, kernel_env=slot.get("kernelEnv") or {},
        reap_descendants=reaper, sandbox=slot.get("sandbox"), bounds=slot.get("bounds"))
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        pre = loop.run_until_complete(_start(execution, loop))
    except Exception as e:
        log = read_log(os.path.join(execution.temp_dir or "", "kernel.log")) if execution.temp_dir else ""
        _say(f"{FAILED} {execution._start_failure_message(e, os.path.join(execution.temp_dir or '', 'kernel.log'))}")
        if log.strip():
            sys.stderr.write(log[-4000:])
        return EXIT_NOT_USED
    _say(READY)
    go = loop.run_until_complete(_wait_for_go(pre))
    if go is None or not loop.run_until_complete(_bind(pre, str(go["cwd"]))):
        loop.run_until_complete(_stop(execution, pre.km, pre.kc, pre.log_file))
        if go is not None:
            _say(f"{FAILED} the kernel could not be bound to {go['cwd']}")
        return 0 if go is None else EXIT_NOT_USED
    _say(BOUND)
    _to_log(str(go["log"]))
    try:
        return cli.main([str(a) for a in go["argv"]], pooled=pre)
    finally:
        if os.path.isdir(pre.tmp):  # the run never took the kernel (its arguments were refused): stopped here
            loop.run_until_complete(_stop(execution, pre.km, pre.kc, pre.log_file))
