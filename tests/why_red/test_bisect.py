"""`jupyter nbvalidation bisect NB` (issue 22): which package changes since the last success
turned a notebook red. The search (cause_search) with a fake oracle; then the command end to
end through the CLI on real uv builds from a --find-links folder of local wheels, its steps
probe jobs that never stand as the notebook's verdict."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

from helpers import cli as _cli
from helpers import make_wheel, wait_async, write_notebook

import jupyter_nbvalidation.why_red.cause_search as cs

JUPYTER = shutil.which("jupyter", path=os.path.dirname(sys.executable)) or "jupyter"
cli = partial(_cli, timeout=900, no_servers=True)


def oracle(rule):
    calls = []

    def ask(subset):
        calls.append(list(subset))
        return rule(set(subset)), f"job-{len(calls)}"

    return ask, calls


def test_a_single_culprit_is_found():
    changes = list("abcdefgh")
    ask, calls = oracle(lambda s: cs.FAIL if "f" in s else cs.PASS)
    r = cs.ddmin(changes, ask, 20, known={frozenset(): cs.PASS})
    assert r.culprits == ["f"] and r.complete
    assert len(r.steps) == len(calls) <= 8 and [s.number for s in r.steps] == list(range(1, len(calls) + 1))


def test_two_culprits_needed_together():
    ask, _ = oracle(lambda s: cs.FAIL if {"b", "g"} <= s else cs.PASS)
    r = cs.ddmin(list("abcdefgh"), ask, 40)
    assert r.culprits == ["b", "g"] and r.complete


def test_unresolvable_combinations_are_neither_pass_nor_fail():
    # c needs d (the resolver refuses c without d); c with d fails
    def rule(s):
        if "c" in s and "d" not in s:
            return cs.UNRESOLVED
        return cs.FAIL if "c" in s else cs.PASS

    ask, _ = oracle(rule)
    r = cs.ddmin(list("abcd"), ask, 30)
    assert r.complete and set(r.culprits) == {"c", "d"}
    assert any(s.outcome == cs.UNRESOLVED for s in r.steps)


def test_max_steps_reached_reports_what_is_known():
    ask, calls = oracle(lambda s: cs.FAIL if "h" in s else cs.PASS)
    r = cs.ddmin(list("abcdefghijklmnop"), ask, 2)
    assert not r.complete and len(calls) == 2 and "stopped after 2" in r.reason
    assert r.culprits is not None and "h" in r.culprits  # the smallest failing set seen so far


def test_changes_alone_do_not_reproduce():
    ask, _ = oracle(lambda s: cs.PASS)
    r = cs.ddmin(list("ab"), ask, 10)
    assert r.culprits is None and r.complete and "do not reproduce" in r.reason


def test_pinned_requirements_keep_options_and_move_only_the_subset():
    def rec(**d):
        return {"distributions": [{"name": n, "version": v, "source": {"kind": "index"}} for n, v in d.items()]}

    s, f = rec(a="1.0", b="1.0", gone="3"), rec(a="2.0", b="2.0", new="1")
    f["distributions"].append({"name": "loc", "version": "0.1", "source": {"kind": "local", "path": "/r/pkg"}})
    assert [c.describe() for c in cs.changed_distributions(s, f)] == [
        "a 1.0 → 2.0", "b 1.0 → 2.0", "-gone 3", "+loc 0.1", "+new 1"]
    lines, notes = cs.pinned_requirements(s, f, ["a", "new", "gone", "loc"], ["--find-links /r/wheels", "a", "-e /r/x"])
    assert lines == ["--find-links /r/wheels", "a==2.0", "b==1.0", "/r/pkg", "new==1"]
    assert notes and "local path" in notes[0]
    assert cs.pinned_requirements(s, f, [], [])[0] == ["a==1.0", "b==1.0", "gone==3"]


class WithoutRecords:
    """What a server without environment records answers: jobs, but no change summary."""

    def api_path(self, p):
        return "nb.ipynb"

    def list_jobs(self, notebook, limit):
        return [{"metadata": {"name": "nb-2"}, "status": {"phase": "Failed"}}]

    def get(self, name):
        return {"metadata": {"name": name}, "spec": {"notebook": {"path": "nb.ipynb"}}, "status": {"phase": "Failed"}}

    def changes(self, name):
        from jupyter_nbvalidation.clients.base import ClientError

        raise ClientError("this backend does not record environments, so it cannot say what changed", 404)


def test_a_server_without_records_is_refused_clearly_exit_2(tmp_path, capsys):
    import argparse

    import jupyter_nbvalidation.cli.bisect as bisect_cmd

    args = argparse.Namespace(notebook="nb.ipynb", job=None, max_steps=12, step_timeout=None, output="text")
    try:
        bisect_cmd._bisect(args, WithoutRecords(), False)
    except bisect_cmd.Stop as e:
        assert e.code == 2 and "needs the environment records" in e.message and "cannot say what changed" in e.message
    else:
        raise AssertionError("bisected without environment records")


# --- end to end: the CLI, in a subprocess, on the local backend --------------------------------------

def _listed(tmp_path: Path, data: Path, probes: bool = False) -> list[dict]:
    out = cli("list", "--local", "--data-dir", str(data), "--notebook", "proj/nb.ipynb", "-o", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["items"]


def test_bisect_names_the_drifted_package_and_probes_stay_hidden(tmp_path):
    proj, data = tmp_path / "proj", tmp_path / "data"
    (proj / "wheels").mkdir(parents=True)
    for name in ("nbvdrifta", "nbvdriftb"):
        (proj / "wheels" / f"{name}-1.0-py3-none-any.whl").write_bytes(make_wheel(name, "1.0", "VALUE = 1\n"))
    (proj / "requirements.txt").write_text("--find-links ./wheels\nnbvdrifta\nnbvdriftb\n")  # unpinned
    write_notebook(proj / "nb.ipynb", ["import nbvdrifta, nbvdriftb", "assert nbvdrifta.VALUE == 1, nbvdrifta.VALUE"])
    local = ("--local", "--data-dir", str(data))
    green = cli("run", *local, "proj/nb.ipynb", cwd=tmp_path)
    assert green.returncode == 0, green.stdout + green.stderr

    (proj / "wheels" / "nbvdrifta-2.0-py3-none-any.whl").write_bytes(make_wheel("nbvdrifta", "2.0", "VALUE = 2\n"))
    (proj / "wheels" / "nbvdriftb-2.0-py3-none-any.whl").write_bytes(make_wheel("nbvdriftb", "2.0", "VALUE = 2\n"))
    red = cli("run", *local, "proj/nb.ipynb", cwd=tmp_path)
    assert red.returncode == 1, red.stdout + red.stderr
    red_name = _listed(tmp_path, data)[0]["metadata"]["name"]

    out = cli("bisect", *local, "proj/nb.ipynb", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "nbvdrifta 1.0 → 2.0 turns it red (" in out.stdout, out.stdout
    assert "step 1/12: the last success’s pins → Succeeded" in out.stdout
    assert "nbvdriftb 1.0 → 2.0 turns" not in out.stdout

    listed = _listed(tmp_path, data)
    assert listed[0]["metadata"]["name"] == red_name and len(listed) == 2  # the probes are not the notebook's jobs
    every = json.loads(cli("list", *local, "-o", "json", cwd=tmp_path).stdout)["items"]
    assert len(every) == 2
    # -o json: the structured result, from the probes' outcomes (the same configurations: no new build needed)
    js = cli("bisect", *local, "proj/nb.ipynb", "--max-steps", "5", "-o", "json", cwd=tmp_path)
    assert js.returncode == 0, js.stdout + js.stderr
    result = json.loads(js.stdout)
    assert result["result"] == "found" and result["failingJob"] == red_name
    assert result["culprits"] == [{"name": "nbvdrifta", "from": "1.0", "to": "2.0"}]
    assert result["validations"] == len(result["steps"]) <= 5
    assert _listed(tmp_path, data)[0]["metadata"]["name"] == red_name


def test_bisect_says_the_change_is_in_the_notebook(tmp_path):
    proj, data = tmp_path / "proj", tmp_path / "data"
    (proj / "wheels").mkdir(parents=True)
    (proj / "wheels" / "nbvdrifta-1.0-py3-none-any.whl").write_bytes(make_wheel("nbvdrifta", "1.0", "VALUE = 1\n"))
    (proj / "requirements.txt").write_text("--find-links ./wheels\nnbvdrifta\n")
    write_notebook(proj / "nb.ipynb", ["import nbvdrifta", "assert nbvdrifta.VALUE == 1"])
    local = ("--local", "--data-dir", str(data))
    assert cli("run", *local, "proj/nb.ipynb", cwd=tmp_path).returncode == 0
    write_notebook(proj / "nb.ipynb", ["import nbvdrifta", "assert nbvdrifta.VALUE == 3"])  # broken by an edit
    assert cli("run", *local, "proj/nb.ipynb", cwd=tmp_path).returncode == 1
    out = cli("bisect", *local, "proj/nb.ipynb", cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "fails with the last success's environment too: the change is in the notebook (cells edited 2" in out.stdout
    # and a notebook without an earlier success cannot be bisected (exit 2)
    write_notebook(proj / "other.ipynb", ["1/0"])
    assert cli("run", *local, "proj/other.ipynb", cwd=tmp_path).returncode == 1
    none = cli("bisect", *local, "proj/other.ipynb", cwd=tmp_path)
    assert none.returncode == 2 and "no earlier success" in none.stderr, none.stderr


async def test_probe_jobs_never_stand_as_the_notebooks_verdict(jp_fetch, jp_root_dir):
    """REST: POST /jobs?probeOf= marks a probe; GET /jobs leaves it out unless probes=true; the verdict
    cache never answers with it, nor does it become the last success."""
    from helpers import rest_call as call
    from helpers import rest_wait_terminal
    from tornado.httpclient import HTTPClientError

    write_notebook(jp_root_dir / "p.ipynb", ["1/0"])
    spec = {"notebook": {"path": "p.ipynb"}}
    red = await call(jp_fetch, "jobs", method="POST", body=spec)
    red = await rest_wait_terminal(jp_fetch, red["metadata"]["name"], 300)
    assert red["status"]["phase"] == "Failed"
    write_notebook(jp_root_dir / "p.ipynb", ["print(1)"])
    probe = await call(jp_fetch, "jobs", method="POST", body=spec, params={"probeOf": red["metadata"]["name"]})
    assert probe["metadata"]["annotations"]["nbvalidation.dev/probe-of"] == red["metadata"]["name"]
    probe = await rest_wait_terminal(jp_fetch, probe["metadata"]["name"], 300)
    assert probe["status"]["phase"] == "Succeeded"

    listed = await call(jp_fetch, "jobs", params={"notebook": "p.ipynb"})
    assert [j["metadata"]["name"] for j in listed["items"]] == [red["metadata"]["name"]]
    both = await call(jp_fetch, "jobs", params={"notebook": "p.ipynb", "probes": "true"})
    assert [j["metadata"]["name"] for j in both["items"]] == [probe["metadata"]["name"], red["metadata"]["name"]]
    assert (await call(jp_fetch, "unchanged", method="POST", body=spec))["job"] is None
    assert (await call(jp_fetch, "jobs", red["metadata"]["name"], "changes"))["since"] is None

    for method, params, code in (("POST", {"probeOf": "no-such-job"}, 404), ("GET", {"probes": "maybe"}, 400)):
        try:
            await call(jp_fetch, "jobs", method=method, body=spec if method == "POST" else None, params=params)
        except HTTPClientError as e:
            assert e.code == code, (params, e.code)
        else:
            raise AssertionError(f"{params} accepted")


def test_ctrl_c_cancels_the_running_step(tmp_path):
    import signal
    import time

    proj, data = tmp_path / "proj", tmp_path / "data"
    (proj / "wheels").mkdir(parents=True)
    (proj / "wheels" / "nbvdrifta-1.0-py3-none-any.whl").write_bytes(make_wheel("nbvdrifta", "1.0", "VALUE = 1\n"))
    (proj / "requirements.txt").write_text("--find-links ./wheels\nnbvdrifta\n")
    write_notebook(proj / "nb.ipynb", ["import pathlib, time\ntime.sleep(120 if pathlib.Path('slow').exists() else 0)",
                                       "import nbvdrifta\nassert nbvdrifta.VALUE == 1"])
    local = ("--local", "--data-dir", str(data))
    assert cli("run", *local, "proj/nb.ipynb", cwd=tmp_path).returncode == 0
    (proj / "wheels" / "nbvdrifta-2.0-py3-none-any.whl").write_bytes(make_wheel("nbvdrifta", "2.0", "VALUE = 2\n"))
    assert cli("run", *local, "proj/nb.ipynb", cwd=tmp_path).returncode == 1
    (proj / "slow").write_text("")  # step 1 (the old pins) now runs for two minutes
    proc = subprocess.Popen([JUPYTER, "nbvalidation", "bisect", *local, "proj/nb.ipynb"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            env={**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "no-servers")})
    try:
        time.sleep(12)  # step 1 submitted, its environment built or building, its kernel maybe asleep
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out + err
    assert "interrupted: step job " in err and "cancelled (Failed, Cancelled)" in err, err


# --- in the server: the lab's Find the cause (POST/GET/DELETE /jobs/{name}/bisect) -----------------

async def _drifted(jp_fetch, root: Path) -> tuple[dict, dict]:
    """A green job, then a red one after nbvdrifta 2.0 appeared (nbvdriftb 2.0 too, harmless)."""
    from helpers import rest_call as call
    from helpers import rest_wait_terminal

    proj = root / "proj"
    (proj / "wheels").mkdir(parents=True)
    for name in ("nbvdrifta", "nbvdriftb"):
        (proj / "wheels" / f"{name}-1.0-py3-none-any.whl").write_bytes(make_wheel(name, "1.0", "VALUE = 1\n"))
    (proj / "requirements.txt").write_text("--find-links ./wheels\nnbvdrifta\nnbvdriftb\n")
    first = "import pathlib, time\ntime.sleep(120 if pathlib.Path('slow').exists() else 0)"
    write_notebook(proj / "nb.ipynb", [first, "import nbvdrifta, nbvdriftb\nassert nbvdrifta.VALUE == 1"])

    async def validate() -> dict:
        job = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "proj/nb.ipynb"}})
        return await rest_wait_terminal(jp_fetch, job["metadata"]["name"], 400)

    green = await validate()
    assert green["status"]["phase"] == "Succeeded", green["status"]
    for name in ("nbvdrifta", "nbvdriftb"):
        (proj / "wheels" / f"{name}-2.0-py3-none-any.whl").write_bytes(make_wheel(name, "2.0", "VALUE = 2\n"))
    red = await validate()
    assert red["status"]["phase"] == "Failed", red["status"]
    return green, red


async def _until(jp_fetch, name: str, done, timeout: float = 600) -> dict:
    from helpers import rest_call as call

    seen: dict = {}

    async def finished() -> dict | None:
        seen["doc"] = doc = await call(jp_fetch, "jobs", name, "bisect")
        return doc if done(doc) else None

    return await wait_async(finished, timeout, lambda: f"the search of {name} to end: {seen['doc']}", interval=0.5)


async def test_the_server_finds_the_cause_step_by_step_and_stops_on_asking(jp_fetch, jp_root_dir):
    from helpers import rest_call as call
    from helpers import rest_wait_terminal
    from tornado.httpclient import HTTPClientError

    green, red = await _drifted(jp_fetch, jp_root_dir)
    name = red["metadata"]["name"]
    try:
        await call(jp_fetch, "jobs", name, "bisect")
    except HTTPClientError as e:
        assert e.code == 404
    else:
        raise AssertionError("a search before one was started")
    try:  # only a failed job has a cause to find
        await call(jp_fetch, "jobs", green["metadata"]["name"], "bisect", method="POST", body={})
    except HTTPClientError as e:
        assert e.code == 409 and "did not fail" in json.loads(e.response.body)["error"]["message"]
    else:
        raise AssertionError("bisected a succeeded job")

    started = await call(jp_fetch, "jobs", name, "bisect", method="POST", body={}, params={"maxSteps": 6})
    assert started["state"] == "running" and started["maxSteps"] == 6 and started["job"] == name
    again = await call(jp_fetch, "jobs", name, "bisect", method="POST", body={})
    assert again["state"] in ("running", "finished")  # the same search, not a second one
    doc = await _until(jp_fetch, name, lambda d: d["state"] != "running")
    assert doc["state"] == "finished", doc
    result = doc["result"]
    assert result["result"] == "found" and result["culprits"] == [{"name": "nbvdrifta", "from": "1.0", "to": "2.0"}]
    assert result["message"].startswith("nbvdrifta 1.0 → 2.0 turns it red (")
    assert len(doc["steps"]) == result["validations"] <= 6
    assert doc["steps"][0]["text"].startswith("step 1/6: the last success’s pins → Succeeded (job ")
    assert doc["lines"][0] == f"bisect proj/nb.ipynb: failing job {name}, last success {green['metadata']['name']}"
    # the steps were probes: the notebook's jobs are still the two it had
    listed = await call(jp_fetch, "jobs", params={"notebook": "proj/nb.ipynb"})
    assert [j["metadata"]["name"] for j in listed["items"]] == [name, green["metadata"]["name"]]

    # a finished search is started again on asking; stopped, its running step is cancelled
    (jp_root_dir / "proj" / "slow").write_text("")  # step 1 now sleeps for two minutes
    seen = {j["metadata"]["name"] for j in (await call(jp_fetch, "jobs", params={"notebook": "proj/nb.ipynb",
                                                                                  "probes": "true"}))["items"]}
    restarted = await call(jp_fetch, "jobs", name, "bisect", method="POST", body={})
    assert restarted["state"] == "running" and restarted["steps"] == []
    probe = await _until_probe(jp_fetch, seen)
    stopped = await call(jp_fetch, "jobs", name, "bisect", method="DELETE")
    assert stopped["state"] == "stopped" and stopped["result"]["result"] == "stopped", stopped
    assert probe in stopped["result"]["message"]
    step = await rest_wait_terminal(jp_fetch, probe, 60)
    assert (step["status"]["phase"], step["status"]["reason"]) == ("Failed", "Cancelled"), step["status"]


async def _until_probe(jp_fetch, seen: set[str]) -> str:
    from helpers import rest_call as call

    async def step() -> str | None:
        items = (await call(jp_fetch, "jobs", params={"notebook": "proj/nb.ipynb", "probes": "true"}))["items"]
        probes = [j for j in items if "nbvalidation.dev/probe-of" in (j["metadata"].get("annotations") or {})
                  and j["metadata"]["name"] not in seen]
        return probes[0]["metadata"]["name"] if probes else None

    return await wait_async(step, 120, "a step job to be submitted", interval=0.5)
