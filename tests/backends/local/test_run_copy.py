"""A validation never touches the user's files (issue 20, point 4): on the local backend
each attempt's kernel works in a fresh copy of the notebook's folder inside its run folder
(backends/workcopy.py), under a mirror of the root whose other entries are links to the
real ones; the copy goes with the job. Real kernels, real servers, real SQLite."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import make_local
from helpers import cli, rest_wait_terminal, wait_async, write_notebook
from helpers import rest_call as call
from tornado.httpclient import HTTPClientError

from jupyter_nbvalidation.core.model import Phase

NOBUILD = {"podConfig": {"buildConfig": {"enabled": False}}}


def run(cwd: Path, data: Path, *args: str, codes=(0, 1)) -> tuple[int, dict[str, dict], str]:
    proc = cli("run", *args, "--local", "--data-dir", str(data), "-o", "json", cwd=cwd, timeout=600,
               env={"JUPYTER_RUNTIME_DIR": str(data.parent / "no-servers")})
    assert proc.returncode in codes, proc.stdout + proc.stderr
    try:
        rows = {row["notebook"]: row for row in json.loads(proc.stdout)}
    except ValueError:
        rows = {}
    return proc.returncode, rows, proc.stdout + proc.stderr


def tree_state(top: Path) -> dict[str, tuple]:
    """Every entry under ``top`` (links not followed): kind, mode, mtime, content or target."""
    state: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if p.is_symlink():
                state[str(p.relative_to(top))] = ("link", os.readlink(p))
            elif p.is_dir():
                state[str(p.relative_to(top))] = ("dir", st.st_mode, st.st_mtime_ns)
            else:
                state[str(p.relative_to(top))] = ("file", st.st_mode, st.st_mtime_ns,
                                                   hashlib.sha256(p.read_bytes()).hexdigest())
    st = top.stat()
    state["."] = ("dir", st.st_mode, st.st_mtime_ns)
    return state


def copies_left(data: Path) -> list[Path]:
    return list((data / "jobs").glob("*/run-*/tree"))


def test_a_notebook_writing_into_its_folder_passes_twice_and_leaves_the_folder_as_it_was(tmp_path):
    proj = tmp_path / "proj"
    data = tmp_path / "data"
    write_notebook(proj / "nb.ipynb", [
        "import os\nos.mkdir('results')\nopen('results/x.txt', 'w').write('1')",
        "open('input.csv', 'a').write('appended\\n')\nos.remove('scratch.txt')",
        # the copy holds hidden files; version control's folder and checkpoints are left out
        "assert open('.settings.json').read() == '{}'\nassert not os.path.exists('.git')\n"
        "assert not os.path.exists('.ipynb_checkpoints')",
    ])
    (proj / "input.csv").write_text("a,b\n")
    (proj / "scratch.txt").write_text("keep me\n")
    (proj / ".settings.json").write_text("{}")
    (proj / ".git").mkdir()
    (proj / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (proj / ".ipynb_checkpoints").mkdir()
    before = tree_state(proj)
    code, rows, out = run(tmp_path, data, "proj")
    assert code == 0 and rows["proj/nb.ipynb"]["verdict"] == "Succeeded", out
    assert tree_state(proj) == before
    code, rows, out = run(tmp_path, data, "proj", "--no-cache")
    assert code == 0 and rows["proj/nb.ipynb"]["verdict"] == "Succeeded", out  # was FileExistsError
    assert tree_state(proj) == before
    assert copies_left(data) == []  # each attempt's copy went with its job
    assert len([d for d in (data / "jobs").iterdir() if d.name != ".pool"]) == 2  # the run data stays


def test_a_tutorial_resaving_its_figure_leaves_the_folder_key_unchanged(tmp_path):
    proj = tmp_path / "tutorial"
    data = tmp_path / "data"
    (proj / "fig").mkdir(parents=True)
    (proj / "fig" / "plot.png").write_bytes(b"old figure")
    write_notebook(proj / "01-plot.ipynb", ["import time\nopen('fig/plot.png', 'wb').write(str(time.time()).encode())"])
    write_notebook(proj / "02-read.ipynb", ["assert open('fig/plot.png', 'rb').read() == b'old figure'"])
    write_notebook(proj / "03-other.ipynb", ["print('beside')"])
    code, rows, out = run(tmp_path, data, "tutorial")
    assert code == 0 and {r["verdict"] for r in rows.values()} == {"Succeeded"} and len(rows) == 3, out
    assert (proj / "fig" / "plot.png").read_bytes() == b"old figure"
    code, rows, out = run(tmp_path, data, "tutorial")
    assert code == 0 and {nb: r["verdict"] for nb, r in rows.items()} == {
        "tutorial/01-plot.ipynb": "Unchanged", "tutorial/02-read.ipynb": "Unchanged",
        "tutorial/03-other.ipynb": "Unchanged"}, out


def test_paths_outside_the_folder_read_the_real_files(tmp_path):
    proj = tmp_path / "proj"
    data = tmp_path / "data"
    (proj / "data").mkdir(parents=True)
    (proj / "data" / "x.csv").write_text("a,b\n1,2\n")
    (proj / "shared").mkdir()
    (proj / "shared" / "v.txt").write_text("shared\n")
    nbs = proj / "notebooks"
    write_notebook(nbs / "nb.ipynb", [
        f"import os\nassert os.path.realpath(os.getcwd()) != {str(nbs)!r}, os.getcwd()",  # works in a copy
        "assert open('../data/x.csv').read() == 'a,b\\n1,2\\n'",  # the real file, read through a link
        f"assert os.path.realpath('../data/x.csv') == {str(proj / 'data' / 'x.csv')!r}",
        # a link in the folder into the root is copied (written in the copy), one leaving it stays a link
        "assert open('linked/v.txt').read() == 'shared\\n'\nopen('linked/v.txt', 'w').write('changed')",
        # one leaving it stays a link: to a place the kernel sees it works, to the machine's /tmp
        # (hidden by the sandbox, issue 40) it finds nothing, as a missing file
        "assert open('ext/passwd').read() == open('/etc/passwd').read() and os.path.islink('ext')",
        "assert os.path.islink('tmpext') and not os.path.exists('tmpext/w.txt')",
        "assert os.path.isfile('loop/loop/nb.ipynb')",  # a link cycle, copied once
    ])
    (nbs / "linked").symlink_to(proj / "shared", target_is_directory=True)
    (nbs / "ext").symlink_to("/etc", target_is_directory=True)
    machine_tmp = Path(tempfile.mkdtemp(dir="/tmp", prefix="nbv-link-"))  # the machine's /tmp itself
    (machine_tmp / "w.txt").write_text("another user's scratch\n")
    (nbs / "tmpext").symlink_to(machine_tmp, target_is_directory=True)
    (nbs / "loop").symlink_to(nbs, target_is_directory=True)
    before = tree_state(proj)
    # the root is proj (the CLI's folder): notebooks/ is copied, ../data and ../shared are links
    try:
        code, rows, out = run(proj, data, "notebooks")
    finally:
        shutil.rmtree(machine_tmp)
    assert code == 0 and rows["notebooks/nb.ipynb"]["verdict"] == "Succeeded", out
    assert tree_state(proj) == before and (proj / "shared" / "v.txt").read_text() == "shared\n"


@pytest.mark.asyncio
async def test_an_attempt_run_again_never_sees_what_the_first_one_wrote(tmp_path, notebook):
    """spec.inputFiles: a file not named is not there, also in the attempt a new engine
    starts after the first one was interrupted (the first wrote marker.txt into its copy)."""
    env = make_local(tmp_path)
    await env.engine.start()
    nb = notebook("r/nb.ipynb", [
        "import os, time\nassert sorted(os.listdir('.')) == ['data.txt'], os.listdir('.')",
        "open('marker.txt', 'w').write('first')\nopen('data.txt', 'a').write('more')",
        "time.sleep(3)",
        "assert open('data.txt').read() == 'namedmore'",  # its own write only
    ])
    (env.root / "r" / "data.txt").write_text("named")
    job = await env.submit(notebook={"path": nb}, inputFiles=["data.txt"], **NOBUILD)
    jdir = env.backend.job_dir(job)
    # wherever the first attempt's kernel works
    await wait_async(lambda: list(jdir.rglob("marker.txt")), 60, "the first attempt's marker", interval=0.1)
    await env.engine.stop()
    again = make_local(tmp_path)
    await again.engine.start()
    try:
        done = await again.engine.wait_for_terminal(job["metadata"]["name"], 120)
        assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
        assert sorted(p.name for p in jdir.glob("run-*")) == ["run-1", "run-2"]
        assert copies_left(tmp_path / "data") == []
        assert (jdir / "input" / "inputs" / "data.txt").read_text() == "named"  # the snapshot itself: untouched
        assert (env.root / "r" / "data.txt").read_text() == "named"
    finally:
        await again.engine.stop()


async def test_a_folder_over_the_bound_is_refused_at_submit(jp_fetch, jp_serverapp, jp_root_dir):
    service = jp_serverapp.web_app.settings["nbvalidation_service"]
    service.backend.max_folder_files = 3
    write_notebook(jp_root_dir / "big" / "nb.ipynb", ["print(open('data.txt').read())"])
    for i in range(3):
        (jp_root_dir / "big" / f"{i}.txt").write_text(str(i))
    (jp_root_dir / "big" / "data.txt").write_text("named")
    with pytest.raises(HTTPClientError) as e:
        await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "big/nb.ipynb"}, **NOBUILD})
    err = json.loads(e.value.response.body)["error"]
    assert e.value.code == 413, err
    assert err["field"] == "spec.notebook.path", err
    for words in (str((jp_root_dir / "big").resolve()), "over 3 files", "c.LocalBackend.max_folder_files",
                  "spec.inputFiles"):
        assert words in err["message"], err
    assert (await call(jp_fetch, "jobs"))["items"] == []
    jobs = service.backend.root / "jobs"
    assert not jobs.exists() or not any(jobs.iterdir())
    # naming the files it reads: accepted, and only those are there
    job = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "big/nb.ipynb"},
                                                            "inputFiles": ["data.txt"], **NOBUILD})
    done = await rest_wait_terminal(jp_fetch, job["metadata"]["name"], 240)
    assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]


def test_the_cli_refuses_a_folder_over_the_bound_with_exit_2(tmp_path):
    proj = tmp_path / "proj"
    data = tmp_path / "data"
    write_notebook(proj / "nb.ipynb", ["print(1)"])
    with open(proj / "huge.bin", "wb") as f:  # sparse: 2 GiB + 1 byte by its size, nothing on disk
        f.truncate(2 * 2**30 + 1)
    code, _rows, out = run(tmp_path, data, "proj", codes=(2,))
    assert "c.LocalBackend.max_folder_bytes" in out and str(proj.resolve()) in out, out
    jobs = data / "jobs"
    assert not jobs.exists() or not any(jobs.iterdir())


def test_keep_outputs_copies_what_the_notebook_wrote_out_of_the_project(tmp_path):
    proj = tmp_path / "proj"
    data = tmp_path / "data"
    write_notebook(proj / "nb.ipynb", [
        "import os\nos.makedirs('results/deep')\nopen('results/deep/x.txt', 'w').write('1')",
        "open('input.csv', 'a').write('2\\n')\nprint(open('untouched.txt').read())",
    ])
    (proj / "input.csv").write_text("1\n")
    (proj / "untouched.txt").write_text("read only\n")
    before = tree_state(proj)
    code, _rows, out = run(tmp_path, data, "proj", "--keep-outputs", str(proj / "out"), codes=(2,))
    assert "inside the folder of proj/nb.ipynb" in out, out  # never into the project
    assert not (proj / "out").exists()
    kept = tmp_path / "kept"
    code, rows, out = run(tmp_path, data, "proj", "--keep-outputs", str(kept))
    assert code == 0 and rows["proj/nb.ipynb"]["verdict"] == "Succeeded", out
    files = sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*") if p.is_file())
    assert files == ["proj/nb/input.csv", "proj/nb/results/deep/x.txt"], files
    assert (kept / "proj" / "nb" / "input.csv").read_text() == "1\n2\n"
    assert tree_state(proj) == before and copies_left(data) == []


def test_a_data_dir_inside_the_notebooks_folder_is_neither_copied_nor_keyed(tmp_path):
    proj = tmp_path / "proj"
    write_notebook(proj / "nb.ipynb", ["import os\nassert not os.path.exists('.nbv'), os.listdir('.')"])
    code, rows, out = run(proj, proj / ".nbv", ".")
    assert code == 0 and rows["nb.ipynb"]["verdict"] == "Succeeded", out
    code, rows, out = run(proj, proj / ".nbv", ".")  # the jobs written into .nbv do not change the key
    assert code == 0 and rows["nb.ipynb"]["verdict"] == "Unchanged", out


@pytest.mark.asyncio
async def test_a_cancelled_validation_leaves_no_copy(local, notebook):
    nb = notebook("c/nb.ipynb", ["open('written.txt', 'w').write('x')", "import time\ntime.sleep(120)"])
    job = await local.submit(notebook={"path": nb}, **NOBUILD)
    jdir = local.backend.job_dir(job)
    # the folder c/ at its path under the root
    await wait_async(lambda: list(jdir.glob("run-1/tree/c/written.txt")), 60, "the validation's write into its copy",
                     interval=0.1)
    await local.service.cancel(job["metadata"]["name"])
    done = await local.engine.wait_for_terminal(job["metadata"]["name"], 60)
    assert done["status"]["phase"] == Phase.FAILED, done["status"]
    # the copy goes with the cancelled attempt; its run data stays
    await wait_async(lambda: not copies_left(local.backend.root), 10, "the cancelled attempt's copy to go", interval=0.1)
    assert copies_left(local.backend.root) == [] and (jdir / "run-1" / "owner.json").is_file()
    assert not (local.root / "c" / "written.txt").exists()


def test_submit_wait_keeps_outputs_too(tmp_path):
    proj = tmp_path / "proj"
    write_notebook(proj / "nb.ipynb", ["open('report.txt', 'w').write('done')"])
    before = tree_state(proj)
    proc = cli("submit", "proj/nb.ipynb", "--wait", "--local", "--data-dir", str(tmp_path / "data"), "--keep-outputs",
               "kept", cwd=tmp_path, timeout=600, no_servers=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "kept" / "proj" / "nb" / "report.txt").read_text() == "done"
    assert sorted(p.name for p in (tmp_path / "kept").rglob("*") if p.is_file()) == ["report.txt"]
    assert tree_state(proj) == before
