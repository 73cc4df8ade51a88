"""Where a job's environment is declared, when its spec names no source: the
files a repository declares its environment in, found in repo2docker's order
and read into requirement lines for :mod:`requirements` to check.

The search (:func:`discover`):

- the **repository root** is the nearest folder at or above the notebook's
  folder that holds ``.git`` (a folder or a file), at or below the server
  root; without one, the server root itself. Nothing above the server root
  is looked at; the folders are walked as the notebook's API path names them
  and every file is read through :func:`requirements.read_confined` (a link
  resolving outside the root is refused, unread);
- from the notebook's folder upward to the repository root, the first folder
  holding one of, in this order: ``environment.yml`` (``environment.yaml``),
  ``Pipfile.lock``, ``Pipfile``, ``requirements.txt``, ``pyproject.toml``
  (with a ``[project]`` or ``[build-system]`` table) or ``setup.py`` -- the
  nearest folder wins, so ``requirements.txt`` beside the notebook is used as
  before;
- at the repository root, a ``binder/`` (or ``.binder/``) folder takes the
  place of the root's own files, as in repo2docker: only the files in it are
  used (environment.yml, Pipfile.lock, Pipfile, requirements.txt).

How each file becomes requirement lines (every line then goes through the
same checks as a requirements file):

- ``requirements.txt``: read as a requirements file (``-r``, ``-c``, local
  paths relative to its folder);
- ``environment.yml``: its ``pip:`` section as requirement lines; its conda
  dependencies by their PyPI name where that is the same project
  (``numpy=1.26`` becomes ``numpy==1.26.*``, ``numpy>=1.2`` stays, a build
  string is dropped, :data:`CONDA_RENAMED` names the few that differ);
  ``python`` and ``pip`` are dropped (the server's interpreter is used);
  conda-only packages (:data:`CONDA_ONLY`, :data:`CONDA_ONLY_PREFIXES`) are
  not installed and are named in the origin. This is not conda: channels
  are ignored and nothing is installed from them;
- ``Pipfile.lock``: its ``default`` section, each at its exact ``==`` version;
- ``Pipfile``: ``[packages]`` (``"*"``: any version; a table's ``version``
  and ``extras``; ``path``/``git``/``file`` entries as a local path or URL);
- ``pyproject.toml`` / ``setup.py``: the project itself, installed (not
  editable) from its folder as a local path: confined to the server root and
  its tree hashed into the environment's cache key like any local path.
  ``setup.py`` is never run here; ``setup.cfg`` only gives the name shown.
"""

from __future__ import annotations

import configparser
import os
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

import yaml  # type: ignore[import-untyped]  # PyYAML ships no annotations (types-PyYAML is not installed)

from .requirements import MAX_FILE_BYTES, RequirementsError, read_confined

FIELD = "spec.podConfig.buildConfig.requirementsFile"
MAX_ORIGIN_CHARS = 1000  # the origin is stored with the job (an annotation): bounded

# conda packages that are not Python packages on PyPI (or are another project
# there): never installed, named in the origin. Exact names, then prefixes.
CONDA_ONLY = frozenset({
    "cudatoolkit", "cuda-toolkit", "cudnn", "nccl", "cuda", "cuda-version", "nodejs", "yarn",
    "gcc", "gxx", "gfortran", "clang", "compilers", "c-compiler", "cxx-compiler", "fortran-compiler", "make",
    "git", "openjdk", "r", "r-base", "mkl", "openblas", "blas", "libblas", "ffmpeg", "graphviz", "pandoc",
    "openssl", "ca-certificates", "zlib", "xz", "sqlite", "hdf5", "gdal", "proj", "geos", "nb_conda_kernels",
    "conda", "mamba",
})
CONDA_ONLY_PREFIXES = ("r-", "lib", "cuda-", "_")
# conda name -> PyPI name, where the same project is named otherwise on PyPI
CONDA_RENAMED = {
    "pytorch": "torch",
    "matplotlib-base": "matplotlib",
    "msgpack-python": "msgpack",
    "pytables": "tables",
    "python-graphviz": "graphviz",
    "py-opencv": "opencv-python",
}
_DROPPED = frozenset({"python", "pip"})
_CONDA_SPEC = re.compile(r"^(?:[A-Za-z0-9_./:-]+::)?([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)$")

PLACE_BESIDE = "beside the notebook"
PLACE_ROOT = "at the repository root"
PLACE_ABOVE = "in a folder above the notebook"
PLACE_BINDER = "the repository's binder folder"


