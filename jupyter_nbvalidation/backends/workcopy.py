"""The kernel's working folder on the local backend: a fresh copy, per attempt.

A validation never writes the user's files. Each attempt (a first run, a run an engine
starts again after a crash, a retry) gets its own copy inside its run folder:

- without spec.inputFiles, the notebook's folder is copied to
  ``<run>/tree/<the folder's path relative to the server's root>``, and every level
  above it up to the root holds its other entries as symbolic links to the real ones:
  ``../data/x.csv`` from ``notebooks/`` reads the real file (read-through; only the
  notebook's own folder is copied). The copy holds exactly what the verdict key hashes
  (``core/folders.walk_folder``: the same exclusions, links followed while they stay
  in the root, a link cycle once);
- with spec.inputFiles, the job's snapshot of the named files is copied to
  ``<run>/tree``, and nothing else is there.

Files are cloned where the filesystem can (``FICLONE``, then ``copy_file_range``,
which reflinks on btrfs/XFS and copies in the kernel elsewhere), else copied; mode and
times are kept (``shutil.copystat``). Everything here blocks: call it in a thread. The
copy goes with the attempt (``remove``) when the job ends, is cancelled or is run again;
so do the attempt's scratch folders (``make_scratch``), the sandboxed kernel's /tmp and
/var/tmp on disk.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import sys
from pathlib import Path

from jupyter_nbvalidation.core.folders import EXCLUDED_DIRS, walk_folder
from jupyter_nbvalidation.runner.sandbox import SCRATCH_PATHS
from jupyter_nbvalidation.verdict.cache import FolderTooLarge

TREE = "tree"
SCRATCH = "scratch"  # the sandboxed kernel's /tmp and /var/tmp (make_scratch)
# a run on a pre-started kernel (backends/local/pool.py): its tree and scratch are links into
# the slot's folder, which this file names; remove() removes that folder with them
POOLED = "pooled"
# copy_file_range cannot here (another filesystem, an old kernel): copy in user space
_NOT_SUPPORTED = {getattr(errno, n) for n in ("EXDEV", "ENOSYS", "EOPNOTSUPP", "ENOTSUP", "EINVAL", "EBADF", "EPERM")
                  if hasattr(errno, n)}
_FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)


def clone_file(src: str, dst: str) -> None:
    """``dst`` as a copy of ``src`` (created, never overwritten), copy-on-write when
    the filesystem offers it, with its mode and times."""
    with open(src, "rb") as fi, open(dst, "xb") as fo:
        done = False
        try:
            import fcntl  # optional: fcntl (POSIX only; the reflink ioctl is tried where it exists)

            fcntl.ioctl(fo.fileno(), _FICLONE, fi.fileno())
            done = True
        except (ImportError, OSError):
            pass
        if not done and hasattr(os, "copy_file_range"):
            try:
                while os.copy_file_range(fi.fileno(), fo.fileno(), 1 << 30):
                    pass
                done = True
            except OSError as e:
                if e.errno not in _NOT_SUPPORTED:
                    raise  # a real failure (ENOSPC, EIO): not hidden by a second try
                fi.seek(0)
                fo.seek(0)
                fo.truncate()
        if not done:
            shutil.copyfileobj(fi, fo, 1 << 20)
    shutil.copystat(src, dst)


def copy_folder(src: str | Path, dest: str | Path, root: str | Path | None = None,
                skip: frozenset[str] | set[str] = frozenset(), max_files: int | None = None,
                max_bytes: int | None = None) -> tuple[int, int]:
    """Copy what ``walk_folder(src, root, skip)`` gives to ``dest`` (created): files
    cloned, folders made, a folder reached again (a link cycle) a link to its copy, a link
    leaving the root (or leading nowhere) a link to the same real target. (files, bytes);
    FolderTooLarge over ``max_files`` / ``max_bytes`` (what was copied stays: the caller
    removes it)."""
    dest = os.fspath(dest)
    os.makedirs(dest)
    copies = {os.path.realpath(os.fspath(src)): dest}  # a folder's real path -> its copy
    files = total = 0
    for e in walk_folder(src, root, skip):
        target = os.path.join(dest, *e.rel.split("/"))
        if e.kind == "dir":
            os.mkdir(target)
            copies[e.real] = target
        elif e.kind == "file":
            files += 1
            total += e.size
            _check_bounds(files, total, max_files, max_bytes)
            try:
                clone_file(e.path, target)
            except PermissionError:  # unreadable to this user, as to the kernel: not there
                with contextlib.suppress(OSError):
                    os.unlink(target)
        elif e.kind == "again":
            first = copies.get(e.real)
            os.symlink(os.path.relpath(first, os.path.dirname(target)) if first else e.real, target)
        else:  # "link"
            os.symlink(e.real, target)
    return files, total


def _check_bounds(files: int, total: int, max_files: int | None, max_bytes: int | None) -> None:
    """The folder's bounds, counted so far (copy_folder and read_folder alike)."""
    if (max_files is not None and files > max_files) or (max_bytes is not None and total > max_bytes):
        raise FolderTooLarge(files, total)


