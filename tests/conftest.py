"""Shared fixtures. Everything here is real: SQLite files, virtual
environments, kernels, a Jupyter server (pytest-jupyter)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytest_asyncio

sys.path.insert(0, str(Path(__file__).parent))

from fake_backend import FakeBackend  # noqa: E402
from helpers import wait, write_notebook  # noqa: E402

from jupyter_nbvalidation.backends.local import LocalBackend  # noqa: E402
from jupyter_nbvalidation.engine.engine import Engine  # noqa: E402
from jupyter_nbvalidation.service.jobs import JobService  # noqa: E402

pytest_plugins = ["pytest_jupyter.jupyter_server", "k8s_harness", "real_cluster", "xdist_group_ids", "webhook_receiver"]

# `pytest -n 2 --dist loadgroup` (tools/setup-and-test.sh): the tests of one group run
# one after another on one worker. A group is a set of modules that share something a
# second worker would contend for or build again: the headless browser and its lab server,
# the corpus runs (nested pytest -n 2 of their own), and modules whose module- or session-
# scoped fixtures build venvs, images or servers a second worker would build again. The
# real node's tests run on both workers (two kaniko builds at a time fit the node); the
# modules that block a part they all use (the registry; the API server) are marked `alone`
# (ALONE_MODULES): lane K runs them after the others, in a pytest run of its own, without -n
# (their tests on one worker if -n is given: MODULE_GROUPED).
XDIST_GROUPS = {
    "browser": ("test_ui_e2e", "test_ui_options", "test_ui_ux", "test_ui_schedules"),
    "corpus": ("test_corpus", "test_peer_notebooks", "test_nbval_parity"),
}
ALONE_MODULES = ("test_k8s_real_registry", "test_k8s_real_ha")
MODULE_GROUPED = ("test_k8s_real_registry", "test_k8s_real_ha", "test_runner", "test_runner_standalone", "test_k8s_progress",
                  "test_k8s_builders", "test_k8s_backend", "test_output_memory", "test_team_service", "test_hub_secrets")


def xdist_group_of(module: str) -> str | None:
    for group, modules in XDIST_GROUPS.items():
        if module in modules:
            return group
    return module if module in MODULE_GROUPED else None


# `pytest -m "not slow" -n 2`: the inner loop (README, Development). Slow: the real node, the
# browser and the corpus, and the modules whose every test builds environments or runs
# several servers; a slow test elsewhere carries @pytest.mark.slow itself.
SLOW_MODULES = ("test_requirements", "test_shared_data_dir", "test_pytest_plugin", "test_lifecycle",
                "test_server_restart", "test_ci_run", "test_cache_property", "test_team_service", "test_hub_secrets")
# tests of otherwise quick modules that took 5 s or more in a `-m "not slow" -n 2` run on two
# quiet cores (2026-12-04; module::name, a parametrized test by its name without the brackets),
# so that the inner loop stays under 5 min; kept here, not in the modules
SLOW_TESTS = {
    "test_secrets_local": ("test_the_attackers_notebook_leaves_no_trace",
                           "test_a_job_with_credentials_is_never_a_verdict_cache_hit"),
    "test_admission": ("test_local_cap_one_second_notebook_queued_both_verdicts_right",
                       "test_a_failed_build_is_shared_by_the_jobs_waiting_on_it_and_never_cached"),
    "test_bisect": ("test_bisect_names_the_drifted_package_and_probes_stay_hidden",
                    "test_bisect_says_the_change_is_in_the_notebook", "test_ctrl_c_cancels_the_running_step",
                    "test_the_server_finds_the_cause_step_by_step_and_stops_on_asking"),
    "test_bounded_outputs": ("test_a_pattern_that_hangs_at_run_time_ends_the_run_naming_the_pattern",
                             "test_without_a_golden_output_is_cut_as_it_arrives_so_the_run_stays_small",
                             "test_a_20000_cell_job_is_listed_as_a_small_summary",
                             "test_serving_the_notebook_of_a_50_mb_cell_keeps_the_server_small_and_responsive"),
    "test_build_log_stream": ("test_build_log_grows_while_building_then_completes",),
    "test_notify": ("test_environment_drift_names_the_package", "test_a_push_that_breaks_a_cell_names_the_commit_once",
                    "test_a_push_that_also_moves_a_package_blames_the_commit",
                    "test_describe_and_the_reports_name_the_commit",
                    "test_what_a_stopped_server_left_undecided_is_sent_once_by_the_next",
                    "test_a_receiver_that_fails_twice_gets_the_third_try_and_one_down_is_recorded"),
    "test_env_integrity": ("test_a_notebook_that_writes_into_its_environment_does_not_pass_the_next_one",
                           "test_a_job_that_would_reuse_an_environment_changed_by_a_running_one_waits_then_gets_"
                           "a_fresh_one"),
    "test_changes": ("test_a_new_release_of_an_unpinned_dependency_is_named_and_no_cell_changed",
                     "test_run_says_what_changed_under_a_notebook_that_turned_red"),
    "test_cli": ("test_follow_build_log", "test_progress_and_cancelled_wording", "test_with_a_running_server",
                 "test_bad_input_is_a_clear_error", "test_comparison_options",
                 "test_input_files_and_refused_requirements", "test_without_a_server_runs_in_process_and_gates_ci"),
    "test_cli_imports": ("test_submit_wait_skips_slow_imports_and_still_validates",),
    "test_composition": ("test_the_cli_without_a_server_honours_the_servers_config",),
    "test_environment_discovery": ("test_run_a_repository_whose_pyproject_declares_the_project",
                                   "test_run_a_repository_whose_root_declares_the_environment",
                                   "test_the_python_a_repository_asks_for_is_picked_among_those_here"),
    "test_forkserver": ("test_a_killed_fork_server_costs_no_verdict",
                        "test_fork_runners_off_starts_a_new_interpreter"),
    "test_human_numbers": ("test_failing_cell_is_numbered_as_jupyterlab_shows_it_with_the_users_line",),
    "test_infrastructure_faults": ("test_a_kernel_that_never_starts_ends_infrastructure_failed_after_the_retries",
                                   "test_a_package_index_that_cannot_be_reached_is_retried_then_infrastructure",
                                   "test_an_infrastructure_failed_newest_job_is_never_unchanged",
                                   "test_disk_full_error_of_the_failing_cell_is_infrastructure",
                                   "test_disk_full_through_run_and_pytest_is_an_error_exit_3_and_junit_error"),
    "test_input_files": ("test_a_notebook_reading_a_file_beside_it_needs_it_named",
                         "test_the_validation_sees_the_submit_time_snapshot"),
    "test_interrupt": ("test_ctrl_c_of_pytest_nbvalidation_cancels_its_job_kills_its_kernel_and_exits_130",
                       "test_ctrl_c_of_run_cancels_its_jobs_kills_its_kernels_and_exits_130",
                       "test_ctrl_c_of_submit_wait_through_a_server_cancels_its_job_and_exits_130"),
    "test_k8s_backend": ("test_engine_keeps_going_across_an_apiserver_restart",),
    "test_k8s_ha": ("test_apiserver_down_30s_in_the_middle_of_20_jobs",
                    "test_server_killed_mid_building_and_restarted", "test_two_servers_one_leader_and_failover"),
    "test_k8s_progress": ("test_status_progress_advances_while_the_pod_runs",),
    "test_local_backend": ("test_venv_pip_strategy_and_requirements_file",
                           "test_environment_cache_is_content_addressed", "test_adr037_build_then_validate",
                           "test_comparison_config_of_the_upstream_crd",
                           "test_an_undeclared_package_the_server_has_is_not_importable",
                           "test_jobs_of_one_environment_submitted_at_once_share_one_build",
                           "test_restart_resumes_from_persisted_status"),
    "test_lock": ("test_the_lock_of_the_last_success_turns_a_drifted_notebook_green_again",),
    "test_magic": ("test_nbvalidate_takes_the_spec_options",),
    "test_openapi_fuzz": ("test_openapi_fuzz",),
    "test_output_memory": ("test_a_cell_printing_200_mb_passes_under_a_400_mib_memory_limit",
                           "test_a_cell_displaying_200_mb_passes_under_a_400_mib_memory_limit"),
    "test_parameters": ("test_cli_p_on_the_local_backend", "test_golden_comparison_leaves_the_injected_cell_out",
                        "test_rest_refuses_bad_parameters_and_runs_good_ones"),
    "test_progress": ("test_progress_advances_mid_run_and_is_whole_at_the_end",),
    "test_roots": ("test_jobs_of_another_root_in_the_same_data_dir_are_not_this_roots",
                   "test_a_server_on_a_corrupt_store_says_so_and_recovers_once_it_is_repaired"),
    "test_run_copy": ("test_a_data_dir_inside_the_notebooks_folder_is_neither_copied_nor_keyed",
                      "test_a_notebook_writing_into_its_folder_passes_twice_and_leaves_the_folder_as_it_was",
                      "test_a_tutorial_resaving_its_figure_leaves_the_folder_key_unchanged",
                      "test_an_attempt_run_again_never_sees_what_the_first_one_wrote"),
    "test_runner": ("test_whole_run_deadline",),
    "test_sandbox": ("test_a_notebook_cannot_rewrite_another_jobs_verdict",
                     "test_what_the_kernel_can_and_cannot_read"),
    # the first writes 4 GiB (2 GiB in the sandboxed /tmp, 2 GiB in the working folder), about 90 s
    "test_scratch": ("test_a_big_scratch_file_in_tmp_goes_to_disk_not_memory",
                     "test_same_verdicts_with_the_sandbox_on_off_and_unavailable"),
    "test_verdict_cache": ("test_unchanged_notebooks_run_nothing_and_each_edit_reruns_exactly_its_notebook",
                           "test_the_cache_through_a_running_server",
                           "test_the_locale_and_time_zone_the_kernel_inherits_are_in_the_key",
                           "test_a_newer_failure_with_the_same_key_is_never_hidden_by_an_older_success",
                           "test_a_hidden_file_beside_the_notebook_is_in_the_key",
                           "test_a_notebook_that_opts_out_always_runs_and_a_wrong_setting_is_refused",
                           "test_a_symlinked_folder_beside_the_notebook_is_in_the_key"),
    "test_xdist_groups": ("test_a_groups_tests_run_on_one_worker",),
}


def pytest_configure(config):
    """The browser tests' folder exists before any test runs. This checkout is the source of
    the project's editable install, and every folder in it is in the identity of the unbuilt
    environment (verdict_cache.source_digest): the verdict cache key of the `--no-build` jobs
    of tests run by this interpreter. A folder that appeared mid-run (test-artifacts/, made
    when a browser test ends) made such a test's second run a cache miss where it asserts
    Unchanged (the fresh verdict was right; the assertion of a hit failed)."""
    (Path(__file__).resolve().parents[1] / "test-artifacts").mkdir(exist_ok=True)


# What a test needs of Kubernetes, marked from what it uses (not by hand): `cluster`, the real
# node (tools/cluster/up.sh; a parametrized case "real-node" too); `k8s`, the kube-apiserver + etcd
# harness (tools/testbin/build.sh).
# tools/setup-and-test.sh runs `-m "not k8s and not cluster"` while the Go builds run, with
# NBV_TESTBIN on an empty folder, so a test that needs the binaries and is not marked fails there.
HARNESS_FIXTURES = {"kube_apiserver", "k8s_namespace", "admin", "aio_admin"}


def kubernetes_marker_of(item, module: str) -> str | None:
    names = set(getattr(item, "fixturenames", ()))
    params = getattr(getattr(item, "callspec", None), "params", {})
    # "real-node": a parametrized fixture's case that asks for real_cluster itself (the port contract)
    if module.startswith("test_k8s_real_") or "real_cluster" in names or "real-node" in params.values():
        return "cluster"
    if (module.startswith("test_k8s_") or names & HARNESS_FIXTURES
            or any(v == "kubernetes" for v in params.values())):
        return "k8s"
    return None


# tryfirst: pytest-xdist's own hook (--dist loadgroup) reads the xdist_group markers to suffix
# each node id with its group, so it must see the ones added here (and tests/xdist_group_ids.py
# keeps that suffix with pytest 9.2, which drops it). The one isolation a test needs, the
# registry's, is its own pytest run (ALONE_MODULES), not a group.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rpartition(".")[2] if item.module else ""
        marker = kubernetes_marker_of(item, module)
        if marker:
            item.add_marker(getattr(pytest.mark, marker))
        group = xdist_group_of(module)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
        if module in ALONE_MODULES:
            item.add_marker(pytest.mark.alone)
        if (group in XDIST_GROUPS or marker == "cluster" or module in SLOW_MODULES
                or item.name.partition("[")[0] in SLOW_TESTS.get(module, ())):
            item.add_marker(pytest.mark.slow)


# A skipped test fails the CI run (tools/setup-and-test.sh exports NBV_FAIL_ON_SKIP=1): a test
# that cannot run where CI runs it has to say so by failing, or be named here, by node id (a
# parametrized test's id without its brackets covers all its cases), with the reason it may skip.
# Empty today: the suite's one conditional skip (tests/runner/test_bounded_outputs.py, skipif no
# /proc) never skips on CI's Linux.
ALLOWED_SKIPS: dict[str, str] = {}

_SKIPS: list[str] = []  # "nodeid: reason" of each skip this process saw
_UNEXPECTED: list[str] = []


def skip_is_allowed(nodeid: str) -> bool:
    return nodeid in ALLOWED_SKIPS or nodeid.partition("[")[0] in ALLOWED_SKIPS


def pytest_runtest_logreport(report):
    """Every skip this process sees (under xdist, the controller sees the workers' reports too)."""
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _SKIPS.append(f"{report.nodeid}: {reason}")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    """With NBV_FAIL_ON_SKIP=1 the session fails when a test skipped that ALLOWED_SKIPS does not
    name (judged where every report arrives: the xdist controller, or the one process)."""
    import os

    if os.environ.get("NBV_FAIL_ON_SKIP") != "1" or hasattr(session.config, "workerinput"):
        return
    _UNEXPECTED[:] = [s for s in _SKIPS if not skip_is_allowed(s.partition(": ")[0])]
    if _UNEXPECTED and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _UNEXPECTED:
        terminalreporter.section("unexpected skips (NBV_FAIL_ON_SKIP=1; tests/conftest.py ALLOWED_SKIPS)", red=True)
        for line in _UNEXPECTED:
            terminalreporter.line(line)


@pytest.fixture
def jp_server_config(tmp_path):
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_nbvalidation": True},
                      "allow_unauthenticated_access": False},
        "LocalBackend": {"data_dir": str(tmp_path / "nbv-data")},
    }


