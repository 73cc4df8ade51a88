"""Submitting, listing and cancelling jobs: the operations every entry point
(REST, CLI, magic) shares. Bad input raises :class:`ApiError` before anything
is written, so a refused request creates nothing."""

from __future__ import annotations

import asyncio
import glob
import json
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import jupyter_nbvalidation.environment.local_sources as local_sources
import jupyter_nbvalidation.environment.requirements as reqmod
import jupyter_nbvalidation.verdict.cache as verdict_cache
import jupyter_nbvalidation.verdict.markers as markers
import jupyter_nbvalidation.why_red.changes as changes
from jupyter_nbvalidation.backends.base import Backend
from jupyter_nbvalidation.core.documents import Event, Job, JobSpec
from jupyter_nbvalidation.core.errors import InputRejected
from jupyter_nbvalidation.core.model import (
    ROOT_ANNOTATION,
    WORKDIR_ANNOTATION,
    Phase,
    SpecError,
    build_enabled,
    is_terminal,
    new_job,
    validate_spec,
)
from jupyter_nbvalidation.core.redaction import mask_urls, mask_values, scrub
from jupyter_nbvalidation.core.tasks import cancel_and_wait
from jupyter_nbvalidation.core.timeline import compute_timeline
from jupyter_nbvalidation.engine.engine import Engine
from jupyter_nbvalidation.environment.requirements import Requirements
from jupyter_nbvalidation.store.base import JobStore, NotFound, StoreBroken, StoreError

if TYPE_CHECKING:
    from jupyter_nbvalidation.service.bisections import Bisections

INPUTS_PREFIX = "inputs/"  # spec.inputFiles in a job's files: inputs/<path relative to the notebook's folder>


