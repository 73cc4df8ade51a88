"""Image builders behind one small interface (docs/architecture.md, "Module map").

A builder turns a job's build context (a Dockerfile FROM the base image plus
a requirements.txt, stored in the ConfigMap ``nvj-<job>-build-ctx``) into a
digest-pinned image reference. Each one creates exactly one build object per
job under a deterministic name (a repeated create is a 409 that adopts it,
``k8s/children.py``), watches it through an informer of the store (so a
finished build reaches the engine at once, never through a fixed poll), and
reports an Observation.

- ``job``: a batch/v1 Job running a kaniko-compatible executor (job.py);
- ``tekton``: a Tekton PipelineRun (or TaskRun) over a buildah Task (tekton.py);
- ``openshift``: an OpenShift BuildConfig (Docker strategy, inline
  Dockerfile), instantiated (openshift.py).

``auto`` picks one from API discovery (discovery.py). :data:`BUILDERS` is the
one registry from a strategy to its builder; every builder gets the same
:class:`BuildSite` (the child helpers, its settings, the build inputs) and
nothing of the backend.
"""

from __future__ import annotations

from jupyter_nbvalidation.backends.kubernetes.builders.base import (
    Builder,
    BuildInputs,
    BuildSettings,
    BuildSite,
    Watched,
    condition,
    pinned,
    strip_tag,
)
from jupyter_nbvalidation.backends.kubernetes.builders.job import JobBuilder
from jupyter_nbvalidation.backends.kubernetes.builders.openshift import OpenShiftBuilder
from jupyter_nbvalidation.backends.kubernetes.builders.tekton import TektonBuilder

BUILDERS: dict[str, type[Builder]] = {"job": JobBuilder, "tekton": TektonBuilder, "openshift": OpenShiftBuilder}
STRATEGIES = ("auto", "job", "kaniko", "tekton", "openshift")  # what podConfig.buildConfig.strategy may say


def builders_for(site: BuildSite) -> dict[str, Builder]:
    """One builder per strategy, all on ``site``."""
    return {strategy: cls(site) for strategy, cls in BUILDERS.items()}


__all__ = ["BUILDERS", "STRATEGIES", "Builder", "BuildInputs", "BuildSettings", "BuildSite", "Watched",
           "builders_for", "condition", "pinned", "strip_tag"]