@pytest_asyncio.fixture
async def admin(kube_apiserver):
    """A plain-dict client as the admin (the Kubernetes tests' eyes and hands)."""
    from jupyter_nbvalidation.backends.kubernetes.client import connect

    kube = await connect(kube_apiserver.admin_kubeconfig)
    yield kube
    await kube.close()


@pytest_asyncio.fixture
async def aio_admin(kube_apiserver):
    """A kubernetes.aio ApiClient as the admin (for the harness helpers)."""
    async with await kube_apiserver.admin_client() as api:
        yield api


@pytest.fixture
def jp_serverapp(jp_serverapp, jp_asyncio_loop):
    """pytest-jupyter starts the app without running the post-start hook
    (which ``jupyter server`` runs once its loop is up); run it, so the
    extension's reconcile loop starts exactly as in production."""
    jp_asyncio_loop.run_until_complete(jp_serverapp._post_start())
    return jp_serverapp


class Local(SimpleNamespace):
    """An engine + local backend + service in a temp dir (no HTTP)."""

    async def submit(self, **spec):
        return await self.service.submit(spec)

    async def run(self, timeout: float | None = None, **spec) -> dict:
        job = await self.submit(**spec)
        done = await self.engine.wait_for_terminal(job["metadata"]["name"], timeout or self.run_timeout)
        await self.engine.recorder.flush()
        return done

    async def events(self, job: dict) -> list[dict]:
        await self.engine.recorder.flush()
        return await self.backend.store.list_events(job)


