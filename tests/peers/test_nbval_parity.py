"""nbval parity: lax mode (only cells marked NBVAL_CHECK_OUTPUT / nbval-check-output
are compared) and nbval sanitizer files (--sanitize-with), through the real CLI
with real kernels on the local backend; the tolerance each result shows."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import cli as run_cli
from helpers import stdout, write_golden, write_notebook

import jupyter_nbvalidation.verdict.compare as compare
from jupyter_nbvalidation.spec.checks import SpecError, validate_spec
from jupyter_nbvalidation.verdict.sanitize import SanitizerFileError, parse_sanitizer_file

# nbval's own example of a sanitizer file (its documentation's format)
NBVAL_EXAMPLE = """[regex1]
regex: \\d{1,2}/\\d{1,2}/\\d{2,4}
replace: DATE-STAMP

[regex2]
regex: \\d{2}:\\d{2}:\\d{2}
replace: TIME-STAMP
"""


def cli(*args: str, cwd: Path, tmp: Path) -> subprocess.CompletedProcess:
    return run_cli(*args, "--data-dir", str(tmp / "data"), cwd=cwd, env={"JUPYTER_RUNTIME_DIR": str(tmp / "no-servers")})


def _golden(folder: Path, name: str, outputs: dict[int, list[dict]]) -> str:
    """A golden copy of ``name``: the same cells with the given stored outputs."""
    return write_golden(folder / name, outputs, folder / f"golden-{name}", counts=True).name


def _job(proc: subprocess.CompletedProcess) -> dict:
    return json.loads(proc.stdout)


# -- the sanitizer file ----------------------------------------------------------------


def test_nbvals_example_file_parses_in_order_with_its_sections():
    assert parse_sanitizer_file(NBVAL_EXAMPLE) == [
        {"section": "regex1", "regex": r"\d{1,2}/\d{1,2}/\d{2,4}", "replace": "DATE-STAMP"},
        {"section": "regex2", "regex": r"\d{2}:\d{2}:\d{2}", "replace": "TIME-STAMP"},
    ]
    # nbval's test file: several pairs in one section, a later one for the same regex, CRLF lines
    entries = parse_sanitizer_file("[S1]\r\nregex: foo\r\nreplace: bar1\r\n\r\nregex: quux\r\nreplace: 42\r\n"
                                   "[S2 (overwrites foo)]\r\nregex: foo\r\nreplace: bar2\r\n")
    assert [(e["regex"], e["replace"]) for e in entries] == [("foo", "bar1"), ("quux", "42"), ("foo", "bar2")]
    assert parse_sanitizer_file("regex: x\nreplace:\n") == [{"regex": "x", "replace": ""}]


@pytest.mark.parametrize("text, line, words", [
    ("[a]\nregex: (unclosed\nreplace: X\n", 2, "not a valid regular expression"),
    ("[a]\nregex: \\d+\n\nreplace: X\n", 2, "followed by its 'replace:'"),
    ("[a]\nregex: x\nreplace: y\nreplace: z\n", 4, "without a 'regex:'"),
    ("[a]\nregexp: x\nreplace: y\n", 2, "not a '[section]'"),
    ("[a]\nregex: (a)\nreplace: \\2\n", 2, "not a valid replacement"),
    ("# nothing\n", 1, "no regex/replace pair"),
    ("[a]\nregex: x\n", 2, "followed by its 'replace:'"),
])
def test_a_bad_file_names_its_line(text, line, words):
    with pytest.raises(SanitizerFileError) as e:
        parse_sanitizer_file(text)
    assert e.value.line == line and words in e.value.reason, e.value


def test_sanitizers_in_the_spec_are_checked_naming_the_entry():
    base = {"notebook": {"path": "nb.ipynb"}}
    for bad, field in (([{"regex": "(", "replace": ""}], "comparisonConfig.sanitizers[0]"),
                       ([{"regex": "x"}], "comparisonConfig.sanitizers[0].replace"),
                       ([{"regex": "", "replace": ""}], "comparisonConfig.sanitizers[0].regex"),
                       ([{"regex": "x", "replace": "y", "flags": "i"}], "comparisonConfig.sanitizers[0].flags"),
                       ({"regex": "x"}, "comparisonConfig.sanitizers")):
        with pytest.raises(SpecError) as e:
            validate_spec({**base, "comparisonConfig": {"sanitizers": bad}})
        assert e.value.field == field, (bad, e.value)


def test_a_custom_pattern_is_masked_not_called_a_timestamp():
    golden = {"cells": [{"cell_type": "code", "execution_count": 1, "source": "", "metadata": {},
                         "outputs": stdout("run id=ab12 total 3\n")}]}
    actual = {"cells": [{"cell_type": "code", "execution_count": 1, "source": "", "metadata": {},
                         "outputs": stdout("run id=cd34 total 4\n")}]}
    res = compare.compare_notebooks(golden, actual, timestamp_patterns=[r"id=\w+"])
    (diff,) = res["diffs"]
    assert "MASKED total 3" in diff["expected"] and "TIMESTAMP" not in diff["diff"]
    assert "--- golden cell 1" in diff["diff"]  # JupyterLab's "Cell 1" is index 0


# -- end to end: the CLI, real kernels ------------------------------------------------------


def test_sanitize_with_file_on_a_real_run(tmp_path):
    write_notebook(tmp_path / "stamp.ipynb", [
        "import datetime\nnow = datetime.datetime.now()\nprint('run on', now.strftime('%d/%m/%Y'), 'at', "
        "now.strftime('%H:%M:%S'))"])
    golden = _golden(tmp_path, "stamp.ipynb", {0: stdout("run on 1/2/1999 at 00:00:01\n")})
    (tmp_path / "nbval.cfg").write_text(NBVAL_EXAMPLE)
    common = ("submit", "stamp.ipynb", "--golden", golden, "--no-build", "--wait", "-o", "json")
    # exact comparison: the date differs
    plain = cli(*common, "--comparison", "exact", cwd=tmp_path, tmp=tmp_path)
    assert plain.returncode == 1, plain.stdout[-2000:] + plain.stderr
    # nbval's file: the stamps are replaced on both sides, in exact mode too
    sanitized = cli(*common, "--comparison", "exact", "--sanitize-with", "nbval.cfg", cwd=tmp_path, tmp=tmp_path)
    assert sanitized.returncode == 0, sanitized.stdout[-2000:] + sanitized.stderr
    job = _job(sanitized)
    assert job["spec"]["comparisonConfig"]["sanitizers"][0] == {
        "section": "regex1", "regex": r"\d{1,2}/\d{1,2}/\d{2,4}", "replace": "DATE-STAMP"}
    # a bad file: exit 2 naming the file and its line, nothing created
    (tmp_path / "bad.cfg").write_text("[regex1]\nregex: (\\d+\nreplace: X\n")
    bad = cli(*common, "--sanitize-with", "bad.cfg", cwd=tmp_path, tmp=tmp_path)
    assert bad.returncode == 2 and "bad.cfg:2:" in bad.stderr, bad.stderr
    missing = cli(*common, "--sanitize-with", "nope.cfg", cwd=tmp_path, tmp=tmp_path)
    assert missing.returncode == 2 and "nope.cfg" in missing.stderr
    listed = json.loads(cli("list", "-o", "json", cwd=tmp_path, tmp=tmp_path).stdout)["items"]
    assert len(listed) == 2


def test_lax_mode_compares_only_marked_cells(tmp_path):
    write_notebook(tmp_path / "lax.ipynb", [
        "print('unmarked', 1)",
        "# NBVAL_CHECK_OUTPUT\nprint('checked', 2)",
        "print('tagged', 3)",
    ], tags={2: ["nbval-check-output"]})
    good = {0: stdout("unmarked 999\n"), 1: stdout("checked 2\n"), 2: stdout("tagged 3\n")}
    golden = _golden(tmp_path, "lax.ipynb", good)
    common = ("submit", "lax.ipynb", "--golden", golden, "--no-build", "--wait", "-o", "json")
    strict = cli(*common, cwd=tmp_path, tmp=tmp_path)
    assert strict.returncode == 1, strict.stdout[-2000:]
    assert [d["cellIndex"] for d in _job(strict)["status"]["comparisonResult"]["diffs"]] == [0]
    lax = cli(*common, "--lax", cwd=tmp_path, tmp=tmp_path)
    assert lax.returncode == 0, lax.stdout[-2000:] + lax.stderr
    result = _job(lax)["status"]["comparisonResult"]
    assert (result["matchedCells"], result["skippedCells"], result["lax"]) == (2, 1, True)
    # a mismatch in a marked cell (comment or tag) still fails in lax mode
    for index in (1, 2):
        outputs = dict(good)
        outputs[index] = stdout("something else\n")
        golden = _golden(tmp_path, "lax.ipynb", outputs)
        failed = cli("submit", "lax.ipynb", "--golden", golden, "--no-build", "--wait", "-o", "json", "--lax",
                     cwd=tmp_path, tmp=tmp_path)
        assert failed.returncode == 1, failed.stdout[-2000:]
        assert [d["cellIndex"] for d in _job(failed)["status"]["comparisonResult"]["diffs"]] == [index]


def test_tolerance_is_settable_and_shown_with_the_result(tmp_path):
    write_notebook(tmp_path / "num.ipynb", ["print(1.3)"])
    golden = _golden(tmp_path, "num.ipynb", {0: stdout("1.0\n")})
    common = ("submit", "num.ipynb", "--golden", golden, "--no-build", "--wait", "-o", "json")
    default = cli(*common, cwd=tmp_path, tmp=tmp_path)
    assert default.returncode == 1
    assert _job(default)["status"]["comparisonResult"]["tolerance"] == {"absolute": 1e-4, "relative": 0.0}
    loose = cli(*common, "--abs-tol", "0", "--rel-tol", "0.5", cwd=tmp_path, tmp=tmp_path)
    assert loose.returncode == 0, loose.stdout[-2000:]
    assert _job(loose)["status"]["comparisonResult"]["tolerance"] == {"absolute": 0.0, "relative": 0.5}
    absolute = cli(*common, "--abs-tol", "0.31", cwd=tmp_path, tmp=tmp_path)
    assert absolute.returncode == 0
    assert _job(absolute)["status"]["comparisonResult"]["tolerance"]["absolute"] == 0.31
