"""A real JupyterHub on loopback for the team-service tests: jupyterhub (PyPI) with
configurable-http-proxy (npm), DummyAuthenticator, SimpleLocalProcessSpawner (each user's
server a process of its own, started by the Hub), and the validation service managed by the
Hub, registered with the lines `jupyter nbvalidation hub-config` prints (exec'd here)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from helpers import wait

from jupyter_nbvalidation.hub.config import hub_config

REPO = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "nbv-test-admin-service-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def chp_command() -> str:
    """configurable-http-proxy: $NBV_CHP, else the one tools/setup-and-test.sh installs into the venv's
    node prefix, else on PATH."""
    candidates = [os.environ.get("NBV_CHP", ""),
                  str(Path(sys.prefix) / "node" / "node_modules" / ".bin" / "configurable-http-proxy"),
                  str(REPO / ".venv" / "node" / "node_modules" / ".bin" / "configurable-http-proxy"),
                  shutil.which("configurable-http-proxy") or ""]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    raise AssertionError("configurable-http-proxy is not installed: tools/setup-and-test.sh installs it "
                         "(npm install --prefix .venv/node configurable-http-proxy), or set NBV_CHP")


@dataclass
class Hub:
    base: Path
    port: int
    service_port: int
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.base / "hub.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def service_url(self) -> str:  # the service, straight (not through the proxy)
        return f"http://127.0.0.1:{self.service_port}/services/nbvalidation/"

    def request(self, method: str, url: str, token: str | None = None, body: Any = None,
                timeout: float = 60, headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
        """(status, JSON body or text, headers); never raises for an HTTP status."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url if url.startswith("http") else self.url + url, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", f"token {token}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw, status, hdrs = resp.read(), resp.status, resp.headers
        except urllib.error.HTTPError as e:
            raw, status, hdrs = e.read(), e.code, e.headers
        text = raw.decode("utf-8", "replace")
        try:
            return status, json.loads(text) if text else None, hdrs
        except ValueError:
            return status, text, hdrs

    def api(self, method: str, path: str, body: Any = None) -> Any:
        status, answer, _ = self.request(method, "/hub/api/" + path, ADMIN_TOKEN, body)
        assert status < 400, f"{method} {path}: {status} {answer}\n{self.tail()}"
        return answer

    def tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def token(self, user: str, scopes: list[str] | None = None) -> str:
        body: dict[str, Any] = {"note": "nbvalidation test"}
        if scopes is not None:
            body["scopes"] = scopes
        return str(self.api("POST", f"users/{user}/tokens", body)["token"])

    def start_server(self, user: str, timeout: float = 90) -> None:
        status, answer, _ = self.request("POST", f"/hub/api/users/{user}/server", ADMIN_TOKEN, {})
        assert status in (201, 202, 400), f"spawn {user}: {status} {answer}"

        def ready() -> bool:
            server = (self.api("GET", f"users/{user}").get("servers") or {}).get("")
            return bool(server and server.get("ready"))

        wait(ready, timeout, lambda: f"{user}'s server to start:\n{self.tail()}")

    def stop(self) -> None:
        if self.proc is None:
            return
        for user in ("alice", "bob"):
            try:
                self.request("DELETE", f"/hub/api/users/{user}/server", ADMIN_TOKEN, timeout=20)
            except OSError:
                pass
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        # the proxy, the service and the users' servers are in the Hub's process group (its own
        # session): whatever the Hub's cleanup left (a Hub that failed at start) ends with it
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc = None


