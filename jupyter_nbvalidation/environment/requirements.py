"""One check for every requirements source of a job, applied at submit.

The sources (the spec list ``podConfig.buildConfig.requirements``, else
``podConfig.buildConfig.requirementsFile``, else the file the repository
declares its environment in, found by :mod:`environment_files` from the
notebook's folder up to the repository root, binder/ in place of the root's
own files: environment.yml, pylock.toml, uv.lock (exported by ``uv export``),
Pipfile(.lock), requirements.txt, pyproject.toml / setup.py) go through
:func:`collect`, which
reads files safely (symlinks resolved, confined to the server root, size
checked by ``fstat`` before at most ``limit + 1`` bytes are read) and checks
every line:

- requirement specifiers (``name[extras] ==1.0 ; markers``) and ``http``,
  ``https``, ``git+https`` URLs are taken as they are;
- options only from :data:`ALLOWED_OPTIONS`, spelled in full (pip's option
  parser takes any unambiguous prefix, so ``--constr`` *is* ``--constraint``:
  every abbreviation is refused, naming the option it stands for);
- ``-r`` (inlined) and ``-c`` files, ``-e`` and plain local paths,
  ``--find-links DIR`` and ``file://`` URLs only inside the server root; a
  local package's or folder's content is hashed into the environment's cache
  key (:meth:`Requirements.cache_key_material`), so an edit rebuilds. ``-e``
  is installed as a regular (non-editable) install: a cached environment must
  not follow later edits of its source;
- ``${VAR}`` is refused (pip and uv would expand it from the server's
  environment);
- credentials in URLs (``https://user:PASS@host``, ``https://TOKEN@host``)
  are replaced by ``***`` in everything stored or shown.

The snapshot a backend stores is the *display* text (flattened, absolute
local paths, credentials ``***``). The secret values never go to disk: the
process that accepted the job holds them in memory (:func:`hold`); a build
gets them through its process environment only: the requirements file it
reads has ``${NBV_SECRET_<n>}`` in place of each ``***`` (pip and uv expand
these), and the values are set in the build's environment
(:func:`for_build`). A process that does not hold them (restart, another
server took over) reads the source file again and uses it only when its
display text is exactly the snapshot's; credentials given in the spec list
cannot be recovered that way, and the build fails saying so.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import stat
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, NoReturn

from jupyter_nbvalidation.core.redaction import MASK, mask_urls, userinfo
from jupyter_nbvalidation.environment.local_sources import ARCHIVE as LOCAL_ARCHIVE
from jupyter_nbvalidation.environment.local_sources import Packed

SYSTEM_PACKAGES_TXT = "apt.txt"  # the snapshot's file of Requirements.system_packages
INTERPRETER_JSON = "interpreter.json"  # the snapshot's file of Requirements.interpreter_wanted()

MAX_FILE_BYTES = 1 * 2**20  # one requirements or constraints file
MAX_LINES = 2000  # requirement + constraint lines after inlining -r files
MAX_LINE_CHARS = 4096
MAX_INCLUDE_DEPTH = 5  # -r / -c nesting
MAX_LIST_ITEMS = 500  # spec.podConfig.buildConfig.requirements
MAX_TREE_FILES = 20000  # a local package or --find-links folder, hashed into the cache key
MAX_TREE_BYTES = 512 * 2**20

SOURCE_ANNOTATION = "nbvalidation.dev/requirements-source"
# where the requirements came from (Requirements.origin), stored with the job at submit
ORIGIN_ANNOTATION = "nbvalidation.dev/environment-origin"
SECRET_ENV_PREFIX = "NBV_SECRET_"

# option -> takes a value. The options a requirements file (or list entry) may carry.
ALLOWED_OPTIONS: dict[str, bool] = {
    "--index-url": True, "-i": True,
    "--extra-index-url": True,
    "--no-index": False,
    "--find-links": True, "-f": True,
    "--requirement": True, "-r": True,
    "--constraint": True, "-c": True,
    "--editable": True, "-e": True,
    "--pre": False,
    "--prefer-binary": False,
    "--only-binary": True,
    "--no-binary": True,
    "--require-hashes": False,
}
PER_REQUIREMENT_OPTIONS = {"--hash": True}
# pip/uv options that are refused, with the reason (every other option is refused as unknown)
REFUSED_OPTIONS: dict[str, str] = {
    "--trusted-host": "it turns off TLS verification for a host",
    "--use-feature": "pip features are chosen by the server",
    "--global-option": "it passes arbitrary arguments to a package's build",
    "--install-option": "it passes arbitrary arguments to a package's build",
    "--config-settings": "it passes arbitrary arguments to a package's build",
    "--build-option": "it passes arbitrary arguments to a package's build",
    "--no-build-isolation": "builds run isolated",
    "--target": "the environment is chosen by the server",
    "--prefix": "the environment is chosen by the server",
    "--root": "the environment is chosen by the server",
    "--user": "the environment is chosen by the server",
    "--src": "the environment is chosen by the server",
    "--cert": "certificates are configured on the server",
    "--client-cert": "certificates are configured on the server",
    "--proxy": "the network is configured on the server",
    "--keyring-provider": "credentials come from the index URL only",
    "--index-strategy": "the resolver is configured on the server",
    "--upgrade": "not a requirements-file option",
    "--force-reinstall": "not a requirements-file option",
    "--no-deps": "not a requirements-file option",
    "--ignore-installed": "not a requirements-file option",
    "--python": "the interpreter is chosen by the server",
    "--system": "the environment is chosen by the server",
    "--break-system-packages": "the environment is chosen by the server",
    "--default-index": "use --index-url",
    "--index": "use --index-url or --extra-index-url",
}
_LONG_OPTIONS = sorted({*(o for o in ALLOWED_OPTIONS if o.startswith("--")), *PER_REQUIREMENT_OPTIONS,
                        *REFUSED_OPTIONS})

_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9._,\s-]*\])?")
_SPEC_REST = re.compile(r"^[\sA-Za-z0-9._*,<>=!~()\[\]'\";:/+@-]*$")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_ARCHIVE = (".whl", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tar", ".zip")
REMOTE_SCHEMES = ("http", "https", "git+https", "git+http", "hg+https", "svn+https", "bzr+https")
_PLACEHOLDER = re.compile(r"\$\{" + SECRET_ENV_PREFIX + r"(\d+)\}")


class RequirementsError(ValueError):
    """A refused requirement: ``field`` is the spec field, ``message`` names the source and line."""

    def __init__(self, field: str, message: str, status: int = 400):
        super().__init__(message)
        self.field = field
        self.message = message
        self.status = status


class OverLimit(RequirementsError):
    """A file over its size limit (detected before it is read)."""


@dataclass
class Requirements:
    """What the checks made of a job's requirements.

    ``lines``/``constraints``: build form (a ``${NBV_SECRET_<n>}`` for each
    credential); ``display_lines``/``display_constraints``: the same with
    ``***`` (the only form stored or shown); ``secrets``: the credential
    values, in placeholder order (memory only); ``local_paths``: absolute
    real paths inside the root whose content is hashed into the cache key."""

    origin: str
    lines: list[str] = field(default_factory=list)
    display_lines: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    display_constraints: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)
    local_paths: list[str] = field(default_factory=list)
    source_path: str | None = None  # the top-level file (None: the spec list)
    project_file: str | None = None  # a discovered pyproject.toml / setup.py whose project is installed
    python_requires: tuple[str, str] | None = None  # (PEP 440 specifier, where the repository says so)
    # (markers, where): the environments a discovered lock file is valid for (one must fit the build)
    supported_environments: tuple[list[str], str] | None = None
    spec_constraints: int = 0  # how many of ``constraints`` came from spec.podConfig.buildConfig.constraints
    # the local paths packed to travel with the job (local_sources.py), for a backend that builds where
    # the server's files are not: stored in the snapshot, their hashes the cache key's
    packed: "Packed | None" = None
    # Debian packages of the repository's apt.txt, for a backend that installs them (its image)
    system_packages: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.lines or self.constraints)

    @property
    def count(self) -> int:
        return sum(1 for ln in self.display_lines if not ln.startswith("-"))

    def snapshot(self) -> dict[str, bytes]:
        """The files stored with the job (display form only)."""
        out: dict[str, bytes] = {}
        if self.display_lines or self.display_constraints:
            out["requirements.txt"] = _text(self.display_lines).encode()
        if self.display_constraints:
            out["constraints.txt"] = _text(self.display_constraints).encode()
        if self.packed is not None:
            out[LOCAL_ARCHIVE] = self.packed.data
        if self.system_packages:
            out[SYSTEM_PACKAGES_TXT] = _text(self.system_packages).encode()
        interpreter = self.interpreter_wanted()
        if interpreter:
            out[INTERPRETER_JSON] = json.dumps(interpreter, sort_keys=True).encode()
        return out

    def interpreter_wanted(self) -> dict[str, Any]:
        """What the repository asks of the interpreter (``pythonRequires``: [PEP 440
        specifier, where]; ``environments``: [the markers one of which must hold, where]),
        for a backend that knows its Python only once the build runs; {} when nothing."""
        out: dict[str, Any] = {}
        if self.python_requires is not None:
            out["pythonRequires"] = list(self.python_requires)
        if self.supported_environments is not None:
            out["environments"] = [list(self.supported_environments[0]), self.supported_environments[1]]
        return out

    def want_interpreter(self, stored: dict[str, Any]) -> None:
        """Read back :meth:`interpreter_wanted` (from a snapshot)."""
        pr, envs = stored.get("pythonRequires"), stored.get("environments")
        if isinstance(pr, list) and len(pr) == 2:
            self.python_requires = (str(pr[0]), str(pr[1]))
        if isinstance(envs, list) and len(envs) == 2 and isinstance(envs[0], list):
            self.supported_environments = ([str(m) for m in envs[0]], str(envs[1]))

    def cache_key_material(self) -> dict[str, Any]:
        """What identifies the environment: the displayed lines (never a
        secret) and the content hash of every local path they use."""
        hashes = self.packed.hashes if self.packed is not None else {}
        material: dict[str, Any] = {
            "requirements": sorted(set(self.display_lines)), "constraints": list(self.display_constraints),
            "local": {p: hashes.get(p) or tree_hash(p) for p in sorted(set(self.local_paths))}}
        if self.system_packages:
            material["system"] = list(self.system_packages)
        return material

    def build_files(self) -> tuple[str, str | None]:
        """(requirements text, constraints text or None) for the build tool,
        with placeholders in place of credentials."""
        return _text(self.lines), (_text(self.constraints) if self.constraints else None)

    def build_env(self) -> dict[str, str]:
        return {f"{SECRET_ENV_PREFIX}{i}": s for i, s in enumerate(self.secrets)}


def _text(lines: list[str]) -> str:
    return "".join(f"{ln}\n" for ln in lines)


# --- safe reading ----------------------------------------------------------------

def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def read_confined(path: str, root: str, limit: int, what: str, field_name: str, *, missing_ok: bool = False
                  ) -> tuple[bytes, str] | None:
    """Read the regular file ``path`` (absolute) whose real path is inside
    ``root``: resolved first, size from ``fstat`` before reading, at most
    ``limit + 1`` bytes read, and the opened file's own path checked again
    (a link swapped in between is caught). Returns (bytes, real path)."""
    root = os.path.realpath(root)
    if not os.path.lexists(path):
        if missing_ok:
            return None
        raise RequirementsError(field_name, f"{what}: no such file", 404)
    real = os.path.realpath(path)
    if not _inside(real, root):
        raise RequirementsError(field_name, f"{what}: resolves outside the server root (symlinks are followed "
                                            "and must stay inside it); not read")
    if not os.path.exists(real):
        raise RequirementsError(field_name, f"{what}: is a broken symlink", 404)
    try:
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise RequirementsError(field_name, f"{what}: cannot be opened ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RequirementsError(field_name, f"{what}: is not a regular file")
        opened = os.path.realpath(f"/proc/self/fd/{fd}") if os.path.isdir("/proc/self/fd") else real
        if not _inside(opened, root):
            raise RequirementsError(field_name, f"{what}: resolves outside the server root; not read")
        if st.st_size > limit:
            raise OverLimit(field_name, f"{what}: is {st.st_size} bytes; the limit is {limit} bytes")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise OverLimit(field_name, f"{what}: is over {limit} bytes (the limit)")
        return b"".join(chunks), real
    finally:
        os.close(fd)


_ARTEFACT_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".eggs", ".tox", ".nox", ".venv",
                            ".mypy_cache", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints"})


def _build_artefact(name: str, top: bool) -> bool:
    """Folders a build or a tool writes into a source tree (setuptools writes
    ``*.egg-info`` and ``build/`` beside the sources when uv or pip builds
    it): not content, so they do not change the cache key."""
    return name in _ARTEFACT_DIRS or name.endswith(".egg-info") or (top and name in ("build", "dist"))


def walk_tree(path: str) -> "Iterator[tuple[str, str, os.stat_result | None]]":
    """The content of the folder ``path`` as :func:`tree_hash` reads it, in a
    fixed order: (relative path, full path, its stat, or None for a link, which is
    never followed). Build and tool artefacts (:func:`_build_artefact`), virtual
    environments and bytecode are left out. Bounded by MAX_TREE_FILES /
    MAX_TREE_BYTES (ValueError)."""
    files = total = 0
    for dirpath, dirnames, filenames in os.walk(path):
        # a virtual environment (a folder holding pyvenv.cfg: venv/, env/ beside a project the
        # environment files name) is never a source tree's content
        dirnames[:] = sorted(d for d in dirnames if not _build_artefact(d, dirpath == path)
                             and not os.path.islink(os.path.join(dirpath, d))
                             and not os.path.isfile(os.path.join(dirpath, d, "pyvenv.cfg")))
        rel_dir = os.path.relpath(dirpath, path)
        links = [d for d in os.listdir(dirpath) if os.path.islink(os.path.join(dirpath, d))
                 and os.path.isdir(os.path.join(dirpath, d))]
        for name in sorted(set(filenames) | set(links)):
            if name.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(dirpath, name)
            files += 1
            if files > MAX_TREE_FILES:
                raise ValueError(f"{path} has over {MAX_TREE_FILES} files")
            if os.path.islink(full):
                yield os.path.join(rel_dir, name), full, None
                continue
            st = os.stat(full)
            total += st.st_size
            if total > MAX_TREE_BYTES:
                raise ValueError(f"{path} holds over {MAX_TREE_BYTES} bytes")
            yield os.path.join(rel_dir, name), full, st


def tree_hash(path: str) -> str:
    """Content hash of a file or a folder tree (names, modes, content; links
    by their target text, never followed), over :func:`walk_tree`."""
    h = hashlib.sha256()
    if os.path.isfile(path):
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return "file:" + h.hexdigest()
    for rel, full, st in walk_tree(path):
        h.update(f"{rel}\0".encode())
        if st is None:
            h.update(b"L" + os.readlink(full).encode() + b"\0")
            continue
        h.update(f"{st.st_mode & 0o111:o}\0".encode())
        with open(full, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return "tree:" + h.hexdigest()


# --- the checker ------------------------------------------------------------------

class _Collector:
    def __init__(self, root: str, field_name: str, origin: str):
        self.root = os.path.realpath(root)
        self.field = field_name
        self.out = Requirements(origin=origin)
        self.seen_files: set[str] = set()

    # where: e.g. "requirements.txt beside the notebook (sub/requirements.txt) line 3"
    def fail(self, where: str, reason: str, status: int = 400) -> NoReturn:
        raise RequirementsError(self.field, f"{where}: {reason}", status)

    def rel(self, real: str) -> str:
        return os.path.relpath(real, self.root)

    def redact_url(self, url: str, where: str) -> tuple[str, str]:
        """(build form, display form) of a URL: credentials become a placeholder / ***."""
        info = userinfo(url)
        if info is None or not info.secret:
            return url, url
        if MASK in info.secret:
            self.fail(where, f"{MASK} is not a credential (it is how credentials are shown)")
        n = len(self.out.secrets)
        self.out.secrets.append(info.secret)
        return info.with_secret("${" + f"{SECRET_ENV_PREFIX}{n}" + "}"), info.masked()

    def local(self, value: str, base: str, where: str, what: str, *, want_dir: bool | None = None) -> str:
        """A local path (relative to ``base``) or file:// URL: its real path, inside the root."""
        raw = value
        if value.lower().startswith("file:"):
            value = re.sub(r"^file:(//(localhost)?)?", "", value, flags=re.I)
            from urllib.parse import unquote

            value = unquote(value)
        if value.startswith("~"):
            self.fail(where, f"{what} {raw!r}: '~' paths are not accepted; give a path inside the server root")
        full = os.path.realpath(os.path.join(base, value))
        if not _inside(full, self.root):
            self.fail(where, f"{what} {raw!r} is outside the server root (only paths inside it are accepted, "
                             "and their content is part of the environment's cache key)")
        if not os.path.exists(full):
            self.fail(where, f"{what} {raw!r}: no such file or folder", 404)
        if want_dir is True and not os.path.isdir(full):
            self.fail(where, f"{what} {raw!r} is not a folder")
        try:
            tree_hash(full)  # bounded now, so a later build never meets an unhashable tree
        except (OSError, ValueError) as e:
            self.fail(where, f"{what} {raw!r}: its content cannot be hashed for the cache key: {e}")
        self.out.local_paths.append(full)
        return full

    def url_or_path(self, value: str, base: str, where: str, what: str) -> tuple[str, str]:
        """An option value that is a URL (remote schemes) or a local path."""
        m = _URL.match(value)
        if m and m.group(1).lower() != "file":
            if m.group(1).lower() not in ("http", "https"):
                self.fail(where, f"{what}: the {m.group(1)} scheme is not accepted (http or https)")
            return self.redact_url(value, where)
        if not m and re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", value) and not os.path.exists(os.path.join(base, value)):
            self.fail(where, f"{what}: {value!r} is neither an http(s) URL nor a path")
        full = self.local(value, base, where, what)
        return full, full

    def read_file(self, path: str, what: str, depth: int) -> tuple[str, str]:
        """(text, real path) of a requirements/constraints file."""
        if depth > MAX_INCLUDE_DEPTH:
            self.fail(what, f"files are nested over {MAX_INCLUDE_DEPTH} levels deep (-r/-c)")
        got = read_confined(path, self.root, MAX_FILE_BYTES, what, self.field)
        assert got is not None
        data, real = got
        if real in self.seen_files:
            self.fail(what, "is included twice (a -r/-c cycle?)")
        self.seen_files.add(real)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            self.fail(what, "is not UTF-8 text")
        return text, real

    def file(self, path: str, what: str, *, constraints: bool = False, depth: int = 0) -> None:
        text, real = self.read_file(path, what, depth)
        base = os.path.dirname(real)
        for n, line in _logical_lines(text):
            self.line(line, base, f"{what} line {n}", constraints=constraints, depth=depth)

    def add(self, build: str, display: str, constraints: bool, where: str) -> None:
        lines, shown = ((self.out.constraints, self.out.display_constraints) if constraints
                        else (self.out.lines, self.out.display_lines))
        lines.append(build)
        shown.append(display)
        if len(self.out.lines) + len(self.out.constraints) > MAX_LINES:
            self.fail(where, f"over {MAX_LINES} requirement lines (the limit)")

    def spec_list(self, entries: list[str], base: str, *, constraints: bool = False) -> None:
        """A spec list (``requirements``, ``constraints``): bounded, one line an entry, comments
        dropped, each line checked as a file's line is; ``[i]`` names the entry."""
        if len(entries) > MAX_LIST_ITEMS:
            self.fail(self.field, f"has {len(entries)} entries; the limit is {MAX_LIST_ITEMS}")
        for i, entry in enumerate(entries):
            if "\n" in entry or "\r" in entry:
                self.fail(f"{self.field}[{i}]", "an entry is one line")
            line = re.sub(r"(^|\s+)#.*$", "", entry).strip()
            if line:
                self.line(line, base, f"{self.field}[{i}]", constraints=constraints)

    def line(self, line: str, base: str, where: str, *, constraints: bool = False, depth: int = 0) -> None:
        if len(line) > MAX_LINE_CHARS:
            self.fail(where, f"the line is over {MAX_LINE_CHARS} characters")
        if any(ord(c) < 32 and c != "\t" for c in line):
            self.fail(where, "contains a control character")
        if "${" in line or re.search(r"\$[A-Za-z_]", line):
            self.fail(where, "environment variables ($VAR, ${VAR}) are not accepted: pip and uv would expand "
                             "them from the server's environment")
        try:
            tokens = shlex.split(line, posix=True)
        except ValueError as e:
            self.fail(where, f"cannot be split into words: {e}")
        if not tokens:
            return
        if tokens[0].startswith("-"):
            self.options(tokens, base, where, constraints=constraints, depth=depth)
        else:
            self.requirement(line, base, where, constraints=constraints)

    def option_name(self, token: str, where: str) -> tuple[str, str | None]:
        """(canonical option, attached value) of a token; abbreviations refused."""
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            attached = value if eq else None
            if name in ALLOWED_OPTIONS or name in PER_REQUIREMENT_OPTIONS:
                return name, attached
            if name in REFUSED_OPTIONS:
                self.fail(where, f"{name} is not accepted: {REFUSED_OPTIONS[name]}")
            full = [o for o in _LONG_OPTIONS if o.startswith(name)] if len(name) > 2 else []
            if full:
                self.fail(where, f"{name} abbreviates {' or '.join(full)}: abbreviated options are not accepted "
                                 "(pip would take it as that option); write the option in full"
                          + (f"; {full[0]} is not accepted: {REFUSED_OPTIONS[full[0]]}"
                             if len(full) == 1 and full[0] in REFUSED_OPTIONS else ""))
            self.fail(where, f"{name} is not an accepted option (accepted: "
                             f"{', '.join(o for o in ALLOWED_OPTIONS if o.startswith('--'))})")
        short, attached = token[:2], (token[2:] or None)
        if short in ALLOWED_OPTIONS:
            if attached is not None and attached.startswith("="):
                attached = attached[1:]
            if not ALLOWED_OPTIONS[short] and attached is not None:
                self.fail(where, f"{token} is not an accepted option")
            return short, attached
        self.fail(where, f"{token[:2]} is not an accepted option (accepted: -i, -f, -r, -c, -e and the long "
                         "options " + ", ".join(o for o in ALLOWED_OPTIONS if o.startswith("--")) + ")")
        raise AssertionError

    def options(self, tokens: list[str], base: str, where: str, *, constraints: bool, depth: int) -> None:
        i = 0
        while i < len(tokens):
            token = tokens[i]
            if not token.startswith("-"):
                self.fail(where, f"{token!r} follows the options; give a requirement on a line of its own")
            name, value = self.option_name(token, where)
            if name in PER_REQUIREMENT_OPTIONS:
                self.fail(where, f"{name} belongs after a requirement on the same line")
            takes = ALLOWED_OPTIONS[name]
            if takes and value is None:
                i += 1
                if i >= len(tokens):
                    self.fail(where, f"{name} needs a value")
                value = tokens[i]
            i += 1
            long = {"-i": "--index-url", "-f": "--find-links", "-r": "--requirement", "-c": "--constraint",
                    "-e": "--editable"}.get(name, name)
            if constraints and long not in ("--constraint",):
                self.fail(where, f"{long} is not accepted in a constraints file (constraints are requirement "
                                 "specifiers)")
            if long in ("--index-url", "--extra-index-url"):
                assert value is not None  # these options take a value (ALLOWED_OPTIONS): read above
                m = _URL.match(value or "")
                if not m or m.group(1).lower() not in ("http", "https"):
                    self.fail(where, f"{long} needs an http or https URL")
                build, display = self.redact_url(value, where)
                self.add(f"{long} {build}", f"{long} {display}", False, where)
            elif long == "--find-links":
                assert value is not None  # takes a value (ALLOWED_OPTIONS): read above
                build, display = self.url_or_path(value, base, where, long)
                self.add(f"{long} {build}", f"{long} {display}", False, where)
            elif long == "--requirement":
                assert value is not None  # takes a value (ALLOWED_OPTIONS): read above
                self.file(self.local_file(value, base, where, long), f"{where}: -r {value}", depth=depth + 1)
            elif long == "--constraint":
                assert value is not None  # takes a value (ALLOWED_OPTIONS): read above
                self.file(self.local_file(value, base, where, long), f"{where}: -c {value}", constraints=True,
                          depth=depth + 1)
            elif long == "--editable":
                assert value is not None  # takes a value (ALLOWED_OPTIONS): read above
                if _URL.match(value) and not value.lower().startswith("file:"):
                    self.fail(where, "-e takes a local path inside the server root (for a remote package, "
                                     "give its URL without -e)")
                path, extras = _split_extras(value)
                full = self.local(path, base, where, "-e")
                # a regular install of the path: the cached environment must not follow later edits
                self.add(f"{full}{extras}", f"{full}{extras}", False, where)
            elif long in ("--only-binary", "--no-binary"):
                if not re.match(r"^(:all:|:none:|[A-Za-z0-9._,-]+)$", value or ""):
                    self.fail(where, f"{long} takes :all:, :none: or package names")
                self.add(f"{long} {value}", f"{long} {value}", False, where)
            else:
                self.add(long, long, False, where)

    def local_file(self, value: str, base: str, where: str, what: str) -> str:
        if _URL.match(value) and not value.lower().startswith("file:"):
            self.fail(where, f"{what} takes a file inside the server root, not a URL")
        if value.lower().startswith("file:"):
            value = re.sub(r"^file:(//(localhost)?)?", "", value, flags=re.I)
        full = os.path.realpath(os.path.join(base, value))
        if value.startswith("~") or not _inside(full, self.root):
            self.fail(where, f"{what} {value!r} is outside the server root (only files inside it are accepted)")
        return full

    def requirement(self, line: str, base: str, where: str, *, constraints: bool) -> None:
        # pip: the requirement ends at the first word that starts with '-' (its options follow)
        words = line.split()
        cut = next((i for i, w in enumerate(words) if w.startswith("-") and i > 0), len(words))
        req, opts = " ".join(words[:cut]), words[cut:]
        extra_opts = []
        j = 0
        while j < len(opts):
            name, value = self.option_name(opts[j], where)
            if name not in PER_REQUIREMENT_OPTIONS:
                self.fail(where, f"{name} cannot follow a requirement (accepted there: --hash)")
            if value is None:
                j += 1
                if j >= len(opts):
                    self.fail(where, f"{name} needs a value")
                value = opts[j]
            if not re.match(r"^[a-z0-9]+:[0-9a-fA-F]+$", value):
                self.fail(where, "--hash takes <algorithm>:<hex digest>")
            extra_opts.append(f"{name}={value}")
            j += 1
        suffix = "".join(f" {o}" for o in extra_opts)
        target, _, marker = req.partition(";")
        marker = f" ;{marker}" if _ else ""
        target = target.strip()
        if " @ " in target or re.match(r"^[A-Za-z0-9._-]+(\[[^\]]*\])?\s*@\s*\S", target):
            name, _, url = target.partition("@")
            name, url = name.strip(), url.strip()
            if not _NAME.fullmatch(name):
                self.fail(where, f"{name!r} is not a package name")
            build, display = self.requirement_url(url, base, where)
            self.add(f"{name} @ {build}{marker}{suffix}", f"{name} @ {display}{marker}{suffix}", constraints, where)
            return
        if _URL.match(target):
            build, display = self.requirement_url(target, base, where)
            self.add(f"{build}{marker}{suffix}", f"{display}{marker}{suffix}", constraints, where)
            return
        path, extras = _split_extras(target)
        if path.startswith((".", "/", "~")) or "/" in path or path.lower().endswith(_ARCHIVE):
            if constraints:
                self.fail(where, "a constraints file takes requirement specifiers, not paths")
            full = self.local(path, base, where, "the local path")
            self.add(f"{full}{extras}{marker}{suffix}", f"{full}{extras}{marker}{suffix}", constraints, where)
            return
        m = _NAME.match(target)
        if not m or not _SPEC_REST.match(target[m.end():]):
            self.fail(where, f"{target!r} is not a requirement specifier (name[extras] version ; markers), "
                             "an http(s) URL or a path inside the server root")
        if constraints:  # read by the standard parser now, not first by the installer at build time
            from packaging.requirements import InvalidRequirement
            from packaging.requirements import Requirement as Pep508

            try:
                Pep508(req.strip())
            except InvalidRequirement as e:
                self.fail(where, f"{req.strip()!r} is not a requirement specifier: "
                                 f"{str(e).splitlines()[0] if str(e) else 'invalid'}")
        self.add(f"{req.strip()}{suffix}", f"{req.strip()}{suffix}", constraints, where)

    def requirement_url(self, url: str, base: str, where: str) -> tuple[str, str]:
        m = _URL.match(url)
        scheme = m.group(1).lower() if m else ""
        if scheme == "file" or not m:
            full = self.local(url, base, where, "the local path")
            return "file://" + full, "file://" + full
        if scheme not in REMOTE_SCHEMES:
            self.fail(where, f"the {scheme} URL scheme is not accepted (accepted: {', '.join(REMOTE_SCHEMES)}, and "
                             "file:// or paths inside the server root)")
        return self.redact_url(url, where)


