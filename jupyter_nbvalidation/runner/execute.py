"""Kernel execution: one fresh kernel, one pass over the cells (today's nbclient).

The kernel is ``PYTHON -m ipykernel_launcher -f {connection_file}`` from a private
kernelspec directory in the runner's temporary folder (nothing is installed
anywhere); its environment is built from an allow-list (:mod:`.environment`);
everything it starts is stopped at the end (:mod:`.hygiene`). The pass over the
cells is :mod:`.cells`'s, what a failed cell says :mod:`.errors`'s, the kernel's
stop :mod:`.kernel`'s.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import shutil
import signal
from typing import Any, Callable, Mapping

import jupyter_nbvalidation.runner.hygiene as hygiene
import jupyter_nbvalidation.runner.outhook as outhook
import jupyter_nbvalidation.runner.readset as readset
import jupyter_nbvalidation.runner.sandbox as _sandbox
from jupyter_nbvalidation.core.priority import deprioritize, own_niceness
from jupyter_nbvalidation.core.tasks import wait_within
from jupyter_nbvalidation.core.vocabulary import ResultReason
from jupyter_nbvalidation.runner.cells import _Cells, _Stop
from jupyter_nbvalidation.runner.environment import kernel_environment
from jupyter_nbvalidation.runner.errors import partial_output
from jupyter_nbvalidation.runner.kernel import kill_process_group, maybe_await, read_log, shell_reply, stop_kernel
from jupyter_nbvalidation.runner.limits import RunBounds
from jupyter_nbvalidation.runner.options import RunnerOptions
from jupyter_nbvalidation.runner.outputs import OutputBudget
from jupyter_nbvalidation.runner.protocol import STATUS_FAILURE, STATUS_SKIPPED
from jupyter_nbvalidation.runner.text import cell_label, fmt_limit, strip_ansi

DEFAULT_STARTUP_TIMEOUT = 120.0
KERNEL_NAME = "nbvalidation-python"
KERNEL_ARGUMENTS = ("--HistoryManager.hist_file=:memory:",)


class _Execution(_Cells):
    """One kernel, one pass over the cells. Fills ``results`` and the failure fields."""

    def __init__(
        self,
        nb: Any,
        *,
        python: str,
        cwd: str,
        options: RunnerOptions,
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
        bounds: Mapping[str, Any] | None = None,
        record_reads: bool = False,
        pooled: Any = None,
    ) -> None:
        self.nb = nb
        self.pooled = pooled  # a pre-started kernel bound to this run (runner/pool.py), else one is started
        self.bounds = RunBounds(bounds, run_id) if bounds else None  # memory limit, disk budget (runner/limits.py)
        self.sandbox = dict(sandbox) if sandbox is not None else None
        self.record_reads = record_reads  # the kernel's reads, for the verdict cache (runner/readset.py)
        self.reads: dict[str, Any] | None = None
        self.temp_dir: str | None = None
        self.output_budget = output_budget or OutputBudget()
        # (index, cell): a cell that is not the notebook's own (the job's parameters,
        # runner/parameters.py), run before cell ``index`` of the notebook (after the last
        # when index == len(cells)); cell indexes everywhere stay the notebook's
        self.injected = injected
        self.not_run = dict(not_run or {})  # index -> why it is not run (skipReason)
        self.python = python
        self.cwd = cwd
        self.options = options
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
        self._kernel_pid: int | None = None

    # the outcome ------------------------------------------------------------

    def _stopped_by_signal(self) -> None:
        assert self.stop_signal is not None
        name = signal.Signals(self.stop_signal).name
        index = self._current_index
        where = f" in {cell_label(index)}" if index is not None else ""
        self._fail(ResultReason.RUNNER_ERROR, index, f"The runner was stopped by {name}{where}; the kernel was shut down")
        if index is not None:
            self.results[index].update(status=STATUS_FAILURE, errorName=name, errorMessage=f"the runner was stopped by {name}")
            self.results[index]["output"] = partial_output(self.nb.cells[index])

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
        tmp = self.temp_dir = self.pooled.tmp if self.pooled is not None else hygiene.make_temp_dir(self.run_id)
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

            pooled = self.pooled
            if pooled is None:
                km = await self._kernel_manager(KernelSpecManager, AsyncKernelManager, tmp)
            else:  # a pre-started kernel, already bound to this run's copy (runner/pool.py)
                km, kc, log_file = pooled.km, pooled.kc, pooled.log_file
                self._pgid, self._kernel_pid = pooled.pgid, pooled.kernel_pid
                self.bounds = pooled.bounds_for(self.bounds, tmp)

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
                extra_arguments=list(KERNEL_ARGUMENTS),
                on_cell_executed=self._on_cell_executed,
            )
            self.output_budget.watch(client)

            # -- start the kernel
            log_path = os.path.join(tmp, "kernel.log")
            try:
                if pooled is None:
                    log_file = open(log_path, "wb")
                    kc = await self._start_kernel(km, log_file, startup_timeout)
                if self.bounds is not None:
                    self.bounds.watch(self._kernel_pid, self.sandbox is not None, self._stop_for_bounds)
                client.km, client.kc = km, kc
                await self._kernel_info(client, kc)
                # big writes in parts, merged back by the output budget; without a golden notebook a
                # display past the per-cell budget is not sent whole (the runner would drop it)
                budget = self.output_budget
                await outhook.install(kc, None if budget.keep_full else budget.cell_bytes)
                installed_hook = self.record_reads and await readset.install(kc)
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
            if installed_hook and self.reason is None:  # only a success is ever reused
                self.reads = await readset.collect(kc)
        except asyncio.CancelledError:
            if self.stop_signal is None:
                raise
            self._stopped_by_signal()
        finally:
            if self.bounds is not None:
                await self.bounds.stop_watching()
            await self._shutdown(km, kc, graceful=self.reason is None or self.reason == ResultReason.CELL_EXECUTION_FAILED)
            if log_file is not None:
                log_file.close()
                self.kernel_log = read_log(os.path.join(tmp, "kernel.log"))
            for signum in installed:
                try:
                    loop.remove_signal_handler(signum)
                except Exception:
                    pass
            # whatever the kernel started and left running (setsid, double forks)
            self.leftovers = await asyncio.to_thread(
                hygiene.kill_all, self.run_id, descendants_of=os.getpid() if self.reap_descendants else None)
            if self.bounds is not None:
                self._judge_bounds(self.bounds)
                await asyncio.to_thread(self.bounds.release)
            shutil.rmtree(tmp, ignore_errors=True)

    async def _kernel_manager(self, spec_manager: Any, manager: Any, tmp: str) -> Any:
        """The kernel's manager: its private kernelspec in ``tmp`` (the interpreter, wrapped
        by the sandbox's launcher or by the bounds' one), its connection file, IPC sockets."""
        spec_dir = os.path.join(tmp, "kernels", KERNEL_NAME)
        os.makedirs(spec_dir)
        argv = [self.python, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        launch = await asyncio.to_thread(self.bounds.prepare, tmp, self.sandbox is not None) if self.bounds else {}
        if self.sandbox is not None:  # the kernel's view of the machine (runner/sandbox.py)
            argv = await asyncio.to_thread(self._sandboxed, argv, tmp, launch)
        elif launch:  # its bounds set by runner/bounds.py before it starts
            argv = RunBounds.wrap(argv, self._write_json(tmp, "bounds.json", launch))
        with open(os.path.join(spec_dir, "kernel.json"), "w", encoding="utf-8") as f:
            json.dump({"argv": argv, "display_name": f"Python ({self.python})", "language": "python"}, f)
        km_kwargs: dict[str, Any] = {
            "kernel_name": KERNEL_NAME,
            "kernel_spec_manager": spec_manager(kernel_dirs=[os.path.join(tmp, "kernels")]),
            "connection_file": os.path.join(tmp, "connection.json"),
        }
        if os.name == "posix":  # faster than TCP, nothing listens on the network; in the kernel's
            # own folder, the one it writes (runner/sandbox.py, KERNEL_FOLDER)
            km_kwargs.update(transport="ipc", ip=os.path.join(tmp, _sandbox.KERNEL_FOLDER, "i"))
        return manager(**km_kwargs)

    async def _start_kernel(self, km: Any, log_file: Any, startup_timeout: float) -> Any:
        """The kernel started in ``self.cwd`` (as nbclient's ``async_start_new_kernel`` and
        ``async_start_new_kernel_client`` do), at this runner's priority; its client, ready."""
        await km.start_kernel(extra_arguments=list(KERNEL_ARGUMENTS), cwd=self.cwd, stdout=log_file, stderr=log_file,
                              env=kernel_environment(self.python,
                                                     os.path.join(self.temp_dir or "", _sandbox.KERNEL_FOLDER),
                                                     self.run_id, extra=self.extra_env))
        provisioner = getattr(km, "provisioner", None)
        self._pgid = getattr(provisioner, "pgid", None)
        # the kernel is a new session (its own scheduling autogroup): give it this runner's lowered priority too
        self._kernel_pid = getattr(provisioner, "pid", None)
        if self._kernel_pid:
            deprioritize(self._kernel_pid, own_niceness())
        kc = km.client()
        await maybe_await(kc.start_channels())
        await kc.wait_for_ready(timeout=startup_timeout)
        kc.allow_stdin = False
        return kc

    async def _stop_for_bounds(self) -> None:
        """The run went past its disk budget: its kernel and all it started, stopped."""
        kill_process_group(self._pgid)
        await asyncio.to_thread(hygiene.kill_all, self.run_id)

    def _judge_bounds(self, bounds: RunBounds) -> None:
        """Past a bound, that is the verdict's reason, whatever the cell then reported."""
        index = self.failed_index if self.reason is not None else self._current_index
        entry = self.results[index] if index is not None else {}
        found = bounds.outcome(self.reason is not None, entry.get("errorName"), self.reason == ResultReason.KERNEL_DIED,
                               str(entry.get("errorMessage") or ""))
        if found is None:
            return
        self.reason, text = found
        self.failed_index = index
        self.message = text[:1].upper() + text[1:] + (f"; stopped in {cell_label(index)}" if index is not None else "")
        if entry and entry.get("errorName") in (None, "DeadKernelError"):
            entry.update(status=STATUS_FAILURE, errorName=str(self.reason), errorMessage=text)

    @staticmethod
    def _write_json(folder: str, name: str, doc: Mapping[str, Any]) -> str:
        path = os.path.join(folder, name)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        return path

    def _sandboxed(self, argv: list[str], tmp: str, launch: Mapping[str, Any]) -> list[str]:
        """``argv`` wrapped by the sandbox's launcher, its mounts (and the bounds it sets,
        runner/bounds.py, and its network) in ``tmp/sandbox.json`` (blocks: asks the interpreter
        where its environment is). It writes only its working folder (``cwd``, and ``write``),
        ``tmp`` (its HOME) and its scratch folders."""
        config = self.sandbox or {}
        mounts = _sandbox.kernel_mounts(
            hide=[str(p) for p in config.get("hide") or []], show=[str(p) for p in config.get("show") or []],
            python=self.python, temp_dir=tmp, write=[*(str(p) for p in config.get("write") or []), self.cwd],
            scratch={str(k): str(v) for k, v in (config.get("scratch") or {}).items()})
        network = {"network": config["network"]} if config.get("network") else {}
        if config.get("idmapFault"):  # fault injection (tests): idmapped mounts refused (runner/confine.py)
            network["idmapFault"] = config["idmapFault"]
        return _sandbox.wrap(argv, self._write_json(tmp, "sandbox.json",
                                                    {"mounts": mounts, **({"bounds": launch} if launch else {}),
                                                     **network}))

    def _start_failure_message(self, error: BaseException, log_path: str) -> str:
        if isinstance(error, FileNotFoundError) or not os.path.exists(self.python):
            return f"The kernel could not be started: the interpreter {self.python} does not exist"
        if isinstance(error, PermissionError):
            return f"The kernel could not be started: the interpreter {self.python} is not executable"
        log = read_log(log_path)
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
        reply = await wait_within(shell_reply(kc, msg_id), 60)
        info = (reply or {}).get("content", {}).get("language_info")
        if info:
            self.nb.metadata["language_info"] = info
        msg_id = kc.execute(
            "",
            silent=True,
            store_history=False,
            user_expressions={"python": "__import__('sys').executable"},
        )
        reply = await wait_within(shell_reply(kc, msg_id), 60)
        try:
            value = reply["content"]["user_expressions"]["python"]["data"]["text/plain"]
            self.kernel_python = str(ast.literal_eval(value))
        except Exception:
            self.kernel_python = None

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
                    await maybe_await(kc.stop_channels())
            except Exception:
                pass
            try:
                await maybe_await(km.cleanup_resources())
            except Exception:
                pass
        # the kernel ran in its own session: take down anything it left behind
        kill_process_group(self._pgid)


