"""``uv.lock``: exported by uv itself (``uv export --frozen --offline --no-config
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

Why it comes after pylock.toml and before Pipfile.lock: lock_files.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Any

from jupyter_nbvalidation.core.redaction import mask_urls
from jupyter_nbvalidation.environment.kinds.base import Contribution, Discovered, Kind, Read, from_lines
from jupyter_nbvalidation.environment.kinds.lock_files import Sources, lock_requires_python, marker_list
from jupyter_nbvalidation.environment.kinds.pyproject import requires_python
from jupyter_nbvalidation.environment.lines import logical_lines
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
    sources = Sources()
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
                install_project=install, supported=marker_list(lock, "supported-markers", what))


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
