"""pytest plugin: a real kube-apiserver + etcd for the Kubernetes backend tests.

Load it from ``tests/conftest.py`` (``pytest_plugins = ["k8s_harness"]``; the
``tests`` directory is on ``sys.path`` through pytest's rootdir conftest
handling) or on the command line with ``-p k8s_harness`` when ``tests`` is on
``sys.path`` (e.g. ``python -m pytest -p tests.k8s_harness`` from the repo root,
since ``python -m`` puts the current directory on ``sys.path``).

The shape follows controller-runtime's envtest: one etcd and one kube-apiserver
per pytest session, on random loopback ports, with throw-away certificates and
static bearer tokens; per-test namespaces keep tests apart. No controller
manager, scheduler or kubelet runs, so:

- deleted namespaces stay Terminating forever (never wait for deletion);
- there is no garbage collector, no ``default`` ServiceAccount, no Job
  controller, and the aggregated admin/edit/view ClusterRoles are empty;
- pods stay Pending: tests play kubelet and the Job controller with
  :func:`start_pod`, :func:`complete_pod` and :func:`complete_job`, which
  write what those components would write.

The binaries come from ``tools/testbin/build.sh`` (cached in
``${NBV_TESTBIN:-~/.cache/nbv-testbin}/<k8s-version>/``). When they are
missing the fixture FAILS (it never skips): run that script first.

Set ``NBV_K8S_LOGS=always`` to print the tails of the etcd and kube-apiserver
logs at the end of every session (by default only when a test failed).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import wait

REPO = Path(__file__).resolve().parents[1]
TESTBIN_SRC = REPO / "tools" / "testbin"
MANIFESTS = REPO / "jupyter_nbvalidation" / "backends" / "kubernetes" / "manifests"
CRD_FILE = MANIFESTS / "crd.yaml"
SCHEDULE_CRD_FILE = MANIFESTS / "schedule-crd.yaml"
ROLE_FILE = MANIFESTS / "role.yaml"

CRD_NAME = "notebookvalidationjobs.nbvalidation.dev"
READY_BUDGET_S = 90.0
ETCD_BUDGET_S = 30.0
ADMIN_USER = "nbv-admin"
LIMITED_USER = "alice"
LIMITED_GROUP = "nbv-users"

_HARNESS_KEY = pytest.StashKey["KubeApiServer"]()


# --------------------------------------------------------------------------
# locating the binaries


def k8s_version() -> str:
    """The Kubernetes version the wrapper module pins, e.g. ``v1.35.4``."""
    text = (TESTBIN_SRC / "kube-apiserver" / "go.mod").read_text()
    m = re.search(r"^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v\d+\.\d+\.\d+)\s*$", text, re.M)
    if not m:
        raise RuntimeError("cannot find the k8s.io/kubernetes version in tools/testbin/kube-apiserver/go.mod")
    return m.group(1)


def testbin_dir() -> Path:
    root = Path(os.environ.get("NBV_TESTBIN") or Path.home() / ".cache" / "nbv-testbin")
    return root / k8s_version().lstrip("v")


def find_binaries() -> tuple[Path, Path]:
    d = testbin_dir()
    etcd, apiserver = d / "etcd", d / "kube-apiserver"
    missing = [p for p in (etcd, apiserver) if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(
            "Kubernetes test binaries missing: "
            + ", ".join(str(p) for p in missing)
            + f"\nBuild them once with:  bash {TESTBIN_SRC / 'build.sh'}"
            + "\n(needs Go >= 1.26 and the Go module proxy; NBV_TESTBIN overrides the cache root)",
            pytrace=False,
        )
    return etcd, apiserver


def kubectl_binary() -> str:
    """The kubectl that build.sh builds beside the API server (the harness
    never depends on one being installed on the machine)."""
    path = testbin_dir() / "kubectl"
    if not os.access(path, os.X_OK):
        pytest.fail(f"kubectl missing: {path}\nBuild it with:  bash {TESTBIN_SRC / 'build.sh'}", pytrace=False)
    return str(path)


# --------------------------------------------------------------------------
# small utilities


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd: list[str], cwd: Path) -> None:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr}")


def make_certs(d: Path) -> dict[str, Path]:
    """A throw-away CA, an apiserver serving cert for 127.0.0.1/localhost and a
    service-account signing key, made with the ``openssl`` CLI (the venv has no
    ``cryptography``). EC P-256 keys: fast to generate."""
    if shutil.which("openssl") is None:
        pytest.fail("the k8s harness needs the openssl CLI to make throw-away certificates", pytrace=False)
    d.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _run(["openssl", "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "7",
          "-subj", "/CN=nbv-test-ca",
          "-addext", "basicConstraints=critical,CA:TRUE",
          "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"], d)
    _run(["openssl", "req", "-new", *ec, "-keyout", "apiserver.key", "-out", "apiserver.csr",
          "-subj", "/CN=kube-apiserver"], d)
    (d / "apiserver.ext").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,IP:10.0.0.1\n"
    )
    _run(["openssl", "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
          "-CAcreateserial", "-days", "7", "-extfile", "apiserver.ext", "-out", "apiserver.crt"], d)
    _run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key"], d)
    _run(["openssl", "ec", "-in", "sa.key", "-pubout", "-out", "sa.pub"], d)
    return {"ca": d / "ca.crt", "cert": d / "apiserver.crt", "key": d / "apiserver.key",
            "sa_key": d / "sa.key", "sa_pub": d / "sa.pub"}


def _tail(path: Path, lines: int = 60) -> str:
    try:
        data = path.read_text(errors="replace").splitlines()
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    return "\n".join(data[-lines:])


def _terminate(proc: subprocess.Popen | None, timeout: float = 20.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


class ApiError(RuntimeError):
    def __init__(self, status: int, body: str, method: str, path: str):
        super().__init__(f"{method} {path} -> HTTP {status}: {body[:2000]}")
        self.status = status
        self.body = body

    def json(self) -> dict:
        try:
            return json.loads(self.body)
        except ValueError:
            return {}


# --------------------------------------------------------------------------
# the control plane


@dataclass(repr=False)
class KubeApiServer:
    """A running etcd + kube-apiserver. Attributes used by tests:

    ``host`` (``https://127.0.0.1:PORT``), ``ca_file``, ``admin_token``,
    ``limited_token`` (user ``alice``, group ``nbv-users``; no permissions
    until :meth:`limited_in_namespace`), ``admin_kubeconfig``,
    ``limited_kubeconfig``, ``log_dir``, ``version``.
    """

    etcd_bin: Path
    apiserver_bin: Path
    work_dir: Path
    log_dir: Path
    version: str
    host: str = ""
    ca_file: str = ""
    admin_token: str = field(default_factory=lambda: secrets.token_hex(24))
    limited_token: str = field(default_factory=lambda: secrets.token_hex(24))
    admin_kubeconfig: str = ""
    limited_kubeconfig: str = ""
    etcd_url: str = ""
    apiserver_port: int = 0
    ready_seconds: float = 0.0  # time from apiserver spawn to /readyz OK (last start)
    _etcd: subprocess.Popen | None = None
    _apiserver: subprocess.Popen | None = None
    _etcd_data: Path | None = None
    _apiserver_args: list[str] = field(default_factory=list)
    _ssl: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        return f"KubeApiServer({self.version} at {self.host}, logs in {self.log_dir})"

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """Verifies the apiserver's serving cert against ``ca_file``."""
        assert self._ssl is not None
        return self._ssl

    # ---- logs ----------------------------------------------------------
    @property
    def etcd_log(self) -> Path:
        return self.log_dir / "etcd.log"

    @property
    def apiserver_log(self) -> Path:
        return self.log_dir / "kube-apiserver.log"

    def log_tails(self, lines: int = 60) -> str:
        return (f"----- {self.etcd_log} (last {lines} lines) -----\n{_tail(self.etcd_log, lines)}\n"
                f"----- {self.apiserver_log} (last {lines} lines) -----\n{_tail(self.apiserver_log, lines)}")

    # ---- lifecycle -----------------------------------------------------
    def start(self) -> None:
        certs = make_certs(self.work_dir / "pki")
        self.ca_file = str(certs["ca"])
        self._ssl = ssl.create_default_context(cafile=self.ca_file)
        self._start_etcd()
        self.apiserver_port = free_port()
        self.host = f"https://127.0.0.1:{self.apiserver_port}"
        tokens = self.work_dir / "tokens.csv"
        tokens.write_text(
            f'{self.admin_token},{ADMIN_USER},uid-{ADMIN_USER},"system:masters"\n'
            f'{self.limited_token},{LIMITED_USER},uid-{LIMITED_USER},"{LIMITED_GROUP}"\n'
        )
        tokens.chmod(0o600)
        self._apiserver_args = [
            str(self.apiserver_bin),
            f"--etcd-servers={self.etcd_url}",
            f"--secure-port={self.apiserver_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--cert-dir={self.work_dir / 'cert-dir'}",
            f"--tls-cert-file={certs['cert']}",
            f"--tls-private-key-file={certs['key']}",
            f"--client-ca-file={certs['ca']}",
            "--authorization-mode=RBAC",
            f"--token-auth-file={tokens}",
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
            "--service-cluster-ip-range=10.0.0.0/24",
            f"--service-account-issuer=https://127.0.0.1:{self.apiserver_port}/",
            f"--service-account-key-file={certs['sa_pub']}",
            f"--service-account-signing-key-file={certs['sa_key']}",
            # nothing on this machine serves the default route's address
            "--endpoint-reconciler-type=none",
            "--v=1",
        ]
        self.start_apiserver()
        self.admin_kubeconfig = self._write_kubeconfig("admin", ADMIN_USER, self.admin_token)
        self.limited_kubeconfig = self._write_kubeconfig("limited", LIMITED_USER, self.limited_token)
        self.install_crd()
        self.install_crd(SCHEDULE_CRD_FILE)

    def _start_etcd(self) -> None:
        client_port, peer_port = free_port(), free_port()
        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
        self._etcd_data = Path(tempfile.mkdtemp(prefix="nbv-etcd-", dir=base))
        self.etcd_url = f"http://127.0.0.1:{client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        args = [
            str(self.etcd_bin),
            "--name=nbv-test",
            f"--data-dir={self._etcd_data}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=nbv-test={peer}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]
        log = open(self.etcd_log, "ab")
        try:
            self._etcd = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, cwd=self.work_dir)
        finally:
            log.close()
        etcd = self._etcd

        def healthy() -> bool:
            if etcd.poll() is not None:
                self._fail_start(f"etcd exited with code {etcd.returncode}")
            try:
                with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as r:
                    return json.loads(r.read()).get("health") == "true"
            except (OSError, ValueError):
                return False

        try:
            wait(healthy, ETCD_BUDGET_S, "etcd's /health", interval=0.1)
        except AssertionError:
            self._fail_start(f"etcd not healthy after {ETCD_BUDGET_S:.0f} s")

    def start_apiserver(self) -> None:
        """(Re)start kube-apiserver on the same port, certs, tokens and etcd;
        returns once /readyz answers ok (budget 90 s)."""
        if self._apiserver is not None and self._apiserver.poll() is None:
            return
        with open(self.apiserver_log, "ab") as log:
            log.write(f"\n===== starting kube-apiserver {time.strftime('%H:%M:%S')} =====\n".encode())
            log.flush()
            t0 = time.monotonic()
            self._apiserver = subprocess.Popen(self._apiserver_args, stdout=log, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, cwd=self.work_dir)
        apiserver, last = self._apiserver, {"answer": ""}

        def ready() -> bool:
            if apiserver.poll() is not None:
                self._fail_start(f"kube-apiserver exited with code {apiserver.returncode}")
            try:
                req = urllib.request.Request(f"{self.host}/readyz")
                with urllib.request.urlopen(req, context=self._ssl, timeout=5) as r:
                    return r.status == 200
            except urllib.error.HTTPError as e:
                last["answer"] = f"HTTP {e.code}: {e.read()[:300]!r}"
            except OSError as e:
                last["answer"] = str(e)
            return False

        try:
            wait(ready, t0 + READY_BUDGET_S - time.monotonic(), "kube-apiserver's /readyz", interval=0.1)
        except AssertionError:
            self._fail_start(f"kube-apiserver /readyz not ok after {READY_BUDGET_S:.0f} s (last: {last['answer']})")
        self.ready_seconds = time.monotonic() - t0

    def stop_apiserver(self) -> None:
        """SIGTERM kube-apiserver and wait for it; etcd keeps running."""
        _terminate(self._apiserver, timeout=30)

    def restart_apiserver(self) -> None:
        self.stop_apiserver()
        self.start_apiserver()

    @property
    def apiserver_running(self) -> bool:
        return self._apiserver is not None and self._apiserver.poll() is None

    def stop(self) -> None:
        _terminate(self._apiserver, timeout=30)
        _terminate(self._etcd, timeout=20)
        if self._etcd_data is not None:
            shutil.rmtree(self._etcd_data, ignore_errors=True)

    def _fail_start(self, why: str) -> None:
        self.stop()
        pytest.fail(f"k8s harness: {why}\n{self.log_tails(80)}", pytrace=False)

    # ---- kubeconfigs and clients ----------------------------------------
    def _write_kubeconfig(self, name: str, user: str, token: str) -> str:
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "nbv-test", "cluster": {
                "server": self.host, "certificate-authority": self.ca_file}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": name, "context": {"cluster": "nbv-test", "user": user}}],
            "current-context": name,
            "preferences": {},
        }
        path = self.work_dir / f"{name}.kubeconfig"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        path.chmod(0o600)
        return str(path)

    async def admin_client(self):
        """A ``kubernetes.aio.client.ApiClient`` as the system:masters user.
        Close it: ``async with await h.admin_client() as api: ...``."""
        from kubernetes.aio.config import new_client_from_config
        return await new_client_from_config(config_file=self.admin_kubeconfig, persist_config=False)

    async def limited_client(self):
        """A ``kubernetes.aio.client.ApiClient`` as ``alice`` (group nbv-users)."""
        from kubernetes.aio.config import new_client_from_config
        return await new_client_from_config(config_file=self.limited_kubeconfig, persist_config=False)

    # ---- synchronous admin REST (fixtures run outside any event loop) ----
    def request(self, method: str, path: str, body: Any = None, token: str | None = None,
                content_type: str = "application/json") -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.host + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token or self.admin_token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=30) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, e.read().decode(errors="replace"), method, path) from None
        return json.loads(raw) if raw else {}

    def install_crd(self, crd_file: Path = CRD_FILE, timeout: float = 30.0) -> dict:
        """Create (or replace) the CRD and wait until it is Established and
        served by discovery."""
        crd = yaml.safe_load(crd_file.read_text())
        name = crd["metadata"]["name"]
        path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        try:
            self.request("POST", path, crd)
        except ApiError as e:
            if e.status != 409:
                raise
            current = self.request("GET", f"{path}/{name}")
            crd["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self.request("PUT", f"{path}/{name}", crd)
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        version = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
        seen: dict = {"conds": {}}

        def established() -> dict | None:
            obj = self.request("GET", f"{path}/{name}")
            seen["conds"] = conds = {c["type"]: c["status"] for c in ((obj.get("status") or {}).get("conditions") or [])}
            if conds.get("Established") == "True":
                try:
                    disc = self.request("GET", f"/apis/{group}/{version}")
                    if any(r["name"] == plural for r in disc.get("resources", [])):
                        return obj
                except ApiError:
                    pass
            return None

        try:
            return wait(established, timeout, f"CRD {name} to be Established", interval=0.1)
        except AssertionError:
            raise TimeoutError(f"CRD {name} not Established after {timeout} s: {seen['conds']}") from None

    def create_namespace(self, name: str | None = None, labels: dict | None = None) -> str:
        name = name or f"nbv-{uuid.uuid4().hex[:10]}"
        self.request("POST", "/api/v1/namespaces",
                     {"apiVersion": "v1", "kind": "Namespace",
                      "metadata": {"name": name, "labels": {"nbv-test": "true", **(labels or {})}}})
        return name

    def limited_in_namespace(self, namespace: str, user: str = LIMITED_USER) -> None:
        """Create the server Role (role.yaml) and a RoleBinding of it to
        ``user`` (default alice) in ``namespace``."""
        role = yaml.safe_load(ROLE_FILE.read_text())
        role["metadata"]["namespace"] = namespace
        rb_base = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
        self.request("POST", f"{rb_base}/roles", role)
        self.request("POST", f"{rb_base}/rolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{role['metadata']['name']}-{user}", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": role["metadata"]["name"]},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        })
        # RBAC is read from the authorizer's informer cache: wait until it applies.
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                  "spec": {"user": user, "groups": [LIMITED_GROUP],
                           "resourceAttributes": {"namespace": namespace, "verb": "list",
                                                  "group": "nbvalidation.dev",
                                                  "resource": "notebookvalidationjobs"}}}
        seen: dict = {}

        def allowed() -> bool:
            seen["review"] = r = self.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
            return bool(r.get("status", {}).get("allowed"))

        try:
            wait(allowed, 10, f"RBAC for {user} in {namespace}", interval=0.05)
        except AssertionError:
            raise TimeoutError(f"RBAC for {user} in {namespace} not effective: {seen['review'].get('status')}") from None


def limited_in_namespace(kube_apiserver: KubeApiServer, namespace: str) -> None:
    """Bind role.yaml's Role to alice in ``namespace`` (see the method)."""
    kube_apiserver.limited_in_namespace(namespace)


# --------------------------------------------------------------------------
# fixtures and hooks


@pytest.fixture(scope="session")
def kube_apiserver(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    """etcd + kube-apiserver for the whole session (sync fixture: usable from
    sync and async tests alike). FAILS when the binaries are missing."""
    etcd_bin, apiserver_bin = find_binaries()
    work = tmp_path_factory.mktemp("k8s")
    logs = work / "logs"
    logs.mkdir()
    h = KubeApiServer(etcd_bin=etcd_bin, apiserver_bin=apiserver_bin, work_dir=work,
                      log_dir=logs, version=k8s_version())
    request.config.stash[_HARNESS_KEY] = h
    try:
        h.start()
        yield h
    finally:
        h.stop()


@pytest.fixture(autouse=True)
def _k8s_apiserver_back_up(request: pytest.FixtureRequest):
    """A test that stopped the API server (and failed before restarting it)
    must not break the tests after it."""
    yield
    if "kube_apiserver" in request.fixturenames:
        h = request.config.stash.get(_HARNESS_KEY, None)
        if h is not None and h._etcd is not None and h._etcd.poll() is None and not h.apiserver_running:
            h.start_apiserver()


@pytest.fixture
def k8s_namespace(kube_apiserver: KubeApiServer) -> str:
    """A fresh namespace per test. Not deleted: without a namespace controller
    deletion never finishes, and the etcd data is thrown away anyway."""
    return kube_apiserver.create_namespace()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that used the harness carries the tails of its logs in its
    report (a section travels from a pytest-xdist worker to the summary; the
    controller has no harness of its own)."""
    rep = yield
    h = item.config.stash.get(_HARNESS_KEY, None)
    if rep.failed and h is not None and "kube_apiserver" in getattr(item, "fixturenames", ()):
        rep.sections.append(("kube-apiserver harness logs",
                             f"{h.log_tails(40)}\n(full logs in {h.log_dir})"))
    return rep


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    h = config.stash.get(_HARNESS_KEY, None)
    if h is not None and os.environ.get("NBV_K8S_LOGS") == "always":
        terminalreporter.write_sep("=", "kube-apiserver harness logs")
        terminalreporter.write_line(h.log_tails(80))
        terminalreporter.write_line(f"(full logs in {h.log_dir})")


# --------------------------------------------------------------------------
# fake kubelet / Job controller (async; take a kubernetes.aio ApiClient)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _obj(api, x: Any) -> dict:
    """pydantic model or dict -> plain dict with the API's camelCase keys."""
    if isinstance(x, dict):
        return x
    return api.sanitize_for_serialization(x)


MERGE = "application/merge-patch+json"


async def _pod_and_node(api, ns: str, name: str, node: str) -> tuple[Any, dict]:
    from kubernetes.aio import client

    core = client.CoreV1Api(api)
    pod = _obj(api, await core.read_namespaced_pod(name, ns))
    if not pod.get("spec", {}).get("nodeName"):
        # (the apiserver answers a Status, which the typed method cannot parse)
        resp = await core.create_namespaced_pod_binding_without_preload_content(
            name, ns, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                       "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
        body = await resp.read()
        if resp.status >= 300:
            from kubernetes.aio.client.exceptions import ApiException
            raise ApiException(status=resp.status, reason=resp.reason, body=body.decode(errors="replace"))
        pod = _obj(api, await core.read_namespaced_pod(name, ns))
    return core, pod


def _conditions(now: str, ready: bool, reason: str | None) -> list[dict]:
    def c(t: str, ok: bool, why: str | None = None) -> dict:
        d = {"type": t, "status": "True" if ok else "False", "lastProbeTime": None,
             "lastTransitionTime": now}
        if why:
            d["reason"] = why
        return d

    return [
        c("PodReadyToStartContainers", True),
        c("Initialized", True, reason if not ready and reason == "PodCompleted" else None),
        c("Ready", ready, None if ready else reason),
        c("ContainersReady", ready, None if ready else reason),
        c("PodScheduled", True),
    ]


def _container_status(ctr: dict, state: dict, ready: bool) -> dict:
    cid = f"containerd://{uuid.uuid4().hex}"
    for v in state.values():
        if isinstance(v, dict) and "containerID" in v:
            v["containerID"] = cid
    return {
        "name": ctr["name"],
        "image": ctr.get("image", ""),
        "imageID": f"{ctr.get('image', 'image')}@sha256:{'0' * 64}",
        "containerID": cid,
        "ready": ready,
        "started": ready,
        "restartCount": 0,
        "state": state,
        "lastState": {},
    }


async def start_pod(api, ns: str, name: str, node: str = "fake-node") -> dict:
    """Play scheduler + kubelet: bind the pod to ``node`` and report it
    Running with every container running. Returns the pod as a dict."""
    core, pod = await _pod_and_node(api, ns, name, node)
    now = _now()
    statuses = [_container_status(c, {"running": {"startedAt": now}}, True)
                for c in pod["spec"]["containers"]]
    body = {"status": {
        "phase": "Running", "hostIP": "10.0.0.200", "hostIPs": [{"ip": "10.0.0.200"}],
        "podIP": "10.0.1.10", "podIPs": [{"ip": "10.0.1.10"}], "startTime": now,
        "conditions": _conditions(now, True, None), "containerStatuses": statuses,
        "qosClass": pod.get("status", {}).get("qosClass", "BestEffort"),
    }}
    return _obj(api, await core.patch_namespaced_pod_status(name, ns, body, _content_type=MERGE))


async def complete_pod(api, ns: str, name: str, exit_code: int = 0, message: str = "",
                       container: str = "runner", node: str = "fake-node") -> dict:
    """Play scheduler + kubelet for a finished pod: bind it (if unbound), then
    patch pods/status to phase Succeeded (exit 0) or Failed, with
    ``containerStatuses[].state.terminated`` = {exitCode, reason Completed/Error,
    message (the termination message, e.g. a digest), startedAt, finishedAt}.
    ``container`` gets ``exit_code``/``message``; any other container exits 0."""
    core, pod = await _pod_and_node(api, ns, name, node)
    names = [c["name"] for c in pod["spec"]["containers"]]
    if container not in names:
        raise ValueError(f"pod {ns}/{name} has no container {container!r} (has {names})")
    old = pod.get("status", {})
    started = old.get("startTime") or _now()
    now = _now()
    statuses = []
    for ctr in pod["spec"]["containers"]:
        code = exit_code if ctr["name"] == container else 0
        term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "startedAt": started, "finishedAt": now, "containerID": ""}
        if ctr["name"] == container and message:
            term["message"] = message
        statuses.append(_container_status(ctr, {"terminated": term}, False))
    body = {"status": {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "hostIP": "10.0.0.200", "hostIPs": [{"ip": "10.0.0.200"}],
        "podIP": "10.0.1.10", "podIPs": [{"ip": "10.0.1.10"}],
        "startTime": started,
        "conditions": _conditions(now, False, "PodCompleted"),
        "containerStatuses": statuses,
        "qosClass": old.get("qosClass", "BestEffort"),
    }}
    return _obj(api, await core.patch_namespaced_pod_status(name, ns, body, _content_type=MERGE))


# What the 1.35 Job controller writes for a single-pod Job, and what the
# apiserver's Job status validation demands, found by trial against the real
# kube-apiserver v1.35.4 (tests/test_k8s_harness.py::test_job_status_validation_rules).
# complete_job writes three merge patches to jobs/status:
#   1. pod created:   startTime, active=1, ready=0, terminating=0, uncountedTerminatedPods={}
#   2. pod finished:  active=0, ready=0, succeeded=1 (failed=1) and the interim condition
#                     SuccessCriteriaMet=True reason CompletionsReached
#                     (FailureTarget=True reason BackoffLimitExceeded)
#   3. terminal:      interim condition + Complete=True and completionTime
#                     (Failed=True, and NO completionTime)
# Rejected with 422 (message as the apiserver words it):
#   - Complete without SuccessCriteriaMet: "status.conditions: cannot set Complete=True
#     condition without the SuccessCriteriaMet=true condition"
#   - Failed without FailureTarget: "cannot set Failed=True condition without the
#     FailureTarget=true condition"
#   - Complete without completionTime: "status.completionTime: Required value: completionTime
#     is required for Complete jobs"
#   - completionTime without Complete=True (running or Failed Job): "cannot set
#     completionTime when there is no Complete=True condition"
#   - a finished Job with active>0 ("active>0 is invalid for finished job"), without
#     startTime ("startTime is required for finished job"), or with non-empty
#     uncountedTerminatedPods ("must be empty for finished job")
#   - ready > active ("cannot set more ready pods than active")
# Accepted: SuccessCriteriaMet+Complete in one write; FailureTarget while active>0;
# SuccessCriteriaMet before succeeded reaches completions (not cross-checked).
# Note the API omits zero counts (active=0 reads back as absent).


def _job_condition(ctype: str, reason: str, message: str, now: str) -> dict:
    return {"type": ctype, "status": "True", "lastProbeTime": now, "lastTransitionTime": now,
            "reason": reason, "message": message}


async def complete_job(api, ns: str, name: str, succeeded: bool = True, message: str | None = None,
                       reason: str | None = None) -> dict:
    """Play the Job controller for a finished single-pod Job: patch
    jobs/status in the order the 1.35 controller writes it (see the comment
    above). Returns the final Job as a dict."""
    from kubernetes.aio import client

    batch = client.BatchV1Api(api)
    job = _obj(api, await batch.read_namespaced_job(name, ns))
    status = job.get("status") or {}
    now = _now()
    if not status.get("startTime"):
        job = _obj(api, await batch.patch_namespaced_job_status(name, ns, {"status": {
            "startTime": now, "active": 1, "ready": 0, "terminating": 0,
            "uncountedTerminatedPods": {}}}, _content_type=MERGE))
        status = job.get("status") or {}
    if succeeded:
        interim, final = "SuccessCriteriaMet", "Complete"
        reason = reason or "CompletionsReached"
        message = message if message is not None else "Reached expected number of succeeded pods"
        counts = {"succeeded": (status.get("succeeded") or 0) + 1}
    else:
        interim, final = "FailureTarget", "Failed"
        reason = reason or "BackoffLimitExceeded"
        message = message if message is not None else "Job has reached the specified backoff limit"
        counts = {"failed": (status.get("failed") or 0) + 1}
    kept = [c for c in status.get("conditions") or [] if c.get("type") not in (interim, final)]
    conds = kept + [_job_condition(interim, reason, message, now)]
    job = _obj(api, await batch.patch_namespaced_job_status(name, ns, {"status": {
        "active": 0, "ready": 0, "terminating": 0, **counts, "conditions": conds}},
        _content_type=MERGE))
    conds = conds + [_job_condition(final, reason, message, now)]
    final_status: dict = {"conditions": conds}
    if succeeded:
        final_status["completionTime"] = now
    return _obj(api, await batch.patch_namespaced_job_status(name, ns, {"status": final_status},
                                                        _content_type=MERGE))
