"""Verdict assembly: read the inputs, run the cells (:mod:`.execute`), compare
with the golden notebook (:mod:`..compare`), and write the result document.

Rules:

* the input notebook is never written; outputs and execution counts of code cells
  are cleared in a copy, which is executed and written to ``executed`` (also on
  failure, with the outputs up to the failing cell);
* the kernel's working directory is ``cwd`` (default: the notebook's folder);
* a cell fails when the reply status is ``error`` *or* the cell has an ``error``
  output (exceptions raised after execution, e.g. in display hooks, leave an error
  output with an ``ok`` reply);
* execution stops at the first failing cell unless the notebook's
  ``metadata.execution.allow_errors`` is true; cells tagged / commented as allowed to
  raise do not fail; skip markers are honoured (see :mod:`..markers`); a saved
  validate cell (``%nbvalidate``, ``%load_ext jupyter_nbvalidation``) is skipped;
* ``metadata.execution.timeout`` overrides the job's per-cell limit (:mod:`.options`);
* a notebook whose kernelspec names a kernel not known to be Python is run with
  Python (the only language validated), and the message says so;
* the kernel and every process it started are gone when the run ends.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from typing import Any, Callable, Mapping

import jupyter_nbvalidation.runner.parameters as _parameters
import jupyter_nbvalidation.runner.sandbox as _sandbox
import jupyter_nbvalidation.verdict.compare as _compare
import jupyter_nbvalidation.verdict.sanitize as _sanitize
from jupyter_nbvalidation.core.vocabulary import ResultReason
from jupyter_nbvalidation.runner.execute import _Execution
from jupyter_nbvalidation.runner.masking import Masker
from jupyter_nbvalidation.runner.options import RunnerOptions
from jupyter_nbvalidation.runner.outputs import OutputBudget
from jupyter_nbvalidation.runner.protocol import FAILED, SUCCEEDED, write_termination_log
from jupyter_nbvalidation.runner.text import cell_label, plural
from jupyter_nbvalidation.verdict.markers import notebook_execution_settings
from jupyter_nbvalidation.verdict.readset import describe as describe_reads

KERNEL_LOG_LIMIT = 20000  # kernel stdout/stderr copied to our stderr
_PYTHON_KERNEL_NAME = re.compile(r"^i?python[0-9.]*$", re.IGNORECASE)


def _resolve_python(python: str | None) -> str:
    if not python:
        return sys.executable
    if os.sep not in python and not os.path.exists(python):
        found = shutil.which(python)
        if found:
            return found
    # never realpath(): a venv's python is a symlink and must stay inside the venv
    return os.path.abspath(python)


def kernel_note(nb: Mapping[str, Any]) -> str | None:
    """What to say when the notebook names a kernel not known to be Python (it is
    validated with Python all the same): that the kernel was substituted, and
    whether the notebook declared its language."""
    meta = nb.get("metadata") or {}
    spec = meta.get("kernelspec") or {}
    if not isinstance(spec, Mapping):
        return None
    language = spec.get("language") or (meta.get("language_info") or {}).get("name")
    name = spec.get("name")
    if not isinstance(name, str) or not name.strip() or _PYTHON_KERNEL_NAME.match(name.strip()):
        return None
    if isinstance(language, str) and language.strip():
        # a kernel of its own (conda-env-sympy-py, a venv's kernel): substituted, and said
        return f"kernel {name.strip()!r} is not installed here; ran with python3, the notebook's language"
    return (f"the notebook's kernelspec names the kernel {name.strip()!r}, which is not known here, "
            "and declares no language: validated with Python")


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


def _nbclient_version() -> str | None:
    try:
        import nbclient  # optional: nbclient (its version, when installed)

        return str(nbclient.__version__)
    except Exception:  # pragma: no cover - nbclient missing is reported elsewhere
        return None


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


def _read_notebook(path: str, what: str) -> tuple[Any, str | None]:
    import nbformat  # deferred: start-up time (importing nbformat imports jsonschema)

    try:
        with open(path, encoding="utf-8") as f:
            nb = nbformat.read(f, as_version=4)  # type: ignore[no-untyped-call]
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
    import nbformat  # deferred: start-up time (importing nbformat imports jsonschema)

    _atomic_write_text(path, nbformat.writes(nb, version=4))  # type: ignore[no-untyped-call]


def run_notebook(
    notebook: str | os.PathLike[str],
    *,
    executed: str | os.PathLike[str] | None = None,
    result_path: str | os.PathLike[str] | None = None,
    python: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    golden: str | os.PathLike[str] | None = None,
    options: RunnerOptions | None = None,
    termination_log: str | os.PathLike[str] | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    kernel_env: Mapping[str, str] | None = None,
    run_id: str | None = None,
    reap_descendants: bool = False,
    sandbox: Mapping[str, Any] | None = None,
    bounds: Mapping[str, Any] | None = None,
    read_set: tuple[str, str | None] | None = None,
    pooled: Any = None,
    masker: Masker | None = None,
    **asked: Any,
) -> dict[str, Any]:
    """Execute ``notebook`` in a fresh kernel, optionally compare with ``golden``.

    Blocks until done (it runs its own event loop: call it from a process or thread
    without a running loop). Writes the executed notebook to ``executed`` and the
    result document to ``result_path`` / ``termination_log`` when given, and returns
    the result document. ``options`` (:class:`.options.RunnerOptions`: the comparison,
    the tolerances, the parameters, the limits) is what the job asks of the run;
    ``asked`` are fields of it by name (``parameters={...}``), over ``options``.
    ``progress`` is called with ``{"cellIndex", "status", "executionTime"}``
    after every executed cell. ``kernel_env``: variables
    for the kernel only (a job's ``podConfig.env``) over its clean environment.
    ``run_id`` marks every process of this run (default: a new one); with
    ``reap_descendants`` every process below this one is stopped at the end too
    (for the runner's own process, see :mod:`.hygiene`). ``parameters``
    (``{name: JSON value}``) are injected as papermill does (:mod:`.parameters`):
    cell indexes in the result stay the submitted notebook's; only the executed
    notebook holds the injected cell. The output limits bound the outputs kept in
    the executed notebook (:mod:`.outputs`); the comparison sees them whole.
    ``sandbox`` (``{"hide": [paths], "show": [paths], "write": [paths], "scratch":
    {"/tmp": folder, "/var/tmp": folder}}``) runs the kernel in the sandbox of
    :mod:`.sandbox` (None: without it); the scratch folders, on disk, are bound over
    /tmp and /var/tmp (without them, an empty tmpfs is there). ``bounds`` (``{"memory":
    {...}, "disk": {...}}``, :mod:`.limits`): the kernel's memory limit and the run's disk
    budget; past either the verdict is Failed, its reason naming the limit.
    ``pooled`` (:class:`.pool.Prestarted`): a kernel started before the notebook was known and
    bound to ``cwd`` (runner/pool.py), run in its own event loop; else a kernel is started.
    ``masker`` (:mod:`.masking`): the values of the job's secrets, masked in everything the run
    writes (the executed notebook, the result, the kernel's log) and in both notebooks before
    the golden comparison (so it compares the masked outputs).
    """
    masker = masker or Masker()
    started = time.monotonic()
    options = replace(options or RunnerOptions(), **asked)
    notebook = os.path.abspath(os.fspath(notebook))
    executed_path = os.path.abspath(os.fspath(executed)) if executed is not None else None
    result = _base_result(executed_path)

    def finish(res: dict[str, Any]) -> dict[str, Any]:
        res["durationSeconds"] = round(time.monotonic() - started, 3)
        if masker:
            res = masker.obj(res)
        if result_path is not None:
            _atomic_write_text(result_path, json.dumps(res, indent=1, ensure_ascii=False) + "\n")
        if termination_log is not None:
            write_termination_log(termination_log, res)
        return res

    # -- arguments
    problems = options.problems()
    if cwd is not None and not os.path.isdir(cwd):
        problems.append(f"the working directory {cwd} does not exist")
    if executed_path is not None and executed_path == notebook:
        problems.append("the executed notebook must not overwrite the input notebook")
    if problems:
        result.update(reason=ResultReason.RUNNER_ERROR, message="Invalid arguments: " + "; ".join(problems))
        result["executedNotebook"] = None
        return finish(result)

    # -- inputs
    nb, problem = _read_notebook(notebook, "notebook")
    golden_nb = None
    if problem is None and golden is not None:
        golden_nb, problem = _read_notebook(os.path.abspath(os.fspath(golden)), "golden notebook")
    if problem is not None:
        result.update(reason=ResultReason.INVALID_NOTEBOOK, message=problem, executedNotebook=None)
        return finish(result)

    settings = notebook_execution_settings(nb)
    options = options.for_notebook(settings)
    run_timeout = options.timeout
    python_path = _resolve_python(python)
    workdir = os.path.abspath(os.fspath(cwd)) if cwd is not None else os.path.dirname(notebook)

    work_nb = _clean_copy(nb)
    injected = None
    replaced: dict[int, str] = {}
    parameters = options.parameters
    if parameters:
        injected = (_parameters.injection_index(nb), _parameters.injected_cell(parameters))
        replaced = {i: _parameters.REPLACED_NOTE for i in _parameters.replaced_cells(nb)}
    budget = OutputBudget(options.max_cell_output_bytes, options.max_output_bytes, keep_full=golden_nb is not None)
    execution = _Execution(
        work_nb,
        python=python_path,
        cwd=workdir,
        options=options,
        deadline=None if run_timeout is None else started + run_timeout,
        run_timeout=run_timeout,
        allow_errors=settings["allow_errors"],
        on_progress=progress,
        run_id=run_id or uuid.uuid4().hex,
        kernel_env=kernel_env,
        reap_descendants=reap_descendants,
        injected=injected,
        not_run=replaced,
        output_budget=budget,
        sandbox=sandbox,
        bounds=bounds,
        record_reads=read_set is not None,
        pooled=pooled,
    )
    internal_error: BaseException | None = None
    try:
        if pooled is not None:
            pooled.loop.run_until_complete(execution.run())
        else:
            asyncio.run(execution.run())
    except Exception as e:  # a bug in the runner or its dependencies
        internal_error = e
    if masker:  # before anything of the run is written or compared (runner/masking.py)
        masker.outputs(o for c in work_nb.cells for o in c.get("outputs") or [])
        for outs in budget.full.values():
            masker.outputs(outs)
        if golden_nb is not None:
            masker.outputs(o for c in golden_nb.cells for o in c.get("outputs") or [])
        execution.results = masker.obj(execution.results)
        execution.message = masker.obj(execution.message)
        execution.kernel_log = masker.text(execution.kernel_log)
    if execution.kernel_log.strip():
        sys.stderr.write("--- kernel output ---\n" + execution.kernel_log[-KERNEL_LOG_LIMIT:])
        if not execution.kernel_log.endswith("\n"):
            sys.stderr.write("\n")
        sys.stderr.flush()

    result["results"] = execution.results
    result["runner"]["kernelPython"] = execution.kernel_python or python_path
    if internal_error is not None:
        execution._fail(
            ResultReason.RUNNER_ERROR,
            execution._current_index,
            f"The runner failed: {type(internal_error).__name__}: {internal_error}",
        )

    # -- the executed notebook (also on failure)
    if executed_path is not None:
        try:
            _write_notebook(work_nb if injected is None else _parameters.with_injected(work_nb, injected[1], injected[0]),
                            executed_path)
        except Exception as e:
            result["executedNotebook"] = None
            execution._fail(ResultReason.RUNNER_ERROR, None, f"Cannot write the executed notebook {executed_path}: {e}")

    # -- golden comparison
    if golden_nb is not None:
        # not run, and validate cells (their golden outputs are the magic's own report)
        not_run = [i for i in range(len(work_nb.cells))
                   if i not in execution.executed or i in execution.validate_cells]
        try:
            result["comparisonResult"] = _compare.compare_notebooks(
                golden_nb, budget.with_full_outputs(work_nb), strategy=options.comparison, abs_tol=options.abs_tol, rel_tol=options.rel_tol,
                skip_cells=not_run, **options.compare_options,
            )
        except _sanitize.PatternTimeout as e:
            # the job's own pattern: the comparison's failure (exit 1), not the runner's (exit 2)
            execution._fail(ResultReason.COMPARISON_FAILED, None,
                            f"The golden comparison was stopped: {e} (a sanitizer or timestamp pattern of "
                            "this job's comparisonConfig)")
        except Exception as e:
            execution._fail(ResultReason.RUNNER_ERROR, None, f"The golden comparison failed: {type(e).__name__}: {e}")
        budget.full.clear()  # the full outputs were for the comparison only

    # -- verdict
    comparison_result = result["comparisonResult"]
    if execution.reason is not None:
        result.update(reason=execution.reason, message=execution.message, failedCellIndex=execution.failed_index)
    elif comparison_result is not None and comparison_result["result"] != "matched":
        first = comparison_result["diffs"][0]["cellIndex"] if comparison_result["diffs"] else None
        compared = comparison_result["matchedCells"] + comparison_result["mismatchedCells"]
        result.update(
            reason=ResultReason.GOLDEN_MISMATCH,
            failedCellIndex=first,
            message=(
                f"{comparison_result['mismatchedCells']} of {compared} compared cells differ from the golden notebook"
                + (f" (first: {cell_label(first)})" if first is not None else "")
            ),
        )
    else:
        message = f"{plural(execution.code_cells_run, 'code cell')} ran without errors"
        if execution.allowed_errors:
            message = (
                f"{plural(execution.code_cells_run, 'code cell')} ran; "
                f"{execution.allowed_errors} raised an error that was allowed"
            )
        if comparison_result is not None:
            message += f"; {comparison_result['matchedCells']} of {comparison_result['totalCells']} code cells compared with the golden notebook match"
            if comparison_result["skippedCells"]:
                message += f" ({comparison_result['skippedCells']} not compared)"
        skipped_validate = [i for i in execution.validate_cells if execution.results[i].get("skipReason")]
        if skipped_validate:
            message += f"; {plural(len(skipped_validate), 'validate cell')} skipped"
        result.update(verdict=SUCCEEDED, reason=ResultReason.VALIDATION_SUCCEEDED, message=message)
    if injected is not None and isinstance(result.get("message"), str):
        where = "at the top" if injected[0] == 0 else f"after {cell_label(injected[0] - 1)}"
        names = list(parameters or {})
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        result["message"] += f" (parameters injected {where}: {shown})"
    truncated = budget.note()
    if truncated and isinstance(result.get("message"), str):
        result["message"] += f"; {truncated}" + (
            ", compared with the golden notebook in full" if golden_nb is not None else "")
    note = kernel_note(nb)
    if note and isinstance(result.get("message"), str):
        result["message"] += f" ({note})"
    if execution.bounds is not None:
        result["runner"]["bounds"] = execution.bounds.record()
    if execution.leftovers:
        result["runner"]["processesStopped"] = execution.leftovers
    if read_set is not None and result["verdict"] == SUCCEEDED:
        # the kernel's own folders, and in the sandbox its /tmp and /var/tmp: fresh for this run
        scratch = [execution.temp_dir] if execution.temp_dir else []
        visible: list[str] = []
        if sandbox is not None:  # its /tmp and /var/tmp are fresh, but for the real paths it shows there
            scratch += list(_sandbox.SCRATCH_PATHS)
            # (no link's target is shown: a link resolves in the kernel's view, runner/sandbox.py)
            visible += [*(sandbox.get("show") or []), *(sandbox.get("write") or []), workdir]
        try:
            result["readSet"] = describe_reads(execution.reads, root=read_set[0], tree=read_set[1], scratch=scratch,
                                               shown=visible)
        except Exception as e:  # never the verdict's loss: only its reuse
            result["readSet"] = {"uncacheable": f"what the kernel read could not be described: {e}"}
    return finish(result)


