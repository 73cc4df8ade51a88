"""Every CLI command ends cleanly: nothing on stderr but what it means to say. Before, `describe`,
`list` and the others ended with "Task was destroyed but it is pending!" (the store's change
poller, left on a loop that was never closed), and `run` of a notebook without cell ids printed
nbformat's MissingIDFieldWarning. Real CLI processes on a real data dir and real kernels."""

from __future__ import annotations

import json

from helpers import cli, write_notebook

from jupyter_nbvalidation.cli.main import COMMANDS

NOISE = ("Traceback", "Task was destroyed", "Exception ignored", "was never awaited", "ResourceWarning",
         "Warning:", "Event loop is closed")


def _clean(proc, *allowed: str) -> list[str]:
    """stderr's lines that are noise (not one of the ``allowed`` messages the command means)."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    return [ln for ln in lines if any(n in ln for n in NOISE) or not any(a in ln for a in allowed)]


def test_every_command_ends_without_noise_on_stderr(tmp_path):
    root, data = tmp_path / "proj", tmp_path / "data"
    write_notebook(root / "good.ipynb", ["print(2 + 2)"])
    write_notebook(root / "bad.ipynb", ["x = 1", "x / 0"])
    common = ("--local", "--data-dir", str(data))

    def go(*args: str):
        return cli(*args, cwd=root, no_servers=True, timeout=600)

    seen: dict[str, tuple] = {}
    proc = go("run", ".", "--no-build", *common, "-o", "json")
    seen["run"] = (proc, ("[1/2] ", "[2/2] "))  # with -o json, its progress lines go to stderr
    assert proc.returncode == 1, proc.stdout + proc.stderr  # bad.ipynb fails: the verdict, exit 1
    proc = go("submit", "good.ipynb", "--no-build", "--wait", *common)
    seen["submit"] = (proc, ())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    listed = go("list", *common, "-o", "json")
    seen["list"] = (listed, ())
    jobs = {j["spec"]["notebook"]["path"]: j["metadata"]["name"] for j in json.loads(listed.stdout)["items"]}
    good, bad = jobs["good.ipynb"], jobs["bad.ipynb"]
    seen["describe"] = (go("describe", bad, *common), ())
    seen["events"] = (go("events", good, *common), ())
    # the build is disabled: no environment to lock, nothing to search; each says so, as an error line
    seen["lock"] = (go("lock", "good.ipynb", *common), ("error:",))
    seen["bisect"] = (go("bisect", "bad.ipynb", *common), ("error:", "bisect: cannot bisect"))
    seen["cancel"] = (go("cancel", good, *common), ())
    seen["delete"] = (go("delete", good, *common), ())
    seen["gc"] = (go("gc", *common), ())
    seen["store"] = (go("store", "check", *common), ())
    seen["install"] = (go("install", "--print"), ())
    seen["hub-config"] = (go("hub-config", "--backend", "local"), ())
    # outside a Hub and without --url: refused in one line (exit 2), no server started
    seen["service"] = (go("service", "--data-dir", str(data), "--allow-root"), ("error: no URL to serve on",))
    # schedules run in a server: without one, said in one line (exit 2)
    seen["schedule"] = (go("schedule", "list", *common), ("error: schedules run in a Jupyter server",))
    assert sorted(seen) == sorted(c.name for c in COMMANDS), "a command without its check here"
    noisy = {name: _clean(proc, *allowed) for name, (proc, allowed) in seen.items()}
    assert {k: v for k, v in noisy.items() if v} == {}
    assert all(proc.returncode in (0, 1, 2) for proc, _ in seen.values()), {
        name: (proc.returncode, proc.stderr) for name, (proc, _) in seen.items()}
