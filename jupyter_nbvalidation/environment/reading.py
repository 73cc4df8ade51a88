"""Reading a repository's files safely, and the error every check raises.

Every file a job's environment comes from (a requirements file, a ``-r`` / ``-c``
file, the file a repository declares its environment in, runtime.txt, apt.txt)
is read through :func:`read_confined`: symlinks resolved, confined to the server
root, size checked by ``fstat`` before at most ``limit + 1`` bytes are read.
"""

from __future__ import annotations

import os
import stat
import tomllib
from typing import Any

FIELD = "spec.podConfig.buildConfig.requirementsFile"
MAX_ORIGIN_CHARS = 1000  # the origin is stored with the job (an annotation): bounded
MAX_FILE_BYTES = 1 * 2**20  # one requirements or constraints file
MAX_LOCK_BYTES = 8 * 2**20  # a lock lists every file of every package: larger than a requirements file


class RequirementsError(ValueError):
    """A refused requirement: ``field`` is the spec field, ``message`` names the source and line."""

    def __init__(self, field: str, message: str, status: int = 400):
        super().__init__(message)
        self.field = field
        self.message = message
        self.status = status


class OverLimit(RequirementsError):
    """A file over its size limit (detected before it is read)."""


def inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def rel(path: str, root: str) -> str:
    return os.path.relpath(path, root).replace(os.sep, "/")


def bounded(text: str) -> str:
    return text if len(text) <= MAX_ORIGIN_CHARS else text[:MAX_ORIGIN_CHARS - 1] + "…"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


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
    if not inside(real, root):
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
        if not inside(opened, root):
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


def read_text(path: str, root: str, what: str, limit: int | None = None) -> str:
    """A repository's file as UTF-8 text (at most MAX_FILE_BYTES unless ``limit``)."""
    got = read_confined(path, root, MAX_FILE_BYTES if limit is None else limit, what, FIELD)
    assert got is not None
    try:
        return got[0].decode("utf-8")
    except UnicodeDecodeError:
        raise RequirementsError(FIELD, f"{what}: is not UTF-8 text") from None


def read_toml(path: str, root: str, what: str, limit: int | None = None) -> dict[str, Any]:
    return parse_toml(read_text(path, root, what, limit), what)


def parse_toml(text: str, what: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(text)
    except ValueError as e:  # tomllib.TOMLDecodeError
        raise RequirementsError(FIELD, f"{what}: is not valid TOML: {e}") from None
    assert isinstance(data, dict)
    return data