@dataclass
class Discovered:
    """What :func:`discover` found. ``kind``: the file's name (None: nothing);
    ``path``: its path (server root joined with the API path, not resolved);
    ``shown``: that path relative to the server root; ``place``: one of the
    PLACE_* phrases; ``looked_in``: the folders looked in, nearest first."""

    kind: str | None
    path: str = ""
    shown: str = ""
    place: str = ""
    looked_in: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        """How messages name the file: "requirements.txt at the repository root (requirements.txt)"."""
        if self.place == PLACE_BINDER:
            return f"{self.shown} ({PLACE_BINDER})"
        return f"{self.kind} {self.place} ({self.shown})"


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def repository_root(nb_dir: str, root: str) -> str:
    """The nearest folder from ``nb_dir`` up to ``root`` (both absolute, the
    first under the second) holding ``.git``; ``root`` without one."""
    folder = os.path.normpath(nb_dir)
    root = os.path.normpath(root)
    if not _inside(folder, root):
        return root
    while True:
        if os.path.lexists(os.path.join(folder, ".git")):
            return folder
        if folder == root:
            return root
        folder = os.path.dirname(folder)


def _rel(path: str, root: str) -> str:
    return os.path.relpath(path, root).replace(os.sep, "/")


_FOLDER_FILES = ("environment.yml", "environment.yaml", "Pipfile.lock", "Pipfile", "requirements.txt")
_PROJECT_FILES = ("pyproject.toml", "setup.py")


def _is_project(pyproject: str, root: str) -> bool:
    """A pyproject.toml declares a project to install only with a [project] or
    [build-system] table (one holding only tool settings does not)."""
    data = _toml(pyproject, root, os.path.basename(pyproject))
    return "project" in data or "build-system" in data


def discover(root: str, rel_nb_dir: str) -> Discovered:
    """The file the environment comes from, for a notebook in ``rel_nb_dir``
    (its folder as an API path) under the server root ``root``. Raises
    :class:`RequirementsError` for a repository with both binder folders or
    an unreadable pyproject.toml."""
    root = os.path.realpath(root)
    nb_dir = os.path.normpath(os.path.join(root, rel_nb_dir))
    if not _inside(nb_dir, root):
        nb_dir = root
    repo = repository_root(nb_dir, root)
    looked: list[str] = []
    folder = nb_dir
    while True:
        place = PLACE_BESIDE if folder == nb_dir else PLACE_ROOT if folder == repo else PLACE_ABOVE
        if folder == repo:
            binders = [b for b in ("binder", ".binder") if os.path.isdir(os.path.join(repo, b))]
            if len(binders) == 2:
                raise RequirementsError(FIELD, f"the repository at {_rel(repo, root)} has both a binder and a "
                                               ".binder folder; keep one (as repo2docker requires)")
            if binders:
                binder = os.path.join(repo, binders[0])
                looked.append(f"{_rel(binder, root)} ({PLACE_BINDER})")
                for name in _FOLDER_FILES:
                    path = os.path.join(binder, name)
                    if os.path.lexists(path):
                        return Discovered(name, path, _rel(path, root), PLACE_BINDER, looked)
                return Discovered(None, looked_in=looked)
        shown_folder = _rel(folder, root)
        looked.append(shown_folder + (" (repository root)" if folder == repo else ""))
        for name in _FOLDER_FILES + _PROJECT_FILES:
            path = os.path.join(folder, name)
            if not os.path.lexists(path):
                continue
            if name == "pyproject.toml" and not _is_project(path, root):
                continue
            return Discovered(name, path, _rel(path, root), place, looked)
        if folder == repo:
            return Discovered(None, looked_in=looked)
        folder = os.path.dirname(folder)


def nothing_found(found: Discovered) -> str:
    """The origin when no file declares the environment."""
    return bounded("no dependencies declared: looked in " + ", ".join(found.looked_in))


def bounded(text: str) -> str:
    return text if len(text) <= MAX_ORIGIN_CHARS else text[:MAX_ORIGIN_CHARS - 1] + "…"


# --- reading the files ---------------------------------------------------------------

def _read_text(path: str, root: str, what: str) -> str:
    got = read_confined(path, root, MAX_FILE_BYTES, what, FIELD)
    assert got is not None
    try:
        return got[0].decode("utf-8")
    except UnicodeDecodeError:
        raise RequirementsError(FIELD, f"{what}: is not UTF-8 text") from None


