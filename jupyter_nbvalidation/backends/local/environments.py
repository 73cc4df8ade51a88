"""Environments of the local backend: content-addressed virtual environments (their
keys, the cache) built from a job's checked requirements (the builds themselves:
builds.py), shared by every job with the same key, each one sealed when it was built
(seal.py: a content manifest, checked before the environment is handed to a run; one
found changed is retired and built again), and each one's environment record
(environment_record.py), taken once, when it was built."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import jupyter_nbvalidation.backends.local.seal as seal
import jupyter_nbvalidation.environment.requirements as reqmod
import jupyter_nbvalidation.verdict.cache as verdict_cache
import jupyter_nbvalidation.verdict.environment_record as envrec
from jupyter_nbvalidation.backends.base import FAILED, RUNNING, SUCCEEDED, Fault, Notice, Observation
from jupyter_nbvalidation.backends.local.disk import (
    ENV_MARKER,
    LAST_USE,
    RECORD_FILE,
    RETIRED_PREFIX,
    _Build,
    _read_json,
    _write_json_atomic,
)
from jupyter_nbvalidation.backends.local.state import LocalState
from jupyter_nbvalidation.core.documents import Job, JobSpec
from jupyter_nbvalidation.core.model import EventReason, build_enabled, isotime, parse_time
from jupyter_nbvalidation.environment.requirements import Requirements
from jupyter_nbvalidation.spec.plan import ValidationPlan, requirements_key, requirements_of

tool_identity = envrec.tool_identity  # the record's tool, as the local backend's package exported it


class EnvironmentsRoom(LocalState):
    """A room of LocalBackend (backend.py): the state it uses is declared by LocalState (state.py)."""

    def _interpreter_for(self, python_requires: tuple[str, str] | None) -> tuple[str, str | None] | None:
        """(path, version) of the base interpreter an environment is built with: LocalBackend.python,
        unless the repository asks for a Python it is not (runtime.txt, requires-python,
        environment.yml's python): then the first of LocalBackend.pythons that fits (their
        versions asked on first need); None when none does (checked at submit: a 400 there)."""
        default = (self.python, self._python_version)
        if not self._wants_other_python(python_requires):
            return default  # also an invalid one: refused at submit; a job stored before that check keeps it
        assert python_requires is not None
        from packaging.specifiers import SpecifierSet  # deferred: start-up time (packaging)

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
        changed = await asyncio.to_thread(self._env_changes, key) \
            if rec is None and await asyncio.to_thread(self._env_ready, key) else []
        if changed:
            # changed since its build (a notebook installed or wrote into it): never handed on
            found = f"the cached environment {key} was found changed since it was built ({seal.describe(changed)})"
            others = await self._env_users(key, uid)
            if others:  # a rename would pull it from under their kernels: once they are done
                return Observation(FAILED, finished_at=isotime(), strategy=strategy, fault=Fault(
                    f"{found[0].upper()}{found[1:]}, and {', '.join(others)} still run in it; it is retired and "
                    "a fresh one built when they are done.", transient=True))
            await asyncio.to_thread(self._retire_env, key, "before a job would have reused it", changed)
            self._env_notes[uid] = f"{found[0].upper()}{found[1:]}; it was retired (never run in again) and rebuilt."
        note = self._env_notes.get(uid)
        notices = [Notice(EventReason.ENVIRONMENT_RETIRED, note)] if note else []
        if rec is None and await asyncio.to_thread(self._use_env, key):
            marker = await asyncio.to_thread(self._read_marker, key)
            return Observation(SUCCEEDED, reference=str(self.env_dir(key)), finished_at=isotime(),
                               message="Reused the cached environment (same interpreter and requirements).",
                               log_path=marker.get("log"), strategy=marker.get("strategy", strategy))
        if rec is not None and rec.task.done():
            obs = rec.task.result()
            return dataclasses.replace(obs, message=f"{obs.message} {note}", notices=notices) if note else obs
        if rec is None:
            build = self._builds.get(key)
            shared = self._shared_failure(build, job)
            if shared is not None:
                return shared
            started = await self._join_or_start_build(job, plan, key, strategy)
            if isinstance(started, Observation):
                return started
            self._job_build[uid] = started
        return Observation(RUNNING, message="Building the environment.", log_path=self._job_build[uid].log_path,
                           strategy=strategy, notices=notices)

    async def _join_or_start_build(self, job: Job, plan: ValidationPlan, key: str,
                                   strategy: str) -> _Build | Observation:
        """The build of ``key`` the job waits for: the one running, else a new one (an
        Observation: its requirements refused)."""
        build = self._builds.get(key)
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
        return build

    async def _rebuild_env(self, job: Job, plan: ValidationPlan, key: str) -> Observation:
        """The environment ``key`` built again, from the job's requirements, where it was (its
        reference is its key's: the one recorded at BuildComplete), after it was retired: found
        changed right before the job's kernel started (runs.py). Waited for; the build's outcome."""
        started = await self._join_or_start_build(job, plan, key, self.build_strategy(job))
        if isinstance(started, Observation):
            return started
        return await asyncio.shield(started.task)  # a cancel of the job leaves the build to finish

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

    def _env_changes(self, key: str) -> list[str]:
        """What of the environment is not as its build left it (seal.py): the paths added,
        removed or changed since its seal, empty when none. One without a seal (built by
        an older version, or its seal lost) cannot say so, and counts as changed."""
        envs = self.root / "envs"
        path = seal.seal_of(envs, key)
        manifest = seal.load(path) if path is not None else None
        if manifest is None:
            return [seal.NO_SEAL]
        return seal.verify(self.env_dir(key), manifest)

    async def _env_users(self, key: str, uid: str) -> list[str]:
        """The other unfinished jobs validating in (or about to validate in) the environment."""
        path = str(self.env_dir(key))
        return sorted(j["metadata"]["name"] for j in await self.store.list_active()
                      if j["metadata"]["uid"] != uid
                      and ((j.get("status") or {}).get("buildStatus") or {}).get("imageReference") == path)

    def _retire_env(self, key: str, when: str, changed: list[str]) -> None:
        """Out of sight at once (one rename: no job picks it up from now on, and the next
        build of its key publishes beside nothing), its seal removed; the folder removed
        by the next collection that finds no job active. Never fails."""
        envs = self.root / "envs"
        gone = envs / f"{RETIRED_PREFIX}{key}-{uuid.uuid4().hex[:8]}"
        try:
            ino = os.lstat(self.env_dir(key)).st_ino
            os.rename(self.env_dir(key), gone)
        except OSError:
            return  # retired or evicted meanwhile
        seal.remove(envs, key, ino)
        self.log.warning("nbvalidation: environment %s was found changed since it was built (noticed %s: %s; "
                         "something run in it wrote there); retired, the next job of its requirements builds a "
                         "fresh one", key, when, seal.describe(changed))

    def _read_marker(self, key: str) -> dict[str, Any]:
        try:
            marker: dict[str, Any] = json.loads((self.env_dir(key) / ENV_MARKER).read_text())  # _build_in's
            return marker
        except (OSError, ValueError):
            return {}

    async def _built_record(self, python: str, marker: dict[str, Any] | None) -> dict[str, Any]:
        """The environment record of ``python`` (its tool left for the job to fill in): a
        built environment's from its marker, else an interpreter's. Never fails: a record
        that cannot be taken says why (``error``)."""
        environment: dict[str, Any] = {"kind": "interpreter", "python": python}
        if marker is not None:
            environment = {"kind": "built", "key": marker.get("key"), "strategy": marker.get("strategy"),
                           "baseInterpreter": marker.get("python"), "requirements": marker.get("requirements"),
                           "constraints": marker.get("constraints") or []}
        try:
            probe = await envrec.probe(python)
        except envrec.RecordError as e:
            return {"apiVersion": envrec.API_VERSION, "kind": envrec.KIND, "takenAt": isotime(),
                    "environment": environment, "error": str(e)}
        return envrec.shape(probe, environment=environment, tool={}, taken_at=isotime(),
                            local_hashes=(marker or {}).get("local") or {})

    async def _record_environment(self, job: Job, python: str, reference: str | None) -> None:
        """The job's environment record (environment_record.py), beside its runs. A
        built environment never changes: its distributions were read when it was built
        (builds.py) and kept beside its seal, out of every kernel's reach; with the build
        disabled they are read now from the interpreter the kernel runs (it can change
        between jobs). The tool's identity is this job's. Never fails the job: a record
        that cannot be taken says why."""
        target = self.job_dir(job) / RECORD_FILE
        if await asyncio.to_thread(target.is_file):
            return  # a retry runs in the same environment
        kept = await asyncio.to_thread(seal.seal_of, self.root / "envs", Path(reference).name, ".record.json") \
            if reference else None
        record = await asyncio.to_thread(_read_json, kept) if kept is not None else None
        unbuilt = None
        if reference is None:  # read again only when its distributions changed (a few directory listings)
            unbuilt = await asyncio.to_thread(verdict_cache.installed_distributions, python)
            memo = self._unbuilt_records.get(python)
            if unbuilt is not None and memo is not None and memo[0] == unbuilt:
                record = dict(memo[1])
        if record is None:  # a built one's kept record lost: taken again (written beside its seal)
            marker = await asyncio.to_thread(_read_json, Path(reference) / ENV_MARKER) if reference else None
            record = await self._built_record(python, marker)
            if "error" not in record and kept is not None:
                with contextlib.suppress(OSError):
                    await asyncio.to_thread(_write_json_atomic, kept, record)
            elif "error" not in record and unbuilt is not None:
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
