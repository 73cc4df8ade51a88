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
  ``pylock.toml``, ``uv.lock``, ``Pipfile.lock``, ``Pipfile``,
  ``requirements.txt``, ``pyproject.toml`` (with a ``[project]`` or
  ``[build-system]`` table) or ``setup.py`` -- the nearest folder wins, so
  ``requirements.txt`` beside the notebook is used as before;
- at the repository root, a ``binder/`` (or ``.binder/``) folder takes the
  place of the root's own files, as in repo2docker: only the files in it are
  used (environment.yml, pylock.toml, uv.lock, Pipfile.lock, Pipfile,
  requirements.txt).

Why the lock files come there: repo2docker reads neither ``pylock.toml`` nor
``uv.lock``; its own order puts a lock before what it locks (Pipfile.lock
before Pipfile) and environment.yml first, and so does this one.
environment.yml stays first, as in repo2docker (a repository that builds on
Binder gets the environment Binder builds). A lock file is the most exact
declaration a folder makes (every package at one version, for every
platform), so the two lock files come before Pipfile.lock, Pipfile and
requirements.txt, which a folder often carries beside a lock, exported from it
or older than it. ``pylock.toml`` (the standard, PEP 751) before ``uv.lock``:
uv writes it from the same lock (``uv export --format pylock.toml``), and it is
read here without running anything. Only the plain ``pylock.toml`` is looked
for: named ones (``pylock.<name>.toml``) are not picked. A repository that
wants what Binder does when both are present keeps its files in ``binder/``.

How each file becomes requirement lines (every line then goes through the
same checks as a requirements file):

- ``requirements.txt``: read as a requirements file (``-r``, ``-c``, local
  paths relative to its folder);
- ``environment.yml``: its ``pip:`` section as requirement lines; its conda
  dependencies by their PyPI name where that is the same project
  (``numpy=1.26`` becomes ``numpy==1.26.*``, ``numpy>=1.2`` stays, a build
  string is dropped, :data:`CONDA_RENAMED` names the few that differ);
  ``python`` and ``pip`` are not installed (a ``python`` version is what the
  repository asks of the interpreter: :func:`python_requirement`);
  conda-only packages (:data:`CONDA_ONLY`, :data:`CONDA_ONLY_PREFIXES`) are
  not installed and are named in the origin. This is not conda: channels
  are ignored and nothing is installed from them;
- ``pylock.toml`` (PEP 751, lock-version 1.x; another major version is
  refused): each ``[[packages]]`` entry is one line, its ``marker`` kept for
  the build's interpreter to evaluate: ``name==version`` for packages from an
  index (an index other than PyPI as an ``--index-url`` / ``--extra-index-url``
  line, a local one as ``--find-links``), ``name @ git+URL@commit`` for a
  ``vcs`` entry, ``name @ URL`` for an ``archive`` URL, a local ``directory`` or
  archive ``path`` relative to the lock's folder (confined to the server root,
  hashed into the cache key; an editable directory is installed as a regular
  one). A marker testing extras or dependency groups is decided here: no
  extras, the lock's ``default-groups``. The lock's ``requires-python`` is
  checked like pyproject.toml's, its ``environments`` (if any) against the
  build's Python on this machine (at submit, by the service);