def make_local(tmp_path: Path, store_wrapper=None, backend_kw: dict | None = None, run_timeout: float = 240,
               **engine_kw) -> Local:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    backend = LocalBackend(data_dir=str(tmp_path / "data"), **(backend_kw or {}))
    if store_wrapper is not None:
        backend.store = store_wrapper(backend.store)
    engine = Engine(backend, log=logging.getLogger("nbvalidation.test"), **engine_kw)
    service = JobService(engine, backend, str(root))
    return Local(engine=engine, backend=backend, service=service, root=root, store=backend.store,
                 run_timeout=run_timeout)


@pytest_asyncio.fixture
async def local(tmp_path):
    env = make_local(tmp_path)
    await env.engine.start()
    yield env
    await env.engine.stop()


@pytest_asyncio.fixture
async def start_engine():
    """start_engine(backend=None, *, log=None, queue_poll=None, **engine_kw) -> (engine, backend):
    an Engine over ``backend`` (a new FakeBackend, tests/fake_backend.py, when None), started;
    each one still running is stopped afterwards. ``queue_poll`` sets the engine's before it
    starts. The engine tests' ``run`` fixtures and the port contract's ``backend_env`` use it."""
    engines: list[Engine] = []

    async def make(backend=None, *, log=None, queue_poll: float | None = None, **engine_kw):
        backend = backend or FakeBackend()
        engine = Engine(backend, log=log or logging.getLogger("nbvalidation.test.engine"), **engine_kw)
        if queue_poll is not None:
            engine.queue_poll = queue_poll
        await engine.start()
        engines.append(engine)
        return engine, backend

    yield make
    for engine in engines:
        if engine.running:
            await engine.stop()


