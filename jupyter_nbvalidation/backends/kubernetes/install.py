"""``jupyter nbvalidation install [--namespace NS] [--print] [--kubeconfig F]``:
the CRD, the server Role, an example ServiceAccount + RoleBinding and the
NetworkPolicy that isolates the validation Pods, printed as YAML or applied
(create, or replace what exists). A CLI command: it runs
its own event loop with ``asyncio.run``.

``--print`` needs only the package (the manifests ship in it) and PyYAML:
the Kubernetes client (the ``kubernetes`` extra, with aiohttp) is imported
only to apply, and its absence is said in one sentence."""

from __future__ import annotations

import asyncio
import copy
import sys
import time
from typing import TYPE_CHECKING, Any

import yaml  # type: ignore[import-untyped]  # PyYAML ships no annotations (types-PyYAML is not installed)

from jupyter_nbvalidation.backends.kubernetes import MANIFESTS_DIR, NETWORK_POLICY_NOTE

if TYPE_CHECKING:  # pragma: no cover
    from jupyter_nbvalidation.backends.kubernetes.client import Kube

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
EXIT_OK, EXIT_FAILED, EXIT_MISSING = 0, 1, 2


def _load(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((MANIFESTS_DIR / name).read_text()) if d]


def manifests(namespace: str) -> list[dict[str, Any]]:
    """The objects to install, in apply order, with ``namespace`` filled in."""
    docs = _load("crd.yaml") + _load("schedule-crd.yaml") + _load("role.yaml") + _load("rolebinding-example.yaml") + _load("networkpolicy.yaml")
    out = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        if doc["kind"] != "CustomResourceDefinition":
            doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects") or []:
            if subject.get("kind") == "ServiceAccount":
                subject["namespace"] = namespace
        out.append(doc)
    return out


def render(namespace: str) -> str:
    header = (f"# jupyter-nbvalidation: CRD (cluster-scoped), server Role, an example ServiceAccount +\n"
              f"# RoleBinding and the validation Pods' NetworkPolicy in namespace {namespace}.\n"
              f"# Apply with: kubectl apply -f -\n# Note: {NETWORK_POLICY_NOTE}.\n")
    body: str = yaml.safe_dump_all(manifests(namespace), sort_keys=False)  # no stream: the YAML text
    return header + body


def _collection(doc: dict[str, Any]) -> str:
    kind, ns = doc["kind"], doc["metadata"].get("namespace")
    if kind == "CustomResourceDefinition":
        return CRDS
    if kind == "Role":
        return f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles"
    if kind == "RoleBinding":
        return f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"
    if kind == "ServiceAccount":
        return f"/api/v1/namespaces/{ns}/serviceaccounts"
    if kind == "NetworkPolicy":
        return f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"
    raise ValueError(f"unexpected kind {kind} in the manifests")


async def _create_or_replace(kube: "Kube", doc: dict[str, Any]) -> str:
    from jupyter_nbvalidation.backends.kubernetes.client import KubeApiError  # optional: kubernetes

    path = _collection(doc)
    name = doc["metadata"]["name"]
    try:
        await kube.request("POST", path, body=doc)
        return "created"
    except KubeApiError as e:
        if e.status != 409:
            raise
    current = await kube.request("GET", f"{path}/{name}")
    body = copy.deepcopy(doc)
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    if doc["kind"] == "ServiceAccount":  # keep what the token controller added
        for key in ("secrets", "imagePullSecrets"):
            if key in current and key not in body:
                body[key] = current[key]
    await kube.request("PUT", f"{path}/{name}", body=body)
    return "replaced"


async def _wait_established(kube: "Kube", name: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        crd = await kube.request("GET", f"{CRDS}/{name}")
        if any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or []):
            return True
        await asyncio.sleep(0.2)
    return False


async def apply(namespace: str, kubeconfig: str | None, out: Any = None, timeout: float = 60.0) -> int:
    """Create or replace each manifest, saying what was done on ``out`` (default: sys.stdout as
    it is when called, not as it was at import)."""
    from jupyter_nbvalidation.backends.kubernetes.client import connect  # optional: kubernetes

    out = sys.stdout if out is None else out

    kube = await connect(kubeconfig)
    try:
        for doc in manifests(namespace):
            what = await _create_or_replace(kube, doc)
            where = f" in {namespace}" if doc["metadata"].get("namespace") else ""
            print(f"{doc['kind'].lower()}/{doc['metadata']['name']}{where} {what}", file=out)
            if doc["kind"] == "NetworkPolicy":
                print(f"note: {NETWORK_POLICY_NOTE}", file=out)
            if doc["kind"] == "CustomResourceDefinition":
                if not await _wait_established(kube, doc["metadata"]["name"], timeout):
                    print(f"error: the CRD {doc['metadata']['name']} is not Established after {timeout:.0f}s",
                          file=sys.stderr)
                    return EXIT_FAILED
    finally:
        await kube.close()
    return EXIT_OK


def install(namespace: str | None, print_only: bool, kubeconfig: str | None) -> int:
    ns = namespace or "default"
    if print_only:
        sys.stdout.write(render(ns))
        return EXIT_OK
    try:
        from jupyter_nbvalidation.backends.kubernetes.client import KubeApiError  # optional: kubernetes
    except ImportError as e:
        print(f"error: applying the manifests needs the Kubernetes client, which is not installed ({e}): "
              "pip install 'jupyter-nbvalidation[kubernetes]', or print them with --print and apply "
              "them with kubectl.", file=sys.stderr)
        return EXIT_MISSING
    try:
        return asyncio.run(apply(ns, kubeconfig))
    except KubeApiError as e:
        print(f"error: {e}", file=sys.stderr)
        if e.status == 403:
            print("(installing the CRD needs cluster-admin rights; use --print and hand the YAML to an admin)",
                  file=sys.stderr)
        return EXIT_FAILED