class ApiError(Exception):
    """A client mistake (4xx) or a known server-side refusal."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field

    def to_json(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "field": self.field}}


def store_api_error(e: BaseException) -> "ApiError | None":
    """What a store raised past the service's own checks, as HTTP: NotFound is the service's 404; any
    other store error means it is not reachable (yet: a Kubernetes store before its caches synced),
    a 503 worth retrying. None: not a store error."""
    if isinstance(e, StoreBroken):  # waiting does not help: the message says what is wrong
        return ApiError(503, "StoreUnavailable", f"The job store is not available: {e}.")
    if isinstance(e, StoreError) and not isinstance(e, NotFound):
        return ApiError(503, "StoreUnavailable", f"The job store is not available ({e}); try again shortly.")
    return None


def resolve_in_root(root_dir: str, rel: str, field: str) -> Path:
    """An API path (relative, '/'-separated) inside the server root, or 403."""
    if not isinstance(rel, str) or not rel.strip():
        raise ApiError(400, "InvalidField", f"{field} must be a non-empty path", field)
    if "\x00" in rel:
        raise ApiError(400, "InvalidField", f"{field} contains a NUL byte", field)
    root = Path(root_dir).resolve()
    rel = rel.strip()
    if os.path.isabs(rel) or rel.startswith("~"):
        raise ApiError(403, "Forbidden", f"{field} must be relative to the server root", field)
    full = (root / rel).resolve()
    if full != root and root not in full.parents:
        raise ApiError(403, "Forbidden", f"{field} points outside the server root", field)
    return full


def _read_notebook(path: Path, field: str, limit: int) -> bytes:
    if not path.exists():
        raise ApiError(404, "NotFound", f"{field}: no such notebook: {path.name}", field)
    if not path.is_file():
        raise ApiError(400, "InvalidField", f"{field}: {path.name} is not a file", field)
    size = path.stat().st_size
    if size > limit:
        raise ApiError(413, "TooLarge", f"{field}: the notebook is {size} bytes; the limit is {limit} bytes "
                       "(c.NBValidation.max_notebook_bytes)", field)
    data = path.read_bytes()
    import nbformat  # deferred: start-up time (importing nbformat imports jsonschema)

    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)  # type: ignore[no-untyped-call]  # nbformat is untyped
        nbformat.validate(nb)
    except UnicodeDecodeError:
        raise ApiError(400, "InvalidNotebook", f"{field}: the notebook is not UTF-8 text", field) from None
    except (ValueError, nbformat.ValidationError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ApiError(400, "InvalidNotebook", f"{field}: not a valid notebook: {reason}", field) from None
    except Exception as e:  # nbformat raises various things on odd JSON
        raise ApiError(400, "InvalidNotebook", f"{field}: not a valid notebook: {e}", field) from None
    # The environment is a Python virtual environment (or image) and the runner starts an
    # ipykernel in it: a notebook written for another kernel would fail on its first cell
    # for a reason that has nothing to do with the notebook, so say so now.
    problem = markers.notebook_settings_problem(nb)
    if problem is not None:
        raise ApiError(400, "InvalidNotebook", f"{field}: {problem}", field)
    meta = nb.get("metadata", {})
    language = (meta.get("kernelspec") or {}).get("language") or (meta.get("language_info") or {}).get("name")
    if isinstance(language, str) and language.strip().lower() not in ("", "python", "python3"):
        raise ApiError(400, "UnsupportedKernel",
                       f"{field}: the notebook's kernel language is {language!r}; only Python notebooks "
                       "can be validated (the environment is built from Python requirements and runs ipykernel)",
                       field)
    return data


PROBE_ANNOTATION = "nbvalidation.dev/probe-of"  # a bisect step: the failing job it probes for


def is_probe(job: Mapping[str, Any]) -> bool:
    return bool(((job.get("metadata") or {}).get("annotations") or {}).get(PROBE_ANNOTATION))


class JobService:
    def __init__(self, engine: Engine, backend: Backend, root_dir: str, *, max_notebook_bytes: int = 10 * 2**20,
                 max_input_files: int = 1000, max_input_bytes: int = 50 * 2**20):
        self.engine = engine
        self.backend = backend
        self.root_dir = root_dir
        self.real_root = os.path.realpath(root_dir)  # as jobs record it (ROOT_ANNOTATION), read once
        self.max_notebook_bytes = max_notebook_bytes
        self.max_input_files = max_input_files
        self.max_input_bytes = max_input_bytes
        self.start_problem: str | None = None  # why the engine has not started (start_serving)
        self._start_retry: asyncio.Task[None] | None = None
        self._bisections: "Bisections | None" = None  # the lab's Find the cause (bisect_runs)

    @property
    def store(self) -> JobStore:
        return self.backend.store

    # -- running the service in this process (the CLI; the server runs it through app.py) ----------
    async def open(self) -> None:
        """Open the store: reads, submits and deletes work, nothing is reconciled yet."""
        await self.store.start()

    async def close(self) -> None:
        await self.store.stop()

    async def start(self) -> None:
        """Start the engine: this process reconciles once it holds the store's lease."""
        await self.engine.start()

    async def start_serving(self, log: Any, retry_max: float = 30.0) -> None:
        """The server's start: the engine starts now, or, when its store cannot be
        opened (locked, unreadable, not a database), the server serves all the same —
        /health is unusable with the cause, every route a 503 naming it — and the
        start is tried again in the background (every ``retry_max`` s at most), so a
        store that comes back (or is repaired) needs no restart."""
        try:
            await self.engine.start()
            return
        except StoreError as e:
            self.start_problem = f"the engine cannot start: {e}"
        log.error("nbvalidation: %s; the REST API answers 503 until it can", self.start_problem)

        async def again() -> None:
            wait = 1.0
            while True:
                await asyncio.sleep(wait)
                wait = min(retry_max, wait * 2)
                try:
                    await self.engine.start()
                except StoreError as e:
                    self.start_problem = f"the engine cannot start: {e}"
                    continue
                self.start_problem = None
                log.info("nbvalidation: the engine started after all")
                return

        self._start_retry = asyncio.get_running_loop().create_task(again(), name="nbvalidation-start-retry")

    async def stop(self) -> None:
        if self._bisections is not None:  # each search's running step cancelled while the engine still runs
            await self._bisections.close()
        if self._start_retry is not None:
            await cancel_and_wait(self._start_retry)
            self._start_retry = None
        await self.engine.stop()

    async def wait_for_terminal(self, name: str, timeout: float | None = None,
                                on_update: Callable[[Job], None] | None = None) -> Job:
        """The job once it is Succeeded or Failed (``on_update`` sees each change)."""
        return await self.engine.wait_for_terminal(name, timeout, on_update)

    async def hand_over(self, drain: bool = True) -> None:
        """Done here: the events are posted, the lease released at once, and what this
        process started for other jobs finishes (never killed, never run twice: the next
        holder adopts its outcome); ``drain=False`` does not wait for that (an interrupted
        batch, which cancelled its own)."""
        await self.engine.recorder.flush()
        await self.engine.step_down()
        if drain:
            await self.backend.drain()

    def check_spec(self, spec: Any) -> JobSpec:
        """A spec as submit would take it (the backend's fields and values), or ApiError 400."""
        return self._validate(spec)

    async def health(self) -> dict[str, Any]:
        """GET /health: the backend's state and the engine's figures."""
        engine = self.engine
        health = await self.backend.health()
        if self.start_problem and not engine.running:
            health.update(usable=False, problem=self.start_problem)
        health["engine"] = {"running": engine.running, "leading": engine.leading.is_set(),
                            "reconciles": engine.reconciles, "errors": engine.errors,
                            "eventsPosted": engine.recorder.posted, "eventsFailed": engine.recorder.failed,
                            "eventsDropped": engine.recorder.dropped, "eventsRecovered": engine.events_recovered,
                            **engine.activity(),
                            "loopLagMs": {"sinceStart": round(engine.max_loop_lag * 1000, 1),
                                          "lastMinute": round(engine.loop_lag_within(60) * 1000, 1),
                                          "last10s": round(engine.loop_lag_within(10) * 1000, 1)}}
        return health

    def _validate(self, spec: Any) -> JobSpec:
        try:
            checked = validate_spec(spec, self.backend.supported_fields())
            self.backend.check_spec(checked)
        except SpecError as e:
            reason = e.reason
            explain = self.backend.unsupported_reason(e.field)
            if explain and reason == "not supported by this backend":
                reason = f"not supported by the {self.backend.name} backend: {explain}"
            field = e.field if e.field.startswith("spec") else f"spec.{e.field}"
            raise ApiError(400, "InvalidSpec", f"{field}: {reason}", field) from None
        return checked

    def _collect(self, spec: dict[str, Any]) -> tuple[dict[str, bytes], Path, Requirements]:
        """Read the inputs now: this snapshot is what gets validated."""
        nb_path = resolve_in_root(self.root_dir, spec["notebook"]["path"], "spec.notebook.path")
        files = {"notebook.ipynb": _read_notebook(nb_path, "spec.notebook.path", self.max_notebook_bytes)}
        golden = spec.get("goldenNotebook")
        if golden:
            g_path = resolve_in_root(self.root_dir, golden["path"], "spec.goldenNotebook.path")
            files["golden.ipynb"] = _read_notebook(g_path, "spec.goldenNotebook.path", self.max_notebook_bytes)
        reqs = reqmod.Requirements(origin="no requirements declared")
        if build_enabled(spec):
            try:
                reqs = reqmod.collect(spec, self.root_dir, str(nb_path),
                                      system_packages=self.backend.capabilities.system_packages)
            except reqmod.RequirementsError as e:
                raise ApiError(e.status, "NotFound" if e.status == 404 else "InvalidRequirements", e.message,
                               e.field) from None
            self._check_requirement_features(reqs)
            self._check_python_requires(reqs)
            self._check_supported_environments(reqs)
            files.update(reqs.snapshot())
        if spec.get("inputFiles"):
            files.update(self._input_files(spec, nb_path))
        return files, nb_path, reqs

    def _check_python_requires(self, reqs: "reqmod.Requirements") -> None:
        """The Python the repository asks for (runtime.txt, requires-python) against the one
        environments are built with here: a clear 400 rather than a build that fails or,
        worse, a verdict from a Python the notebook did not declare."""
        if reqs.python_requires is None:
            return
        spec, where = reqs.python_requires
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        field = "spec.podConfig.buildConfig.requirementsFile"
        try:
            wanted = SpecifierSet(spec)
        except InvalidSpecifier:
            raise ApiError(400, "InvalidRequirements", f"{field}: {where}: {spec!r} is not a version specifier",
                           field) from None
        version = self.backend.build_python_version()
        if version is None:  # known only once the build runs (Kubernetes: the image checks it, objects.py)
            return
        if wanted.contains(version, prereleases=True):
            return
        others = self.backend.build_pythons()
        fits = [(path, v) for path, v in others if wanted.contains(v, prereleases=True)]
        if fits:  # the build picks it (backends/local/environments.py); every verdict says so
            reqs.origin = f"{reqs.origin}; Python {fits[0][1]} ({fits[0][0]}), as {where} asks"
            return
        here = ", ".join([version, *(v for _, v in others if v != version)])
        raise ApiError(400, "InvalidRequirements",
                       f"{field}: {where} asks for Python {spec}; environments here are built with Python {here} "
                       "(c.LocalBackend.python, c.LocalBackend.pythons), so the notebook cannot be validated here as "
                       "its repository declares it", field)

    def _check_supported_environments(self, reqs: "reqmod.Requirements") -> None:
        """A lock file valid only for some environments (PEP 751 ``environments``, uv.lock's
        ``supported-markers``): the build's (this machine, the build's Python) must be one of
        them, as uv sync or a PEP 751 installer requires. Not known: not checked."""
        if reqs.supported_environments is None:
            return
        version = self.backend.build_python_version()
        if version is None:
            return
        import jupyter_nbvalidation.environment.files as ef

        markers, where = reqs.supported_environments
        if not ef.environments_fit(markers, version):
            import platform

            field = "spec.podConfig.buildConfig.requirementsFile"
            raise ApiError(400, "InvalidRequirements",
                           f"{field}: {where} lists the environments the lock is valid for "
                           f"({ef.bounded('; '.join(markers))}); "
                           f"environments here (Python {version} on {sys.platform} {platform.machine()}) are not "
                           "one of them, so the notebook cannot be validated here as its repository declares it",
                           field)

    def _check_requirement_features(self, reqs: "reqmod.Requirements") -> None:
        """What the backend can build: local paths and credentials need the
        local backend (a Kubernetes build cannot read the server's files)."""
        field = ("spec.podConfig.buildConfig.requirements" if reqs.source_path is None
                 else "spec.podConfig.buildConfig.requirementsFile")
        if reqs.project_file and not self.backend.capabilities.local_requirement_paths:
            raise ApiError(400, "InvalidRequirements",
                           f"{field}: {reqs.origin}: the environment is the project of {reqs.project_file}, "
                           f"installed from the server's files; the {self.backend.name} backend cannot install "
                           "the project from the server's files yet (it builds where they are not): declare the "
                           "notebook's dependencies in a requirements.txt (or binder/), or list them in "
                           "spec.podConfig.buildConfig.requirements", field)
        if reqs.local_paths and not self.backend.capabilities.local_requirement_paths:
            raise ApiError(400, "InvalidRequirements",
                           f"{field}: {reqs.origin} names local paths ({', '.join(sorted(set(reqs.local_paths))[:3])}); "
                           f"the {self.backend.name} backend builds where the server's files are not "
                           "(list packages from an index)", field)
        if reqs.local_paths and self.backend.capabilities.local_paths_travel:  # read now, once: what is built
            try:
                reqs.packed = local_sources.pack(reqs.local_paths, self.backend.private_paths())
            except (local_sources.PackError, OSError, ValueError) as e:
                status = e.status if isinstance(e, local_sources.PackError) else 400
                raise ApiError(status, "TooLarge" if status == 413 else "InvalidRequirements",
                               f"{field}: {reqs.origin}: its local paths travel with the job to the "
                               f"{self.backend.name} image build, and cannot: {e}", field) from None
        if reqs.constraints and not self.backend.capabilities.constraint_files:
            if reqs.spec_constraints:
                listed = reqmod.CONSTRAINTS_FIELD
                raise ApiError(400, "InvalidRequirements",
                               f"{listed}: the {self.backend.name} backend does not take constraints yet", listed)
            raise ApiError(400, "InvalidRequirements",
                           f"{field}: {reqs.origin} uses a constraints file (-c); the {self.backend.name} backend "
                           "does not take constraints yet", field)
        if reqs.secrets and not self.backend.capabilities.index_credentials:
            raise ApiError(400, "InvalidRequirements",
                           f"{field}: {reqs.origin} carries index credentials; the {self.backend.name} backend "
                           "cannot keep them out of what it stores yet", field)

    def _input_files(self, spec: dict[str, Any], nb_path: Path) -> dict[str, bytes]:
        """spec.inputFiles: the files beside the notebook the job names
        (globs relative to its folder), resolved inside the root, bounded,
        read now into ``inputs/<path relative to the notebook's folder>``."""
        field = "spec.inputFiles"
        root = os.path.realpath(self.root_dir)
        rel_dir = os.path.dirname(spec["notebook"]["path"].strip())
        base = os.path.join(root, rel_dir)  # the folder as the user names it (the notebook's API folder)
        chosen: dict[str, str] = {}  # relative path -> real path
        for i, pattern in enumerate(spec["inputFiles"]):
            where = f"{field}[{i}]"
            matched = 0
            for rel in glob.iglob(pattern.strip(), root_dir=base, recursive=True):
                full = os.path.join(base, rel)
                candidates = [rel]
                if os.path.isdir(full) and not os.path.islink(full):
                    candidates = []
                    for dirpath, dirnames, filenames in os.walk(full):
                        dirnames.sort()
                        candidates += [os.path.relpath(os.path.join(dirpath, f), base) for f in sorted(filenames)]
                        if len(candidates) + len(chosen) > self.max_input_files:
                            break
                for c in candidates:
                    norm = os.path.normpath(c)
                    if norm.startswith("..") or os.path.isabs(norm):
                        raise ApiError(400, "InvalidField", f"{where}: {c!r} is outside the notebook's folder", where)
                    real = os.path.realpath(os.path.join(base, norm))
                    if real != root and not real.startswith(root + os.sep):
                        raise ApiError(400, "InvalidField", f"{where}: {norm} resolves outside the server root "
                                                         "(symlinks are followed and must stay inside it)", where)
                    if os.path.isdir(real):
                        continue  # a link to a folder: name its files
                    chosen[norm] = real
                    matched += 1
                    if len(chosen) > self.max_input_files:
                        raise ApiError(400, "TooLarge", f"{where}: the patterns match over {self.max_input_files} "
                                                        f"files; the limit is {self.max_input_files} "
                                                        "(c.NBValidation.max_input_files)", field)
            if not matched:
                raise ApiError(400, "InvalidField", f"{where}: {pattern!r} matches no file beside the notebook",
                               where)
        out: dict[str, bytes] = {}
        total = 0
        for rel, real in sorted(chosen.items()):
            remaining = self.max_input_bytes - total
            try:
                got = reqmod.read_confined(real, root, max(remaining, 0), f"{field}: {rel}", field)
            except reqmod.RequirementsError as e:
                if isinstance(e, reqmod.OverLimit):
                    raise ApiError(400, "TooLarge", f"{field}: the input files are over {self.max_input_bytes} "
                                                    f"bytes in total (the limit, c.NBValidation.max_input_bytes; "
                                                    f"{rel} does not fit)", field) from None
                raise ApiError(400, "InvalidField", e.message, field) from None
            assert got is not None
            out[f"{INPUTS_PREFIX}{Path(rel).as_posix()}"] = got[0]
            total += len(got[0])
        return out

    async def _prepare(self, spec: Any) -> tuple[dict[str, Any], dict[str, bytes], Path, Requirements, str | None, str | None]:
        """What submit and the verdict cache both start from: the checked spec (its
        credentials redacted), the inputs read now, the requirements, the kernel's
        environment as the backend identifies it and the verdict key (None: not
        known). Bad input raises ApiError; nothing is created."""
        bad = find_bad_number(spec, "spec")
        if bad:
            raise ApiError(400, "InvalidSpec", f"{bad[0]}: {bad[1]}", bad[0])
        spec = self._validate(spec)
        files, nb_path, reqs = await asyncio.to_thread(self._collect, spec)
        if not spec.get("inputFiles"):
            # the kernel works in the notebook's folder (a copy of it): within the backend's bounds
            try:
                await asyncio.to_thread(self.backend.check_working_folder, str(nb_path.parent), self.real_root)
                if self.backend.capabilities.folder_in_snapshot:  # the kernel runs where these files are not
                    files.update(await asyncio.to_thread(self.backend.folder_files, str(nb_path.parent),
                                                         self.real_root))
            except InputRejected as e:
                raise ApiError(e.status, e.code, e.message, e.field) from None
        bc = spec.get("podConfig", {}).get("buildConfig", {})
        if reqs.secrets and bc.get("requirements"):  # the stored spec never holds a credential
            bc["requirements"] = [mask_urls(mask_values(r, reqs.secrets)) for r in bc["requirements"]]
        env = await self.backend.verdict_environment(spec, reqs)
        key = None if env is None else await asyncio.to_thread(self._verdict_key, spec, files, nb_path, env)
        return spec, files, nb_path, reqs, env, key

    async def submit(self, spec: Any, probe_of: str | None = None) -> Job:
        """A new job. ``probe_of``: the name of a job of the same notebook this one is a
        probe for (``bisect``'s steps): it never stands as the notebook's verdict (left out
        of the job list unless asked for, of the verdict cache and of the last success)."""
        if probe_of is not None:
            target = await self.get(probe_of)
            path = (spec.get("notebook") or {}).get("path") if isinstance(spec, dict) else None
            if path != target["spec"]["notebook"]["path"]:
                raise ApiError(400, "InvalidField", f"probeOf: job {probe_of!r} is not of notebook {path!r}",
                               "probeOf")
        spec, files, nb_path, reqs, _env, key = await self._prepare(spec)
        # no inputFiles: the kernel works in a copy of the notebook's own folder (the
        # local backend's, per attempt); with them, in a copy of the job's snapshot of them
        annotations = {} if spec.get("inputFiles") else {WORKDIR_ANNOTATION: str(nb_path.parent)}
        annotations[ROOT_ANNOTATION] = self.real_root
        if build_enabled(spec):  # where the environment comes from, kept for a restart or another server
            annotations[reqmod.ORIGIN_ANNOTATION] = reqs.origin
        source = reqmod.source_annotation(reqs, spec, self.root_dir)
        if source:
            annotations[reqmod.SOURCE_ANNOTATION] = source
        if key and probe_of is None:  # a probe's verdict never answers for the notebook
            annotations[verdict_cache.ANNOTATION] = key
        if probe_of is not None:
            annotations[PROBE_ANNOTATION] = probe_of
        job = new_job(spec, annotations=annotations)
        reqmod.hold(job["metadata"]["name"], reqs.secrets)
        try:
            job = await self.backend.submit(job, files)
        except InputRejected as e:  # the one mapping of the ports' input errors to HTTP
            reqmod.release(job["metadata"]["name"])
            raise ApiError(e.status, e.code, e.message, e.field) from None
        except BaseException:
            reqmod.release(job["metadata"]["name"])
            raise
        self.engine.enqueue(job["metadata"]["name"])
        return job

    @staticmethod
    def _root_of(job: Job) -> str | None:
        return ((job.get("metadata") or {}).get("annotations") or {}).get(ROOT_ANNOTATION)

    def _verdict_key(self, spec: dict[str, Any], files: dict[str, bytes], nb_path: Path, env: str) -> str | None:
        workdir = None if spec.get("inputFiles") else nb_path.parent
        return verdict_cache.verdict_key(spec, files, env, workdir=workdir, notebook_path=nb_path,
                                         backend=self.backend, root=Path(self.real_root))

    async def unchanged(self, spec: Any, max_pages: int = 20) -> Job | None:
        """The verdict cache: an earlier Succeeded job whose verdict key equals the key
        ``spec``'s inputs have now (see verdict_cache), or None. Checks the spec and reads
        the inputs as submit does (bad input raises as there); creates nothing."""
        spec, _files, _nb_path, _reqs, env, key = await self._prepare(spec)
        if not key or env is None:
            return None
        token = None
        for _ in range(max_pages):  # newest first: the newest job with the key decides
            items, token = await self.store.list_jobs(notebook=spec["notebook"]["path"], limit=100, continue_token=token)
            for job in items:
                if is_probe(job):
                    continue
                # only jobs of this root, and known to be: a job without its root never stands in
                if self._root_of(job) == self.real_root and verdict_cache.has_key(job, key):
                    # the newest with the key decides: a Failed, Cancelled or unfinished one means it runs
                    if verdict_cache.matches(job, key) and await self.backend.same_verdict_environment(job, env):
                        return job
                    return None
            if not token:
                break
        return None

    async def get(self, name: str) -> Job:
        try:
            return await self.store.get(name)
        except NotFound:
            raise ApiError(404, "NotFound", f"no job named {name!r}") from None

    async def list_jobs(self, notebook: str | None, limit: int, continue_token: str | None,
                        probes: bool = False) -> dict[str, Any]:
        """A page of jobs, newest first; probe jobs (``bisect``'s steps) only with ``probes``."""
        try:
            items, token = await self.store.list_jobs(notebook=notebook, limit=limit, continue_token=continue_token)
        except ValueError as e:
            raise ApiError(400, "InvalidField", str(e), "continue") from None
        # a job of another root (another server's, an in-process run's elsewhere) is not one of
        # this root's notebooks, whatever its path says; jobs from before roots were recorded stay
        listed = [list_item(j) for j in items if self._root_of(j) in (None, self.real_root)
                  and (probes or not is_probe(j))]
        return {"apiVersion": "v1", "kind": "NotebookValidationJobList", "items": listed,
                "metadata": {"continue": token}}

    async def cancel(self, name: str) -> Job:
        job = await self.get(name)
        if is_terminal((job.get("status") or {}).get("phase")):
            return job
        return await self.engine.request_cancel(name)

    async def delete(self, name: str) -> tuple[int, Job | dict[str, Any]]:  # (202, the job) or (200, a Status)
        """DELETE: a finished job is removed with its events and files (200 and a
        Status); a job still running is cancelled instead (202 and the job)."""
        job = await self.get(name)
        if not is_terminal((job.get("status") or {}).get("phase")):
            return 202, await self.engine.request_cancel(name)
        try:
            await self.backend.delete_job(job)
        except NotFound:
            raise ApiError(404, "NotFound", f"no job named {name!r}") from None
        return 200, {"apiVersion": "v1", "kind": "Status", "status": "Success",
                     "details": {"name": name, "uid": job["metadata"]["uid"], "kind": "NotebookValidationJob"}}

    async def gc(self, job_ttl: float | None = None, env_cache_max_bytes: int | None = None) -> dict[str, Any]:
        """Retention and the environment cache cap, now (local backend)."""
        if not self.backend.capabilities.garbage_collection:
            raise ApiError(400, "Unsupported", f"the {self.backend.name} backend has no garbage collection here")
        return await self.backend.collect(job_ttl=job_ttl, env_cache_max_bytes=env_cache_max_bytes)

    async def events(self, name: str) -> list[Event]:
        job = await self.get(name)
        return await self.store.list_events(job)

    async def timeline(self, name: str) -> dict[str, Any]:
        job = await self.get(name)
        return compute_timeline(job, await self.store.list_events(job))

    async def executed_notebook(self, name: str) -> dict[str, Any]:
        job = await self.get(name)
        nb = await self.backend.executed_notebook(job)
        if nb is None:
            raise ApiError(404, "NotFound", f"job {name!r} has no executed notebook yet")
        return nb

    async def environment_record(self, name: str) -> dict[str, Any]:
        """The job's environment record (environment_record.py), or 404 saying why there is none."""
        job = await self.get(name)
        if not self.backend.capabilities.environment_records:
            raise ApiError(404, "NotFound", f"the {self.backend.name} backend does not record environments yet")
        record = await self.backend.environment_record(job)
        if record is None:
            phase = (job.get("status") or {}).get("phase", "")
            why = ("its validation has not started" if phase not in (Phase.SUCCEEDED, Phase.FAILED)
                   else "it ended before its validation started (or was validated before environments were recorded)")
            raise ApiError(404, "NotFound", f"job {name!r} has no environment record: {why}")
        return record

    async def lock(self, name: str) -> str:
        """The exact pins of the job's environment as a requirements file
        (environment_lock.lock_text), or 404 saying why there are none."""
        import jupyter_nbvalidation.why_red.lock as environment_lock

        job = await self.get(name)
        record = await self.environment_record(name)
        try:
            return environment_lock.lock_text(job, record)
        except environment_lock.NoLock as e:
            raise ApiError(404, "NotFound", f"job {name!r} has no lock: {e}") from None

    # -- the cause of a red: bisect here (the lab's Find the cause; the CLI runs its own) ---------
    def _bisect_runs(self) -> "Bisections":
        if not self.backend.capabilities.environment_records:
            raise ApiError(404, "NotFound", f"the {self.backend.name} backend does not record environments yet, "
                                            "so it cannot bisect")
        if self._bisections is None:
            from jupyter_nbvalidation.service.bisections import Bisections

            self._bisections = Bisections(self)
        return self._bisections

    async def bisect_start(self, name: str, max_steps: int) -> tuple[bool, dict[str, Any]]:
        """Start searching which package changes turned failed job ``name`` red (bisect_runs):
        (started now, its document); one already running is answered as it is."""
        return await self._bisect_runs().start(name, max_steps)

    async def bisect_status(self, name: str) -> dict[str, Any]:
        await self.get(name)
        doc = self._bisect_runs().get(name)
        if doc is None:
            raise ApiError(404, "NotFound", f"no search for the cause of job {name!r} was started here")
        return doc

    async def bisect_stop(self, name: str) -> dict[str, Any]:
        await self.get(name)
        doc = await self._bisect_runs().stop(name)
        if doc is None:
            raise ApiError(404, "NotFound", f"no search for the cause of job {name!r} was started here")
        return doc

    async def since_last_success(self, name: str, max_pages: int = 20) -> dict[str, Any]:
        """What changed between the job and the newest earlier Succeeded job of the same
        notebook (this root's): changes.summarize; ``{"since": null}`` when there is none."""
        job = await self.get(name)
        if not self.backend.capabilities.environment_records:
            raise ApiError(404, "NotFound", f"the {self.backend.name} backend does not record environments yet, "
                                            "so it cannot say what changed")
        earlier = await self._last_success_before(job, max_pages)
        if earlier is None:
            return {"since": None, "sentence": "no earlier success of this notebook"}
        before, after = [changes.Side(j, await self.backend.snapshot_files(j), await self.backend.environment_record(j))
                         for j in (earlier, job)]
        return await asyncio.to_thread(changes.summarize, before, after)

    async def _last_success_before(self, job: Job, max_pages: int) -> Job | None:
        root = self._root_of(job)
        token, seen = None, False
        for _ in range(max_pages):  # newest first: the first Succeeded one after the job itself
            items, token = await self.store.list_jobs(notebook=job["spec"]["notebook"]["path"], limit=100,
                                                      continue_token=token)
            for other in items:
                if other["metadata"]["name"] == job["metadata"]["name"]:
                    seen = True
                elif seen and self._root_of(other) == root and not is_probe(other) and \
                        (other.get("status") or {}).get("phase") == Phase.SUCCEEDED:
                    return other
            if not token:
                break
        return None

    async def build_log(self, name: str, offset: int = 0) -> BuildLogChunk:
        """The build log from byte ``offset``: while the build runs (phase
        Initializing or Building) the log so far, up to its last complete
        line, with ``complete`` false; afterwards the rest of the whole log.
        404 only for an unknown job or one without a build log (build
        disabled, or a reused environment whose log is gone)."""
        if offset < 0:
            raise ApiError(400, "InvalidField", "offset must be a byte offset >= 0", "offset")
        job = await self.get(name)
        building = (job.get("status") or {}).get("phase", "") in ("", Phase.INITIALIZING, Phase.BUILDING)
        log = await self.backend.build_log(job)
        if log is None:
            if not (building and build_enabled(job["spec"])):
                raise ApiError(404, "NotFound", f"job {name!r} has no build log")
            log = ""  # the build is about to start: its log is empty so far
        # masked here for every backend, line by line: a whole line masks the same on every read,
        # so the offsets of the lines already served hold (the local one masks as it writes too);
        # a long log is masked off the event loop
        data = (await asyncio.to_thread(_masked_log, log) if len(log) > 65536 else _masked_log(log))
        offset = min(offset, len(data))
        chunk = data[offset:]
        if building:  # a line still being written (and a character cut in two) waits for the next read
            chunk = chunk[: chunk.rfind(b"\n") + 1]
        return BuildLogChunk(chunk, not building, offset + len(chunk))


