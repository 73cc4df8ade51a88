"""The embedded local backend: SQLite store, virtual environments, local kernels.

Layout under ``data_dir`` (default ``<jupyter data dir>/nbvalidation``)::

    nbvalidation.db                 jobs + events (store/sqlite.py)
    jobs/<uid>/input/               the snapshot taken at submit
    jobs/<uid>/run-<n>/             one validation attempt: result.json, executed.ipynb, runner.log,
                                    pid, owner.json (who started it: engine and runner)
    jobs/<uid>/run-<n>/tree/        its kernel's working copy (workcopy.py), removed after the run
    jobs/<uid>/run-<n>/scratch/     its sandboxed kernel's /tmp and /var/tmp, removed with the copy
    envs/<key>/                     a finished environment (content-addressed; .last-use: its LRU time)
    envs/.tmp-<key>-<rand>/         an environment being built (never used)
    envs/.tmp-<key>-<rand>.owner.json  who builds it (engine and current build step)
    logs/build-<key>-<stamp>.log    build logs

An environment becomes visible atomically: it is built in a temporary folder
and renamed to ``envs/<key>`` only once complete, with a marker file written
last. Every subprocess runs without blocking the event loop.

Several processes (servers, CLIs) may share one data dir: only the holder of
the store's Lease reconciles. A process kills only what it started itself
(an owner record names the engine and the child by pid *and* start time, so a
reused pid is never mistaken for it); a new holder adopts a run or build of
another engine by waiting for its outcome, and stops one only when its owner
is provably dead.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import signal
import socket
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from jupyter_core.paths import jupyter_data_dir, jupyter_runtime_dir
from traitlets import Bool, Enum, Float, Int, List, Unicode, default, validate

from .. import requirements as reqmod
from .. import verdict_cache
from . import build_failure
from ..errors import InputRejected
from ..model import (ROOT_ANNOTATION, WORKDIR_ANNOTATION, Phase, SpecError, build_enabled, isotime, parse_time,
                     spec_fields, validation_attempt)
from ..plan import (Snapshot, ValidationPlan, requirements_key, requirements_of, requirements_sentence,
                    snapshot_from_files)
from ..priority import deprioritize
from ..requirements import Requirements
from ..runner import hygiene, sandbox
from ..runner.environment import forkserver_environment, runner_environment
from ..runner.protocol import ProgressReader
from ..store.base import NotFound as NotFoundError
from ..store.lease import StoreLeaseElector, new_identity
from ..store.sqlite import SQLiteJobStore
from ..tasks import cancel_and_wait, wait_within
from .base import FAILED, RUNNING, SUCCEEDED, Backend, Capabilities, Observation, lease_traits
from . import workcopy
from .forkserver import ForkedRunner, RunnerForkServer
from .local_faults import fault_of_build, fault_of_exit, fault_of_oserror, fault_of_result, is_no_space

RUNNER_COMMAND = [sys.executable, "-m", "jupyter_nbvalidation.runner"]
ENV_MARKER = ".nbvalidation-env.json"
LAST_USE = ".last-use"
ADOPT_POLL = 0.5  # seconds between looks at a run or build another engine started
PROGRESS_POLL = 0.5  # seconds between reads of a running runner's log (its progress records)
PROGRESS_NOTIFY = 1.0  # at most one engine wake-up a second for progress (the engine throttles writes too)
UNSUPPORTED_LOCALLY = {
    "podConfig.containerImage": "needs the kubernetes backend (the local backend runs no containers)",
    "podConfig.buildConfig.baseImage": "needs the kubernetes backend (locally the base is the configured interpreter, c.LocalBackend.python)",
    "podConfig.resources.requests": "needs the kubernetes backend (the local backend sets no resource requests)",
    "podConfig.resources.limits": "needs the kubernetes backend (the local backend sets no resource limits)",
    "podConfig.nodeSelector": "needs the kubernetes backend (the local backend schedules nothing)",
    "podConfig.tolerations": "needs the kubernetes backend (the local backend schedules nothing)",
}


HOST = socket.gethostname()


proc_start = hygiene.live_start_time  # (pid, start time) names one process, whatever reuses the pid later


def process_record(pid: int) -> dict:
    return {"pid": pid, "start": proc_start(pid)}


def same_process_alive(rec: dict | None) -> bool:
    """Whether the process a record names is still running (same pid, same start)."""
    if not rec or not isinstance(rec.get("pid"), int):
        return False
    start = proc_start(rec["pid"])
    return start is not None and start == rec.get("start")


def owner_alive(owner: dict | None) -> bool:
    """Whether the engine named by an owner record may still act: provably dead
    only when it ran on this host and its (pid, start time) is gone."""
    if not owner:
        return False
    if owner.get("host") not in (None, HOST):
        return True  # another machine's process: never assumed dead
    return same_process_alive(owner)


def _write_json_atomic(path: Path, doc: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def isotime_of(epoch: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _dir_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
    return total


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
    proc: asyncio.subprocess.Process | ForkedRunner | None = None
    started_at: str | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # marks every process of the run
    name: str = ""
    adopted: bool = False  # a run another engine started: watched, never killed while its owner lives
    progress: ProgressReader = field(default_factory=ProgressReader)  # from the runner's log, as it grows
    progress_offset: int = 0
    attempt: int = 0  # model.validation_attempt of the job it runs: a retry gets a new run


class LocalBackend(Backend):
    name = "local"
    capabilities = Capabilities(local_requirement_paths=True, constraint_files=True, index_credentials=True,
                                garbage_collection=True)

    data_dir = Unicode(help="Where jobs, environments, logs and the SQLite store live "
                            "(default: <jupyter data dir>/nbvalidation).").tag(config=True)
    python = Unicode(help="Base interpreter of built environments (default: the base interpreter "
                          "of this server's Python).").tag(config=True)
    unbuilt_python = Unicode(help="Interpreter whose kernel validates jobs that disable their build "
                                  "(default: this server's own, which has ipykernel).").tag(config=True)
    build_tool = Enum(["auto", "uv", "venv"], default_value="auto",
                      help="How environments are built: uv when available (auto), always uv, "
                           "or venv + pip.").tag(config=True)
    uv_path = Unicode(help="The uv executable (default: the one of the uv package this one depends on, "
                           "else found on PATH or beside this interpreter).").tag(config=True)
    kernel_packages = List(Unicode(), default_value=["ipykernel"],
                           help="Packages added to every built environment so a kernel can start in it.").tag(config=True)
    max_parallel_builds = Int(None, allow_none=True,
                              help="Deprecated alias of NBValidation.max_concurrent_builds: when set, it is that "
                                   "cap (the engine's admission) for this backend.").tag(config=True)
    max_parallel_validations = Int(None, allow_none=True,
                                   help="Deprecated alias of NBValidation.max_concurrent_validations: when set, it "
                                        "is that cap for this backend.").tag(config=True)
    niceness = Int(10, help="Builds, runners and their kernels run at this `nice` level, so the Jupyter "
                            "server (and the user's own kernels) stay responsive while jobs compute; "
                            "0 disables it.").tag(config=True)
    fork_runners = Bool(True, help="Start each runner by forking a process that has already imported what a "
                                   "runner needs (about 0.6 s less CPU per notebook). Each runner is still a new "
                                   "process of its own, used for one run, with only its run's environment; the "
                                   "kernel is always a new interpreter. False: each runner is a new "
                                   "interpreter.").tag(config=True)
    lease_duration, renew_deadline, retry_period = lease_traits(10.0, 7.0, 1.0, "the data dir's lease")
    job_ttl = Float(30 * 24 * 3600.0, help="Finished jobs (with their events and files) are removed this many "
                                           "seconds after completion, like a Job's ttlSecondsAfterFinished; "
                                           "0 keeps them forever.").tag(config=True)
    env_cache_max_bytes = Int(5 * 2**30, help="Size cap of the environment cache in bytes: the least recently "
                                              "used environments are removed above it (never one a job that "
                                              "is not finished uses); 0 disables the cap.").tag(config=True)
    env_min_idle = Float(600.0, help="An environment used within this many seconds is never evicted.").tag(config=True)
    max_folder_files = Int(20000, help="Most files of a notebook's folder (the one it works in when the job names "
                                       "no spec.inputFiles): each attempt's kernel works in a fresh copy of it, "
                                       "so a larger folder is refused at submit (name the files the notebook "
                                       "reads in spec.inputFiles, or raise this).").tag(config=True)
    max_folder_bytes = Int(2 * 2**30, help="Largest total size in bytes of a notebook's folder, copied for each "
                                          "attempt as max_folder_files says.").tag(config=True)
    keep_outputs_dir = Unicode("", help="Not configurable (the CLI's --keep-outputs, in its own process): after "
                                        "each attempt, the files its notebook created or changed in its working "
                                        "copy are copied to <this folder>/<notebook path without .ipynb>/.")
    sandbox = Enum(["auto", "off"], default_value="auto",
                   help="Linux: run each kernel in a sandbox (user, PID and mount namespaces; no root needed) "
                        "in which it cannot see this server's processes (their environment), the data dir "
                        "(the store, other jobs, environments other than its own), the Jupyter runtime dir "
                        "(the server's token), the user's HOME outside the project, /tmp. auto (the "
                        "default): used when this system allows it (tried at start, shown in /health), "
                        "else kernels run with the user's rights and can reach the store (a warning is "
                        "logged, /health says why); off: never.").tag(config=True)
    gc_interval = Float(3600.0, help="Seconds between two automatic collections (retention and the cache "
                                     "cap) by the lease holder; 0 disables them (`jupyter nbvalidation gc` "
                                     "still works).").tag(config=True)

    @default("data_dir")
    def _data_dir_default(self) -> str:
        return os.path.join(jupyter_data_dir(), "nbvalidation")

    @validate("data_dir")
    def _data_dir_absolute(self, proposal: Any) -> str:
        """A relative data dir (``--data-dir data``) is the folder of that name where the
        server or CLI started: made absolute once, as every path derived from it (the
        store, the runs' folders, what the kernel's sandbox hides) must be."""
        value = str(proposal["value"])
        return os.path.abspath(os.path.expanduser(value)) if value else value

    @default("python")
    def _python_default(self) -> str:
        return getattr(sys, "_base_executable", None) or sys.executable

    @default("unbuilt_python")
    def _unbuilt_python_default(self) -> str:
        return sys.executable

    @default("uv_path")
    def _uv_default(self) -> str:
        # the uv this package depends on first (the default install has it), then PATH
        try:
            from uv import find_uv_bin

            return str(find_uv_bin())
        except (ImportError, FileNotFoundError):
            pass
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
        # the engine admits at most its caps (which these aliases set when given): these
        # semaphores only bound a caller that drives the backend without an engine
        self._build_slots = asyncio.Semaphore(self.max_parallel_builds or 10**6)
        self._run_slots = asyncio.Semaphore(self.max_parallel_validations or 10**6)
        self._python_version: str | None = None
        self._keys: dict[str, str] = {}
        self.identity = new_identity()
        self.elector: StoreLeaseElector | None = None
        self._gc_task: asyncio.Task | None = None
        self.last_gc: dict | None = None
        self._forkserver: RunnerForkServer | None = None
        self._sandbox: dict[str, Any] | None = None  # sandbox.detect(), once
        self._sandbox_lock = asyncio.Lock()
        self._private_paths: list[str] = []

    elects_leader = True

    def owner(self) -> dict:
        """This engine, as recorded on what it starts."""
        return {"holder": self.identity, "host": HOST, **process_record(os.getpid())}

    def _mine(self, owner: dict | None) -> bool:
        return bool(owner) and owner.get("holder") == self.identity

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
        await self._check_python()
        await self.sandbox_state()

    async def sandbox_state(self) -> dict[str, Any]:
        """Whether kernels run in the sandbox (runner/sandbox.py): tried once, in a thread."""
        async with self._sandbox_lock:
            if self._sandbox is None:
                if self.sandbox == "off":
                    info = {"enabled": False, "mode": "off", "uses": [], "reason": "off (LocalBackend.sandbox)",
                            "landlockAbi": None}
                else:
                    found = await asyncio.to_thread(sandbox.detect, self.unbuilt_python)
                    info = {"enabled": bool(found["available"]), "mode": self.sandbox, "uses": found["uses"],
                            "reason": found["reason"], "landlockAbi": found["landlockAbi"]}
                    if not info["enabled"]:
                        self.log.warning("nbvalidation: kernels run without a sandbox (with the user's rights, "
                                         "they can read the data dir and the user's files): %s", info["reason"])
                self._sandbox = info
            return self._sandbox

    def add_private_paths(self, paths: list[str]) -> None:
        self._private_paths += [p for p in paths if p]

    def _sandbox_config(self, job: dict, run_dir: Path) -> dict[str, Any]:
        """What the kernel of this attempt must not see and must see (runner --sandbox),
        and its /tmp and /var/tmp: the attempt's scratch folders on disk (made by
        ``workcopy.make_scratch``, inside the hidden data dir, removed with the copy)."""
        hide = [self.data_dir, jupyter_runtime_dir(), *self._private_paths, os.path.expanduser("~")]
        if os.environ.get("XDG_RUNTIME_DIR"):
            hide.append(os.environ["XDG_RUNTIME_DIR"])
        folder, root, _snapshot = self._working_folder(job)
        # the root is seen also by a job with inputFiles (its copy is its snapshot; an
        # absolute path into the root reads the real file, as without the sandbox)
        root = root or (job["metadata"].get("annotations") or {}).get(ROOT_ANNOTATION)
        tree = str(run_dir / workcopy.TREE)
        show = [p for p in (root, folder) if p] + [tree]
        return {"hide": hide, "show": show, "links": [tree], "scratch": workcopy.scratch_paths(run_dir)}

    async def _check_python(self) -> None:
        proc = await asyncio.create_subprocess_exec(
            self.python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        out, _ = await proc.communicate()
        self._python_version = out.decode().strip() or "unknown"

    async def run_election(self, on_started_leading: Callable[[], None],
                           on_stopped_leading: Callable[[], None]) -> None:
        """One reconciler per data dir: the store's Lease (store/lease.py)."""
        self.elector = StoreLeaseElector(self.store, identity=self.identity, lease_duration=self.lease_duration,
                                         renew_deadline=self.renew_deadline, retry_period=self.retry_period,
                                         log=self.log)

        def started() -> None:
            if self.gc_interval > 0 and (self._gc_task is None or self._gc_task.done()):
                self._gc_task = asyncio.get_running_loop().create_task(self._gc_loop(), name="nbvalidation-gc")
            on_started_leading()

        def stopped() -> None:
            if self._gc_task is not None:
                self._gc_task.cancel()
            on_stopped_leading()

        try:
            await self.elector.run(started, stopped)
        finally:
            if self._gc_task is not None:
                await cancel_and_wait(self._gc_task)

    async def _gc_loop(self) -> None:
        await asyncio.sleep(min(60.0, self.gc_interval))  # not in the way of the take-over
        while True:
            try:
                self.last_gc = await self.collect()
                if self.last_gc["jobs"] or self.last_gc["envs"]:
                    self.log.info("nbvalidation: removed %d finished job(s) and %d environment(s)",
                                  len(self.last_gc["jobs"]), len(self.last_gc["envs"]))
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.log.warning("nbvalidation: garbage collection failed: %s", e)
            await asyncio.sleep(self.gc_interval)

    def owns(self, name: str) -> bool:
        """Whether this process runs something for the job (its own processes)."""
        return any(r.name == name and not r.adopted for r in self._runs.values()) or \
            any(name in b.waiters for b in self._builds.values() if not b.task.done())

    async def drain(self, timeout: float | None = None) -> None:
        """Wait (without killing anything) until the runs and builds this process
        started have ended: after a hand-over, their outcome is on disk for the
        next holder, which adopts it."""
        own = [r.task for r in self._runs.values() if not r.adopted and not r.task.done()]
        own += [b.task for b in self._builds.values() if not b.task.done()]
        if own:
            await asyncio.wait([asyncio.shield(t) for t in own], timeout=timeout)

    async def stop(self) -> None:
        # Builds and runs are children of this process; stop them with it.
        # A later start (or another holder) resumes each job from its persisted phase.
        for b in list(self._builds.values()):
            if b.proc and b.proc.returncode is None:
                hygiene.kill_group(b.proc.pid, signal.SIGKILL)
            b.task.cancel()
        # runners get SIGTERM first, so they shut their kernels down; what such
        # a stopped run writes is not a verdict: mark it, a restart runs again.
        # Adopted runs belong to another engine: only their watch ends here.
        for r in self._runs.values():
            if not r.adopted and r.proc is not None and r.proc.returncode is None:
                await asyncio.to_thread((r.run_dir / "interrupted").write_text, "server stopped")
        await asyncio.gather(*(_terminate(r.proc, r.run_id) for r in self._runs.values()
                               if r.proc is not None and not r.adopted))
        await cancel_and_wait(*(b.task for b in self._builds.values()), *(r.task for r in self._runs.values()))
        self._builds.clear()
        self._job_build.clear()
        self._runs.clear()
        if self._forkserver is not None:
            await self._forkserver.stop()
            self._forkserver = None

    def _sweep_stale_builds(self, key: str | None = None) -> list[dict]:
        """Remove builds left half-done by an engine that is provably dead (killed
        mid-build): its build step, if still running, is stopped (checked by pid
        and start time), its folder removed. A live engine's build is left alone
        and returned (owner records), so the caller can wait for it."""
        envs = self.root / "envs"
        if not envs.is_dir():
            return []
        live: list[dict] = []
        pattern = f".tmp-{key}-*" if key else ".tmp-*"
        bases: set[str] = set()
        for p in envs.glob(pattern):
            base = p.name
            for suffix in (".owner.json", ".pid", ".requirements.txt", ".constraints.txt"):
                if base.endswith(suffix):
                    base = base[: -len(suffix)]
            bases.add(base)
        for base in sorted(bases):
            owner_file = envs / f"{base}.owner.json"
            owner = _read_json(owner_file)
            if owner is None:
                # no owner record: the folder is being set up right now, or is an
                # older version's leftover; only a stale one (an hour) is removed
                with contextlib.suppress(OSError):
                    stamps = [p.stat().st_mtime for p in envs.glob(f"{base}*")]
                    if stamps and time.time() - max(stamps) > 3600:
                        self._remove_build_leftovers(envs, base)
                continue
            if self._mine(owner) or owner_alive(owner):
                if not self._mine(owner):
                    live.append(owner)
                continue
            step = owner.get("step")
            if same_process_alive(step):  # the dead engine's build step, verified: stop it
                hygiene.kill_group(step["pid"], signal.SIGKILL)
            self._remove_build_leftovers(envs, base)
        return live

    @staticmethod
    def _remove_build_leftovers(envs: Path, base: str) -> None:
        tmp = envs / base
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        for suffix in (".pid", ".requirements.txt", ".constraints.txt", ".owner.json"):
            (envs / f"{base}{suffix}").unlink(missing_ok=True)

    # -- spec ------------------------------------------------------------------
    def admission_caps(self) -> tuple[int | None, int | None]:
        """max_parallel_builds / max_parallel_validations: deprecated aliases of the engine's caps."""
        return (self.max_parallel_builds, self.max_parallel_validations)

    def default_admission_caps(self) -> tuple[int | None, int | None]:
        """The engine's caps when it is made without the settings (tests, benchmarks): the
        aliases when set, else 2 and 2 (what this backend allowed before the engine admitted)."""
        return (self.max_parallel_builds or 2, self.max_parallel_validations or 2)

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
    def private_paths(self) -> frozenset[str]:
        """Real paths never part of a notebook's folder as its kernel sees it (its copy,
        its verdict key): this backend's data dir, should it be inside the folder."""
        return frozenset({os.path.realpath(self.data_dir)})

    def check_working_folder(self, folder: str, root: str | None) -> None:
        """The folder a job's kernel will work in a copy of, within max_folder_files and
        max_folder_bytes, or InputRejected naming it (submit refuses; nothing is made).
        A walk of the folder by ``stat``: call it in a thread."""
        try:
            verdict_cache.folder_size(folder, root, self.private_paths(), self.max_folder_files,
                                      self.max_folder_bytes)
        except verdict_cache.FolderTooLarge as e:
            raise InputRejected(folder_refusal(folder, e, self.max_folder_files, self.max_folder_bytes),
                                "spec.notebook.path", status=413, code="TooLarge") from None
        except OSError as e:
            raise InputRejected(f"spec.notebook.path: the notebook's folder {folder} cannot be read: "
                                f"{e.strerror or e}", "spec.notebook.path") from None

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

    def _snapshot(self, job: dict) -> Snapshot:
        inp = self.job_dir(job) / "input"  # gone: no names, which make_plan refuses
        names = frozenset(p.relative_to(inp).as_posix() for p in inp.rglob("*") if p.is_file())
        return snapshot_from_files(names, lambda name: (inp / name).read_text(encoding="utf-8"))

    async def read_snapshot(self, job: dict) -> Snapshot:
        return await asyncio.to_thread(self._snapshot, job)

    def _env_key_of(self, requirements_key: str) -> str:
        ident = {
            "python": os.path.realpath(self.python),
            "version": self._python_version,
            "requirements": requirements_key,
            "kernel": sorted(self.kernel_packages),
        }
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:20]

    def _unplanned_env_key(self, job: dict) -> str:
        """The environment of a job this process has no plan for (another
        process reconciles it): from its snapshot, as its plan would have it."""
        return self._env_key_of(requirements_key(requirements_of(job, self._snapshot(job))))

    def env_key(self, plan: ValidationPlan) -> str:
        """The environment of a plan here: this interpreter, its version and
        the kernel packages + the plan's requirements key (the requirement
        lines and the content of every local path they name, so editing a
        local package rebuilds)."""
        return self._env_key_of(plan.requirements_key)

    async def verdict_environment(self, spec: dict, requirements: Requirements) -> str | None:
        """The kernel's environment as the verdict cache keys it (verdict_cache):
        a built one by its environment key, an unbuilt one (the build disabled) by
        its interpreter and every distribution installed in it; None when that is
        not known here (the version of ``python`` not read yet, an unbuilt
        interpreter other than this process's, a local path that cannot be hashed).
        Hashes local paths and lists site-packages: in a thread."""
        def identity() -> str | None:
            try:
                key = requirements_key(requirements) if build_enabled(spec) else None
            except (OSError, ValueError):
                return None
            return self._verdict_environment(key)

        return await asyncio.to_thread(identity)

    async def same_verdict_environment(self, job: dict, environment: str) -> bool:
        """An unbuilt environment is in the key whole (the interpreter and every
        distribution); a built one must still be there and not have been built
        again since the job's validation started (an environment evicted and built
        again may resolve its requirements to other versions). Reads files: in a thread."""
        st = job.get("status") or {}
        if not build_enabled(job.get("spec") or {}):
            return True
        reference = (st.get("buildStatus") or {}).get("imageReference")
        started = (st.get("validationStatus") or {}).get("startTime")
        if not reference or not started:
            return False
        built, validated = parse_time(await asyncio.to_thread(self.environment_built_at, reference)), parse_time(started)
        return built is not None and validated is not None and built <= validated

    def _verdict_environment(self, requirements_key: str | None) -> str | None:
        if requirements_key is not None:
            if self._python_version is None:
                return None
            return "built:" + self._env_key_of(requirements_key)
        dists = verdict_cache.installed_distributions(self.unbuilt_python)
        return None if dists is None else f"unbuilt:{os.path.realpath(self.unbuilt_python)}:{dists}"

    def environment_built_at(self, reference: str) -> str | None:
        """When the environment at ``reference`` (a job's buildStatus.imageReference)
        was built, or None when it is not there (evicted): the verdict cache
        reuses a verdict only in the very environment it was given in."""
        path = Path(reference)
        if path.parent.resolve() != (self.root / "envs").resolve() or not (path / ENV_MARKER).is_file():
            return None
        return self._read_marker(path.name).get("completionTime") or None

    async def prepare(self, job: dict, plan: ValidationPlan) -> str:
        self._keys[job["metadata"]["uid"]] = self.env_key(plan)
        return f"{plan.detected}."

    # -- build -----------------------------------------------------------------
    def _env_ready(self, key: str) -> bool:
        return (self.env_dir(key) / ENV_MARKER).is_file()

    async def ensure_build(self, job: dict, plan: ValidationPlan) -> Observation:
        uid = job["metadata"]["uid"]
        key = self._keys[uid] = self.env_key(plan)
        strategy = self.build_strategy(job)
        rec = self._job_build.get(uid)
        if rec is None and await asyncio.to_thread(self._use_env, key):
            marker = await asyncio.to_thread(self._read_marker, key)
            return Observation(SUCCEEDED, reference=str(self.env_dir(key)), finished_at=isotime(),
                               message="Reused the cached environment (same interpreter and requirements).",
                               log_path=marker.get("log"), strategy=marker.get("strategy", strategy))
        if rec is not None and rec.task.done():
            return rec.task.result()
        if rec is None:
            build = self._builds.get(key)
            shared = self._shared_failure(build, job)
            if shared is not None:
                return shared
            if build is None or build.task.done():
                try:  # a copy: the credentials' values never reach the plan
                    reqs = await asyncio.to_thread(reqmod.for_build, job, dataclasses.replace(plan.requirements))
                except ValueError as e:
                    return Observation(FAILED, message=str(e), finished_at=isotime(), strategy=strategy)
                # another job of the same environment may have started its build meanwhile: join it
                build = self._builds.get(key)
                if build is None or build.task.done():
                    stamp = isotime().replace(":", "").replace(".", "")
                    log_path = str(self.root / "logs" / f"build-{key}-{stamp}.log")
                    build = _Build(key=key, task=None, log_path=log_path)  # type: ignore[arg-type]
                    build.task = asyncio.get_running_loop().create_task(
                        self._build_or_adopt(build, reqs, strategy, log_path))
                    self._builds[key] = build
            build.waiters.add(job["metadata"]["name"])
            self._job_build[uid] = build
        return Observation(RUNNING, message="Building the environment.", log_path=self._job_build[uid].log_path,
                           strategy=strategy)

    @staticmethod
    def _shared_failure(build: _Build | None, job: dict) -> Observation | None:
        """A build of this environment that failed for good after the job was submitted:
        the job waited on it (queued for a build slot meanwhile), so it gets that failure
        without building again. A job submitted after the failure builds anew (failures are
        never cached: the package index may have changed)."""
        if build is None or not build.task.done() or build.task.cancelled() or build.task.exception() is not None:
            return None
        obs = build.task.result()
        submitted = job["metadata"].get("creationTimestamp") or ""
        if obs.state != FAILED or obs.fault is not None or not obs.finished_at or submitted > obs.finished_at:
            return None
        return dataclasses.replace(obs, message=f"{obs.message} (the build of this environment that failed "
                                                f"while the job waited for it; not built again)")

    def _use_env(self, key: str) -> bool:
        """Whether the environment is ready; if so its last use is now (the cache's LRU order)."""
        if not self._env_ready(key):
            return False
        with contextlib.suppress(OSError):
            (self.env_dir(key) / LAST_USE).touch()
        return self._env_ready(key)

    async def _build_or_adopt(self, build: _Build, requirements: Requirements, strategy: str,
                              log_path: str) -> Observation:
        """Build the environment, unless another live engine is building the same
        one: then wait for its outcome (a dead engine's half-build is removed)."""
        key = build.key
        adopted = False
        while await asyncio.to_thread(self._sweep_stale_builds, key):
            adopted = True
            await asyncio.sleep(ADOPT_POLL)
        if adopted and await asyncio.to_thread(self._use_env, key):
            marker = await asyncio.to_thread(self._read_marker, key)
            for name in build.waiters:
                self._notify(name)
            return Observation(SUCCEEDED, reference=str(self.env_dir(key)), finished_at=isotime(),
                               message="Reused the environment another server or CLI built.",
                               log_path=marker.get("log"), strategy=marker.get("strategy", strategy))
        return await self._build(build, requirements, strategy, log_path)

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
            await asyncio.to_thread(self._record_build_step, build.pid_file, proc.pid)
        try:
            return await proc.wait()
        except asyncio.CancelledError:
            hygiene.kill_group(proc.pid, signal.SIGKILL)
            raise

    async def _build(self, build: _Build, requirements: Requirements, strategy: str, log_path: str) -> Observation:
        key = build.key  # its own record: its waiters are the ones told when it ends
        started = isotime()
        tmp = self.root / "envs" / f".tmp-{key}-{uuid.uuid4().hex[:8]}"
        try:
            async with self._build_slots:
                return await self._build_in(build, key, requirements, strategy, log_path, tmp, started)
        except (OSError, ValueError) as e:
            return Observation(FAILED, message=f"The environment build could not run: {e}", started_at=started,
                               finished_at=isotime(), log_path=log_path, strategy=strategy,
                               fault=fault_of_oserror(e, tmp.parent) if is_no_space(e) else None)
        finally:
            if tmp.exists():
                await asyncio.to_thread(shutil.rmtree, tmp, True)
            await asyncio.to_thread((tmp.parent / f"{tmp.name}.owner.json").unlink, True)
            for name in build.waiters:
                self._notify(name)

    def _record_build_step(self, pid_file: Path, pid: int) -> None:
        pid_file.write_text(str(pid))
        owner_file = pid_file.with_name(pid_file.name[: -len(".pid")] + ".owner.json")
        _write_json_atomic(owner_file, {**self.owner(), "step": process_record(pid)})

    async def _build_in(self, build: _Build, key: str, requirements: Requirements, strategy: str,
                        log_path: str, tmp: Path, started: str) -> Observation:
        text, constraints = requirements.build_files()  # ${NBV_SECRET_<n>} where credentials go

        owner_file = tmp.parent / f"{tmp.name}.owner.json"

        def setup() -> tuple[Path, Path | None]:
            tmp.parent.mkdir(parents=True, exist_ok=True)
            _write_json_atomic(owner_file, self.owner())  # before anything else exists
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
                        log.flush()
                        text = await asyncio.to_thread(_read_text, log_path)
                        # the installer's own error lines first, then a short tail (the whole log: /buildlog)
                        message = build_failure.summary(text, f"{Path(argv[0]).name} {' '.join(argv[1:3])}",
                                                        code, list(secrets.values()))
                        return Observation(FAILED, message=message,
                                           started_at=started, finished_at=isotime(), log_path=log_path,
                                           strategy=strategy, fault=fault_of_build(tail, tmp.parent))
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
            with contextlib.suppress(OSError):
                (target / LAST_USE).touch()

        await asyncio.to_thread(publish)
        return Observation(SUCCEEDED, reference=str(self.env_dir(key)), started_at=started,
                           finished_at=isotime(), log_path=log_path, strategy=strategy,
                           message=f"Built with {strategy} ({requirements_sentence(requirements.count, None)}).")

    async def cancel_build(self, job: dict) -> None:
        rec = self._job_build.pop(job["metadata"]["uid"], None)
        if rec is None:
            return
        rec.waiters.discard(job["metadata"]["name"])
        if not rec.waiters and not rec.task.done():
            await cancel_and_wait(rec.task)

    # -- validation ------------------------------------------------------------
    async def ensure_validation(self, job: dict, reference: str | None, plan: ValidationPlan) -> Observation:
        uid = job["metadata"]["uid"]
        attempt = validation_attempt(job)
        run = self._runs.get(uid)
        if run is not None and run.attempt < attempt:  # a retry: the failed attempt is discarded
            await self.cancel_validation(job)
            run = None
        if run is not None and run.task.done() and run.adopted and run.task.result().extra.get("again"):
            del self._runs[uid]  # the adopted run will never finish: this engine runs it again
            run = None
        if run is not None:
            if run.task.done():
                return run.task.result()
            return Observation(RUNNING, message="Validating.", started_at=run.started_at, reference=reference,
                               extra=_progress_extra(run))

        try:
            run_dir, state = await asyncio.to_thread(self._locate, job, attempt)
        except OSError as e:
            if not is_no_space(e):
                raise
            return Observation(FAILED, reference=reference, finished_at=isotime(), message=str(e),
                               fault=fault_of_oserror(e, self.job_dir(job)))
        if state == "result":
            result = _read_json(run_dir / "result.json") or {}
            meta = _read_json(run_dir / "run.json") or {}
            return _observation_from_result(result, meta.get("startTime"), meta.get("completionTime"), reference,
                                            run_dir)
        if state == "foreign":
            # another engine's run (a follower that started it while it led, or a
            # killed holder's runner still at work): watch it, never start a second one
            run = _Run(task=None, run_dir=run_dir, name=job["metadata"]["name"], adopted=True,  # type: ignore[arg-type]
                       attempt=attempt)
            run.task = asyncio.get_running_loop().create_task(self._adopt(job, run, reference))
            self._runs[uid] = run
            return Observation(RUNNING, message="Validating (a run another server or CLI started).",
                               reference=reference)

        if reference is not None:
            if not await asyncio.to_thread((Path(reference) / ENV_MARKER).is_file):
                return Observation(FAILED, reference=reference, finished_at=isotime(),
                                   message=f"The environment recorded at BuildComplete ({reference}) is missing "
                                           "or incomplete; refusing to validate elsewhere.")
            python = str(Path(reference) / "bin" / "python")
        else:
            python = self.unbuilt_python
        await asyncio.to_thread(self._touch_env, reference)
        run = _Run(task=None, run_dir=run_dir, name=job["metadata"]["name"], attempt=attempt)  # type: ignore[arg-type]
        run.task = asyncio.get_running_loop().create_task(self._validate(job, run, python, reference, plan))
        self._runs[uid] = run
        return Observation(RUNNING, message="Validation queued.", reference=reference)

    @staticmethod
    def _touch_env(reference: str | None) -> None:
        if reference:
            with contextlib.suppress(OSError):
                (Path(reference) / LAST_USE).touch()

    def _run_state(self, run_dir: Path) -> str:
        """What an attempt on disk is: ``result`` (a verdict to read), ``foreign``
        (another engine's, still to be waited for), ``failed`` (its runner ended
        without a result and its owner recorded the exit), ``dead`` (no verdict
        will come: its runner and owner are gone, or it was interrupted)."""
        interrupted = (run_dir / "interrupted").exists()
        owner = _read_json(run_dir / "owner.json")
        runner = (owner or {}).get("runner")
        if same_process_alive(runner) and not self._mine(owner):
            return "foreign"  # wait for it even when interrupted: never two runners at once
        if not interrupted and (run_dir / "result.json").is_file():
            if _read_json(run_dir / "result.json") is not None:
                return "result"
            if same_process_alive(runner):
                return "foreign"  # being written
        if interrupted:
            return "dead"
        if self._mine(owner) or not owner_alive(owner):
            return "dead"  # ours but not in memory, or its engine is gone: it will not finish
        if (run_dir / "run.json").is_file():
            return "failed"  # its (live) owner saw the runner exit without a result
        return "foreign"  # its live owner is about to start it, or to record how it ended

    def _locate(self, job: dict, attempt: int = 0) -> tuple[Path, str]:
        """The newest run folder and its state (see ``_run_state``), or a new run
        folder (state ``new``) owned by this engine when there is none to wait for.
        A run of an earlier attempt (``model.validation_attempt``: the engine
        retried after a fault) is not waited for: retry n gets a fresh folder
        (one still running for another engine is, never two runners at once)."""
        runs = sorted(self.job_dir(job).glob("run-*"), key=lambda p: int(p.name.split("-")[1]))
        if runs:
            state = self._run_state(runs[-1])
            if state == "foreign" or (state != "dead" and _attempt_of(runs[-1]) >= attempt):
                return runs[-1], state
        n = int(runs[-1].name.split("-")[1]) + 1 if runs else 1
        run_dir = self.job_dir(job) / f"run-{n}"
        run_dir.mkdir(parents=True)  # exclusive: two engines never make the same attempt
        _write_json_atomic(run_dir / "owner.json", self.owner())
        if attempt:
            (run_dir / "attempt").write_text(str(attempt))
        return run_dir, "new"

    async def _adopt(self, job: dict, run: _Run, reference: str | None) -> Observation:
        """Wait for another engine's run to end, then read what it left."""
        name = job["metadata"]["name"]
        last_notify = 0.0
        try:
            while True:
                if await self._read_progress(run, run.run_dir / "runner.log") and \
                        time.monotonic() - last_notify >= PROGRESS_NOTIFY:
                    last_notify = time.monotonic()
                    self._notify(name)
                state = await asyncio.to_thread(self._run_state, run.run_dir)
                if state == "result":
                    result = await asyncio.to_thread(_read_json, run.run_dir / "result.json")
                    meta = await asyncio.to_thread(_read_json, run.run_dir / "run.json") or {}
                    await self._read_progress(run, run.run_dir / "runner.log")
                    obs = _observation_from_result(result or {}, meta.get("startTime"),
                                                   meta.get("completionTime"), reference, run.run_dir)
                    obs.extra.update(_progress_extra(run))
                    return obs
                if state == "failed":
                    meta = await asyncio.to_thread(_read_json, run.run_dir / "run.json") or {}
                    tail = await asyncio.to_thread(_tail, str(run.run_dir / "runner.log"), 8)
                    fault = await asyncio.to_thread(fault_of_exit, meta.get("exitCode"), tail, run.run_dir)
                    return Observation(FAILED, started_at=meta.get("startTime"),
                                       finished_at=meta.get("completionTime"), reference=reference,
                                       message=fault.cause, fault=fault)
                if state == "dead":
                    return Observation(RUNNING, reference=reference, extra={"again": True})
                await asyncio.sleep(ADOPT_POLL)
        finally:
            self._notify(name)

    def _record_runner(self, run: _Run, pid: int) -> None:
        (run.run_dir / "pid").write_text(str(pid))
        _write_json_atomic(run.run_dir / "owner.json", {**self.owner(), "runner": process_record(pid)})

    def _working_folder(self, job: dict) -> tuple[str | None, str | None, str | None]:
        """(folder, root, snapshot) the attempt's working copy is made from: the notebook's
        folder (under a mirror of the root) or, with spec.inputFiles, the job's snapshot
        of the files it named (an older job without the folder recorded: its input folder)."""
        inp = self.job_dir(job) / "input"
        annotations = job["metadata"].get("annotations") or {}
        folder = None if job["spec"].get("inputFiles") else annotations.get(WORKDIR_ANNOTATION)
        if folder:
            return folder, annotations.get(ROOT_ANNOTATION), None
        return None, None, str(inp / "inputs" if job["spec"].get("inputFiles") else inp)

    def runner_argv(self, job: dict, run_dir: Path, python: str, plan: ValidationPlan) -> list[str]:
        """The runner's command: where things are here, then what the plan asks (``plan.runner_args``)."""
        inp = self.job_dir(job) / "input"
        # the kernel works in the attempt's own copy of its folder (workcopy.prepare makes it)
        folder, root, snapshot = self._working_folder(job)
        cwd = workcopy.working_path(run_dir, folder=folder, root=root, snapshot=snapshot)
        argv = [*RUNNER_COMMAND, str(inp / "notebook.ipynb"),
                "--python", python, "--cwd", cwd,
                "--result", str(run_dir / "result.json"), "--executed", str(run_dir / "executed.ipynb"),
                "--progress"]
        if plan.golden:
            argv += ["--golden", str(inp / "golden.ipynb")]
        argv += plan.runner_args
        if plan.kernel_env:  # for the kernel only, never the runner's own environment
            argv += ["--kernel-env-file", str(run_dir / "kernel-env.json")]
        if self._sandbox is not None and self._sandbox["enabled"]:
            argv += ["--sandbox", str(run_dir / "sandbox.json")]
        return argv

    async def _validate(self, job: dict, run: _Run, python: str, reference: str | None,
                        plan: ValidationPlan) -> Observation:
        name = job["metadata"]["name"]
        try:
            obs = await self._validate_in(job, run, python, reference, plan)
            if self.keep_outputs_dir:
                await self._keep_outputs(job, run.run_dir)
            # the runner and its kernel have ended and the result is read: the attempt's
            # copy of the folder goes now (cancel, cleanup and the GC remove what is left otherwise)
            with contextlib.suppress(OSError):
                await asyncio.to_thread(workcopy.remove, run.run_dir)
            return obs
        except OSError as e:  # our own writes (the run folder, its log, its files): not the notebook's
            fault = fault_of_oserror(e, run.run_dir)
            return Observation(FAILED, started_at=run.started_at, finished_at=isotime(), reference=reference,
                               message=fault.cause, fault=fault)
        finally:
            self._notify(name)

    async def _validate_in(self, job: dict, run: _Run, python: str, reference: str | None,
                           plan: ValidationPlan) -> Observation:
        async with self._run_slots:
            run.started_at = isotime()
            sandboxed = (await self.sandbox_state())["enabled"]
            argv = self.runner_argv(job, run.run_dir, python, plan)
            log_path = run.run_dir / "runner.log"

            def setup() -> dict[str, str]:
                # a fresh copy of the folder the kernel works in (the user's is never
                # written); the copies of this job's earlier attempts go
                for earlier in self.job_dir(job).glob("run-*"):
                    if earlier != run.run_dir:
                        workcopy.remove(earlier)
                folder, root, snapshot = self._working_folder(job)
                workcopy.prepare(run.run_dir, folder=folder, root=root, snapshot=snapshot,
                                 skip=self.private_paths(), max_files=self.max_folder_files,
                                 max_bytes=self.max_folder_bytes)
                # the runner's environment: an allow-list, nothing of this server's
                # (token, runtime/data dirs, IPython profile, PYTHONPATH); the job's
                # podConfig.env goes to the kernel only, through a file
                kernel_env = dict(plan.kernel_env)
                if kernel_env:
                    (run.run_dir / "kernel-env.json").write_text(json.dumps(kernel_env), encoding="utf-8")
                (run.run_dir / "run-id").write_text(run.run_id)
                if sandboxed:  # its /tmp and /var/tmp: fresh folders of this attempt, on disk
                    workcopy.make_scratch(run.run_dir)
                    (run.run_dir / "sandbox.json").write_text(json.dumps(self._sandbox_config(job, run.run_dir)),
                                                              encoding="utf-8")
                return runner_environment(str(run.run_dir / "runner"), run.run_id)

            try:
                env = await asyncio.to_thread(setup)
            except verdict_cache.FolderTooLarge as e:  # it grew since submit checked it
                await asyncio.to_thread(workcopy.remove, run.run_dir)
                folder = self._working_folder(job)[0] or "?"
                return Observation(FAILED, started_at=run.started_at, finished_at=isotime(), reference=reference,
                                   message=folder_refusal(folder, e, self.max_folder_files, self.max_folder_bytes))
            with open(log_path, "w", encoding="utf-8") as log:
                proc = await self._start_runner(argv, env, log.fileno())
                run.proc = proc
                deprioritize(proc.pid, self.niceness)
                await asyncio.to_thread(self._record_runner, run, proc.pid)
                watcher = asyncio.get_running_loop().create_task(self._watch_progress(run, log_path))
                try:
                    code = await proc.wait()
                except asyncio.CancelledError:
                    hygiene.kill_group(proc.pid, signal.SIGKILL)
                    await asyncio.shield(asyncio.to_thread(hygiene.kill_all, run.run_id))
                    raise
                finally:
                    await cancel_and_wait(watcher)
            await self._read_progress(run, log_path)  # the last records: done/total as the run ended
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
                fault = await asyncio.to_thread(fault_of_exit, code, tail, run.run_dir)
                return Observation(FAILED, started_at=run.started_at, finished_at=finished, reference=reference,
                                   message=fault.cause, extra=_progress_extra(run), fault=fault)
            obs = _observation_from_result(result, run.started_at, finished, reference, run.run_dir)
            obs.extra.update(_progress_extra(run))
            return obs

    async def _keep_outputs(self, job: dict, run_dir: Path) -> None:
        """--keep-outputs: what the attempt's notebook wrote in its copy, out of the run
        folder (never into the project; a failure to is logged, the verdict stands)."""
        folder, root, snapshot = self._working_folder(job)
        copy = workcopy.working_path(run_dir, folder=folder, root=root, snapshot=snapshot)
        dest = Path(self.keep_outputs_dir) / Path(job["spec"]["notebook"]["path"].strip()).with_suffix("")
        try:
            await asyncio.to_thread(workcopy.keep_changes, copy, folder or snapshot or "", dest)
        except OSError as e:
            self.log.warning("nbvalidation: keeping the outputs of %s in %s failed: %s",
                             job["metadata"]["name"], dest, e)

    async def _start_runner(self, argv: list[str], env: dict[str, str],
                            log_fd: int) -> asyncio.subprocess.Process | ForkedRunner:
        """A new runner process (its own session, ``env`` only, output on ``log_fd``):
        forked by the fork server when it serves, else a new interpreter."""
        if self.fork_runners:  # argv is RUNNER_COMMAND + the runner's arguments (runner_argv)
            if self._forkserver is None:
                self._forkserver = RunnerForkServer(
                    env=forkserver_environment(), cwd=str(self.root / "forkserver"), wrap=self._niced,
                    log_path=str(self.root / "forkserver.log"), log=self.log)
            try:
                cwd = os.getcwd()  # where a new interpreter would start: this process's folder
            except OSError:  # removed under us
                cwd = "/"
            forked = await self._forkserver.spawn(argv[len(RUNNER_COMMAND):], env, cwd, log_fd)
            if forked is not None:
                return forked
        return await asyncio.create_subprocess_exec(
            *self._niced(argv), stdout=log_fd, stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True, env=env)

    async def _read_progress(self, run: _Run, log_path: Path) -> bool:
        """Feed what the runner's log gained since the last read (in a thread: no
        file I/O on the event loop); True when the progress changed."""
        def read() -> bytes:
            try:
                with open(log_path, "rb") as f:
                    f.seek(run.progress_offset)
                    return f.read()
            except OSError:
                return b""

        data = await asyncio.to_thread(read)
        run.progress_offset += len(data)
        return run.progress.feed(data) if data else False

    async def _watch_progress(self, run: _Run, log_path: Path) -> None:
        """While the runner runs: read its progress records as they come and wake
        the engine (at most once a second), which writes ``status.progress``."""
        last_notify = 0.0
        pending = False
        while True:
            await asyncio.sleep(PROGRESS_POLL)
            pending = await self._read_progress(run, log_path) or pending
            if pending and time.monotonic() - last_notify >= PROGRESS_NOTIFY:
                pending, last_notify = False, time.monotonic()
                self._notify(run.name)

    async def cancel_validation(self, job: dict) -> None:
        run = self._runs.pop(job["metadata"]["uid"], None)
        if run is None or run.adopted:
            # a run this engine did not start is stopped only when its owner is provably
            # dead; a live owner stops its own when it sees the job cancelled (``owns``)
            if run is not None and not run.task.done():
                await cancel_and_wait(run.task)
            await asyncio.to_thread(self._stop_orphan_run, job)
            return
        if run.proc is not None:
            await _terminate(run.proc, run.run_id)
        if not run.task.done():
            await cancel_and_wait(run.task)
        await asyncio.to_thread(workcopy.remove, run.run_dir)  # the attempt's copy of the folder

    def _stop_orphan_run(self, job: dict) -> None:
        last = self._latest_run(job)
        owner = _read_json(last / "owner.json") if last is not None else None
        if owner is None or self._mine(owner) or owner_alive(owner):
            return
        runner = owner.get("runner")
        if same_process_alive(runner):  # verified pid and start time: the dead engine's runner
            hygiene.kill_group(runner["pid"], signal.SIGTERM)

    async def cleanup(self, job: dict) -> None:
        uid = job["metadata"]["uid"]
        rec = self._job_build.pop(uid, None)
        if rec is not None:
            rec.waiters.discard(job["metadata"]["name"])
        run = self._runs.pop(uid, None)
        if run is not None and not run.task.done():
            if not run.adopted and run.proc is not None and run.proc.returncode is None:
                hygiene.kill_group(run.proc.pid, signal.SIGKILL)
            run.task.cancel()
            await asyncio.wait({run.task}, timeout=10)  # its kernel stopped before its folder goes
        self._keys.pop(uid, None)
        reqmod.release(job["metadata"]["name"])
        await asyncio.to_thread(self._remove_copies, job)

    def _remove_copies(self, job: dict) -> None:
        """The working copies of a job's attempts, gone (the run data: result, executed
        notebook, logs, stay); one another engine's live runner works in is left to it
        (the GC's sweep removes it once the job has ended)."""
        for run_dir in self.job_dir(job).glob("run-*"):
            if ((run_dir / workcopy.TREE).exists() or (run_dir / workcopy.SCRATCH).exists()) \
                    and self._run_state(run_dir) != "foreign":
                workcopy.remove(run_dir)

    # -- lifecycle: deletion, retention, the environment cache --------------------
    async def delete_job(self, job: dict) -> None:
        """Remove a finished job: its record and events, then its folder
        (snapshot, runs, executed notebook)."""
        await self.store.delete(job["metadata"]["name"])
        await self.cleanup(job)
        await asyncio.to_thread(shutil.rmtree, self.job_dir(job), True)

    async def _keys_in_use(self) -> set[str]:
        """Environments a job that has not finished uses or will use."""
        keys = {b.key for b in self._builds.values() if not b.task.done()}
        active = await self.store.list_active()
        if self._python_version is None and any(build_enabled(j["spec"]) for j in active):
            await self._check_python()

        def compute() -> set[str]:
            out: set[str] = set()
            for job in active:
                ref = ((job.get("status") or {}).get("buildStatus") or {}).get("imageReference")
                if ref:
                    out.add(Path(ref).name)
                if build_enabled(job["spec"]):
                    key = self._keys.get(job["metadata"]["uid"])
                    if key is None:  # a job this process has not planned (yet): its environment from its snapshot
                        try:
                            key = self._unplanned_env_key(job)
                        except Exception:  # unreadable inputs: that job cannot reuse a cached environment
                            continue
                    out.add(key)
            return out

        return keys | await asyncio.to_thread(compute)

    def _env_entries(self) -> list[dict]:
        envs = self.root / "envs"
        out = []
        if not envs.is_dir():
            return out
        for d in envs.iterdir():
            if d.name.startswith(".") or not d.is_dir() or not (d / ENV_MARKER).is_file():
                continue
            try:
                last = max((d / f).stat().st_mtime for f in (LAST_USE, ENV_MARKER) if (d / f).exists())
            except (OSError, ValueError):
                continue
            out.append({"key": d.name, "bytes": _dir_bytes(d), "lastUseEpoch": last})
        return out

    def _evict(self, key: str) -> None:
        """Out of sight first (one rename, so nothing half-removed is ever used), then removed."""
        gone = self.root / "envs" / f".evict-{key}-{uuid.uuid4().hex[:8]}"
        os.rename(self.env_dir(key), gone)
        shutil.rmtree(gone, ignore_errors=True)

    def _sweep_orphan_job_dirs(self, uids: set[str], older_than: float = 3600.0) -> list[str]:
        """Job folders without a job (a crash between a delete's two steps); young
        ones are left alone (a submit writes its folder before its record)."""
        jobs = self.root / "jobs"
        removed = []
        if not jobs.is_dir():
            return removed
        for d in jobs.iterdir():
            with contextlib.suppress(OSError):
                if d.is_dir() and d.name not in uids and time.time() - d.stat().st_mtime > older_than:
                    shutil.rmtree(d, ignore_errors=True)
                    removed.append(d.name)
        for d in (self.root / "envs").glob(".evict-*") if (self.root / "envs").is_dir() else ():
            shutil.rmtree(d, ignore_errors=True)
        return removed

    async def collect(self, job_ttl: float | None = None, env_cache_max_bytes: int | None = None) -> dict:
        """Retention (finished jobs older than ``job_ttl``) and the environment
        cache cap (least recently used first, never one in use); returns what
        was removed."""
        ttl = self.job_ttl if job_ttl is None else job_ttl
        cap = self.env_cache_max_bytes if env_cache_max_bytes is None else env_cache_max_bytes
        report: dict[str, Any] = {"jobs": [], "orphanDirs": [], "envs": [], "jobTtlSeconds": ttl,
                                  "envCacheMaxBytes": cap, "time": isotime()}
        if ttl and ttl > 0:
            cutoff = time.time() - ttl
            for job in await self.store.list_finished():
                st = job.get("status") or {}
                finished = parse_time(st.get("completionTime"))
                if finished is not None and finished.timestamp() < cutoff:
                    try:
                        await self.delete_job(job)
                    except NotFoundError:
                        continue  # deleted meanwhile
                    report["jobs"].append({"name": job["metadata"]["name"], "completionTime": st["completionTime"]})
        finished = await self.store.list_finished()  # copies an engine could not remove at the end

        def sweep_copies() -> None:
            for job in finished:
                self._remove_copies(job)

        await asyncio.to_thread(sweep_copies)
        uids = await self.store.all_uids()
        report["orphanDirs"] = await asyncio.to_thread(self._sweep_orphan_job_dirs, uids)
        entries = await asyncio.to_thread(self._env_entries)
        total = sum(e["bytes"] for e in entries)
        if cap and cap > 0 and total > cap:
            in_use = await self._keys_in_use()
            now = time.time()
            for e in sorted(entries, key=lambda e: e["lastUseEpoch"]):
                if total <= cap:
                    break
                if e["key"] in in_use or now - e["lastUseEpoch"] < self.env_min_idle:
                    continue
                try:
                    await asyncio.to_thread(self._evict, e["key"])
                except OSError:
                    continue
                total -= e["bytes"]
                report["envs"].append({"key": e["key"], "bytes": e["bytes"],
                                       "lastUse": isotime_of(e["lastUseEpoch"])})
        report["envCacheBytes"] = total
        return report

    # -- artefacts ---------------------------------------------------------------
    def _latest_run(self, job: dict) -> Path | None:
        runs = sorted(self.job_dir(job).glob("run-*"), key=lambda p: int(p.name.split("-")[1]))
        return runs[-1] if runs else None

    async def executed_notebook(self, job: dict) -> dict | None:
        def read() -> dict | None:
            run = self._latest_run(job)
            if run is None or not (run / "executed.ipynb").is_file():
                return None
            import nbformat  # here, not at import time: importing it imports jsonschema

            # nbformat.read rejoins multi-line strings: clients get plain strings
            return nbformat.read(str(run / "executed.ipynb"), as_version=4)

        return await asyncio.to_thread(read)

    async def build_log(self, job: dict) -> str | None:
        """The build log: the one recorded at the end of Building, or during
        Building the one being written (found by the environment's key, so a
        server that does not run the build serves it too)."""
        status = job.get("status") or {}
        path = (status.get("buildStatus") or {}).get("logPath")
        if not path and status.get("phase") == Phase.BUILDING and build_enabled(job["spec"]):
            rec = self._job_build.get(job["metadata"]["uid"])
            mine = rec.log_path if rec is not None else None
            # not this process's build (or it waits for another engine's): the log being written
            path = mine if mine and await asyncio.to_thread(os.path.exists, mine) else \
                await asyncio.to_thread(self._log_being_written, job)
        if not path:
            return None

        def read() -> str | None:
            try:
                return Path(path).read_text(encoding="utf-8", errors="replace")
            except OSError:
                return None

        return await asyncio.to_thread(read)

    def _log_being_written(self, job: dict) -> str | None:
        """The newest build log of the job's environment started since the job
        entered Building (an older one is another build's)."""
        key = self._keys.get(job["metadata"]["uid"])
        if key is None:
            if self._python_version is None:
                return None
            try:
                key = self._unplanned_env_key(job)
            except Exception:  # unreadable inputs: no build is running for them
                return None
        since = 0.0
        for t in reversed((job.get("status") or {}).get("transitions") or []):
            if t.get("phase") == Phase.BUILDING:
                entered = parse_time(t.get("time"))
                since = entered.timestamp() - 2.0 if entered else 0.0
                break
        logs = []
        for p in (self.root / "logs").glob(f"build-{key}-*.log"):
            with contextlib.suppress(OSError):
                if p.stat().st_mtime >= since:
                    logs.append(p)
        return str(max(logs, key=lambda p: p.name)) if logs else None

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
        if self.store.problem:  # a store that cannot be read: nothing works until it is repaired
            usable, problem = False, self.store.problem
        elif self._python_version is None:
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
            "lease": await self.lease_state(),
            "lastGc": self.last_gc,
            "sandbox": self._sandbox,
        }

    async def lease_state(self) -> dict[str, Any]:
        """Who reconciles this data dir (the Lease as stored) and whether it is this process."""
        try:
            record = await self.store.get_lease("reconciler")
            problem = None
        except Exception as e:  # the store is not open (yet) or is locked
            record, problem = None, str(e)
        record = record or {}
        holder = record.get("holderIdentity") or None
        return {"name": "reconciler", "holderIdentity": holder, "acquireTime": record.get("acquireTime"),
                "renewTime": record.get("renewTime"), "leaseDurationSeconds": record.get("leaseDurationSeconds"),
                "leaseTransitions": record.get("leaseTransitions"), "identity": self.identity,
                "isHolder": bool(self.elector and self.elector.is_leader and holder == self.identity),
                "lastError": problem or (self.elector.last_error if self.elector else None)}


