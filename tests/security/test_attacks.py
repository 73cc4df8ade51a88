"""Issue 40: a hostile notebook against the local backend's sandbox, one test per attack, each
through a real `jupyter server` (its defaults: the sandbox auto), as the attacker would write it.

The shared root holds two projects: alice/ (the attacker) and bob/ (the victim). Each attack is
alice's notebook: its first cell tries and prints what worked on one REPORT line (it never fails
by itself, so its verdict is Succeeded whatever it found); the test reads the report and the
machine, and asserts the attack is blocked. Then bob's notebook runs in the same environment
(the server's own interpreter, as every job here disables its build) and must get its own clean
verdict: Succeeded, and nothing of alice's in its kernel. On a sandbox that lets an attack
through (today's main before issue 40), the same test fails: the report shows it.

A payload that could reach the machine (a .pth in the server's venv, a file in /etc) is
harmless (it sets an environment variable of a unique name) and removed by the test."""

from __future__ import annotations

import json
import os
import secrets
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import ServerProcess
from helpers import NOBUILD, detected_health, explain, report_of, submit, wait, wait_all, write_notebook

MARK = "NBV_SECURITY_PWNED_"
VICTIM = (  # bob's notebook: a clean verdict is Succeeded with nothing of alice's in its kernel
    "import os, sys\n"
    f"found = sorted(k for k in os.environ if k.startswith({MARK!r}))\n"
    "assert not found, found\n"
    "assert 'PWNED' not in globals()\n"
    "print('bob ok')")
HEAD = "import glob, json, os, sys\nS = {facts!r}\nR = {{}}\n"
TAIL = "\nprint('REPORT ' + json.dumps(R))\n"