def _masked_log(log: str) -> bytes:
    return "".join(scrub(line) for line in log.splitlines(keepends=True)).encode("utf-8")


@dataclass
class BuildLogChunk:
    """Part of a build log (``GET /jobs/{name}/buildlog?offset=N``)."""

    data: bytes
    complete: bool  # the build has ended: nothing more will be written
    next_offset: int  # the offset to ask for next


class BadNumber:
    """A JSON number the request parser would not take as a finite value
    (``NaN``, ``Infinity``, ``1e400``, over MAX_NUMBER_CHARS digits); kept
    as a marker so the refusal can name its field."""

    def __init__(self, text: str, reason: str):
        self.text = text
        self.reason = reason


MAX_NUMBER_CHARS = 40  # a JSON number token (an int64 has at most 20 characters)
MAX_JSON_DEPTH = 64  # nesting of a request body
MAX_BODY_BYTES = 2 * 2**20  # a request body (a spec is a few KiB)


def _parse_float(text: str) -> Any:
    if len(text) > MAX_NUMBER_CHARS:
        return BadNumber(text, f"a number of over {MAX_NUMBER_CHARS} characters is not accepted")
    value = float(text)
    if not math.isfinite(value):
        return BadNumber(text, f"{text[:20]} is out of range (numbers must be finite)")
    return value


