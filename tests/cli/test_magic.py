"""%nbvalidate in a real kernel started by a real Jupyter server."""

from __future__ import annotations

import json
import time

import pytest
from helpers import stdout, wait, write_golden, write_notebook
from jupyter_client import BlockingKernelClient


def _kernel_in_session(server, path: str) -> BlockingKernelClient:
    api = server.client()
    session = api.request_root("POST", "api/sessions", {"path": path, "type": "notebook", "name": path,
                                                        "kernel": {"name": "python3"}})
    conn = server.runtime / f"kernel-{session['kernel']['id']}.json"
    wait(conn.exists, 30, f"the kernel's connection file {conn}", interval=0.1)
    kc = BlockingKernelClient()
    kc.load_connection_file(str(conn))
    kc.start_channels()
    # A client not made by the kernel's manager judges "alive" by heartbeats alone, and one beat
    # missed while the kernel starts on a loaded machine reads as "died" (seen once in CI, with
    # the kernel alive). The server still lists the kernel then: ask again; a dead one stays dead.
    for attempt in range(3):
        try:
            kc.wait_for_ready(timeout=60)
            return kc
        except RuntimeError:
            state = api.request_root("GET", f"api/kernels/{session['kernel']['id']}")["execution_state"]
            if attempt == 2 or state == "dead":
                raise
            time.sleep(1)
    return kc


def _run(kc: BlockingKernelClient, code: str, timeout: float = 240) -> tuple[str, list[dict]]:
    """Execute code; return (final text of the cell's outputs, every message)."""
    msg_id = kc.execute(code)
    displays: dict[str, str] = {}
    order: list[str] = []
    messages = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        messages.append(msg)
        kind, content = msg["msg_type"], msg["content"]
        if kind in ("display_data", "update_display_data"):
            did = (content.get("transient") or {}).get("display_id") or f"anon{len(order)}"
            if did not in displays:
                order.append(did)
            displays[did] = content["data"].get("text/plain", "")
        elif kind == "stream":
            order.append(f"s{len(order)}")
            displays[order[-1]] = content["text"]
        elif kind == "error":
            raise AssertionError("\n".join(content["traceback"]))
        elif kind == "status" and content["execution_state"] == "idle":
            break
    return "\n".join(displays[k] for k in order), messages


@pytest.fixture
def lab(server_proc):
    server = server_proc().start()
    write_notebook(server.root / "work" / "analysis.ipynb", ["x = 21 * 2", "print(x)"])
    write_notebook(server.root / "work" / "broken.ipynb", ["y = 1", "y / 0"])
    kc = _kernel_in_session(server, "work/analysis.ipynb")
    yield server, kc
    kc.stop_channels()


def test_nbvalidate_current_notebook_with_live_progress(lab):
    server, kc = lab
    text, messages = _run(kc, "%load_ext jupyter_nbvalidation\n%nbvalidate --no-build")
    assert "work/analysis.ipynb" in text
    assert "✔" in text and "Succeeded" in text, text
    # progress was shown in place: one display updated several times
    updates = [m for m in messages if m["msg_type"] == "update_display_data"]
    assert len(updates) >= 2
    assert any("ValidationRunning" in m["content"]["data"]["text/plain"] for m in updates)
    assert "Initializing" in text and "ValidationRunning" in text  # the compact timeline
    jobs = server.client().request("GET", "jobs")["items"]
    assert [j["spec"]["notebook"]["path"] for j in jobs] == ["work/analysis.ipynb"]


def test_nbvalidate_other_notebook_reports_the_failing_cell(lab):
    server, kc = lab
    text, _ = _run(kc, "%load_ext jupyter_nbvalidation\n%nbvalidate broken.ipynb --no-build --timeout 2m")
    assert "Failed" in text and "Failed cell 2: ZeroDivisionError: division by zero" in text, text
    job = server.client().request("GET", "jobs")["items"][0]
    assert job["spec"]["notebook"]["path"] == "work/broken.ipynb" and job["spec"]["timeout"] == "2m"


