"""Kernel execution: one fresh kernel, one pass over the cells (today's nbclient).

The kernel is ``PYTHON -m ipykernel_launcher -f {connection_file}`` from a private
kernelspec directory in the runner's temporary folder (nothing is installed
anywhere); its environment is built from an allow-list (:mod:`.environment`);
everything it starts is stopped at the end (:mod:`.hygiene`).
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import shutil
import signal
import time
from queue import Empty
from typing import Any, Callable, Mapping

import jupyter_nbvalidation.runner.hygiene as hygiene
import jupyter_nbvalidation.runner.sandbox as _sandbox
from jupyter_nbvalidation.core.priority import deprioritize, own_niceness
from jupyter_nbvalidation.core.tasks import wait_within
from jupyter_nbvalidation.core.vocabulary import ResultReason
from jupyter_nbvalidation.runner.environment import kernel_environment
from jupyter_nbvalidation.runner.outputs import OutputBudget
from jupyter_nbvalidation.runner.protocol import (
    PROGRESS_END,
    PROGRESS_PLAN,
    PROGRESS_START,
    STATUS_FAILURE,
    STATUS_SKIPPED,
    STATUS_SUCCESS,
    progress_time,
)
from jupyter_nbvalidation.runner.text import (
    cell_label,
    fmt_limit,
    format_seconds,
    strip_ansi,
    truncate,
    truncate_tail,
)
from jupyter_nbvalidation.verdict.markers import cell_markers, cell_source

DEFAULT_CELL_TIMEOUT = 600.0
DEFAULT_STARTUP_TIMEOUT = 120.0
OUTPUT_LIMIT = 4000  # traceback text per cell result
MESSAGE_LIMIT = 1000  # the error message in the job's message (the result entry keeps up to OUTPUT_LIMIT)
FRAME_LIMIT = 2000  # one traceback frame in a result's "traceback" list
TRACEBACK_LIMIT = 12000  # all of a result's "traceback" frames together
INTERRUPT_GRACE = 2.0  # after a timeout: how long to wait for the interrupted cell's traceback
# a graceful stop: how long the kernel may take to end what it started (ipykernel terminates its
# children, then says so on IOPub), then how long its process may take to exit once it has said so
SHUTDOWN_ACTIONS_LIMIT = 5.0
KERNEL_EXIT_GRACE = 0.5
KERNEL_NAME = "nbvalidation-python"
VALIDATE_CELL_NOTE = "a validate cell (%nbvalidate / %load_ext jupyter_nbvalidation): not run inside a validation"

# a line that validates the notebook from inside it: the kernel of a validation has
# no jupyter_nbvalidation (nor a server to ask), so such lines are no-ops there
_VALIDATE_LINE = re.compile(
    r"^(?P<indent>\s*)(?:%(?:load_ext|reload_ext)\s+jupyter_nbvalidation\b.*|%nbvalidate(?:\s.*)?)$")


def without_validate_lines(source: str) -> str | None:
    """``source`` with its validate lines replaced by ``pass`` (same indentation,
    same line numbers), or None when it has none."""
    lines = source.split("\n")
    changed = False
    for i, line in enumerate(lines):
        m = _VALIDATE_LINE.match(line)
        if m:
            lines[i] = m.group("indent") + "pass"
            changed = True
    return "\n".join(lines) if changed else None


# the frame of a notebook cell in IPython's traceback ("Cell In[3], line 2"; older IPythons:
# "Input In [3], in <cell line: 2>()", "<ipython-input-3-...>")
_CELL_FRAME = re.compile(r"^(?:Cell In\s*\[\d*\]|Input In \[\d*\]|<ipython-input-\d+-)")
_ARROW_LINE = re.compile(r"^-*>\s*(\d+)\s?(.*)$")


def traceback_details(frames: list[str]) -> dict[str, Any]:
    """A traceback (IPython's list of frame texts) with the notebook's own frames
    identified, so a reader can show them first and fold the library frames:

    * ``traceback``: the frames, ANSI stripped (each, and all together, bounded);
    * ``cellFrames``: indexes in ``traceback`` of the frames of the notebook's cells;
    * ``errorLine`` / ``errorLineNumber``: the line of the user's code that was
      running (the ``---->`` line of the last cell frame) and its line number in its cell.
    """
    tb = [strip_ansi(str(f)).rstrip() for f in frames]
    cell = [i for i, f in enumerate(tb) if _CELL_FRAME.match(f.lstrip())]
    bounded = [truncate(f, FRAME_LIMIT) if i in cell else truncate_tail(f, FRAME_LIMIT // 2) for i, f in enumerate(tb)]
    # over the total: library frames in the middle give way first (never the cell frames, the first and the last)
    total = sum(len(f) for f in bounded)
    for i in range(1, len(bounded) - 1):
        if total <= TRACEBACK_LIMIT:
            break
        if i not in cell:
            total -= len(bounded[i]) - 40
            bounded[i] = truncate(bounded[i], 40)
    details: dict[str, Any] = {"traceback": bounded, "cellFrames": cell}
    if cell:
        for line in tb[cell[-1]].splitlines():
            m = _ARROW_LINE.match(line.strip())
            if m:
                details["errorLine"] = truncate(m.group(2).strip(), 500)
                details["errorLineNumber"] = int(m.group(1))
    return details


def _error_details(cell: Mapping[str, Any], reply: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """ename / evalue / traceback of a failed cell: its first error output, else the reply.
    The whole message (all its lines) is kept, and the traceback with the cell's own frames marked."""
    source: Mapping[str, Any] | None = None
    for out in cell.get("outputs") or []:
        if out.get("output_type") == "error":
            source = out
            name = str(out.get("ename", ""))
            break
    else:
        content = (reply or {}).get("content") or {}
        if content.get("status") not in ("error", "aborted"):
            return None
        source = content
        name = str(content.get("ename", "") or ("ExecutionAborted" if content.get("status") == "aborted" else ""))
    frames = [str(f) for f in source.get("traceback") or []]
    return {
        "errorName": name,
        "errorMessage": truncate(strip_ansi(str(source.get("evalue", ""))), OUTPUT_LIMIT),
        "output": truncate_tail(strip_ansi("\n".join(frames)), OUTPUT_LIMIT),
        **traceback_details(frames),
    }


def error_summary(name: str, message: str) -> str:
    """``Name: the whole message`` (every non-empty line, in order; bounded) for a job's message."""
    lines = [ln.rstrip() for ln in message.strip().splitlines() if ln.strip()]
    text = "\n".join(lines)
    return f"{name or 'an error'}: {truncate(text, MESSAGE_LIMIT)}" if text else (name or "an error")


def _partial_output(cell: Mapping[str, Any]) -> str:
    """The text a cell printed so far (for timeouts and kernel deaths)."""
    pieces = []
    for out in cell.get("outputs") or []:
        kind = out.get("output_type")
        if kind == "stream":
            pieces.append(cell_source({"source": out.get("text", "")}))
        elif kind == "error":
            pieces.append("\n".join(out.get("traceback") or []))
        elif kind in ("execute_result", "display_data"):
            text = (out.get("data") or {}).get("text/plain")
            if text:
                pieces.append(cell_source({"source": text}))
    return truncate_tail(strip_ansi("".join(p if p.endswith("\n") else p + "\n" for p in pieces)), OUTPUT_LIMIT)


def _kill_process_group(pgid: int | None) -> None:
    if not pgid or not hasattr(os, "killpg") or pgid == os.getpgid(0):
        return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


async def stop_kernel(km: Any, kc: Any) -> None:
    """Stop a kernel that finished its cells: ask it to shut down, wait until it has ended
    what it started (ipykernel terminates its child processes, then broadcasts its
    ``shutdown_reply`` on IOPub; an older kernel that never says so is waited for up to
    SHUTDOWN_ACTIONS_LIMIT, or until it exits), then give its process KERNEL_EXIT_GRACE to
    exit before it is terminated (SIGTERM), and as long again before it is killed.

    Not ``shutdown_kernel()``, which terminates a kernel only half of ``shutdown_wait_time``
    (5 s) after the request: ipykernel 7 sometimes hangs once it has replied (its control
    thread waits out a 10 s flush of an IOPub thread that has already stopped), which cost a
    validation 2.5 s to 3.5 s in about one run in seven behind the sandbox. Nothing the kernel
    does after its reply is part of the verdict: the cells have run and their outputs are in."""
    await _maybe_await(km.request_shutdown())
    if kc is not None:
        await _kernel_said_it_shut_down(km, kc, SHUTDOWN_ACTIONS_LIMIT)
    await _maybe_await(km.finish_shutdown(waittime=2 * KERNEL_EXIT_GRACE))


async def _kernel_said_it_shut_down(km: Any, kc: Any, limit: float) -> None:
    """Until the kernel's ``shutdown_reply`` on IOPub, its process gone, or ``limit`` s."""

    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while (left := deadline - loop.time()) > 0:
        try:
            msg = await _maybe_await(kc.iopub_channel.get_msg(timeout=min(left, 0.1)))
        except Empty:
            if not await _maybe_await(km.is_alive()):
                return
            continue
        except Exception:  # the channel closed under us: the process decides
            return
        if (msg.get("header") or {}).get("msg_type") == "shutdown_reply":
            return


async def _maybe_await(value: Any) -> Any:
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        return await value
    return value


class _Stop(Exception):
    """Internal: stop executing further cells."""


class _Execution:
    """One kernel, one pass over the cells. Fills ``results`` and the failure fields."""

    def __init__(
        self,
        nb: Any,
        *,
        python: str,
        cwd: str,
        cell_timeout: float | None,
        deadline: float | None,
        run_timeout: float | None,
        allow_errors: bool,
        on_progress: Callable[[dict[str, Any]], None] | None,
        run_id: str,
        kernel_env: Mapping[str, str] | None = None,
        reap_descendants: bool = False,
        injected: tuple[int, Any] | None = None,
        not_run: Mapping[int, str] | None = None,
        output_budget: OutputBudget | None = None,
        sandbox: Mapping[str, Any] | None = None,
    ) -> None:
        self.nb = nb
        self.sandbox = dict(sandbox) if sandbox is not None else None
        self.output_budget = output_budget or OutputBudget()
        # (index, cell): a cell that is not the notebook's own (the job's parameters,
        # runner/parameters.py), run before cell ``index`` of the notebook (after the last
        # when index == len(cells)); cell indexes everywhere stay the notebook's
        self.injected = injected
        self.not_run = dict(not_run or {})  # index -> why it is not run (skipReason)
        self.python = python
        self.cwd = cwd
        self.cell_timeout = cell_timeout
        self.deadline = deadline
        self.run_timeout = run_timeout
        self.allow_errors = allow_errors
        self.on_progress = on_progress
        self.run_id = run_id
        self.extra_env = dict(kernel_env or {})
        self.reap_descendants = reap_descendants
        self.validate_cells: set[int] = set()  # cells holding %nbvalidate / %load_ext jupyter_nbvalidation
        self.leftovers = 0  # processes still running after the kernel's shutdown, killed
        # every cell has an entry (the indexes are the notebook's); a markdown or raw cell
        # says so ("cellType"), so that it is never counted as a skipped code cell
        self.results: list[dict[str, Any]] = [
            {"cellIndex": i, "status": STATUS_SKIPPED,
             **({} if c.cell_type == "code" else {"cellType": str(c.cell_type)})} for i, c in enumerate(nb.cells)
        ]
        self.executed: set[int] = set()
        self.code_cells_run = 0
        self.allowed_errors = 0
        self.reason: str | None = None
        self.failed_index: int | None = None
        self.message: str | None = None
        self.kernel_python: str | None = None
        self.kernel_log = ""
        self.stop_signal: int | None = None
        self._current_index: int | None = None
        self._current_timeout: float | None = None
        self._last_reply: dict[str, Any] | None = None
        self._main_task: asyncio.Task[Any] | None = None
        self._pgid: int | None = None

    # the outcome ------------------------------------------------------------

    def _fail(self, reason: str, index: int | None, message: str) -> None:
        if self.reason is None:
            self.reason, self.failed_index, self.message = reason, index, message

    def _remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def _timeout_for_cell(self, cell: Any) -> float | None:  # nbclient's timeout_func
        return self._current_timeout

    async def _on_cell_executed(self, cell: Any, cell_index: int, execute_reply: dict[str, Any]) -> None:
        self._last_reply = execute_reply

    def _progress(self, entry: Mapping[str, Any]) -> None:
        """A cell ended (``end`` record)."""
        event = {"event": PROGRESS_END, "cellIndex": entry["cellIndex"], "status": entry["status"]}
        if "executionTime" in entry:
            event["executionTime"] = entry["executionTime"]
        self._emit_progress(event)

    def _emit_progress(self, event: dict[str, Any]) -> None:
        if self.on_progress is None:
            return
        try:
            self.on_progress(event)
        except Exception:  # a broken progress sink must not break the run
            pass

    def _stopped_by_signal(self) -> None:
        assert self.stop_signal is not None
        name = signal.Signals(self.stop_signal).name
        index = self._current_index
        where = f" in {cell_label(index)}" if index is not None else ""
        self._fail(ResultReason.RUNNER_ERROR, index, f"The runner was stopped by {name}{where}; the kernel was shut down")
        if index is not None:
            self.results[index].update(status=STATUS_FAILURE, errorName=name, errorMessage=f"the runner was stopped by {name}")
            self.results[index]["output"] = _partial_output(self.nb.cells[index])

    def _on_signal(self, signum: int) -> None:
        if self.stop_signal is None:
            self.stop_signal = signum
            if self._main_task is not None:
                self._main_task.cancel()

    # the run ----------------------------------------------------------------

    async def run(self) -> None:
        self._main_task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        installed = []
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(signum, self._on_signal, signum)
                installed.append(signum)
            except (RuntimeError, NotImplementedError, ValueError):
                pass  # not the main thread, or no signals on this platform
        tmp = hygiene.make_temp_dir(self.run_id)
        km = kc = None
        log_file = None
        try:
            try:
                from jupyter_client.kernelspec import KernelSpecManager  # optional: missing -> RunnerError
                from jupyter_client.manager import AsyncKernelManager  # optional: missing -> RunnerError
                from nbclient import NotebookClient  # optional: a runner without it reports RunnerError
                from nbclient.exceptions import CellTimeoutError, DeadKernelError  # optional: missing -> RunnerError
            except ImportError as e:
                self._fail(ResultReason.RUNNER_ERROR, None, f"The runner cannot import its dependencies: {e}")
                return

            spec_dir = os.path.join(tmp, "kernels", KERNEL_NAME)
            os.makedirs(spec_dir)
            argv = [self.python, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
            if self.sandbox is not None:  # the kernel's view of the machine (runner/sandbox.py)
                argv = await asyncio.to_thread(self._sandboxed, argv, tmp)
            with open(os.path.join(spec_dir, "kernel.json"), "w", encoding="utf-8") as f:
                json.dump(
                    {
                        "argv": argv,
                        "display_name": f"Python ({self.python})",
                        "language": "python",
                    },
                    f,
                )
            ksm = KernelSpecManager(kernel_dirs=[os.path.join(tmp, "kernels")])
            km_kwargs: dict[str, Any] = {
                "kernel_name": KERNEL_NAME,
                "kernel_spec_manager": ksm,
                "connection_file": os.path.join(tmp, "connection.json"),
            }
            if os.name == "posix":  # faster than TCP, nothing listens on the network
                km_kwargs.update(transport="ipc", ip=os.path.join(tmp, "ipc"))
            km = AsyncKernelManager(**km_kwargs)

            remaining = self._remaining()
            startup_timeout = DEFAULT_STARTUP_TIMEOUT if remaining is None else max(1.0, min(DEFAULT_STARTUP_TIMEOUT, remaining))
            client = NotebookClient(
                self.nb,
                km=km,
                kernel_name=KERNEL_NAME,
                timeout=None,
                timeout_func=self._timeout_for_cell,
                startup_timeout=int(startup_timeout + 0.999),
                allow_errors=True,  # we judge errors ourselves, from outputs and replies
                interrupt_on_timeout=False,
                record_timing=True,
                extra_arguments=["--HistoryManager.hist_file=:memory:"],
                on_cell_executed=self._on_cell_executed,
            )
            self.output_budget.watch(client)

            # -- start the kernel
            log_path = os.path.join(tmp, "kernel.log")
            log_file = open(log_path, "wb")
            try:
                await client.async_start_new_kernel(
                    cwd=self.cwd, env=kernel_environment(self.python, os.path.join(tmp, "kernel"), self.run_id,
                                                         extra=self.extra_env),
                    stdout=log_file, stderr=log_file
                )
                provisioner = getattr(km, "provisioner", None)
                self._pgid = getattr(provisioner, "pgid", None)
                # the kernel is a new session (its own scheduling autogroup):
                # give it this runner's lowered priority too
                kernel_pid = getattr(provisioner, "pid", None)
                if kernel_pid:
                    deprioritize(kernel_pid, own_niceness())
                await client.async_start_new_kernel_client()
                kc = client.kc
                await self._kernel_info(client, kc)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                remaining = self._remaining()
                if self.stop_signal is not None:
                    self._stopped_by_signal()
                elif remaining is not None and remaining <= 0:
                    self._fail(
                        ResultReason.VALIDATION_TIMED_OUT,
                        None,
                        f"The validation did not finish within {fmt_limit(self.run_timeout or 0)}: the kernel was still starting",
                    )
                else:
                    self._fail(ResultReason.KERNEL_START_FAILED, None, self._start_failure_message(e, log_path))
                return

            # -- the cells
            try:
                await self._run_cells(client, CellTimeoutError, DeadKernelError)
            except _Stop:
                pass
        except asyncio.CancelledError:
            if self.stop_signal is None:
                raise
            self._stopped_by_signal()
        finally:
            await self._shutdown(km, kc, graceful=self.reason is None or self.reason == ResultReason.CELL_EXECUTION_FAILED)
            if log_file is not None:
                log_file.close()
                self.kernel_log = self._read_log(os.path.join(tmp, "kernel.log"))
            for signum in installed:
                try:
                    loop.remove_signal_handler(signum)
                except Exception:
                    pass
            # whatever the kernel started and left running (setsid, double forks)
            self.leftovers = await asyncio.to_thread(
                hygiene.kill_all, self.run_id, descendants_of=os.getpid() if self.reap_descendants else None)
            shutil.rmtree(tmp, ignore_errors=True)

    def _sandboxed(self, argv: list[str], tmp: str) -> list[str]:
        """``argv`` wrapped by the sandbox's launcher, its mounts in ``tmp/sandbox.json``
        (blocks: walks the working copy for the targets of its links)."""
        config = self.sandbox or {}
        mounts = _sandbox.kernel_mounts(
            hide=[str(p) for p in config.get("hide") or []],
            show=[*(str(p) for p in config.get("show") or []), self.cwd],
            python=self.python, links=[str(p) for p in config.get("links") or [self.cwd]], temp_dir=tmp,
            scratch={str(k): str(v) for k, v in (config.get("scratch") or {}).items()})
        path = os.path.join(tmp, "sandbox.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"mounts": mounts}, f)
        return _sandbox.wrap(argv, path)

    @staticmethod
    def _read_log(path: str) -> str:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return ""
        return data.decode("utf-8", "replace")

    def _start_failure_message(self, error: BaseException, log_path: str) -> str:
        if isinstance(error, FileNotFoundError) or not os.path.exists(self.python):
            return f"The kernel could not be started: the interpreter {self.python} does not exist"
        if isinstance(error, PermissionError):
            return f"The kernel could not be started: the interpreter {self.python} is not executable"
        log = self._read_log(log_path)
        if "No module named ipykernel" in log:
            return (
                f"The kernel could not be started: ipykernel is not installed for {self.python} "
                "(No module named ipykernel_launcher)"
            )
        lines = [strip_ansi(line).strip() for line in log.splitlines() if line.strip()]
        detail = lines[-1] if lines else (str(error) or type(error).__name__)
        return f"The kernel could not be started with {self.python}: {detail}"

    async def _kernel_info(self, client: Any, kc: Any) -> None:
        """language_info into the notebook (as nbclient does) and the kernel's interpreter."""
        msg_id = kc.kernel_info()
        reply = await wait_within(self._reply(kc, msg_id), 60)
        info = (reply or {}).get("content", {}).get("language_info")
        if info:
            self.nb.metadata["language_info"] = info
        msg_id = kc.execute(
            "",
            silent=True,
            store_history=False,
            user_expressions={"python": "__import__('sys').executable"},
        )
        reply = await wait_within(self._reply(kc, msg_id), 60)
        try:
            value = reply["content"]["user_expressions"]["python"]["data"]["text/plain"]
            self.kernel_python = str(ast.literal_eval(value))
        except Exception:
            self.kernel_python = None

    @staticmethod
    async def _reply(kc: Any, msg_id: str) -> dict[str, Any]:

        while True:
            try:
                msg = await kc.shell_channel.get_msg(timeout=1)
            except Empty:
                if not await _maybe_await(kc.is_alive()):
                    raise RuntimeError("the kernel died before it answered") from None
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                found: dict[str, Any] = msg
                return found

    @staticmethod
    def _will_run(cell: Any) -> bool:
        """Whether ``_run_cells`` executes this cell (a code cell, not skipped,
        not empty, not only a validate line)."""
        if cell.cell_type != "code" or cell_markers(cell).skip or not cell_source(cell).strip():
            return False
        runnable = without_validate_lines(cell_source(cell))
        return runnable is None or not (not runnable.strip() or all(
            not line.strip() or line.strip().startswith("#") or line.strip() == "pass"
            for line in runnable.splitlines()))

    async def _run_cells(self, client: Any, CellTimeoutError: type[BaseException], DeadKernelError: type[BaseException]) -> None:
        self._emit_progress({"event": PROGRESS_PLAN, "cellsTotal": sum(1 for i, c in enumerate(self.nb.cells)
                                                                           if i not in self.not_run and self._will_run(c))})
        for index, cell in enumerate(self.nb.cells):
            if self.injected is not None and self.injected[0] == index:
                await self._run_injected(client, CellTimeoutError, DeadKernelError)
            if index in self.not_run:
                self.results[index]["skipReason"] = self.not_run[index]
                continue
            if cell.cell_type != "code":
                continue
            if cell_markers(cell).skip or not cell_source(cell).strip():
                continue
            original = cell_source(cell)
            runnable = without_validate_lines(original)
            if runnable is not None:  # a saved validate cell: a no-op inside a validation
                self.validate_cells.add(index)
                if not runnable.strip() or all(
                        not line.strip() or line.strip().startswith("#") or line.strip() == "pass"
                        for line in runnable.splitlines()):
                    self.results[index]["skipReason"] = VALIDATE_CELL_NOTE
                    continue
                cell.source = runnable
                try:
                    await self._run_cell(client, index, cell, CellTimeoutError, DeadKernelError)
                finally:
                    cell.source = original
                continue
            await self._run_cell(client, index, cell, CellTimeoutError, DeadKernelError)
        if self.injected is not None and self.injected[0] >= len(self.nb.cells):
            await self._run_injected(client, CellTimeoutError, DeadKernelError)

    async def _run_injected(self, client: Any, CellTimeoutError: type[BaseException],
                            DeadKernelError: type[BaseException]) -> None:
        """Run the injected parameters cell: not one of the notebook's cells, so it
        reports no progress and takes no execution count (the notebook's own
        cells keep theirs, as in a golden copy made without parameters)."""
        assert self.injected is not None
        position, cell = self.injected
        remaining = self._remaining()
        if remaining is not None and remaining <= 0:
            self._fail(ResultReason.VALIDATION_TIMED_OUT, None,
                       f"The validation did not finish within {fmt_limit(self.run_timeout or 0)}; "
                       "the injected parameters cell was not started")
            raise _Stop
        limit = self.cell_timeout
        if remaining is not None and (limit is None or remaining < limit):
            limit = max(remaining, 0.001)
        self._current_timeout = limit
        self._last_reply = None
        # nbclient stores the cell it ran at its index: in the notebook while it runs, taken out after
        self.nb.cells.insert(position, cell)
        try:
            await client.async_execute_cell(cell, position, execution_count=None, store_history=False)
        except CellTimeoutError:
            self._fail(ResultReason.CELL_TIMED_OUT, None,
                       f"The injected parameters cell did not finish within {fmt_limit(limit or 0)}")
            raise _Stop from None
        except DeadKernelError:
            if self.stop_signal is not None:
                raise asyncio.CancelledError from None
            self._fail(ResultReason.KERNEL_DIED, None, "The kernel died while executing the injected parameters cell")
            raise _Stop from None
        finally:
            self.nb.cells[:] = [c for c in self.nb.cells if c is not cell]
            client.code_cells_executed -= 1  # the next cell keeps the count it has without parameters
            cell.execution_count = None
        error = _error_details(cell, self._last_reply)
        if error is not None:
            self._fail(ResultReason.CELL_EXECUTION_FAILED, None,
                       f"The injected parameters cell raised {error['errorName'] or 'an error'}: "
                       f"{truncate(error['errorMessage'], 300)}")
            raise _Stop

    async def _run_cell(self, client: Any, index: int, cell: Any, CellTimeoutError: type[BaseException], DeadKernelError: type[BaseException]) -> None:
        markers = cell_markers(cell)
        remaining = self._remaining()
        if remaining is not None and remaining <= 0:
            self._fail(
                ResultReason.VALIDATION_TIMED_OUT,
                index,
                f"The validation did not finish within {fmt_limit(self.run_timeout or 0)}; {cell_label(index)} was not started",
            )
            raise _Stop
        limit = self.cell_timeout
        bound_by_deadline = False
        if remaining is not None and (limit is None or remaining < limit):
            limit, bound_by_deadline = max(remaining, 0.001), True
        self._current_timeout = limit
        self._current_index = index
        self._last_reply = None
        self.executed.add(index)
        entry = self.results[index]
        self._emit_progress({"event": PROGRESS_START, "cellIndex": index, "time": progress_time()})
        started = time.monotonic()
        try:
            await self._execute_bounded(client, index, cell, entry)
        except CellTimeoutError:
            elapsed = time.monotonic() - started
            cell.execution_count = client.code_cells_executed
            await self._collect_interrupt_traceback(client, cell)
            entry.update(status=STATUS_FAILURE, executionTime=format_seconds(elapsed))
            if bound_by_deadline:
                entry.update(
                    errorName=ResultReason.VALIDATION_TIMED_OUT,
                    errorMessage=f"the whole validation exceeded {fmt_limit(self.run_timeout or 0)}",
                )
                message = f"The validation did not finish within {fmt_limit(self.run_timeout or 0)}; stopped in {cell_label(index)}"
                reason = ResultReason.VALIDATION_TIMED_OUT
            else:
                assert limit is not None
                entry.update(errorName=ResultReason.CELL_TIMED_OUT, errorMessage=f"cell did not finish within {fmt_limit(limit)}")
                message = f"{cell_label(index).capitalize()} did not finish within {fmt_limit(limit)} (cell timeout)"
                reason = ResultReason.CELL_TIMED_OUT
            entry["output"] = _partial_output(cell)
            interrupted = next((o for o in cell.get("outputs") or [] if o.get("output_type") == "error"), None)
            if interrupted is not None:  # where it hung: the interrupt's traceback, the cell's frames marked
                entry.update(traceback_details([str(f) for f in interrupted.get("traceback") or []]))
            self._fail(reason, index, message)
            self._progress(entry)
            raise _Stop from None
        except DeadKernelError:
            if self.stop_signal is not None:  # nbclient turns our cancellation into DeadKernelError
                raise asyncio.CancelledError from None
            elapsed = time.monotonic() - started
            entry.update(
                status=STATUS_FAILURE,
                executionTime=format_seconds(elapsed),
                errorName="DeadKernelError",
                errorMessage="the kernel died while executing the cell",
                output=_partial_output(cell),
            )
            self._fail(ResultReason.KERNEL_DIED, index, f"The kernel died while executing {cell_label(index)}")
            self._progress(entry)
            raise _Stop from None
        elapsed = time.monotonic() - started
        self._current_index = None
        self.code_cells_run += 1
        entry.update(status=STATUS_SUCCESS, executionTime=format_seconds(elapsed))
        error = _error_details(cell, self._last_reply)
        if error is not None:
            entry.update(error)
            if markers.raises_exception or self.allow_errors:
                self.allowed_errors += 1
            if not markers.raises_exception:
                entry["status"] = STATUS_FAILURE
                if not self.allow_errors:
                    summary = error_summary(error["errorName"], error["errorMessage"])
                    self._fail(ResultReason.CELL_EXECUTION_FAILED, index, f"{cell_label(index).capitalize()} raised {summary}")
                    self._progress(entry)
                    raise _Stop
        self._progress(entry)

    async def _execute_bounded(self, client: Any, index: int, cell: Any, entry: dict[str, Any]) -> None:
        """Run the cell, then cut its outputs to the run's budget (runner/outputs.py),
        also when it failed or timed out (a partial output can be as large)."""
        self.output_budget.start(index)
        try:
            await client.async_execute_cell(cell, index, execution_count=client.code_cells_executed + 1)
        finally:
            info = self.output_budget.bound(index, cell)
            if info is not None:
                entry["outputTruncated"] = info

    async def _collect_interrupt_traceback(self, client: Any, cell: Any) -> None:
        """Interrupt the timed-out cell so that its traceback shows where it hung."""
        km = client.km
        if km is None:
            return
        try:
            await km.interrupt_kernel()
        except Exception:
            return
        waited = 0.0
        while waited < INTERRUPT_GRACE:
            if any(o.get("output_type") == "error" for o in cell.get("outputs") or []):
                return
            await asyncio.sleep(0.05)
            waited += 0.05

    async def _shutdown(self, km: Any, kc: Any, *, graceful: bool) -> None:
        current = asyncio.current_task()
        for task in asyncio.all_tasks():  # nbclient's pollers of an interrupted cell
            if task is not current:
                task.cancel()
        if km is not None:
            try:
                if km.has_kernel:
                    await wait_within(stop_kernel(km, kc) if graceful else km.shutdown_kernel(now=True), 15)
            except BaseException:
                try:
                    if km.has_kernel:
                        await km.shutdown_kernel(now=True)
                except BaseException:
                    pass
            try:
                if kc is not None:
                    await _maybe_await(kc.stop_channels())
            except Exception:
                pass
            try:
                await _maybe_await(km.cleanup_resources())
            except Exception:
                pass
        # the kernel ran in its own session: take down anything it left behind
        _kill_process_group(self._pgid)


