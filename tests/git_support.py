"""A real git repository made in a test and served on loopback: ``file://`` and an HTTP
server that runs ``git http-backend`` (CGI) per request, with HTTP basic auth when asked.
Real parts: the fetches in the tests go through git's own smart HTTP protocol."""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from helpers import write_notebook

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


class Repo:
    """A working repository (``work``) and the bare one it pushes to (``bare``: what is served)."""

    def __init__(self, root: Path):
        self.work, self.bare = root / "work", root / "served" / "repo.git"
        self.work.mkdir(parents=True)
        self.bare.parent.mkdir(parents=True)
        git(self.work, "init", "-q", "-b", "main")
        subprocess.run(["git", "init", "-q", "--bare", str(self.bare)], check=True, env={**os.environ, **GIT_ENV})
        git(self.bare, "config", "http.receivepack", "false")
        git(self.work, "remote", "add", "origin", str(self.bare))

    @property
    def url(self) -> str:
        return self.bare.as_uri()

    def notebook(self, rel: str, sources: list[str]) -> None:
        write_notebook(self.work / rel, sources)

    def write(self, rel: str, text: str) -> None:
        (self.work / rel).parent.mkdir(parents=True, exist_ok=True)
        (self.work / rel).write_text(text)

    def commit(self, message: str, branch: str = "main") -> str:
        git(self.work, "add", "-A")
        git(self.work, "commit", "-q", "--allow-empty", "-m", message)
        git(self.work, "push", "-q", "origin", f"HEAD:refs/heads/{branch}")
        return git(self.work, "rev-parse", "HEAD")

    def tag(self, name: str) -> None:
        git(self.work, "tag", "-a", name, "-m", name)
        git(self.work, "push", "-q", "origin", f"refs/tags/{name}")


class GitHTTP:
    """``git http-backend`` behind a threaded HTTP server on 127.0.0.1, serving the folder
    ``root`` (``http://127.0.0.1:PORT/<repo>.git``); ``auth=(user, password)`` asks for them
    (basic auth), and ``requests`` lists (method, path, Authorization header given?)."""

    def __init__(self, root: Path, auth: tuple[str, str] | None = None):
        self.root, self.auth = root, auth
        self.requests: list[tuple[str, str, bool]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._cgi()

            def do_POST(self) -> None:
                self._cgi()

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = b""
                    while True:
                        size = int(self.rfile.readline().strip() or b"0", 16)
                        if size == 0:
                            self.rfile.readline()
                            return out
                        out += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _cgi(self) -> None:
                given = self.headers.get("Authorization")
                outer.requests.append((self.command, self.path, given is not None))
                body = self._body()
                user = ""
                if outer.auth is not None:
                    want = "Basic " + base64.b64encode(f"{outer.auth[0]}:{outer.auth[1]}".encode()).decode()
                    if given != want:
                        self.send_response(401)
                        self.send_header("WWW-Authenticate", 'Basic realm="git"')
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    user = outer.auth[0]
                path, _, query = self.path.partition("?")
                env = {"PATH": os.environ["PATH"], "GIT_PROJECT_ROOT": str(outer.root), "GIT_HTTP_EXPORT_ALL": "1",
                       "PATH_INFO": path, "QUERY_STRING": query, "REQUEST_METHOD": self.command,
                       "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
                       "REMOTE_USER": user, "REMOTE_ADDR": "127.0.0.1", "GATEWAY_INTERFACE": "CGI/1.1",
                       "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
                for header, var in (("Git-Protocol", "HTTP_GIT_PROTOCOL"),
                                    ("Content-Encoding", "HTTP_CONTENT_ENCODING")):
                    if self.headers.get(header):
                        env[var] = self.headers[header]
                proc = subprocess.run(["git", "http-backend"], input=body, capture_output=True, env=env, timeout=60)
                head, _, payload = proc.stdout.partition(b"\r\n\r\n")
                if not _:
                    head, _, payload = proc.stdout.partition(b"\n\n")
                status, headers = 200, []
                for line in head.decode("latin-1").splitlines():
                    name, _, value = line.partition(":")
                    if name.lower() == "status":
                        status = int(value.strip().split()[0])
                    elif name:
                        headers.append((name, value.strip()))
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, name: str = "repo.git") -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def __enter__(self) -> "GitHTTP":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
