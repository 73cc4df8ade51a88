"""Execute a notebook top to bottom in a fresh kernel and judge the run.

The one place that runs notebooks, for every backend: the local backend starts
it as a subprocess of the Jupyter server, the Kubernetes backend runs it inside
the validation Pod (in its own environment, apart from the kernel's). It needs
only the standard library, ``nbformat`` and ``nbclient`` (with its
``jupyter_client``); the kernel's interpreter needs only ``ipykernel``. Nothing
here imports the server, the engine, a Kubernetes client or YAML (a test holds
that wall).

Modules, by concern:

* :mod:`.execute`: one kernel, one pass over the cells (:mod:`.cells`: the pass;
  :mod:`.errors`: what a failed cell says; :mod:`.kernel`: the kernel's stop);
* :mod:`.verdict`: inputs, golden comparison, the result document (:func:`run_notebook`);
* :mod:`.options`: what a job asks of one run, parsed once (:class:`RunnerOptions`);
* :mod:`.protocol`: what a runner reports, written *and* read (result line,
  progress lines, executed-notebook line, termination summary);
* :mod:`.environment`: the kernel's (and runner's) environment, from an allow-list;
* :mod:`.hygiene`: everything a run starts ends with it; the temp-folder sweep;
* :mod:`.cli` / ``__main__``: the command line; :mod:`.pool`: a pre-started kernel (``--pool-slot``).
"""

# the modules of the package the runner needs beside runner/ itself (pure, standard
# library only): what an image's runner venv must hold (k8s/objects.runner_files);
# tests/test_runner_standalone.py holds this list to the runner's imports
SHARED_MODULES = ("__init__.py", "_version.py", "core/__init__.py", "core/deferred_imports.py", "core/priority.py",
                  "core/tasks.py", "core/vocabulary.py", "verdict/__init__.py", "verdict/compare.py",
                  "verdict/flatten.py", "verdict/inherited.py", "verdict/markers.py", "verdict/probe.py",
                  "verdict/readset.py", "verdict/sanitize.py")

from jupyter_nbvalidation.core.vocabulary import ResultReason  # noqa: E402
from jupyter_nbvalidation.runner.cli import build_parser, main  # noqa: E402
from jupyter_nbvalidation.runner.environment import RUN_ID_VAR, kernel_environment, runner_environment  # noqa: E402
from jupyter_nbvalidation.runner.errors import OUTPUT_LIMIT  # noqa: E402
from jupyter_nbvalidation.runner.execute import KERNEL_NAME  # noqa: E402
from jupyter_nbvalidation.runner.options import RunnerOptions  # noqa: E402
from jupyter_nbvalidation.runner.protocol import (  # noqa: E402
    EXECUTED_PREFIX,
    FAILED,
    PROGRESS_PREFIX,
    RESULT_PREFIX,
    RUNNER_FAILURE_REASONS,
    STATUS_FAILURE,
    STATUS_SKIPPED,
    STATUS_SUCCESS,
    SUCCEEDED,
    TERMINATION_LOG_LIMIT,
    decode_executed,
    exit_code,
    parse_log,
    parse_summary,
    result_line,
    termination_summary,
    write_termination_log,
)
from jupyter_nbvalidation.runner.text import strip_ansi, truncate_tail  # noqa: E402
from jupyter_nbvalidation.runner.verdict import error_result, run_notebook  # noqa: E402

__all__ = [
    "EXECUTED_PREFIX", "SHARED_MODULES", "FAILED", "KERNEL_NAME", "OUTPUT_LIMIT", "PROGRESS_PREFIX",
    "RESULT_PREFIX", "RUNNER_FAILURE_REASONS", "RUN_ID_VAR", "RunnerOptions", "STATUS_FAILURE", "STATUS_SKIPPED",
    "STATUS_SUCCESS", "SUCCEEDED", "TERMINATION_LOG_LIMIT", "ResultReason", "build_parser", "decode_executed",
    "error_result", "exit_code", "kernel_environment", "main", "parse_log", "parse_summary", "result_line",
    "run_notebook", "runner_environment", "strip_ansi", "termination_summary", "truncate_tail",
    "write_termination_log",
]