def _split_extras(value: str) -> tuple[str, str]:
    m = re.match(r"^(.*?)(\[[A-Za-z0-9._,\s-]*\])?$", value)
    assert m
    return m.group(1), m.group(2) or ""


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """pip's reading: comments dropped (a '#' at the start or after
    whitespace), backslash-continued lines joined; numbered by first line."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s+)#.*$", "", raw)
        if not pending:
            start = n
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        line, pending = (pending + line).strip(), ""
        if line:
            out.append((start, line))
    if pending.strip():
        out.append((start, pending.strip()))
    return out


def collect(spec: dict[str, Any], root: str, notebook_real: str, *, system_packages: bool = False) -> Requirements:
    """The job's requirements from the source its spec names, checked
    (raises :class:`RequirementsError`), with the spec's own constraint lines
    (``podConfig.buildConfig.constraints``) after any the source has.
    ``notebook_real``: the notebook's resolved path (inside ``root``).
    ``system_packages``: the backend installs a discovered environment's apt.txt."""
    out = _collect_source(spec, root, notebook_real, system_packages)
    entries = ((spec.get("podConfig") or {}).get("buildConfig") or {}).get("constraints") or []
    if entries:
        c = _Collector(root, CONSTRAINTS_FIELD, out.origin)
        c.out = out
        before = len(out.constraints)
        c.spec_list(entries, os.path.dirname(notebook_real), constraints=True)
        out.spec_constraints = len(out.constraints) - before
        if out.spec_constraints:
            out.origin = (f"{out.origin}; {out.spec_constraints} constraint"
                          f"{'s' if out.spec_constraints != 1 else ''} ({CONSTRAINTS_FIELD})")
    return out