- ``uv.lock``: exported by uv itself (``uv export --frozen --offline
  --no-config --no-hashes --no-emit-project --no-dev``, in the lock's folder,
  which must hold the project's ``pyproject.toml``; a worker thread at submit,
  a timeout of :data:`UV_EXPORT_TIMEOUT`): the subset for each platform is
  uv's own resolution, as markers on the exported lines; what is exported is
  what ``uv sync --frozen --no-dev`` installs (the project's dependencies and
  its default groups but dev). The index each exported package was locked
  from (the lock's ``registry`` sources) becomes an option line as for
  pylock.toml. The project itself is installed as for pyproject.toml below
  when uv records it as a package (``source = { editable = "." }``; a virtual
  project is not installed). uv's failure (a corrupt lock, a lock whose
  project is not the pyproject's) is a 400 with uv's first error line; since
  ``--frozen`` does not check that the lock is up to date, the project's
  dependencies in pyproject.toml are compared with the ones the lock recorded
  (names and version specifiers) and a lock out of date is refused. The cache
  key follows the exported lines (and, for an installed project, its whole
  tree, uv.lock included): a change of the lock that leaves the lines as they
  are installs the same packages;
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
import posixpath
import re
import shlex
import shutil
import subprocess
import tomllib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yaml  # type: ignore[import-untyped]  # PyYAML ships no annotations (types-PyYAML is not installed)

from jupyter_nbvalidation.core.redaction import mask_urls
from jupyter_nbvalidation.environment.requirements import MAX_FILE_BYTES, RequirementsError, read_confined
from jupyter_nbvalidation.verdict.environment_record import normalize

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


# in this order (see the module's docstring for why the lock files come where they do)
_FOLDER_FILES = ("environment.yml", "environment.yaml", "pylock.toml", "uv.lock", "Pipfile.lock", "Pipfile",
                 "requirements.txt")
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

def _read_text(path: str, root: str, what: str, limit: int | None = None) -> str:
    got = read_confined(path, root, MAX_FILE_BYTES if limit is None else limit, what, FIELD)
    assert got is not None
    try:
        return got[0].decode("utf-8")
    except UnicodeDecodeError:
        raise RequirementsError(FIELD, f"{what}: is not UTF-8 text") from None


def _toml(path: str, root: str, what: str, limit: int | None = None) -> dict[str, Any]:
    return _parse_toml(_read_text(path, root, what, limit), what)


def _parse_toml(text: str, what: str) -> dict[str, Any]:
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
    # how messages name each line (None: "line N" or "entry N"), e.g. "packages[3] (six)"
    labels: list[str] | None = None
    # uv.lock: the project beside it is a package uv installs (not a virtual project)
    install_project: bool = False
    # the environments the lock declares it is valid for (PEP 751 environments, uv.lock
    # supported-markers): checked at submit against the build's Python (service)
    supported: list[str] | None = None
    # environment.yml: the Python its dependencies ask for (python=3.10), as a PEP 440 specifier
    python: str | None = None


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
    python: str | None = None
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
            elif name and name.group(1).lower() == "python" and name.group(2).strip():
                try:  # conda's match spec for python, read as pip would read it of a package
                    python = conda_to_pip("x " + name.group(2).strip())[1:].strip()  # type: ignore[index]
                except ValueError as e:
                    raise RequirementsError(FIELD, f"{where}: {dep!r} {e}") from None
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
    return Read(lines + pip_lines, detail, skipped, python=python)


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


# --- lock files: pylock.toml (PEP 751) and uv.lock ------------------------------------

MAX_LOCK_BYTES = 8 * 2**20  # a lock lists every file of every package: larger than a requirements file
UV_EXPORT_TIMEOUT = 30.0  # seconds; `uv export --frozen --offline` only reads the lock
PYPI_INDEX_HOSTS = frozenset({"pypi.org", "www.pypi.org"})
PYPI_FILE_HOSTS = frozenset({"files.pythonhosted.org"})
_PACKAGE_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
_VCS = ("git", "hg", "svn", "bzr")
_VERSION = re.compile(r"^[0-9A-Za-z.+!_*-]{1,100}$")
# PEP 751 markers may test the extras and dependency groups a lock is installed with
# ('docs' in dependency_groups): decided here (no extras; the lock's default-groups) and
# written as a marker every installer evaluates alike
_SET_MARKER = re.compile(r"""(["'])([^"']*)\1\s*(not\s+in|in)\s*(extras|dependency_groups)\b""")
_TRUE_MARKER = 'python_version >= "0"'
_FALSE_MARKER = 'python_version < "0"'
_URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def _shown(value: Any) -> str:
    """A value of a lock file, as a message quotes it (bounded)."""
    text = repr(value)
    return text if len(text) <= 120 else text[:119] + "…"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _marker_error(marker: str) -> str | None:
    from packaging.markers import InvalidMarker, Marker

    try:
        Marker(marker)
    except InvalidMarker as e:
        return str(e).splitlines()[0]
    return None


def _select_marker(marker: str, extras: set[str], groups: set[str], where: str) -> tuple[bool, str]:
    """(installed?, the marker to keep) for a PEP 751 package marker: its extras and
    dependency_groups tests decided here; a marker that tested only those is dropped."""
    from packaging.markers import Marker

    if not _SET_MARKER.search(marker):
        error = _marker_error(marker)
        if error:
            raise RequirementsError(FIELD, f"{where}: marker {_shown(marker)} is not an environment marker: {error}")
        return True, marker

    def decide(m: re.Match[str]) -> str:
        chosen = groups if m.group(4) == "dependency_groups" else extras
        inside = normalize(m.group(2)) in {normalize(c) for c in chosen}
        return _TRUE_MARKER if inside == (m.group(3) == "in") else _FALSE_MARKER

    decided = _SET_MARKER.sub(decide, marker)
    error = _marker_error(decided)
    if error:
        raise RequirementsError(FIELD, f"{where}: marker {_shown(marker)} is not an environment marker: {error}")
    rest = re.sub(r'python_version (>=|<) "0"|\band\b|\bor\b|[()\s]', "", decided)
    if rest:
        return True, decided  # also tests the environment: the build's interpreter decides the rest
    return bool(Marker(decided).evaluate()), ""  # constants only: the same everywhere


def _str_list(data: dict[str, Any], key: str, what: str) -> list[str]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RequirementsError(FIELD, f"{what}: {key} is not a list of strings")
    return list(value)


def _marker_list(data: dict[str, Any], key: str, what: str) -> list[str] | None:
    if data.get(key) is None:
        return None
    markers = _str_list(data, key, what)
    for m in markers:
        error = _marker_error(m)
        if error:
            raise RequirementsError(FIELD, f"{what}: {key}: {_shown(m)} is not an environment marker: {error}")
    return markers


def environments_fit(markers: list[str], python_version: str) -> bool:
    """Whether this machine with the build's Python (``python_version``, "3.11.7")
    is one of the environments a lock declares it is valid for."""
    from packaging.markers import Marker, default_environment

    env = {k: str(v) for k, v in default_environment().items()}
    env.update(python_version=".".join(python_version.split(".")[:2]), python_full_version=python_version)
    return any(Marker(m).evaluate(env) for m in markers)


def _is_pypi_index(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and (parts.hostname or "") in PYPI_INDEX_HOSTS


def _local_ref(value: str) -> str:
    """A lock's local path as a requirement path (relative ones: to the lock's folder)."""
    if value.lower().startswith("file:") or value.startswith((".", "/")):
        return value
    return f"./{value}"


@dataclass
class _Sources:
    """Where a lock's index packages come from: ``default`` (PyPI, the installer's own
    index), other indexes (http URLs) and find-links locations (local folders, flat pages)."""

    default: bool = False
    indexes: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)

    def add(self, location: str, flat: bool = False) -> None:
        m = _URL_SCHEME.match(location)
        scheme = m.group(1).lower() if m else ""
        if scheme in ("http", "https") and _is_pypi_index(location):
            self.default = True
        elif scheme in ("http", "https") and not flat:
            if location not in self.indexes:
                self.indexes.append(location)
        elif location not in self.links:  # a local folder (path, file://) or a flat page
            self.links.append(location)

    def lines(self) -> tuple[list[str], list[str]]:
        """(option lines, words for the origin). The one index every index package comes
        from replaces the default (--index-url); otherwise each is an --extra-index-url."""
        from jupyter_nbvalidation.environment.requirements import ALLOWED_OPTIONS

        out = [f"--find-links {shlex.quote(link)}" for link in self.links]
        notes = []
        option = "--index-url" if len(self.indexes) == 1 and not self.default else "--extra-index-url"
        for url in self.indexes:
            shown = mask_urls(url)
            if option in ALLOWED_OPTIONS:
                out.append(f"{option} {shlex.quote(url)}")
                notes.append(f"index {shown}")
            else:
                notes.append(f"packages of the index {shown} are installed from the default index ({option} is "
                             "not accepted here)")
        return out, notes


def _pylock_target(entry: dict[str, Any], name: str, where: str, sources: _Sources) -> str:
    """A PEP 751 package entry as a requirement (without its marker)."""
    kinds: list[str] = [k for k in ("vcs", "directory", "archive") if k in entry]
    dists: list[str] = [k for k in ("sdist", "wheels") if k in entry]
    if len(kinds) + bool(dists) != 1:
        if not kinds and not dists:
            raise RequirementsError(FIELD, f"{where}: names no source (one of vcs, directory, archive, or "
                                           "sdist/wheels)")
        raise RequirementsError(FIELD, f"{where}: names more than one source ({', '.join(kinds + dists)}); a "
                                       "package has one of vcs, directory, archive, or sdist/wheels")
    version = entry.get("version")
    if version is not None and (not isinstance(version, str) or not _VERSION.fullmatch(version.strip())):
        raise RequirementsError(FIELD, f"{where}: version {_shown(version)} is not a version")
    if kinds:
        kind = kinds[0]
        table = entry[kind]
        if not isinstance(table, dict):
            raise RequirementsError(FIELD, f"{where}: {kind} is not a table")
        sub = table.get("subdirectory")
        if sub is not None and (not isinstance(sub, str) or not sub):
            raise RequirementsError(FIELD, f"{where}: {kind}.subdirectory is not a path")
        fragment = f"#subdirectory={sub}" if sub else ""
        url, path = table.get("url"), table.get("path")
        if isinstance(url, str) and re.search(r"\s", url + (sub or "")):
            raise RequirementsError(FIELD, f"{where}: {kind}.url {_shown(url)} is not a URL (it holds whitespace)")
        if kind == "vcs":
            vcs = table.get("type")
            if vcs not in _VCS:
                raise RequirementsError(FIELD, f"{where}: vcs.type {_shown(vcs)} is not one of {', '.join(_VCS)}")
            if not isinstance(url, str) or not url:
                raise RequirementsError(FIELD, f"{where}: a vcs package is installed from its url here (a local "
                                               "repository path is not accepted)")
            commit = table.get("commit-id")
            if not isinstance(commit, str) or not re.fullmatch(r"[0-9A-Za-z._-]+", commit):
                raise RequirementsError(FIELD, f"{where}: vcs.commit-id is missing or not a commit")
            full = url if url.lower().startswith(f"{vcs}+") else f"{vcs}+{url}"
            return f"{name} @ {full}@{commit}{fragment}"
        if kind == "directory":
            if not isinstance(path, str) or not path:
                raise RequirementsError(FIELD, f"{where}: directory.path is missing")
            return f"{name} @ {_local_ref(posixpath.join(path, sub) if sub else path)}"
        if isinstance(url, str) and url:  # archive
            return f"{name} @ {url}{fragment}"
        if isinstance(path, str) and path:
            if sub:
                raise RequirementsError(FIELD, f"{where}: archive.subdirectory of a local archive is not accepted "
                                               "(an installer takes it only with a URL)")
            return f"{name} @ {_local_ref(path)}"
        raise RequirementsError(FIELD, f"{where}: archive has neither a url nor a path")
    wheels = entry.get("wheels", [])
    tables = ([entry["sdist"]] if "sdist" in entry else []) + (wheels if isinstance(wheels, list) else [None])
    locations = []
    for t in tables:
        loc = (t.get("url") or t.get("path")) if isinstance(t, dict) else None
        if not isinstance(loc, str) or not loc:
            raise RequirementsError(FIELD, f"{where}: an sdist or wheel entry is not a table with a url or path")
        if _URL_SCHEME.match(loc) and re.search(r"\s", loc):
            raise RequirementsError(FIELD, f"{where}: {_shown(loc)} is not a URL (it holds whitespace)")
        locations.append(loc)
    if not locations:
        raise RequirementsError(FIELD, f"{where}: wheels is empty")
    index = entry.get("index")
    if index is not None:
        if not isinstance(index, str) or not index or re.search(r"\s", index):
            raise RequirementsError(FIELD, f"{where}: index {_shown(index)} is not a URL")
        if version is None:
            raise RequirementsError(FIELD, f"{where}: names an index but no version")
        sources.add(index)
        return f"{name}=={version.strip()}"
    local = [not _URL_SCHEME.match(loc) or loc.lower().startswith("file:") for loc in locations]
    if version is not None and all((urlsplit(loc).hostname or "") in PYPI_FILE_HOSTS for loc in locations):
        sources.default = True
        return f"{name}=={version.strip()}"
    if len(locations) == 1:  # the one file the lock names
        return f"{name} @ {_local_ref(locations[0]) if local[0] else locations[0]}"
    if version is not None and all(local):
        for loc in locations:
            sources.add(posixpath.dirname(loc) or ".")
        return f"{name}=={version.strip()}"
    raise RequirementsError(FIELD, f"{where}: its {len(locations)} files are not on PyPI and the lock names no "
                                   "index for them: this tool cannot choose among them (give the package's index "
                                   "in the lock)")


def read_pylock(path: str, root: str, what: str) -> Read:
    """A PEP 751 lock file: every package (the ones whose marker tests only extras or
    dependency groups: those of the lock's default-groups) as one requirement line."""
    data = _toml(path, root, what, MAX_LOCK_BYTES)
    version = data.get("lock-version")
    if version is None:
        raise RequirementsError(FIELD, f"{what}: has no lock-version (a PEP 751 lock file has lock-version = \"1.0\")")
    if not isinstance(version, str) or not re.fullmatch(r"\d{1,6}(\.\d{1,6}){0,3}", version.strip()):
        raise RequirementsError(FIELD, f"{what}: lock-version {_shown(version)} is not a version such as \"1.0\"")
    major, *minor = version.strip().split(".")
    if int(major) != 1:
        raise RequirementsError(FIELD, f"{what}: lock-version {version} is not supported: this tool reads PEP 751 "
                                       "lock files of lock-version 1.x")
    packages = data.get("packages")
    if not isinstance(packages, list) or not all(isinstance(p, dict) for p in packages):
        raise RequirementsError(FIELD, f"{what}: has no [[packages]] (an array of tables)")
    groups = set(_str_list(data, "default-groups", what))
    supported = _marker_list(data, "environments", what)
    sources = _Sources()
    labels: list[str] = []
    requirements: list[str] = []
    left_out = 0
    for i, entry in enumerate(packages):
        name = entry.get("name")
        if not isinstance(name, str) or not _PACKAGE_NAME.fullmatch(name):
            raise RequirementsError(FIELD, f"{what}: packages[{i}]: name is missing or not a package name")
        where = f"{what}: packages[{i}] ({name})"
        marker = entry.get("marker", "")
        if not isinstance(marker, str):
            raise RequirementsError(FIELD, f"{where}: marker is not a string")
        keep, marker = _select_marker(marker, set(), groups, where) if marker.strip() else (True, "")
        # checked even when left out; only the installed packages' indexes are named
        target = _pylock_target(entry, name, where, sources if keep else _Sources())
        if not keep:
            left_out += 1
            continue
        labels.append(f"packages[{i}] ({name})")
        requirements.append(target + (f" ; {marker}" if marker else ""))
    options, notes = sources.lines()
    detail = _plural(len(requirements), "locked package")
    if left_out:
        detail += f"; {left_out} left out (only in extras or groups not installed by default)"
    if minor and int(minor[0]) > 0:
        notes.append(f"lock-version {version} read as 1.0")
    detail += "".join(f"; {n}" for n in notes)
    return Read([(0, line) for line in options + requirements], detail,
                labels=["the lock's package sources"] * len(options) + labels, supported=supported)


def uv_binary() -> str | None:
    """The uv this package depends on (as the local backend finds it), else uv on PATH."""
    try:
        from uv import find_uv_bin  # optional: uv (else uv on PATH)

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def _uv_error(stderr: str, code: int) -> str:
    """uv's error and its first causes ("Failed to parse `uv.lock`: TOML parse error at line
    3, column 1"), each whole: uv wraps a long message over lines, which are joined again."""
    raw = stderr.splitlines()
    start = next((i for i, ln in enumerate(raw) if ln.strip().startswith("error:")), None)
    if start is None:
        lines = [ln.strip() for ln in raw if ln.strip()]
        if any("panicked at" in ln for ln in lines):  # not the lock's fault alone: no Rust backtrace shown
            return "uv stopped with an internal error (a panic) reading it"
        return lines[0] if lines else f"uv export exited with status {code}"
    parts: list[list[str]] = [[raw[start].strip().removeprefix("error:").strip()]]
    for ln in raw[start + 1:]:
        text = ln.strip()
        if not text:
            break
        low = text.lower()
        if low.startswith(("cause:", "caused by:")):
            if len(parts) == 3:  # the error and its first two causes
                break
            parts.append([text.split(":", 1)[1].strip()])
        elif low.startswith(("hint:", "help:")):
            break
        else:  # a wrapped line of the message above
            parts[-1].append(text)
    return ": ".join(" ".join(p) for p in parts if any(p))


def _uv_export(folder: str, what: str, extras: list[str] | None = None) -> str:
    """``uv export`` of the project in ``folder`` (its uv.lock as it is: --frozen never
    resolves, --offline never fetches; no uv configuration but the project's own)."""
    uv = uv_binary()
    if not uv:
        raise RequirementsError(FIELD, f"{what}: reading it needs uv, which is not installed here")
    argv = [uv, "export", "--frozen", "--offline", "--no-config", "--no-python-downloads", "--no-cache",
            "--color", "never", "--no-hashes", "--no-emit-project", "--no-dev", "--no-header", "--no-annotate",
            *[a for name in extras or [] for a in ("--extra", name)]]
    # the server's own uv settings (UV_INDEX_URL, UV_FROZEN, ...) are not the repository's
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_") and k != "VIRTUAL_ENV"}
    try:
        proc = subprocess.run(argv, cwd=folder, env=env, capture_output=True, timeout=UV_EXPORT_TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RequirementsError(FIELD, f"{what}: `uv export` did not finish within {UV_EXPORT_TIMEOUT:g} s") from None
    except OSError as e:
        raise RequirementsError(FIELD, f"{what}: uv cannot be run to read it ({e.strerror})") from None
    if proc.returncode != 0:
        error = _uv_error(proc.stderr.decode("utf-8", "replace"), proc.returncode)
        raise RequirementsError(FIELD, bounded(mask_urls(f"{what}: uv cannot export it: {error}")))
    return str(proc.stdout.decode("utf-8", "replace"))


_SOURCE_KEYS = ("directory", "path", "editable", "git", "url", "workspace", "virtual")
_EXTRA_MARKER = re.compile(r"\bextra\s*==")


def _stale(project: dict[str, Any], locked: dict[str, Any], what: str) -> None:
    """Refuses a uv.lock whose project's dependencies are not the ones its pyproject.toml
    declares now (`uv export --frozen` exports it as it is; `uv sync` would lock again).
    The names, and the version specifiers of those uv locks from an index (uv records no
    specifier for a path, git or URL source); anything not read plainly is left to uv."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    declared_list = project.get("dependencies")
    metadata = locked.get("metadata")
    requires = metadata.get("requires-dist") if isinstance(metadata, dict) else None
    if "dependencies" in (project.get("dynamic") or []) or not isinstance(declared_list, list) \
            or not isinstance(requires, list):
        return
    try:
        declared = [(normalize(r.name), r.specifier) for r in map(Requirement, declared_list)
                    if not _EXTRA_MARKER.search(str(r.marker or ""))]
        entries = [d for d in requires if not _EXTRA_MARKER.search(str(d.get("marker", "")))]
        recorded = [(normalize(str(d["name"])), SpecifierSet(str(d.get("specifier", "")))) for d in entries]
        sourced = {normalize(str(d["name"])) for d in entries if any(k in d for k in _SOURCE_KEYS)}
    except (InvalidRequirement, InvalidSpecifier, KeyError, TypeError, AttributeError):
        return
    names, locked_names = {n for n, _ in declared}, {n for n, _ in recorded}
    specs = {(n, s) for n, s in declared if n not in sourced}
    locked_specs = {(n, s) for n, s in recorded if n not in sourced}
    if names == locked_names and specs == locked_specs:
        return
    new = sorted({f"{n}{s}" for n, s in specs - locked_specs} | {n for n in names - locked_names})
    gone = sorted({f"{n}{s}" for n, s in locked_specs - specs} | {n for n in locked_names - names})
    parts = ([f"pyproject.toml declares {', '.join(new)}"] if new else []) + \
            ([f"uv.lock locked {', '.join(gone)}"] if gone else [])
    raise RequirementsError(FIELD, bounded(f"{what}: is out of date with the pyproject.toml beside it "
                                           f"({'; '.join(parts)}): `uv sync` would lock again; run `uv lock` and "
                                           "commit uv.lock"))


def read_uv_lock(path: str, root: str, what: str, extras: list[str] | None = None) -> Read:
    """A uv.lock, exported by uv (:func:`_uv_export`) in its folder, with the locked
    dependencies of the project's ``extras`` too; the index each exported package was
    locked from, as an option line (from the lock's sources); whether the project beside
    it is a package to install (uv's own record of it)."""
    root = os.path.realpath(root)
    folder = os.path.dirname(path)
    pyproject = os.path.join(folder, "pyproject.toml")
    if not os.path.lexists(pyproject):
        raise RequirementsError(FIELD, f"{what}: has no pyproject.toml beside it; uv reads a lock with its "
                                       "project (declare a folder without one in pylock.toml or requirements.txt)")
    data = _toml(pyproject, root, f"{what}: the pyproject.toml beside it")
    got = read_confined(path, root, MAX_LOCK_BYTES, what, FIELD)
    assert got is not None
    real_folder = os.path.realpath(folder)
    if not _inside(real_folder, root):
        raise RequirementsError(FIELD, f"{what}: its folder resolves outside the server root; not read")
    exported = _uv_export(real_folder, what, extras or [])
    again = read_confined(path, root, MAX_LOCK_BYTES, what, FIELD)
    if again is None or again[0] != got[0]:
        raise RequirementsError(FIELD, f"{what}: changed while it was read; submit again")
    try:
        lock = _parse_toml(got[0].decode("utf-8"), what)
    except UnicodeDecodeError:
        raise RequirementsError(FIELD, f"{what}: is not UTF-8 text") from None
    from jupyter_nbvalidation.environment.requirements import _logical_lines

    lines = _logical_lines(exported)
    listed = lock.get("package")
    packages = [p for p in listed if isinstance(p, dict)] if isinstance(listed, list) else []
    project = data.get("project")
    project = project if isinstance(project, dict) else {}
    name = project.get("name") if isinstance(project.get("name"), str) else None
    install = False
    for p in packages:
        source = p.get("source")
        if name and isinstance(source, dict) and normalize(str(p.get("name", ""))) == normalize(name) \
                and "." in (source.get("editable"), source.get("directory"), source.get("virtual")):
            install = source.get("virtual") != "."
            _stale(project, p, what)
    # a registry that is a --find-links location (a flat page) rather than an index: as the project says
    tool = data.get("tool")
    tool_uv = tool.get("uv") if isinstance(tool, dict) else None
    tool_uv = tool_uv if isinstance(tool_uv, dict) else {}
    links, indexes = tool_uv.get("find-links"), tool_uv.get("index")
    flat = {str(u).rstrip("/") for u in (links if isinstance(links, list) else [])} | {
        str(i.get("url", "")).rstrip("/") for i in (indexes if isinstance(indexes, list) else [])
        if isinstance(i, dict) and i.get("format") == "flat"}
    by_name: dict[str, list[str]] = {}
    for p in packages:
        source = p.get("source")
        if isinstance(source, dict) and isinstance(source.get("registry"), str):
            by_name.setdefault(normalize(str(p.get("name", ""))), []).append(source["registry"])
    sources = _Sources()
    count = 0
    for _, line in lines:
        # a package per line but options (-e: a workspace member or an editable path source)
        if not line.startswith("-") or line.startswith(("-e ", "--editable ")):
            count += 1
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)", line)
        if line.startswith("-") or not m:
            continue
        for registry in by_name.get(normalize(m.group(1)), []):
            sources.add(registry, flat=registry.rstrip("/") in flat)
    options, notes = sources.lines()
    detail = _plural(count, "locked package")
    if install:
        detail += f" and the project {name}, installed from {_rel(real_folder, root)}"
    detail += "".join(f"; {n}" for n in notes)
    return Read([(0, o) for o in options] + [(0, line) for _, line in lines], detail,
                labels=["the lock's package sources"] * len(options) + [f"exported line {n}" for n, _ in lines],
                install_project=install, supported=_marker_list(lock, "supported-markers", what))


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


#: repo2docker's files that are not an environment's Python packages, and are not acted on here
NOT_RUN = (("apt.txt", "apt.txt (system packages)"), ("postBuild", "postBuild"), ("start", "start"),
           ("install.R", "install.R"), ("DESCRIPTION", "DESCRIPTION (R)"), ("Project.toml", "Project.toml (Julia)"))


APT_TXT = "apt.txt"
MAX_SYSTEM_PACKAGES = 200
# a Debian package name (policy 5.6.1), with an optional :architecture and =version
_APT_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?(=[A-Za-z0-9.+~:-]+)?$")


def not_run_here(folder: str, *, system_packages: bool = False) -> list[str]:
    """The repo2docker files beside the environment's file that are not acted on here (a
    notebook that needs what they do fails, and its verdict says why it may have).
    ``system_packages``: the backend installs apt.txt (read by :func:`read_apt_txt`)."""
    return [shown for name, shown in NOT_RUN if os.path.isfile(os.path.join(folder, name))
            and not (system_packages and name == APT_TXT)]


def read_apt_txt(folder: str, root: str) -> tuple[list[str], str] | None:
    """The Debian packages of ``apt.txt`` in ``folder`` (repo2docker's: one a line,
    ``#`` comments), checked as package names (``name[:arch][=version]``: nothing
    else reaches apt-get), and where it is; None when there is no apt.txt."""
    path = os.path.join(folder, APT_TXT)
    if not os.path.lexists(path):
        return None
    shown = _rel(os.path.realpath(path), os.path.realpath(root))
    packages: list[str] = []
    for n, raw in enumerate(_read_text(path, root, shown).splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        for word in line.split():
            if not _APT_PACKAGE.match(word):
                raise RequirementsError(FIELD, f"{shown} line {n}: {word!r} is not a Debian package name "
                                               "(name[:architecture][=version])")
            if word not in packages:
                packages.append(word)
    if len(packages) > MAX_SYSTEM_PACKAGES:
        raise RequirementsError(FIELD, f"{shown}: {len(packages)} packages; the limit is {MAX_SYSTEM_PACKAGES}")
    return packages, shown


def declared_extras(folder: str, root: str) -> list[str] | None:
    """The extras the project in ``folder`` declares statically (pyproject.toml's
    ``[project.optional-dependencies]``, normalized), or None when they cannot be known
    here: no ``[project]`` table, extras computed by the build (``dynamic``), setup.py."""
    path = os.path.join(folder, "pyproject.toml")
    if not os.path.lexists(path):
        return None
    project = _toml(path, root, "pyproject.toml").get("project")
    if not isinstance(project, dict) or "optional-dependencies" in (project.get("dynamic") or []):
        return None
    table = project.get("optional-dependencies") or {}
    return sorted(normalize(str(k)) for k in table) if isinstance(table, dict) else None


def python_requirement(found: Discovered, root: str) -> tuple[str, str] | None:
    """The Python version the repository asks for, as a PEP 440 specifier and
    where it says so: ``runtime.txt`` beside the chosen file (repo2docker's
    ``python-3.X[.Y]``), else the chosen pyproject.toml's ``requires-python`` (a lock's
    own), or environment.yml's ``python`` dependency (conda's ``python=3.10``: 3.10.*).
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
    if found.kind in ("environment.yml", "environment.yaml"):
        wanted = read_environment_yml(found.path, root, found.where).python
        return (wanted, f"{found.shown}'s python") if wanted else None
    if found.kind in ("pyproject.toml", "uv.lock"):
        # uv.lock: its project's requires-python (the lock's own, written from it, else)
        pyproject = found.path if found.kind == "pyproject.toml" else os.path.join(folder, "pyproject.toml")
        if not os.path.lexists(pyproject):
            return None  # uv.lock alone: refused when it is read
        shown = _rel(pyproject, os.path.realpath(root))
        project = _toml(pyproject, root, found.where if pyproject == found.path else shown).get("project")
        wanted = project.get("requires-python") if isinstance(project, dict) else None
        if isinstance(wanted, str) and wanted.strip():
            return wanted.strip(), f"{shown}'s requires-python"
    if found.kind in ("pylock.toml", "uv.lock"):
        wanted = _toml(found.path, root, found.where, MAX_LOCK_BYTES).get("requires-python")
        if wanted is not None and not isinstance(wanted, str):
            raise RequirementsError(FIELD, f"{found.where}: requires-python is not a version specifier string")
        if isinstance(wanted, str) and wanted.strip():
            return wanted.strip(), f"{found.shown}'s requires-python"
    return None

