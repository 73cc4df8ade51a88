"""A webhook receiver on loopback (a real threaded HTTP server), for the notification tests:
it records what it is sent, and checks a delivery's signature as docs/watching.md tells a
receiver to. A pytest plugin (tests/conftest.py): the fixture ``receiver`` is one, closed after."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

from jupyter_nbvalidation.service.webhook import SIGNATURE_HEADER


class Receiver:
    """A webhook receiver on loopback: answers each POST with the next of ``statuses`` (then 200)
    and records the ones it answered 2xx (body, headers) in ``got``, every try in ``tries``."""

    def __init__(self, statuses: list[int] | None = None):
        self.statuses = list(statuses or [])
        self.got: list[tuple[dict, dict]] = []
        self.raws: list[bytes] = []  # the bodies of got, as sent
        self.tries = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                outer.tries += 1
                status = outer.statuses.pop(0) if outer.statuses else 200
                if status < 300:
                    outer.got.append((json.loads(body), {k.lower(): v for k, v in self.headers.items()}))
                    outer.raw = body
                    outer.raws.append(body)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def verified(body: bytes, headers: dict, key: str) -> bool:
    """How a receiver checks a delivery (docs/watching.md): the HMAC of the raw body."""
    expected = "sha256=" + hmac.new(key.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, headers[SIGNATURE_HEADER.lower()])


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()
