"""The validation Pods' NetworkPolicy (issue 40) on the REAL single-node cluster
(tests/real_cluster.py, ``bash tools/cluster/up.sh``).

``jupyter nbvalidation install`` applies it beside the Role; it selects the Pods the backend
really makes (their labels, read from a Pod the kubelet ran), denies them all ingress, and its
egress excludes every address of this cluster a notebook must not reach: the API server (the
``kubernetes`` Service's address and the address it listens on), the Pod and Service ranges
(the service, the registry Pod, other validation Pods). ``/health`` says it is installed and
what that does not mean.

Enforcement is NOT tested here, because this node's network plugin (Debian's ``bridge`` CNI)
does not implement NetworkPolicy: the last test shows that a validation Pod still reaches
another Pod (the registry) with the policy installed, and fails when the node's plugin changes,
so that the docs (docs/kubernetes.md) and this test are revisited together.

Run: ``bash tools/cluster/up.sh && .venv/bin/python -m pytest tests/backends/kubernetes/test_k8s_real_netpol.py``
"""

from __future__ import annotations

import io
import ipaddress
import json
import logging
from pathlib import Path
from urllib.parse import urlparse

import pytest
from helpers import write_notebook

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.backends.kubernetes import NETWORK_POLICY, NETWORK_POLICY_NOTE
from jupyter_nbvalidation.backends.kubernetes.client import PODS, connect
from jupyter_nbvalidation.backends.kubernetes.health import network_policy_state
from jupyter_nbvalidation.backends.kubernetes.install import apply
from jupyter_nbvalidation.core.model import Phase, Reason

pytestmark = pytest.mark.cluster

LOG = logging.getLogger("nbvalidation.test.real.netpol")
REPO = Path(__file__).resolve().parents[3]
CLUSTER_LIB = REPO / "tools" / "cluster" / "lib.sh"


def cluster_setting(name: str) -> str:
    """A setting of tools/cluster/lib.sh (``NAME=value``)."""
    for line in CLUSTER_LIB.read_text().splitlines():
        if line.startswith(f"{name}="):
            return line.split("=", 1)[1].split()[0]
    raise AssertionError(f"{name} is not set in {CLUSTER_LIB}")


def excluded(policy: dict, address: str) -> bool:
    """Whether the policy's egress lets no traffic to ``address`` (a network) through on a port
    other than DNS: every rule that reaches it by ipBlock lists it under ``except``."""
    net = ipaddress.ip_network(address, strict=False)
    for rule in policy["spec"]["egress"]:
        ports = {p.get("port") for p in rule.get("ports") or []}
        if ports == {53}:
            continue  # DNS only
        for peer in rule.get("to") or [{}]:
            block = peer.get("ipBlock")
            if block is None:
                return False  # a peer by selector or "everything" (no `to`)
            cidr = ipaddress.ip_network(block["cidr"])
            if cidr.version != net.version or not net.subnet_of(cidr):
                continue
            if not any(net.subnet_of(ipaddress.ip_network(e)) for e in block.get("except") or []
                       if ipaddress.ip_network(e).version == net.version):
                return False
    return True


@pytest.mark.asyncio
async def test_install_applies_the_policy_that_isolates_the_validation_pods(real_cluster, tmp_path):
    ns = real_cluster.namespace()
    kube = await connect(real_cluster.kubeconfig)
    try:  # before install, /health's networkPolicy says it is not there
        before = await network_policy_state(kube, ns)
    finally:
        await kube.close()
    assert before["installed"] is False and before["note"].startswith("not installed: "), before
    out = io.StringIO()
    assert await apply(ns, real_cluster.kubeconfig, out=out) == 0, out.getvalue()
    said = out.getvalue()
    assert f"networkpolicy/{NETWORK_POLICY} in {ns} created" in said, said
    assert f"note: {NETWORK_POLICY_NOTE}" in said, said
    policy = real_cluster.get(ns, "networkpolicy", NETWORK_POLICY)
    assert policy is not None
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"] and not spec.get("ingress"), spec  # no ingress at all
    # nothing of this cluster is reachable but DNS: the API server (its Service address and where it
    # listens), the Service range, the Pod range (the registry Pod, the service, other validation Pods)
    api_host = urlparse(json.loads(real_cluster.kubectl("config", "view", "--minify", "-o", "json").stdout)
                        ["clusters"][0]["cluster"]["server"]).hostname
    kubernetes_svc = real_cluster.get("default", "service", "kubernetes")["spec"]["clusterIP"]
    registry_ip = real_cluster.env["NBV_REGISTRY_HOST"].split(":")[0]
    for address in (api_host, kubernetes_svc, cluster_setting("SERVICE_CIDR"), cluster_setting("POD_CIDR"),
                    registry_ip, "169.254.169.254"):
        assert excluded(policy, address), (address, spec["egress"])
    assert not excluded(policy, "151.101.0.223"), spec["egress"]  # the outside stays reachable (pypi.org)

    # the policy selects the Pods the backend really makes, and /health says it is there
    async with real_cluster.engine(tmp_path / "root", real_cluster.env["NBV_REGISTRY"], namespace=ns,
                                   log=LOG) as env:
        write_notebook(env.root / "nb.ipynb", ["print(1)"])
        job = await env.service.submit({"notebook": {"path": "nb.ipynb"},
                                        "podConfig": {"buildConfig": {"enabled": False}}})
        name = job["metadata"]["name"]
        done = await env.engine.wait_for_terminal(name, 120)
        assert done["status"]["phase"] == Phase.SUCCEEDED, json.dumps(done["status"], indent=1)
        pod = await env.kube.request("GET", PODS.path(ns, obj.validation_pod_name(name)))
        health = await env.backend.health()
    selector = spec["podSelector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items(), (selector, pod["metadata"]["labels"])
    assert health["networkPolicy"] == {"name": NETWORK_POLICY, "installed": True, "note": NETWORK_POLICY_NOTE}


@pytest.mark.asyncio
async def test_this_nodes_network_plugin_does_not_enforce_the_policy(real_cluster, tmp_path):
    """The node's CNI is Debian's bridge plugin, which implements no NetworkPolicy: with the
    policy installed, a validation Pod still connects to another Pod (the registry). This is
    what docs/kubernetes.md says; an enforcing plugin makes this test fail: then test the
    enforcement here instead (no ingress, no egress to the Pod and Service ranges)."""
    conf = Path(real_cluster.env["NBV_CLUSTER_STATE"]) / "cni" / "conf" / "10-nbv.conflist"
    plugins = [p["type"] for p in json.loads(conf.read_text())["plugins"]]
    assert plugins == ["bridge"], plugins
    ns = real_cluster.namespace()
    assert await apply(ns, real_cluster.kubeconfig, out=io.StringIO()) == 0
    host, port = real_cluster.env["NBV_REGISTRY_HOST"].split(":")
    async with real_cluster.engine(tmp_path / "root", real_cluster.env["NBV_REGISTRY"], namespace=ns,
                                   log=LOG) as env:
        write_notebook(env.root / "nb.ipynb", [
            f"import socket\nsocket.create_connection(({host!r}, {port}), timeout=5).close()\nprint('reached')"])
        job = await env.service.submit({"notebook": {"path": "nb.ipynb"},
                                        "podConfig": {"buildConfig": {"enabled": False}}})
        done = await env.engine.wait_for_terminal(job["metadata"]["name"], 120)
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED), json.dumps(st, indent=1)
