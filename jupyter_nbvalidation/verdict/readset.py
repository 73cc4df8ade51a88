"""The read-set: what a kernel read, as the verdict cache re-checks it (docs/cli.md, "Verdict cache").

The runner's audit hook (runner/readset.py) records, in the kernel's process, every path
it opened, listed or executed (and the files of the modules it imported); after the run
the runner turns that record into a read-set with :func:`describe`, and a later lookup
holds it against the files as they are then with :func:`first_change`. Standard library
only: the runner and the service share it.

A path the kernel used is placed (:func:`describe`):

- under the working copy of the root (``tree``, backends/workcopy.py) or under the root
  itself: by its path relative to the root, a file by its content and mode (or absent), a
  folder it listed by its names (or absent): the root's file, not the copy's, so that what
  the kernel wrote in its copy is not taken for an input;
- under the kernel's environment (its prefixes and the ``sys.path`` it started with, which
  hold the editable installs' sources): by ``(size, mtime_ns, inode)``, so that a
  dependency whose source is edited under the same version is seen;
- under scratch (the kernel's own folders: its ``HOME``, ``TMPDIR``; in the sandbox its
  ``/tmp`` and ``/var/tmp``, fresh for each run) or the system (``/usr``, ``/etc``, ``/proc``,
  ``/dev``, ...): not recorded (without the sandbox, ``/tmp`` is not scratch: it is shared);
- anywhere else: the verdict is not cacheable (``uncacheable`` says which path).

An executed program is placed the same way (its file's mode counts: ``chmod -x``), and so
is every argument of a command that names an existing path (``bash tool.sh``): what a child
process reads in turn is not seen."""

from __future__ import annotations

import hashlib
import os
import shlex
import stat
from typing import Any, Iterable, Mapping

VERSION = 1
SYSTEM = ("/usr", "/etc", "/proc", "/sys", "/dev", "/run", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin",
          "/var/lib", "/var/cache", "/snap")
MAX_FILES = 50_000  # of the root's, then of the environment's: over it, the verdict is not cacheable
MAX_BYTES = 1 << 30
ABSENT = "-"
SHOWN = 3  # outside paths named in the sentence


def _under(path: str, folders: Iterable[str]) -> str | None:
    for f in folders:
        if path == f or path.startswith(f.rstrip("/") + "/"):
            return f
    return None


def file_state(path: str) -> str:
    """A file by content and mode (``sha256 mode``), a folder by mode, or ABSENT."""
    try:
        st = os.stat(path)
        mode = f"{stat.S_IMODE(st.st_mode):o}"
        if stat.S_ISDIR(st.st_mode):
            return f"dir {mode}"
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        return f"{h.hexdigest()} {mode}"
    except OSError:
        return ABSENT


def listing_state(path: str) -> str:
    """A folder by its sorted names, or ABSENT."""
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return ABSENT
    return hashlib.sha256("\0".join(names).encode("utf-8", "surrogateescape")).hexdigest()


def stat_state(path: str) -> list[int] | None:
    """A file of the environment by ``[size, mtime_ns, inode]``: an edit changes its size or
    time, a reinstall (even of the same version) makes a new file. Not its ctime: uv links the
    files of every environment it builds from its cache (hard links), and each new link changes
    the ctime of the same file in every other environment."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _tokens(strings: Iterable[str]) -> list[str]:
    """A command's words: each string, and a string with blanks split as a shell would."""
    out = []
    for s in strings:
        out.append(s)
        if any(c.isspace() for c in s):
            try:
                out += shlex.split(s)
            except ValueError:
                out += s.split()
    return out


class _Placer:
    def __init__(self, root: str, tree: str | None, cwd: str, environment: list[str], scratch: list[str],
                 shown: list[str]) -> None:
        self.root, self.tree, self.cwd, self.shown = root, tree, cwd, shown
        self.env = sorted({os.path.normpath(p) for p in environment if os.path.isabs(p)} - {"/"}, key=len,
                          reverse=True)
        self.scratch = scratch

    def place(self, path: str) -> tuple[str, str]:
        """("root", relative path) | ("env", path) | ("ignore", "") | ("outside", path)."""
        if self.tree is not None and _under(path, [self.tree]):
            return "root", os.path.relpath(path, self.tree)
        if _under(path, [self.root]):
            return "root", os.path.relpath(path, self.root)
        if self.tree is None and _under(path, [self.cwd]):
            return "ignore", ""  # the job's own snapshot of its input files: in the key
        if _under(path, self.env):
            return "env", path
        if (_under(path, self.scratch) and not _under(path, self.shown)) or _under(path, SYSTEM):
            return "ignore", ""
        return "outside", path


