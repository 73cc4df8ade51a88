"""The masking of a job's secrets in what a run writes (runner/masking.py), with a real kernel:
the attacker's notebook (tests/secrets_attack.py) leaves no form of the value in the executed
notebook, the result or the runner's log, and a golden comparison compares masked outputs."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from helpers import write_notebook
from secrets_attack import USER, VALUE, attack_cells, scan_files, scan_text

from jupyter_nbvalidation.runner import run_notebook
from jupyter_nbvalidation.runner.masking import MASK, Masker
from jupyter_nbvalidation.runner.protocol import EXECUTED_PREFIX


@pytest.mark.parametrize("shown", [
    VALUE, f"x{VALUE}y", base64.b64encode(VALUE.encode()).decode(), quote(VALUE, safe=""), VALUE[::-1],
    "\n".join(VALUE), str(list(VALUE)), json.dumps({"pw": VALUE}), VALUE.encode().hex(),
    base64.b64encode(f"user:{VALUE}".encode()).decode(), base64.b64encode(f"us:{VALUE}".encode()).decode(),
    base64.b64encode(f"u:{VALUE}".encode()).decode(), "\x1b[31m" + VALUE[:5] + "\x1b[0m" + VALUE[5:],
])
def test_every_form_is_masked(shown: str) -> None:
    assert scan_text(shown), "the scan sees the form"
    masked = Masker([VALUE]).text(shown)
    assert MASK in masked and not scan_text(masked)


def test_ordinary_text_is_left_alone() -> None:
    m = Masker([VALUE, "abc"])
    text = "Secr3t and Val are words; a b c is not abc split (short values only whole)"
    assert m.text(text) == text.replace("abc", MASK)
    assert Masker([]).text(VALUE) == VALUE and not Masker([])


def test_split_across_outputs() -> None:
    outs = [{"output_type": "stream", "name": "stdout", "text": "pw: " + VALUE[:7]},
            {"output_type": "stream", "name": "stdout", "text": VALUE[7:] + "\nafter\n"},
            {"output_type": "display_data", "metadata": {}, "data": {"text/plain": "\n".join(VALUE)}}]
    assert Masker([VALUE]).outputs(outs) == 2
    assert outs[0]["text"] == "pw: ***" and outs[1]["text"] == "\nafter\n" and outs[2]["data"]["text/plain"] == MASK


def test_the_attackers_notebook_leaves_nothing_in_what_the_runner_writes(tmp_path: Path) -> None:
    """The runner's command as a backend starts it (--secrets-file, removed once read), a real kernel."""
    nb = tmp_path / "nb" / "attack.ipynb"
    write_notebook(nb, attack_cells())
    secrets = tmp_path / "run" / "secrets.json"
    secrets.parent.mkdir()
    secrets.write_text(json.dumps({"env": {"DB_PASSWORD": VALUE, "DB_USER": USER}}))
    proc = subprocess.run([sys.executable, "-m", "jupyter_nbvalidation.runner", str(nb), "--result",
                           str(tmp_path / "run" / "result.json"), "--executed", str(tmp_path / "run" / "executed.ipynb"),
                           "--cwd", str(nb.parent), "--secrets-file", str(secrets), "--progress"],
                          capture_output=True, text=True, timeout=300)
    (tmp_path / "run" / "runner.log").write_text(proc.stdout + proc.stderr)
    assert not secrets.exists(), "the secrets file is removed once read"
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["reason"] == "CellExecutionFailed", result["message"]
    assert result["failedCellIndex"] == len(attack_cells()) - 1, result["message"]
    assert "ValueError: cannot connect to the warehouse with ***" in result["message"]
    executed = json.loads((tmp_path / "run" / "executed.ipynb").read_text())
    assert all(c["outputs"] for c in executed["cells"][1:]), "every cell showed something (masked)"
    # the kernel wrote it in its folder: the working copy is the backend's to remove (not here)
    assert VALUE in (nb.parent / "leak.txt").read_text()
    (nb.parent / "leak.txt").unlink()
    leaks = scan_files(tmp_path, [VALUE, USER])
    assert not leaks, leaks


def test_secrets_from_the_runners_environment_as_a_pod_gives_them(tmp_path: Path) -> None:
    """The Kubernetes way (--secrets-from-env: a Pod's envFrom with a prefix): the kernel gets the
    variables without the prefix and none with it, and the values are in nothing the runner writes,
    its log with the executed notebook printed (what the server reads back from the Pod) included."""
    nb = tmp_path / "nb" / "attack.ipynb"
    check = ("import os\nassert not [k for k in os.environ if k.startswith('NBV_SECRET_')], 'prefixed'\n"
             "import hashlib\nassert hashlib.sha256(os.environ['DB_USER'].encode()).hexdigest() == "
             + repr(hashlib.sha256(USER.encode()).hexdigest()))
    write_notebook(nb, [check, *attack_cells()])
    run = tmp_path / "run"
    run.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBV_SECRET_")}
    env.update({"NBV_SECRET_DB_PASSWORD": VALUE, "NBV_SECRET_DB_USER": USER})
    proc = subprocess.run([sys.executable, "-m", "jupyter_nbvalidation.runner", str(nb), "--result",
                           str(run / "result.json"), "--executed", str(run / "executed.ipynb"),
                           "--cwd", str(nb.parent), "--secrets-from-env=NBV_SECRET_", "--progress",
                           "--print-executed"], capture_output=True, text=True, timeout=300, env=env)
    (run / "runner.log").write_text(proc.stdout + proc.stderr)
    result = json.loads((run / "result.json").read_text())
    assert result["reason"] == "CellExecutionFailed", result["message"]
    assert result["failedCellIndex"] == len(attack_cells()), result["message"]
    assert "ValueError: cannot connect to the warehouse with ***" in result["message"]
    (printed,) = [ln for ln in proc.stdout.splitlines() if ln.startswith(EXECUTED_PREFIX)]
    (run / "printed.ipynb").write_bytes(gzip.decompress(base64.b64decode(printed[len(EXECUTED_PREFIX):])))
    assert "***" in (run / "printed.ipynb").read_text()
    (nb.parent / "leak.txt").unlink()
    leaks = scan_files(tmp_path, [VALUE, USER])
    assert not leaks, leaks


def test_a_golden_comparison_compares_the_masked_outputs(tmp_path: Path) -> None:
    nb = tmp_path / "nb.ipynb"
    write_notebook(nb, ["import os\nprint('pw', os.environ['PW'])", "print(1 + 1)"])
    golden = tmp_path / "golden.ipynb"
    # the golden copy made with the masking on holds *** where the secret was
    first = run_notebook(nb, executed=golden, kernel_env={"PW": VALUE}, masker=Masker([VALUE]))
    assert first["verdict"] == "Succeeded" and VALUE not in golden.read_text() and "pw ***" in golden.read_text()
    again = run_notebook(nb, executed=tmp_path / "again.ipynb", golden=golden, kernel_env={"PW": VALUE},
                         masker=Masker([VALUE]))
    assert again["verdict"] == "Succeeded", again["message"]
    assert again["comparisonResult"]["result"] == "matched"
    # a golden copy that holds the value itself compares the same (both sides masked alike)
    golden.write_text(golden.read_text().replace("pw ***", f"pw {VALUE}"))
    third = run_notebook(nb, executed=tmp_path / "third.ipynb", golden=golden, kernel_env={"PW": VALUE},
                         masker=Masker([VALUE]))
    assert third["comparisonResult"]["result"] == "matched", third["comparisonResult"]
