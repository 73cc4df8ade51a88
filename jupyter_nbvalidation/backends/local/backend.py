"""The local backend's wiring: its settings, paths, lifecycle (start, the store
Lease election, drain, stop), the kernel's sandbox and what it accepts at submit; the
rooms it is made of are environments.py, builds.py, runs.py, retention.py,
interpreters.py and artefacts.py (build log, health), over the on-disk state of disk.py."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import uuid
from pathlib import Path
from typing import Any, Callable

from jupyter_core.paths import jupyter_data_dir, jupyter_runtime_dir
from traitlets import Bool, Enum, Float, Int, List, Unicode, default, validate

import jupyter_nbvalidation.backends.local.network as run_network
import jupyter_nbvalidation.backends.workcopy as workcopy
import jupyter_nbvalidation.core.space as space
import jupyter_nbvalidation.runner.hygiene as hygiene
import jupyter_nbvalidation.runner.limits as limits
import jupyter_nbvalidation.runner.sandbox_probe as sandbox_probe
import jupyter_nbvalidation.verdict.cache as verdict_cache
from jupyter_nbvalidation.backends.base import Backend, Capabilities, lease_traits
from jupyter_nbvalidation.backends.local.artefacts import ArtefactsRoom
from jupyter_nbvalidation.backends.local.builds import BuildsRoom
from jupyter_nbvalidation.backends.local.disk import (
    ENV_MARKER,
    HOST,
    _Build,
    _Run,
    _terminate,
    folder_refusal,
    process_record,
)
from jupyter_nbvalidation.backends.local.environments import EnvironmentsRoom
from jupyter_nbvalidation.backends.local.forkserver import RunnerForkServer
from jupyter_nbvalidation.backends.local.interpreters import InterpretersRoom
from jupyter_nbvalidation.backends.local.pool import KernelPool
from jupyter_nbvalidation.backends.local.retention import RetentionRoom
from jupyter_nbvalidation.backends.local.runs import RunsRoom
from jupyter_nbvalidation.core.documents import Job, JobSpec
from jupyter_nbvalidation.core.errors import InputRejected, NoSpace
from jupyter_nbvalidation.core.model import ROOT_ANNOTATION
from jupyter_nbvalidation.core.tasks import cancel_and_wait
from jupyter_nbvalidation.spec.checks import SpecError, spec_fields
from jupyter_nbvalidation.spec.plan import Snapshot, snapshot_from_files
from jupyter_nbvalidation.store.lease import StoreLeaseElector, new_identity
from jupyter_nbvalidation.store.sqlite import SQLiteJobStore

UNSUPPORTED_LOCALLY = {
    "podConfig.containerImage": "needs the kubernetes backend (the local backend runs no containers)",
    "podConfig.buildConfig.baseImage": "needs the kubernetes backend (locally the base is the configured interpreter, c.LocalBackend.python)",
    "podConfig.resources.requests": "needs the kubernetes backend (the local backend sets no resource requests)",
    "podConfig.nodeSelector": "needs the kubernetes backend (the local backend schedules nothing)",
    "podConfig.tolerations": "needs the kubernetes backend (the local backend schedules nothing)",
    "podConfig.serviceAccountName": "needs the kubernetes backend (a local kernel has no service account)",
}


class LocalBackend(EnvironmentsRoom, BuildsRoom, RunsRoom, RetentionRoom, InterpretersRoom, ArtefactsRoom, Backend):
    name = "local"
    store: SQLiteJobStore
    capabilities = Capabilities(local_requirement_paths=True, constraint_files=True, index_credentials=True,
                                garbage_collection=True, environment_records=True)

    data_dir = Unicode(help="Where jobs, environments, logs and the SQLite store live "
                            "(default: <jupyter data dir>/nbvalidation).").tag(config=True)
    python = Unicode(help="Base interpreter of built environments (default: the base interpreter "
                          "of this server's Python).").tag(config=True)
    pythons = List(Unicode(), help="Other base interpreters environments may be built with: when a repository "
                                   "asks for a Python (runtime.txt, requires-python, environment.yml's python) that "
                                   "LocalBackend.python is not, the first of these that fits builds its environment. "
                                   "Default: every python3 and python3.N found on PATH.").tag(config=True)
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
                   help="Linux: run each kernel in a sandbox (user, PID, IPC and mount namespaces; no root "
                        "needed) in which it cannot see this server's processes (their environment), the data "
                        "dir (the store, other jobs, environments other than its own), the Jupyter runtime dir "
                        "(the server's token), the user's HOME outside the project, /tmp (a link to one of "
                        "them finds nothing), and writes only its working copy, its /tmp, /var/tmp and HOME "
                        "(read-only mounts and Landlock); a server run as root runs it as nobody. auto (the "
                        "default): used when this system allows it (tried at start, shown in /health), "
                        "else kernels run with the user's rights and can reach the store (a warning is "
                        "logged, /health says why); off: never.").tag(config=True)
    network = Enum(list(run_network.MODES), default_value="auto", help=run_network.HELP).tag(config=True)
    run_disk_limit = Int(4 * 2**30, help="The disk budget of one validation run, in bytes: what its kernel (and all "
                                         "it starts) writes to its working copy, its /tmp and /var/tmp, its HOME and "
                                         "(in the sandbox) its private /dev/shm, a tmpfs of this size. Past it the "
                                         "kernel is stopped and the job fails (DiskLimitExceeded); 0: no budget. "
                                         "The kernel's memory is bounded by the job's "
                                         "podConfig.resources.limits.memory (a memory cgroup, else "
                                         "RLIMIT_AS).").tag(config=True)
    kernel_pool_size = Int(1, help="Pre-started kernels kept per environment (a kernel running, in its own fresh "
                                   "sandbox, before its notebook is known; used by one run, which binds it to its "
                                   "copy of the notebook's folder before any cell runs, and never reused): a "
                                   "verdict in about the time of the notebook's cells. Kept for the environments "
                                   "(with the same sandbox, bounds and podConfig.env) used within "
                                   "kernel_pool_idle_ttl; 0 disables the pool.").tag(config=True)
    kernel_pool_max = Int(4, help="Most pre-started kernels held at once, over all environments; 0 disables "
                                  "the pool.").tag(config=True)
    kernel_pool_idle_ttl = Float(600.0, help="Seconds after its last use an environment's pre-started kernels "
                                             "are stopped (nothing is held when idle); the one used last within "
                                             "it is warmed again when a server or CLI engine starts leading. 0: "
                                             "kept while the process lives.").tag(config=True)
    kernel_pool_runs_expected = Int(0, help="How many runs this engine will ask a kernel for in all, where "
                                            "that is known (`jupyter nbvalidation run` of N notebooks: N; "
                                            "`submit`: 1): a kernel is pre-started only while a run is still "
                                            "to come, never one that nothing will use. 0: not known (a "
                                            "server): the pool as above.").tag(config=True)
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
            from uv import find_uv_bin  # optional: uv (the venv + pip strategy works without it)

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
        # the build-disabled interpreter's record, by the digest of its installed distributions
        self._unbuilt_records: dict[str, tuple[str, dict[str, Any]]] = {}
        # the engine admits at most its caps (which these aliases set when given): these
        # semaphores only bound a caller that drives the backend without an engine
        self._build_slots = asyncio.Semaphore(self.max_parallel_builds or 10**6)
        self._run_slots = asyncio.Semaphore(self.max_parallel_validations or 10**6)
        self._python_version: str | None = None
        self._interpreters: list[tuple[str, str]] | None = None  # (path, version) of self.pythons, asked once
        self._keys: dict[str, str] = {}
        self._env_notes: dict[str, str] = {}  # by job uid: its environment found changed (environments.py)
        self.identity = new_identity()
        self.elector: StoreLeaseElector | None = None
        self._gc_task: asyncio.Task[None] | None = None
        self._pool_task: asyncio.Task[None] | None = None
        self.last_gc: dict[str, Any] | None = None
        self._forkserver: RunnerForkServer | None = None
        self._sandbox: dict[str, Any] | None = None  # sandbox_probe.detect(), once
        self._sandbox_lock = asyncio.Lock()
        self._run_network: dict[str, Any] | None = None  # what each run's sandbox file asks (network.py)
        self._bounds: dict[str, Any] | None = None  # how a run's bounds are held here, detected at start
        self._private_paths: list[str] = []
        self._pool: KernelPool | None = None  # pre-started kernels (pool.py), made at start

    elects_leader = True

    def owner(self) -> dict[str, Any]:
        """This engine, as recorded on what it starts."""
        return {"holder": self.identity, "host": HOST, **process_record(os.getpid())}

    def _mine(self, owner: dict[str, Any] | None) -> bool:
        return bool(owner and owner.get("holder") == self.identity)

    def _niced(self, argv: list[str]) -> list[str]:
        nice = shutil.which("nice") if self.niceness > 0 else None
        return [nice, "-n", str(self.niceness), *argv] if nice else argv

    # -- paths ---------------------------------------------------------------
    @property
    def root(self) -> Path:
        return Path(self.data_dir)

    def job_dir(self, job: Job) -> Path:
        return self.root / "jobs" / job["metadata"]["uid"]

    def env_dir(self, key: str) -> Path:
        return self.root / "envs" / key

    # -- lifecycle -----------------------------------------------------------
    async def start(self, notify: Callable[[str], None]) -> None:
        self._notify = notify
        await asyncio.to_thread(self._sweep_stale_builds)
        await asyncio.to_thread(hygiene.sweep)  # temp folders (and kernels) of runners that died
        await self._check_python()
        await self._detect_bounds()
        await self.sandbox_state()
        self._pool = KernelPool(self.root / "jobs" / ".pool", size=self.kernel_pool_size, max_total=self.kernel_pool_max,
                                idle_ttl=self.kernel_pool_idle_ttl, niceness=self.niceness, niced=self._niced,
                                owner=self.owner, log=self.log, stamp=self._env_stamp,
                                expected=self.kernel_pool_runs_expected or None)

    async def _detect_bounds(self) -> None:
        """How a job's memory limit will be held (runner/limits.py), once, in a thread; a warning
        when only RLIMIT_AS can (per process, and of address space)."""
        if self._bounds is None:
            found = await asyncio.to_thread(limits.detect)
            self._bounds = {**found, "runDiskLimit": self.run_disk_limit}
            if found["reason"]:
                self.log.warning("nbvalidation: podConfig.resources.limits.memory is held by RLIMIT_AS (per "
                                 "process, of its address space): %s", found["reason"])

    async def sandbox_state(self) -> dict[str, Any]:
        """Whether kernels run in the sandbox (runner/sandbox.py): tried once, in a thread."""
        async with self._sandbox_lock:
            if self._sandbox is None:
                info: dict[str, Any]
                if self.sandbox == "off":
                    info = {"enabled": False, "mode": "off", "uses": [], "missing": [],
                            "reason": "off (LocalBackend.sandbox)", "landlockAbi": None}
                else:
                    # idmapped mounts tried where runs read (root: its kernels run as nobody through them)
                    found = await asyncio.to_thread(sandbox_probe.detect, self.unbuilt_python,
                                                    [self.data_dir, os.path.dirname(os.path.dirname(self.unbuilt_python))])
                    info = {"enabled": bool(found["available"]), "mode": self.sandbox, "uses": found["uses"],
                            "missing": found["missing"], "reason": found["reason"],
                            "landlockAbi": found["landlockAbi"], "idmapRefused": found.get("idmapRefused")}
                    if not info["enabled"]:
                        self.log.warning("nbvalidation: kernels run without a sandbox (with the user's rights, "
                                         "they can read the data dir and the user's files): %s", info["reason"])
                    for missing in info["missing"]:
                        self.log.warning("nbvalidation: the kernels' sandbox lacks a protection here: %s", missing)
                said, self._run_network = await asyncio.to_thread(
                    run_network.network_state, self.network, self.unbuilt_python, bool(info["enabled"]))
                info["network"] = said
                if said["isolated"]:
                    info["uses"] = [*info["uses"], "network namespace"]
                elif info["enabled"]:  # (without a sandbox, its own warning says more)
                    self.log.warning("nbvalidation: %s", said["reason"])
                self._sandbox = info
            return self._sandbox

    @staticmethod
    def _env_stamp(python: str) -> str:
        """Which build of ``python``'s environment is there now (its marker's inode and time; blocks):
        a pre-started kernel of an environment retired and rebuilt since is never used."""
        try:
            st = (Path(python).parent.parent / ENV_MARKER).stat()
        except OSError:
            return ""
        return f"{st.st_ino}:{st.st_mtime_ns}"

    def add_private_paths(self, paths: list[str]) -> None:
        self._private_paths += [p for p in paths if p]

    def _sandbox_config(self, job: Job, run_dir: Path) -> dict[str, Any]:
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
        # the copy is the only folder of the job's it writes (read-only: the root, the folder)
        tree = str(run_dir / workcopy.TREE)
        show = [p for p in (root, folder) if p]
        fault = os.environ.get(sandbox_probe.IDMAP_FAULT_VAR)  # fault injection (tests): idmapped mounts refused
        return {"hide": hide, "show": show, "write": [tree], "scratch": workcopy.scratch_paths(run_dir),
                **({"network": self._run_network} if self._run_network else {}),
                **({"idmapFault": fault} if fault else {})}

    async def run_election(self, on_started_leading: Callable[[], None],
                           on_stopped_leading: Callable[[], None]) -> None:
        """One reconciler per data dir: the store's Lease (store/lease.py)."""
        self.elector = StoreLeaseElector(self.store, identity=self.identity, lease_duration=self.lease_duration,
                                         renew_deadline=self.renew_deadline, retry_period=self.retry_period,
                                         log=self.log)

        def started() -> None:
            if self._pool is not None:  # the environments used lately: their kernels pre-started
                self._pool_task = asyncio.get_running_loop().create_task(self._pool.start(), name="nbvalidation-pool")
            if self.gc_interval > 0 and (self._gc_task is None or self._gc_task.done()):
                self._gc_task = asyncio.get_running_loop().create_task(self._gc_loop(), name="nbvalidation-gc")
            on_started_leading()

        def stopped() -> None:
            if self._pool is not None:
                self._pool_task = asyncio.get_running_loop().create_task(self._pool.stop(), name="nbvalidation-pool")
            if self._gc_task is not None:
                self._gc_task.cancel()
            on_stopped_leading()

        try:
            await self.elector.run(started, stopped)
        finally:
            if self._gc_task is not None:
                await cancel_and_wait(self._gc_task)

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
        if self._pool is not None:  # its slots' kernels stopped
            if self._pool_task is not None:
                await cancel_and_wait(self._pool_task)
            await self._pool.stop()
        if self._forkserver is not None:
            await self._forkserver.stop()
            self._forkserver = None

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

    def check_spec(self, spec: JobSpec) -> None:
        for name in (spec.get("podConfig", {}).get("resources", {}).get("limits") or {}):
            if name != "memory":  # held here: memory only (runner/limits.py)
                raise SpecError(f"podConfig.resources.limits.{name}",
                                "not supported by the local backend: it holds a memory limit only "
                                "(the kubernetes backend sets the others)")
        strategy = spec.get("podConfig", {}).get("buildConfig", {}).get("strategy")
        if strategy is not None and strategy not in ("auto", "uv", "venv"):
            raise SpecError("podConfig.buildConfig.strategy",
                            "the local backend builds with auto, uv or venv")
        if strategy == "uv" and not self.uv_path:
            raise SpecError("podConfig.buildConfig.strategy", "uv is not installed on this server")

    def build_strategy(self, job: Job) -> str:
        wanted = job["spec"].get("podConfig", {}).get("buildConfig", {}).get("strategy") or self.build_tool
        if wanted == "auto":
            return "uv" if self.uv_path else "venv"
        return wanted

    def build_strategy_reason(self, job: Job) -> str:
        if job["spec"].get("podConfig", {}).get("buildConfig", {}).get("strategy") not in (None, "auto"):
            return "chosen by the job"
        if self.build_tool != "auto":
            return "set by c.LocalBackend.build_tool"
        return f"auto: uv found at {self.uv_path}" if self.uv_path else "auto: uv is not installed"

    # -- submit / prepare --------------------------------------------------------
    def git_dir(self) -> str | None:
        return os.path.join(self.data_dir, "git")

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

    async def submit(self, job: Job, files: dict[str, bytes]) -> Job:
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

        try:
            await asyncio.to_thread(write)
        except OSError as e:
            await asyncio.to_thread(shutil.rmtree, self.job_dir(job), True)
            if space.is_no_space(e):
                raise NoSpace(f"the job's snapshot could not be written: {space.no_space(str(input_dir))}") from e
            raise
        try:
            return await self.store.create(job)
        except Exception:
            await asyncio.to_thread(shutil.rmtree, self.job_dir(job), True)
            raise

    def _snapshot(self, job: Job) -> Snapshot:
        inp = self.job_dir(job) / "input"  # gone: no names, which make_plan refuses
        names = frozenset(p.relative_to(inp).as_posix() for p in inp.rglob("*") if p.is_file())
        return snapshot_from_files(names, lambda name: (inp / name).read_text(encoding="utf-8"))

    async def read_snapshot(self, job: Job) -> Snapshot:
        return await asyncio.to_thread(self._snapshot, job)
