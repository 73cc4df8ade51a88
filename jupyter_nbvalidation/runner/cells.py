"""The pass over a notebook's cells in a started kernel: which cells run (not the
skipped, the empty, the validate lines), the injected parameters cell, each cell
bounded by its timeout and the run's deadline, and each one's result entry and
progress records; a cell that fails stops the pass (``_Stop``)."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any, Callable, Mapping

from jupyter_nbvalidation.core.vocabulary import ResultReason
from jupyter_nbvalidation.runner.errors import error_details, error_summary, partial_output, traceback_details
from jupyter_nbvalidation.runner.options import RunnerOptions
from jupyter_nbvalidation.runner.outputs import OutputBudget
from jupyter_nbvalidation.runner.protocol import (
    PROGRESS_END,
    PROGRESS_PLAN,
    PROGRESS_START,
    STATUS_FAILURE,
    STATUS_SUCCESS,
    progress_time,
)
from jupyter_nbvalidation.runner.text import cell_label, fmt_limit, format_seconds, truncate
from jupyter_nbvalidation.verdict.markers import cell_markers, cell_source

INTERRUPT_GRACE = 2.0  # after a timeout: how long to wait for the interrupted cell's traceback
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


class _Stop(Exception):
    """Internal: stop executing further cells."""


class _Cells:
    """The pass over the cells of ``_Execution`` (execute.py), which sets up the state
    declared here (its ``__init__``) and starts the kernel and the client that run them."""

    nb: Any
    results: list[dict[str, Any]]
    injected: tuple[int, Any] | None
    not_run: dict[int, str]
    options: RunnerOptions  # what the job asks: the per-cell limit is read here
    deadline: float | None
    run_timeout: float | None
    allow_errors: bool
    on_progress: Callable[[dict[str, Any]], None] | None
    output_budget: OutputBudget
    validate_cells: set[int]
    executed: set[int]
    code_cells_run: int
    allowed_errors: int
    reason: str | None
    failed_index: int | None
    message: str | None
    stop_signal: int | None
    _current_index: int | None
    _current_timeout: float | None
    _last_reply: dict[str, Any] | None

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

    # the cells ---------------------------------------------------------------

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
        limit = self.options.cell_timeout
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
        error = error_details(cell, self._last_reply)
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
        limit = self.options.cell_timeout
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
            entry["output"] = partial_output(cell)
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
                output=partial_output(cell),
            )
            self._fail(ResultReason.KERNEL_DIED, index, f"The kernel died while executing {cell_label(index)}")
            self._progress(entry)
            raise _Stop from None
        elapsed = time.monotonic() - started
        self._current_index = None
        self.code_cells_run += 1
        entry.update(status=STATUS_SUCCESS, executionTime=format_seconds(elapsed))
        error = error_details(cell, self._last_reply)
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