@pytest.fixture
def notebook(tmp_path):
    """notebook("dir/nb.ipynb", ["print(1)", ...]) -> relative path under the test root."""
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)

    def make(rel: str, sources: list[str], **kw) -> str:
        write_notebook(root / rel, sources, **kw)
        return rel

    return make


class ServerProcess:
    """A real `jupyter server` subprocess with the extension, on loopback."""

    def __init__(self, tmp_path: Path, name: str = "server", extra_args: list[str] | None = None,
                 prefix: list[str] | None = None):
        import secrets
        import socket

        self.extra_args = list(extra_args or [])
        self.prefix = list(prefix or [])  # a command that runs the server's (it execs its arguments)

        self.root = tmp_path / "root"
        self.root.mkdir(exist_ok=True)
        self.data_dir = tmp_path / "data"
        self.runtime = tmp_path / "runtime"
        self.runtime.mkdir(exist_ok=True)
        self.token = secrets.token_hex(16)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log_path = tmp_path / f"{name}.log"
        self.proc = None

    @property
    def env(self) -> dict:
        import os

        return {**os.environ, "JUPYTER_RUNTIME_DIR": str(self.runtime), "PYTHONUNBUFFERED": "1"}

    def start(self, timeout: float = 60) -> "ServerProcess":
        import subprocess
        import urllib.request

        argv = [*self.prefix, sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root",
                f"--port={self.port}", "--ip=127.0.0.1", f"--ServerApp.token={self.token}",
                f"--ServerApp.root_dir={self.root}", f"--LocalBackend.data_dir={self.data_dir}",
                "--ServerApp.port_retries=0", *self.extra_args]
        self._log = open(self.log_path, "a")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True)

        def up() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter server exited: {self.log_path.read_text()[-2000:]}")
            try:
                req = urllib.request.Request(self.url + "nbvalidation/api/v1/health",
                                             headers={"Authorization": f"token {self.token}"})
                with urllib.request.urlopen(req, timeout=2) as r:
                    return r.status == 200
            except Exception:
                return False

        wait(up, timeout, lambda: f"the jupyter server to come up: {self.log_path.read_text()[-2000:]}", interval=0.2)
        return self

    def kill(self) -> None:
        """SIGKILL, like a crash: no shutdown hooks run."""
        import os
        import signal

        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        import os
        import signal

        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except Exception:
                os.killpg(self.proc.pid, signal.SIGKILL)
        # take the whole process group down (kernels and runners it started)
        import contextlib

        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.proc:
                os.killpg(self.proc.pid, signal.SIGKILL)

    def client(self):
        from jupyter_nbvalidation.clients.http import ServerClient

        return ServerClient(self.url, self.token, str(self.root))