def test_nbvalidate_no_wait_and_bad_input(lab):
    server, kc = lab
    text, _ = _run(kc, "%load_ext jupyter_nbvalidation\n%nbvalidate --no-build --no-wait")
    assert "Pending" in text or "Initializing" in text
    text, _ = _run(kc, "%nbvalidate missing.ipynb")
    assert text.startswith("%nbvalidate: ") and "missing.ipynb" in text
    text, _ = _run(kc, "%nbvalidate --bogus")
    assert "usage: %nbvalidate" in text
    # --help prints the whole help (every spec option of `submit`), not an error
    text, _ = _run(kc, "%nbvalidate --help")
    assert not text.startswith("%nbvalidate: ") and "--abs-tol X" in text and "--lax" in text, text


def test_nbvalidate_help_lists_every_spec_option_of_submit():
    """%nbvalidate --help names each option cli.add_spec_options gives `submit` and `run`."""
    import argparse

    from jupyter_nbvalidation.cli.spec_options import add_spec_options
    from jupyter_nbvalidation.magic import MagicHelp, parse

    shared = argparse.ArgumentParser(add_help=False)
    add_spec_options(shared)
    flags = [f for action in shared._actions for f in action.option_strings]
    assert {"--abs-tol", "--rel-tol", "--ignore-output", "--cell-timeout", "--timeout", "-p", "--lax",
            "--sanitize-with"} <= set(flags)
    for line in ("--help", "-h", "other.ipynb --abs-tol 0.1 --help"):
        with pytest.raises(MagicHelp) as e:
            parse(line)
        missing = [f for f in flags if f not in str(e.value)]
        assert not missing, (missing, str(e.value))


def test_nbvalidate_can_be_interrupted(lab):
    server, kc = lab
    write_notebook(server.root / "work" / "slow.ipynb", ["import time\ntime.sleep(60)"])
    msg_id = kc.execute("%load_ext jupyter_nbvalidation\n%nbvalidate slow.ipynb --no-build")
    # interrupt only once the magic shows its job (it is then in its wait loop): a fixed sleep raced
    # the extension's import on a loaded machine and interrupted the import instead
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        msg = kc.get_iopub_msg(timeout=120)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "display_data":
            break
    time.sleep(1)
    api = server.client()
    kernel_id = api.request_root("GET", "api/sessions")[0]["kernel"]["id"]
    api.request_root("POST", f"api/kernels/{kernel_id}/interrupt")
    deadline = time.monotonic() + 30
    saw = ""
    while time.monotonic() < deadline:
        msg = kc.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            saw += msg["content"]["text"]
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    assert "Stopped waiting" in saw and "keeps running on the server" in saw
    name = api.request("GET", "jobs")["items"][0]["metadata"]["name"]
    api.request("DELETE", f"jobs/{name}")


def test_no_server_gives_one_clear_sentence(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "empty-runtime"))
    from jupyter_nbvalidation.magic import MagicError, nbvalidate

    with pytest.raises(MagicError) as e:
        nbvalidate("nb.ipynb", display=lambda *a: None)
    msg = str(e.value)
    assert msg.count(".") <= 2 and "No running Jupyter server" in msg
    # a stale runtime file pointing at a dead server
    rt = tmp_path / "stale-runtime"
    rt.mkdir()
    (rt / "jpserver-999999.json").write_text(json.dumps({"url": "http://127.0.0.1:9/", "token": "x",
                                                         "pid": 999999, "root_dir": str(tmp_path)}))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(rt))
    with pytest.raises(MagicError) as e:
        nbvalidate("nb.ipynb", display=lambda *a: None)
    assert "could be reached" in str(e.value) or "No running Jupyter server" in str(e.value)


