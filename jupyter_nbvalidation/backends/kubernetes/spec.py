"""What the Kubernetes backend refuses of a job's spec at submit: a build strategy it
does not know or this cluster does not offer, a build without a registry to push to,
no image to run when the build is disabled."""

from __future__ import annotations

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.backends.kubernetes.builders import STRATEGIES
from jupyter_nbvalidation.core.documents import JobSpec
from jupyter_nbvalidation.core.model import build_enabled
from jupyter_nbvalidation.spec.checks import SpecError


def check_spec(spec: JobSpec, resolved: str, available_strategies: list[str] | None, registry: str,
               runner_image: str, allowed_service_accounts: list[str] | tuple[str, ...] = ()) -> None:
    """SpecError for what this backend cannot run. ``resolved``: the strategy the spec
    builds with here; ``available_strategies``: API discovery's (None: not known yet);
    ``allowed_service_accounts``: those a job may name (none: a job may name none)."""
    pc = spec.get("podConfig") or {}
    account = pc.get("serviceAccountName")
    if account is not None and account not in allowed_service_accounts:
        raise SpecError("podConfig.serviceAccountName",
                        f"{account!r} is not a service account this server lets a job use "
                        "(c.KubernetesBackend.allowed_service_accounts"
                        + (": " + ", ".join(allowed_service_accounts) if allowed_service_accounts else " is empty")
                        + "); leave it out to run as the server's configured one")
    bc = pc.get("buildConfig") or {}
    strategy = bc.get("strategy")
    if strategy is not None and strategy not in STRATEGIES:
        raise SpecError("podConfig.buildConfig.strategy", f"must be one of {', '.join(STRATEGIES)}")
    if build_enabled(spec) and resolved != "job" and available_strategies is not None \
            and resolved not in available_strategies:
        raise SpecError("podConfig.buildConfig.strategy",
                        f"{resolved} builds are not available on this cluster (API discovery found: "
                        f"{', '.join(available_strategies)})")
    if build_enabled(spec):
        if not registry and resolved != "openshift":
            raise SpecError("podConfig.buildConfig.enabled",
                            "image builds need a registry to push to (c.KubernetesBackend.registry is not "
                            "set); set it, or disable the build and give podConfig.containerImage")
        if not obj.valid_repository(f"{registry}/x"):
            raise SpecError("podConfig.buildConfig.enabled",
                            f"c.KubernetesBackend.registry {registry!r} is not a valid image "
                            "repository prefix (e.g. registry.example.com/nbvalidation)")
    elif not pc.get("containerImage") and not runner_image:
        raise SpecError("podConfig.containerImage",
                        "is required when the build is disabled (no c.KubernetesBackend.runner_image "
                        "is configured)")
