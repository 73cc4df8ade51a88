"""What every kind of environment file is (:class:`Kind`), what discovery found
(:class:`Discovered`) and what a kind contributes once read (:class:`Read`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from jupyter_nbvalidation.core.redaction import mask_urls
from jupyter_nbvalidation.environment.reading import bounded

PLACE_BESIDE = "beside the notebook"
PLACE_ROOT = "at the repository root"
PLACE_ABOVE = "in a folder above the notebook"
PLACE_BINDER = "the repository's binder folder"


@dataclass
class Discovered:
    """What :func:`discovery.discover` found. ``kind``: the file's name (None: nothing);
    ``path``: its path (server root joined with the API path, not resolved);
    ``shown``: that path relative to the server root; ``place``: one of the
    PLACE_* phrases; ``looked_in``: the folders looked in, nearest first."""

    kind: str | None
    path: str = ""
    shown: str = ""
    place: str = ""
    looked_in: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        """How messages name the file: "requirements.txt at the repository root (requirements.txt)"."""
        if self.place == PLACE_BINDER:
            return f"{self.shown} ({PLACE_BINDER})"
        return f"{self.kind} {self.place} ({self.shown})"

    def origin(self, detail: str) -> str:
        """The origin of a file read into lines: "Pipfile beside the notebook (Pipfile: 2 packages)"."""
        if self.place == PLACE_BINDER:
            return f"{self.shown} ({PLACE_BINDER}: {detail})"
        return f"{self.kind} {self.place} ({self.shown}: {detail})"


@dataclass
class Read:
    """A file read into requirement lines (each with the line of the file it
    came from, 0 when not known) and the words the origin adds."""

    lines: list[tuple[int, str]]
    detail: str
    conda_only: list[str] = field(default_factory=list)
    # how messages name each line (None: "line N" or "entry N"), e.g. "packages[3] (six)"
    labels: list[str] | None = None
    # uv.lock: the project beside it is a package uv installs (not a virtual project)
    install_project: bool = False
    # the environments the lock declares it is valid for (PEP 751 environments, uv.lock
    # supported-markers): checked at submit against the build's Python (service)
    supported: list[str] | None = None
    # environment.yml: the Python its dependencies ask for (python=3.10), as a PEP 440 specifier
    python: str | None = None


@dataclass
class Contribution:
    """What a discovered file gives the job's requirements (:meth:`Kind.contribute`):
    ``origin``: where the requirements came from, as stored with the job;
    ``read``: its lines (None: the file is a requirements file, read by the checker,
    ``-r`` and ``-c`` included); ``install_project``: the project in the file's folder is
    installed too; ``project_file``: the pyproject.toml / setup.py it is declared in;
    ``supported``: (markers, where): the environments a lock is valid for."""

    origin: str
    read: Read | None = None
    install_project: bool = False
    project_file: str | None = None
    supported: tuple[list[str], str] | None = None


class Kind:
    """A kind of file a repository declares its environment in (repo2docker's
    buildpacks): its file names, in the order they are tried, whether it is looked for
    in a binder/ folder, how it is detected in a folder, what it contributes and the
    Python version it asks for."""

    names: tuple[str, ...] = ()
    in_binder = True  # looked for in the repository's binder/ (.binder/) folder

    def detect(self, folder: str, root: str) -> str | None:
        """The name of this kind's file in ``folder`` (None: none there)."""
        for name in self.names:
            if os.path.lexists(os.path.join(folder, name)):
                return name
        return None

    def contribute(self, found: Discovered, root: str, extras: list[str]) -> Contribution:
        """What ``found`` (a file of this kind) gives the job's requirements; ``extras``:
        the project's extras asked for (buildConfig.extras)."""
        raise NotImplementedError

    def python(self, found: Discovered, root: str) -> tuple[str, str] | None:
        """The Python the file asks for (a PEP 440 specifier, where it says so), or None."""
        return None


def from_lines(found: Discovered, got: Read) -> Contribution:
    """The contribution of a file read into lines: its origin names the file and what was read."""
    return Contribution(bounded(mask_urls(found.origin(got.detail))), got)