def read_folder(folder: str | Path, root: str | Path | None = None, skip: frozenset[str] | set[str] = frozenset(),
                max_files: int | None = None, max_bytes: int | None = None) -> tuple[dict[str, bytes], list[str]]:
    """What ``copy_folder`` copies, read into memory, for a backend whose kernel cannot
    read the server's files (the folder travels with the job): ({'/'-separated relative
    path: content} of every file ``walk_folder(folder, root, skip)`` gives, the relative
    paths left out). Left out are what ``copy_folder`` makes a link of (a link leaving
    the root or leading nowhere, a folder reached again) and a file unreadable to this
    user (as for the kernel). The same bounds as the copy: FolderTooLarge over
    ``max_files`` / ``max_bytes``. Blocks: call it in a thread."""
    out: dict[str, bytes] = {}
    left_out: list[str] = []
    files = total = 0
    for e in walk_folder(folder, root, skip):
        if e.kind in ("link", "again"):
            left_out.append(e.rel)
        elif e.kind == "file":
            files += 1
            total += e.size
            _check_bounds(files, total, max_files, max_bytes)
            try:
                with open(e.path, "rb") as f:
                    data = f.read() if max_bytes is None else f.read(max_bytes - (total - e.size) + 1)
            except PermissionError:
                left_out.append(e.rel)
                continue
            total += len(data) - e.size  # it changed since the walk's stat: what was read counts
            _check_bounds(files, total, max_files, max_bytes)
            out[e.rel] = data
    return out, left_out


def _mirror_levels(base: str, root: str, rel: str, skip: frozenset[str] | set[str]) -> str:
    """Under ``base``, the folders from ``root`` down to ``root/rel``'s parent, each with
    the other entries of its real counterpart as links to them; the path the copy of
    ``root/rel`` goes to (not made)."""
    level_real, level = root, base
    os.makedirs(base, exist_ok=True)
    for part in Path(rel).parts:
        for name in sorted(os.listdir(level_real)):
            real = os.path.join(level_real, name)
            if name == part or name in EXCLUDED_DIRS or os.path.realpath(real) in skip:
                continue
            os.symlink(real, os.path.join(level, name))
        level_real, level = os.path.join(level_real, part), os.path.join(level, part)
        if level_real != os.path.join(root, rel):
            os.mkdir(level)
    return level


def _placement(folder: str, root: str | None) -> tuple[str, str]:
    """(root, the folder relative to it) as the copy is placed: a folder outside its
    root (a job without one) alone, at the top."""
    real_root = os.path.normpath(root) if root else None
    if real_root is None or not (folder == real_root or folder.startswith(real_root.rstrip(os.sep) + os.sep)):
        real_root = folder
    return real_root, os.path.relpath(folder, real_root)


def working_path(run_dir: str | Path, *, folder: str | None, root: str | None, snapshot: str | None) -> str:
    """Where ``prepare`` puts the kernel's working folder (no file is touched:
    ``folder`` and ``root`` are real paths, as submit records them)."""
    base = os.path.join(os.fspath(run_dir), TREE)
    if snapshot is not None or folder is None:
        return base
    _root, rel = _placement(os.path.normpath(folder), root)
    return base if rel == "." else os.path.join(base, rel)