def _toml(path: str, root: str, what: str) -> dict[str, Any]:
    text = _read_text(path, root, what)
    try:
        data = tomllib.loads(text)
    except ValueError as e:  # tomllib.TOMLDecodeError
        raise RequirementsError(FIELD, f"{what}: is not valid TOML: {e}") from None
    assert isinstance(data, dict)
    return data


@dataclass
class Read:
    """A file read into requirement lines (each with the line of the file it
    came from, 0 when not known) and the words the origin adds."""

    lines: list[tuple[int, str]]
    detail: str
    conda_only: list[str] = field(default_factory=list)


def conda_to_pip(spec: str) -> str | None:
    """A conda match spec as a pip requirement (None: dropped or conda-only;
    the caller tells which with :func:`conda_only`). Raises ValueError for a
    spec pip cannot express."""
    m = _CONDA_SPEC.match(spec.strip())
    if not m:
        raise ValueError("is not a conda package spec")
    name, rest = m.group(1).lower(), m.group(2).strip()
    if name in _DROPPED or conda_only(name):
        return None
    name = CONDA_RENAMED.get(name, name)
    if not rest:
        return name
    if "|" in rest:
        raise ValueError("has version alternatives (|), which pip cannot express")
    if rest[0] not in "=<>!~":  # "numpy 1.26" or "numpy 1.26 py311_0": version [build]
        rest = "=" + rest
    version = rest.split()[0]
    if version.startswith("=") and not version.startswith("=="):  # =1.26[=build]: 1.26.*
        v = version[1:].split("=")[0]
        return f"{name}=={v}" if v.endswith("*") else f"{name}=={v}.*"
    if version.startswith("=="):  # ==1.26[=build]
        return f"{name}=={version[2:].split('=')[0]}"
    return f"{name}{version}"


def conda_only(name: str) -> bool:
    name = name.lower()
    return name in CONDA_ONLY or name.startswith(CONDA_ONLY_PREFIXES)


