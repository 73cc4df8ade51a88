"""The runner gives every peer notebook the verdict its own project's test suite expects.

The notebooks and their expected verdicts live in ``shared/peer-notebooks`` beside the
checkout (``MANIFEST.tsv``: file, mode, expected verdict, first failing code cell).
Mode ``execute`` runs without a golden copy; ``golden-self`` compares the notebook
with its own stored outputs, nbval style. A folder with a ``requirements.txt`` runs
in a uv venv built once per session from it (plus ipykernel). A missing dependency
fails the test; nothing is skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

# beside the checkout, or beside any folder above it (as tests/peers/test_corpus.py finds the corpus)
PEER_DIR = next((p / "shared" / "peer-notebooks" for p in Path(__file__).resolve().parents
                 if (p / "shared" / "peer-notebooks").is_dir()),
                Path(__file__).resolve().parents[2].parent / "shared" / "peer-notebooks")
MANIFEST = PEER_DIR / "MANIFEST.tsv"
RESULT_PREFIX = "NBVALIDATION-RESULT "


def manifest_rows() -> list[dict]:
    if not MANIFEST.is_file():  # collected as a failing test below, never skipped
        return [{"file": "<missing MANIFEST.tsv>", "mode": "", "expected": "", "first_failing": None, "note": ""}]
    rows = []
    for line in MANIFEST.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.split("\t")
        file, mode, expected, first = cols[:4]
        rows.append(
            {
                "file": file,
                "mode": mode,
                "expected": expected,
                "first_failing": None if first.strip() == "-" else int(first),
                "note": cols[4] if len(cols) > 4 else "",
            }
        )
    return rows


ROWS = manifest_rows()


def find_uv() -> str:
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not os.access(uv, os.X_OK):
        pytest.fail("uv is needed to build the peer notebooks' environment (pip install uv)")
    return uv


@pytest.fixture(scope="session")
def requirement_envs(tmp_path_factory):
    """One venv per folder with a requirements.txt, built lazily, once per session."""
    built: dict[Path, str] = {}

    def python_for(folder: Path) -> str | None:
        requirements = folder / "requirements.txt"
        if not requirements.is_file():
            return None
        if folder not in built:
            uv = find_uv()
            env = tmp_path_factory.mktemp(f"peer-env-{folder.name}")
            subprocess.run([uv, "venv", "-q", str(env)], check=True, capture_output=True, text=True)
            python = str(env / "bin" / "python")
            proc = subprocess.run(
                [uv, "pip", "install", "-q", "--python", python, "ipykernel", "-r", str(requirements)],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                pytest.fail(f"cannot install {requirements} into a uv venv:\n{proc.stderr}")
            built[folder] = python
        return built[folder]

    return python_for


def code_cell_position(nb, cell_index: int) -> int:
    """Index among code cells of the cell at ``cell_index`` among all cells."""
    assert nb.cells[cell_index].cell_type == "code"
    return sum(1 for cell in nb.cells[:cell_index] if cell.cell_type == "code")


@pytest.mark.parametrize("row", ROWS, ids=[r["file"] for r in ROWS])
def test_peer_notebook_verdict(row, tmp_path, requirement_envs):
    assert MANIFEST.is_file(), f"{MANIFEST} is missing: shared/peer-notebooks must sit beside the checkout"
    source = PEER_DIR / row["file"]
    assert source.is_file(), f"{source} is listed in the manifest but missing"
    before = source.read_bytes()
    # run on a copy so that the shared folder (read-only in CI) is never written to
    work = tmp_path / "nb"
    work.mkdir()
    notebook = work / source.name
    shutil.copyfile(source, notebook)
    result_path, executed = tmp_path / "result.json", tmp_path / "executed.ipynb"
    argv = [sys.executable, "-m", "jupyter_nbvalidation.runner", str(notebook),
            "--result", str(result_path), "--executed", str(executed), "--cell-timeout", "60"]
    python = requirement_envs(source.parent)
    if python:
        argv += ["--python", python]
    assert row["mode"] in ("execute", "golden-self"), f"unknown mode {row['mode']!r}"
    if row["mode"] == "golden-self":
        argv += ["--golden", str(notebook)]

    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert proc.stdout.splitlines()[-1].startswith(RESULT_PREFIX), proc.stderr
    result = json.loads(result_path.read_text())
    detail = json.dumps({k: result[k] for k in ("reason", "message", "failedCellIndex", "comparisonResult")}, indent=1)

    assert result["verdict"] == row["expected"], f"{row['note']}\n{detail}\n{proc.stderr[-3000:]}"
    assert proc.returncode == (0 if row["expected"] == "Succeeded" else 1), detail
    if row["expected"] == "Failed":
        expected_reason = "GoldenMismatch" if row["mode"] == "golden-self" else "CellExecutionFailed"
        assert result["reason"] == expected_reason, detail
    else:
        assert result["reason"] == "ValidationSucceeded", detail
    if row["first_failing"] is not None:
        nb = nbformat.read(notebook, as_version=4)
        assert result["failedCellIndex"] is not None, detail
        assert code_cell_position(nb, result["failedCellIndex"]) == row["first_failing"], detail
    if row["mode"] == "golden-self":
        assert result["comparisonResult"] is not None
    assert source.read_bytes() == before  # the peer notebook itself is never modified
