"""The local paths of a job's requirements (a project installed from its folder,
a package folder, a wheel, a ``--find-links`` folder), packed to travel with the
job to a backend that builds where the server's files are not (Kubernetes).

At submit the paths are read once into one deterministic ``local-paths.tar.gz``
(the same walk as the cache key's :func:`trees.tree_hash`: build and tool
artefacts, virtual environments and bytecode left out), with a manifest of each
path's place in the archive and its content hash. It is stored with the job's
snapshot, so the build uses exactly what was read at submit, on whichever server
reconciles the job. The build unpacks it under :data:`BUILD_DIR` and installs the
requirement lines with each server path replaced by its place there
(:func:`relocate`). Pure but for reading the paths at :func:`pack`."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import tarfile
from dataclasses import dataclass

from jupyter_nbvalidation.environment.trees import tree_hash, walk_tree

ARCHIVE = "local-paths.tar.gz"  # the snapshot's (and the build context's) file
MANIFEST = "nbv-local-paths.json"  # inside the archive: {"places": {path: place}, "hashes": {path: hash}}
BUILD_DIR = "/tmp/nbv-build/local"  # where the build unpacks it (removed with /tmp/nbv-build)
#: the archive's bound (compressed): it is stored in the job's snapshot ConfigMap and again in
#: its build context, each capped at 1 MiB by Kubernetes
MAX_BYTES = 384 * 1024


class PackError(ValueError):
    """A local path that cannot travel (too large: 413; a link out of it: 400): the message names it."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Packed:
    data: bytes  # the archive
    places: dict[str, str]  # the server's real path -> its path in the archive
    hashes: dict[str, str]  # the server's real path -> its content hash (trees.tree_hash)


def _places(paths: list[str]) -> dict[str, str]:
    """Each path's place in the archive: relative to the folder that holds them all, so
    the archive (and an image built from it) does not depend on where the server root is."""
    unique = sorted(set(paths))
    top = os.path.dirname(os.path.commonpath(unique))
    return {p: os.path.relpath(p, top).replace(os.sep, "/") for p in unique}


def _private(path: str, private: frozenset[str]) -> bool:
    return any(path == q or path.startswith(q.rstrip(os.sep) + os.sep) for q in private)


def pack(paths: list[str], private: frozenset[str] = frozenset()) -> Packed:
    """The archive of ``paths`` (absolute real paths, checked inside the root at submit),
    never with anything under ``private`` (the server's own dirs: its Jupyter runtime and
    data dirs, which hold its tokens, the kubeconfig, credential dirs; Backend.private_paths),
    should a packed folder hold them. Raises PackError when it would be over
    :data:`MAX_BYTES`, a link in a folder points out of it (the build could not follow it),
    or a path to pack is itself private."""
    mine = [p for p in paths if _private(os.path.realpath(p), private)]
    if mine:
        raise PackError(f"{mine[0]} is one of the server's own folders (or inside one): it never travels with a job")

    places = _places(paths)
    hashes = {p: tree_hash(p) for p in places}
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        manifest = json.dumps({"places": places, "hashes": hashes}, sort_keys=True).encode()
        _add(tar, MANIFEST, data=manifest, mode=0o644)
        for path, place in sorted(places.items(), key=lambda kv: kv[1]):
            if os.path.isfile(path):
                _add(tar, place, source=path, mode=os.stat(path).st_mode)
                continue
            _add(tar, place, directory=True)
            for rel, full, st in walk_tree(path):
                if _private(os.path.realpath(full) if st is not None else full, private):
                    continue  # the server's own (its tokens): never in a job's archive
                name = f"{place}/{rel}".replace(os.sep, "/").replace("/./", "/")
                if st is None:
                    target = os.readlink(full)
                    inside = os.path.normpath(os.path.join(os.path.dirname(full), target))
                    if os.path.isabs(target) or not (inside + os.sep).startswith(path.rstrip(os.sep) + os.sep):
                        raise PackError(f"{full} is a link to {target}, out of {path}: the build, which does "
                                        "not have the server's files, could not follow it")
                    _add(tar, name, link=target)
                else:
                    _add(tar, name, source=full, mode=st.st_mode)
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    data = out.getvalue()
    if len(data) > MAX_BYTES:
        raise PackError(f"{', '.join(sorted(places))}: {len(data)} bytes compressed, over the {MAX_BYTES} bytes "
                        "that travel with a job to the image build (they are stored in its ConfigMaps, which "
                        "Kubernetes caps at 1 MiB)", 413)
    return Packed(data, places, hashes)


def _add(tar: tarfile.TarFile, name: str, *, data: bytes | None = None, source: str | None = None,
         mode: int = 0o644, directory: bool = False, link: str | None = None) -> None:
    """One member whose bytes depend on the content only (no owner, no time)."""
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    if directory:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    elif link is not None:
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, link, 0o777
        tar.addfile(info)
    else:
        if source is not None:
            with open(source, "rb") as f:
                data = f.read()
        assert data is not None
        info.size, info.mode = len(data), 0o755 if mode & 0o111 else 0o644
        tar.addfile(info, io.BytesIO(data))


def read(data: bytes) -> Packed:
    """The manifest of an archive made by :func:`pack` (ValueError when it has none)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        member = tar.extractfile(MANIFEST)
        if member is None:
            raise ValueError(f"{ARCHIVE} has no {MANIFEST}")
        manifest = json.loads(member.read())
    return Packed(data, dict(manifest["places"]), dict(manifest["hashes"]))


def relocate(lines: list[str], places: dict[str, str], where: str = BUILD_DIR) -> list[str]:
    """``lines`` with every server path of ``places`` (alone, with ``[extras]``, under
    ``file://``, or a path below one) replaced by its place under ``where``. Raises
    ValueError for a line naming an absolute path the archive does not hold (it could
    not be installed where the build runs)."""
    ordered = sorted(places, key=len, reverse=True)

    def word(w: str) -> str:
        scheme = "file://" if w.startswith("file://") else ""
        path = w[len(scheme):]
        if not path.startswith("/"):
            return w
        for p in ordered:
            if path == p or path.startswith(p + "/") or path.startswith(p + "["):
                return f"{scheme}{where}/{places[p]}{path[len(p):]}"
        raise ValueError(f"{path} is a local path that did not travel with the job")

    return [re.sub(r"\S+", lambda m: word(m.group(0)), line) for line in lines]
