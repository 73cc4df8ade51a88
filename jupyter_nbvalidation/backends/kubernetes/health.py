"""Whether the job resource is served: the CRD installed and Established, read
directly, or through API discovery where the server's Role cannot read CRDs; and
whether the validation Pods' NetworkPolicy is installed in the namespace."""

from __future__ import annotations

from typing import Any

from jupyter_nbvalidation.backends.kubernetes import NETWORK_POLICY, NETWORK_POLICY_NOTE
from jupyter_nbvalidation.backends.kubernetes.client import Kube, KubeApiError
from jupyter_nbvalidation.core.model import GROUP, PLURAL, VERSION

CRD_NAME = f"{PLURAL}.{GROUP}"


async def crd_state(kube: Kube) -> tuple[bool, str | None]:
    """(installed and Established, problem)."""
    try:
        crd = await kube.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}",
                                 timeout=10)
        established = any(c.get("type") == "Established" and c.get("status") == "True"
                          for c in (crd.get("status") or {}).get("conditions") or [])
        return established, None if established else f"the CRD {CRD_NAME} is not Established yet"
    except KubeApiError as e:
        if e.status == 404:
            return False, f"the CRD {CRD_NAME} is not installed (run: jupyter nbvalidation install)"
        if e.status not in (401, 403):
            return False, f"the API server is not usable: {e}"
    # the server's Role cannot read CRDs: discovery serves a CRD's group once it is Established
    try:
        disc = await kube.request("GET", f"/apis/{GROUP}/{VERSION}", timeout=10)
    except KubeApiError as e:
        if e.status == 404:
            return False, f"the CRD {CRD_NAME} is not installed (run: jupyter nbvalidation install)"
        return False, f"the API server is not usable: {e}"
    if any(r.get("name") == PLURAL for r in disc.get("resources") or []):
        return True, None
    return False, f"the CRD {CRD_NAME} is not served"


async def network_policy_state(kube: Kube, namespace: str, reachable: bool = True) -> dict[str, Any]:
    """``installed``: the validation Pods' NetworkPolicy is in the namespace (None: it could not
    be read; not asked while the API server is known to be unreachable); ``note``: what that
    does and does not mean (the API does not say whether the cluster's network plugin enforces it)."""
    out: dict[str, Any] = {"name": NETWORK_POLICY, "installed": None, "note": NETWORK_POLICY_NOTE}
    if not reachable:
        out["note"] = f"not known while the API server is unreachable; {NETWORK_POLICY_NOTE}"
        return out
    try:
        await kube.request("GET", f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/"
                                  f"{NETWORK_POLICY}", timeout=10)
        out["installed"] = True
    except KubeApiError as e:
        if e.status == 404:
            out["installed"] = False
            out["note"] = ("not installed: validation Pods can reach the API server, the service and each other "
                           "(run: jupyter nbvalidation install)")
        else:
            out["note"] = f"could not be read ({e}); {NETWORK_POLICY_NOTE}"
    return out
