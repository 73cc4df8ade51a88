"""Environments of the local backend: content-addressed virtual environments built
with uv (or venv + pip) from a job's checked requirements, shared by every job with
the same key, adopted across engines, and each one's environment record
(environment_record.py), read once."""

from __future__ import annotations

import asyncio
import configparser
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import time
import tomllib
import uuid
from pathlib import Path
from typing import Any

import jupyter_nbvalidation.backends.build_failure as build_failure
import jupyter_nbvalidation.environment.requirements as reqmod
import jupyter_nbvalidation.runner.hygiene as hygiene
import jupyter_nbvalidation.verdict.cache as verdict_cache
import jupyter_nbvalidation.verdict.environment_record as envrec
from jupyter_nbvalidation.backends.base import FAILED, RUNNING, SUCCEEDED, Fault, Observation
from jupyter_nbvalidation.backends.local.disk import (
    ADOPT_POLL,
    ENV_MARKER,
    LAST_USE,
    RECORD_FILE,
    RETIRED_PREFIX,
    _Build,
    _read_json,
    _read_text,
    _tail,
    _write_json_atomic,
    owner_alive,
    process_record,
    same_process_alive,
)
from jupyter_nbvalidation.backends.local.faults import fault_of_build, fault_of_oserror, is_no_space
from jupyter_nbvalidation.backends.local.state import LocalState
from jupyter_nbvalidation.core.documents import Job, JobSpec
from jupyter_nbvalidation.core.model import build_enabled, isotime, parse_time
from jupyter_nbvalidation.core.priority import deprioritize
from jupyter_nbvalidation.core.redaction import scrub
from jupyter_nbvalidation.core.tasks import cancel_and_wait, wait_within
from jupyter_nbvalidation.environment.requirements import Requirements
from jupyter_nbvalidation.spec.plan import ValidationPlan, requirements_key, requirements_of, requirements_sentence

tool_identity = envrec.tool_identity  # the record's tool, as the local backend's package exported it
LOG_LINE_LIMIT = 2**20  # a build command's line longer than this reaches the log in pieces


def uv_refresh_args(local_paths: list[str]) -> list[str]:
    """uv reuses its own build of a local project while its pyproject.toml is
    unchanged, but the environment's key says the content changed: refresh
    exactly those packages (``--refresh-package NAME``, the name read from the
    folder's pyproject.toml or setup.cfg, or from a wheel's or sdist's file
    name), so the rest of uv's cache stays. Plain ``--refresh`` (every package
    fetched again) only when a path's name cannot be read (a setup.py-only
    folder, a --find-links folder)."""
    args: list[str] = []
    for path in sorted(set(local_paths)):
        name = _local_package_name(path)
        if name is None:
            return ["--refresh"]
        args += ["--refresh-package", name]
    return args


def _local_package_name(path: str) -> str | None:
    base = os.path.basename(path.rstrip("/"))
    name: str | None = None
    if os.path.isdir(path):
        try:
            with open(os.path.join(path, "pyproject.toml"), "rb") as f:
                name = (tomllib.load(f).get("project") or {}).get("name")
        except (OSError, tomllib.TOMLDecodeError, AttributeError):
            name = None
        if not isinstance(name, str) or not name:
            cfg = configparser.ConfigParser(interpolation=None)
            try:
                cfg.read(os.path.join(path, "setup.cfg"), encoding="utf-8")
                name = cfg.get("metadata", "name", fallback=None)
            except (configparser.Error, UnicodeDecodeError):
                name = None
    elif base.endswith(".whl"):
        name = base.split("-")[0]
    else:
        for ext in (".tar.gz", ".zip", ".tar.bz2", ".tgz"):
            if base.endswith(ext) and "-" in base:
                name = base[: -len(ext)].rsplit("-", 1)[0]
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", name):
        return None
    return envrec.normalize(name)



# written into a built environment by this backend, not by what runs in it (the environment record and
# its atomic write's temporary files start with "." or are named here)
_OWN_FILES = frozenset({ENV_MARKER, LAST_USE, RECORD_FILE})


