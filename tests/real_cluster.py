"""pytest plugin: the real single-node Kubernetes of ``tools/cluster`` (marker ``cluster``).

``bash tools/cluster/up.sh`` brings the cluster up (containerd, a kubelet, the controller
manager and scheduler, a registry Pod, a kaniko builder) and writes ``.cluster/env``; this
plugin reads that file. There is no stand-in here: the kubelet runs the Pods, the Job
controller completes the build Jobs, kaniko pushes to the registry, containerd pulls by digest.

At the start of a session the :func:`real_cluster` fixture runs
``tools/cluster/runner-image.sh``, so the validation image carries THIS checkout's
``jupyter_nbvalidation`` (never a stale runner). When the cluster is not up the fixture
FAILS (it never skips): run ``bash tools/cluster/up.sh`` first (``tools/setup-and-test.sh``
does, and ``tools/cluster/down.sh`` after).

Tests get their own namespace (:meth:`Cluster.namespace`) and a real ``jupyter server``
subprocess with ``backend = "kubernetes"`` configured from ``.cluster/env``
(:meth:`Cluster.server`).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, AsyncIterator

import pytest
from helpers import wait

REPO = Path(__file__).resolve().parents[1]
ENV_FILE = REPO / ".cluster" / "env"
RUNNER_IMAGE_SH = REPO / "tools" / "cluster" / "runner-image.sh"
UP = "bash tools/cluster/up.sh"


def read_env(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k] = v
    return out


def pytest_configure(config):
    config.addinivalue_line("markers", "cluster: needs the real single-node cluster of tools/cluster/up.sh")


@dataclass
class Cluster:
    env: dict[str, str]
    work: Path
    namespaces: list[str] = field(default_factory=list)

    @property
    def kubeconfig(self) -> str:
        return self.env["KUBECONFIG"]

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120, input: str | None = None,
                namespace: str | None = None) -> subprocess.CompletedProcess:
        argv = [self.env["NBV_KUBECTL"], "--kubeconfig", self.kubeconfig, "--cache-dir", str(self.work / "kcache")]
        if namespace:
            argv += ["-n", namespace]
        p = subprocess.run([*argv, *args], capture_output=True, text=True, timeout=timeout, input=input)
        if check and p.returncode:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({p.returncode}): {p.stderr}")
        return p

    def get(self, namespace: str, *what: str) -> Any:
        p = self.kubectl("get", *what, "-o", "json", namespace=namespace, check=False)
        if p.returncode:
            if "NotFound" in p.stderr:
                return None
            raise AssertionError(p.stderr)
        return json.loads(p.stdout)

    def namespace(self) -> str:
        """A fresh namespace (deleted at the end of the session), with its default ServiceAccount
        (the ServiceAccount admission plugin refuses Pods before the controller made it)."""
        ns = f"nbv-t-{uuid.uuid4().hex[:8]}"
        self.kubectl("create", "namespace", ns)
        self.namespaces.append(ns)
        wait(lambda: self.kubectl("get", "serviceaccount", "default", namespace=ns, check=False).returncode == 0, 60,
             f"the default ServiceAccount in {ns}", interval=0.2)
        return ns

    def server_config(self, namespace: str, **traits: Any) -> dict:
        kb = {"kubeconfig": self.kubeconfig, "namespace": namespace,
              "registry": self.env["NBV_REGISTRY"], "base_image": self.env["NBV_BASE_IMAGE"],
              "runner_image": self.env["NBV_RUNNER_IMAGE"],
              "builder_image": self.env["NBV_BUILDER_IMAGE"],
              "builder_args": json.loads(self.env["NBV_BUILDER_ARGS"])}
        kb.update(traits.pop("KubernetesBackend", {}))
        cfg = {"NBValidation": {"backend": "kubernetes", **traits.pop("NBValidation", {})},
               "KubernetesBackend": kb}
        cfg.update(traits)
        return cfg

    def backend(self, namespace: str, registry: str, **traits: Any):
        """A KubernetesBackend on this cluster (in this process), pushing under ``registry``;
        build-disabled jobs run in the runner image of this checkout (``NBV_RUNNER_IMAGE``)."""
        from jupyter_nbvalidation.backends.kubernetes.backend import KubernetesBackend

        kw = {"base_image": self.env["NBV_BASE_IMAGE"], "runner_image": self.env["NBV_RUNNER_IMAGE"],
              "builder_image": self.env["NBV_BUILDER_IMAGE"], "builder_args": json.loads(self.env["NBV_BUILDER_ARGS"]),
              "run_as_user": int(self.env.get("NBV_RUN_AS_USER", "1000")), **traits}
        return KubernetesBackend(namespace=namespace, kubeconfig=self.kubeconfig, registry=registry, **kw)

    @contextlib.asynccontextmanager
    async def engine(self, root: Path, registry: str, namespace: str | None = None, log: Any = None,
                     engine: dict[str, Any] | None = None, **traits: Any) -> AsyncIterator[SimpleNamespace]:
        """An engine + KubernetesBackend + JobService in this process on ``root`` (made), in
        ``namespace`` (a fresh one by default), with an admin client ``kube`` beside it;
        stopped on exit. ``engine``: the Engine's keyword arguments, ``traits`` the backend's."""
        from jupyter_nbvalidation.backends.kubernetes.client import connect
        from jupyter_nbvalidation.engine.engine import Engine
        from jupyter_nbvalidation.service.jobs import JobService

        ns = namespace or self.namespace()
        backend = self.backend(ns, registry, **traits)
        eng = Engine(backend, log=log, **{"resync_period": 3600, **(engine or {})})
        root.mkdir(parents=True, exist_ok=True)
        kube = await connect(self.kubeconfig)
        await eng.start()
        try:
            yield SimpleNamespace(ns=ns, backend=backend, engine=eng, service=JobService(eng, backend, str(root)),
                                  root=root, kube=kube)
        finally:
            await eng.stop()
            await kube.close()

    def server(self, tmp_path: Path, namespace: str, name: str = "server", **traits: Any):
        """A real `jupyter server` process (not started) with the kubernetes backend on this cluster."""
        from conftest import ServerProcess

        cfg_file = tmp_path / f"{name}-config.json"
        cfg_file.write_text(json.dumps(self.server_config(namespace, **traits), indent=1))
        return ServerProcess(tmp_path, name, extra_args=[f"--config={cfg_file}"])


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory) -> Cluster:
    if not ENV_FILE.is_file():
        pytest.fail(f"the real cluster is not up ({ENV_FILE} is missing): run `{UP}` first", pytrace=False)
    if os.geteuid() != 0:
        pytest.fail("the real-cluster tests need root (the runner image is pushed by tools/cluster)", pytrace=False)
    # the validation image of THIS checkout's runner (a new tag whenever the package changed)
    p = subprocess.run(["bash", str(RUNNER_IMAGE_SH), str(REPO)], capture_output=True, text=True, timeout=900)
    if p.returncode:
        pytest.fail(f"tools/cluster/runner-image.sh failed ({p.returncode}):\n{p.stderr}", pytrace=False)
    env = read_env(ENV_FILE)
    missing = [k for k in ("KUBECONFIG", "NBV_REGISTRY", "NBV_BASE_IMAGE", "NBV_RUNNER_IMAGE", "NBV_BUILDER_IMAGE",
                           "NBV_BUILDER_ARGS", "NBV_KUBECTL") if not env.get(k)]
    if missing:
        pytest.fail(f"{ENV_FILE} lacks {', '.join(missing)}: run `{UP}` again", pytrace=False)
    cluster = Cluster(env, tmp_path_factory.mktemp("real-cluster"))
    ready = cluster.kubectl("get", "node", "localhost", "-o",
                            "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False)
    if ready.returncode or ready.stdout.strip() != "True":
        pytest.fail(f"node localhost is not Ready ({ready.stdout}{ready.stderr}): run `{UP}`", pytrace=False)
    yield cluster
    for ns in cluster.namespaces:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
