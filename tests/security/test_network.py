"""Issue 40, "one network per run" (attack 6, and attack 5's way in through the network), each
as the attacker's notebook through a real `jupyter server` with its default settings
(LocalBackend.network auto: a network namespace per run, outbound through slirp4netns).

- attack 6: alice's run opens a listener on 127.0.0.1 and waits; bob's run connects to it.
  Blocked: bob's connection is refused, and alice's run (the victim) accepted nothing and
  gets its own clean verdict.
- attack 5, the network part: a run that reads nothing looks for what listens (its
  /proc/net/tcp) and connects to the Jupyter server's port and a kernel's ports on the
  host's loopback (a kernel of the server, on TCP as Jupyter starts them), directly and
  through the user-mode network's gateway, and to another run's kernel channels (their
  ipc:// sockets, by path). Blocked: it sees no listener and every connection is refused;
  the other run, running meanwhile, gets its own verdict.
- what still works: outbound network (an HTTP server on a non-loopback address of this
  host stands for "the outside") with auto, and none of it with LocalBackend.network none.

Each attack runs also with LocalBackend.network host (today's behaviour, the control): there
it goes through, so the notebooks would see a leak."""

from __future__ import annotations

import json
import socket
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import ServerProcess
from helpers import NOBUILD, detected_health, explain, submit, wait, wait_all, write_notebook


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(tmp_path, mode: str) -> ServerProcess:
    """A server with LocalBackend.network ``mode`` (auto: given as no option, the default)."""
    server = ServerProcess(tmp_path, extra_args=[] if mode == "auto" else [f"--LocalBackend.network={mode}"])
    server.start()
    return server


def check_health(server: ServerProcess, mode: str) -> dict:
    """/health's sandbox.network as ``mode`` makes it; the host's network is warned about at start."""
    sandbox = detected_health(server.client())["sandbox"]
    network = sandbox["network"]
    assert sandbox["enabled"] is True, sandbox
    if mode == "host":
        assert network["isolated"] is False and network["outbound"] == "host", sandbox
        assert "loopback" in network["reason"], sandbox
        assert "network namespace" not in sandbox["uses"], sandbox
        log = server.log_path.read_text(errors="replace")
        assert "nbvalidation: host (LocalBackend.network): runs share the host's network" in log, log[-3000:]
    else:
        assert network["isolated"] is True and network["reason"] is None, sandbox
        assert network["outbound"] == ("slirp4netns" if mode == "auto" else "none"), sandbox
        assert "network namespace" in sandbox["uses"], sandbox
    return sandbox


def report_of(client, name: str, cell: int = 0) -> dict:
    executed = client.request("GET", f"jobs/{name}/notebook")
    text = "".join(o.get("text", "") for o in executed["cells"][cell].get("outputs", []) if o.get("name") == "stdout")
    line = next((ln for ln in text.splitlines() if ln.startswith("REPORT ")), None)
    assert line, f"the notebook printed no report: {text[-2000:]}"
    return json.loads(line[len("REPORT "):])


def cells_done(client, name: str) -> int:
    status = client.request("GET", f"jobs/{name}").get("status") or {}
    return int((status.get("progress") or {}).get("cellsDone") or 0)


# alice (the victim): listens on 127.0.0.1 until the test says bob is done (a file in the root)
LISTENER = [
    "import json, os, socket, time\nS = {facts!r}\n"
    "srv = socket.socket()\nsrv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "srv.bind(('127.0.0.1', S['port']))\nsrv.listen(8)\nsrv.settimeout(0.05)\nprint('listening')",
    "got = []\ndeadline = time.monotonic() + 300\n"
    "while time.monotonic() < deadline and not os.path.exists(S['done']):\n"
    "    try:\n"
    "        conn, _ = srv.accept()\n"
    "        conn.settimeout(5)\n"
    "        got.append(conn.recv(100).decode(errors='replace'))\n"
    "        conn.close()\n"
    "    except OSError:\n"
    "        pass\n"
    "print('REPORT ' + json.dumps({'accepted': got, 'done': os.path.exists(S['done'])}))",
    "assert not got, got",
    "print('alice: my own verdict')",
]
# bob (the attacker): connects to alice's listener
CONNECTOR = [
    "import json, socket\nS = {facts!r}\nR = {{}}\n"
    "try:\n"
    "    with socket.create_connection(('127.0.0.1', S['port']), timeout=5) as c:\n"
    "        c.sendall(b'from bob')\n"
    "    R['connected'] = True\n"
    "except OSError as e:\n"
    "    R['error'] = f'{{type(e).__name__}}: {{e}}'\n"
    "print('REPORT ' + json.dumps(R))",
    "assert 'connected' not in R, R",
]


