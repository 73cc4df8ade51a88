"""Execute a notebook top to bottom in a fresh kernel and judge the run.

This is the one module that runs notebooks, for every backend: the local backend
starts it as a subprocess of the Jupyter server, the Kubernetes backend runs it
inside the validation Pod. It needs only the standard library, ``nbformat``,
``nbclient`` and ``jupyter_client`` (plus :mod:`.compare` / :mod:`.markers`).

Command line::

    python -m jupyter_nbvalidation.runner NOTEBOOK --result RESULT.json --executed EXECUTED.ipynb
        [--python PYTHON] [--cwd DIR] [--golden GOLDEN.ipynb]
        [--comparison exact|normalized] [--abs-tol FLOAT] [--rel-tol FLOAT]
        [--cell-timeout SECONDS] [--timeout SECONDS]
        [--termination-log PATH] [--progress]

The last line on stdout is always ``NBVALIDATION-RESULT <result JSON>``. With
``--progress`` one ``NBVALIDATION-PROGRESS {...}`` line is printed per executed cell.
Exit status: 0 verdict Succeeded, 1 verdict Failed, 2 the runner could not run
(bad arguments, unreadable notebook, internal error).

Rules:

* the input notebook is never written; outputs and execution counts of code cells
  are cleared in a copy, which is executed and written to ``--executed`` (also on
  failure, with the outputs up to the failing cell);
* the kernel is ``PYTHON -m ipykernel_launcher -f {connection_file}`` from a private
  kernelspec directory in a temporary folder (nothing is installed anywhere), its
  working directory is ``--cwd`` (default: the notebook's folder);
* a cell fails when the reply status is ``error`` *or* the cell has an ``error``
  output (exceptions raised after execution, e.g. in display hooks, leave an error
  output with an ``ok`` reply);
* execution stops at the first failing cell unless the notebook's
  ``metadata.execution.allow_errors`` is true; cells tagged / commented as allowed to
  raise do not fail; skip markers are honoured (see :mod:`.markers`);
* ``metadata.execution.timeout`` overrides ``--cell-timeout``;
* the kernel and every process in its process group are gone when the runner exits.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import copy
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from . import compare as _compare
from .priority import deprioritize, own_niceness
from .markers import cell_markers, notebook_execution_settings
from .tasks import wait_within

RESULT_PREFIX = "NBVALIDATION-RESULT "
EXECUTED_PREFIX = "NBVALIDATION-EXECUTED "  # base64 of the gzipped executed notebook (--print-executed)
PROGRESS_PREFIX = "NBVALIDATION-PROGRESS "

SUCCEEDED = "Succeeded"
FAILED = "Failed"


class Reason:
    VALIDATION_SUCCEEDED = "ValidationSucceeded"
    CELL_EXECUTION_FAILED = "CellExecutionFailed"
    GOLDEN_MISMATCH = "GoldenMismatch"
    CELL_TIMED_OUT = "CellTimedOut"
    VALIDATION_TIMED_OUT = "ValidationTimedOut"
    KERNEL_DIED = "KernelDied"
    KERNEL_START_FAILED = "KernelStartFailed"
    INVALID_NOTEBOOK = "InvalidNotebook"
    # not a notebook outcome: bad arguments, an internal error, or the runner was
    # stopped by a signal. Always exit status 2.
    RUNNER_ERROR = "RunnerError"


# reasons for which the runner "could not run" (exit status 2)
RUNNER_FAILURE_REASONS = frozenset({Reason.INVALID_NOTEBOOK, Reason.RUNNER_ERROR})

STATUS_SUCCESS = "Success"
STATUS_FAILURE = "Failure"
STATUS_SKIPPED = "Skipped"

DEFAULT_CELL_TIMEOUT = 600.0
DEFAULT_STARTUP_TIMEOUT = 120.0
OUTPUT_LIMIT = 4000  # traceback text per cell result
STDOUT_RESULT_LIMIT = 1024 * 1024  # the NBVALIDATION-RESULT line
TERMINATION_LOG_LIMIT = 4096  # Kubernetes termination message
KERNEL_LOG_LIMIT = 20000  # kernel stdout/stderr copied to our stderr
INTERRUPT_GRACE = 2.0  # after a timeout: how long to wait for the interrupted cell's traceback
KERNEL_NAME = "nbvalidation-python"

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


# --- small helpers ------------------------------------------------------------


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def truncate_tail(text: str, limit: int) -> str:
    """Keep the end of ``text`` (the informative end of a traceback)."""
    if len(text) <= limit:
        return text
    if limit <= 0:
        return f"[{len(text)} characters truncated]"
    marker = f"[... {len(text) - limit} characters truncated ...]\n"
    keep = max(0, limit - len(marker))
    return marker + (text[-keep:] if keep else "")


def format_seconds(seconds: float) -> str:
    return f"{max(0.0, seconds):.3f}s"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _fmt_limit(seconds: float) -> str:
    return f"{seconds:g} s"


def _atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _source(cell: Mapping[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else (src or "")


def _error_details(cell: Mapping[str, Any], reply: Mapping[str, Any] | None) -> dict[str, str] | None:
    """ename / evalue / traceback of a failed cell: its first error output, else the reply."""
    for out in cell.get("outputs") or []:
        if out.get("output_type") == "error":
            return {
                "errorName": str(out.get("ename", "")),
                "errorMessage": _compare.truncate(strip_ansi(str(out.get("evalue", ""))), OUTPUT_LIMIT),
                "output": truncate_tail(strip_ansi("\n".join(out.get("traceback") or [])), OUTPUT_LIMIT),
            }
    content = (reply or {}).get("content") or {}
    if content.get("status") in ("error", "aborted"):
        return {
            "errorName": str(content.get("ename", "") or ("ExecutionAborted" if content.get("status") == "aborted" else "")),
            "errorMessage": _compare.truncate(strip_ansi(str(content.get("evalue", ""))), OUTPUT_LIMIT),
            "output": truncate_tail(strip_ansi("\n".join(content.get("traceback") or [])), OUTPUT_LIMIT),
        }
    return None


def _partial_output(cell: Mapping[str, Any]) -> str:
    """The text a cell printed so far (for timeouts and kernel deaths)."""
    pieces = []
    for out in cell.get("outputs") or []:
        kind = out.get("output_type")
        if kind == "stream":
            pieces.append(_source({"source": out.get("text", "")}))
        elif kind == "error":
            pieces.append("\n".join(out.get("traceback") or []))
        elif kind in ("execute_result", "display_data"):
            text = (out.get("data") or {}).get("text/plain")
            if text:
                pieces.append(_source({"source": text}))
    return truncate_tail(strip_ansi("".join(p if p.endswith("\n") else p + "\n" for p in pieces)), OUTPUT_LIMIT)


def _kernel_env(python: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONHOME", None)
    bindir = os.path.dirname(python)
    if bindir:
        env["PATH"] = bindir + (os.pathsep + env["PATH"] if env.get("PATH") else "")
        root = os.path.dirname(bindir)
        if os.path.isfile(os.path.join(root, "pyvenv.cfg")):
            env["VIRTUAL_ENV"] = root
    return env


def _resolve_python(python: str | None) -> str:
    if not python:
        return sys.executable
    if os.sep not in python and not os.path.exists(python):
        found = shutil.which(python)
        if found:
            return found
    # never realpath(): a venv's python is a symlink and must stay inside the venv
    return os.path.abspath(python)


def _kill_process_group(pgid: int | None) -> None:
    if not pgid or not hasattr(os, "killpg") or pgid == os.getpgid(0):
        return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


async def _maybe_await(value: Any) -> Any:
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        return await value
    return value


def _nbclient_version() -> str | None:
    try:
        import nbclient

        return str(nbclient.__version__)
    except Exception:  # pragma: no cover - nbclient missing is reported elsewhere
        return None


# --- the execution ------------------------------------------------------------


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
    ) -> None:
        self.nb = nb
        self.python = python
        self.cwd = cwd
        self.cell_timeout = cell_timeout
        self.deadline = deadline
        self.run_timeout = run_timeout
        self.allow_errors = allow_errors
        self.on_progress = on_progress
        self.results: list[dict[str, Any]] = [
            {"cellIndex": i, "status": STATUS_SKIPPED} for i in range(len(nb.cells))
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
        if self.on_progress is None:
            return
        event = {"cellIndex": entry["cellIndex"], "status": entry["status"]}
        if "executionTime" in entry:
            event["executionTime"] = entry["executionTime"]
        try:
            self.on_progress(event)
        except Exception:  # a broken progress sink must not break the run
            pass

    def _stopped_by_signal(self) -> None:
        assert self.stop_signal is not None
        name = signal.Signals(self.stop_signal).name
        index = self._current_index
        where = f" in cell {index}" if index is not None else ""
        self._fail(Reason.RUNNER_ERROR, index, f"The runner was stopped by {name}{where}; the kernel was shut down")
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
        tmp = tempfile.mkdtemp(prefix="nbvalidation-")
        km = kc = None
        log_file = None
        try:
            try:
                from jupyter_client.kernelspec import KernelSpecManager
                from jupyter_client.manager import AsyncKernelManager
                from nbclient import NotebookClient
                from nbclient.exceptions import CellTimeoutError, DeadKernelError
            except ImportError as e:
                self._fail(Reason.RUNNER_ERROR, None, f"The runner cannot import its dependencies: {e}")
                return

            spec_dir = os.path.join(tmp, "kernels", KERNEL_NAME)
            os.makedirs(spec_dir)
            with open(os.path.join(spec_dir, "kernel.json"), "w", encoding="utf-8") as f:
                json.dump(
                    {
                        "argv": [self.python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
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

            # -- start the kernel
            log_path = os.path.join(tmp, "kernel.log")
            log_file = open(log_path, "wb")
            try:
                await client.async_start_new_kernel(
                    cwd=self.cwd, env=_kernel_env(self.python), stdout=log_file, stderr=log_file
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
                        Reason.VALIDATION_TIMED_OUT,
                        None,
                        f"The validation did not finish within {_fmt_limit(self.run_timeout or 0)}: the kernel was still starting",
                    )
                else:
                    self._fail(Reason.KERNEL_START_FAILED, None, self._start_failure_message(e, log_path))
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
            await self._shutdown(km, kc, graceful=self.reason is None or self.reason == Reason.CELL_EXECUTION_FAILED)
            if log_file is not None:
                log_file.close()
                self.kernel_log = self._read_log(os.path.join(tmp, "kernel.log"))
            for signum in installed:
                try:
                    loop.remove_signal_handler(signum)
                except Exception:
                    pass
            shutil.rmtree(tmp, ignore_errors=True)

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
        from queue import Empty

        while True:
            try:
                msg = await kc.shell_channel.get_msg(timeout=1)
            except Empty:
                if not await _maybe_await(kc.is_alive()):
                    raise RuntimeError("the kernel died before it answered") from None
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                return msg

    async def _run_cells(self, client: Any, CellTimeoutError: type, DeadKernelError: type) -> None:
        for index, cell in enumerate(self.nb.cells):
            if cell.cell_type != "code":
                continue
            if cell_markers(cell).skip or not _source(cell).strip():
                continue
            await self._run_cell(client, index, cell, CellTimeoutError, DeadKernelError)

    async def _run_cell(self, client: Any, index: int, cell: Any, CellTimeoutError: type, DeadKernelError: type) -> None:
        markers = cell_markers(cell)
        remaining = self._remaining()
        if remaining is not None and remaining <= 0:
            self._fail(
                Reason.VALIDATION_TIMED_OUT,
                index,
                f"The validation did not finish within {_fmt_limit(self.run_timeout or 0)}; cell {index} was not started",
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
        started = time.monotonic()
        try:
            await client.async_execute_cell(cell, index, execution_count=client.code_cells_executed + 1)
        except CellTimeoutError:
            elapsed = time.monotonic() - started
            cell.execution_count = client.code_cells_executed
            await self._collect_interrupt_traceback(client, cell)
            entry.update(status=STATUS_FAILURE, executionTime=format_seconds(elapsed))
            if bound_by_deadline:
                entry.update(
                    errorName="ValidationTimedOut",
                    errorMessage=f"the whole validation exceeded {_fmt_limit(self.run_timeout or 0)}",
                )
                message = f"The validation did not finish within {_fmt_limit(self.run_timeout or 0)}; stopped in cell {index}"
                reason = Reason.VALIDATION_TIMED_OUT
            else:
                assert limit is not None
                entry.update(errorName="CellTimedOut", errorMessage=f"cell did not finish within {_fmt_limit(limit)}")
                message = f"Cell {index} did not finish within {_fmt_limit(limit)} (cell timeout)"
                reason = Reason.CELL_TIMED_OUT
            entry["output"] = _partial_output(cell)
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
            self._fail(Reason.KERNEL_DIED, index, f"The kernel died while executing cell {index}")
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
                    summary = error["errorName"] or "an error"
                    first_line = (error["errorMessage"].strip().splitlines() or [""])[0]
                    if first_line:
                        summary += f": {_compare.truncate(first_line, 300)}"
                    self._fail(Reason.CELL_EXECUTION_FAILED, index, f"Cell {index} raised {summary}")
                    self._progress(entry)
                    raise _Stop
        self._progress(entry)

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
                    await wait_within(km.shutdown_kernel(now=not graceful), 15)
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


# --- the public entry point ---------------------------------------------------------


def _base_result(executed: str | None) -> dict[str, Any]:
    return {
        "verdict": FAILED,
        "reason": None,
        "message": None,
        "failedCellIndex": None,
        "results": [],
        "comparisonResult": None,
        "executedNotebook": executed,
        "durationSeconds": 0.0,
        "runner": {"python": sys.executable, "kernelPython": None, "nbclient": _nbclient_version()},
    }


def error_result(reason: str, message: str, *, executed: str | None = None, duration: float = 0.0) -> dict[str, Any]:
    """A result document for a run that could not happen (bad input, bad arguments)."""
    result = _base_result(executed)
    result.update(reason=reason, message=message, durationSeconds=round(duration, 3))
    return result


def exit_code(result: Mapping[str, Any]) -> int:
    if result.get("verdict") == SUCCEEDED:
        return 0
    if result.get("reason") in RUNNER_FAILURE_REASONS:
        return 2
    return 1


def _read_notebook(path: str, what: str) -> tuple[Any, str | None]:
    import nbformat

    try:
        with open(path, encoding="utf-8") as f:
            nb = nbformat.read(f, as_version=4)
    except FileNotFoundError:
        return None, f"Cannot read the {what} {path}: no such file"
    except Exception as e:  # invalid JSON, not a notebook, unreadable...
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return None, f"Cannot read the {what} {path}: {detail}"
    if not isinstance(nb.get("cells"), list):
        return None, f"Cannot read the {what} {path}: it has no list of cells"
    return nb, None


def _clean_copy(nb: Any) -> Any:
    clean = copy.deepcopy(nb)
    for cell in clean.cells:
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
            if isinstance(cell.get("metadata"), dict):
                cell["metadata"].pop("execution", None)
    return clean


def _write_notebook(nb: Any, path: str) -> None:
    import nbformat

    _atomic_write_text(path, nbformat.writes(nb, version=4))


def run_notebook(
    notebook: str | os.PathLike[str],
    *,
    executed: str | os.PathLike[str] | None = None,
    result_path: str | os.PathLike[str] | None = None,
    python: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    golden: str | os.PathLike[str] | None = None,
    comparison: str = _compare.NORMALIZED,
    abs_tol: float = _compare.DEFAULT_ABS_TOL,
    rel_tol: float = _compare.DEFAULT_REL_TOL,
    compare_options: Mapping[str, Any] | None = None,
    cell_timeout: float | None = DEFAULT_CELL_TIMEOUT,
    timeout: float | None = None,
    termination_log: str | os.PathLike[str] | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Execute ``notebook`` in a fresh kernel, optionally compare with ``golden``.

    Blocks until done (it runs its own event loop: call it from a process or thread
    without a running loop). Writes the executed notebook to ``executed`` and the
    result document to ``result_path`` / ``termination_log`` when given, and returns
    the result document. ``cell_timeout`` / ``timeout`` of ``None`` or ``<= 0`` mean
    no limit. ``progress`` is called with ``{"cellIndex", "status", "executionTime"}``
    after every executed cell. ``compare_options`` are further keyword arguments of
    :func:`compare.compare_notebooks` (``ignore_timestamps``, ``timestamp_patterns``,
    ``ignore_output_types``, ``compare_execution_count``).
    """
    started = time.monotonic()
    notebook = os.path.abspath(os.fspath(notebook))
    executed_path = os.path.abspath(os.fspath(executed)) if executed is not None else None
    result = _base_result(executed_path)

    def finish(res: dict[str, Any]) -> dict[str, Any]:
        res["durationSeconds"] = round(time.monotonic() - started, 3)
        if result_path is not None:
            _atomic_write_text(result_path, json.dumps(res, indent=1, ensure_ascii=False) + "\n")
        if termination_log is not None:
            write_termination_log(termination_log, res)
        return res

    # -- arguments
    problems = []
    if comparison not in _compare.STRATEGIES:
        problems.append(f"comparison must be one of {', '.join(_compare.STRATEGIES)}")
    if abs_tol is None or abs_tol < 0 or rel_tol is None or rel_tol < 0:
        problems.append("tolerances must be non-negative numbers")
    if cwd is not None and not os.path.isdir(cwd):
        problems.append(f"the working directory {cwd} does not exist")
    if executed_path is not None and executed_path == notebook:
        problems.append("the executed notebook must not overwrite the input notebook")
    if problems:
        result.update(reason=Reason.RUNNER_ERROR, message="Invalid arguments: " + "; ".join(problems))
        result["executedNotebook"] = None
        return finish(result)

    # -- inputs
    nb, problem = _read_notebook(notebook, "notebook")
    golden_nb = None
    if problem is None and golden is not None:
        golden_nb, problem = _read_notebook(os.path.abspath(os.fspath(golden)), "golden notebook")
    if problem is not None:
        result.update(reason=Reason.INVALID_NOTEBOOK, message=problem, executedNotebook=None)
        return finish(result)

    settings = notebook_execution_settings(nb)
    if settings["timeout"] is not None:
        cell_timeout = settings["timeout"]
    effective_cell_timeout = float(cell_timeout) if cell_timeout and cell_timeout > 0 else None
    run_timeout = float(timeout) if timeout and timeout > 0 else None
    python_path = _resolve_python(python)
    workdir = os.path.abspath(os.fspath(cwd)) if cwd is not None else os.path.dirname(notebook)

    work_nb = _clean_copy(nb)
    execution = _Execution(
        work_nb,
        python=python_path,
        cwd=workdir,
        cell_timeout=effective_cell_timeout,
        deadline=None if run_timeout is None else started + run_timeout,
        run_timeout=run_timeout,
        allow_errors=settings["allow_errors"],
        on_progress=progress,
    )
    internal_error: BaseException | None = None
    try:
        asyncio.run(execution.run())
    except Exception as e:  # a bug in the runner or its dependencies
        internal_error = e
    if execution.kernel_log.strip():
        sys.stderr.write("--- kernel output ---\n" + execution.kernel_log[-KERNEL_LOG_LIMIT:])
        if not execution.kernel_log.endswith("\n"):
            sys.stderr.write("\n")
        sys.stderr.flush()

    result["results"] = execution.results
    result["runner"]["kernelPython"] = execution.kernel_python or python_path
    if internal_error is not None:
        execution._fail(
            Reason.RUNNER_ERROR,
            execution._current_index,
            f"The runner failed: {type(internal_error).__name__}: {internal_error}",
        )

    # -- the executed notebook (also on failure)
    if executed_path is not None:
        try:
            _write_notebook(work_nb, executed_path)
        except Exception as e:
            result["executedNotebook"] = None
            execution._fail(Reason.RUNNER_ERROR, None, f"Cannot write the executed notebook {executed_path}: {e}")

    # -- golden comparison
    if golden_nb is not None:
        not_run = [i for i in range(len(work_nb.cells)) if i not in execution.executed]
        try:
            result["comparisonResult"] = _compare.compare_notebooks(
                golden_nb, work_nb, strategy=comparison, abs_tol=abs_tol, rel_tol=rel_tol, skip_cells=not_run,
                **(compare_options or {}),
            )
        except Exception as e:
            execution._fail(Reason.RUNNER_ERROR, None, f"The golden comparison failed: {type(e).__name__}: {e}")

    # -- verdict
    comparison_result = result["comparisonResult"]
    if execution.reason is not None:
        result.update(reason=execution.reason, message=execution.message, failedCellIndex=execution.failed_index)
    elif comparison_result is not None and comparison_result["result"] != "matched":
        first = comparison_result["diffs"][0]["cellIndex"] if comparison_result["diffs"] else None
        compared = comparison_result["matchedCells"] + comparison_result["mismatchedCells"]
        result.update(
            reason=Reason.GOLDEN_MISMATCH,
            failedCellIndex=first,
            message=(
                f"{comparison_result['mismatchedCells']} of {compared} compared cells differ from the golden notebook"
                + (f" (first: cell {first})" if first is not None else "")
            ),
        )
    else:
        message = f"{_plural(execution.code_cells_run, 'code cell')} ran without errors"
        if execution.allowed_errors:
            message = (
                f"{_plural(execution.code_cells_run, 'code cell')} ran; "
                f"{execution.allowed_errors} raised an error that was allowed"
            )
        if comparison_result is not None:
            message += f"; {comparison_result['matchedCells']} of {comparison_result['totalCells']} code cells compared with the golden notebook match"
            if comparison_result["skippedCells"]:
                message += f" ({comparison_result['skippedCells']} not compared)"
        result.update(verdict=SUCCEEDED, reason=Reason.VALIDATION_SUCCEEDED, message=message)
    return finish(result)


