"""pytest plugin (``pytest11`` entry point): ``pytest --nbvalidation [PATHS]`` collects
each ``.ipynb`` as one item and validates it as ``jupyter nbvalidation run`` does
(the same batch module: its own job, clean environment from its requirements,
golden copy, verdict cache). Without ``--nbvalidation`` it does nothing. Under
pytest-xdist every worker runs its own in-process engine on the same data dir;
the data dir's lease lets one of them reconcile at a time, the others submit and
wait for the verdict the holder records."""

from __future__ import annotations

import argparse
import os
import shlex
import signal
from pathlib import Path
from typing import Any

import pytest

SKIP_PARTS = {".ipynb_checkpoints"}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nbvalidation", "notebook validation (jupyter-nbvalidation)")
    group.addoption("--nbvalidation", action="store_true", default=False,
                    help="collect .ipynb files and validate each as `jupyter nbvalidation run` does")
    group.addoption("--nbvalidation-golden-suffix", default=None, metavar="SUFFIX",
                    help="compare NB.ipynb with NB<SUFFIX>.ipynb beside it (golden copies are not collected)")
    group.addoption("--nbvalidation-golden-self", action="store_true", default=False,
                    help="compare each notebook with its own stored outputs (as nbval does)")
    group.addoption("--nbvalidation-no-cache", action="store_true", default=False,
                    help="run every notebook, also one unchanged since an earlier job succeeded with it")
    group.addoption("--nbvalidation-no-build", action="store_true", default=False,
                    help="validate without building environments")
    group.addoption("--nbvalidation-option", action="append", default=[], metavar="OPTION",
                    help="a spec option of `jupyter nbvalidation run`, passed through (repeatable), "
                         "e.g. --nbvalidation-option='--ignore-output image/png'")
    group.addoption("--nbvalidation-data-dir", default=None, metavar="DIR",
                    help="local backend data dir (default: <jupyter data dir>/nbvalidation)")
    group.addoption("--nbvalidation-local", action="store_true", default=False,
                    help="never use a running Jupyter server; validate in this process")


def _spec_args(config: pytest.Config) -> argparse.Namespace:
    """The pass-through options as the CLI's own parser reads them (cli.spec_options.add_spec_options)."""
    from jupyter_nbvalidation.cli.spec_options import add_spec_options  # deferred: start-up time of every pytest run

    p = argparse.ArgumentParser(prog="--nbvalidation-option", add_help=False, exit_on_error=False)
    add_spec_options(p)
    argv = [a for opt in config.getoption("nbvalidation_option") for a in shlex.split(opt)]
    if config.getoption("nbvalidation_no_build"):
        argv.append("--no-build")
    try:
        return p.parse_args(argv)
    except (argparse.ArgumentError, SystemExit) as e:
        raise pytest.UsageError(f"--nbvalidation-option {' '.join(argv)}: {e}") from None


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("nbvalidation", False):
        return
    suffix = config.getoption("nbvalidation_golden_suffix")
    if suffix is not None and (not suffix or "/" in suffix or suffix.endswith(".ipynb")):
        raise pytest.UsageError(f"--nbvalidation-golden-suffix {suffix!r}: give what comes between a notebook's "
                                "name and .ipynb in its golden copy's name, e.g. .golden")
    if suffix and config.getoption("nbvalidation_golden_self"):
        raise pytest.UsageError("--nbvalidation-golden-suffix and --nbvalidation-golden-self: give one of them")
    from jupyter_nbvalidation.cli.spec_options import spec_from_options  # deferred: start-up time of every pytest run
    from jupyter_nbvalidation.spec.checks import (  # deferred: start-up time of every pytest run
        SpecError,
        validate_spec,
    )

    options = spec_from_options(_spec_args(config))
    try:  # a bad option is refused once, before anything is collected or submitted
        validate_spec({"notebook": {"path": "check.ipynb"}, **options})
    except SpecError as e:
        raise pytest.UsageError(f"spec.{e.field}: {e.reason}") from None
    config.stash[_OPTIONS] = options
    def on_sigterm(signum: int, frame: Any) -> None:
        # SIGTERM is a Ctrl-C: the notebook under way is cancelled (batch.Session), the summary
        # so far printed, exit 130 (pytest_sessionfinish)
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread
        pass


_OPTIONS = pytest.StashKey[dict[str, Any]]()


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    config = parent.config
    if not config.getoption("nbvalidation", False) or file_path.suffix != ".ipynb":
        return None
    if SKIP_PARTS & set(file_path.parts) or any(p.startswith(".") for p in file_path.parts[-2:]):
        return None
    from jupyter_nbvalidation.cli.batch import is_golden_copy  # deferred: start-up time of every pytest run

    if is_golden_copy(file_path, config.getoption("nbvalidation_golden_suffix")):
        return None
    if _project_golden(config, file_path):
        return None
    return NotebookFile.from_parent(parent, path=file_path)


_GOLDENS = pytest.StashKey[Any]()


def _project_golden(config: pytest.Config, file_path: Path) -> bool:
    """A notebook the project settings name as another's golden, not named on the command line
    itself: compared with, never collected (as ``run DIR`` leaves it out)."""
    from jupyter_nbvalidation.spec.project import (  # deferred: start-up time of every pytest run
        GoldenFinder,
        SettingsError,
    )

    if _GOLDENS not in config.stash:
        config.stash[_GOLDENS] = GoldenFinder()
    resolved = file_path.resolve()
    if any((config.invocation_params.dir / a.split("::")[0]).resolve() == resolved for a in config.args):
        return False
    try:
        return bool(config.stash[_GOLDENS].is_golden(resolved))
    except SettingsError as e:
        raise pytest.UsageError(str(e)) from None