def write_config(base: Path, port: int, service_port: int, data_dir: Path, quotas: list[str], more: str = "") -> Path:
    hub_port, proxy_api = free_port(), free_port()
    homes = base / "home"
    for user in ("alice", "bob", "carol", "dave"):
        (homes / user).mkdir(parents=True, exist_ok=True)
    # a managed service gets only the Hub's env_keep: this machine's way to the package index (its CA
    # files, pip's settings, a proxy) is passed on, as a hub's admin would (the docs say so)
    passed = {k: v for k, v in os.environ.items()
              if re.search(r"(?i)proxy|cert|ssl|ca_bundle|^pip_|^uv_|^xdg_cache_home$|^home$", k)}
    lines = hub_config("local", f"http://127.0.0.1:{service_port}", "nbvalidation", str(data_dir), allow_root=True,
                       python=sys.executable)
    # quotas of this test, passed to the managed service's command (its Jupyter server options)
    extra = "".join(f"c.JupyterHub.services[-1]['command'] += {[f'--server-option={q}' for q in quotas]!r}\n"
                    if quotas else "")
    config = f"""
import sys
c = get_config()  # noqa
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api}"
c.ConfigurableHTTPProxy.command = [{chp_command()!r}]
c.ConfigurableHTTPProxy.pid_file = {str(base / "proxy.pid")!r}
c.JupyterHub.db_url = "sqlite:///{base / "jupyterhub.sqlite"}"
c.JupyterHub.cookie_secret_file = {str(base / "cookie_secret")!r}
c.JupyterHub.pid_file = {str(base / "hub.pid")!r}
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = "nbv-test-password"
c.Authenticator.allowed_users = {{"alice", "bob", "carol", "dave"}}
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = {str(homes)!r} + "/{{username}}"
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
c.Spawner.args = ["--allow-root", "--ServerApp.jpserver_extensions={{'jupyter_nbvalidation': True}}"]
c.Spawner.start_timeout = 90
c.Spawner.http_timeout = 90
c.JupyterHub.cleanup_servers = True
c.JupyterHub.load_roles = [{{"name": "tester", "scopes": ["admin:users", "admin:servers", "tokens",
                                                        "access:services"], "services": ["tester"]}}]
c.JupyterHub.services = [{{"name": "tester", "api_token": {ADMIN_TOKEN!r}}}]
exec({lines!r})
c.JupyterHub.load_roles[-1]["users"] = ["dave"]  # the service's admin (role nbvalidation-admin)
c.JupyterHub.services[-1]["environment"] = {passed!r}
{extra}{more}
"""
    path = base / "jupyterhub_config.py"
    path.write_text(config)
    return path


def start_hub(base: Path, quotas: list[str] | None = None, timeout: float = 90, more: str = "") -> Hub:
    """A Hub with the service; ``more``: lines of the Hub's config after the rest (a test's own)."""
    base.mkdir(parents=True, exist_ok=True)
    hub = Hub(base, free_port(), free_port())
    config = write_config(base, hub.port, hub.service_port, base / "service-data", quotas or [], more)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.pop("NBVALIDATION_SERVICE_URL", None)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    with open(hub.log, "wb") as log:
        hub.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=base,
                                    stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_up(hub, timeout)
    except BaseException:
        hub.stop()
        raise
    return hub


@contextlib.contextmanager
def hub_with_servers(base: Path, users: tuple[str, ...] = ("alice", "bob", "carol"), *,
                     quotas: list[str] | None = None, more: str = "") -> Iterator[Hub]:
    """``start_hub``, each user's server started and ``hub.tokens[user]`` made; stopped after."""
    hub = start_hub(base, quotas=quotas, more=more)
    try:
        for user in users:
            hub.start_server(user)
        hub.tokens = {user: hub.token(user) for user in users}  # type: ignore[attr-defined]
        yield hub
    finally:
        hub.stop()


def wait_up(hub: Hub, timeout: float) -> None:
    proc = hub.proc
    assert proc is not None

    def up() -> bool:
        assert proc.poll() is None, f"the Hub exited ({proc.returncode}):\n{hub.tail()}"
        try:  # through the proxy: the Hub's API and the service's route both added
            return hub.request("GET", "/hub/api/", ADMIN_TOKEN, timeout=5)[0] == 200 and hub.request(
                "GET", "/services/nbvalidation/nbvalidation/api/v1/health", ADMIN_TOKEN, timeout=5)[0] == 200
        except OSError:
            return False

    wait(up, timeout, lambda: f"the Hub and its service to start:\n{hub.tail()}")