# --- output channels for the backends ------------------------------------------


def termination_summary(result: Mapping[str, Any], limit: int = TERMINATION_LOG_LIMIT) -> str:
    """A compact JSON summary of ``result`` that fits in ``limit`` bytes (UTF-8)."""
    counts = {STATUS_SUCCESS: 0, STATUS_FAILURE: 0, STATUS_SKIPPED: 0}
    for entry in result.get("results") or []:
        counts[entry.get("status", STATUS_SKIPPED)] = counts.get(entry.get("status", STATUS_SKIPPED), 0) + 1
    summary: dict[str, Any] = {
        "verdict": result.get("verdict"),
        "reason": result.get("reason"),
        "message": result.get("message"),
        "failedCellIndex": result.get("failedCellIndex"),
        "durationSeconds": result.get("durationSeconds"),
        "cells": {
            "total": len(result.get("results") or []),
            "succeeded": counts[STATUS_SUCCESS],
            "failed": counts[STATUS_FAILURE],
            "skipped": counts[STATUS_SKIPPED],
        },
    }
    failed = result.get("failedCellIndex")
    if failed is not None:
        for entry in result.get("results") or []:
            if entry.get("cellIndex") == failed and entry.get("errorName"):
                summary["error"] = {"name": entry.get("errorName"), "message": entry.get("errorMessage", "")}
    comparison = result.get("comparisonResult")
    if comparison:
        summary["comparison"] = {
            k: comparison.get(k) for k in ("strategy", "result", "totalCells", "matchedCells", "mismatchedCells", "skippedCells")
        }
    summary["executedNotebook"] = result.get("executedNotebook")

    def encode(s: Mapping[str, Any]) -> bytes:
        return json.dumps(s, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    data = encode(summary)
    for text_limit in (1000, 300, 100, 0):
        if len(data) <= limit:
            break
        if isinstance(summary.get("message"), str):
            summary["message"] = _compare.truncate(result.get("message") or "", text_limit) if text_limit else ""
        if "error" in summary:
            summary["error"]["message"] = _compare.truncate(summary["error"]["message"], text_limit) if text_limit else ""
        if text_limit == 0:
            summary.pop("executedNotebook", None)
        data = encode(summary)
    if len(data) > limit:  # cannot happen with the fields above, but never exceed
        data = encode({k: summary.get(k) for k in ("verdict", "reason", "failedCellIndex")})
    return data.decode("utf-8")


def write_termination_log(path: str | os.PathLike[str], result: Mapping[str, Any]) -> None:
    try:
        _atomic_write_text(path, termination_summary(result))
    except OSError as e:  # e.g. /dev/termination-log missing outside Kubernetes
        sys.stderr.write(f"nbvalidation: cannot write the termination log {path}: {e}\n")


def result_line(result: Mapping[str, Any], limit: int = STDOUT_RESULT_LIMIT) -> str:
    """The result as one JSON line (ASCII) of at most ~``limit`` characters.

    When too long, the tracebacks and diff texts are cut, never the structure.
    """
    def encode(r: Mapping[str, Any]) -> str:
        return json.dumps(r, separators=(",", ":"), ensure_ascii=True)

    text = encode(result)
    for text_limit in (1000, 200, 0):
        if len(text) <= limit:
            return text
        shrunk = copy.deepcopy(dict(result))
        for entry in shrunk.get("results") or []:
            if "output" in entry:
                entry["output"] = truncate_tail(entry["output"], text_limit)
            if "errorMessage" in entry:
                entry["errorMessage"] = _compare.truncate(entry["errorMessage"], max(text_limit, 200))
        comparison = shrunk.get("comparisonResult")
        if comparison:
            for diff in comparison.get("diffs") or []:
                for key in ("expected", "actual", "diff"):
                    if key in diff:
                        diff[key] = _compare.truncate(diff[key], text_limit) if text_limit else ""
        if isinstance(shrunk.get("message"), str):
            shrunk["message"] = _compare.truncate(shrunk["message"], max(text_limit, 500))
        text = encode(shrunk)
    return text


# --- command line -------------------------------------------------------------------


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # raise instead of exiting, so RESULT.json still gets written
        raise _ArgumentError(message)


def _non_negative(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")) or number < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, not {value!r}")
    return number


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m jupyter_nbvalidation.runner",
        description="Execute a notebook top to bottom in a fresh kernel and judge the run.",
    )
    p.add_argument("notebook", help="the notebook to validate (never modified)")
    p.add_argument("--result", required=True, help="where to write the result JSON")
    p.add_argument("--executed", required=True, help="where to write the executed notebook")
    p.add_argument("--python", default=None, help="interpreter for the kernel (default: this one)")
    p.add_argument("--cwd", default=None, help="kernel working directory (default: the notebook's folder)")
    p.add_argument("--golden", default=None, help="golden notebook to compare outputs with (may be NOTEBOOK itself)")
    p.add_argument("--comparison", choices=_compare.STRATEGIES, default=_compare.NORMALIZED)
    p.add_argument("--abs-tol", type=_non_negative, default=_compare.DEFAULT_ABS_TOL)
    p.add_argument("--rel-tol", type=_non_negative, default=_compare.DEFAULT_REL_TOL)
    p.add_argument("--keep-timestamps", action="store_true",
                   help="normalized mode: compare dates and times too (comparisonConfig.ignoreTimestamps: false)")
    p.add_argument("--timestamp-pattern", action="append", default=[], metavar="REGEX",
                   help="normalized mode: also replace what REGEX matches (repeatable)")
    p.add_argument("--ignore-output-type", action="append", default=[], metavar="SELECTOR",
                   help="leave out outputs of this type, stream (stream:stderr) or MIME type (repeatable)")
    p.add_argument("--compare-execution-count", action="store_true",
                   help="compare execution counts too (comparisonConfig.ignoreExecutionCount: false)")
    p.add_argument("--cell-timeout", type=_non_negative, default=DEFAULT_CELL_TIMEOUT,
                   help="per-cell timeout in seconds (0: none); metadata.execution.timeout overrides it")
    p.add_argument("--timeout", type=_non_negative, default=None, help="deadline for the whole run, in seconds")
    p.add_argument("--termination-log", default=None, help="also write a summary of at most 4096 bytes here")
    p.add_argument("--progress", action="store_true", help="print one NBVALIDATION-PROGRESS line per executed cell")
    p.add_argument("--print-executed", action="store_true",
                   help="also print the executed notebook (gzip + base64) on one NBVALIDATION-EXECUTED line "
                        "before the result line, for where only the logs come back (a Kubernetes Pod)")
    return p