@pytest.fixture
def server(tmp_path, monkeypatch):
    """A server with the defaults, HOME a folder of the test's holding a secret of the user's."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "secret.txt").write_text("the user's own secret\n")
    monkeypatch.setenv("HOME", str(home))
    srv = ServerProcess(tmp_path)
    srv.start()
    sandbox = detected_health(srv.client())["sandbox"]
    assert sandbox["enabled"] is True, sandbox
    yield srv
    srv.stop()


def attack(server: ServerProcess, cells: list[str], facts: dict, links: dict[str, str] | None = None,
           victim: str | None = None) -> tuple[dict, dict]:
    """alice/attack.ipynb (``cells`` with the REPORT as the first's end, ``links`` planted in
    alice/), run to its verdict; then bob's victim run to its own. (report, bob's job)."""
    client = server.client()
    alice = server.root / "alice"
    write_notebook(alice / "attack.ipynb", [HEAD.format(facts=facts) + cells[0] + TAIL, *cells[1:]])
    for name, target in (links or {}).items():
        (alice / name).symlink_to(target)
    job = submit(client, "alice/attack.ipynb", podConfig=NOBUILD)
    done = wait_all(client, [job])[job]
    assert done["status"]["phase"] == "Succeeded", explain(done)
    report = report_of(client, job)
    if victim is None:
        write_notebook(server.root / "bob" / "victim.ipynb", [VICTIM])
        victim = submit(client, "bob/victim.ipynb", podConfig=NOBUILD)
    bob = wait_all(client, [victim])[victim]
    return report, bob


def assert_clean(bob: dict) -> None:
    assert bob["status"]["phase"] == "Succeeded", explain(bob)


def test_2_a_pth_written_into_the_servers_venv_by_a_build_disabled_run(server):
    """The kernel of a build-disabled job runs in the server's own venv: a .pth written there
    would run in every later kernel, the server and the CLI."""
    token = secrets.token_hex(6)
    site = sysconfig.get_paths()["purelib"]  # the server's (this interpreter's) site-packages
    pth = Path(site) / f"nbv-security-{token}.pth"
    cell = (
        "import site, sysconfig\n"
        "R['prefix'] = sys.prefix\n"
        "R['written'] = []\n"
        "for folder in {*site.getsitepackages(), sysconfig.get_paths()['purelib']}:\n"
        "    path = os.path.join(folder, S['name'])\n"
        "    try:\n"
        "        with open(path, 'w') as f:\n"
        "            f.write(S['payload'])\n"
        "        R['written'].append(path)\n"
        "    except OSError as e:\n"
        "        R.setdefault('errors', []).append(f'{path}: {e}')\n"
        "try:  # a same-place change without a write: the mode of a module of the venv\n"
        "    os.chmod(os.__file__, 0o600); R['chmod'] = os.__file__\n"
        "except OSError as e:\n"
        "    R['chmod_error'] = str(e)\n")
    payload = f"import os; os.environ.setdefault('{MARK}{token}', 'alice')\n"
    mode = os.stat(os.__file__).st_mode
    try:
        report, bob = attack(server, [cell], {"name": pth.name, "payload": payload})
        assert report["prefix"] == sys.prefix, report  # the attack ran where it meant to
        assert report["written"] == [] and not pth.exists(), report
        assert "chmod" not in report and os.stat(os.__file__).st_mode == mode, report
    finally:
        pth.unlink(missing_ok=True)
        os.chmod(os.__file__, mode)
    assert_clean(bob)


def test_3_links_to_the_runtime_dir_home_the_jobs_and_the_machines_tmp(server, tmp_path):
    """Links planted in the project lead to hidden places: each finds nothing."""
    machine_tmp_secret = tmp_path / "in-machine-tmp.txt"  # the test's folder is in the machine's /tmp
    machine_tmp_secret.write_text("another user's scratch\n")
    assert str(machine_tmp_secret).startswith("/tmp/"), machine_tmp_secret
    links = {"link_runtime": str(server.runtime), "link_home": os.environ["HOME"],
             "link_jobs": str(server.data_dir / "jobs"), "link_tmp": "/tmp"}
    facts = {"tmp_rel": str(machine_tmp_secret)[len("/tmp/"):]}
    cell = (
        "R['seen'] = {}\n"
        "for name in ('link_runtime', 'link_home', 'link_jobs', 'link_tmp'):\n"
        "    try:\n"
        "        R['seen'][name] = sorted(os.listdir(name))\n"
        "    except OSError as e:\n"
        "        R.setdefault('errors', {})[name] = str(e)\n"
        "for path in ('link_home/secret.txt', os.path.join('link_tmp', S['tmp_rel'])):\n"
        "    try:\n"
        "        R.setdefault('read', {})[path] = open(path).read()\n"
        "    except OSError as e:\n"
        "        R.setdefault('errors', {})[path] = str(e)\n"
        "R['runtime_files'] = glob.glob('link_runtime/*.json')\n"
        "R['job_logs'] = glob.glob('link_jobs/*/run-*/runner.log')\n")
    # another job of the same data dir first, whose folder and log link_jobs would show
    client = server.client()
    write_notebook(server.root / "bob" / "victim.ipynb", [VICTIM])
    first = submit(client, "bob/victim.ipynb", podConfig=NOBUILD)
    earlier = wait_all(client, [first])[first]
    assert_clean(earlier)
    report, bob = attack(server, [cell], facts, links)
    assert report.get("read", {}) == {}, report
    assert report["runtime_files"] == [] and report["job_logs"] == [], report
    for name, entries in report.get("seen", {}).items():
        # what a name may list in the kernel's view: nothing of the hidden place
        hidden = {"secret.txt", earlier["metadata"]["uid"], os.path.basename(tmp_path), "in-machine-tmp.txt"}
        assert not hidden & set(entries), (name, report)
    assert_clean(bob)


def test_4_the_token_from_jpserver_json_then_a_kernel_over_rest(server):
    """The server's token, read from its runtime dir through a link, starts a kernel with the
    server's rights: every process and the store in reach."""
    cell = (
        "import re, urllib.request\n"
        "R['tokens'] = []\n"
        "for path in glob.glob('link_runtime/jpserver-*.json') + glob.glob(os.path.join(S['runtime'], '*.json')):\n"
        "    try:\n"
        "        R['tokens'].append(json.load(open(path))['token'])\n"
        "    except (OSError, ValueError, KeyError) as e:\n"
        "        R.setdefault('errors', []).append(f'{path}: {e}')\n"
        "R['kernel'] = None\n"
        "for token in R['tokens'] or ['']:\n"
        "    req = urllib.request.Request(S['url'] + 'api/kernels', data=b'{}', method='POST',\n"
        "                                 headers={'Authorization': f'token {token}',\n"
        "                                          'Content-Type': 'application/json'})\n"
        "    try:\n"
        "        with urllib.request.urlopen(req, timeout=10) as r:\n"
        "            R['kernel'] = f\"{r.status} {json.loads(r.read())['id']}\"\n"
        "            break\n"
        "    except Exception as e:\n"
        "        R['kernel_error'] = f'{type(e).__name__}: {e}'\n")
    report, bob = attack(server, [cell], {"runtime": str(server.runtime), "url": server.url},
                         {"link_runtime": str(server.runtime)})
    kernels = server.client().request_root("GET", "api/kernels")
    assert report["tokens"] == [] and server.token not in json.dumps(report), report
    assert report["kernel"] is None and kernels == [], (report, kernels)
    assert_clean(bob)