def env_fingerprint(path: str | Path) -> str:
    """What a kernel could change of a built environment, as one digest: the path,
    size, modification time and mode of every file, link and folder in it. Left
    out: ``__pycache__`` folders (bytecode the interpreter writes for the sources
    beside it) and this backend's own files at the top (marker, last use, record).
    A notebook that installs or writes into its environment (``%pip install``, a
    module written to site-packages) changes it; a shared environment so changed
    would let the next job of the same requirements pass on what it never
    declared, so it is never handed on (:meth:`EnvironmentsRoom.ensure_build`,
    and the runs' last look before a kernel starts, runs.py)."""
    root = os.fspath(path)
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        rel = os.path.relpath(dirpath, root)
        for name in dirnames + sorted(filenames):
            if rel == "." and (name in _OWN_FILES or name.startswith(f".{RECORD_FILE}.")):
                continue
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except FileNotFoundError:
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            size, mtime = (0, 0) if is_dir else (st.st_size, st.st_mtime_ns)  # a folder's times move with its pycs
            h.update(f"{rel}/{name}\0{st.st_mode}\0{size}\0{mtime}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


class EnvironmentsRoom(LocalState):
    """A room of LocalBackend (backend.py): the state it uses is declared by LocalState (state.py)."""

    def _sweep_stale_builds(self, key: str | None = None) -> list[dict[str, Any]]:
        """Remove builds left half-done by an engine that is provably dead (killed
        mid-build): its build step, if still running, is stopped (checked by pid
        and start time), its folder removed. A live engine's build is left alone
        and returned (owner records), so the caller can wait for it."""
        envs = self.root / "envs"
        if not envs.is_dir():
            return []
        live: list[dict[str, Any]] = []
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

    def _interpreter_for(self, python_requires: tuple[str, str] | None) -> tuple[str, str | None] | None:
        """(path, version) of the base interpreter an environment is built with: LocalBackend.python,
        unless the repository asks for a Python it is not (runtime.txt, requires-python,
        environment.yml's python): then the first of LocalBackend.pythons that fits (their
        versions asked on first need); None when none does (checked at submit: a 400 there)."""
        default = (self.python, self._python_version)
        if not self._wants_other_python(python_requires):
            return default  # also an invalid one: refused at submit; a job stored before that check keeps it
        assert python_requires is not None
        from packaging.specifiers import (
            SpecifierSet,  # deferred: start-up time (packaging's specifiers, measured slower to import than yaml)
        )

        wanted = SpecifierSet(python_requires[0])
        if self._interpreters is None:  # asked on first need: in a thread (callers on the loop await
            self.build_pythons()        # _know_pythons_for first)
        for path, version in self._interpreters or []:
            if wanted.contains(version, prereleases=True):
                return path, version
        return None

    def _env_key_of(self, requirements_key: str, python_requires: tuple[str, str] | None = None) -> str:
        python, version = self._interpreter_for(python_requires) or (self.python, self._python_version)
        ident = {
            "python": os.path.realpath(python),
            "version": version,
            "requirements": requirements_key,
            "kernel": sorted(self.kernel_packages),
        }
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:20]

    def _unplanned_env_key(self, job: Job) -> str:
        """The environment of a job this process has no plan for (another
        process reconciles it): from its snapshot, as its plan would have it."""
        reqs = requirements_of(job, self._snapshot(job))
        return self._env_key_of(requirements_key(reqs), reqs.python_requires)

    def env_key(self, plan: ValidationPlan) -> str:
        """The environment of a plan here: this interpreter, its version and
        the kernel packages + the plan's requirements key (the requirement
        lines and the content of every local path they name, so editing a
        local package rebuilds)."""
        return self._env_key_of(plan.requirements_key, plan.requirements.python_requires)

    async def verdict_environment(self, spec: JobSpec, requirements: Requirements) -> str | None:
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
            return self._verdict_environment(key, requirements.python_requires)

        return await asyncio.to_thread(identity)

    async def same_verdict_environment(self, job: Job, environment: str) -> bool:
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

    def _verdict_environment(self, requirements_key: str | None,
                             python_requires: tuple[str, str] | None = None) -> str | None:
        if requirements_key is not None:
            if self._python_version is None:
                return None
            return "built:" + self._env_key_of(requirements_key, python_requires)
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

    async def prepare(self, job: Job, plan: ValidationPlan) -> str:
        await self._know_pythons_for(plan.requirements.python_requires)
        self._keys[job["metadata"]["uid"]] = self.env_key(plan)
        return f"{plan.detected}."

    def _env_ready(self, key: str) -> bool:
        return (self.env_dir(key) / ENV_MARKER).is_file()

    async def ensure_build(self, job: Job, plan: ValidationPlan) -> Observation:
        uid = job["metadata"]["uid"]
        await self._know_pythons_for(plan.requirements.python_requires)
        key = self._keys[uid] = self.env_key(plan)
        strategy = self.build_strategy(job)
        rec = self._job_build.get(uid)
        if rec is None and await asyncio.to_thread(self._env_ready, key) \
                and not await asyncio.to_thread(self._env_intact, key):
            # changed since its build (a notebook installed or wrote into it): never handed on
            others = await self._env_users(key, uid)
            if others:  # a rename would pull it from under their kernels: once they are done
                return Observation(FAILED, finished_at=isotime(), strategy=strategy, fault=Fault(
                    f"The cached environment {key} changed since it was built (a notebook run in it installed "
                    f"or wrote files there) and {', '.join(others)} still run in it; a fresh one is built "
                    "when they are done.", transient=True))
            await asyncio.to_thread(self._retire_env, key, "before a job would have reused it")
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
                    # its task is made next, from the record (which it fills): the record comes first
                    build = _Build(key=key, task=None, log_path=log_path)  # type: ignore[arg-type]
                    build.task = asyncio.get_running_loop().create_task(
                        self._build_or_adopt(build, reqs, strategy, log_path))
                    self._builds[key] = build
            build.waiters.add(job["metadata"]["name"])
            self._job_build[uid] = build
        return Observation(RUNNING, message="Building the environment.", log_path=self._job_build[uid].log_path,
                           strategy=strategy)

    @staticmethod
    def _shared_failure(build: _Build | None, job: Job) -> Observation | None:
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

    def _env_intact(self, key: str) -> bool:
        """Whether the environment is as its build left it (its fingerprint; one built
        before fingerprints were recorded cannot say so, and counts as changed)."""
        recorded = self._read_marker(key).get("fingerprint")
        return bool(recorded) and recorded == env_fingerprint(self.env_dir(key))

    async def _env_users(self, key: str, uid: str) -> list[str]:
        """The other unfinished jobs validating in (or about to validate in) the environment."""
        path = str(self.env_dir(key))
        return sorted(j["metadata"]["name"] for j in await self.store.list_active()
                      if j["metadata"]["uid"] != uid
                      and ((j.get("status") or {}).get("buildStatus") or {}).get("imageReference") == path)

    def _retire_env(self, key: str, when: str) -> None:
        """Out of sight at once (one rename: no job picks it up from now on, and the next
        build of its key publishes beside nothing); removed by the next collection that
        finds no job active. Never fails."""
        gone = self.root / "envs" / f"{RETIRED_PREFIX}{key}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(self.env_dir(key), gone)
        except OSError:
            return  # retired or evicted meanwhile
        self.log.warning("nbvalidation: environment %s changed since it was built (noticed %s: something run "
                         "in it installed or wrote files there); retired, the next job of its requirements "
                         "builds a fresh one", key, when)

    def _read_marker(self, key: str) -> dict[str, Any]:
        try:
            marker: dict[str, Any] = json.loads((self.env_dir(key) / ENV_MARKER).read_text())  # _build_in's
            return marker
        except (OSError, ValueError):
            return {}

    async def _run_step(self, build: _Build, argv: list[str], log: Any, secrets: dict[str, str] | None = None) -> int:
        """One build command. ``secrets``: index credentials, given to the
        command through its environment only (the requirements file holds
        ``${NBV_SECRET_<n>}``). Its output goes through the scrubber
        (:func:`redaction.scrub`: those values, URL user-info, ``key=value``)
        before anything reaches the log, with or without ``secrets``: a URL
        of the server's own configuration may carry a credential too."""
        values = list((secrets or {}).values())
        log.write(scrub(f"$ {' '.join(argv)}\n", values))
        log.flush()
        proc = await asyncio.create_subprocess_exec(
            *self._niced(argv), stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                                         "PIP_NO_INPUT": "1", "VIRTUAL_ENV": "", **(secrets or {})})

        def write(data: bytes) -> None:
            text = data.decode("utf-8", "replace")
            log.write("".join(scrub(line, values) for line in text.splitlines(keepends=True)))
            log.flush()

        async def pump() -> None:
            """Whole lines to the log (a line longer than LOG_LINE_LIMIT in pieces): never
            stops reading, so the command never blocks on a full pipe."""
            assert proc.stdout is not None
            pending = b""
            while chunk := await proc.stdout.read(2**16):
                pending += chunk
                cut = pending.rfind(b"\n") + 1 or (len(pending) if len(pending) > LOG_LINE_LIMIT else 0)
                if cut:
                    write(pending[:cut])
                    pending = pending[cut:]
            if pending:
                write(pending)

        pumping = asyncio.ensure_future(pump())
        try:
            code = await self._wait_step(build, proc)
        finally:
            with contextlib.suppress(Exception):
                await wait_within(pumping, 5)
            pumping.cancel()
        return code

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
                               fault=fault_of_oserror(e, tmp.parent) if isinstance(e, OSError) and is_no_space(e) else None)
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
        chosen = self._interpreter_for(requirements.python_requires)
        if chosen is None:  # refused at submit; the interpreters here changed since
            spec, where = requirements.python_requires or ("", "")
            here = ", ".join(sorted({v for _, v in self._interpreters or []} | {self._python_version or "?"}))
            return Observation(FAILED, message=f"{where} asks for Python {spec}; environments here are built "
                                               f"with Python {here} (LocalBackend.python, LocalBackend.pythons)",
                               started_at=started, finished_at=isotime(), log_path=log_path, strategy=strategy)
        base_python = chosen[0]

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
        refresh = uv_refresh_args(requirements.local_paths)
        pid_file = tmp.parent / f"{tmp.name}.pid"
        build.pid_file = pid_file
        py = str(tmp / "bin" / "python")
        if strategy == "uv":
            steps = [[self.uv_path, "venv", "--quiet", "--python", base_python, str(tmp)],
                     [self.uv_path, "pip", "install", "--python", py, "-r", str(req_file), *c_args, *refresh]]
        else:
            steps = [[base_python, "-m", "venv", str(tmp)],
                     [py, "-m", "pip", "install", "--no-input", "-r", str(req_file), *c_args]]
        steps.append([py, "-c", "import ipykernel, sys; print('kernel ready:', sys.executable)"])
        try:
            with open(log_path, "w", encoding="utf-8") as log:
                log.write(f"# environment {key} ({strategy}) from {base_python}"
                          + (f" (Python {chosen[1]}, as {requirements.python_requires[1]} asks)"
                             if base_python != self.python and requirements.python_requires else "") + "\n"
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
            fingerprint = env_fingerprint(tmp)  # after the last step; the marker is left out of it
            marker = {"key": key, "requirements": requirements.display_lines,
                      "constraints": requirements.display_constraints,
                      "local": requirements.cache_key_material()["local"], "strategy": strategy, "python": base_python,
                      "startTime": started, "completionTime": isotime(), "log": log_path,
                      "fingerprint": fingerprint}
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

    async def cancel_build(self, job: Job) -> None:
        rec = self._job_build.pop(job["metadata"]["uid"], None)
        if rec is None:
            return
        rec.waiters.discard(job["metadata"]["name"])
        if not rec.waiters and not rec.task.done():
            await cancel_and_wait(rec.task)

    async def _record_environment(self, job: Job, python: str, reference: str | None) -> None:
        """The job's environment record (environment_record.py), beside its runs. A
        built environment never changes: its distributions are read once, when it is
        first used, and kept in it; with the build disabled they are read now from the
        interpreter the kernel runs (it can change between jobs). The tool's identity
        is this job's. Never fails the job: a record that cannot be taken says why."""
        target = self.job_dir(job) / RECORD_FILE
        if await asyncio.to_thread(target.is_file):
            return  # a retry runs in the same environment
        kept = Path(reference) / RECORD_FILE if reference else None
        record = await asyncio.to_thread(_read_json, kept) if kept is not None else None
        unbuilt = None
        if reference is None:  # read again only when its distributions changed (a few directory listings)
            unbuilt = await asyncio.to_thread(verdict_cache.installed_distributions, python)
            memo = self._unbuilt_records.get(python)
            if unbuilt is not None and memo is not None and memo[0] == unbuilt:
                record = dict(memo[1])
        if record is None:
            marker = await asyncio.to_thread(_read_json, Path(reference) / ENV_MARKER) if reference else None
            environment: dict[str, Any] = {"kind": "interpreter", "python": python}
            if marker is not None:
                environment = {"kind": "built", "key": marker.get("key"), "strategy": marker.get("strategy"),
                               "baseInterpreter": marker.get("python"), "requirements": marker.get("requirements"),
                               "constraints": marker.get("constraints") or []}
            try:
                probe = await envrec.probe(python)
            except envrec.RecordError as e:
                record = {"apiVersion": envrec.API_VERSION, "kind": envrec.KIND, "takenAt": isotime(),
                          "environment": environment, "error": str(e)}
            else:
                record = envrec.shape(probe, environment=environment, tool={}, taken_at=isotime(),
                                      local_hashes=(marker or {}).get("local") or {})
                if kept is not None:
                    with contextlib.suppress(OSError):
                        await asyncio.to_thread(_write_json_atomic, kept, record)
                elif unbuilt is not None:
                    self._unbuilt_records[python] = (unbuilt, dict(record))
        record["tool"] = await asyncio.to_thread(tool_identity)

        def write() -> None:
            target.parent.mkdir(parents=True, exist_ok=True)
            _write_json_atomic(target, record)

        with contextlib.suppress(OSError):  # a full disk fails the run itself, where it is told as such
            await asyncio.to_thread(write)

    async def environment_record(self, job: Job) -> dict[str, Any] | None:
        return await asyncio.to_thread(_read_json, self.job_dir(job) / RECORD_FILE)

    @staticmethod
    def _touch_env(reference: str | None) -> None:
        if reference:
            with contextlib.suppress(OSError):
                (Path(reference) / LAST_USE).touch()
