"""What a submit reads and checks before anything is created: the spec against the backend,
the notebook and its golden notebook, the requirements (and whether the backend can build
them), the files beside the notebook a job names (``spec.inputFiles``); the snapshot of them
is what gets validated, and the verdict key is computed from it. Bad input raises
:class:`ApiError`: a refused request creates nothing."""

from __future__ import annotations

import asyncio
import glob
import os
import platform
import sys
import warnings
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

import jupyter_nbvalidation.environment.discovery as ef
import jupyter_nbvalidation.environment.local_sources as local_sources
import jupyter_nbvalidation.environment.requirements as reqmod
import jupyter_nbvalidation.verdict.cache as verdict_cache
import jupyter_nbvalidation.verdict.markers as markers
from jupyter_nbvalidation.core.documents import JobSpec
from jupyter_nbvalidation.core.errors import InputRejected
from jupyter_nbvalidation.core.model import ROOT_ANNOTATION, WORKDIR_ANNOTATION, build_enabled
from jupyter_nbvalidation.core.redaction import mask_urls, mask_values
from jupyter_nbvalidation.environment.requirements import Requirements
from jupyter_nbvalidation.secrets.registry import SecretNotAvailable
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.service.state import ServiceState
from jupyter_nbvalidation.service.strict_json import find_bad_number
from jupyter_nbvalidation.spec.checks import SpecError, validate_spec

INPUTS_PREFIX = "inputs/"  # spec.inputFiles in a job's files: inputs/<path relative to the notebook's folder>


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
    import nbformat  # deferred: start-up time (importing nbformat imports jsonschema; `list` never needs it)
    from nbformat.warnings import MissingIDFieldWarning  # deferred: as nbformat, above

    try:
        with warnings.catch_warnings():  # a cell without an id (nbformat < 4.5 writers) is the norm, not news
            warnings.simplefilter("ignore", MissingIDFieldWarning)
            nb = nbformat.reads(data.decode("utf-8"), as_version=4)  # type: ignore[no-untyped-call]  # untyped
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


class SnapshotRoom(ServiceState):
    """Checking a spec and reading its inputs (``JobService.submit`` and ``unchanged``)."""

    def check_spec(self, spec: Any) -> JobSpec:
        """A spec as submit would take it (the backend's fields and values), or ApiError 400."""
        return self._validate(spec)

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
            g_path = resolve_in_root(self.golden_root or self.root_dir, golden["path"], "spec.goldenNotebook.path")
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
        markers, where = reqs.supported_environments
        if not ef.environments_fit(markers, version):
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
        # what the spec leaves out, from the project settings file (stored so: describe tells the truth)
        spec = await asyncio.to_thread(self._with_project_settings, spec)
        spec = self._validate(spec)
        self._check_credentials(spec)
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
        if spec.get("podConfig", {}).get("credentials"):
            # a run with secrets is never reused, nor reuses one: its verdict is for its caller and its
            # values as they were at that run (no key holds them, nor says whose they were)
            key = None
        return spec, files, nb_path, reqs, env, key

    def _submit_annotations(self, spec: dict[str, Any], nb_path: Path, reqs: Requirements) -> dict[str, str]:
        """What a job records of its submit (JobService.submit, and a job made past the service
        whose notebook it fetched): its folder, the root, its source, its requirements' origin."""
        # no inputFiles: the kernel works in a copy of the notebook's own folder (the
        # local backend's, per attempt); with them, in a copy of the job's snapshot of them
        annotations = {} if spec.get("inputFiles") else {WORKDIR_ANNOTATION: str(nb_path.parent)}
        annotations[ROOT_ANNOTATION] = self.real_root
        annotations.update(self.extra_annotations)
        if build_enabled(spec):  # where the environment comes from, kept for a restart or another server
            annotations[reqmod.ORIGIN_ANNOTATION] = reqs.origin
        source = reqmod.source_annotation(reqs, spec, self.root_dir)
        if source:
            annotations[reqmod.SOURCE_ANNOTATION] = source
        return annotations

    def _check_credentials(self, spec: dict[str, Any]) -> None:
        """Every name of podConfig.credentials is a secret the caller may use: else a 400 naming the
        item, the same for a name that does not exist and one they may not use."""
        names = spec.get("podConfig", {}).get("credentials") or []
        for i, name in enumerate(names):
            field = f"spec.podConfig.credentials[{i}]"
            if name in names[:i]:
                raise ApiError(400, "InvalidSpec", f"{field}: secret {name!r} is named twice", field)
            try:
                self.secrets.check(name, self.caller)
            except SecretNotAvailable as e:
                raise ApiError(400, "InvalidSpec", f"{field}: {e}", field) from None
            problem = self.backend.credential_problem(name)  # only once the caller may use it
            if problem:
                raise ApiError(400, "InvalidSpec", f"{field}: {problem}", field)

    def _verdict_key(self, spec: dict[str, Any], files: dict[str, bytes], nb_path: Path, env: str) -> str | None:
        workdir = None if spec.get("inputFiles") else nb_path.parent
        return verdict_cache.verdict_key(spec, files, env, workdir=workdir, notebook_path=nb_path,
                                         backend=self.backend, root=Path(self.real_root))