def test_5_another_running_kernels_connection_file_read_through_a_tmp_link(server):
    """bob's kernel is running; alice looks for its connection file (key included) through a
    link to the machine's /tmp, where runners keep them, and runs code in it."""
    client = server.client()
    write_notebook(server.root / "bob" / "victim.ipynb",
                   ["import time\ntime.sleep(25)", VICTIM])
    victim = submit(client, "bob/victim.ipynb", podConfig=NOBUILD)

    def bobs_connection_file() -> str | None:  # seen from outside: bob's runner's temp folder
        run_id = next(iter((server.data_dir / "jobs").glob("*/run-*/run-id")), None)
        if run_id is None:
            return None
        for owner in Path("/tmp").glob("nbvalidation-*/owner.json"):
            try:
                if json.loads(owner.read_text()).get("runId") == run_id.read_text().strip() and \
                        (owner.parent / "connection.json").exists():
                    return str(owner.parent / "connection.json")
            except (OSError, ValueError):
                continue
        return None

    found = wait(bobs_connection_file, 120, "bob's kernel to start")
    assert isinstance(found, str)
    cell = (
        "import time\n"
        "from jupyter_client import BlockingKernelClient\n"
        "mine = os.environ.get('JUPYTER_RUNTIME_DIR', '')\n"
        "R['tried'] = []\n"
        "R['ran'] = None\n"
        "deadline = time.monotonic() + 15\n"
        "while R['ran'] is None and time.monotonic() < deadline:\n"
        "    for path in glob.glob(os.path.join('link_tmp', S['target'], 'connection.json')):\n"
        "        folder = os.path.dirname(path)\n"
        "        if os.path.realpath(folder) in mine or path in R['tried']:\n"
        "            continue  # its own\n"
        "        R['tried'].append(path)\n"
        "        try:\n"
        "            info = json.load(open(path))\n"
        "            if not os.path.isdir(os.path.dirname(info['ip'])):  # its sockets, through the link\n"
        "                info['ip'] = os.path.join(folder, os.path.basename(info['ip']))\n"
        "            kc = BlockingKernelClient()\n"
        "            kc.load_connection_info(info)\n"
        "            kc.start_channels()\n"
        "            kc.execute('PWNED = 1')  # queued behind bob's running cell: runs before his next\n"
        "            R['ran'] = f\"{path}: {kc.get_shell_msg(timeout=60)['content']['status']}\"\n"
        "        except Exception as e:\n"
        "            R.setdefault('errors', []).append(f'{path}: {type(e).__name__}: {e}')\n"
        "    time.sleep(0.5)\n")
    # the name of bob's folder is given (a real attacker tries them all: this test touches no other
    # kernel of the machine's), found only through the link
    report, bob = attack(server, [cell], {"target": os.path.basename(os.path.dirname(found))},
                         {"link_tmp": "/tmp"}, victim=victim)
    assert found and report["ran"] is None and report["tried"] == [], report
    assert_clean(bob)


def test_7_as_root_read_etc_shadow_and_write_into_etc(server):
    """A server run as root (CI, this machine) gives its kernel no root reach: /etc/shadow is
    not read, /etc is not written. (Another user's server: the same holds by its rights.)"""
    name = f"nbv-security-{secrets.token_hex(6)}"
    planted = Path("/etc") / name
    cell = (
        "R['uid'] = os.getuid()\n"
        "try:\n"
        "    R['shadow'] = open('/etc/shadow').read()[:40]\n"
        "except OSError as e:\n"
        "    R['shadow_error'] = str(e)\n"
        "try:\n"
        "    open(os.path.join('/etc', S['name']), 'w').write('alice was here')\n"
        "    R['etc'] = 'written'\n"
        "except OSError as e:\n"
        "    R['etc_error'] = str(e)\n"
        "try:\n"
        "    os.utime('/etc/hostname'); R['utime'] = 'changed'\n"
        "except OSError as e:\n"
        "    R['utime_error'] = str(e)\n")
    try:
        report, bob = attack(server, [cell], {"name": name})
        assert "shadow" not in report and "etc" not in report and "utime" not in report, report
        assert not planted.exists(), report
        if os.geteuid() == 0:
            assert report["uid"] != 0, report
    finally:
        planted.unlink(missing_ok=True)
    assert_clean(bob)
