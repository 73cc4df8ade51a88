"""Issue 40: the runner's temporary folder and its owner record, against a hostile notebook.

The runner's folder (``nbvalidation-*`` in its TMPDIR) holds ``owner.json``: who runs there
(pid, start time, run id). The start-up sweep (runner/hygiene.py, run at every server and
CLI start) removes the folders of dead runners and kills every process of their run id. An
attacker who rewrites that record chooses what the sweep kills (another run's processes,
by naming its run id) or makes its own leftovers survive (a live pid); one who plants a
link there leads the sweep elsewhere.

Each test is the attacker's notebook, run by the real runner: it tries, its runner then
dies (SIGKILL, no clean-up: what the sweep is for), and the sweep runs. Checked: the attack
was refused (sandbox: the folder is read-only to the kernel but for its own ``kernel/``), the
sweep kills nothing but the attacker's run and follows no link, a bystander run named by the
attacker still runs, and a victim run afterwards gets its own clean verdict."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait, write_notebook

import jupyter_nbvalidation.runner.hygiene as hygiene
from jupyter_nbvalidation.runner.protocol import parse_log
from jupyter_nbvalidation.runner.sandbox_probe import detect

# the attacker's first cell: finds its runner's folder (above its HOME) and tries every way
# to change what the sweep reads there; says what worked in report.json (its working folder)
ATTACK = """\
import json, os
S = {facts!r}
R = {{}}
folder = os.environ['HOME']
while folder != '/' and not os.path.exists(os.path.join(folder, 'owner.json')):
    folder = os.path.dirname(folder)
owner = os.path.join(folder, 'owner.json')
R['found'] = os.path.exists(owner)
forged = json.dumps({{'pid': 999999, 'startTime': 1, 'runId': S['bystander']}})
def attempt(name, action):
    try:
        action(); R[name] = 'done'
    except OSError as e:
        R[name] = type(e).__name__
def rewrite():
    with open(owner, 'w') as f:
        f.write(forged)
def replace():
    with open(os.path.join(folder, 'owner.new'), 'w') as f:
        f.write(forged)
    os.replace(os.path.join(folder, 'owner.new'), owner)
def relink():  # owner.json a link to a forged record elsewhere (the sweep would follow it)
    os.unlink(owner)
    os.symlink(S['decoy_record'], owner)
def plant():  # a folder the sweep lists, a link to a place of the user's (it would read and remove)
    os.symlink(S['decoy'], os.path.join(os.path.dirname(folder), 'nbvalidation-planted'))
attempt('rewrite', rewrite)
attempt('replace', replace)
attempt('relink', relink)
attempt('plant', plant)
attempt('home', lambda: open(os.path.join(os.environ['HOME'], 'scratch'), 'w').write('mine'))
open('report.json', 'w').write(json.dumps(R))
"""
LEFTOVER = ("import subprocess, time\n"
            "subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
            "open('leftover-started', 'w').close()\n"
            "time.sleep(600)")
VICTIM = ["import os\nprint('victim ok', os.getcwd())"]


@pytest.fixture(scope="module")
def sandboxed() -> bool:
    info = detect()
    if not info["available"]:
        pytest.skip(f"no sandbox here: {info['reason']}")
    return True


def runner_argv(folder: Path, notebook: Path, out: Path, sandbox: bool) -> list[str]:
    argv = [sys.executable, "-m", "jupyter_nbvalidation.runner", str(notebook), "--cwd", str(folder),
            "--result", str(out / "result.json"), "--executed", str(out / "executed.ipynb")]
    if sandbox:
        config = out / "sandbox.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps({"hide": [], "show": [str(folder)], "write": []}))
        argv += ["--sandbox", str(config)]
    return argv


def bystander(run_id: str) -> subprocess.Popen:
    """Another run's process (its run id in its environment): the one the attacker names."""
    return subprocess.Popen(["sleep", "600"], env={**os.environ, hygiene.RUN_ID_VAR: run_id},
                            stdin=subprocess.DEVNULL, start_new_session=True)


def decoy(tmp_path: Path, bystander_id: str) -> tuple[Path, Path]:
    """A folder of the user's with a dead owner's record naming the bystander's run (what a
    link would lead the sweep to) and a file that must survive."""
    place = tmp_path / "users-own"
    place.mkdir()
    (place / "keep.txt").write_text("the user's own file\n")
    (place / "owner.json").write_text(json.dumps({"pid": 999999, "startTime": 1, "runId": bystander_id}))
    return place, place / "owner.json"