@pytest.mark.parametrize("mode", ["auto", "host"])
def test_a_run_cannot_connect_to_another_runs_loopback_listener(tmp_path, mode):
    server = start(tmp_path, mode)
    try:
        client = server.client()
        check_health(server, mode)
        known = {"port": free_port(), "done": str(server.root / "signals" / "bob-done")}
        (server.root / "signals").mkdir()
        write_notebook(server.root / "alice" / "listen.ipynb", [c.format(facts=known) if "{facts" in c else c
                                                                for c in LISTENER])
        write_notebook(server.root / "bob" / "connect.ipynb", [c.format(facts=known) for c in CONNECTOR[:1]]
                       + CONNECTOR[1:])
        alice = submit(client, "alice/listen.ipynb", podConfig=NOBUILD)
        wait(lambda: cells_done(client, alice) >= 1, 120, "alice's run listening")
        bob = submit(client, "bob/connect.ipynb", podConfig=NOBUILD)
        attack = wait_all(client, [bob])[bob]
        (server.root / "signals" / "bob-done").write_text("done")
        victim = wait_all(client, [alice])[alice]
        tried, heard = report_of(client, bob), report_of(client, alice, cell=1)
    finally:
        server.stop()
    assert heard["done"] is True, heard  # alice listened all the while bob tried
    if mode == "host":  # the control: the attack goes through, and alice's verdict is not her own
        assert tried.get("connected") is True, tried
        assert attack["status"]["phase"] == "Failed" and attack["status"]["failedCellIndex"] == 1, explain(attack)
        assert "from bob" in heard["accepted"], heard
        assert victim["status"]["phase"] == "Failed", explain(victim)
        return
    assert "ConnectionRefusedError" in tried.get("error", ""), tried
    assert attack["status"]["phase"] == "Succeeded", explain(attack)
    assert heard["accepted"] == [], heard
    assert victim["status"]["phase"] == "Succeeded", explain(victim)


# the attacker reads nothing: it looks for others' listeners (its /proc/net/tcp: on the host's
# loopback, the server, its kernels, other runs' kernels' IOPub pipes) and connects to the ports
# it is told (the server's, a kernel's of the server), on 127.0.0.1 and through the
# user-mode network's gateway (10.0.2.2: the host's loopback when not disabled)
SCANNER = [
    "import json, os, socket\nS = {facts!r}\n"
    "R = {{'listening': [], 'reached': [], 'refused': []}}\n"
    "mine = set()  # this kernel's own sockets (ipykernel's IOPub pipe listens on 127.0.0.1)\n"
    "for fd in os.listdir('/proc/self/fd'):\n"
    "    try:\n"
    "        mine.add(os.readlink(f'/proc/self/fd/{{fd}}'))\n"
    "    except OSError:\n"
    "        pass\n"
    "for name in ('/proc/net/tcp', '/proc/net/tcp6'):\n"
    "    try:\n"
    "        lines = open(name).read().splitlines()[1:]\n"
    "    except OSError:\n"
    "        continue\n"
    "    for ln in lines:\n"
    "        f = ln.split()\n"
    "        if f[3] == '0A' and f'socket:[{{f[9]}}]' not in mine:  # another process's listener\n"
    "            R['listening'].append(int(f[1].rsplit(':', 1)[1], 16))\n"
    "# (connecting to every listener seen would knock on the doors of whatever else runs on this machine)\n"
    "targets = [('127.0.0.1', p) for p in S['ports']]\n"
    "targets += [('10.0.2.2', p) for p in S['ports']]\n"
    "for path in S['ipc']:  # another run's kernel channels (ZMQ over ipc://): hidden by its mount namespace\n"
    "    try:\n"
    "        with socket.socket(socket.AF_UNIX) as u:\n"
    "            u.connect(path)\n"
    "        R['reached'].append(path)\n"
    "    except OSError as e:\n"
    "        R['refused'].append(f'{{path}} {{type(e).__name__}}')\n"
    "for host, port in targets:\n"
    "    try:\n"
    "        socket.create_connection((host, port), timeout=2).close()\n"
    "        R['reached'].append(f'{{host}}:{{port}}')\n"
    "    except OSError as e:\n"
    "        R['refused'].append(f'{{host}}:{{port}} {{type(e).__name__}}')\n"
    "print('REPORT ' + json.dumps(R))",
    "assert not R['reached'], R",
]
# another run, running while the attacker scans: its own verdict
BYSTANDER = [
    "import os, time\nS = {facts!r}\nprint('bystander started')",
    "deadline = time.monotonic() + 300\n"
    "while time.monotonic() < deadline and not os.path.exists(S['done']):\n"
    "    time.sleep(0.05)\n"
    "assert os.path.exists(S['done'])",
    "print('bystander: my own verdict')",
]


def ipc_sockets(server: ServerProcess, name: str) -> list[str]:
    """The Unix sockets of the kernel channels of job ``name``'s run (its runner's temporary folder)."""
    job = server.client().request("GET", f"jobs/{name}")
    run_id = next((server.data_dir / "jobs" / job["metadata"]["uid"]).glob("run-*/run-id")).read_text().strip()
    for owner in Path(tempfile.gettempdir()).glob("nbvalidation-*/owner.json"):
        try:
            if json.loads(owner.read_text()).get("runId") == run_id:
                found = sorted(str(p) for p in (owner.parent / "k").glob("i-*") if p.is_socket())
                assert found, sorted(p.name for p in owner.parent.iterdir())
                return found
        except (OSError, ValueError):
            continue
    raise AssertionError(f"no temporary folder of run {run_id} in {tempfile.gettempdir()}")