class NotebookFile(pytest.File):
    def collect(self) -> Any:
        yield NotebookItem.from_parent(self, name=self.path.name)


class NotebookFailed(Exception):
    def __init__(self, outcome: Any):
        super().__init__(outcome.verdict)
        self.outcome = outcome


class NotebookItem(pytest.Item):
    _outcome: Any = None

    def setup(self) -> None:
        # validated here, in setup: a job that ended because of a fault that is not the
        # notebook's (InfrastructureFailed, verdict Error) is a pytest *error*, as a broken
        # fixture is, never a failure of the notebook
        from jupyter_nbvalidation.cli.batch import ERROR  # deferred: start-up time of every pytest run

        self._outcome = _validate(self)
        # as record_property writes them (JUnit <property>): the environment, and for a verdict
        # that stands unchanged, the earlier job whose verdict it is (nothing ran)
        if self._outcome.environment:
            self.user_properties.append(("nbvalidation.environment", self._outcome.environment))
        if self._outcome.verdict == "Unchanged":
            self.user_properties.append(("nbvalidation.cached", f"unchanged since job {self._outcome.name}"))
        if self._outcome.verdict == ERROR:
            pytest.fail(failure_text(self._outcome), pytrace=False)

    def runtest(self) -> None:
        outcome = self._outcome if self._outcome is not None else _validate(self)
        if not outcome.ok:
            raise NotebookFailed(outcome)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, NotebookFailed):
            return failure_text(excinfo.value.outcome)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"notebook: {self.name}"


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> Any:
    """A notebook whose verdict stands unchanged (nothing ran) passes as cached: ``-rA`` and ``-v``
    say so, with the earlier job."""
    if report.when == "call" and report.passed:
        cached = dict(report.user_properties).get("nbvalidation.cached")
        if cached:
            return "passed", "c", f"PASSED (cached: {cached})"
    return None


def failure_text(outcome: Any) -> str:
    """The failing cell first (numbered as JupyterLab shows it: the line pytest's
    JUnit XML and summary lead with), then the notebook, its verdict and job, the
    error with its traceback and the golden differences, the build log's tail."""
    from jupyter_nbvalidation.cli.reports import failure_of  # deferred: start-up time of every pytest run

    where = f"{outcome.item.shown}: {outcome.verdict}" + (f" (job {outcome.name})" if outcome.name else "")
    f = failure_of(outcome.job) if outcome.job is not None else None
    env = [f"environment: {outcome.environment}"] if outcome.environment else []
    if f is not None:
        lines = [f.headline, where, *env, "", f.text()]
    else:
        lines = [where, *env] + ([outcome.message] if outcome.message else [])
    if outcome.build_log and outcome.verdict != "Refused":
        lines += ["", "build log (tail):", outcome.build_log]
    return "\n".join(lines).rstrip()


_SESSION = pytest.StashKey[Any]()


def _session(config: pytest.Config, session: pytest.Session) -> Any:
    """The batch session of this pytest process (made at its first notebook): one
    client, in this process one engine for every notebook it validates. Under
    pytest-xdist every worker has its own on the same data dir; the lease lets one
    of them reconcile (every worker's jobs, as many at once as there are workers),
    the others submit and wait for the verdict it records."""
    if _SESSION in config.stash:
        return config.stash[_SESSION]
    import jupyter_nbvalidation.cli.batch as batch  # deferred: start-up time of every pytest run
    from jupyter_nbvalidation.cli.connect import connect_batch  # deferred: start-up time of every pytest run

    paths = [str(i.path.parent.resolve()) for i in session.items if isinstance(i, NotebookItem)]
    folder = os.path.commonpath([str(config.rootpath.resolve()), *paths])
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    args = argparse.Namespace(server=None, token=None, local=config.getoption("nbvalidation_local"),
                              root_dir=folder, data_dir=config.getoption("nbvalidation_data_dir"))
    api = connect_batch(args, folder, max(1, workers))
    options = config.stash[_OPTIONS]

    def make_spec(it: Any) -> dict[str, Any]:
        spec: dict[str, Any] = {"notebook": {"path": api.api_path(str(it.path))}}
        if it.golden is not None:
            spec["goldenNotebook"] = {"path": api.api_path(str(it.golden))}
        spec.update(options)
        return spec

    runs = batch.Session(api, make_spec, batch.Options(jobs=1, use_cache=not config.getoption("nbvalidation_no_cache")))
    config.stash[_SESSION] = runs
    return runs


def pytest_sessionfinish(session: pytest.Session) -> None:
    runs = session.config.stash.get(_SESSION, None)
    if runs is None:
        return
    from jupyter_nbvalidation.clients.in_process import InProcess  # deferred: start-up time of every pytest run

    del session.config.stash[_SESSION]
    try:
        runs.close()
    finally:
        if isinstance(runs.api, InProcess):
            runs.api.close()
    if runs.interrupted:  # Ctrl-C or SIGTERM: its notebook's job was cancelled; exit 130, as `run` does
        session.exitstatus = 130


def _validate(item: "NotebookItem") -> Any:
    """One notebook through the batch module, as `run` validates it."""
    import jupyter_nbvalidation.cli.batch as batch  # deferred: start-up time of every pytest run

    config, path = item.config, item.path
    suffix = config.getoption("nbvalidation_golden_suffix")
    golden = path if config.getoption("nbvalidation_golden_self") else batch.golden_of(path, suffix)
    it = batch.Item(path=path.resolve(), shown=_shown(config, path), golden=golden.resolve() if golden else None)
    return _session(config, item.session).validate(it)


def _shown(config: pytest.Config, path: Path) -> str:
    try:
        return path.resolve().relative_to(config.rootpath.resolve()).as_posix()
    except ValueError:
        return path.as_posix()
