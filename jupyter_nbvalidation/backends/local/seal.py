"""The seal of a built environment: a content manifest written when it is built, and
its check before the environment is handed to a run (issue 40: a shared environment
must not carry one notebook's writes into another's verdict).

The manifest lists every entry of the environment, ``__pycache__`` included: its
relative path, kind (file, link, folder, other), mode, and for a file its size and
SHA-256 (for a link its target), plus, for speed, the file's inode, ``ctime_ns`` and
``mtime_ns``. It is kept *beside* the environment, in ``envs/.seals/`` of the data
dir, which the kernel's sandbox hides (never inside the environment, which a kernel
may be able to write), and named by the environment's key and its folder's inode:
the folder is published by one rename, which keeps its inode, so the manifest is
written before the environment appears, and two builds of one key racing each have
their own.

:func:`verify` walks the environment again: every entry present or absent as
listed, of the same kind and mode, a link to the same target, and a file with the
same content. A file whose (inode, size, ``ctime_ns``, ``mtime_ns``, mode) all
match the manifest is not hashed again; any other file is. Why that skip is safe:
the kernel sets a file's ``ctime`` to the current time on *every* change of its
data or its metadata (a write, a truncate, ``chmod``, ``utime``, a new link), and no
system call sets it to a chosen value. A notebook that rewrites ``six.py`` keeping
its size, then puts its ``mtime`` back with ``os.utime``, still moves its
``ctime`` (``utime`` is itself a change). A file removed and made again is a new
inode with a new ``ctime``, even where the filesystem reuses the number. Only
stepping the clock back (``CAP_SYS_TIME``, root of the machine), or writing the
block device under the filesystem (root again), could forge a matching ``ctime``;
an environment copied or restored elsewhere (new inodes) is simply hashed whole.

The environment's files must be its own: a file that shares its inode with another
path (a hard link: uv's default is to hard-link from its package cache, and an edit
of one would then change the cache and every environment linked to it) is refused
when the seal is taken (:class:`SealError`), so a build can never publish one."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

SEALS = ".seals"  # envs/.seals/<key>-<inode>.json, and .record.json: the environment record
VERSION = 1
HASH_CHUNK = 2**20
EXAMPLES = 3  # paths a description names
# written into a built environment after its seal, by this backend only: its last use (LRU);
# no interpreter reads it, and it must stay a plain file (never a link a touch would follow)
UNSEALED_TOP = frozenset({".last-use"})


# what _env_changes (environments.py) reports for an environment without a seal: built by a
# version before seals, or its manifest gone; it cannot say it is as built, so it counts as changed
NO_SEAL = "(no seal)"


class SealError(Exception):
    """The seal could not be taken (the message says why)."""


def seal_path(envs: Path, key: str, ino: int, suffix: str = ".json") -> Path:
    return envs / SEALS / f"{key}-{ino}{suffix}"


def seal_of(envs: Path, key: str, suffix: str = ".json") -> Path | None:
    """The manifest (or, with ``suffix``, the record) of the environment now at ``envs/<key>``."""
    try:
        ino = os.lstat(envs / key).st_ino
    except OSError:
        return None
    return seal_path(envs, key, ino, suffix)


def _digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "f"
    if stat.S_ISLNK(mode):
        return "l"
    if stat.S_ISDIR(mode):
        return "d"
    return "o"


def _walk(root: str) -> Iterator[tuple[str, str, os.stat_result]]:
    """(relative path, absolute path, lstat) of every entry under ``root``, links not
    followed, the backend's own unsealed top-level files left out; each folder's
    entries in name order, a folder's before its content."""
    stack = [("", root)]
    while stack:
        prefix, folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except FileNotFoundError:
            continue
        below = []
        for entry in entries:
            rel = prefix + entry.name
            if not prefix and rel in UNSEALED_TOP:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            yield rel, entry.path, st
            if stat.S_ISDIR(st.st_mode):
                below.append((rel + "/", entry.path))
        stack.extend(reversed(below))


def take(root: str | Path) -> dict[str, Any]:
    """The manifest of the environment at ``root`` (a build's folder, before it is
    published). Raises SealError for a file that shares its inode (hard links)."""
    root = os.fspath(root)
    files: dict[str, list[Any]] = {}
    for rel, full, st in _walk(root):
        kind = _kind(st.st_mode)
        if kind == "f":
            if st.st_nlink > 1:
                raise SealError(f"{rel} shares its inode with {st.st_nlink - 1} other path(s) (a hard link, "
                                "e.g. into the installer's package cache): an edit of one would change the "
                                "others, so this environment cannot be sealed")
            files[rel] = [kind, st.st_mode, st.st_size, _digest(full), st.st_ino, st.st_ctime_ns, st.st_mtime_ns]
        elif kind == "l":
            files[rel] = [kind, st.st_mode, 0, os.readlink(full), 0, 0, 0]
        else:
            files[rel] = [kind, st.st_mode, 0, "", 0, 0, 0]
    return {"version": VERSION, "takenAt": time.time(), "ino": os.lstat(root).st_ino, "files": files}