@pytest.mark.parametrize("mode", ["auto", "host"])
def test_a_run_cannot_connect_to_the_server_or_kernels_on_the_host_loopback(tmp_path, mode):
    server = start(tmp_path, mode)
    try:
        client = server.client()
        check_health(server, mode)
        kernel = client.request_root("POST", "api/kernels", {})  # a kernel of the server, on TCP
        connection = json.loads(next(server.runtime.glob(f"kernel-{kernel['id']}.json")).read_text())
        assert connection["transport"] == "tcp", connection
        ports = [server.port, *(connection[k] for k in ("shell_port", "iopub_port", "control_port", "hb_port"))]
        known = {"ports": ports, "done": str(server.root / "signals" / "scanned")}
        (server.root / "signals").mkdir()
        write_notebook(server.root / "bystander" / "wait.ipynb", [c.format(facts=known) if "{facts" in c else c
                                                                  for c in BYSTANDER])
        bystander = submit(client, "bystander/wait.ipynb", podConfig=NOBUILD)
        wait(lambda: cells_done(client, bystander) >= 1, 120, "the bystander's run started")
        ipc = ipc_sockets(server, bystander)
        write_notebook(server.root / "attacker" / "scan.ipynb",
                       [SCANNER[0].format(facts={**known, "ipc": ipc}), SCANNER[1]])
        attacker = submit(client, "attacker/scan.ipynb", podConfig=NOBUILD)
        attack = wait_all(client, [attacker])[attacker]
        (server.root / "signals" / "scanned").write_text("done")
        other = wait_all(client, [bystander])[bystander]
        report = report_of(client, attacker)
        still = client.request_root("GET", f"api/kernels/{kernel['id']}")
    finally:
        server.stop()
    assert still["id"] == kernel["id"], still  # the server's kernel lived through it
    assert other["status"]["phase"] == "Succeeded", explain(other)
    if mode == "host":  # the control: the server and the kernel answer, the run sees every listener
        assert f"127.0.0.1:{server.port}" in report["reached"], report
        assert set(ports) <= set(report["listening"]), report
        assert attack["status"]["phase"] == "Failed" and attack["status"]["failedCellIndex"] == 1, explain(attack)
        return
    assert report["reached"] == [] and report["listening"] == [], report
    assert len(report["refused"]) == 2 * len(ports) + len(ipc), report
    assert attack["status"]["phase"] == "Succeeded", explain(attack)


def outside_address() -> str:
    """An address of this host that is not loopback: "the outside" as a run reaches it."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True,
                         timeout=30).stdout
    found = [line.split()[3].split("/")[0] for line in out.splitlines() if len(line.split()) > 3]
    assert found, f"this host has no IPv4 address but loopback: `ip -4 -o addr` says {out!r}"
    return found[0]


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from outside"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


FETCH = [
    "import json, socket, urllib.request\nS = {facts!r}\nR = {{}}\n"
    "try:\n"
    "    R['outside'] = urllib.request.urlopen(S['url'], timeout=10).read().decode()\n"
    "except OSError as e:\n"
    "    R['outside_error'] = f'{{type(e).__name__}}: {{e}}'\n"
    "for host in ('127.0.0.1', '10.0.2.2'):  # the host's loopback listener: never\n"
    "    try:\n"
    "        socket.create_connection((host, S['loopback_port']), timeout=2).close()\n"
    "        R['loopback_' + host] = 'reached'\n"
    "    except OSError as e:\n"
    "        R['loopback_' + host] = type(e).__name__\n"
    "print('REPORT ' + json.dumps(R))",
    "assert ('outside' in R) == S['expect_outside'], R\n"
    "assert 'reached' not in R.values(), R",
]


@pytest.mark.parametrize("mode", ["auto", "none"])
def test_outbound_network_works_with_auto_and_none_cuts_it(tmp_path, mode):
    http = ThreadingHTTPServer((outside_address(), 0), _Hello)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    loopback = socket.socket()
    loopback.bind(("127.0.0.1", 0))
    loopback.listen(8)
    server = start(tmp_path, mode)
    try:
        client = server.client()
        check_health(server, mode)
        host, port = http.server_address[:2]
        known = {"url": f"http://{host}:{port}/hello", "loopback_port": loopback.getsockname()[1],
                 "expect_outside": mode == "auto"}
        write_notebook(server.root / "net" / "fetch.ipynb", [FETCH[0].format(facts=known), FETCH[1]])
        name = submit(client, "net/fetch.ipynb", podConfig=NOBUILD)
        job = wait_all(client, [name])[name]
        report = report_of(client, name)
    finally:
        server.stop()
        http.shutdown()
        loopback.close()
    assert job["status"]["phase"] == "Succeeded", (report, explain(job))
    if mode == "auto":
        assert report.get("outside") == "hello from outside", report
    else:
        assert "outside" not in report and "unreachable" in report["outside_error"], report
    assert report["loopback_127.0.0.1"] == "ConnectionRefusedError", report
