"""`jupyter nbvalidation ...` through the real entry point, with and without
a running server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading

import pytest
from helpers import cli, held_setup_py, stdout, wait, write_golden, write_notebook

JUPYTER = shutil.which("jupyter", path=os.path.dirname(sys.executable)) or "jupyter"


@pytest.fixture
def folder(tmp_path):
    write_notebook(tmp_path / "ok.ipynb", ["print('fine')"])
    write_notebook(tmp_path / "bad.ipynb", ["x = 1", "x / 0"])
    return tmp_path


def test_without_a_server_runs_in_process_and_gates_ci(folder, tmp_path):
    env = {"JUPYTER_RUNTIME_DIR": str(tmp_path / "no-servers")}
    data = ["--data-dir", str(tmp_path / "data")]
    ok = cli("submit", "ok.ipynb", "--wait", "--no-build", *data, cwd=folder, env=env)
    assert ok.returncode == 0, ok.stderr + ok.stdout
    assert "Succeeded" in ok.stdout and "ValidationRunning" in ok.stdout
    bad = cli("submit", "bad.ipynb", "--wait", "--no-build", *data, cwd=folder, env=env)
    assert bad.returncode == 1
    assert "Failed cell 2: ZeroDivisionError: division by zero" in bad.stdout
    assert "Environment:  build disabled: the server's interpreter" in bad.stdout.splitlines()  # issue 21
    assert "Environment:" not in ok.stdout  # a verdict that passed: the line is for failures

    listed = cli("list", "--output", "json", *data, cwd=folder, env=env)
    items = json.loads(listed.stdout)["items"]
    assert [j["spec"]["notebook"]["path"] for j in items] == ["bad.ipynb", "ok.ipynb"]
    name = items[0]["metadata"]["name"]

    described = cli("describe", name, *data, cwd=folder, env=env)
    assert described.returncode == 0
    for expected in ("Phase:        Failed", "Timeline:", "Events:", "ValidationFailed", "Failed cell 2",
                     "Environment:  build disabled: the server's interpreter"):
        assert expected in described.stdout, described.stdout
    # kubectl-describe-like event order
    lines = described.stdout.split("Events:")[1]
    assert lines.index("Accepted") < lines.index("ValidationStarted") < lines.index("ValidationFailed")

    events = json.loads(cli("events", name, "-o", "json", *data, cwd=folder, env=env).stdout)["items"]
    assert [e["reason"] for e in events] == ["Accepted", "ValidationStarted", "ValidationFailed"]
    assert "Initializing" in json.dumps(json.loads(
        cli("describe", name, "-o", "json", *data, cwd=folder, env=env).stdout)["timeline"])


def test_bad_input_is_a_clear_error(folder, tmp_path):
    env = {"JUPYTER_RUNTIME_DIR": str(tmp_path / "no-servers")}
    data = ["--data-dir", str(tmp_path / "data")]
    missing = cli("submit", "missing.ipynb", "--wait", *data, cwd=folder, env=env)
    assert missing.returncode == 2 and "missing.ipynb" in missing.stderr
    (folder / "broken.ipynb").write_text("{nope")
    broken = cli("submit", "broken.ipynb", "--wait", *data, cwd=folder, env=env)
    assert broken.returncode == 2 and "not a valid notebook" in broken.stderr
    write_notebook(folder / "r.ipynb", ["print(1)"], metadata={"kernelspec": {"name": "ir", "language": "R",
                                                                             "display_name": "R"}})
    r = cli("submit", "r.ipynb", "--wait", *data, cwd=folder, env=env)
    assert r.returncode == 2 and "'R'" in r.stderr and "spec.notebook.path" in r.stderr, r.stderr
    bad_timeout = cli("submit", "ok.ipynb", "--timeout", "later", "--wait", *data, cwd=folder, env=env)
    assert bad_timeout.returncode == 2 and "spec.timeout" in bad_timeout.stderr
    unknown = cli("describe", "no-such-job", *data, cwd=folder, env=env)
    assert unknown.returncode == 2 and "no-such-job" in unknown.stderr
    assert json.loads(cli("list", "-o", "json", *data, cwd=folder, env=env).stdout)["items"] == []


def test_comparison_options(folder, tmp_path):
    env = {"JUPYTER_RUNTIME_DIR": str(tmp_path / "no-servers")}
    data = ["--data-dir", str(tmp_path / "data")]
    write_notebook(folder / "noisy.ipynb", ["import sys, uuid\nprint(uuid.uuid4(), file=sys.stderr)\nprint('same')"])
    write_golden(folder / "noisy.ipynb", {0: [{"output_type": "stream", "name": "stderr", "text": "an id of an earlier run\n"},
                                              *stdout("same\n")]}, folder / "golden.ipynb", counts=True)
    strict = cli("submit", "noisy.ipynb", "--golden", "golden.ipynb", "--no-build", "--wait", *data, cwd=folder, env=env)
    assert strict.returncode == 1, strict.stdout + strict.stderr
    loose = cli("submit", "noisy.ipynb", "--golden", "golden.ipynb", "--no-build", "--wait",
                "--ignore-output", "stream:stderr", *data, cwd=folder, env=env)
    assert loose.returncode == 0, loose.stdout + loose.stderr
    bad = cli("submit", "noisy.ipynb", "--ignore-output", "pictures", "--wait", *data, cwd=folder, env=env)
    assert bad.returncode == 2 and "comparisonConfig.ignoreOutputTypes[0]" in bad.stderr, bad.stderr


def test_with_a_running_server(server_proc):
    server = server_proc().start()
    write_notebook(server.root / "nb.ipynb", ["print(42)"])
    write_notebook(server.root / "slow.ipynb", ["import time\ntime.sleep(60)"])
    env = {"JUPYTER_RUNTIME_DIR": str(server.runtime)}
    done = cli("submit", "nb.ipynb", "--wait", "--no-build", cwd=server.root, env=env)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "Succeeded" in done.stdout
    # it went through the server (the server's data dir has the job)
    jobs = server.client().request("GET", "jobs")["items"]
    assert len(jobs) == 1 and jobs[0]["status"]["phase"] == "Succeeded"

    sub = cli("submit", "slow.ipynb", "--no-build", "-o", "json", cwd=server.root, env=env)
    name = json.loads(sub.stdout)["metadata"]["name"]
    cancel = cli("cancel", name, cwd=server.root, env=env)
    assert cancel.returncode == 0 and "cancellation requested" in cancel.stdout
    described = cli("describe", name, cwd=server.root, env=env)
    assert described.returncode == 0 and name in described.stdout


def test_input_files_and_refused_requirements(folder, tmp_path):
    """--input-file snapshots a file beside the notebook; a refused requirement is exit 2 naming the line."""
    env = {"JUPYTER_RUNTIME_DIR": str(tmp_path / "no-servers")}
    data = ["--data-dir", str(tmp_path / "data")]
    write_notebook(folder / "reads.ipynb", ["print(open('data.csv').read())"])
    (folder / "data.csv").write_text("a,b\n")
    ok = cli("submit", "reads.ipynb", "--input-file", "*.csv", "--no-build", "--wait", *data, cwd=folder, env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    none = cli("submit", "reads.ipynb", "--input-file", "*.nothing", "--no-build", "--wait", *data, cwd=folder, env=env)
    assert none.returncode == 2 and "spec.inputFiles[0]" in none.stderr and "matches no file" in none.stderr
    refused = cli("submit", "ok.ipynb", "--requirement", "six", "--requirement=--constr /etc/passwd", "--wait",
                  *data, cwd=folder, env=env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "requirements[1]" in refused.stderr and "--constr abbreviates --constraint" in refused.stderr


def test_follow_build_log(server_proc):
    """Through a real server: submit --wait --follow-build-log prints the build log while it builds.
    The package's setup.py waits until this test has read a line of the build log and the Building
    phase from the CLI, so those can only have been printed while the build ran."""
    server = server_proc().start()
    release = server.root / "release-build"
    pkg = server.root / "slowpkg"
    pkg.mkdir()
    (pkg / "setup.py").write_text(held_setup_py(release, "nbv-slowpkg-cli", "nbv_slowpkg_cli"))
    (pkg / "nbv_slowpkg_cli.py").write_text("VALUE = 7\n")
    (server.root / "requirements.txt").write_text("./slowpkg\n")
    write_notebook(server.root / "nb.ipynb", ["import nbv_slowpkg_cli", "print(nbv_slowpkg_cli.VALUE)"])
    proc = subprocess.Popen([JUPYTER, "nbvalidation", "submit", "nb.ipynb", "--wait", "--follow-build-log"],
                            cwd=server.root, env={**os.environ, "JUPYTER_RUNTIME_DIR": str(server.runtime)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            # (the first log lines may come before the CLI's look sees the Building phase)
            if not release.exists() and any(ln.startswith("  build | $ ") for ln in lines) \
                    and any(" Building " in ln for ln in lines) \
                    and not any(" ValidationRunning " in ln or " BuildComplete " in ln for ln in lines):
                release.touch()
        proc.wait(timeout=900)
    finally:
        released = release.exists()
        release.touch()  # whatever happened, the build is not left waiting
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "\n".join(lines)
    assert released, f"no build log printed while Building:\n{out}"
    # (the verdict is not what this checks: on a machine loaded far past its cores a fresh
    # environment's first kernel start can exceed its 120 s startup timeout)
    assert proc.returncode in (0, 1), out
    first_log = next(i for i, ln in enumerate(lines) if ln.startswith("  build | $ "))
    building = next(i for i, ln in enumerate(lines) if " Building " in ln)
    # the phase after Building: the CLI prints a phase line, then the log's rest, at each look
    after = next(i for i, ln in enumerate(lines) if " ValidationRunning " in ln or " BuildComplete " in ln)
    assert first_log < after and building < after, out
    assert any(ln.startswith("  build | kernel ready") for ln in lines), out


def test_progress_and_cancelled_wording(server_proc):
    """Through a real server: submit --wait and describe --follow print the running cell
    (numbered as JupyterLab does); a cancel reads Cancelled, never Failed, exit code 1."""
    server = server_proc().start()
    env = {"JUPYTER_RUNTIME_DIR": str(server.runtime)}
    write_notebook(server.root / "slow.ipynb", ["import time", "time.sleep(2)", "time.sleep(120)"])
    waiting = subprocess.Popen([JUPYTER, "nbvalidation", "submit", "slow.ipynb", "--wait", "--no-build"],
                               cwd=server.root, env={**os.environ, **env}, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    client = server.client()
    seen: dict = {}

    def in_cell_2() -> bool:
        seen["jobs"] = jobs = [j for j in client.request("GET", "jobs")["items"]
                               if j["spec"]["notebook"]["path"] == "slow.ipynb"]
        seen["progress"] = (jobs[0]["status"].get("progress") or {}) if jobs else {}
        return seen["progress"].get("currentCellIndex") == 2

    # 600 s: a kernel start on a machine loaded far past its cores
    wait(in_cell_2, 600, lambda: f"slow.ipynb to run its third cell: {seen['jobs']}", interval=0.3)
    jobs, progress = seen["jobs"], seen["progress"]
    assert progress.get("currentCellIndex") == 2, jobs
    name = jobs[0]["metadata"]["name"]
    followed = subprocess.Popen([JUPYTER, "nbvalidation", "describe", name, "--follow"], cwd=server.root,
                                env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    lines: list[str] = []  # what describe --follow printed so far
    reader = threading.Thread(target=lambda: lines.extend(iter(followed.stdout.readline, "")), daemon=True)
    reader.start()
    # cancel once the follower has shown the running cell
    wait(lambda: "Progress:     cell 3 running" in "".join(lines), 120,
         lambda: f"describe --follow to show cell 3 running: {''.join(lines)}", interval=0.1)
    assert cli("cancel", name, cwd=server.root, env=env).returncode == 0
    out, _ = waiting.communicate(timeout=300)
    assert waiting.returncode == 1, out  # a cancelled job still fails the gate
    assert f"⊘ {name}: Cancelled" in out and "✘" not in out, out
    assert "cell 3 running" in out, out  # human numbering of the running cell (index 2)
    followed.wait(timeout=300)
    reader.join(timeout=60)
    described = "".join(lines)
    assert "Progress:     cell 3 running" in described, described
    assert f"⊘ {name}: Cancelled" in described, described
    assert "Phase:        Cancelled" in cli("describe", name, cwd=server.root, env=env).stdout
