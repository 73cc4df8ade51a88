"""What the checks made of a job's requirements (:class:`Requirements`): the lines
to install in their build and display forms, what the repository asks of the
interpreter, the local paths hashed into the environment's cache key, and the
files stored with the job (:meth:`Requirements.snapshot`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from jupyter_nbvalidation.environment.credentials import SECRET_ENV_PREFIX
from jupyter_nbvalidation.environment.lines import text
from jupyter_nbvalidation.environment.local_sources import ARCHIVE as LOCAL_ARCHIVE
from jupyter_nbvalidation.environment.local_sources import Packed
from jupyter_nbvalidation.environment.trees import tree_hash

SYSTEM_PACKAGES_TXT = "apt.txt"  # the snapshot's file of Requirements.system_packages
INTERPRETER_JSON = "interpreter.json"  # the snapshot's file of Requirements.interpreter_wanted()
SOURCE_ANNOTATION = "nbvalidation.dev/requirements-source"
# where the requirements came from (Requirements.origin), stored with the job at submit
ORIGIN_ANNOTATION = "nbvalidation.dev/environment-origin"


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
            out["requirements.txt"] = text(self.display_lines).encode()
        if self.display_constraints:
            out["constraints.txt"] = text(self.display_constraints).encode()
        if self.packed is not None:
            out[LOCAL_ARCHIVE] = self.packed.data
        if self.system_packages:
            out[SYSTEM_PACKAGES_TXT] = text(self.system_packages).encode()
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
        return text(self.lines), (text(self.constraints) if self.constraints else None)

    def build_env(self) -> dict[str, str]:
        return {f"{SECRET_ENV_PREFIX}{i}": s for i, s in enumerate(self.secrets)}
