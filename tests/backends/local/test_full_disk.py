"""A full disk is named and never hangs. The data dir is a small tmpfs of the test's own, filled
with a file as another program fills a disk. Before, a disk full while a notebook ran made `run`
hang for ever (the status write retried without end, the job stayed ValidationRunning), and a disk
full before the start gave a traceback or "disk I/O error; try again" without a word about space.
Real CLI processes, real kernels, a real file system that is full."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from helpers import JUPYTER, cli, wait, write_notebook

SIZE = "48m"


@pytest.fixture
def small_disk(tmp_path):
    """A 48 MiB tmpfs mounted on tmp_path/data (root: CI runs as root), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root (CI runs as root)")
    data = tmp_path / "data"
    data.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(data)], check=True)
    try:
        yield data
    finally:
        subprocess.run(["umount", "-l", str(data)], check=False)


def _fill(data) -> None:
    """Fill the disk (as another program would), leaving nothing free."""
    with open(data / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 20))
        except OSError:
            pass


def _says_no_space(text: str, data) -> bool:
    return "no space left on tmpfs" in text and str(data) in text and "0 bytes free" in text


def test_a_disk_full_before_the_start_is_named_in_one_line_exit_3_and_nothing_is_created(small_disk, tmp_path):
    root = tmp_path / "proj"
    write_notebook(root / "nb.ipynb", ["print(1)"])
    common = ("--no-build", "--local", "--data-dir", str(small_disk))
    assert cli("run", "nb.ipynb", *common, cwd=root, no_servers=True).returncode == 0  # a verdict recorded before
    _fill(small_disk)
    started = time.monotonic()
    proc = cli("run", "nb.ipynb", *common, cwd=root, no_servers=True, timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert time.monotonic() - started < 60
    assert _says_no_space(proc.stderr, small_disk), proc.stderr
    assert "Traceback" not in proc.stderr
    os.remove(small_disk / "filler")  # space comes back: the next run works, the verdict before is kept
    again = cli("run", "nb.ipynb", *common, "--no-cache", cwd=root, no_servers=True)
    assert again.returncode == 0, again.stdout + again.stderr
    listed = cli("list", "--local", "--data-dir", str(small_disk), cwd=root, no_servers=True)
    assert [ln.split()[1] for ln in listed.stdout.splitlines()[1:]] == ["Succeeded", "Succeeded"], listed.stdout


def test_a_disk_that_fills_while_a_notebook_runs_ends_the_run_in_seconds_naming_it(small_disk, tmp_path):
    root = tmp_path / "proj"
    write_notebook(root / "slow.ipynb", ["import time", "time.sleep(6)", "print('done')"])
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "no-servers")}
    proc = subprocess.Popen([JUPYTER, "nbvalidation", "run", "slow.ipynb", "--no-build", "--local", "--data-dir",
                             str(small_disk)], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL)
    try:
        wait(lambda: list(small_disk.glob("jobs/*/run-*/pid")), 120, "the run to start", interval=0.1)
        _fill(small_disk)
        filled = time.monotonic()
        out, err = proc.communicate(timeout=120)  # before: it never ended
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - filled < 90
    assert proc.returncode == 3, out + err
    assert _says_no_space(err, small_disk), err
    assert "Traceback" not in err
    os.remove(small_disk / "filler")
    again = cli("run", "slow.ipynb", "--no-build", "--local", "--data-dir", str(small_disk), cwd=root,
                no_servers=True)
    assert again.returncode == 0, again.stdout + again.stderr