def _parse_int(text: str) -> Any:
    if len(text) > MAX_NUMBER_CHARS:
        return BadNumber(text, f"a number of over {MAX_NUMBER_CHARS} characters is not accepted")
    return int(text)


def _parse_constant(text: str) -> Any:
    return BadNumber(text, f"{text} is not a number JSON allows (numbers must be finite)")


def loads_strict(body: bytes | str) -> Any:
    """A request body: standard JSON only. Non-finite and overlong numbers
    become :class:`BadNumber` (refused by the caller, naming the field);
    too deep a nesting is a ValueError (never a RecursionError)."""
    if isinstance(body, bytes):
        body = body.decode("utf-8")
    depth = _max_depth(body)
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"nested over {MAX_JSON_DEPTH} levels deep")
    try:
        return json.loads(body, parse_float=_parse_float, parse_int=_parse_int, parse_constant=_parse_constant)
    except RecursionError:
        raise ValueError(f"nested over {MAX_JSON_DEPTH} levels deep") from None


def _max_depth(text: str) -> int:
    """The deepest [ / { nesting of a JSON text (strings skipped); cheap, no recursion."""
    depth = deepest = 0
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', text):
        c = m.group(0)
        if c in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_JSON_DEPTH:
                    return deepest
        elif c in "]}":
            depth -= 1
    return deepest


