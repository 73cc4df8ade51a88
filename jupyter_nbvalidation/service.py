"""Submitting, listing and cancelling jobs: the operations every entry point
(REST, CLI, magic) shares. Bad input raises :class:`ApiError` before anything
is written, so a refused request creates nothing."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import nbformat

from .backends.base import Backend
from .engine import Engine
from .errors import InputRejected
from .model import WORKDIR_ANNOTATION, SpecError, build_enabled, is_terminal, new_job, validate_spec
from .store.base import NotFound
from .timeline import compute_timeline



class ApiError(Exception):
    """A client mistake (4xx) or a known server-side refusal."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field

    def to_json(self) -> dict:
        return {"error": {"code": self.code, "message": self.message, "field": self.field}}


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
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
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
    meta = nb.get("metadata", {})
    language = (meta.get("kernelspec") or {}).get("language") or (meta.get("language_info") or {}).get("name")
    if isinstance(language, str) and language.strip().lower() not in ("", "python", "python3"):
        raise ApiError(400, "UnsupportedKernel",
                       f"{field}: the notebook's kernel language is {language!r}; only Python notebooks "
                       "can be validated (the environment is built from Python requirements and runs ipykernel)",
                       field)
    return data


class JobService:
    def __init__(self, engine: Engine, backend: Backend, root_dir: str, *, max_notebook_bytes: int = 10 * 2**20):
        self.engine = engine
        self.backend = backend
        self.root_dir = root_dir
        self.max_notebook_bytes = max_notebook_bytes

    @property
    def store(self):
        return self.backend.store

    def _validate(self, spec: Any) -> dict:
        try:
            spec = validate_spec(spec, self.backend.supported_fields())
            self.backend.check_spec(spec)
        except SpecError as e:
            reason = e.reason
            explain = getattr(self.backend, "unsupported_reason", lambda f: None)(e.field)
            if explain and reason == "not supported by this backend":
                reason = f"not supported by the {self.backend.name} backend: {explain}"
            field = e.field if e.field.startswith("spec") else f"spec.{e.field}"
            raise ApiError(400, "InvalidSpec", f"{field}: {reason}", field) from None
        return spec

    def _collect(self, spec: dict) -> tuple[dict[str, bytes], Path]:
        """Read the inputs now: this snapshot is what gets validated."""
        nb_path = resolve_in_root(self.root_dir, spec["notebook"]["path"], "spec.notebook.path")
        files = {"notebook.ipynb": _read_notebook(nb_path, "spec.notebook.path", self.max_notebook_bytes)}
        golden = spec.get("goldenNotebook")
        if golden:
            g_path = resolve_in_root(self.root_dir, golden["path"], "spec.goldenNotebook.path")
            files["golden.ipynb"] = _read_notebook(g_path, "spec.goldenNotebook.path", self.max_notebook_bytes)
        bc = spec.get("podConfig", {}).get("buildConfig", {})
        if build_enabled(spec) and not bc.get("requirements"):
            field = "spec.podConfig.buildConfig.requirementsFile"
            if bc.get("requirementsFile"):
                rel = bc["requirementsFile"]
                # relative to the notebook's folder, like requirements.txt beside it
                nb_rel_dir = os.path.dirname(spec["notebook"]["path"].strip())
                req = resolve_in_root(self.root_dir, os.path.join(nb_rel_dir, rel) if nb_rel_dir else rel, field)
                if not req.is_file():
                    raise ApiError(404, "NotFound", f"{field}: no such file: {rel}", field)
            else:
                req = nb_path.parent / "requirements.txt"
            if req.is_file():
                data = req.read_bytes()
                if len(data) > 1 * 2**20:
                    raise ApiError(413, "TooLarge", f"{field}: the requirements file is over 1 MiB", field)
                try:
                    data.decode("utf-8")
                except UnicodeDecodeError:
                    raise ApiError(400, "InvalidField", f"{field}: not UTF-8 text", field) from None
                files["requirements.txt"] = data
        return files, nb_path

    async def submit(self, spec: Any) -> dict:
        spec = self._validate(spec)
        files, nb_path = await asyncio.to_thread(self._collect, spec)
        job = new_job(spec, annotations={WORKDIR_ANNOTATION: str(nb_path.parent)})
        try:
            job = await self.backend.submit(job, files)
        except InputRejected as e:  # the one mapping of the ports' input errors to HTTP
            raise ApiError(e.status, e.code, e.message, e.field) from None
        self.engine.enqueue(job["metadata"]["name"])
        return job

    async def get(self, name: str) -> dict:
        try:
            return await self.store.get(name)
        except NotFound:
            raise ApiError(404, "NotFound", f"no job named {name!r}") from None

    async def list(self, notebook: str | None, limit: int, continue_token: str | None) -> dict:
        try:
            items, token = await self.store.list(notebook=notebook, limit=limit, continue_token=continue_token)
        except ValueError as e:
            raise ApiError(400, "InvalidField", str(e), "continue") from None
        return {"apiVersion": "v1", "kind": "NotebookValidationJobList", "items": items,
                "metadata": {"continue": token}}

    async def cancel(self, name: str) -> dict:
        job = await self.get(name)
        if is_terminal((job.get("status") or {}).get("phase")):
            return job
        return await self.engine.request_cancel(name)

    async def events(self, name: str) -> list[dict]:
        job = await self.get(name)
        return await self.store.list_events(job)

    async def timeline(self, name: str) -> dict:
        job = await self.get(name)
        return compute_timeline(job, await self.store.list_events(job))

    async def executed_notebook(self, name: str) -> dict:
        job = await self.get(name)
        nb = await self.backend.executed_notebook(job)
        if nb is None:
            raise ApiError(404, "NotFound", f"job {name!r} has no executed notebook yet")
        return nb

    async def build_log(self, name: str) -> str:
        job = await self.get(name)
        log = await self.backend.build_log(job)
        if log is None:
            raise ApiError(404, "NotFound", f"job {name!r} has no build log")
        return log


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))
