"""A small synchronous REST client for the CLI and the magic (never used
inside the server), plus discovery of running Jupyter servers from their
runtime files. The jobs' operations over it, in the shape of every client
(clients/base.py), are clients/remote.py's ``Remote``."""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from jupyter_nbvalidation.clients.base import ClientError

PREFIX = "nbvalidation/api/v1"


def running_servers() -> list[dict[str, Any]]:
    """Jupyter servers this user has running (runtime files), newest first."""
    # the runtime files are read here, as jupyter_server's list_running_servers does:
    # importing jupyter_server.serverapp costs seconds (jupyter_events -> jsonschema
    # format checkers) on every CLI call
    from jupyter_core.paths import jupyter_runtime_dir  # deferred: start-up time of the CLI (--server, --local)

    runtime = Path(jupyter_runtime_dir())
    try:
        names = sorted(os.listdir(runtime))
    except OSError:
        return []
    servers = []
    for file_name in names:
        if not re.fullmatch(r"jpserver-(.+)\.json", file_name):
            continue
        try:
            info = json.loads((runtime / file_name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # being written, or unreadable
        if isinstance(info, dict) and isinstance(info.get("pid"), int) and _pid_alive(info["pid"]):
            servers.append(info)
    servers.sort(key=lambda s: s.get("pid", 0), reverse=True)
    return servers


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, someone else's
    except OSError:
        return False
    return True


def find_server(path: str | None = None) -> dict[str, Any] | None:
    """The running server whose root dir contains ``path`` (or any, when no path)."""
    target = Path(path).resolve() if path else None
    for info in running_servers():
        root = Path(info.get("root_dir") or info.get("notebook_dir") or "/").resolve()
        if target is None or target == root or root in target.parents:
            if _reachable(info):
                return info
    return None


def _reachable(info: dict[str, Any]) -> bool:
    try:
        ServerClient.from_info(info).request("GET", "health", timeout=3)
        return True
    except ClientError as e:
        return e.status is not None and e.status != 404
    except Exception:
        return False


class ServerClient:
    def __init__(self, url: str, token: str = "", root_dir: str | None = None):
        self.url = url.rstrip("/") + "/"
        self.token = token
        self.root_dir = root_dir

    @classmethod
    def from_info(cls, info: dict[str, Any]) -> "ServerClient":
        return cls(info["url"], info.get("token", ""), info.get("root_dir"))

    def request(self, method: str, path: str, body: Any = None, *, params: dict[str, Any] | None = None,
                timeout: float = 30, raw: bool = False) -> Any:
        """A call to this extension's API (``nbvalidation/api/v1/<path>``)."""
        return self.request_root(method, PREFIX + "/" + path.lstrip("/"), body, params=params,
                                 timeout=timeout, raw=raw)

    def request_root(self, method: str, path: str, body: Any = None, *, params: dict[str, Any] | None = None,
                     timeout: float = 30, raw: bool = False) -> Any:
        """A call to any server API path relative to the base URL (e.g. ``api/sessions``)."""
        url = self.url + path.lstrip("/")
        if params:
            url += "?" + urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        data = json.dumps(body).encode() if body is not None else None
        payload, _ = self._send(method, url, data, timeout)
        if raw:
            return payload.decode("utf-8", "replace")
        return json.loads(payload) if payload else None

    def build_log(self, name: str, offset: int = 0, timeout: float = 30) -> tuple[bytes, bool, int]:
        """``GET jobs/{name}/buildlog?offset=N``: (the bytes from ``offset``, whether the
        log is complete, the offset to ask next)."""
        url = self.url + PREFIX + f"/jobs/{urllib.parse.quote(name, safe='')}/buildlog?offset={int(offset)}"
        data, headers = self._send("GET", url, None, timeout)
        complete = headers.get("X-Build-Log-Complete", "true") == "true"
        nxt = int(headers.get("X-Build-Log-Next-Offset") or offset + len(data))
        return data, complete, nxt

    def _send(self, method: str, url: str, data: bytes | None, timeout: float) -> tuple[bytes, Any]:
        """One HTTP request with the token: (the body, the response headers); an HTTP error becomes a
        ClientError carrying the API's error message and field."""
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"token {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - loopback server URL
                return resp.read(), resp.headers
        except urllib.error.HTTPError as e:
            text = e.read().decode("utf-8", "replace")
            try:
                err = json.loads(text)["error"]
                raise ClientError(err.get("message") or text, e.code, err.get("field")) from None
            except (ValueError, KeyError, TypeError):
                raise ClientError(f"HTTP {e.code}: {text[:300]}", e.code) from None
        except urllib.error.URLError as e:
            raise ClientError(f"cannot reach the Jupyter server at {self.url}: {e.reason}") from None

    def api_path(self, local_path: str) -> str:
        """A filesystem path as the server's root-relative API path."""
        root = Path(self.root_dir or os.getcwd()).resolve()
        full = Path(local_path).resolve()
        try:
            return full.relative_to(root).as_posix()
        except ValueError:
            raise ClientError(f"{local_path} is outside the Jupyter server's root directory {root}") from None