def _collect_source(spec: dict[str, Any], root: str, notebook_real: str, system_packages: bool = False
                    ) -> Requirements:
    """The requirements of the source the spec names (the list, the file, or what
    the repository declares), checked."""
    bc = (spec.get("podConfig") or {}).get("buildConfig") or {}
    nb_dir = os.path.dirname(notebook_real)
    rel_nb_dir = os.path.dirname(spec["notebook"]["path"].strip())
    if bc.get("requirements"):
        field_name = "spec.podConfig.buildConfig.requirements"
        c = _Collector(root, field_name, field_name)
        c.spec_list(bc["requirements"], nb_dir)
        return c.out
    field_name = "spec.podConfig.buildConfig.requirementsFile"
    if bc.get("requirementsFile"):
        rel = bc["requirementsFile"].strip()
        if "\x00" in rel or os.path.isabs(rel) or rel.startswith("~"):
            raise RequirementsError(field_name, f"{field_name}: {rel!r} must be a path relative to the "
                                                "notebook's folder", 400)
        # relative to the notebook's folder as the user names it (its API path)
        path = os.path.join(os.path.realpath(root), rel_nb_dir, rel)
        what = f"{field_name} {rel!r}"
        c = _Collector(root, field_name, f"{rel}")
        c.file(path, what)
    else:
        return _discovered(root, rel_nb_dir, _extras(bc), system_packages=system_packages)
    c.out.source_path = path
    return c.out


