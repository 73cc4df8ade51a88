"""Bounded outputs (issue 20, point 7): a job's output budget in the stored
executed notebook, job lists that carry summaries, the executed notebook served
without stalling the server, and user patterns that cannot hang a run.

Real kernels (the runner's command line, as the local backend runs it), a real
Jupyter server (pytest-jupyter, and a `jupyter server` subprocess for its RSS).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import cli, rest_call, rest_wait_terminal, wait, write_golden, write_notebook
from tornado.httpclient import HTTPClientError

from jupyter_nbvalidation.core.model import Phase
from jupyter_nbvalidation.spec.checks import SpecError, validate_spec

MARKER = re.compile(r"\[nbvalidation: ([\d.]+ [kMG]B) of output truncated; limit ([\d.]+ [KMG]iB|\d+ bytes) per (cell|notebook)\]")
NOBUILD = {"podConfig": {"buildConfig": {"enabled": False}}}


def _golden(path: Path, outputs: list[str]) -> Path:
    """A golden notebook whose cells printed ``outputs`` (one stdout stream each)."""
    return write_golden(write_notebook(path, [f"# cell {i}" for i in range(len(outputs))]), outputs, path, counts=True)


def _run(tmp_path: Path, notebook: Path, *args: str, timeout: float = 240) -> tuple[dict, Path, float]:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    executed, result = out / "executed.ipynb", out / "result.json"
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "jupyter_nbvalidation.runner", str(notebook), "--result", str(result),
                    "--executed", str(executed), *args], capture_output=True, text=True, timeout=timeout,
                   stdin=subprocess.DEVNULL)
    return json.loads(result.read_text()), executed, time.monotonic() - started


def _texts(executed: Path) -> list[list[str]]:
    nb = json.loads(executed.read_text())
    return [["".join(o.get("text") or "") for o in c.get("outputs") or []] for c in nb["cells"]]


# --- the output budget -------------------------------------------------------------


def test_a_cell_printing_50_mb_is_stored_bounded_with_a_marker_and_the_verdict_says_so(tmp_path):
    nb = write_notebook(tmp_path / "nb" / "big.ipynb", ['print("x" * 50_000_000)', 'print("after")'])
    result, executed, _ = _run(tmp_path, nb)
    assert result["verdict"] == "Succeeded", result
    size = executed.stat().st_size
    assert size < 3 * 2**20, size  # the 2 MiB per-cell default and a little JSON
    texts = _texts(executed)
    assert texts[0][0] == "x" * (2 * 2**20)  # the first bytes of the stream are kept
    marker = MARKER.fullmatch(texts[0][1].strip())
    assert marker and marker.group(2) == "2 MiB" and marker.group(3) == "cell", texts[0][1]
    assert marker.group(1) == "47.9 MB"  # 50,000,001 bytes less 2 MiB kept
    assert texts[1] == ["after\n"]  # the next cell is untouched
    assert "output truncated in 1 cell" in result["message"], result["message"]
    cell = result["results"][0]
    assert cell["outputTruncated"] == {"bytes": 50_000_001 - 2 * 2**20, "limit": "2 MiB per cell"}
    assert "outputTruncated" not in result["results"][1]


def test_without_a_golden_output_is_cut_as_it_arrives_so_the_run_stays_small(tmp_path):
    """200 MB printed in 2000 pieces: the runner drops the pieces beyond the budget
    as they arrive. Peak RSS of the runner and its kernel (the largest of them),
    measured (benchmarks/big_output.py, "pieces"): the runner 155 MiB, its kernel 295 MiB,
    of which the 200 MB of pieces IPython keeps in its output history; before, 620 MiB
    (every piece held by the runner, then joined). One 200 MB print: tests/runner/test_output_memory.py."""
    nb = write_notebook(tmp_path / "nb" / "pieces.ipynb", ['for i in range(2000):\n    print("x" * 100_000, flush=True)'])
    out = tmp_path / "out"
    out.mkdir()
    code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    proc = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "jupyter_nbvalidation.runner", str(nb),
                           "--result", str(out / "result.json"), "--executed", str(out / "executed.ipynb")],
                          capture_output=True, text=True, timeout=240)
    peak_kib = int(proc.stdout.strip())
    assert peak_kib < 450 * 1024, f"peak RSS {peak_kib} KiB"
    result = json.loads((out / "result.json").read_text())
    assert result["verdict"] == "Succeeded" and "output truncated in 1 cell" in result["message"], result
    assert (out / "executed.ipynb").stat().st_size < 3 * 2**20


def test_the_notebook_budget_cuts_the_cells_after_it_is_spent(tmp_path):
    nb = write_notebook(tmp_path / "nb" / "many.ipynb", [f'print("{c}" * 40_000)' for c in "abc"])
    result, executed, _ = _run(tmp_path, nb, "--max-output-bytes", str(100 * 1024))
    assert result["verdict"] == "Succeeded", result
    texts = _texts(executed)
    assert texts[0] == ["a" * 40_000 + "\n"] and texts[1] == ["b" * 40_000 + "\n"]
    assert texts[2][0] == "c" * (100 * 1024 - 2 * 40_001)
    marker = MARKER.fullmatch(texts[2][1].strip())
    assert marker and marker.groups()[1:] == ("100 KiB", "notebook"), texts[2]
    assert "output truncated in 1 cell" in result["message"]


def test_truncation_never_turns_a_pass_into_a_failure(tmp_path):
    """The golden holds the whole output: the comparison is made on what the
    notebook printed, not on the truncated copy that is stored."""
    big = "y" * 300_000 + "tail\n"
    nb = write_notebook(tmp_path / "nb" / "nb.ipynb", ['print("y" * 300_000 + "tail")'])
    golden = _golden(tmp_path / "nb" / "golden.ipynb", [big])
    result, executed, _ = _run(tmp_path, nb, "--golden", str(golden), "--max-cell-output-bytes", str(64 * 1024))
    assert result["verdict"] == "Succeeded", result
    assert result["comparisonResult"]["matchedCells"] == 1, result["comparisonResult"]
    assert MARKER.search(_texts(executed)[0][1])
    assert "output truncated in 1 cell" in result["message"] and "compared with the golden notebook in full" in \
        result["message"], result["message"]


def test_truncation_never_turns_a_failure_into_a_pass(tmp_path):
    """The difference is beyond the cut: the stored copies would be equal, the outputs are not."""
    nb = write_notebook(tmp_path / "nb" / "nb.ipynb", ['print("y" * 300_000 + "actual")'])
    golden = _golden(tmp_path / "nb" / "golden.ipynb", ["y" * 300_000 + "golden\n"])
    result, executed, _ = _run(tmp_path, nb, "--golden", str(golden), "--max-cell-output-bytes", str(64 * 1024))
    assert result["verdict"] == "Failed" and result["reason"] == "GoldenMismatch", result
    assert result["failedCellIndex"] == 0
    assert MARKER.search(_texts(executed)[0][1])
    assert result["results"][0]["outputTruncated"]["limit"] == "64 KiB per cell"


def test_an_error_output_is_never_cut(tmp_path):
    nb = write_notebook(tmp_path / "nb" / "err.ipynb", ['print("z" * 100_000); raise ValueError("boom")'])
    result, executed, _ = _run(tmp_path, nb, "--max-cell-output-bytes", str(10_000))
    assert result["reason"] == "CellExecutionFailed" and "ValueError" in result["message"], result
    nb_out = json.loads(executed.read_text())
    kinds = [o["output_type"] for o in nb_out["cells"][0]["outputs"]]
    assert kinds == ["stream", "stream", "error"], kinds
    assert nb_out["cells"][0]["outputs"][2]["evalue"] == "boom"


def test_output_limits_in_the_spec():
    spec = validate_spec({"notebook": {"path": "a.ipynb"}, "outputLimits": {"perCell": 1024, "total": 4096}})
    assert spec["outputLimits"] == {"perCell": 1024, "total": 4096}
    for bad, field in (({"perCell": 0}, "outputLimits.perCell"), ({"total": "1Mi"}, "outputLimits.total"),
                       ({"perCell": 2**31}, "outputLimits.perCell"), ({"other": 1}, "outputLimits.other")):
        with pytest.raises(SpecError) as e:
            validate_spec({"notebook": {"path": "a.ipynb"}, "outputLimits": bad})
        assert e.value.field == field, (bad, e.value)


def test_output_limits_reach_the_runner():
    from jupyter_nbvalidation.spec.runner_args import spec_args

    args = spec_args({"notebook": {"path": "a.ipynb"}, "outputLimits": {"perCell": 1024, "total": 4096}})
    assert args[-4:] == ["--max-cell-output-bytes", "1024", "--max-output-bytes", "4096"]


# --- user patterns -----------------------------------------------------------------


@pytest.mark.parametrize("where", ["customTimestampPatterns", "sanitizers"])
def test_a_nested_repetition_is_refused_at_submit_naming_the_field(where):
    cc = ({"customTimestampPatterns": [r"\d+", "(a+)+$"]} if where == "customTimestampPatterns"
          else {"sanitizers": [{"regex": "(?:x*)*y", "replace": ""}]})
    with pytest.raises(SpecError) as e:
        validate_spec({"notebook": {"path": "a.ipynb"}, "comparisonConfig": cc})
    field = "comparisonConfig.customTimestampPatterns[1]" if where == "customTimestampPatterns" \
        else "comparisonConfig.sanitizers[0]"
    assert e.value.field == field
    assert "exponential time" in str(e.value)


def test_ordinary_patterns_are_taken():
    cc = {"customTimestampPatterns": [r"\d{2}:\d{2}", r"(\d+,)+\d+", r"(x|y+)+z", r"run \w+ took [\d.]+s"],
          "sanitizers": [{"regex": r"0x[0-9a-f]+", "replace": "ADDR"}]}
    assert validate_spec({"notebook": {"path": "a.ipynb"}, "comparisonConfig": cc})["comparisonConfig"] == cc


def test_a_pattern_that_hangs_at_run_time_ends_the_run_naming_the_pattern(tmp_path):
    """(a|aa)+$ passes the submit check; on 'a' * 60 + 'b' it would backtrack for
    ages. The run ends after the pattern's budget (10 s) with a reason naming it,
    not at the validation timeout."""
    text = "a" * 60 + "b"
    nb = write_notebook(tmp_path / "nb" / "nb.ipynb", [f'print("{text}")'])
    golden = _golden(tmp_path / "nb" / "golden.ipynb", [text + "\n"])
    result, _, elapsed = _run(tmp_path, nb, "--golden", str(golden), "--timestamp-pattern=(a|aa)+$",
                              "--timeout", "600")
    # the job's own pattern: the comparison's failure (exit 1), never the runner's or infrastructure
    assert result["verdict"] == "Failed" and result["reason"] == "ComparisonFailed", result
    assert "'(a|aa)+$'" in result["message"] and "did not finish within 10 s" in result["message"], result["message"]
    assert "comparisonConfig" in result["message"], result["message"]
    assert elapsed < 120, elapsed


def test_a_pattern_that_hangs_is_the_users_failure_not_infrastructure(tmp_path):
    """Through the CLI: `run` exits 1 (the notebook failed its comparison), not 3 (infrastructure)."""
    text = "a" * 60 + "b"
    root = tmp_path / "proj"
    write_notebook(root / "nb.ipynb", [f'print("{text}")'])
    _golden(root / "nb.golden.ipynb", [text + "\n"])
    (root / "san.cfg").write_text("[slow]\nregex: (a|aa)+$\nreplace: X\n")
    proc = cli("run", "nb.ipynb", "--no-build", "--local", "--data-dir", str(tmp_path / "data"), "--golden-suffix",
               ".golden", "--sanitize-with", "san.cfg", "-o", "json", cwd=root, no_servers=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [row] = json.loads(proc.stdout)
    assert row["verdict"] == "Failed" and "did not finish within 10 s" in json.dumps(row), row
    assert "infrastructure" not in proc.stdout + proc.stderr


# --- the REST API ------------------------------------------------------------------


async def test_a_20000_cell_job_is_listed_as_a_small_summary(jp_fetch, jp_root_dir):
    sources = ["print('one code cell')"] + ["# md\ntext"] * 19_999 + ["1 / 0"]
    write_notebook(jp_root_dir / "long.ipynb", sources)
    job = await rest_call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "long.ipynb"}, **NOBUILD})
    name = job["metadata"]["name"]
    whole = await rest_wait_terminal(jp_fetch, name, 240)
    assert whole["status"]["phase"] == Phase.FAILED, whole["status"]
    assert len(whole["status"]["results"]) == 20_001  # GET /jobs/{name}: the whole job

    raw = await rest_call(jp_fetch, "jobs", raw=True)
    assert len(raw.body) < 20_000, len(raw.body)
    item = json.loads(raw.body)["items"][0]
    st = item["status"]
    assert "results" not in st
    summary = st["resultsSummary"]
    assert summary["cells"] == 20_001 and summary["byStatus"]["Failure"] == 1, summary
    assert summary["failedCell"]["cellIndex"] == 20_000 and summary["failedCell"]["errorName"] == "ZeroDivisionError"
    assert st["failedCellIndex"] == 20_000 and "ZeroDivisionError" in st["message"]
    assert "cells" not in (st.get("progress") or {})
    # the other fields are those of the whole job
    assert {k: v for k, v in whole["status"].items() if k not in ("results", "progress")} == \
        {k: v for k, v in st.items() if k not in ("resultsSummary", "progress")}


async def test_a_catastrophic_pattern_is_refused_with_400_and_creates_nothing(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir / "ok.ipynb", ["print(1)"])
    body = {"notebook": {"path": "ok.ipynb"}, "comparisonConfig": {"customTimestampPatterns": ["(a+)+$"]}, **NOBUILD}
    with pytest.raises(HTTPClientError) as e:
        await rest_call(jp_fetch, "jobs", method="POST", body=body)
    err = json.loads(e.value.response.body)["error"]
    assert e.value.code == 400 and err["field"] == "spec.comparisonConfig.customTimestampPatterns[0]", err
    assert "(a+)+$" in err["message"]
    assert (await rest_call(jp_fetch, "jobs"))["items"] == []


def _rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_serving_the_notebook_of_a_50_mb_cell_keeps_the_server_small_and_responsive(server_proc):
    server = server_proc().start()
    write_notebook(server.root / "big.ipynb", ['print("x" * 50_000_000)'])
    headers = {"Authorization": f"token {server.token}", "Content-Type": "application/json"}
    api = server.url + "nbvalidation/api/v1/"

    def call(method: str, path: str, body: dict | None = None, timeout: float = 60) -> bytes:
        req = urllib.request.Request(api + path, method=method, headers=headers,
                                     data=None if body is None else json.dumps(body).encode())
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.read()

    name = json.loads(call("POST", "jobs", {"notebook": {"path": "big.ipynb"}, **NOBUILD}))["metadata"]["name"]
    seen: dict = {}

    def terminal() -> dict | None:
        seen["job"] = job = json.loads(call("GET", f"jobs/{name}"))
        return job if job["status"].get("phase") in Phase.TERMINAL else None

    job = wait(terminal, 240, lambda: f"{name} to finish: {seen['job']['status']}", interval=0.5)
    assert job["status"]["phase"] == Phase.SUCCEEDED and "output truncated" in job["status"]["message"], job
    pid = server.proc.pid
    before = _rss_kib(pid)
    # the event loop keeps answering while the notebook is served
    worst = [0.0]
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            t = time.monotonic()
            call("GET", "health", timeout=30)
            worst[0] = max(worst[0], time.monotonic() - t)
            time.sleep(0.05)

    t = threading.Thread(target=probe)
    t.start()
    serves: list[float] = []
    try:
        for _ in range(3):
            t0 = time.monotonic()
            body = call("GET", f"jobs/{name}/notebook")
            serves.append(time.monotonic() - t0)
    finally:
        stop.set()
        t.join(60)
    nb = json.loads(body)
    assert len(body) < 3 * 2**20, len(body)
    assert MARKER.search("".join(nb["cells"][0]["outputs"][1]["text"]))
    grown = _rss_kib(pid, "VmHWM") - before
    assert grown < 60 * 1024, f"the server grew by {grown} KiB serving the notebook"
    # a health check never waited behind the notebook: one that did would take about as long as a
    # serve of it. 2 s, or half the slowest serve when two busy shared cores stretch every call
    assert worst[0] < max(2.0, max(serves) / 2), (worst[0], serves)