def _sniff_option(argv: Sequence[str], name: str) -> str | None:
    """Best effort: the value of ``--name`` in argv that failed to parse."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def comparison_args(spec: Mapping[str, Any]) -> list[str]:
    """The runner arguments for a job spec's ``comparisonConfig`` (both backends)."""
    cc = spec.get("comparisonConfig") or {}
    args: list[str] = []
    if cc.get("strategy"):
        args += ["--comparison", cc["strategy"]]
    if cc.get("floatingPointTolerance") is not None:
        args += ["--abs-tol", str(float(cc["floatingPointTolerance"]))]
    if cc.get("relativeTolerance") is not None:
        args += ["--rel-tol", str(float(cc["relativeTolerance"]))]
    if cc.get("ignoreTimestamps") is False:
        args.append("--keep-timestamps")
    for pattern in cc.get("customTimestampPatterns") or []:
        args.append(f"--timestamp-pattern={pattern}")  # one token: a pattern may start with "-"
    for selector in cc.get("ignoreOutputTypes") or []:
        args.append(f"--ignore-output-type={selector}")
    if cc.get("ignoreExecutionCount") is False:
        args.append("--compare-execution-count")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _ArgumentError as e:
        parser.print_usage(sys.stderr)
        sys.stderr.write(f"{parser.prog}: error: {e}\n")
        result = error_result(Reason.RUNNER_ERROR, f"Invalid arguments: {e}")
        result_path = _sniff_option(argv, "--result")
        if result_path:
            try:
                _atomic_write_text(result_path, json.dumps(result, indent=1) + "\n")
            except OSError:
                pass
        termination = _sniff_option(argv, "--termination-log")
        if termination:
            write_termination_log(termination, result)
        _emit(RESULT_PREFIX + result_line(result))
        return 2

    def progress(event: dict[str, Any]) -> None:
        _emit(PROGRESS_PREFIX + json.dumps(event, separators=(",", ":")))

    try:
        result = run_notebook(
            args.notebook,
            executed=args.executed,
            result_path=args.result,
            python=args.python,
            cwd=args.cwd,
            golden=args.golden,
            comparison=args.comparison,
            abs_tol=args.abs_tol,
            rel_tol=args.rel_tol,
            compare_options={"ignore_timestamps": not args.keep_timestamps,
                             "timestamp_patterns": args.timestamp_pattern,
                             "ignore_output_types": args.ignore_output_type,
                             "compare_execution_count": args.compare_execution_count},
            cell_timeout=args.cell_timeout,
            timeout=args.timeout,
            termination_log=args.termination_log,
            progress=progress if args.progress else None,
        )
    except OSError as e:  # the result or the termination log cannot be written
        sys.stderr.write(f"nbvalidation: {e}\n")
        result = error_result(Reason.RUNNER_ERROR, f"Cannot write the result: {e}")
        _emit(RESULT_PREFIX + result_line(result))
        return 2
    if args.print_executed:
        _emit_executed(args.executed)
    _emit(RESULT_PREFIX + result_line(result))
    return exit_code(result)


def _emit_executed(path: str) -> None:
    import base64
    import gzip

    try:
        with open(path, "rb") as f:
            payload = base64.b64encode(gzip.compress(f.read())).decode("ascii")
    except OSError:
        return  # nothing was executed (e.g. the kernel never started)
    _emit(EXECUTED_PREFIX + payload)


def _skip_slow_optional_imports() -> None:
    """Keep jsonschema from importing ``rfc3987_syntax`` in this process.

    When that optional package is installed, ``import jsonschema`` (pulled in by
    nbformat) builds its Lark grammar at import time: about a second of CPU on every
    run. It only backs the ``iri`` / ``iri-reference`` format checks, which the
    notebook schema does not use. Only done when running as a program, never when
    this module is imported into another process.
    """
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]


if __name__ == "__main__":
    _skip_slow_optional_imports()
    sys.exit(main())