CONSTRAINTS_FIELD = "spec.podConfig.buildConfig.constraints"
_EXTRA_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
EXTRAS_FIELD = "spec.podConfig.buildConfig.extras"


def _extras(bc: Mapping[str, Any]) -> list[str]:
    """``buildConfig.extras``, each a valid extra name (PEP 685), in order, once."""
    out: list[str] = []
    for i, name in enumerate(bc.get("extras") or []):
        name = str(name).strip()
        if not _EXTRA_NAME.match(name):
            raise RequirementsError(f"{EXTRAS_FIELD}[{i}]", f"{EXTRAS_FIELD}[{i}]: {name!r} is not an extra's name "
                                                            "(letters, digits, '.', '_', '-')")
        if name not in out:
            out.append(name)
    return out


def _discovered(root: str, rel_nb_dir: str, extras: list[str] | None = None, *,
                system_packages: bool = False) -> Requirements:
    """Neither the spec list nor requirementsFile: the file the repository
    declares its environment in (environment_files.discover, repo2docker's
    order), read and checked line by line like a requirements file; ``extras``
    (``buildConfig.extras``) of the project, when the environment is the project."""
    import jupyter_nbvalidation.environment.files as ef

    field_name = ef.FIELD
    extras = extras or []
    found = ef.discover(root, rel_nb_dir)
    if found.kind is None:
        if extras:
            raise RequirementsError(EXTRAS_FIELD, f"{EXTRAS_FIELD}: extras apply to the repository's own project, "
                                                  f"and none was found ({ef.nothing_found(found)})")
        return Requirements(origin=ef.nothing_found(found))
    python_requires = ef.python_requirement(found, root)
    path, where, base = found.path, found.where, os.path.dirname(found.path)
    if found.kind == "requirements.txt":
        if extras:
            _no_project_for_extras(where)
        origin = ("requirements.txt beside the notebook" if found.place == ef.PLACE_BESIDE else where)
        c = _Collector(root, field_name, origin)
        c.file(path, where)
    elif found.kind in ("pyproject.toml", "setup.py"):
        name = ef.project_name(path, root)
        rel_folder = os.path.relpath(os.path.realpath(base), os.path.realpath(root)).replace(os.sep, "/")
        what = f"project {name}" if name else "the project"
        with_extras = f" with extras {', '.join(extras)}" if extras else ""
        origin = f"{found.kind} {found.place} ({what}{with_extras}, installed from {rel_folder})"
        c = _Collector(root, field_name, ef.bounded(origin))
        _install_project(c, base, where, extras)
        c.out.project_file = found.shown
    else:
        if found.kind == "uv.lock":  # `uv export` runs here (collect runs off the event loop)
            got = ef.read_uv_lock(path, root, where, extras)
        else:
            reader = {"environment.yml": ef.read_environment_yml, "environment.yaml": ef.read_environment_yml,
                      "pylock.toml": ef.read_pylock, "Pipfile.lock": ef.read_pipfile_lock,
                      "Pipfile": ef.read_pipfile}[found.kind]
            got = reader(path, root, where)
        if extras and not got.install_project:
            _no_project_for_extras(where)
        if found.place == ef.PLACE_BINDER:
            origin = f"{found.shown} ({ef.PLACE_BINDER}: {got.detail})"
        else:
            origin = f"{found.kind} {found.place} ({found.shown}: {got.detail})"
        c = _Collector(root, field_name, ef.bounded(mask_urls(origin)))
        c.seen_files.add(os.path.realpath(path))
        for i, (n, line) in enumerate(got.lines):
            label = got.labels[i] if got.labels else f"entry {i + 1}" if not n else f"line {n}"
            entry = re.sub(r"(^|\s+)#.*$", "", line).strip()
            if "\n" in entry or "\r" in entry:
                c.fail(f"{where} {label}", "an entry is one line")
            if entry:
                c.line(entry, base, f"{where} {label}")
        if got.install_project:  # uv.lock of a packaged project: the project too, as pyproject.toml's is
            _install_project(c, base, where, extras)
            if extras:
                c.out.origin = ef.bounded(f"{c.out.origin}, with extras {', '.join(extras)}")
            c.out.project_file = ef._rel(os.path.join(base, "pyproject.toml"), os.path.realpath(root))
        if got.supported is not None:
            c.out.supported_environments = (got.supported, f"{found.shown}'s "
                                            + ("environments" if found.kind == "pylock.toml" else "supported-markers"))
    apt = ef.read_apt_txt(base, root) if system_packages else None
    if apt is not None and apt[0]:
        c.out.system_packages = apt[0]
        n = len(apt[0])
        c.out.origin = ef.bounded(f"{c.out.origin}; {n} system package{'s' if n != 1 else ''} from {apt[1]} "
                                  f"({', '.join(apt[0])})")
    skipped = ef.not_run_here(base, system_packages=system_packages)
    if skipped:
        c.out.origin = ef.bounded(f"{c.out.origin}; not run here: {', '.join(skipped)}")
    c.out.source_path = path
    c.out.python_requires = python_requires
    return c.out