def attack_then_crash(tmp_path: Path, base: Path, sandbox: bool, facts: dict, run_id: str) -> tuple[dict, Path]:
    """The attacker's run (``run_id``), killed once its leftover runs: (its report, its runner's folder)."""
    alice = tmp_path / "alice"
    alice.mkdir()
    nb = write_notebook(alice / "attack.ipynb", [ATTACK.format(facts=facts), LEFTOVER])
    env = {**os.environ, "TMPDIR": str(base), hygiene.RUN_ID_VAR: run_id}
    log = open(tmp_path / "attack.log", "wb")  # noqa: SIM115 - the runner writes it; closed below
    runner = subprocess.Popen(runner_argv(alice, nb, tmp_path / "out-attack", sandbox), env=env,
                              stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        def leftover_started() -> bool:
            assert runner.poll() is None, (tmp_path / "attack.log").read_text()
            return (alice / "leftover-started").exists()

        wait(leftover_started, 180, "the attacker's leftover to start", interval=0.1)
        folders = [p for p in base.glob("nbvalidation-*") if not p.is_symlink()]
        assert len(folders) == 1, folders
        os.killpg(runner.pid, signal.SIGKILL)  # a crash: the runner cleans nothing up
        runner.wait(30)
    finally:
        if runner.poll() is None:
            runner.kill()
        log.close()
    return json.loads((alice / "report.json").read_text()), folders[0]


def victim_verdict(tmp_path: Path, base: Path, sandbox: bool) -> dict:
    bob = tmp_path / "bob"
    bob.mkdir()
    nb = write_notebook(bob / "victim.ipynb", VICTIM)
    env = {**os.environ, "TMPDIR": str(base), hygiene.RUN_ID_VAR: "victim-" + os.urandom(4).hex()}
    proc = subprocess.run(runner_argv(bob, nb, tmp_path / "out-victim", sandbox), env=env, capture_output=True,
                          text=True, timeout=180, stdin=subprocess.DEVNULL)
    result, _ = parse_log(proc.stdout)
    assert result is not None, proc.stdout + proc.stderr
    return result


def test_a_notebook_cannot_rewrite_or_replace_its_runners_owner_record(tmp_path, sandboxed):
    """Sandbox on: owner.json and its folder are read-only to the kernel (its HOME is not);
    the sweep then removes the attacker's folder and kills its run only."""
    base = tmp_path / "t"
    base.mkdir()
    other = "bystander-" + os.urandom(4).hex()
    place, record = decoy(tmp_path, other)
    victim_proc = bystander(other)
    run_id = "attacker-" + os.urandom(4).hex()
    try:
        report, folder = attack_then_crash(
            tmp_path, base, True, {"bystander": other, "decoy": str(place), "decoy_record": str(record)}, run_id)
        assert report["found"] is True, report
        assert report["home"] == "done", report  # its own folder stays its own
        assert [k for k in ("rewrite", "replace", "relink") if report[k] == "done"] == [], report
        # (its /tmp is its own: a link planted there is nowhere the sweep looks, checked below)
        owner = hygiene.read_owner(str(folder))
        assert owner is not None and owner["runId"] == run_id, owner
        assert not (folder / "owner.new").exists() and not (base / "nbvalidation-planted").exists()

        removed = hygiene.sweep(str(base))
        assert removed == [str(folder)] and not folder.exists(), removed
        assert hygiene.find(run_id) == []  # the attacker's leftovers: gone
        assert victim_proc.poll() is None, "the sweep killed the run the attacker named"
        assert (place / "keep.txt").exists()
        assert victim_verdict(tmp_path, base, True)["verdict"] == "Succeeded"
    finally:
        victim_proc.kill()
        victim_proc.wait()
        hygiene.kill_all(run_id)


def test_the_sweep_follows_no_link_a_notebook_planted(tmp_path):
    """Sandbox off: the kernel is the runner's user and can write its runner's folder. It makes
    owner.json a link to a forged record naming another run, and plants a folder-link for the
    sweep to list. The sweep trusts neither: it kills no process of the run named there, removes
    nothing through a link, and leaves the folder whose record it cannot trust alone."""
    base = tmp_path / "t"
    base.mkdir()
    other = "bystander-" + os.urandom(4).hex()
    place, record = decoy(tmp_path, other)
    victim_proc = bystander(other)
    run_id = "attacker-" + os.urandom(4).hex()
    try:
        report, folder = attack_then_crash(
            tmp_path, base, False, {"bystander": other, "decoy": str(place), "decoy_record": str(record)}, run_id)
        assert report["relink"] == "done" and report["plant"] == "done", report  # no sandbox: it could
        assert (folder / "owner.json").is_symlink() and (base / "nbvalidation-planted").is_symlink()
        assert hygiene.read_owner(str(folder)) is None
        assert hygiene.read_owner(str(base / "nbvalidation-planted")) is None

        assert hygiene.sweep(str(base)) == []
        assert victim_proc.poll() is None, "the sweep killed the run a planted record named"
        assert (place / "keep.txt").exists() and record.exists()
        assert victim_verdict(tmp_path, base, False)["verdict"] == "Succeeded"
    finally:
        victim_proc.kill()
        victim_proc.wait()
        hygiene.kill_all(run_id)


@pytest.mark.parametrize("record", [
    {"pid": 999999, "startTime": None, "runId": "x"},  # no start time: any live pid would pass for it
    {"pid": 1, "startTime": 0, "runId": "x", "extra": 1},
    {"pid": 0, "startTime": 1, "runId": "x"},
    {"pid": 999999, "startTime": 1, "runId": ""},
    {"pid": True, "startTime": 1, "runId": "x"},
    ["not", "a", "record"],
])
def test_the_sweep_trusts_only_the_record_the_runner_writes(tmp_path, record):
    folder = tmp_path / "nbvalidation-forged"
    folder.mkdir()
    (folder / "owner.json").write_text(json.dumps(record))
    assert hygiene.read_owner(str(folder)) is None
    assert hygiene.sweep(str(tmp_path)) == [] and folder.exists()
    (folder / "owner.json").write_text(json.dumps({"pid": 999999, "startTime": 1, "runId": "dead-run"}))
    os.chmod(folder / "owner.json", 0o666)  # writable by others: not the runner's
    assert hygiene.read_owner(str(folder)) is None
    os.chmod(folder / "owner.json", 0o600)
    assert hygiene.sweep(str(tmp_path)) == [str(folder)] and not folder.exists()
