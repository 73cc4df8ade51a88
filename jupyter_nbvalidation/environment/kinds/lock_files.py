"""Lock files: ``pylock.toml`` (PEP 751), and what it shares with ``uv.lock`` (uv_lock.py).

Why they come where they do (discovery.py's KINDS): repo2docker reads neither; its
own order puts a lock before what it locks (Pipfile.lock before Pipfile), and a lock
file is the most exact declaration a folder makes (every package at one version, for
every platform), so the two lock files come before Pipfile.lock, Pipfile and
requirements.txt, which a folder often carries beside a lock, exported from it or
older than it. ``pylock.toml`` (the standard) before ``uv.lock``: uv writes it from
the same lock (``uv export --format pylock.toml``), and it is read here without
running anything. Only the plain ``pylock.toml`` is looked for: named ones
(``pylock.<name>.toml``) are not picked.

- ``pylock.toml`` (lock-version 1.x; another major version is refused): each
  ``[[packages]]`` entry is one line, its ``marker`` kept for the build's interpreter
  to evaluate: ``name==version`` for packages from an index (an index other than
  PyPI as an ``--index-url`` / ``--extra-index-url`` line, a local one as
  ``--find-links``), ``name @ git+URL@commit`` for a ``vcs`` entry, ``name @ URL``
  for an ``archive`` URL, a local ``directory`` or archive ``path`` relative to the
  lock's folder (confined to the server root, hashed into the cache key; an editable
  directory is installed as a regular one). A marker testing extras or dependency
  groups is decided here: no extras, the lock's ``default-groups``. The lock's
  ``requires-python`` is checked like pyproject.toml's, its ``environments`` (if
  any) against the build's Python on this machine (at submit, by the service).
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from jupyter_nbvalidation.core.redaction import mask_urls
from jupyter_nbvalidation.environment.kinds.base import Contribution, Discovered, Kind, Read, from_lines
from jupyter_nbvalidation.environment.lines import ALLOWED_OPTIONS
from jupyter_nbvalidation.environment.reading import (
    FIELD,
    MAX_LOCK_BYTES,
    RequirementsError,
    plural,
    read_toml,
)
from jupyter_nbvalidation.verdict.environment_record import normalize

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


def _marker_error(marker: str) -> str | None:
    from packaging.markers import InvalidMarker, Marker  # deferred: start-up time (packaging's parser)

    try:
        Marker(marker)
    except InvalidMarker as e:
        return str(e).splitlines()[0]
    return None


def _select_marker(marker: str, extras: set[str], groups: set[str], where: str) -> tuple[bool, str]:
    """(installed?, the marker to keep) for a PEP 751 package marker: its extras and
    dependency_groups tests decided here; a marker that tested only those is dropped."""
    from packaging.markers import Marker  # deferred: start-up time (packaging's parser)

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


def marker_list(data: dict[str, Any], key: str, what: str) -> list[str] | None:
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
    from packaging.markers import Marker, default_environment  # deferred: start-up time (packaging's parser)

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
class Sources:
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


def _pylock_target(entry: dict[str, Any], name: str, where: str, sources: Sources) -> str:
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
    data = read_toml(path, root, what, MAX_LOCK_BYTES)
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
    supported = marker_list(data, "environments", what)
    sources = Sources()
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
        target = _pylock_target(entry, name, where, sources if keep else Sources())
        if not keep:
            left_out += 1
            continue
        labels.append(f"packages[{i}] ({name})")
        requirements.append(target + (f" ; {marker}" if marker else ""))
    options, notes = sources.lines()
    detail = plural(len(requirements), "locked package")
    if left_out:
        detail += f"; {left_out} left out (only in extras or groups not installed by default)"
    if minor and int(minor[0]) > 0:
        notes.append(f"lock-version {version} read as 1.0")
    detail += "".join(f"; {n}" for n in notes)
    return Read([(0, line) for line in options + requirements], detail,
                labels=["the lock's package sources"] * len(options) + labels, supported=supported)


def lock_requires_python(found: Discovered, root: str) -> tuple[str, str] | None:
    """A lock's own ``requires-python``."""
    wanted = read_toml(found.path, root, found.where, MAX_LOCK_BYTES).get("requires-python")
    if wanted is not None and not isinstance(wanted, str):
        raise RequirementsError(FIELD, f"{found.where}: requires-python is not a version specifier string")
    if isinstance(wanted, str) and wanted.strip():
        return wanted.strip(), f"{found.shown}'s requires-python"
    return None


class PylockToml(Kind):
    """PEP 751's lock file: every package it installs by default, one line each."""

    names = ("pylock.toml",)

    def contribute(self, found: Discovered, root: str, extras: list[str]) -> Contribution:
        out = from_lines(found, read_pylock(found.path, root, found.where))
        if out.read is not None and out.read.supported is not None:
            out.supported = (out.read.supported, f"{found.shown}'s environments")
        return out

    def python(self, found: Discovered, root: str) -> tuple[str, str] | None:
        return lock_requires_python(found, root)
