"""One network per run (runner/netns.py), at the sandbox's launcher: what a command run by it
can reach with {"network": {"mode": "none"}}, with slirp4netns ({"mode": "user"}), and without
a network entry (the host's network: the control), and that the user-mode network ends with
the launcher however it ends. The same through a server's runs: tests/security/test_network.py."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers import wait

import jupyter_nbvalidation.runner.netns as netns
import jupyter_nbvalidation.runner.sandbox as sandbox
from jupyter_nbvalidation.runner.cli import _ArgumentError, _read_sandbox_file

TOOL = netns.find_tool()

# what the command sees: its interfaces (its own /proc/net/dev), its loopback, a default route,
# the host's loopback listener (127.0.0.1 and the user-mode gateway), an HTTP server outside
PROBE = r"""
import json, socket, sys, urllib.request
S = json.loads(sys.argv[1])
R = {"interfaces": sorted(ln.split(":")[0].strip() for ln in open("/proc/net/dev").read().splitlines()[2:])}
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); s.listen(1)
    with socket.create_connection(s.getsockname(), timeout=5):
        R["own_loopback"] = True
for host in ("127.0.0.1", "10.0.2.2"):
    try:
        socket.create_connection((host, S["loopback_port"]), timeout=2).close()
        R["host_loopback_" + host] = "reached"
    except OSError as e:
        R["host_loopback_" + host] = f"{type(e).__name__}: {e}"
try:
    R["outside"] = urllib.request.urlopen(S["url"], timeout=10).read().decode()
except OSError as e:
    R["outside"] = f"{type(e).__name__}: {e}"
print(json.dumps(R))
"""


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def world():
    """A listener on the host's loopback, an HTTP server on a non-loopback address of this host."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True,
                         timeout=30).stdout
    found = [line.split()[3].split("/")[0] for line in out.splitlines() if len(line.split()) > 3]
    assert found, f"this host has no IPv4 address but loopback: {out!r}"
    http = ThreadingHTTPServer((found[0], 0), _Hello)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    with socket.socket() as loopback:
        loopback.bind(("127.0.0.1", 0))
        loopback.listen(8)
        host, port = http.server_address[:2]
        yield {"loopback_port": loopback.getsockname()[1], "url": f"http://{host}:{port}/"}
    http.shutdown()


def launch(tmp_path, network: dict | None, argv: list[str], marker: str, **kw) -> subprocess.Popen:
    config = tmp_path / "sandbox.json"
    # what a kernel's launcher is given (a root launcher's kernel runs as nobody: it sees its
    # interpreter through the idmapped mounts of these, not through root's 0700 folders)
    mounts = sandbox.kernel_mounts(hide=[], show=[], python=sys.executable, temp_dir=str(tmp_path))
    config.write_text(json.dumps({"mounts": mounts, **({"network": network} if network else {})}))
    return subprocess.Popen(sandbox.wrap(argv, str(config)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "NBV_NETNS_TEST": marker}, start_new_session=True, **kw)


def marked(marker: str) -> list[str]:
    """The live processes started with NBV_NETNS_TEST=marker: what the launcher left."""
    needle = f"\0NBV_NETNS_TEST={marker}\0".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in b"\0" + f.read():
                    with open(f"/proc/{pid}/cmdline", "rb") as c:
                        command = c.read().replace(b"\0", b" ").decode(errors="replace")
                    found.append(f"{pid}: {command[:120]}")
        except OSError:
            continue
    return found


def probe(tmp_path, network: dict | None, world: dict) -> dict:
    marker = secrets.token_hex(8)
    proc = launch(tmp_path, network, [sys.executable, "-I", "-S", "-c", PROBE, json.dumps(world)], marker)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert marked(marker) == [], "the launcher left processes behind"
    return json.loads(out.decode().strip().splitlines()[-1])


def test_none_is_its_own_loopback_only(tmp_path, world):
    seen = probe(tmp_path, {"mode": "none"}, world)
    assert seen["interfaces"] == ["lo"] and seen["own_loopback"] is True, seen
    assert seen["host_loopback_127.0.0.1"].startswith("ConnectionRefusedError"), seen
    assert "unreachable" in seen["host_loopback_10.0.2.2"] and "unreachable" in seen["outside"], seen


@pytest.mark.skipif(TOOL is None, reason="no slirp4netns (tools/setup-and-test.sh installs it)")
def test_user_reaches_out_but_not_the_host_loopback(tmp_path, world):
    seen = probe(tmp_path, {"mode": "user", **(TOOL or {})}, world)
    assert seen["interfaces"] == ["lo", netns.TAP] and seen["own_loopback"] is True, seen
    assert seen["outside"] == "hello", seen
    assert seen["host_loopback_127.0.0.1"].startswith("ConnectionRefusedError"), seen
    # --disable-host-loopback: the gateway does not lead to the host's loopback
    assert seen["host_loopback_10.0.2.2"] != "reached", seen


def test_the_host_network_is_the_control(tmp_path, world):
    seen = probe(tmp_path, None, world)
    assert seen["host_loopback_127.0.0.1"] == "reached" and seen["outside"] == "hello", seen
    assert len(seen["interfaces"]) > 1, seen


@pytest.mark.skipif(TOOL is None, reason="no slirp4netns (tools/setup-and-test.sh installs it)")
@pytest.mark.parametrize("how", ["kernel-group", "launcher-only"])
def test_the_user_mode_network_ends_with_a_killed_launcher(tmp_path, how):
    """SIGKILL to the kernel's process group (as jupyter_client kills a kernel), or to the
    launcher alone: slirp4netns ends too (its exit pipe closes), nothing is left."""
    marker = secrets.token_hex(8)
    proc = launch(tmp_path, {"mode": "user", **(TOOL or {})},
                  [sys.executable, "-I", "-S", "-c", "print('up', flush=True); import time; time.sleep(300)"], marker)
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    assert any(netns.TOOLS[0] in p for p in marked(marker)), marked(marker)
    if how == "kernel-group":
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    wait(lambda: not marked(marker), 15, lambda: f"what the launcher left: {marked(marker)}")


def test_a_user_mode_network_that_fails_is_named_and_nothing_runs(tmp_path):
    marker = secrets.token_hex(8)
    flag = tmp_path / "ran"
    proc = launch(tmp_path, {"mode": "user", "tool": "slirp4netns", "path": "/bin/false"},
                  [sys.executable, "-c", f"open({str(flag)!r}, 'w')"], marker)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 125 and "slirp4netns (/bin/false) exited with 1" in err.decode(), err
    assert not flag.exists() and marked(marker) == []


@pytest.mark.parametrize("network", [{"mode": "bridge"}, {"mode": "user", "tool": "pasta"},
                                     {"mode": "user", "path": "relative/slirp"}, {"mode": "none", "x": 1}, "none"])
def test_the_runner_refuses_a_network_it_does_not_know(tmp_path, network):
    path = tmp_path / "sandbox.json"
    path.write_text(json.dumps({"hide": [], "network": network}))
    with pytest.raises(_ArgumentError, match="network must be"):
        _read_sandbox_file(str(path))
    path.write_text(json.dumps({"hide": [], "network": {"mode": "none"}}))
    assert _read_sandbox_file(str(path))["network"] == {"mode": "none"}