def folder_refusal(folder: str, e: verdict_cache.FolderTooLarge, max_files: int, max_bytes: int) -> str:
    """Why a notebook's folder is too large to be copied for its kernel."""
    what = (f"over {max_files} files" if e.files > max_files
            else f"over {max_bytes} bytes ({e.files} files hold {e.nbytes} bytes already)")
    trait = "c.LocalBackend.max_folder_files" if e.files > max_files else "c.LocalBackend.max_folder_bytes"
    return (f"spec.notebook.path: the notebook's folder {folder} holds {what}; the kernel works in a copy of it, "
            f"bounded by {trait} (raise it, or name the files the notebook reads in spec.inputFiles)")


async def _terminate(proc: asyncio.subprocess.Process | ForkedRunner, run_id: str | None = None, grace: float = 5.0) -> None:
    """SIGTERM the process group (the runner then shuts its kernel down and
    writes what it has), SIGKILL after ``grace`` seconds; then every process
    still marked with the run's ``run_id`` (what a killed runner left)."""
    if proc.returncode is None:
        hygiene.kill_group(proc.pid, signal.SIGTERM)
        try:
            await wait_within(asyncio.shield(proc.wait()), grace)
        except asyncio.TimeoutError:
            hygiene.kill_group(proc.pid, signal.SIGKILL)
    if run_id:
        await asyncio.shield(asyncio.to_thread(hygiene.kill_all, run_id))


def _read_json(path: Path) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _tail(path: str, lines: int) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            content = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(content[-lines:])[-800:]



def _progress_extra(run: _Run) -> dict:
    """``Observation.extra`` carrying the run's progress (``status.progress``
    without ``updatedAt``), when its runner has reported any."""
    snap = run.progress.snapshot()
    return {"progress": snap} if snap is not None else {}


def _attempt_of(run_dir: Path) -> int:
    """The attempt a run folder was made for (its ``attempt`` file; none: the first)."""
    try:
        return int((run_dir / "attempt").read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def _observation_from_result(result: dict, started: str | None, finished: str | None,
                             reference: str | None, run_dir: Path) -> Observation:
    ok = result.get("verdict") == Phase.SUCCEEDED
    # a failure that is not the notebook's (local_faults): the engine retries it or ends the job
    # InfrastructureFailed, never a notebook verdict
    fault = None if ok else fault_of_result(result, run_dir)
    return Observation(SUCCEEDED if ok else FAILED, message=result.get("message", ""), result=result,
                       started_at=started, finished_at=finished, reference=reference, fault=fault)
