"""The kernel in a sandbox (issue 20, "isolation where the OS allows it"; runner/sandbox.py):
through a real `jupyter server` (real engine, SQLite, runners, kernels, a built venv), each
claim is a notebook of its own. With the sandbox on (the default, LocalBackend.sandbox auto,
given as no option)
the kernel cannot read the server's process environment, the store, another job's folder,
a file in HOME outside the root, the server's runtime dir (its jpserver-*.json holds the
token); it can read the project root through ../ and the links its working copy keeps, its
own environment's packages (a venv inside the data dir), and the verdicts of ordinary
notebooks are unchanged (a failure, a cell timeout ended by an interrupt). The same server
with LocalBackend.sandbox=off runs the same notebooks: every "cannot" probe then fails,
which shows the probes would see a leak.

The hard layout on purpose: HOME is the test's temp folder, so the root, the data dir, the
runtime dir and the job's venv (in the data dir) are all inside HOME, and all under /tmp."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import jsonschema
import pytest
from conftest import ServerProcess
from helpers import NOBUILD, detected_health, explain, report_of, submit, wait_all, write_notebook

# the probes' first cell: where things are (filled in by the test)
HEAD = "import glob, os, sys\nS = {facts!r}"

CANNOT = {  # name: the cell asserting the kernel cannot see it
    "server-environment": (
        "found = []\n"
        "for p in glob.glob('/proc/[0-9]*/environ'):\n"
        "    try:\n"
        "        if S['secret'].encode() in open(p, 'rb').read():\n"
        "            found.append(p)\n"
        "    except OSError:\n"
        "        pass\n"
        "for pid in (S['server_pid'], S['test_pid']):\n"
        "    try:\n"
        "        data = open(f'/proc/{pid}/environ', 'rb').read()\n"
        "        found.append(f'/proc/{pid}/environ readable ({len(data)} bytes)')\n"
        "    except OSError:\n"
        "        pass\n"
        "assert not found, found"),
    "the-store": (
        "assert not os.path.exists(S['store']), os.listdir(os.path.dirname(S['store']))\n"
        "try:\n"
        "    open(S['store'], 'rb').read(16)\n"
        "    raise AssertionError('the store is readable')\n"
        "except OSError:\n"
        "    pass"),
    "another-job": (
        "assert not os.path.exists(S['other_job']), os.listdir(S['other_job'])\n"
        "assert not os.path.exists(S['other_log']), 'its runner log is readable'"),
    "home-outside-the-root": (
        "try:\n"
        "    text = open(S['home_secret']).read()\n"
        "    raise AssertionError(f'read {text!r}')\n"
        "except OSError:\n"
        "    pass"),
    "link-into-home": (  # a link the project keeps, to HOME outside the root: as a missing file
        "assert os.path.islink('home-link.txt'), os.listdir('.')\n"
        "assert not os.path.exists('home-link.txt'), open('home-link.txt').read()"),
    "runtime-dir": (
        "files = glob.glob(os.path.join(S['runtime'], 'jpserver-*.json'))\n"
        "assert not files, [open(f).read()[:80] for f in files]"),
}

CAN = {  # name: the cell asserting the kernel can read it (both modes)
    "project-root": (
        "assert open('../shared/v.txt').read() == 'shared\\n'\n"
        "assert open(os.path.join(S['root'], 'shared', 'v.txt')).read() == 'shared\\n'\n"
        "assert sorted(os.listdir('..'))"),
    "kept-links": (
        "assert os.path.islink('outside.txt'), os.listdir('.')\n"
        "assert open('outside.txt').read() == open('/etc/passwd').read()\n"
        "assert open('data-link/x.csv').read() == 'a,b\\n1,2\\n'"),
    # what ordinary notebooks do that touches a hidden path or the machine: scratch files in
    # /tmp, /var/tmp, /dev/shm and TMPDIR, HOME, processes with semaphores and shared memory
    # (/dev/shm), time zones and the locale, their own folder written and read again
    "ordinary-machine": (
        "import locale, multiprocessing, tempfile, zoneinfo, datetime, pathlib\n"
        "from multiprocessing import shared_memory\n"
        "for d in ('/tmp', '/var/tmp', '/dev/shm', tempfile.gettempdir(), os.path.expanduser('~')):\n"
        "    p = os.path.join(d, f'nbv-scratch-{os.getpid()}.bin')\n"
        "    open(p, 'wb').write(b'x' * 100000)\n"
        "    assert os.path.getsize(p) == 100000, p\n"
        "    os.remove(p)\n"
        "with tempfile.TemporaryDirectory() as t:\n"
        "    pathlib.Path(t, 'a.txt').write_text('a')\n"
        "os.makedirs(os.path.expanduser('~/.cache/some-lib'), exist_ok=True)\n"
        "for method in ('fork', 'spawn'):\n"
        "    ctx = multiprocessing.get_context(method)\n"
        "    lock = ctx.Lock()\n"
        "    with ctx.Pool(2) as pool:\n"
        "        assert pool.map(abs, [-1, -2, 3]) == [1, 2, 3]\n"
        "shm = shared_memory.SharedMemory(create=True, size=4096)\n"
        "shm.buf[0] = 7\n"
        "other = shared_memory.SharedMemory(name=shm.name)\n"
        "assert other.buf[0] == 7\n"
        "other.close(); shm.close(); shm.unlink()\n"
        "ny = datetime.datetime(2026, 7, 1, 12, tzinfo=zoneinfo.ZoneInfo('America/New_York'))\n"
        "assert ny.utcoffset() == datetime.timedelta(hours=-4), ny.utcoffset()\n"
        "locale.setlocale(locale.LC_ALL, 'C.UTF-8')\n"
        "open('written-here.txt', 'w').write('mine')\n"
        "assert open('written-here.txt').read() == 'mine' and 'written-here.txt' in os.listdir('.')"),
}


def facts(server: ServerProcess, home_secret: Path, other: dict) -> dict:
    return {"secret": os.environ["NBV_SANDBOX_SECRET"], "server_pid": server.proc.pid, "test_pid": os.getpid(),
            "store": str(server.data_dir / "nbvalidation.db"), "runtime": str(server.runtime),
            "other_job": str(server.data_dir / "jobs" / other["metadata"]["uid"]),
            "other_log": str(next((server.data_dir / "jobs" / other["metadata"]["uid"]).glob("run-*/runner.log"))),
            "home_secret": str(home_secret), "root": str(server.root)}


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """HOME is tmp_path: the root, the data dir and the runtime dir are inside it."""
    monkeypatch.setenv("UV_CACHE_DIR", os.environ.get("UV_CACHE_DIR") or os.path.expanduser("~/.cache/uv"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NBV_SANDBOX_SECRET", "nbv-" + secrets.token_hex(12))
    home_secret = tmp_path / "home-secret.txt"
    home_secret.write_text("the user's own file\n")
    root = tmp_path / "root"
    (root / "data").mkdir(parents=True)
    (root / "data" / "x.csv").write_text("a,b\n1,2\n")
    (root / "shared").mkdir()
    (root / "shared" / "v.txt").write_text("shared\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "w.txt").write_text("outside the root\n")
    return home_secret


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_what_the_kernel_can_and_cannot_read(tmp_path, layout, mode):
    # auto is the default: given as no option at all, so the test holds the default to it
    server = ServerProcess(tmp_path, extra_args=[] if mode == "auto" else [f"--LocalBackend.sandbox={mode}"])
    try:
        server.start()
        client = server.client()
        health = detected_health(client)
        sandbox = health["sandbox"]
        doc = client.request("GET", "openapi.json")  # the field as its schema says
        schema = doc["paths"]["/health"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        jsonschema.validate(health["sandbox"], schema["properties"]["sandbox"])
        if mode == "auto":
            assert sandbox.get("enabled") is True and sandbox.get("mode") == "auto", health
            assert {"pid namespace", "mount namespace", "read-only mounts"} <= set(sandbox["uses"]), sandbox
            # a server run as root (CI) runs its kernels as nobody; another user's, in its user namespace
            assert ("unprivileged uid (nobody, idmapped mounts)" if os.geteuid() == 0 else "user namespace") \
                in sandbox["uses"], sandbox
        else:
            assert sandbox.get("enabled") is False and "off" in sandbox.get("reason", ""), health

        write_notebook(server.root / "first" / "nb.ipynb", ["print('first')"])
        first = wait_all(client, [submit(client, "first/nb.ipynb", podConfig=NOBUILD)])
        other = next(iter(first.values()))
        assert other["status"]["phase"] == "Succeeded", explain(other)

        probes = server.root / "probes"
        known = facts(server, layout, other)
        for name, cell in {**CANNOT, **CAN}.items():
            write_notebook(probes / f"{name}.ipynb", [HEAD.format(facts=known), cell])
        (probes / "outside.txt").symlink_to("/etc/passwd")  # leaves the root, to a place seen: works
        (probes / "home-link.txt").symlink_to(tmp_path / "outside" / "w.txt")  # to HOME: finds nothing
        (probes / "data-link").symlink_to(server.root / "data")
        write_notebook(probes / "packages.ipynb", [
            HEAD.format(facts=known),
            "import six\nassert six.__file__.startswith(S['data_dir']), (six.__file__, sys.prefix)\n"
            "assert sys.prefix.startswith(S['data_dir']), sys.prefix".replace("S['data_dir']",
                                                                              repr(str(server.data_dir)))])
        write_notebook(probes / "fails.ipynb", ["x = 1", "raise ValueError('as always')", "print('never')"])
        write_notebook(probes / "hangs.ipynb", ["import time\nprint('before')", "time.sleep(120)", "print('never')"])

        names = {name: submit(client, f"probes/{name}.ipynb", podConfig=NOBUILD) for name in {**CANNOT, **CAN}}
        names["packages"] = submit(client, "probes/packages.ipynb",
                                   podConfig={"buildConfig": {"requirements": ["six"]}})
        names["fails"] = submit(client, "probes/fails.ipynb", podConfig=NOBUILD)
        names["hangs"] = submit(client, "probes/hangs.ipynb", podConfig=NOBUILD, cellTimeout="4s")
        wait_all(client, list(names.values()))
        done = {key: wait_all(client, [name])[name] for key, name in names.items()}
    finally:
        server.stop()

    phases = {key: job["status"]["phase"] for key, job in done.items()}
    for key in CANNOT:
        if mode == "auto":
            assert phases[key] == "Succeeded", (key, explain(done[key]))
        else:  # the probe sees what it looks for: it would catch a leak
            assert phases[key] == "Failed" and done[key]["status"]["failedCellIndex"] == 1, (key, explain(done[key]))
    for key in (*CAN, "packages"):
        assert phases[key] == "Succeeded", (key, explain(done[key]))
    failed = done["fails"]["status"]
    assert phases["fails"] == "Failed" and failed["failedCellIndex"] == 1, explain(done["fails"])
    assert "ValueError" in json.dumps(failed["results"]), explain(done["fails"])
    hung = done["hangs"]["status"]
    assert phases["hangs"] == "Failed" and hung["failedCellIndex"] == 1, explain(done["hangs"])
    cell = next(r for r in hung["results"] if r["cellIndex"] == 1)
    # interrupted: the cell's traceback says where it hung (the interrupt reached the kernel)
    assert "KeyboardInterrupt" in json.dumps(cell) and "time.sleep" in json.dumps(cell), explain(done["hangs"])


# issue 20 point 8, as the issue tells it: the notebook looks for the server's token and
# environment in /proc of its ancestors (and of every process it can see), in the Jupyter
# runtime dir, opens the store by its absolute path and turns another notebook's Failed into
# Succeeded, then starts a kernel on the server with whatever token it found. Cell 0 tries
# everything and prints what worked (REPORT line); cell 1 fails when anything did.
ATTACK = r'''
import glob, json, os, re, sqlite3, urllib.request
S = {facts!r}
R = {{"tokens": [], "secret_seen": [], "store": None, "kernel": None, "ancestors": []}}
TOKEN = re.compile(rb"(?:token[=:\"' ]+|JUPYTER_TOKEN=)([0-9a-f]{{16,}})")
pid = os.getpid()
while pid > 0:  # the ancestors, as the kernel sees them
    R["ancestors"].append(pid)
    try:
        status = open(f"/proc/{{pid}}/status").read()
        pid = int(re.search(r"PPid:\s*(\d+)", status).group(1))
    except (OSError, AttributeError):
        break
paths = [f"/proc/{{p}}/{{f}}" for p in R["ancestors"] for f in ("cmdline", "environ")]
paths += sorted(glob.glob("/proc/[0-9]*/cmdline") + glob.glob("/proc/[0-9]*/environ"))
paths += glob.glob(os.path.join(S["runtime"], "*.json"))
for path in paths:
    try:
        data = open(path, "rb").read()
    except OSError:
        continue
    R["tokens"] += [m.decode() for m in TOKEN.findall(data)]
    if S["secret"].encode() in data:
        R["secret_seen"].append(path)
R["tokens"] = sorted(set(R["tokens"]))
try:  # the store, by its absolute path: the other notebook's Failed becomes Succeeded
    con = sqlite3.connect(f"file:{{S['store']}}?mode=rw", uri=True, timeout=10)
    doc = json.loads(con.execute("SELECT doc FROM jobs WHERE name = ?", (S["victim"],)).fetchone()[0])
    doc["status"].update(phase="Succeeded", reason="ValidationSucceeded", message="rewritten")
    doc["status"].pop("failedCellIndex", None)
    cur = con.execute("UPDATE jobs SET doc = ?, phase = 'Succeeded', version = version + 1 WHERE name = ?",
                      (json.dumps(doc), S["victim"]))
    con.commit()
    R["store"] = f"updated {{cur.rowcount}} row(s)"
except Exception as e:
    R["store_error"] = f"{{type(e).__name__}}: {{e}}"
for token in R["tokens"] or [""]:  # a kernel on the server, with a stolen token (or none)
    req = urllib.request.Request(S["url"] + "api/kernels", data=b"{{}}", method="POST",
                                 headers={{"Authorization": f"token {{token}}", "Content-Type": "application/json"}})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            R["kernel"] = f"{{r.status}} {{json.loads(r.read())['id']}}"
            break
    except Exception as e:
        R["kernel_error"] = f"{{type(e).__name__}}: {{e}}"
print("REPORT " + json.dumps(R))
'''
VERDICT = ("assert not R['tokens'] and not R['secret_seen'] and R['store'] is None and R['kernel'] is None, "
           "json.dumps(R)")


@pytest.mark.parametrize("settings", ["default", "off"])
def test_a_notebook_cannot_rewrite_another_jobs_verdict(tmp_path, monkeypatch, settings):
    """Issue 20 point 8 end to end, through a real server with the default settings (no
    sandbox option given): the token (on the server's command line, as ServerProcess starts
    it), a secret of the server's environment, the store at its absolute path and the server's
    kernels API are out of the validated notebook's reach; every attempt fails and the other
    notebook's Failed stays. The same attack with LocalBackend.sandbox=off (the control)
    finds the token and the secret, rewrites the verdict and starts a kernel: the attack is real."""
    monkeypatch.setenv("NBV_POINT8_SECRET", "nbv-" + secrets.token_hex(12))
    extra = [] if settings == "default" else ["--LocalBackend.sandbox=off"]
    server = ServerProcess(tmp_path, extra_args=extra)
    try:
        server.start()
        client = server.client()
        health = detected_health(client)
        if settings == "default":
            assert health["sandbox"]["mode"] == "auto" and health["sandbox"]["enabled"] is True, health
        else:
            assert health["sandbox"]["enabled"] is False, health

        write_notebook(server.root / "victim" / "broken.ipynb", ["raise ValueError('broken for real')"])
        victim = submit(client, "victim/broken.ipynb", podConfig=NOBUILD)
        assert wait_all(client, [victim])[victim]["status"]["phase"] == "Failed"

        known = {"secret": os.environ["NBV_POINT8_SECRET"], "runtime": str(server.runtime), "url": server.url,
                 "store": str(server.data_dir / "nbvalidation.db"), "victim": victim}
        write_notebook(server.root / "attacker" / "attack.ipynb", [ATTACK.format(facts=known), VERDICT])
        attacker = submit(client, "attacker/attack.ipynb", podConfig=NOBUILD)
        attack = wait_all(client, [attacker])[attacker]
        report = report_of(client, attacker)
        victim_now = client.request("GET", f"jobs/{victim}")
        kernels = client.request_root("GET", "api/kernels")
    finally:
        server.stop()
    import sqlite3

    con = sqlite3.connect(f"file:{server.data_dir / 'nbvalidation.db'}?mode=ro", uri=True)
    stored = json.loads(con.execute("SELECT doc FROM jobs WHERE name = ?", (victim,)).fetchone()[0])
    con.close()

    if settings == "default":
        assert attack["status"]["phase"] == "Succeeded", (report, explain(attack))
        assert report["tokens"] == [] and report["secret_seen"] == [], report
        assert server.token not in json.dumps(report), report
        assert report["store"] is None and "store_error" in report, report
        # refused at the door (403: no token), or not reached at all (a network namespace per run:
        # the server's loopback port is not the run's, tests/security/test_network.py)
        refused = "Connection refused" if "network namespace" in health["sandbox"]["uses"] else "403"
        assert report["kernel"] is None and refused in report.get("kernel_error", ""), report
        assert kernels == [], kernels
        assert victim_now["status"]["phase"] == "Failed", explain(victim_now)
        assert stored["status"]["phase"] == "Failed" and stored["status"].get("message") != "rewritten", stored
    else:  # the control: without the sandbox each attempt works (the test would see a leak)
        assert attack["status"]["phase"] == "Failed" and attack["status"]["failedCellIndex"] == 1, explain(attack)
        assert server.token in report["tokens"], report
        assert report["secret_seen"], report
        assert report["store"] == "updated 1 row(s)", report
        assert report["kernel"] and report["kernel"].startswith("201"), report
        assert stored["status"]["phase"] == "Succeeded" and stored["status"]["message"] == "rewritten", stored
        assert victim_now["status"]["phase"] == "Succeeded", explain(victim_now)
