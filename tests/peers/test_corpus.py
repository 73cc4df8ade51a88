"""The real-world corpus (``shared/corpus`` beside the checkout: real notebooks of
nbclient, nbconvert, nbval, papermill, nbmake and the validator operator, with the
verdicts those projects' own tests expect, MANIFEST.tsv) validated in place by
``jupyter nbvalidation run`` and by ``pytest --nbvalidation``: every firm expectation
holds (verdict, and the first failing cell where the manifest names one), and each
JUnit XML parses and counts the failures the run had. Doubtful rows run too but are
not judged. The corpus is read-only: nothing is written beside it (reports, data dir
and pytest's files go to tmp). A missing corpus fails the test."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

# beside the checkout (…/shared/corpus), also for a worktree deeper down
CORPUS = next((p / "shared" / "corpus" for p in Path(__file__).resolve().parents if (p / "shared" / "corpus").is_dir()),
              Path(__file__).resolve().parents[2].parent / "shared" / "corpus")
# resolved: a subprocess started in a folder reached through a link sees its real path as its cwd, so pytest's
# --rootdir must be the real path too, or the plugin's JUnit cases lose their folder (a clone beside a linked shared/)
NOTEBOOKS = (CORPUS / "notebooks").resolve()
MANIFEST = CORPUS / "MANIFEST.tsv"
JUPYTER = shutil.which("jupyter", path=os.path.dirname(sys.executable)) or "jupyter"
CELL = re.compile(r"^cell (\d+)\b")


def manifest() -> list[dict]:
    assert MANIFEST.is_file(), f"{MANIFEST} is missing: shared/corpus must sit beside the checkout"
    lines = [line for line in MANIFEST.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    header = lines[0].split("\t")
    rows = [dict(zip(header, line.split("\t"), strict=False)) for line in lines[1:]]
    assert len(rows) > 40, f"{MANIFEST}: only {len(rows)} rows"
    return rows


def options_of(row: dict) -> tuple[tuple[str, ...], str | None]:
    """The run options a row asks for (its group), and a file that must not exist afterwards."""
    args: list[str] = ["--golden-self"] if row["mode"] == "golden-self" else []
    absent = None
    for part in filter(None, row["options"].split(";")):
        key, _, value = part.partition("=")
        if key == "cell_timeout":
            args += ["--cell-timeout", value]
        elif key == "ignore":
            for selector in value.split(","):
                args += ["--ignore-output", selector]
        elif key == "pattern":
            args += ["--timestamp-pattern", value]
        elif key == "nbval_sanitize":
            args += ["--sanitize-with", str(NOTEBOOKS / os.path.dirname(row["path"]) / value)]
        elif key == "absent":
            absent = value
        else:
            raise AssertionError(f"{row['id']}: unknown manifest option {key!r}")
    assert row["mode"] in ("execute", "golden-self"), f"{row['id']}: unknown mode {row['mode']!r}"
    return tuple(args), absent


def groups() -> dict[tuple[str, ...], list[dict]]:
    """Rows by the options they are run with (each group is one run over its notebooks)."""
    out: dict[tuple[str, ...], list[dict]] = {}
    for row in manifest():
        assert (NOTEBOOKS / row["path"]).is_file(), f"{row['id']}: {row['path']} is listed but missing"
        out.setdefault(options_of(row)[0], []).append(row)
    return out


def judge(rows: list[dict], verdicts: dict[str, str], first_cells: dict[str, int | None], how: str) -> list[str]:
    """What disagrees with a firm expectation (empty when all agree)."""
    wrong = []
    for row in rows:
        got = verdicts.get(row["path"])
        if row["confidence"] != "firm":
            continue
        if got not in row["expected"].split("|"):
            wrong.append(f"{how}: {row['id']} ({row['path']}): expected {row['expected']}, got {got} — {row['note']}")
        elif got == "Failed" and row["fail_cell"] not in ("", "-") and first_cells.get(row["path"]) is not None \
                and first_cells[row["path"]] != int(row["fail_cell"]):
            wrong.append(f"{how}: {row['id']}: first failing cell index {first_cells[row['path']]}, "
                         f"expected {row['fail_cell']}")
    return wrong


def suite_of(path: Path) -> ET.Element:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    assert len(suites) == 1, f"{path}: {len(suites)} test suites"
    return suites[0]


def env_of(tmp_path: Path) -> dict:
    return {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "no-servers")}  # no running server is used


def test_run_over_the_corpus_agrees_with_every_firm_expectation(tmp_path):
    data, wrong = tmp_path / "data", []
    for n, (args, rows) in enumerate(groups().items()):
        junit = tmp_path / f"run-{n}.xml"
        paths = [row["path"] for row in rows]
        proc = subprocess.run([JUPYTER, "nbvalidation", "run", *dict.fromkeys(paths), *args, "-j", "2", "--local",
                               "--data-dir", str(data), "--no-cache", "-o", "json", "--junitxml", str(junit)],
                              cwd=NOTEBOOKS, capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL,
                              env=env_of(tmp_path))
        assert proc.returncode in (0, 1, 2), proc.stdout + proc.stderr
        try:
            out = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError(f"run {' '.join(args)}: not JSON: {proc.stdout[-2000:]}\n{proc.stderr[-3000:]}") from None
        verdicts = {o["notebook"]: o["verdict"] for o in out}
        assert set(verdicts) == set(paths), (sorted(verdicts), paths)
        cells = {o["notebook"]: (int(m.group(1)) - 1 if (m := CELL.match(o["firstFailure"] or "")) else None)
                 for o in out}
        wrong += judge(rows, verdicts, cells, f"run {' '.join(args)}")
        for row in rows:
            absent = options_of(row)[1]
            if absent:
                assert not (NOTEBOOKS / os.path.dirname(row["path"]) / absent).exists(), f"{row['id']}: {absent}"
        # the JUnit XML: a testcase per notebook, a failure per Failed one, an error per Refused one
        suite = suite_of(junit)
        cases = {(c.get("classname"), c.get("name")): c for c in suite.iter("testcase")}
        assert len(cases) == len(out) == int(suite.get("tests"))
        counts = {v: list(verdicts.values()).count(v) for v in ("Failed", "Refused")}
        assert int(suite.get("failures")) == counts["Failed"] == sum(
            c.find("failure") is not None for c in cases.values()), f"run {' '.join(args)}: {verdicts}"
        assert int(suite.get("errors")) == counts["Refused"] == sum(c.find("error") is not None for c in cases.values())
        for path, verdict in verdicts.items():
            case = cases[(os.path.dirname(path).replace("/", "."), os.path.basename(path))]
            assert (case.find("failure") is not None) == (verdict == "Failed"), path
    assert not wrong, "\n".join(wrong)


def test_pytest_nbvalidation_over_the_corpus_agrees_with_every_firm_expectation(tmp_path):
    data, wrong = tmp_path / "data", []
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # no configuration of the corpus' ancestors applies
    for n, (args, rows) in enumerate(groups().items()):
        junit = tmp_path / f"pytest-{n}.xml"
        paths = list(dict.fromkeys(row["path"] for row in rows))
        golden_self = "--golden-self" in args
        spec = [a for a in args if a != "--golden-self"]
        # only this plugin (and xdist's) loaded, as a project would pin them: every other pytest plugin of
        # this interpreter (pytest-jupyter, hypothesis, ...) costs each worker its start-up and is not under test
        argv = [sys.executable, "-m", "pytest", "-p", "jupyter_nbvalidation.pytest_plugin", "-p", "no:cacheprovider",
                "-c", str(tmp_path / "pytest.ini"),
                "--rootdir", str(NOTEBOOKS), "--nbvalidation", "--nbvalidation-local", "--nbvalidation-no-cache",
                "--nbvalidation-data-dir", str(data), "--junitxml", str(junit), "-q", *paths]
        if golden_self:
            argv.append("--nbvalidation-golden-self")
        if spec:
            argv.append("--nbvalidation-option=" + " ".join(_quote(a) for a in spec))
        if len(paths) > 4:
            argv += ["-p", "xdist.plugin", "-n", "2"]
        proc = subprocess.run(argv, cwd=NOTEBOOKS, capture_output=True, text=True, timeout=1800,
                              stdin=subprocess.DEVNULL, env={**env_of(tmp_path), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
        assert proc.returncode in (0, 1), proc.stdout[-5000:] + proc.stderr[-3000:]
        suite = suite_of(junit)
        cases = {(c.get("classname"), c.get("name")): c for c in suite.iter("testcase")}
        verdicts, cells = {}, {}
        for path in paths:
            case = cases.get((path.replace("/", "."), os.path.basename(path)))
            assert case is not None, f"{path} is not a testcase: {sorted(cases)}"
            failure = case.find("failure")
            assert case.find("error") is None and case.find("skipped") is None, path
            # pytest has no "refused": a notebook the service refused is a failure that says so
            text = "" if failure is None else (failure.get("message") or "") + "\n" + (failure.text or "")
            verdicts[path] = "Succeeded" if failure is None else ("Refused" if ": Refused" in text else "Failed")
            m = re.search(r"^cell (\d+)\b", text, re.M)
            cells[path] = int(m.group(1)) - 1 if m else None
        wrong += judge(rows, verdicts, cells, f"pytest {' '.join(args)}")
        failed = sum(v != "Succeeded" for v in verdicts.values())
        assert int(suite.get("tests")) == len(paths) and int(suite.get("failures")) == failed, proc.stdout[-3000:]
        assert f"{failed} failed" in proc.stdout if failed else "failed" not in proc.stdout.splitlines()[-1]
    assert not wrong, "\n".join(wrong)


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)