def _no_project_for_extras(where: str) -> NoReturn:
    raise RequirementsError(EXTRAS_FIELD, f"{EXTRAS_FIELD}: extras apply to the repository's own project; "
                                          f"the environment here is {where}, which installs no project")


def _install_project(c: _Collector, base: str, where: str, extras: list[str] | None = None) -> None:
    """The project in ``base`` installed (not editable) from its folder, with ``extras``: a local path.
    An extra the project does not declare is refused now (the installer would only warn, and the
    notebook be validated without what was asked for)."""
    import jupyter_nbvalidation.environment.files as ef
    from jupyter_nbvalidation.verdict.environment_record import normalize

    if extras:
        known = ef.declared_extras(base, c.root)
        unknown = [e for e in extras if known is not None and normalize(e) not in known]
        if unknown:
            raise RequirementsError(EXTRAS_FIELD, f"{EXTRAS_FIELD}: {where} declares no extra "
                                                  f"{', '.join(repr(e) for e in unknown)} (it declares: "
                                                  f"{', '.join(known or []) or 'none'})")
    try:
        c.requirement("." + (f"[{','.join(extras)}]" if extras else ""), base, where, constraints=False)
    except RequirementsError as e:  # e.g. a tree over the bounds of the cache key's hash
        raise RequirementsError(e.field, f"{e.message}; to validate without installing the project, declare "
                                         "the notebook's dependencies in a requirements.txt beside it or in "
                                         "spec.podConfig.buildConfig.requirementsFile / requirements",
                                e.status) from None


