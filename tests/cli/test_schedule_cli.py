"""`jupyter nbvalidation schedule ...` against a real Jupyter server (its runtime file found from
the current folder): create from options (a folder's notebook; a git repository at a ref) and
from a manifest, list, describe with the strip of recent verdicts, pause, resume, trigger,
delete (its jobs stay); bad input is exit 2 naming the field; without a server, exit 2 saying
schedules run in one."""

from __future__ import annotations

import json

from git_support import Repo
from helpers import cli, wait, write_notebook


def test_schedule_commands_through_a_running_server(server_proc, tmp_path):
    server = server_proc().start()
    write_notebook(server.root / "nb.ipynb", ["print(42)"])
    repo = Repo(tmp_path / "git")
    repo.notebook("nbs/check.ipynb", ["print('from git')"])
    commit = repo.commit("first")
    env = {"JUPYTER_RUNTIME_DIR": str(server.runtime)}

    def run(*args: str):
        return cli("schedule", *args, cwd=server.root, env=env)

    made = run("create", "local", "nb.ipynb", "--cron", "@daily", "--no-build")
    assert made.returncode == 0 and "schedule local created; next tick" in made.stdout, made.stdout + made.stderr
    made = run("create", "fromgit", "nbs/check.ipynb", "--git", repo.url, "--ref", "main", "--cron", "0 6 * * mon",
               "--no-build", "--timeout", "5m")
    assert made.returncode == 0, made.stdout + made.stderr
    (server.root / "manifest.yaml").write_text(
        "apiVersion: nbvalidation.dev/v1alpha1\nkind: NotebookValidationSchedule\nmetadata:\n  name: manifest\n"
        "spec:\n  schedule: '@hourly'\n  suspend: true\n  jobTemplate:\n    spec:\n      notebook: {path: nb.ipynb}\n")
    assert run("create", "-f", "manifest.yaml").returncode == 0

    listed = run("list")
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["fromgit", "local", "manifest"]
    assert "paused" in listed.stdout.splitlines()[2]
    as_json = json.loads(run("list", "-o", "json").stdout)
    assert as_json["items"][0]["spec"]["jobTemplate"]["spec"]["timeout"] == "5m"

    trig = run("trigger", "fromgit", "-o", "json")
    assert trig.returncode == 0, trig.stderr
    name = json.loads(trig.stdout)["metadata"]["name"]
    api = server.client()
    wait(lambda: api.request("GET", f"jobs/{name}")["status"].get("phase") == "Succeeded", 120, f"{name} to pass")
    described = run("describe", "fromgit")
    assert described.returncode == 0
    assert "Schedule:     0 6 * * mon (UTC)" in described.stdout and "Recent:       ✓" in described.stdout
    assert name in described.stdout and commit[:12] in described.stdout, described.stdout

    assert "paused" in run("pause", "local").stdout
    assert json.loads(run("describe", "local", "-o", "json").stdout)["spec"]["suspend"] is True
    assert "resumed" in run("resume", "local").stdout
    gone = run("delete", "fromgit")
    assert gone.returncode == 0 and "its jobs are kept" in gone.stdout
    assert api.request("GET", f"jobs/{name}")["metadata"]["name"] == name

    bad = run("create", "broken", "nb.ipynb", "--cron", "99 * * * *")
    assert bad.returncode == 2 and "spec.schedule" in bad.stderr and "minute: 99" in bad.stderr
    bad = run("create", "broken", "nb.ipynb", "--cron", "@daily", "--git", "ftp://x/r.git")
    assert bad.returncode == 2 and "spec.jobTemplate.spec.notebook.git.url" in bad.stderr
    assert run("describe", "nope").returncode == 2
    assert run("create", "x", "nb.ipynb").returncode == 2  # no --cron
    assert [d["metadata"]["name"] for d in json.loads(run("list", "-o", "json").stdout)["items"]] == \
        ["local", "manifest"]


def test_without_a_server_schedule_says_it_needs_one(tmp_path):
    got = cli("schedule", "list", cwd=tmp_path, no_servers=True)
    assert got.returncode == 2 and "schedules run in a Jupyter server" in got.stderr
