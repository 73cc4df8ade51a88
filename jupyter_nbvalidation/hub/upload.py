"""A notebook and its inputs on their way from a user's server to the team's service: the
user's files are not on the service's disk, so a submit forwarded to the service carries them
(an *upload*), and the service lays them out in a folder of the job's own before the usual
submit reads its snapshot from there (service/snapshot.py).

What travels (nothing for a notebook from git: the service fetches it): the notebook's folder as the kernel would see it (core/folders.py walk_folder:
the same walk and exclusions the local backend's working copy uses), the golden notebook the
spec names, and the files (not folders) of each folder above the
notebook's up to the server's root (where pyproject.toml, requirements.txt, environment.yml
and the like are found: environment/discovery.py; a requirements file next to the notebook or
above it is among them). Bounded in count and bytes (413 past them).

The body: ``{"spec": <the job spec>, "files": {"<path from the root>": "<base64>"}}``."""

from __future__ import annotations

import base64
import os
from pathlib import Path, PurePosixPath
from typing import Any

from jupyter_nbvalidation.core.folders import walk_folder
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.service.snapshot import resolve_in_root

MAX_FILES = 1000
MAX_BYTES = 50 * 2**20
UPLOAD_KIND = "NotebookValidationUpload"


class _Budget:
    def __init__(self, max_files: int, max_bytes: int):
        self.files: dict[str, bytes] = {}
        self.bytes = 0
        self.max_files, self.max_bytes = max_files, max_bytes

    def add(self, rel: str, path: Path) -> None:
        if rel in self.files:
            return
        if len(self.files) >= self.max_files:
            raise ApiError(413, "TooLarge", f"the notebook's folder holds more than {self.max_files} files to send "
                                            "to the team's validation service", "notebook.path")
        data = path.read_bytes()
        self.bytes += len(data)
        if self.bytes > self.max_bytes:
            raise ApiError(413, "TooLarge", f"the notebook's folder holds more than {self.max_bytes} bytes to send "
                                            "to the team's validation service", "notebook.path")
        self.files[rel] = data


def pack(spec: Any, root_dir: str, max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES) -> dict[str, Any]:
    """The upload of ``spec``'s inputs read under ``root_dir`` (blocking: run it in a thread).
    A spec without a notebook path is sent as it is: the service answers its 400."""
    notebook = (spec.get("notebook") or {}).get("path") if isinstance(spec, dict) else None
    if not isinstance(notebook, str) or isinstance((spec.get("notebook") or {}).get("git"), dict):
        # no path, or a notebook from git: the service fetches it (with its golden notebook, from
        # the same repository or its own); nothing of this server's disk is read or sent
        return {"kind": UPLOAD_KIND, "spec": spec, "files": {}}
    root = Path(root_dir).resolve()
    nb = resolve_in_root(str(root), notebook, "notebook.path")
    if not nb.is_file():  # the user's mistake, said here: nothing is sent
        raise ApiError(404, "NotFound", f"notebook.path: no such notebook: {notebook}", "notebook.path")
    budget = _Budget(max_files, max_bytes)
    folder = nb.parent
    if folder.is_dir():
        for entry in walk_folder(folder, root):
            if entry.kind == "file":
                budget.add(str(PurePosixPath(*folder.relative_to(root).parts, entry.rel)), Path(entry.path))
    golden = (spec.get("goldenNotebook") or {}).get("path")
    golden_from_git = isinstance((spec.get("goldenNotebook") or {}).get("git"), dict)
    if isinstance(golden, str) and golden.strip() and not golden_from_git:  # like the notebook's, relative to the root
        path = resolve_in_root(str(root), golden, "goldenNotebook.path")
        if path.is_file():
            budget.add(path.relative_to(root).as_posix(), path)
    above = folder
    while above != root and root in above.parents:
        above = above.parent
        for child in sorted(above.iterdir()):
            if child.is_file() and not child.is_symlink():
                budget.add(child.relative_to(root).as_posix(), child)
    return {"kind": UPLOAD_KIND, "spec": spec,
            "files": {rel: base64.b64encode(data).decode("ascii") for rel, data in budget.files.items()}}


def is_upload(body: Any) -> bool:
    return isinstance(body, dict) and body.get("kind") == UPLOAD_KIND


def unpack(body: dict[str, Any], into: str, max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES) -> Any:
    """Write an upload's files under the new folder ``into`` (blocking); returns its spec.
    Every path must stay inside ``into`` (400 naming the file otherwise)."""
    files = body.get("files")
    if not isinstance(files, dict):
        raise ApiError(400, "InvalidField", "files must be an object of path: base64 content", "files")
    if len(files) > max_files:
        raise ApiError(413, "TooLarge", f"the upload holds {len(files)} files; the limit is {max_files}", "files")
    extra = sorted(set(body) - {"kind", "spec", "files"})
    if extra:
        raise ApiError(400, "UnknownField", f"unknown field {extra[0]!r} in the upload", extra[0])
    root = Path(into)
    root.mkdir(parents=True, exist_ok=False, mode=0o700)
    total = 0
    for rel, content in files.items():
        field = f"files[{rel!r}]"
        if not isinstance(rel, str) or not isinstance(content, str):
            raise ApiError(400, "InvalidField", f"{field}: a path and its base64 content", "files")
        parts = PurePosixPath(rel).parts
        if not parts or rel.startswith("/") or "\\" in rel or "\x00" in rel or any(p in ("..", ".") for p in parts):
            raise ApiError(400, "InvalidField", f"{field}: not a relative path inside the notebook's root", "files")
        try:
            data = base64.b64decode(content, validate=True)
        except ValueError:
            raise ApiError(400, "InvalidField", f"{field}: not base64", "files") from None
        total += len(data)
        if total > max_bytes:
            raise ApiError(413, "TooLarge", f"the upload holds more than {max_bytes} bytes", "files")
        path = root.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    return body.get("spec")
