"""What every builder shares: the build inputs, the site a builder works on
(the child-object helpers, its settings, the inputs of a job's build) and the
interface (``ensure`` / ``cancel`` / ``build_log``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from jupyter_nbvalidation.backends.base import FAILED, Observation
from jupyter_nbvalidation.backends.kubernetes.children import Children, NotOurs
from jupyter_nbvalidation.backends.kubernetes.client import Kube, Resource
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.model import isotime

if TYPE_CHECKING:  # pragma: no cover
    from jupyter_nbvalidation.backends.kubernetes.informer import Informer


@dataclass
class BuildInputs:
    """What every builder builds from (computed by the backend)."""

    dockerfile: str
    requirements_txt: str
    destination: str  # repository:tag to push (empty: the builder picks, e.g. an ImageStreamTag)
    base_image: str
    content_hash: str
    timeout_seconds: int
    context: dict[str, Any] = field(default_factory=dict)  # file name -> bytes (objects.build_context)
    reusable: bool = False  # the destination tag names this exact content: an existing one is reused
    note: str = ""  # why not reusable, when worth saying


@dataclass
class Watched:
    """The build object kind a builder's informer watches (label-selected)."""

    resource: Resource
    api_version: str
    kind: str


@dataclass(frozen=True)
class BuildSettings:
    """The backend's build configuration (``c.KubernetesBackend.<trait>``) a builder reads."""

    builder_image: str = ""
    builder_args: tuple[str, ...] = ()  # the kaniko executor's extra arguments (job builds)
    service_account: str = ""
    registry_secret: str = ""
    tekton_task: str = "buildah"
    tekton_task_resolver: str = ""
    tekton_task_namespace: str = ""
    tekton_run_kind: str = "PipelineRun"


@dataclass
class BuildSite:
    """What a builder works with: the child-object helpers, its settings and
    ``inputs(job)``, the (cached) inputs of a job's build."""

    children: Children
    settings: BuildSettings
    inputs: Callable[[Job], Awaitable[BuildInputs]]
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("nbvalidation"))


class Builder:
    strategy = "abstract"
    #: the kind to watch (None: the store's built-in informers cover it)
    watched: Watched | None = None

    def __init__(self, site: BuildSite):
        self.site = site
        self.children = site.children
        self.log = site.log

    @property
    def settings(self) -> BuildSettings:
        return self.site.settings

    @property
    def kube(self) -> Kube:
        return self.children.kube

    def informer(self) -> "Informer | None":
        return self.children.informer(self.strategy) if self.watched else None

    def refused(self, e: NotOurs) -> Observation:
        """A same-named build object that is not the job's: the build fails, nothing is adopted."""
        return Observation(FAILED, message=str(e), finished_at=isotime(), strategy=self.strategy)

    async def started(self, job: Job) -> bool:
        """Whether the job's build object exists already (then the reuse check
        is not due again after a restart). Only the Job builder tells; the
        others always look in the registry first."""
        return False

    async def ensure(self, job: Job) -> Observation:
        raise NotImplementedError

    async def cancel(self, job: Job) -> None:
        raise NotImplementedError

    async def build_log(self, job: Job) -> str | None:
        """The build's log so far (while it runs) or whole (after), None when
        there is none to read. Not ``log``: that is the builder's logger."""
        return None


def strip_tag(image: str) -> str:
    """``registry:5000/a/b:tag`` -> ``registry:5000/a/b`` (a digest is dropped too)."""
    image = image.split("@", 1)[0]
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        return image[: len(image) - len(last)] + last.split(":", 1)[0]
    return image


def pinned(image: str, digest: str) -> str:
    return f"{strip_tag(image)}@{digest.strip()}"


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    c: dict[str, Any]  # a status condition object
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None
