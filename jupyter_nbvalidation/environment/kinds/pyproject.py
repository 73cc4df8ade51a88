"""``pyproject.toml`` (with a ``[project]`` or ``[build-system]`` table) or ``setup.py``:
the project itself, installed (not editable) from its folder as a local path:
confined to the server root and its tree hashed into the environment's cache key
like any local path. ``setup.py`` is never run here; ``setup.cfg`` only gives the
name shown. Not looked for in a binder/ folder (repo2docker's neither)."""

from __future__ import annotations

import configparser
import os

from jupyter_nbvalidation.environment.kinds.base import Contribution, Discovered, Kind, Read
from jupyter_nbvalidation.environment.reading import FIELD, RequirementsError, bounded, read_text, read_toml, rel
from jupyter_nbvalidation.verdict.environment_record import normalize


def is_project(pyproject: str, root: str) -> bool:
    """A pyproject.toml declares a project to install only with a [project] or
    [build-system] table (one holding only tool settings does not)."""
    data = read_toml(pyproject, root, os.path.basename(pyproject))
    return "project" in data or "build-system" in data


def project_name(path: str, root: str) -> str | None:
    """The name a pyproject.toml ([project] or [tool.poetry]) or a setup.cfg
    beside a setup.py gives (setup.py itself is never run)."""
    folder = os.path.dirname(path)
    if os.path.basename(path) == "pyproject.toml":
        data = read_toml(path, root, os.path.basename(path))
        for table in (data.get("project"), (data.get("tool") or {}).get("poetry")):
            if isinstance(table, dict) and isinstance(table.get("name"), str):
                return str(table["name"])
        return None
    cfg = os.path.join(folder, "setup.cfg")
    if not os.path.lexists(cfg):
        return None
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(read_text(cfg, root, "setup.cfg"))
    except configparser.Error as e:
        raise RequirementsError(FIELD, f"setup.cfg: cannot be read: {e}") from None
    return parser.get("metadata", "name", fallback=None)


def declared_extras(folder: str, root: str) -> list[str] | None:
    """The extras the project in ``folder`` declares statically (pyproject.toml's
    ``[project.optional-dependencies]``, normalized), or None when they cannot be known
    here: no ``[project]`` table, extras computed by the build (``dynamic``), setup.py."""
    path = os.path.join(folder, "pyproject.toml")
    if not os.path.lexists(path):
        return None
    project = read_toml(path, root, "pyproject.toml").get("project")
    if not isinstance(project, dict) or "optional-dependencies" in (project.get("dynamic") or []):
        return None
    table = project.get("optional-dependencies") or {}
    return sorted(normalize(str(k)) for k in table) if isinstance(table, dict) else None


def requires_python(pyproject: str, found: Discovered, root: str) -> tuple[str, str] | None:
    """The ``requires-python`` of ``pyproject`` (the found file itself, or the one beside it)."""
    shown = rel(pyproject, os.path.realpath(root))
    project = read_toml(pyproject, root, found.where if pyproject == found.path else shown).get("project")
    wanted = project.get("requires-python") if isinstance(project, dict) else None
    if isinstance(wanted, str) and wanted.strip():
        return wanted.strip(), f"{shown}'s requires-python"
    return None


class Pyproject(Kind):
    """The repository's own project (pyproject.toml, else setup.py), installed from its folder."""

    names = ("pyproject.toml", "setup.py")
    in_binder = False

    def detect(self, folder: str, root: str) -> str | None:
        for name in self.names:
            path = os.path.join(folder, name)
            if not os.path.lexists(path):
                continue
            if name == "pyproject.toml" and not is_project(path, root):
                continue
            return name
        return None

    def contribute(self, found: Discovered, root: str, extras: list[str]) -> Contribution:
        name = project_name(found.path, root)
        base = os.path.dirname(found.path)
        rel_folder = os.path.relpath(os.path.realpath(base), os.path.realpath(root)).replace(os.sep, "/")
        what = f"project {name}" if name else "the project"
        with_extras = f" with extras {', '.join(extras)}" if extras else ""
        origin = f"{found.kind} {found.place} ({what}{with_extras}, installed from {rel_folder})"
        return Contribution(bounded(origin), Read([], ""), install_project=True, project_file=found.shown)

    def python(self, found: Discovered, root: str) -> tuple[str, str] | None:
        if found.kind != "pyproject.toml":
            return None
        return requires_python(found.path, found, root)