def write(envs: Path, key: str, root: Path, manifest: dict[str, Any], record: dict[str, Any] | None) -> Path:
    """Keep ``manifest`` (and the environment ``record``) for the build folder ``root``,
    to be published as ``envs/<key>``: atomically, before the rename that publishes it."""
    (envs / SEALS).mkdir(parents=True, exist_ok=True)
    target = seal_path(envs, key, manifest["ino"])
    docs = [(target, manifest)] + ([(seal_path(envs, key, manifest["ino"], ".record.json"), record)] if record else [])
    for path, doc in docs:
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_text(json.dumps(doc, separators=(",", ":")))
        os.replace(tmp, path)
    return target


def remove(envs: Path, key: str, ino: int) -> None:
    for suffix in (".json", ".record.json"):
        with contextlib.suppress(OSError):
            seal_path(envs, key, ino, suffix).unlink()


_loaded: dict[str, tuple[tuple[int, int, int, int], dict[str, Any]]] = {}  # a few: one per environment in use


def load(path: Path) -> dict[str, Any] | None:
    """The manifest at ``path`` (None when it is missing or unreadable), parsed once
    per version of the file (its inode, size, ctime and mtime)."""
    try:
        with open(path, encoding="utf-8") as f:
            st = os.fstat(f.fileno())
            stamp = (st.st_ino, st.st_size, st.st_ctime_ns, st.st_mtime_ns)
            memo = _loaded.get(str(path))
            if memo is not None and memo[0] == stamp:
                return memo[1]
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    if not (isinstance(doc, dict) and doc.get("version") == VERSION and isinstance(doc.get("files"), dict)):
        return None
    if len(_loaded) >= 16:
        _loaded.clear()
    _loaded[str(path)] = (stamp, doc)
    return doc


def verify(root: str | Path, manifest: dict[str, Any]) -> list[str]:
    """The paths of the environment at ``root`` that are not as ``manifest`` lists
    them (added, removed, or of another kind, mode, target or content); empty when
    it is as built. See the module's docstring for the files not hashed again."""
    root = os.fspath(root)
    files: dict[str, list[Any]] = manifest["files"]
    changed: list[str] = []
    seen: set[str] = set()
    for rel, full, st in _walk(root):
        want = files.get(rel)
        if want is None:
            changed.append(rel)
            continue
        seen.add(rel)
        kind, mode, size, content, ino, ctime_ns, mtime_ns = want
        if _kind(st.st_mode) != kind or st.st_mode != mode:
            changed.append(rel)
        elif kind == "l":
            with contextlib.suppress(OSError):
                if os.readlink(full) == content:
                    continue
            changed.append(rel)
        elif kind == "f":
            if (st.st_ino, st.st_size, st.st_ctime_ns, st.st_mtime_ns) == (ino, size, ctime_ns, mtime_ns):
                continue  # untouched since the seal: ctime cannot be set back (module docstring)
            try:
                same = st.st_size == size and _digest(full) == content
            except OSError:
                same = False
            if not same:
                changed.append(rel)
    changed += sorted(set(files) - seen)
    for name in UNSEALED_TOP:  # present or not; never anything but a plain file
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISREG(os.lstat(os.path.join(root, name)).st_mode):
                changed.append(name)
    return changed


def describe(changed: list[str]) -> str:
    """``"2 files, e.g. six.py, __pycache__/six.cpython-311.pyc"``: paths shown from
    site-packages down where they are in it."""
    def short(rel: str) -> str:
        marker = "/site-packages/"
        return rel.split(marker, 1)[1] if marker in rel else rel

    if changed == [NO_SEAL]:
        return "it has no seal to check it against: built before environments were sealed, or its seal is gone"
    n = len(changed)
    shown = ", ".join(short(p) for p in changed[:EXAMPLES])
    return f"{n} file{'s' if n != 1 else ''}, e.g. {shown}" if n > EXAMPLES else \
        f"{n} file{'s' if n != 1 else ''}: {shown}"


def sweep(envs: Path, older_than: float = 3600.0) -> list[str]:
    """Seals whose environment is gone (retired, evicted, a build that lost a race or
    died): removed once older than ``older_than`` seconds (a build writes its seal
    just before it publishes its folder, so a young one may belong to a build still
    in flight). Never fails."""
    folder = envs / SEALS
    removed: list[str] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    now = time.time()
    for name in names:
        path = folder / name
        base = name.split(".", 1)[0] if not name.startswith(".") else ""
        key, _, ino = base.rpartition("-")
        try:
            if now - os.lstat(path).st_mtime < older_than:
                continue
            if key and ino.isdigit() and os.lstat(envs / key).st_ino == int(ino):
                continue
        except FileNotFoundError:
            pass
        except OSError:
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(name)
    return removed