def test_nbvalidate_takes_the_spec_options(lab):
    """Tolerances, ignored outputs, cell timeout, timeout and parameters from the magic's line."""
    server, kc = lab
    write_notebook(server.root / "work" / "train.ipynb",
                   ["epochs = 10", "import sys\nprint('noise', file=sys.stderr)\nprint(round(1 / 3, 3))",
                    "assert epochs == 1, epochs"], tags={0: ["parameters"]})
    write_golden(server.root / "work" / "train.ipynb", {1: stdout("0.33\n")}, server.root / "work" / "golden.ipynb", counts=True)
    text, _ = _run(kc, "%load_ext jupyter_nbvalidation\n%nbvalidate train.ipynb --golden golden.ipynb --no-build "
                       "--abs-tol 0.01 --rel-tol 0 --ignore-output stream:stderr --cell-timeout 60 --timeout 10m "
                       "-p epochs 1")
    assert "Succeeded" in text, text
    job = server.client().request("GET", "jobs")["items"][0]
    spec = job["spec"]
    assert spec["parameters"] == {"epochs": 1} and spec["cellTimeout"] == "60s" and spec["timeout"] == "10m"
    assert spec["comparisonConfig"] == {"floatingPointTolerance": 0.01, "relativeTolerance": 0.0,
                                        "ignoreOutputTypes": ["stream:stderr"]}
    assert job["status"]["comparisonResult"]["tolerance"] == {"absolute": 0.01, "relative": 0.0}
    # a bad parameter name: the server's 400 names the field, nothing is created
    text, _ = _run(kc, "%nbvalidate train.ipynb --no-build -p 1x 2")
    assert text.startswith("%nbvalidate: ") and "spec.parameters.1x" in text, text
    assert len(server.client().request("GET", "jobs")["items"]) == 1


def test_a_failed_verdict_in_the_magic_says_its_environment():
    """No server: the text the magic shows for a finished job (issue 21)."""
    from jupyter_nbvalidation.magic import _progress

    job = {"metadata": {"name": "nb-1"}, "spec": {"notebook": {"path": "nb.ipynb"}},
           "status": {"phase": "Failed", "reason": "ValidationFailed", "message": "cell 2: KeyError: 'x'",
                      "environment": "1 requirement from requirements.txt beside the notebook"}}
    text, page = _progress(job, None, 0.0)
    assert "\nEnvironment:  1 requirement from requirements.txt beside the notebook" in text, text
    ok = {**job, "status": {**job["status"], "phase": "Succeeded", "reason": "ValidationSucceeded"}}
    assert "Environment:" not in _progress(ok, None, 0.0)[0]


def test_nbvalidate_reads_the_project_settings_and_its_arguments_win(lab):
    """What the magic's line leaves out comes from the project's [tool.nbvalidation] (issue 42)."""
    server, kc = lab
    write_notebook(server.root / "work" / "num.ipynb", ["print(1.0004)"])
    write_golden(server.root / "work" / "num.ipynb", "1.0\n", server.root / "work" / "num-golden.ipynb")
    (server.root / "pyproject.toml").write_text(
        '[project]\nname = "w"\n\n[tool.nbvalidation]\ntimeout = "7m"\n\n[[tool.nbvalidation.notebooks]]\n'
        'glob = "work/num.ipynb"\ngoldenNotebook = { path = "num-golden.ipynb" }\n'
        'comparisonConfig = { floatingPointTolerance = 1e-5 }\n')
    text, _ = _run(kc, "%load_ext jupyter_nbvalidation\n%nbvalidate num.ipynb --no-build")
    assert "Failed" in text, text  # 1.0004 against 1.0 beyond the file's tolerance
    job = server.client().request("GET", "jobs")["items"][0]
    assert job["spec"]["goldenNotebook"] == {"path": "work/num-golden.ipynb"} and job["spec"]["timeout"] == "7m"
    text, _ = _run(kc, "%nbvalidate num.ipynb --no-build --abs-tol 0.01")
    assert "Succeeded" in text, text
    assert server.client().request("GET", "jobs")["items"][0]["spec"]["comparisonConfig"] == {
        "floatingPointTolerance": 0.01}