@pytest.fixture
def server_proc(tmp_path):
    servers = []

    def make(name: str = "server") -> ServerProcess:
        s = ServerProcess(tmp_path, name)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


@pytest.fixture
def ui_tests():
    """ui_tests("file.test.js"): run one file of labextension/ui-tests/ (node's
    test runner + playwright-core driving Debian's Chromium against a real
    ``jupyter lab``); fails, never skips, when a part is missing."""
    import json
    import os
    import shutil
    import subprocess

    root = Path(__file__).resolve().parents[1]
    labext = root / "labextension"
    chromium = os.environ.get("NBV_CHROMIUM", "/usr/bin/chromium")
    timeout = int(os.environ.get("NBV_E2E_TIMEOUT", "900"))

    def installed_labextension() -> Path | None:
        from jupyter_core.paths import jupyter_path

        # this checkout's own build comes first (ui-tests/lab.js puts it on JUPYTER_PATH)
        built = root / "jupyter_nbvalidation" / "labextension" / "package.json"
        if built.is_file():
            return built
        for base in jupyter_path("labextensions"):
            pkg = Path(base) / "jupyter-nbvalidation" / "package.json"
            if pkg.is_file():
                return pkg
        return None

    def run(test_file: str, minutes: float | None = None) -> str:
        node = shutil.which("node")
        assert node, "node is not on PATH: install Node.js 20 to run the browser tests"
        assert Path(chromium).exists(), f"{chromium} is missing: `apt-get install -y chromium` (or set NBV_CHROMIUM)"
        assert (labext / "node_modules" / "playwright-core").is_dir(), (
            "labextension/node_modules is missing: run `jlpm install` in labextension/")
        pkg = installed_labextension()
        assert pkg is not None, ("the jupyter-nbvalidation labextension is not installed: `pip install -e .` "
                                 "(builds it) or `jupyter labextension develop --overwrite .`")
        assert "_build" in json.loads(pkg.read_text()).get("jupyterlab", {}), f"{pkg} is not a built labextension"
        jupyter = Path(sys.executable).with_name("jupyter")
        assert jupyter.exists(), f"no jupyter beside {sys.executable}"
        env = {**os.environ, "NBV_JUPYTER": str(jupyter), "NBV_CHROMIUM": chromium,
               "NBV_ARTIFACTS": str(root / "test-artifacts")}
        env["PATH"] = f"{jupyter.parent}{os.pathsep}{env.get('PATH', '')}"
        limit = max(timeout, minutes * 60) if minutes else timeout
        try:
            proc = subprocess.run([node, "--test", "--test-reporter=spec", f"ui-tests/{test_file}"],
                                  cwd=labext, env=env, capture_output=True, text=True, timeout=limit,
                                  check=False)
        except subprocess.TimeoutExpired as e:  # say which of its tests had finished
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            raise AssertionError(f"ui-tests/{test_file} did not finish in {limit} s; its output so far:\n"
                                 + out[-6000:]) from None
        print(proc.stdout[-30000:])
        # kept whether it passes or not: what a passing run logged (e.g. a hidden listing) can be read later
        (root / "test-artifacts").mkdir(exist_ok=True)
        (root / "test-artifacts" / f"{test_file}.log").write_text(proc.stdout + proc.stderr)
        if proc.stderr.strip():
            print(proc.stderr[-10000:], file=sys.stderr)
        assert proc.returncode == 0, (
            f"browser tests failed (exit {proc.returncode}); screenshots and lab logs in test-artifacts/\n"
            + proc.stdout[-6000:])
        return proc.stdout

    return run