def prepare(run_dir: str | Path, *, folder: str | None, root: str | None, snapshot: str | None,
            skip: frozenset[str] | set[str] = frozenset(), max_files: int | None = None,
            max_bytes: int | None = None) -> str:
    """The attempt's working folder, made fresh in ``run_dir`` (a leftover of an earlier
    try of the same attempt is removed first): a copy of ``snapshot`` (spec.inputFiles)
    or of ``folder`` placed under a mirror of ``root`` (see the module). Its path, the
    one ``working_path`` gives."""
    base = os.path.join(os.fspath(run_dir), TREE)
    remove(run_dir)
    if snapshot is not None or folder is None:
        copy_folder(snapshot or "", base)
        return base
    real_root, rel = _placement(os.path.normpath(folder), root)
    target = base if rel == "." else _mirror_levels(base, real_root, rel, skip)
    copy_folder(folder, target, real_root, skip, max_files, max_bytes)
    return target


def _writable(func, path, _exc) -> None:  # type: ignore[no-untyped-def]
    """rmtree's retry for what a notebook left read-only (a folder without write or
    search permission)."""
    with contextlib.suppress(Exception):  # the second rmtree in remove() gets what is left
        parent = os.path.dirname(path)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IRWXU)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, os.stat(path).st_mode | stat.S_IRWXU)
        func(path)


def remove(run_dir: str | Path) -> None:
    """The attempt's working folder and its scratch folders, gone (links are removed,
    never followed; a pre-started kernel's slot folder that ``POOLED`` names goes with them)."""
    marker = os.path.join(os.fspath(run_dir), POOLED)
    with contextlib.suppress(OSError):
        with open(marker, encoding="utf-8") as f:
            slot = f.read().strip()
        if os.path.basename(os.path.dirname(slot)) == ".pool" and os.path.basename(slot).startswith("slot-"):
            _rmtree(slot)
        os.unlink(marker)
    for name in (TREE, SCRATCH):
        _rmtree(os.path.join(os.fspath(run_dir), name))


def _rmtree(base: str) -> None:
    if os.path.islink(base):
        os.unlink(base)
    elif os.path.lexists(base):
        if sys.version_info >= (3, 12):
            shutil.rmtree(base, onexc=_writable)
        else:
            shutil.rmtree(base, onerror=_writable)
        if os.path.lexists(base):
            shutil.rmtree(base, ignore_errors=True)


def scratch_paths(run_dir: str | Path) -> dict[str, str]:
    """Where the sandboxed kernel's /tmp and /var/tmp are on disk: one folder each in
    ``<run>/scratch`` (two, as on a machine: a file written in one is not in the other)."""
    base = os.path.join(os.fspath(run_dir), SCRATCH)
    return {path: os.path.join(base, path.strip("/").replace("/", "-")) for path in SCRATCH_PATHS}


def make_scratch(run_dir: str | Path) -> dict[str, str]:
    """The attempt's scratch folders (``scratch_paths``), made fresh and empty (a
    leftover of an earlier try of the attempt removed first), each with the mode
    bits of the real path it stands for (/tmp: 1777, sticky and writable by all)."""
    base = os.path.join(os.fspath(run_dir), SCRATCH)
    _rmtree(base)
    os.mkdir(base, 0o700)
    paths = scratch_paths(run_dir)
    for real, folder in paths.items():
        try:
            mode = stat.S_IMODE(os.stat(real).st_mode)
        except OSError:
            mode = 0o1777
        os.mkdir(folder)
        os.chmod(folder, mode)  # not lowered by the umask
    return paths


def keep_changes(copy: str | Path, source: str | Path, dest: str | Path) -> list[str]:
    """The files the notebook created or changed in its working ``copy`` (by size and
    modification time against ``source``, the folder it was copied from; links, which
    lead to the real files, are not looked into) copied to ``dest`` at the same relative
    paths, written over what is there. Their relative paths."""
    copy, source, dest = os.fspath(copy), os.fspath(source), os.fspath(dest)
    written = []
    for dirpath, dirnames, filenames in os.walk(copy):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            rel = os.path.relpath(path, copy)
            st = os.stat(path)
            try:
                was = os.stat(os.path.join(source, rel))
            except OSError:
                was = None
            if was is not None and stat.S_ISREG(was.st_mode) and (was.st_size, was.st_mtime_ns) == (
                    st.st_size, st.st_mtime_ns):
                continue
            target = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.lexists(target):
                os.unlink(target)
            clone_file(path, target)
            written.append(rel.replace(os.sep, "/"))
    return written