# --- the build side -----------------------------------------------------------------

def source_annotation(reqs: Requirements, spec: dict[str, Any], root: str) -> str | None:
    """What a later process needs to read the credentials again from the
    source (a file; never for the spec list): the root and the job's spec
    paths. None when there is nothing to recover."""
    if not reqs.secrets or reqs.source_path is None:
        return None
    return json.dumps({"root": os.path.realpath(root)}, separators=(",", ":"))


_HELD: dict[str, list[str]] = {}  # job name -> credential values, this process only


def hold(job_name: str, secrets: list[str]) -> None:
    if secrets:
        _HELD[job_name] = list(secrets)


def release(job_name: str) -> None:
    _HELD.pop(job_name, None)


def from_snapshot(requirements_txt: str | None, constraints_txt: str | None, origin: str) -> Requirements:
    """The stored (display) snapshot, read back: placeholders where ``***``
    credentials are, the local paths it names (already checked at submit)."""
    out = Requirements(origin=origin)
    counter = [0]

    def rebuild(line: str) -> str:
        def sub(m: re.Match[str]) -> str:
            n = counter[0]
            counter[0] += 1
            info = m.group(2)
            return m.group(1) + info.replace(MASK, "${" + f"{SECRET_ENV_PREFIX}{n}" + "}") + "@"
        return re.sub(r"([A-Za-z][A-Za-z0-9+.-]*://)([^/?#@\s]*\*\*\*[^/?#@\s]*)@", sub, line)

    for text, lines, shown in ((requirements_txt, out.lines, out.display_lines),
                               (constraints_txt, out.constraints, out.display_constraints)):
        for _, line in _logical_lines(text or ""):
            shown.append(line)
            lines.append(rebuild(line))
            for word in line.split():
                w = word.removeprefix("file://")
                if w.startswith("/"):
                    out.local_paths.append(_split_extras(w)[0])
    out.secrets = [""] * counter[0]
    return out


