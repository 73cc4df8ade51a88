"""Lock files: ``pylock.toml`` (PEP 751) and ``uv.lock``.

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
  any) against the build's Python on this machine (at submit, by the service);
- ``uv.lock``: exported by uv itself (``uv export --frozen --offline --no-config
  --no-hashes --no-emit-project --no-dev``, in the lock's folder, which must hold the
  project's ``pyproject.toml``; a worker thread at submit, a timeout of
  :data:`UV_EXPORT_TIMEOUT`): the subset for each platform is uv's own resolution, as
  markers on the exported lines; what is exported is what ``uv sync --frozen
  --no-dev`` installs (the project's dependencies and its default groups but dev).
  The index each exported package was locked from (the lock's ``registry`` sources)
  becomes an option line as for pylock.toml. The project itself is installed as for
  pyproject.toml when uv records it as a package (``source = { editable = "." }``; a
  virtual project is not installed). uv's failure (a corrupt lock, a lock whose
  project is not the pyproject's) is a 400 with uv's first error line; since
  ``--frozen`` does not check that the lock is up to date, the project's dependencies
  in pyproject.toml are compared with the ones the lock recorded (names and version
  specifiers) and a lock out of date is refused. The cache key follows the exported
  lines (and, for an installed project, its whole tree, uv.lock included): a change
  of the lock that leaves the lines as they are installs the same packages.
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from jupyter_nbvalidation.core.redaction import mask_urls
from jupyter_nbvalidation.environment.kinds.base import Contribution, Discovered, Kind, Read, from_lines
from jupyter_nbvalidation.environment.kinds.pyproject import requires_python
from jupyter_nbvalidation.environment.lines import ALLOWED_OPTIONS, logical_lines
from jupyter_nbvalidation.environment.reading import (
    FIELD,
    MAX_LOCK_BYTES,
    RequirementsError,
    bounded,
    inside,
    parse_toml,
    plural,
    read_confined,
    read_toml,
    rel,
)
from jupyter_nbvalidation.verdict.environment_record import normalize

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
    detail = plural(len(requirements), "locked package")
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
        from uv import find_uv_bin  # optional: uv's wheel (else uv on PATH)

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
    from packaging.requirements import InvalidRequirement, Requirement  # deferred: start-up time (packaging's parser)
    from packaging.specifiers import InvalidSpecifier, SpecifierSet  # deferred: start-up time (packaging's parser)

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
    data = read_toml(pyproject, root, f"{what}: the pyproject.toml beside it")
    got = read_confined(path, root, MAX_LOCK_BYTES, what, FIELD)
    assert got is not None
    real_folder = os.path.realpath(folder)
    if not inside(real_folder, root):
        raise RequirementsError(FIELD, f"{what}: its folder resolves outside the server root; not read")
    exported = _uv_export(real_folder, what, extras or [])
    again = read_confined(path, root, MAX_LOCK_BYTES, what, FIELD)
    if again is None or again[0] != got[0]:
        raise RequirementsError(FIELD, f"{what}: changed while it was read; submit again")
    try:
        lock = parse_toml(got[0].decode("utf-8"), what)
    except UnicodeDecodeError:
        raise RequirementsError(FIELD, f"{what}: is not UTF-8 text") from None
    lines = logical_lines(exported)
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
    detail = plural(count, "locked package")
    if install:
        detail += f" and the project {name}, installed from {rel(real_folder, root)}"
    detail += "".join(f"; {n}" for n in notes)
    return Read([(0, o) for o in options] + [(0, line) for _, line in lines], detail,
                labels=["the lock's package sources"] * len(options) + [f"exported line {n}" for n, _ in lines],
                install_project=install, supported=_marker_list(lock, "supported-markers", what))


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


class UvLock(Kind):
    """uv's lock, exported by uv (and the project beside it, when uv installs it)."""

    names = ("uv.lock",)

    def contribute(self, found: Discovered, root: str, extras: list[str]) -> Contribution:
        # `uv export` runs here (collect runs off the event loop)
        got = read_uv_lock(found.path, root, found.where, extras)
        out = from_lines(found, got)
        if got.install_project:  # a packaged project: the project too, as pyproject.toml's is
            out.install_project = True
            if extras:
                out.origin = bounded(f"{out.origin}, with extras {', '.join(extras)}")
            base = os.path.dirname(found.path)
            out.project_file = rel(os.path.join(base, "pyproject.toml"), os.path.realpath(root))
        if got.supported is not None:
            out.supported = (got.supported, f"{found.shown}'s supported-markers")
        return out

    def python(self, found: Discovered, root: str) -> tuple[str, str] | None:
        # its project's requires-python (the lock's own, written from it, else)
        pyproject = os.path.join(os.path.dirname(found.path), "pyproject.toml")
        if not os.path.lexists(pyproject):
            return None  # uv.lock alone: refused when it is read
        return requires_python(pyproject, found, root) or lock_requires_python(found, root)
