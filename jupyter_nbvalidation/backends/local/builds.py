"""Builds of the local backend's environments: one build per environment key, in a
temporary folder published by one rename (uv, or venv + pip), each command's output
scrubbed on its way to the build log; a build another live engine runs is adopted (its
outcome waited for), a dead engine's half-build removed. The keys, the cache and the
records of environments are environments.py's."""

from __future__ import annotations

import asyncio
import configparser
import contextlib
import json
import os
import re
import shutil
import signal
import time
import tomllib
import uuid
from pathlib import Path
from typing import Any

import jupyter_nbvalidation.backends.build_failure as build_failure
import jupyter_nbvalidation.backends.local.seal as seal
import jupyter_nbvalidation.runner.hygiene as hygiene
import jupyter_nbvalidation.verdict.environment_record as envrec
from jupyter_nbvalidation.backends.base import FAILED, SUCCEEDED, Fault, Observation
from jupyter_nbvalidation.backends.local.disk import (
    ADOPT_POLL,
    ENV_MARKER,
    LAST_USE,
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
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.model import isotime
from jupyter_nbvalidation.core.priority import deprioritize
from jupyter_nbvalidation.core.redaction import scrub
from jupyter_nbvalidation.core.tasks import cancel_and_wait, wait_within
from jupyter_nbvalidation.environment.requirements import Requirements
from jupyter_nbvalidation.spec.plan import requirements_sentence

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


class BuildsRoom(LocalState):
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
                               log_path=marker.get("log"), strategy=marker.get("strategy", strategy),
                               built_at=marker.get("completionTime"))
        return await self._build(build, requirements, strategy, log_path)

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
        # the environment's files are its own (copies: uv hard-links from its cache by default, and
        # its "clone" falls back to hard links where the filesystem has no reflinks, as ext4), and
        # compiled now: a kernel writes no bytecode (runner/environment.py), so the seal taken below
        # (seal.py) lists every file a run may load, __pycache__ included
        if strategy == "uv":
            steps = [[self.uv_path, "venv", "--quiet", "--python", base_python, str(tmp)],
                     [self.uv_path, "pip", "install", "--link-mode", "copy", "--compile-bytecode", "--python", py,
                      "-r", str(req_file), *c_args, *refresh]]
        else:
            steps = [[base_python, "-m", "venv", str(tmp)],
                     [py, "-m", "pip", "install", "--no-input", "--compile", "-r", str(req_file), *c_args]]
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

        marker = {"key": key, "requirements": requirements.display_lines,
                  "constraints": requirements.display_constraints,
                  "local": requirements.cache_key_material()["local"], "strategy": strategy, "python": base_python,
                  "startTime": started, "log": log_path}
        # the environment record, taken now with the built interpreter (before the seal: it is
        # kept beside the environment, where no kernel writes)
        record = await self._built_record(py, marker)

        def publish() -> None:
            marker["completionTime"] = isotime()
            (tmp / ENV_MARKER).write_text(json.dumps(marker, indent=1))
            # after the last write into the folder: the marker is sealed too, the last use is not
            manifest = seal.take(tmp)
            envs = tmp.parent
            seal.write(envs, key, tmp, manifest, None if "error" in record else record)
            target = self.env_dir(key)
            try:
                os.rename(tmp, target)  # atomic: the environment appears whole or not at all
            except OSError:
                seal.remove(envs, key, manifest["ino"])
                if not (target / ENV_MARKER).is_file():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)  # built twice; the first one stays
            with contextlib.suppress(OSError):
                (target / LAST_USE).touch()

        try:
            await asyncio.to_thread(publish)
        except seal.SealError as e:
            cause = f"The environment could not be sealed: {e}."
            return Observation(FAILED, message=cause, started_at=started, finished_at=isotime(), log_path=log_path,
                               strategy=strategy, fault=Fault(cause, transient=False))
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