def for_build(job: Mapping[str, Any], reqs: Requirements) -> Requirements:
    """``reqs`` (from the snapshot) with its credential values, for the
    build: from this process's memory, else read again from the source file
    when its display text is still exactly the snapshot's. Raises
    ValueError when they cannot be had (the message says why)."""
    needed = len(reqs.secrets)
    if not needed:
        return reqs
    name = job["metadata"]["name"]
    held = _HELD.get(name)
    if held is not None and len(held) == needed:
        reqs.secrets = list(held)
        return reqs
    ann = (job["metadata"].get("annotations") or {}).get(SOURCE_ANNOTATION)
    if ann:
        try:
            root = json.loads(ann)["root"]
            nb_real = os.path.join(root, job["spec"]["notebook"]["path"])
            again = collect(job["spec"], root, os.path.realpath(nb_real))
        except (ValueError, KeyError, TypeError, OSError, RequirementsError):
            again = None
        if again is not None and again.display_lines == reqs.display_lines and \
                again.display_constraints == reqs.display_constraints and len(again.secrets) == needed:
            reqs.secrets = again.secrets
            return reqs
        raise ValueError(f"The requirements ({reqs.origin}) carry index credentials, which are never stored; "
                         "the source file changed since submit (or cannot be read), so they cannot be taken "
                         "from it again. Submit the job again.")
    raise ValueError("The requirements (spec.podConfig.buildConfig.requirements) carry index credentials, which "
                     "are never stored, and only the process that accepted the job held them (it stopped, or "
                     "another server builds this job). Put them in a requirements file (read again at build "
                     "time) or submit the job again.")


def of_job(job: dict[str, Any], snapshot: str | None, constraints: str | None) -> Requirements:
    """A job's requirements from its stored snapshot (checked and flattened
    at submit, credentials shown as ***; see requirements.py). A job stored
    before the snapshot held the spec list falls back to the list, and so does
    one created around the server (kubectl) for its constraints: never ignored."""
    bc = job["spec"].get("podConfig", {}).get("buildConfig", {})
    stored = ((job.get("metadata") or {}).get("annotations") or {}).get(ORIGIN_ANNOTATION)
    if constraints is None and bc.get("constraints"):
        constraints = "".join(f"{c}\n" for c in bc["constraints"])
    if bc.get("requirements"):
        origin = "spec.podConfig.buildConfig.requirements"
        if snapshot is None:
            snapshot = "".join(f"{r}\n" for r in bc["requirements"])
    elif snapshot is not None:
        # a job stored before the origin was: today's text for the two sources it could have had
        origin = stored or bc.get("requirementsFile") or "requirements.txt beside the notebook"
    elif constraints:  # constraints alone: over the kernel's own install
        origin = stored or CONSTRAINTS_FIELD
    else:
        return Requirements(origin=stored or "no requirements declared")
    return from_snapshot(snapshot, constraints, origin)