def find_bad_number(obj: Any, path: str) -> tuple[str, str] | None:
    """(field, reason) of the first non-finite or overlong number in ``obj``."""
    stack = [(obj, path)]
    while stack:
        cur, where = stack.pop()
        if isinstance(cur, BadNumber):
            return where, cur.reason
        if isinstance(cur, float) and not math.isfinite(cur):
            return where, "numbers must be finite"
        if isinstance(cur, str):
            try:
                cur.encode("utf-8")
            except UnicodeEncodeError:
                return where, "contains an unpaired surrogate (not UTF-8 text)"
        if isinstance(cur, dict):
            for k in cur:
                if isinstance(k, str):
                    try:
                        k.encode("utf-8")
                    except UnicodeEncodeError:
                        return where, "a key contains an unpaired surrogate (not UTF-8 text)"
            stack.extend((v, f"{where}.{k}") for k, v in reversed(list(cur.items())))
        elif isinstance(cur, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(cur))))
    return None


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def dumps(obj: Any) -> str:
    """Standard JSON only: a non-finite number (e.g. in a job stored before
    they were refused) is written as null, never as NaN/Infinity."""
    try:
        return json.dumps(obj, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(_finite(obj), separators=(",", ":"), allow_nan=False)


def list_item(job: Mapping[str, Any]) -> Mapping[str, Any]:
    """A job as ``GET /jobs`` lists it: whole but for what grows with the
    notebook (README, "REST API"): ``status.results`` becomes
    ``status.resultsSummary`` (cells by status, the failed cell's result, cells
    whose output was truncated), ``comparisonResult`` keeps its counts without
    ``diffs``, ``progress`` its counts without ``cells``. ``GET /jobs/{name}``
    gives the whole job."""
    st = job.get("status")
    if not st:
        return job
    st = dict(st)
    results = st.pop("results", None)
    if results is not None:
        by_status: dict[str, int] = {}
        truncated = 0
        failed = st.get("failedCellIndex")
        failed_entry = None
        for entry in results:
            key = str(entry.get("status"))
            by_status[key] = by_status.get(key, 0) + 1
            if entry.get("outputTruncated"):
                truncated += 1
            if failed is not None and entry.get("cellIndex") == failed:
                failed_entry = entry
        st["resultsSummary"] = {"cells": len(results), "byStatus": by_status, "outputTruncatedCells": truncated,
                                "failedCell": failed_entry}
    cmp_ = st.get("comparisonResult")
    if isinstance(cmp_, dict) and "diffs" in cmp_:
        st["comparisonResult"] = {k: v for k, v in cmp_.items() if k != "diffs"}
    prog = st.get("progress")
    if isinstance(prog, dict) and "cells" in prog:
        st["progress"] = {k: v for k, v in prog.items() if k != "cells"}
    return {**job, "status": st}
