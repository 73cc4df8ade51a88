"""A runner option is declared once in the spec table (core/spec_table.py, ``Runner``) and
flows generically: the server writes every row as the runner's arguments
(spec/runner_args.py), the runner parses them into one ``RunnerOptions``
(runner/options.py), and a backend's server default reaches the plan and the verdict
cache's key through ``Backend.runner_defaults()``. The runner cannot import the table
(its image holds runner.SHARED_MODULES only), so these tests hold the two sides together."""

from __future__ import annotations

from dataclasses import fields

import pytest

from jupyter_nbvalidation.backends.local.backend import LocalBackend
from jupyter_nbvalidation.core.spec_table import RUNNER_FORMS, runner_options
from jupyter_nbvalidation.runner import RunnerOptions, build_parser
from jupyter_nbvalidation.spec.checks import validate_spec
from jupyter_nbvalidation.spec.plan import Snapshot, make_plan
from jupyter_nbvalidation.spec.runner_args import runner_args, spec_args
from jupyter_nbvalidation.verdict.cache import _defaults

PATHS = ["nb.ipynb", "--result", "r.json", "--executed", "e.ipynb"]

EVERY_OPTION = {
    "notebook": {"path": "nb.ipynb"},
    "comparisonConfig": {"strategy": "exact", "floatingPointTolerance": 0.5, "relativeTolerance": 0,
                         "ignoreTimestamps": False, "customTimestampPatterns": [r"\d+", "-x"],
                         "ignoreOutputTypes": ["stream:stderr", "text/html"], "ignoreExecutionCount": False,
                         "lax": True, "sanitizers": [{"regex": "a+", "replace": "A", "section": "s"}]},
    "parameters": {"epochs": 2, "name": "-dash"},
    "outputLimits": {"perCell": 1024, "total": 4096},
    "timeout": "10m",
    "cellTimeout": "90s",
}


def test_every_runner_flag_of_the_table_is_the_runners() -> None:
    """Each row's flag is an option of the runner's parser, and each field of RunnerOptions is
    set by exactly one row's flag (no option on one side only)."""
    parser = build_parser()
    dests = {}
    for path, option in runner_options():
        assert option.form in RUNNER_FORMS
        action = parser._option_string_actions.get(option.flag)
        assert action is not None, f"{path}: the runner has no {option.flag}"
        dests[action.dest] = path
    assert set(dests) == {f.name for f in fields(RunnerOptions)}, set(dests) ^ {f.name for f in fields(RunnerOptions)}


def test_a_spec_reaches_the_runners_options_whole() -> None:
    """Every option a spec sets, written by the server and parsed by the runner, is the
    value the spec asked (durations in seconds; sanitizers without their section)."""
    spec = validate_spec(EVERY_OPTION)
    args = runner_args(spec, {"timeout": 600.0, "cellTimeout": 90.0})
    options = RunnerOptions.from_arguments(build_parser().parse_args(PATHS + args))
    assert options == RunnerOptions(
        comparison="exact", abs_tol=0.5, rel_tol=0.0, keep_timestamps=True, timestamp_pattern=(r"\d+", "-x"),
        ignore_output_type=("stream:stderr", "text/html"), compare_execution_count=True, lax=True,
        sanitizers=({"regex": "a+", "replace": "A"},), parameters={"epochs": 2, "name": "-dash"},
        cell_timeout=90.0, timeout=600.0, max_cell_output_bytes=1024, max_output_bytes=4096)
    assert spec_args(spec) == args[:-4]  # the same, but the durations the plan resolves


def test_an_empty_spec_gives_the_runners_defaults_but_the_durations() -> None:
    spec = validate_spec({"notebook": {"path": "nb.ipynb"}})
    assert spec_args(spec) == []
    options = RunnerOptions.from_arguments(build_parser().parse_args(PATHS + runner_args(spec, {
        "timeout": 1800.0, "cellTimeout": 600.0})))
    assert options == RunnerOptions(cell_timeout=600.0, timeout=1800.0)
    assert RunnerOptions.from_arguments(build_parser().parse_args(PATHS)) == RunnerOptions()


@pytest.mark.parametrize("configured", [600, 45])
def test_a_backends_default_reaches_the_plan_and_the_cache_key_under_its_old_name(configured) -> None:
    """Backend.runner_defaults() gives the trait of every row with a server default, by the
    plan's keyword; the verdict cache's key names it as it did before (defaultCellTimeout)."""
    backend = LocalBackend(default_cell_timeout=configured)
    defaults = backend.runner_defaults()
    assert defaults == {"cell_timeout": configured}
    assert _defaults(defaults) == {"defaultCellTimeout": configured}
    job = {"metadata": {"name": "nb", "uid": "u"}, "spec": validate_spec({"notebook": {"path": "nb.ipynb"}})}
    plan = make_plan(job, Snapshot(frozenset({"notebook.ipynb"})), build_timeout=900, validation_timeout=1800,
                     **defaults)
    assert plan.cell_timeout == configured
    assert plan.runner_args[-4:] == ("--cell-timeout", str(configured), "--timeout", "1800")


def test_a_notebooks_own_limit_and_no_limit() -> None:
    """metadata.execution.timeout overrides the job's per-cell limit; 0 means none."""
    assert RunnerOptions(cell_timeout=90.0).for_notebook({"timeout": 5}).cell_timeout == 5.0
    assert RunnerOptions(cell_timeout=90.0).for_notebook({"timeout": None}).cell_timeout == 90.0
    assert RunnerOptions(cell_timeout=0.0, timeout=0.0).for_notebook({"timeout": None}) == RunnerOptions(
        cell_timeout=None, timeout=None)
