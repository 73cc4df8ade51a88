"""The project settings file through the service (spec/project.py reads it, spec/project_write.py
writes it): ``GET``/``PUT project-settings`` (the lab's Options dialog), and what a submitted spec
leaves out, filled from the file of the notebook's project (:func:`with_project_settings`, called
by ``SnapshotRoom._prepare`` before the spec is checked, on every backend). Paths stay inside the
server root: a notebook or a settings file that resolves outside it is refused, nothing written.
The file is read and written in a thread (``asyncio.to_thread``), never on the server's loop."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import jupyter_nbvalidation.spec.project as project
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.service.snapshot import resolve_in_root
from jupyter_nbvalidation.service.state import ServiceState
from jupyter_nbvalidation.spec.checks import SpecError, validate_spec
from jupyter_nbvalidation.spec.project_write import WriteRefused, toml_value, write_entry

PUT_FIELDS = ("notebook", "options")


class SettingsApiError(ApiError):
    """A malformed settings file: the stable error body, and its message at the top level too
    (the contract's ``{"message": "<file>:<line>: <key>: <reason>"}``)."""

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "message": self.message}


def _root(root_dir: str) -> Path:
    return Path(root_dir).resolve()


def _shown(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def notebook_in_root(root_dir: str, rel: Any, field: str) -> Path:
    """An existing notebook inside the root (resolved), or 400/403/404 naming ``field``."""
    if not isinstance(rel, str):
        raise ApiError(400, "InvalidField", f"{field} must be a string: a notebook's path from the server root",
                       field)
    path = resolve_in_root(root_dir, rel, field)
    if not rel.strip().endswith(".ipynb"):
        raise ApiError(400, "InvalidField", f"{field} must name a .ipynb file", field)
    if not path.is_file():
        raise ApiError(404, "NotFound", f"{field}: no such notebook: {rel}", field)
    return path


def settings_for(root_dir: str, notebook: Path) -> project.Settings:
    """The settings that apply to ``notebook`` (read now), or SettingsApiError 400 / 403."""
    root = _root(root_dir)
    path = project.locate(notebook, root)
    real = path.resolve()
    if real != path and (root not in real.parents):
        raise ApiError(403, "Forbidden", f"the project settings file {_shown(root, path)} points outside the "
                                         "server root", "file")
    try:
        return project.load(path, _shown(root, path))
    except project.SettingsError as e:
        raise SettingsApiError(400, "InvalidProjectSettings", str(e), e.key or "file") from None


def describe(root_dir: str, notebook: Path, settings: project.Settings) -> dict[str, Any]:
    """The answer of GET and PUT: the file, whether it exists, the merged options, the own entry."""
    own = settings.own_entry(notebook)
    return {"file": _shown(_root(root_dir), settings.path), "exists": settings.exists,
            "options": settings.options_for(notebook), "entry": dict(own.options) if own else {}}


def read_settings(root_dir: str, rel: Any) -> dict[str, Any]:
    notebook = notebook_in_root(root_dir, rel, "notebook")
    return describe(root_dir, notebook, settings_for(root_dir, notebook))


def check_options(options: Any, notebook_rel: str) -> dict[str, Any]:
    """PUT's ``options``: a partial spec the file can hold, or 400 naming the field."""
    if not isinstance(options, dict):
        raise ApiError(400, "InvalidField", "options must be an object: a partial job spec", "options")
    if "notebook" in options:
        raise ApiError(400, "InvalidField", "options.notebook: not a setting (the notebook is the one named)",
                       "options.notebook")
    if isinstance(options.get("podConfig"), dict) and "credentials" in options["podConfig"]:
        raise ApiError(400, "InvalidField", f"options.podConfig.credentials: {project.NOT_A_SETTING_CREDENTIALS}",
                       "options.podConfig.credentials")
    try:
        validate_spec({"notebook": {"path": notebook_rel}, **options})
    except SpecError as e:
        field = f"options.{e.field}"
        raise ApiError(400, "InvalidField", f"{field}: {e.reason}", field) from None
    golden = (options.get("goldenNotebook") or {}).get("path")
    if isinstance(golden, str):
        joined = project.golden_in_root(options, notebook_rel)["goldenNotebook"]["path"]
        if golden.startswith("/") or "\\" in golden or joined == ".." or joined.startswith("../"):
            raise ApiError(400, "InvalidField", "options.goldenNotebook.path: must be relative to the notebook's "
                                                "folder and stay inside the server root", "options.goldenNotebook.path")
    for key, value in options.items():
        try:
            toml_value(value, f"options.{key}")
        except ValueError as e:
            raise ApiError(400, "InvalidField", str(e), f"options.{key}") from None
    return options


def write_settings(root_dir: str, body: Any) -> dict[str, Any]:
    """PUT: replace the notebook's own entry (``options: {}`` removes it); the GET answer after."""
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the request body must be {\"notebook\": PATH, \"options\": {...}}")
    for key in body:
        if key not in PUT_FIELDS:
            raise ApiError(400, "InvalidField", f"{key}: unknown field (give notebook and options)", key)
    if "options" not in body:
        raise ApiError(400, "InvalidField", "options is required ({} removes the notebook's entry)", "options")
    notebook = notebook_in_root(root_dir, body.get("notebook"), "notebook")
    rel_root = _shown(_root(root_dir), notebook)
    options = check_options(body["options"], rel_root)
    settings = settings_for(root_dir, notebook)  # a malformed file is refused before anything is written
    try:
        write_entry(settings.path, settings.relative(notebook), options)
    except WriteRefused as e:
        raise ApiError(409, "Conflict", f"{_shown(_root(root_dir), settings.path)} cannot be edited safely here: "
                                        f"{e}; edit the file by hand", "file") from None
    except OSError as e:
        raise ApiError(403, "Forbidden", f"{_shown(_root(root_dir), settings.path)} cannot be written: "
                                         f"{e.strerror}", "file") from None
    return describe(root_dir, notebook, settings_for(root_dir, notebook))


def with_project_settings(root_dir: str, spec: Any, supported: set[str] | None = None) -> Any:
    """``spec`` with the fields it leaves out taken from its notebook's project settings (what
    the spec gives wins, field by field); a spec without a readable notebook path is returned
    as it is (the checks that follow name what is wrong). A malformed file, or a setting the
    backend does not support, is a 400 naming the file, the line and the key."""
    if not isinstance(spec, dict) or not isinstance(spec.get("notebook"), dict):
        return spec
    rel = spec["notebook"].get("path")
    try:
        notebook = notebook_in_root(root_dir, rel, "spec.notebook.path")
    except ApiError:
        return spec
    settings = settings_for(root_dir, notebook)
    if not settings.defaults and not settings.entries:
        return spec
    from_file = settings.options_for(notebook)
    if supported is not None:
        try:
            validate_spec({"notebook": {"path": "settings.ipynb"}, **from_file}, supported)
        except SpecError as e:
            line, key = settings.line_of_field(e.field)
            shown = _shown(_root(root_dir), settings.path)
            raise SettingsApiError(400, "InvalidProjectSettings", f"{shown}:{line}: {key}: {e.reason}",
                                   key) from None
    return project.fill_spec(spec, settings, notebook, _shown(_root(root_dir), notebook))


class ProjectSettingsRoom(ServiceState):
    """``GET``/``PUT project-settings``: the file read and written in a thread, one write at a time."""

    _settings_lock: asyncio.Lock | None = None

    def _with_project_settings(self, spec: Any) -> Any:
        return with_project_settings(self.root_dir, spec, self.backend.supported_fields())

    async def project_settings(self, notebook: Any) -> dict[str, Any]:
        if notebook is None:
            raise ApiError(400, "InvalidField", "notebook is required: a notebook's path from the server root",
                           "notebook")
        return await asyncio.to_thread(read_settings, self.root_dir, notebook)

    async def put_project_settings(self, body: Any) -> dict[str, Any]:
        if self._settings_lock is None:
            self._settings_lock = asyncio.Lock()
        async with self._settings_lock:
            return await asyncio.to_thread(write_settings, self.root_dir, body)
