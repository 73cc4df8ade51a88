"""Parameters injected as papermill does (spec.parameters, -p NAME VALUE): real
kernels through the runner, the CLI's in-process local backend and a real server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from helpers import write_notebook

from jupyter_nbvalidation.cli.main import parameter_value
from jupyter_nbvalidation.core.spec_checks import SpecError, validate_spec
from jupyter_nbvalidation.runner import run_notebook
from jupyter_nbvalidation.runner.parameters import parameters_source, python_literal

JUPYTER = shutil.which("jupyter", path=os.path.dirname(sys.executable)) or "jupyter"

# a training notebook: the parameters cell, then cells that use them
TRAIN = ["# md\n# Training", "epochs = 10\nlr = 0.1", "print('training for', epochs, 'epochs')",
         "assert isinstance(epochs, int)\nepochs * 2", "print('done')"]
TRAIN_TAGS = {1: ["parameters"]}


def cli(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([JUPYTER, "nbvalidation", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def _run(tmp_path: Path, nb: Path, **kw) -> tuple[dict, dict]:
    result = run_notebook(nb, executed=tmp_path / "executed.ipynb", **kw)
    return result, json.loads((tmp_path / "executed.ipynb").read_text())


def _texts(cell: dict) -> str:
    return "".join("".join(o.get("text", "")) + "".join((o.get("data") or {}).get("text/plain", ""))
                   for o in cell.get("outputs", []))


# -- the injected source -------------------------------------------------------------


def test_source_is_papermills_python_form_and_round_trips():
    params = {"epochs": 1, "lr": 0.001, "name": 'a "quoted"\nline', "flag": True, "off": False, "none": None,
              "layers": [64, 32.5, {"act": "relu", "x": None}], "unicode": "héllo ✓", "big": 10**30}
    source = parameters_source(params)
    lines = source.splitlines()
    assert lines[0] == "# Parameters"
    assert lines[1:4] == ["epochs = 1", "lr = 0.001", 'name = "a \\"quoted\\"\\nline"']
    assert "flag = True" in lines and "off = False" in lines and "none = None" in lines
    namespace: dict = {}
    exec(source, namespace)  # the cell is valid Python giving back the JSON values
    assert {k: namespace[k] for k in params} == params
    assert python_literal(float("nan")) == "float('nan')"


def test_p_values_are_json_else_strings_as_papermill_reads_them():
    assert parameter_value("1") == 1 and parameter_value("0.5") == 0.5 and parameter_value("true") is True
    assert parameter_value("True") is True and parameter_value("None") is None
    assert parameter_value("[1, 2]") == [1, 2] and parameter_value('{"a": 1}') == {"a": 1}
    assert parameter_value("adam") == "adam" and parameter_value("1e") == "1e"


@pytest.mark.parametrize("params, field", [
    ({"1epochs": 1}, "parameters.1epochs"),
    ({"my-name": 1}, "parameters.my-name"),
    ({"class": 1}, "parameters.class"),
    ({"x" * 300: 1}, "parameters." + "x" * 300),
    ({"deep": json.loads("[" * 40 + "]" * 40)}, "parameters.deep" + "[0]" * 32),
    ({f"p{i}": i for i in range(101)}, "parameters"),
    ({"big": "x" * (70 * 1024)}, "parameters"),
    ({"f": float("inf")}, "parameters.f"),
    ([1], "parameters"),
])
def test_bad_parameters_are_refused_naming_the_field(params, field):
    with pytest.raises(SpecError) as e:
        validate_spec({"notebook": {"path": "nb.ipynb"}, "parameters": params})
    assert e.value.field == field, e.value


# -- the runner, with a real kernel --------------------------------------------------


def test_injected_after_the_parameters_cell_and_indexes_stay_the_notebooks(tmp_path):
    nb = write_notebook(tmp_path / "train.ipynb", TRAIN + ["raise ValueError(f'epochs={epochs}')"], tags=TRAIN_TAGS)
    result, executed = _run(tmp_path, nb, parameters={"epochs": 1, "optimizer": "adam"})
    cells = executed["cells"]
    assert len(cells) == len(TRAIN) + 2  # the injected cell is in the executed notebook
    injected = cells[2]
    assert injected["metadata"]["tags"] == ["injected-parameters"]
    assert "".join(injected["source"]) == '# Parameters\nepochs = 1\noptimizer = "adam"\n'
    assert injected["execution_count"] is None  # the notebook's own cells keep their counts
    assert [c.get("execution_count") for c in cells[3:6]] == [2, 3, 4]
    assert "training for 1 epochs" in _texts(cells[3]) and _texts(cells[4]) == "2"
    # every index in the result is the submitted notebook's (cell 5 raised: "cell 6" in JupyterLab)
    assert result["verdict"] == "Failed" and result["failedCellIndex"] == 5
    assert result["results"][5]["errorMessage"] == "epochs=1"
    assert [r["cellIndex"] for r in result["results"]] == list(range(len(TRAIN) + 1))
    assert "parameters injected after cell 2: epochs, optimizer" in result["message"]


def test_without_a_parameters_cell_the_cell_goes_on_top(tmp_path):
    nb = write_notebook(tmp_path / "plain.ipynb", ["print('n =', n)", "assert n == 3"])
    result, executed = _run(tmp_path, nb, parameters={"n": 3})
    assert result["verdict"] == "Succeeded", result["message"]
    assert executed["cells"][0]["metadata"]["tags"] == ["injected-parameters"]
    assert _texts(executed["cells"][1]) == "n = 3\n"
    assert "parameters injected at the top: n" in result["message"]
    # the same notebook without parameters: NameError in its cell 0
    bare, _ = _run(tmp_path, nb)
    assert bare["failedCellIndex"] == 0 and "NameError" in bare["message"]


def test_golden_comparison_leaves_the_injected_cell_out(tmp_path):
    nb = write_notebook(tmp_path / "train.ipynb", TRAIN, tags=TRAIN_TAGS)
    # the golden copy: the notebook as its author ran it with epochs = 1 (no injected cell)
    src = nbformat.read(str(nb), as_version=4)
    src.cells[1].source = "epochs = 1\nlr = 0.1"
    nbformat.write(src, str(tmp_path / "author.ipynb"))
    run_notebook(tmp_path / "author.ipynb", executed=tmp_path / "golden.ipynb")
    golden = tmp_path / "golden.ipynb"
    assert len(json.loads(golden.read_text())["cells"]) == len(TRAIN)

    result, _ = _run(tmp_path, nb, golden=golden, parameters={"epochs": 1})
    assert result["verdict"] == "Succeeded", result["message"]
    cmp = result["comparisonResult"]
    assert cmp["result"] == "matched" and cmp["mismatchedCells"] == 0 and cmp["matchedCells"] == 4
    assert cmp["tolerance"] == {"absolute": 1e-4, "relative": 0.0}

    # without the parameter the notebook computes with 10: the diff names the submitted cell
    result, _ = _run(tmp_path, nb, golden=golden)
    assert result["reason"] == "GoldenMismatch"
    diff_cells = [d["cellIndex"] for d in result["comparisonResult"]["diffs"]]
    assert diff_cells == [2, 3] and result["failedCellIndex"] == 2
    assert "(first: cell 3)" in result["message"]
    assert "--- golden cell 3" in result["comparisonResult"]["diffs"][0]["diff"]

    # a golden copy papermill wrote (it holds an injected cell, here our own executed notebook)
    _run(tmp_path, nb, parameters={"epochs": 1})
    shutil.copy(tmp_path / "executed.ipynb", tmp_path / "golden-papermill.ipynb")
    result, _ = _run(tmp_path, nb, golden=tmp_path / "golden-papermill.ipynb", parameters={"epochs": 1})
    assert result["verdict"] == "Succeeded", result["message"]
    result, _ = _run(tmp_path, nb, golden=tmp_path / "golden-papermill.ipynb", parameters={"epochs": 2})
    assert result["reason"] == "GoldenMismatch" and result["failedCellIndex"] == 2


def test_an_earlier_injected_cell_is_replaced(tmp_path):
    nb = write_notebook(tmp_path / "out.ipynb", ["epochs = 10", "# Parameters\nepochs = 5", "print(epochs)"],
                        tags={0: ["parameters"], 1: ["injected-parameters"]})
    result, executed = _run(tmp_path, nb, parameters={"epochs": 1})
    assert result["verdict"] == "Succeeded"
    assert result["results"][1]["status"] == "Skipped" and "replaced" in result["results"][1]["skipReason"]
    cells = executed["cells"]
    assert _texts(cells[3]) == "1\n"
    # the executed notebook: the new cell, then the replaced one as it was (not run), each cell once
    assert "".join(cells[1]["source"]) == "# Parameters\nepochs = 1\n"
    assert "".join(cells[2]["source"]) == "# Parameters\nepochs = 5" and cells[2]["execution_count"] is None
    assert len({c["id"] for c in cells}) == 4


# -- end to end: the CLI (local backend, in process) and a real server ---------------------


def test_cli_p_on_the_local_backend(tmp_path):
    env = {"JUPYTER_RUNTIME_DIR": str(tmp_path / "no-servers")}
    data = ["--data-dir", str(tmp_path / "data")]
    write_notebook(tmp_path / "train.ipynb", TRAIN + ["assert epochs == 1, epochs\nassert lr == 0.5"],
                   tags=TRAIN_TAGS)
    bare = cli("submit", "train.ipynb", "--no-build", "--wait", *data, cwd=tmp_path, env=env)
    assert bare.returncode == 1 and "AssertionError: 10" in bare.stdout, bare.stdout + bare.stderr
    ok = cli("submit", "train.ipynb", "--no-build", "--wait", "-p", "epochs", "1", "--parameter", "lr", "0.5",
             "-o", "json", *data, cwd=tmp_path, env=env)
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr
    job = json.loads(ok.stdout)
    assert job["spec"]["parameters"] == {"epochs": 1, "lr": 0.5}
    # -r keeps the value a string: the notebook's assert fails
    raw = cli("submit", "train.ipynb", "--no-build", "--wait", "-r", "epochs", "1", *data, cwd=tmp_path, env=env)
    assert raw.returncode == 1 and "assert isinstance(epochs, int)" in raw.stdout, raw.stdout
    bad = cli("submit", "train.ipynb", "--no-build", "--wait", "-p", "for", "1", *data, cwd=tmp_path, env=env)
    assert bad.returncode == 2 and "spec.parameters.for" in bad.stderr and "keyword" in bad.stderr, bad.stderr
    listed = json.loads(cli("list", "-o", "json", *data, cwd=tmp_path, env=env).stdout)["items"]
    assert len(listed) == 3  # the refused one was never created


def test_rest_refuses_bad_parameters_and_runs_good_ones(server_proc):
    from jupyter_nbvalidation.clients.http import ClientError

    server = server_proc().start()
    write_notebook(server.root / "train.ipynb", TRAIN + ["assert epochs == 1 and name == 'x'"], tags=TRAIN_TAGS)
    api = server.client()
    base = {"notebook": {"path": "train.ipynb"}, "podConfig": {"buildConfig": {"enabled": False}}}
    for params, field in (({"bad name": 1}, "spec.parameters.bad name"), ({"ok": 1, "2x": 2}, "spec.parameters.2x"),
                          ("epochs=1", "spec.parameters")):
        with pytest.raises(ClientError) as e:
            api.request("POST", "jobs", {**base, "parameters": params})
        assert e.value.status == 400 and e.value.field == field, (e.value, e.value.field)
    assert api.request("GET", "jobs")["items"] == []  # nothing created

    job = api.request("POST", "jobs", {**base, "parameters": {"epochs": 1, "name": "x"}})
    name = job["metadata"]["name"]
    deadline = time.monotonic() + 180
    while (job.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline
        time.sleep(0.3)
        job = api.request("GET", f"jobs/{name}")
    assert job["status"]["phase"] == "Succeeded", job["status"].get("message")
    executed = api.request("GET", f"jobs/{name}/notebook")
    assert [c["metadata"].get("tags") for c in executed["cells"]][2] == ["injected-parameters"]