def read_environment_yml(path: str, root: str, what: str) -> Read:
    text = _read_text(path, root, what)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise RequirementsError(FIELD, f"{what}: is not valid YAML: {problem}{at}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise RequirementsError(FIELD, f"{what}: is not a mapping (name, channels, dependencies)")
    deps = data.get("dependencies") or []
    if not isinstance(deps, list):
        raise RequirementsError(FIELD, f"{what}: dependencies is not a list")
    lines: list[tuple[int, str]] = []
    pip_lines: list[tuple[int, str]] = []
    skipped: list[str] = []
    conda = 0
    has_pip = False
    for i, dep in enumerate(deps):
        where = f"{what}: dependencies[{i}]"
        if isinstance(dep, dict) and set(dep) == {"pip"}:
            has_pip = True
            entries = dep["pip"] or []
            if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
                raise RequirementsError(FIELD, f"{where}: pip is not a list of requirement lines")
            pip_lines += [(0, e) for e in entries]
            continue
        if isinstance(dep, (int, float)) and not isinstance(dep, bool):
            dep = str(dep)
        if not isinstance(dep, str):
            raise RequirementsError(FIELD, f"{where}: is neither a package spec nor a pip section")
        try:
            req = conda_to_pip(dep)
        except ValueError as e:
            raise RequirementsError(FIELD, f"{where}: {dep!r} {e}") from None
        if req is None:
            name = _CONDA_SPEC.match(dep.strip())
            if name and conda_only(name.group(1)):
                skipped.append(name.group(1))
            continue
        lines.append((0, req))
        conda += 1
    parts = []
    if has_pip:
        parts.append("pip section")
    parts.append(f"{conda} conda package{'' if conda == 1 else 's'}")
    detail = " and ".join(parts)
    if skipped:
        detail += f"; not installed (conda-only): {', '.join(skipped)}"
    return Read(lines + pip_lines, detail, skipped)


def read_pipfile_lock(path: str, root: str, what: str) -> Read:
    import json

    text = _read_text(path, root, what)
    try:
        data = json.loads(text)
    except ValueError as e:
        raise RequirementsError(FIELD, f"{what}: is not valid JSON: {e}") from None
    default = data.get("default") if isinstance(data, dict) else None
    if not isinstance(default, dict):
        raise RequirementsError(FIELD, f"{what}: has no default section")
    lines = []
    for name, entry in sorted(default.items()):
        lines.append((0, _pipenv_entry(name, entry, f"{what}: default.{name}", locked=True)))
    return Read(lines, f"the default section, {len(lines)} package{'' if len(lines) == 1 else 's'}")


def read_pipfile(path: str, root: str, what: str) -> Read:
    data = _toml(path, root, what)
    packages = data.get("packages") or {}
    if not isinstance(packages, dict):
        raise RequirementsError(FIELD, f"{what}: [packages] is not a table")
    lines = [(0, _pipenv_entry(name, entry, f"{what}: packages.{name}", locked=False))
             for name, entry in packages.items()]
    return Read(lines, f"[packages], {len(lines)} package{'' if len(lines) == 1 else 's'}")


def _pipenv_entry(name: str, entry: Any, where: str, *, locked: bool) -> str:
    """One Pipfile / Pipfile.lock entry as a requirement line."""
    if isinstance(entry, str):
        entry = {"version": entry}
    if not isinstance(entry, dict):
        raise RequirementsError(FIELD, f"{where}: is neither a version nor a table")
    extras = entry.get("extras") or []
    if not isinstance(extras, list) or not all(isinstance(e, str) for e in extras):
        raise RequirementsError(FIELD, f"{where}: extras is not a list of names")
    full = name + (f"[{','.join(extras)}]" if extras else "")
    if entry.get("path") or entry.get("file"):
        target = str(entry.get("path") or entry.get("file"))
        return target if "://" in target else (target if target.startswith((".", "/")) else f"./{target}")
    if entry.get("git"):
        ref = entry.get("ref")
        return f"{full} @ git+{entry['git']}" + (f"@{ref}" if ref else "")
    version = entry.get("version", "*")
    if not isinstance(version, str):
        raise RequirementsError(FIELD, f"{where}: version is not a string")
    marker = entry.get("markers")
    line = full if version.strip() in ("*", "") else f"{full}{version.strip()}"
    if locked and not version.startswith("=="):
        raise RequirementsError(FIELD, f"{where}: a locked version is ==VERSION (found {version!r})")
    return line + (f" ; {marker}" if isinstance(marker, str) and marker else "")


def project_name(path: str, root: str) -> str | None:
    """The name a pyproject.toml ([project] or [tool.poetry]) or a setup.cfg
    beside a setup.py gives (setup.py itself is never run)."""
    folder = os.path.dirname(path)
    if os.path.basename(path) == "pyproject.toml":
        data = _toml(path, root, os.path.basename(path))
        for table in (data.get("project"), (data.get("tool") or {}).get("poetry")):
            if isinstance(table, dict) and isinstance(table.get("name"), str):
                return str(table["name"])
        return None
    cfg = os.path.join(folder, "setup.cfg")
    if not os.path.lexists(cfg):
        return None
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(_read_text(cfg, root, "setup.cfg"))
    except configparser.Error as e:
        raise RequirementsError(FIELD, f"setup.cfg: cannot be read: {e}") from None
    return parser.get("metadata", "name", fallback=None)


def python_requirement(found: Discovered, root: str) -> tuple[str, str] | None:
    """The Python version the repository asks for, as a PEP 440 specifier and
    where it says so: ``runtime.txt`` beside the chosen file (repo2docker's
    ``python-3.X[.Y]``), else the chosen pyproject.toml's ``requires-python``.
    None when it asks for none. Raises :class:`RequirementsError` for a
    runtime.txt that names no Python version (repo2docker's R runtimes included:
    not available here)."""
    if found.kind is None:
        return None
    folder = os.path.dirname(found.path)
    runtime = os.path.join(folder, "runtime.txt")
    if os.path.lexists(runtime):
        shown = _rel(runtime, os.path.realpath(root))
        text = _read_text(runtime, root, f"runtime.txt ({shown})").strip()
        m = re.fullmatch(r"python-(\d+)\.(\d+)(?:\.(\d+))?", text)
        if m is None:
            raise RequirementsError(FIELD, bounded(f"runtime.txt ({shown}): {text[:80]!r} names no Python version "
                                                   "this tool can use (expected python-3.X or python-3.X.Y)"))
        spec = f"=={m.group(1)}.{m.group(2)}" + (f".{m.group(3)}" if m.group(3) else ".*")
        return spec, f"runtime.txt ({shown})"
    if found.kind == "pyproject.toml":
        project = _toml(found.path, root, found.where).get("project")
        wanted = project.get("requires-python") if isinstance(project, dict) else None
        if isinstance(wanted, str) and wanted.strip():
            return wanted.strip(), f"{found.shown}'s requires-python"
    return None

