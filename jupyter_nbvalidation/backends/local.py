"""The embedded local backend: SQLite store, virtual environments, local kernels.

Layout under ``data_dir`` (default ``<jupyter data dir>/nbvalidation``)::

    nbvalidation.db                 jobs + events (store/sqlite.py)
    jobs/<uid>/input/               the snapshot taken at submit
    jobs/<uid>/run-<n>/             one validation attempt: result.json, executed.ipynb, runner.log, pid
    envs/<key>/                     a finished environment (content-addressed)
    envs/.tmp-<key>-<rand>/         an environment being built (never used)
    logs/build-<key>-<stamp>.log    build logs

An environment becomes visible atomically: it is built in a temporary folder
and renamed to ``envs/<key>`` only once complete, with a marker file written
last. Every subprocess runs without blocking the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import signal
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import nbformat
from jupyter_core.paths import jupyter_data_dir
from traitlets import Enum, Int, List, Unicode, default

from ..model import WORKDIR_ANNOTATION, SpecError, isotime, parse_duration, spec_fields
from .. import requirements as reqmod
from ..priority import deprioritize
from ..requirements import Requirements
from ..runner import hygiene
from ..runner.environment import runner_environment
from ..runner_args import comparison_args
from ..store.sqlite import SQLiteJobStore
from ..tasks import cancel_and_wait, wait_within
from .base import FAILED, RUNNING, SUCCEEDED, Backend, InputError, Observation

ENV_MARKER = ".nbvalidation-env.json"
UNSUPPORTED_LOCALLY = {
    "podConfig.containerImage": "needs the kubernetes backend (the local backend runs no containers)",
    "podConfig.buildConfig.baseImage": "needs the kubernetes backend (locally the base is the configured interpreter, c.LocalBackend.python)",
    "podConfig.resources.requests": "needs the kubernetes backend (the local backend sets no resource requests)",
    "podConfig.resources.limits": "needs the kubernetes backend (the local backend sets no resource limits)",
    "podConfig.nodeSelector": "needs the kubernetes backend (the local backend schedules nothing)",
    "podConfig.tolerations": "needs the kubernetes backend (the local backend schedules nothing)",
}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_group(pid: int, sig: int = signal.SIGTERM) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


@dataclass
class _Build:
    key: str
    task: asyncio.Task
    log_path: str
    waiters: set[str] = field(default_factory=set)
    proc: asyncio.subprocess.Process | None = None
    pid_file: Path | None = None


@dataclass
class _Run:
    task: asyncio.Task
    run_dir: Path
    proc: asyncio.subprocess.Process | None = None
    started_at: str | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # marks every process of the run


class LocalBackend(Backend):
    name = "local"
    # requirements may name local paths inside the root (their content is in the
    # cache key) and carry index credentials (kept out of everything stored)
    local_requirement_paths = True
    index_credentials = True
    constraint_files = True

    data_dir = Unicode(help="Where jobs, environments, logs and the SQLite store live "
                            "(default: <jupyter data dir>/nbvalidation).").tag(config=True)
    python = Unicode(help="Base interpreter of built environments (default: the base interpreter "
                          "of this server's Python).").tag(config=True)
    unbuilt_python = Unicode(help="Interpreter whose kernel validates jobs that disable their build "
                                  "(default: this server's own, which has ipykernel).").tag(config=True)
    build_tool = Enum(["auto", "uv", "venv"], default_value="auto",
                      help="How environments are built: uv when available (auto), always uv, "
                           "or venv + pip.").tag(config=True)
    uv_path = Unicode(help="The uv executable (default: found on PATH or beside this interpreter).").tag(config=True)
    kernel_packages = List(Unicode(), default_value=["ipykernel"],
                           help="Packages added to every built environment so a kernel can start in it.").tag(config=True)
    max_parallel_builds = Int(2, help="Environment builds run at once.").tag(config=True)
    max_parallel_validations = Int(2, help="Notebook validations run at once.").tag(config=True)
    default_cell_timeout = Int(600, help="Per-cell timeout in seconds unless the job or notebook sets one.").tag(config=True)
    niceness = Int(10, help="Builds, runners and their kernels run at this `nice` level, so the Jupyter "
                            "server (and the user's own kernels) stay responsive while jobs compute; "
                            "0 disables it.").tag(config=True)

    @default("data_dir")
    def _data_dir_default(self) -> str:
        return os.path.join(jupyter_data_dir(), "nbvalidation")

    @default("python")
    def _python_default(self) -> str:
        return getattr(sys, "_base_executable", None) or sys.executable

    @default("unbuilt_python")
    def _unbuilt_python_default(self) -> str:
        return sys.executable

    @default("uv_path")
    def _uv_default(self) -> str:
        found = shutil.which("uv")
        if found:
            return found
        beside = Path(sys.executable).parent / "uv"
        return str(beside) if beside.exists() else ""

    def __init__(self, **kw: Any):
        super().__init__(**kw)
        self.store = SQLiteJobStore(path=os.path.join(self.data_dir, "nbvalidation.db"), parent=self)
        self._notify: Callable[[str], None] = lambda name: None
        self._builds: dict[str, _Build] = {}  # by env key
        self._job_build: dict[str, _Build] = {}  # by job uid
        self._runs: dict[str, _Run] = {}  # by job uid
        self._build_slots = asyncio.Semaphore(self.max_parallel_builds)
        self._run_slots = asyncio.Semaphore(self.max_parallel_validations)
        self._python_version: str | None = None
        self._keys: dict[str, str] = {}

    def _niced(self, argv: list[str]) -> list[str]:
        nice = shutil.which("nice") if self.niceness > 0 else None
        return [nice, "-n", str(self.niceness), *argv] if nice else argv

    # -- paths ---------------------------------------------------------------
    @property
    def root(self) -> Path:
        return Path(self.data_dir)

    def job_dir(self, job: dict) -> Path:
        return self.root / "jobs" / job["metadata"]["uid"]

    def env_dir(self, key: str) -> Path:
        return self.root / "envs" / key

    # -- lifecycle -----------------------------------------------------------
    async def start(self, notify: Callable[[str], None]) -> None:
        self._notify = notify
        await asyncio.to_thread(self._sweep_stale_builds)
        await asyncio.to_thread(hygiene.sweep)  # temp folders (and kernels) of runners that died
        proc = await asyncio.create_subprocess_exec(
            self.python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        out, _ = await proc.communicate()
        self._python_version = out.decode().strip() or "unknown"

    async def stop(self) -> None:
        # Builds and runs are children of this process; stop them with it.
        # A later start resumes each job from its persisted phase.
        for b in list(self._builds.values()):
            if b.proc and b.proc.returncode is None:
                _kill_group(b.proc.pid, signal.SIGKILL)
            b.task.cancel()
        # runners get SIGTERM first, so they shut their kernels down; what such
        # a stopped run writes is not a verdict: mark it, a restart runs again
        for r in self._runs.values():
            if r.proc is not None and r.proc.returncode is None:
                await asyncio.to_thread((r.run_dir / "interrupted").write_text, "server stopped")
        await asyncio.gather(*(_terminate(r.proc, r.run_id) for r in self._runs.values() if r.proc is not None))
        await cancel_and_wait(*(b.task for b in self._builds.values()), *(r.task for r in self._runs.values()))
        self._builds.clear()
        self._job_build.clear()
        self._runs.clear()

    def _sweep_stale_builds(self) -> None:
        """Remove builds left half-done by an earlier server (killed mid-build)."""
        envs = self.root / "envs"
        if not envs.is_dir():
            return
        for pid_file in envs.glob(".tmp-*.pid"):
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text())
                if pid != os.getpid() and _pid_alive(pid):
                    _kill_group(pid, signal.SIGKILL)
        for leftover in envs.glob(".tmp-*"):
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)

    # -- spec ------------------------------------------------------------------
    def supported_fields(self) -> set[str]:
        return spec_fields() - set(UNSUPPORTED_LOCALLY)

    def unsupported_reason(self, field: str) -> str | None:
        return UNSUPPORTED_LOCALLY.get(field)

    def check_spec(self, spec: dict) -> None:
        strategy = spec.get("podConfig", {}).get("buildConfig", {}).get("strategy")
        if strategy is not None and strategy not in ("auto", "uv", "venv"):
            raise SpecError("podConfig.buildConfig.strategy",
                            "the local backend builds with auto, uv or venv")
        if strategy == "uv" and not self.uv_path:
            raise SpecError("podConfig.buildConfig.strategy", "uv is not installed on this server")

    def build_strategy(self, job: dict) -> str:
        wanted = job["spec"].get("podConfig", {}).get("buildConfig", {}).get("strategy") or self.build_tool
        if wanted == "auto":
            return "uv" if self.uv_path else "venv"
        return wanted

    def build_strategy_reason(self, job: dict) -> str:
        if job["spec"].get("podConfig", {}).get("buildConfig", {}).get("strategy") not in (None, "auto"):
            return "chosen by the job"
        if self.build_tool != "auto":
            return "set by c.LocalBackend.build_tool"
        return f"auto: uv found at {self.uv_path}" if self.uv_path else "auto: uv is not installed"

    # -- submit / prepare --------------------------------------------------------
    async def submit(self, job: dict, files: dict[str, bytes]) -> dict:
        job["metadata"]["uid"] = str(uuid.uuid4())
        input_dir = self.job_dir(job) / "input"

        def write() -> None:
            input_dir.mkdir(parents=True, exist_ok=True)
            for fname, data in files.items():
                target = input_dir / fname
                if ".." in Path(fname).parts or Path(fname).is_absolute():
                    raise ValueError(f"an input file name must stay in the input folder: {fname!r}")
                target.parent.mkdir(parents=True, exist_ok=True)  # inputs/<relative path>
                target.write_bytes(data)

        await asyncio.to_thread(write)
        try:
            return await self.store.create(job)
        except Exception:
            await asyncio.to_thread(shutil.rmtree, self.job_dir(job), True)
            raise

    def _requirements(self, job: dict) -> tuple[Requirements, str]:
        inp = self.job_dir(job) / "input"

        def read(name: str) -> str | None:
            path = inp / name
            return path.read_text(encoding="utf-8") if path.exists() else None

        reqs = reqmod.of_job(job, read("requirements.txt"), read("constraints.txt"))
        return reqs, reqs.origin

    def env_key(self, requirements: Requirements) -> str:
        """Interpreter + the displayed requirement lines + the content hash of
        every local path they name (so editing a local package rebuilds)."""
        ident = {
            "python": os.path.realpath(self.python),
            "version": self._python_version,
            **requirements.cache_key_material(),
            "kernel": sorted(self.kernel_packages),
        }
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:20]

    async def prepare(self, job: dict) -> str:
        def check() -> str:
            if not (self.job_dir(job) / "input" / "notebook.ipynb").exists():
                raise InputError("The notebook snapshot of this job is missing.")
            reqs, origin = self._requirements(job)
            try:
                self._keys[job["metadata"]["uid"]] = self.env_key(reqs)
            except (OSError, ValueError) as e:
                raise InputError(f"A local path of the requirements cannot be hashed for the cache key: {e}",
                                 field="spec.podConfig.buildConfig.requirements") from None
            return f"{reqs.count} requirement(s) from {origin}."

        return await asyncio.to_thread(check)

    # -- build -----------------------------------------------------------------
    def _env_ready(self, key: str) -> bool:
        return (self.env_dir(key) / ENV_MARKER).is_file()

    async def ensure_build(self, job: dict) -> Observation:
        uid = job["metadata"]["uid"]
        key = self._keys.get(uid)
        if key is None:
            await self.prepare(job)
            key = self._keys[uid]
        strategy = self.build_strategy(job)
        rec = self._job_build.get(uid)
        if rec is None and await asyncio.to_thread(self._env_ready, key):
            marker = await asyncio.to_thread(self._read_marker, key)
            return Observation(SUCCEEDED, reference=str(self.env_dir(key)), finished_at=isotime(),
                               message="Reused the cached environment (same interpreter and requirements).",
                               log_path=marker.get("log"), strategy=marker.get("strategy", strategy))
        if rec is not None and rec.task.done():
            return rec.task.result()
        if rec is None:
            build = self._builds.get(key)
            if build is None or build.task.done():
                reqs, _ = await asyncio.to_thread(self._requirements, job)
                try:
                    reqs = await asyncio.to_thread(reqmod.for_build, job, reqs)
                except ValueError as e:
                    return Observation(FAILED, message=str(e), finished_at=isotime(), strategy=strategy)
                stamp = isotime().replace(":", "").replace(".", "")
                log_path = str(self.root / "logs" / f"build-{key}-{stamp}.log")
                task = asyncio.get_running_loop().create_task(self._build(key, reqs, strategy, log_path))
                build = _Build(key=key, task=task, log_path=log_path)
                self._builds[key] = build
            build.waiters.add(job["metadata"]["name"])
            self._job_build[uid] = build
        return Observation(RUNNING, message="Building the environment.", log_path=self._job_build[uid].log_path,
                           strategy=strategy)

    def _read_marker(self, key: str) -> dict:
        try:
            return json.loads((self.env_dir(key) / ENV_MARKER).read_text())
        except (OSError, ValueError):
            return {}

    async def _run_step(self, build: _Build, argv: list[str], log: Any, secrets: dict[str, str] | None = None) -> int:
        """One build command. ``secrets``: index credentials, given to the
        command through its environment only (the requirements file holds
        ``${NBV_SECRET_<n>}``); its output then goes through a filter that
        masks them before anything reaches the log."""
        log.write(f"$ {' '.join(argv)}\n")
        log.flush()
        proc = await asyncio.create_subprocess_exec(
            *self._niced(argv), stdout=asyncio.subprocess.PIPE if secrets else log,
            stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                                         "PIP_NO_INPUT": "1", "VIRTUAL_ENV": "", **(secrets or {})})
        if secrets:
            values = list(secrets.values())

            async def pump() -> None:
                assert proc.stdout is not None
                while True:
                    line = await proc.stdout.readline()
                    if not line:
                        return
                    log.write(reqmod.redact(line.decode("utf-8", "replace"), values))
                    log.flush()

            pumping = asyncio.ensure_future(pump())
            try:
                code = await self._wait_step(build, proc)
            finally:
                with contextlib.suppress(Exception):
                    await wait_within(pumping, 5)
                pumping.cancel()
            return code
        return await self._wait_step(build, proc)

    async def _wait_step(self, build: _Build, proc: asyncio.subprocess.Process) -> int:
        build.proc = proc
        deprioritize(proc.pid, self.niceness)
        if build.pid_file is not None:
            await asyncio.to_thread(build.pid_file.write_text, str(proc.pid))
        try:
            return await proc.wait()
        except asyncio.CancelledError:
            _kill_group(proc.pid, signal.SIGKILL)
            raise

    async def _build(self, key: str, requirements: Requirements, strategy: str, log_path: str) -> Observation:
        build = self._builds[key]
        started = isotime()
        tmp = self.root / "envs" / f".tmp-{key}-{uuid.uuid4().hex[:8]}"
        try:
            async with self._build_slots:
                return await self._build_in(build, key, requirements, strategy, log_path, tmp, started)
        except (OSError, ValueError) as e:
            return Observation(FAILED, message=f"The environment build could not run: {e}", started_at=started,
                               finished_at=isotime(), log_path=log_path, strategy=strategy)
        finally:
            if tmp.exists():
                await asyncio.to_thread(shutil.rmtree, tmp, True)
            for name in build.waiters:
                self._notify(name)

    async def _build_in(self, build: _Build, key: str, requirements: Requirements, strategy: str,
                        log_path: str, tmp: Path, started: str) -> Observation:
        text, constraints = requirements.build_files()  # ${NBV_SECRET_<n>} where credentials go

        def setup() -> tuple[Path, Path | None]:
            tmp.parent.mkdir(parents=True, exist_ok=True)
            Path(log_path).parent.mkdir(parents=True, exist_ok=True)
            req_file = tmp.parent / f"{tmp.name}.requirements.txt"
            req_file.write_text("".join(f"{p}\n" for p in self.kernel_packages) + text)
            c_file = None
            if constraints:
                c_file = tmp.parent / f"{tmp.name}.constraints.txt"
                c_file.write_text(constraints)
            return req_file, c_file

        req_file, c_file = await asyncio.to_thread(setup)
        secrets = requirements.build_env()
        c_args = ["-c", str(c_file)] if c_file else []
        # uv reuses its own build of a local folder while pyproject.toml is
        # unchanged; the cache key says the content changed, so build it again
        refresh = ["--refresh"] if requirements.local_paths else []
        pid_file = tmp.parent / f"{tmp.name}.pid"
        build.pid_file = pid_file
        py = str(tmp / "bin" / "python")
        if strategy == "uv":
            steps = [[self.uv_path, "venv", "--quiet", "--python", self.python, str(tmp)],
                     [self.uv_path, "pip", "install", "--python", py, "-r", str(req_file), *c_args, *refresh]]
        else:
            steps = [[self.python, "-m", "venv", str(tmp)],
                     [py, "-m", "pip", "install", "--no-input", "-r", str(req_file), *c_args]]
        steps.append([py, "-c", "import ipykernel, sys; print('kernel ready:', sys.executable)"])
        try:
            with open(log_path, "w", encoding="utf-8") as log:
                log.write(f"# environment {key} ({strategy}) from {self.python}\n"
                          f"# requirements ({requirements.origin}): "
                          f"{', '.join(requirements.display_lines) or '(none)'}\n"
                          + (f"# constraints: {', '.join(requirements.display_constraints)}\n"
                             if requirements.display_constraints else ""))
                for argv in steps:
                    code = await self._run_step(build, argv, log, secrets if "install" in argv else None)
                    if code != 0:
                        tail = await asyncio.to_thread(_tail, log_path, 6)
                        return Observation(FAILED, message=f"`{Path(argv[0]).name} {' '.join(argv[1:3])}` "
                                                           f"exited with {code}: {tail}",
                                           started_at=started, finished_at=isotime(), log_path=log_path,
                                           strategy=strategy)
        finally:
            await asyncio.to_thread(req_file.unlink, True)
            if c_file is not None:
                await asyncio.to_thread(c_file.unlink, True)
            await asyncio.to_thread(pid_file.unlink, True)

        def publish() -> None:
            marker = {"key": key, "requirements": requirements.display_lines,
                      "constraints": requirements.display_constraints,
                      "local": requirements.cache_key_material()["local"], "strategy": strategy, "python": self.python,
                      "startTime": started, "completionTime": isotime(), "log": log_path}
            (tmp / ENV_MARKER).write_text(json.dumps(marker, indent=1))
            target = self.env_dir(key)
            try:
                os.rename(tmp, target)  # atomic: the environment appears whole or not at all
            except OSError:
                if not (target / ENV_MARKER).is_file():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)  # built twice; the first one stays

        await asyncio.to_thread(publish)
        return Observation(SUCCEEDED, reference=str(self.env_dir(key)), started_at=started,
                           finished_at=isotime(), log_path=log_path, strategy=strategy,
                           message=f"Built with {strategy} ({requirements.count} requirement(s)).")

    async def cancel_build(self, job: dict) -> None:
        rec = self._job_build.pop(job["metadata"]["uid"], None)
        if rec is None:
            return
        rec.waiters.discard(job["metadata"]["name"])
        if not rec.waiters and not rec.task.done():
            await cancel_and_wait(rec.task)

    # -- validation ------------------------------------------------------------
    async def ensure_validation(self, job: dict, reference: str | None) -> Observation:
        uid = job["metadata"]["uid"]
        run = self._runs.get(uid)
        if run is not None:
            if run.task.done():
                return run.task.result()
            return Observation(RUNNING, message="Validating.", started_at=run.started_at, reference=reference)

        def locate() -> tuple[Path, dict | None]:
            """The newest attempt; a finished one is read, a stale one is stopped."""
            runs = sorted(self.job_dir(job).glob("run-*"), key=lambda p: int(p.name.split("-")[1]))
            if runs:
                last = runs[-1]
                result = None if (last / "interrupted").exists() else _read_json(last / "result.json")
                if result is not None:
                    return last, result
                with contextlib.suppress(OSError, ValueError):
                    pid = int((last / "pid").read_text())
                    if _pid_alive(pid):
                        _kill_group(pid, signal.SIGKILL)
            n = int(runs[-1].name.split("-")[1]) + 1 if runs else 1
            run_dir = self.job_dir(job) / f"run-{n}"
            run_dir.mkdir(parents=True)
            return run_dir, None

        run_dir, result = await asyncio.to_thread(locate)
        if result is not None:
            meta = _read_json(run_dir / "run.json") or {}
            return _observation_from_result(result, meta.get("startTime"), meta.get("completionTime"), reference)

        if reference is not None:
            if not await asyncio.to_thread((Path(reference) / ENV_MARKER).is_file):
                return Observation(FAILED, reference=reference, finished_at=isotime(),
                                   message=f"The environment recorded at BuildComplete ({reference}) is missing "
                                           "or incomplete; refusing to validate elsewhere.")
            python = str(Path(reference) / "bin" / "python")
        else:
            python = self.unbuilt_python
        run = _Run(task=None, run_dir=run_dir)  # type: ignore[arg-type]
        run.task = asyncio.get_running_loop().create_task(self._validate(job, run, python, reference))
        self._runs[uid] = run
        return Observation(RUNNING, message="Validation queued.", reference=reference)

    def runner_argv(self, job: dict, run_dir: Path, python: str) -> list[str]:
        spec = job["spec"]
        inp = self.job_dir(job) / "input"
        # the notebook's folder, or (spec.inputFiles) the job's snapshot of the files it named
        cwd = (job["metadata"].get("annotations") or {}).get(WORKDIR_ANNOTATION) or str(
            inp / "inputs" if job["spec"].get("inputFiles") else inp)
        argv = [sys.executable, "-m", "jupyter_nbvalidation.runner", str(inp / "notebook.ipynb"),
                "--python", python, "--cwd", cwd,
                "--result", str(run_dir / "result.json"), "--executed", str(run_dir / "executed.ipynb"),
                "--progress"]
        if spec.get("goldenNotebook"):
            argv += ["--golden", str(inp / "golden.ipynb")]
        argv += comparison_args(spec)
        cell_timeout = parse_duration(spec["cellTimeout"]) if spec.get("cellTimeout") else self.default_cell_timeout
        argv += ["--cell-timeout", str(cell_timeout)]
        if spec.get("timeout"):
            argv += ["--timeout", str(parse_duration(spec["timeout"]))]
        if spec.get("podConfig", {}).get("env"):  # for the kernel only, never the runner's own environment
            argv += ["--kernel-env-file", str(run_dir / "kernel-env.json")]
        return argv

    async def _validate(self, job: dict, run: _Run, python: str, reference: str | None) -> Observation:
        name = job["metadata"]["name"]
        try:
            return await self._validate_in(job, run, python, reference)
        except OSError as e:
            return Observation(FAILED, started_at=run.started_at, finished_at=isotime(), reference=reference,
                               message=f"The validation could not run: {e}")
        finally:
            self._notify(name)

    async def _validate_in(self, job: dict, run: _Run, python: str, reference: str | None) -> Observation:
        async with self._run_slots:
            run.started_at = isotime()
            argv = self.runner_argv(job, run.run_dir, python)
            log_path = run.run_dir / "runner.log"

            def setup() -> dict[str, str]:
                # the runner's environment: an allow-list, nothing of this server's
                # (token, runtime/data dirs, IPython profile, PYTHONPATH); the job's
                # podConfig.env goes to the kernel only, through a file
                kernel_env = {e["name"]: e["value"] for e in job["spec"].get("podConfig", {}).get("env", [])}
                if kernel_env:
                    (run.run_dir / "kernel-env.json").write_text(json.dumps(kernel_env), encoding="utf-8")
                (run.run_dir / "run-id").write_text(run.run_id)
                return runner_environment(str(run.run_dir / "runner"), run.run_id)

            env = await asyncio.to_thread(setup)
            with open(log_path, "w", encoding="utf-8") as log:
                proc = await asyncio.create_subprocess_exec(
                    *self._niced(argv), stdout=log, stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL,
                    start_new_session=True, env=env)
                run.proc = proc
                deprioritize(proc.pid, self.niceness)
                await asyncio.to_thread((run.run_dir / "pid").write_text, str(proc.pid))
                try:
                    code = await proc.wait()
                except asyncio.CancelledError:
                    _kill_group(proc.pid, signal.SIGKILL)
                    await asyncio.shield(asyncio.to_thread(hygiene.kill_all, run.run_id))
                    raise
            # the runner stops what its kernel started; if the runner itself was
            # killed, what it left (the kernel, daemons) is stopped here
            await asyncio.to_thread(hygiene.kill_all, run.run_id)
            finished = isotime()
            result = await asyncio.to_thread(_read_json, run.run_dir / "result.json")
            await asyncio.to_thread(
                (run.run_dir / "run.json").write_text,
                json.dumps({"startTime": run.started_at, "completionTime": finished, "exitCode": code,
                            "python": python, "argv": argv}))
            if result is None:
                tail = await asyncio.to_thread(_tail, str(log_path), 8)
                return Observation(FAILED, started_at=run.started_at, finished_at=finished, reference=reference,
                                   message=f"The runner exited with {code} without a result: {tail}")
            return _observation_from_result(result, run.started_at, finished, reference)

    async def cancel_validation(self, job: dict) -> None:
        run = self._runs.pop(job["metadata"]["uid"], None)
        if run is None:
            return
        if run.proc is not None:
            await _terminate(run.proc, run.run_id)
        if not run.task.done():
            await cancel_and_wait(run.task)

    async def cleanup(self, job: dict) -> None:
        uid = job["metadata"]["uid"]
        rec = self._job_build.pop(uid, None)
        if rec is not None:
            rec.waiters.discard(job["metadata"]["name"])
        run = self._runs.pop(uid, None)
        if run is not None and not run.task.done():
            if run.proc is not None and run.proc.returncode is None:
                _kill_group(run.proc.pid, signal.SIGKILL)
            run.task.cancel()
        self._keys.pop(uid, None)
        reqmod.release(job["metadata"]["name"])

    # -- artefacts ---------------------------------------------------------------
    def _latest_run(self, job: dict) -> Path | None:
        runs = sorted(self.job_dir(job).glob("run-*"), key=lambda p: int(p.name.split("-")[1]))
        return runs[-1] if runs else None

    async def executed_notebook(self, job: dict) -> dict | None:
        def read() -> dict | None:
            run = self._latest_run(job)
            if run is None or not (run / "executed.ipynb").is_file():
                return None
            # nbformat.read rejoins multi-line strings: clients get plain strings
            return nbformat.read(str(run / "executed.ipynb"), as_version=4)

        return await asyncio.to_thread(read)

    async def build_log(self, job: dict) -> str | None:
        path = ((job.get("status") or {}).get("buildStatus") or {}).get("logPath")
        if not path:
            return None

        def read() -> str | None:
            try:
                return Path(path).read_text(encoding="utf-8", errors="replace")
            except OSError:
                return None

        return await asyncio.to_thread(read)

    async def health(self) -> dict[str, Any]:
        def check() -> tuple[bool, str]:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                probe = self.root / f".probe-{os.getpid()}"
                probe.write_text("ok")
                probe.unlink()
                return True, ""
            except OSError as e:
                return False, f"data dir not writable: {e}"

        usable, problem = await asyncio.to_thread(check)
        if self._python_version is None:
            usable, problem = False, "starting: the backend has not checked its interpreter yet"
        elif self._python_version == "unknown":
            usable, problem = False, f"the base interpreter {self.python} could not be run"
        return {
            "backend": self.name,
            "usable": usable,
            "problem": problem or None,
            "dataDir": self.data_dir,
            "python": self.python,
            "pythonVersion": self._python_version,
            "buildStrategies": ["uv", "venv"] if self.uv_path else ["venv"],
            "defaultBuildStrategy": "uv" if (self.build_tool == "auto" and self.uv_path) else
                                    ("venv" if self.build_tool == "auto" else self.build_tool),
            "activeBuilds": sum(1 for b in self._builds.values() if not b.task.done()),
            "activeValidations": sum(1 for r in self._runs.values() if not r.task.done()),
        }


async def _terminate(proc: asyncio.subprocess.Process, run_id: str | None = None, grace: float = 5.0) -> None:
    """SIGTERM the process group (the runner then shuts its kernel down and
    writes what it has), SIGKILL after ``grace`` seconds; then every process
    still marked with the run's ``run_id`` (what a killed runner left)."""
    if proc.returncode is None:
        _kill_group(proc.pid, signal.SIGTERM)
        try:
            await wait_within(asyncio.shield(proc.wait()), grace)
        except asyncio.TimeoutError:
            _kill_group(proc.pid, signal.SIGKILL)
    if run_id:
        await asyncio.shield(asyncio.to_thread(hygiene.kill_all, run_id))


def _read_json(path: Path) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _tail(path: str, lines: int) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            content = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(content[-lines:])[-800:]


def _observation_from_result(result: dict, started: str | None, finished: str | None,
                             reference: str | None) -> Observation:
    ok = result.get("verdict") == "Succeeded"
    return Observation(SUCCEEDED if ok else FAILED, message=result.get("message", ""), result=result,
                       started_at=started, finished_at=finished, reference=reference)
