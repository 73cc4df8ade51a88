"""Image builders behind one small interface (docs/architecture.md, "Module map").

A builder turns a job's build context (a Dockerfile FROM the base image plus
a requirements.txt, stored in the ConfigMap ``nvj-<job>-build-ctx``) into a
digest-pinned image reference. Each one creates exactly one build object per
job under a deterministic name (a repeated create is a 409 that adopts it),
watches it through an informer of the store (so a finished build reaches the
engine at once, never through a fixed poll), and reports an Observation.

- ``job``: a batch/v1 Job running a kaniko-compatible executor (job.py);
- ``tekton``: a Tekton PipelineRun (or TaskRun) over a buildah Task (tekton.py);
- ``openshift``: an OpenShift BuildConfig (Docker strategy, inline
  Dockerfile), instantiated (openshift.py).

``auto`` picks one from API discovery (discovery.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...backends.base import Observation
from ..client import Resource

if TYPE_CHECKING:  # pragma: no cover
    from ..backend import KubernetesBackend


@dataclass
class BuildInputs:
    """What every builder builds from (computed by the backend)."""

    dockerfile: str
    requirements_txt: str
    destination: str  # repository:tag to push (empty: the builder picks, e.g. an ImageStreamTag)
    base_image: str
    content_hash: str
    timeout_seconds: int
    context: dict = field(default_factory=dict)  # file name -> bytes (objects.build_context)
    reusable: bool = False  # the destination tag names this exact content: an existing one is reused
    note: str = ""  # why not reusable, when worth saying


@dataclass
class Watched:
    """The build object kind a builder's informer watches (label-selected)."""

    resource: Resource
    api_version: str
    kind: str


class Builder:
    strategy = "abstract"
    #: the kind to watch (None: the store's built-in informers cover it)
    watched: Watched | None = None

    def __init__(self, backend: "KubernetesBackend"):
        self.backend = backend

    @property
    def kube(self):
        return self.backend.kube

    def informer(self):
        return self.backend.store.extra.get(self.strategy) if self.watched else None

    async def ensure(self, job: dict) -> Observation:
        raise NotImplementedError

    async def cancel(self, job: dict) -> None:
        raise NotImplementedError

    async def log(self, job: dict) -> str | None:
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


def condition(obj: dict, ctype: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None