def describe(raw: Mapping[str, Any] | None, *, root: str, tree: str | None, scratch: list[str],
             shown: list[str] = []) -> dict[str, Any]:  # noqa: B006 (read only)
    """The read-set of a run from the kernel's record (runner/readset.py ``collect``);
    ``scratch``: the kernel's own folders, but for the real paths ``shown`` in them (the
    sandbox binds the root, the environment and the targets of links over its /tmp):
    ``{"version", "root", "files": {rel: state}, "dirs": {rel: state}, "environment": {path:
    [size, mtime_ns, inode]}, "uncacheable": sentence or None}``."""
    root = os.path.normpath(root)
    doc: dict[str, Any] = {"version": VERSION, "root": root, "files": {}, "dirs": {}, "environment": {},
                           "uncacheable": None}
    if not raw or not isinstance(raw.get("reads"), list):
        doc["uncacheable"] = "what the kernel read could not be recorded"
        return doc
    cwd = str(raw.get("cwd") or "/")
    placer = _Placer(root, os.path.normpath(tree) if tree else None, cwd, list(raw.get("environment") or []), scratch,
                     [os.path.normpath(p) for p in shown])
    files: set[str] = set()
    dirs: set[str] = set()
    env: set[str] = set()
    outside: list[str] = []

    def take(kind: str, path: str) -> None:
        where, what = placer.place(path)
        if where == "root":
            (dirs if kind == "d" else files).add(what)
        elif where == "env" and kind == "f":
            env.add(what)
        elif where == "outside" and what not in outside:
            outside.append(what)

    for entry in raw["reads"]:
        if not isinstance(entry, list) or len(entry) < 2 or not all(isinstance(x, str) for x in entry):
            continue
        if entry[0] in ("f", "d"):
            base = entry[2] if len(entry) > 2 else "/"
            take(entry[0], os.path.normpath(os.path.join(base, entry[1])))
        elif entry[0] == "x":  # an executed program: [x, cwd, program, args...]
            for word in _tokens(entry[2:]):
                path = os.path.normpath(os.path.join(entry[1], word))
                where, rel = placer.place(path)
                if word and (os.path.lexists(path) or (where == "root" and os.path.lexists(os.path.join(root, rel)))):
                    take("f", path)  # a word naming no file (a flag, a program found on PATH) is not a path
    for module in raw.get("modules") or []:
        if isinstance(module, str) and os.path.isabs(module):
            take("f", os.path.normpath(module))
    if outside:
        named = ", ".join(outside[:SHOWN]) + (f" and {len(outside) - SHOWN} more" if len(outside) > SHOWN else "")
        doc["uncacheable"] = (f"the kernel read {named}, outside the root {root} and its environment: "
                              "a later run cannot know whether that changed")
        return doc
    if len(files) + len(dirs) > MAX_FILES or len(env) > MAX_FILES:
        doc["uncacheable"] = f"the kernel read over {MAX_FILES} files"
        return doc
    total = 0
    for rel in sorted(files):
        path = os.path.join(root, rel)
        doc["files"][rel] = file_state(path)
        total += (stat_state(path) or [0])[0]
        if total > MAX_BYTES:
            return {**doc, "files": {}, "uncacheable": f"the kernel read over {MAX_BYTES >> 20} MiB under the root"}
    doc["dirs"] = {rel: listing_state(os.path.join(root, rel)) for rel in sorted(dirs)}
    for path in sorted(env):
        st = stat_state(path)
        if st is not None:
            doc["environment"][path] = st
    return doc


def first_change(read_set: Mapping[str, Any], root: str) -> str | None:
    """What no longer holds of ``read_set`` (a sentence), or None when every file, folder
    and environment file it names is as it was. A read-set that says it is not cacheable,
    or of another root or recipe, never holds."""
    if read_set.get("uncacheable"):
        return str(read_set["uncacheable"])
    if read_set.get("version") != VERSION or read_set.get("root") != os.path.normpath(root):
        return "the read-set is of another recipe or root"
    for rel, state in (read_set.get("files") or {}).items():
        if file_state(os.path.join(root, rel)) != state:
            return f"{rel} changed (content, mode or presence)"
    for rel, state in (read_set.get("dirs") or {}).items():
        if listing_state(os.path.join(root, rel)) != state:
            return f"the folder {rel} changed (its names)"
    for path, state in (read_set.get("environment") or {}).items():
        if stat_state(path) != state:
            return f"{path} of the environment changed"
    return None
