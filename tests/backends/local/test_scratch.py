"""Issue 20, "a validation never touches the user's files" (leftovers): a sandboxed kernel's
/tmp and /var/tmp are fresh folders of its attempt *on disk* (in the run folder, inside the
hidden data dir, removed after the job), not a tmpfs in memory, so a notebook's big scratch
file costs disk as it would without the sandbox, never the machine's memory, and never an
ENOSPC that a plain run would not get. Through real servers, runners and kernels:

- a notebook writes 2 GiB of real data (64 MiB chunks) to /tmp and 2 GiB to its working
  folder and succeeds; inside, /tmp is not a tmpfs and lies on the filesystem of its working
  copy, the machine's shared memory (Shmem) does not grow by the file; from outside, the
  file is seen growing in the attempt's scratch folder; afterwards the project folder is
  byte for byte as before and nothing of the run is left in the data dir;
- the same notebooks (one passes, one fails, a twin that writes /tmp and reads it back) get
  the same verdicts with the sandbox on, off (LocalBackend.sandbox=off) and unavailable
  (auto on a server in a user namespace where user.max_user_namespaces is 0: the sandbox's
  own probe fails for real, as on a system that forbids user namespaces); /health says off
  and why, and without the sandbox the kernel does run with the user's rights (it reads the
  store and a file of HOME, as the README says).

Like tests/test_sandbox.py, nothing here skips: the sandbox must be detected as available on
the machines this suite runs on."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import stat
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import ServerProcess
from helpers import NOBUILD, detected_health, explain, submit, wait_all, write_notebook

GiB = 2**30
NEEDED_FREE = 10 * GiB

BIG_HEAD = '''import json, os
S = {facts!r}
CHUNK = 64 * 2**20
def meminfo():
    out = {{}}
    for line in open('/proc/meminfo'):
        key, value = line.split(':', 1)
        out[key] = int(value.split()[0]) * 1024
    return out
def mount_of(path):
    """(mount point, fstype) of the last mount at path in this process's view."""
    found = None
    for line in open('/proc/self/mountinfo'):
        left, _, right = line.partition(' - ')
        if left.split()[4] == path:
            found = (path, right.split()[0])
    return found
def write_big(path):
    block = bytearray(os.urandom(CHUNK))
    with open(path, 'wb') as f:
        for i in range(S['size'] // CHUNK):
            block[:8] = i.to_bytes(8, 'little')  # every chunk its own data
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
'''

BIG_WRITE = '''before = meminfo()
tmp_file = os.path.join('/tmp', S['name'])
write_big(tmp_file)
after = meminfo()
here_file = S['name']
write_big(here_file)
R = {
    'tmp_mount': mount_of('/tmp'), 'var_tmp_mount': mount_of('/var/tmp'),
    'tmp_mode': oct(os.stat('/tmp').st_mode & 0o7777), 'var_tmp_mode': oct(os.stat('/var/tmp').st_mode & 0o7777),
    'tmp_same_fs_as_workdir': os.stat('/tmp').st_dev == os.stat('.').st_dev,
    'shmem_growth': after['Shmem'] - before['Shmem'],
    'mem_available_drop': before['MemAvailable'] - after['MemAvailable'],
    'sizes': [os.path.getsize(tmp_file), os.path.getsize(here_file)],
    'in_var_tmp': os.path.exists(os.path.join('/var/tmp', S['name'])),
}
print('REPORT ' + json.dumps(R))
'''

BIG_ASSERT = '''assert R['sizes'] == [S['size'], S['size']], R
assert R['tmp_mount'] is not None and R['tmp_mount'][1] != 'tmpfs', R
assert R['var_tmp_mount'] is not None and R['var_tmp_mount'][1] != 'tmpfs', R
assert R['tmp_same_fs_as_workdir'], R
assert R['shmem_growth'] < S['size'] // 2, R
assert not R['in_var_tmp'], R
assert R['tmp_mode'] == S['tmp_mode'] and R['var_tmp_mode'] == S['var_tmp_mode'], R
'''


def fs_type(path: Path) -> str:
    """The filesystem type of the mount holding ``path`` (this process's view)."""
    real = os.path.realpath(path)
    best, kind = "", "?"
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            point = left.split()[4]
            if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                best, kind = point, right.split()[0]
    return kind


def tree_digest(top: Path) -> dict[str, tuple]:
    """Every entry under ``top``: its type, mode, size and content hash (byte for byte)."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = path.lstat()
            digest = ""
            if stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                digest = os.readlink(path)
            out[str(path.relative_to(top))] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_size, digest)
    return out


def report_of(client, name: str, cell: int) -> dict:
    executed = client.request("GET", f"jobs/{name}/notebook")
    text = "".join(o.get("text", "") for o in executed["cells"][cell].get("outputs", []) if o.get("name") == "stdout")
    line = next((ln for ln in text.splitlines() if ln.startswith("REPORT ")), None)
    assert line, f"no report: {text[-2000:]}"
    return json.loads(line[len("REPORT "):])


def remove_named(name: str, top: Path) -> None:
    """Teardown: every file called ``name`` under ``top`` and in the machine's /tmp and
    /var/tmp themselves (2 GiB each), gone."""
    found = [os.path.join(d, name) for d, _dirs, files in os.walk(top) if name in files]
    for path in [*found, os.path.join("/tmp", name), os.path.join("/var/tmp", name)]:
        if os.path.lexists(path):
            os.remove(path)


def test_a_big_scratch_file_in_tmp_goes_to_disk_not_memory(tmp_path, monkeypatch):
    free = shutil.disk_usage(tmp_path).free
    if free < NEEDED_FREE:
        pytest.fail(f"this test writes 4 GiB (2 GiB in /tmp, 2 GiB in the working folder) under {tmp_path}: "
                    f"it needs more than {NEEDED_FREE / GiB:.0f} GiB free there, {free / GiB:.1f} GiB are")
    kind = fs_type(tmp_path)
    if kind in ("tmpfs", "ramfs"):
        pytest.fail(f"pytest's temporary folder {tmp_path} is on {kind}: the data dir (and so the scratch "
                    f"folders) must be on disk for this test; give --basetemp on a disk")
    monkeypatch.setenv("UV_CACHE_DIR", os.environ.get("UV_CACHE_DIR") or os.path.expanduser("~/.cache/uv"))
    name = f"nbv-big-{secrets.token_hex(6)}.bin"
    # the default settings (LocalBackend.sandbox auto) but the disk budget: this run writes 4 GiB,
    # the default budget (tests/security/test_bounds.py holds it)
    server = ServerProcess(tmp_path, extra_args=[f"--LocalBackend.run_disk_limit={8 * GiB}"])
    seen: list[tuple[str, int]] = []  # (path, size) of the scratch file, seen from outside during the run
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for path in (server.data_dir / "jobs").glob(f"*/run-*/scratch/tmp/{name}"):
                try:
                    seen.append((str(path), path.stat().st_size))
                except OSError:
                    pass
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        server.start()
        client = server.client()
        sandbox = detected_health(client)["sandbox"]
        assert sandbox["enabled"] is True and sandbox["mode"] == "auto", sandbox
        facts = {"name": name, "size": 2 * GiB,
                 "tmp_mode": oct(os.stat("/tmp").st_mode & 0o7777), "var_tmp_mode": oct(os.stat("/var/tmp").st_mode & 0o7777)}
        write_notebook(server.root / "big" / "nb.ipynb", [BIG_HEAD.format(facts=facts), BIG_WRITE, BIG_ASSERT])
        (server.root / "big" / "input.csv").write_text("a,b\n1,2\n")
        (server.root / "other.txt").write_text("beside\n")
        before = tree_digest(server.root)
        watcher.start()
        job = submit(client, "big/nb.ipynb", podConfig=NOBUILD, cellTimeout="15m")
        done = wait_all(client, [job], timeout=1500)[job]
        stop.set()
        watcher.join()
        report = report_of(client, job, 1)
        print("measured:", json.dumps(report), "largest size seen from outside:", max((s for _, s in seen), default=0))
        assert done["status"]["phase"] == "Succeeded", (report, explain(done))

        # during the run the file was in the attempt's scratch folder, on disk, growing to 2 GiB
        assert seen and max(s for _, s in seen) == 2 * GiB, seen[-3:]
        assert all("/scratch/tmp/" in p for p, _ in seen)
        # the user's project folder: byte for byte as before, no new file
        assert tree_digest(server.root) == before
        # nothing of the run is left in the data dir: no scratch folder, no working copy, no big file
        runs = list((server.data_dir / "jobs").glob("*/run-*"))
        assert runs
        for run in runs:
            assert not (run / "scratch").exists() and not (run / "tree").exists(), sorted(os.listdir(run))
        big = [os.path.join(d, f) for d, _, files in os.walk(server.data_dir) for f in files
               if os.path.getsize(os.path.join(d, f)) > 64 * 2**20 or f == name]
        assert big == [], big
        # and the machine's /tmp, /var/tmp never saw it
        assert not os.path.exists(os.path.join("/tmp", name)) and not os.path.exists(os.path.join("/var/tmp", name))
    finally:
        stop.set()
        server.stop()
        remove_named(name, tmp_path)


# the same notebooks under each setting: the verdicts must be the same
TWIN = [
    "import os, tempfile, uuid\n"
    "data = os.urandom(10 * 2**20)\n"
    "paths = [os.path.join(d, f'nbv-twin-{uuid.uuid4().hex}') for d in ('/tmp', '/var/tmp')]\n"
    "for p in paths:\n"
    "    assert not os.path.exists(p)\n"
    "    with open(p, 'wb') as f:\n"
    "        f.write(data)",
    "for p in paths:\n"
    "    with open(p, 'rb') as f:\n"
    "        assert f.read() == data, p\n"
    "fd, other = tempfile.mkstemp(dir='/tmp')\n"
    "os.write(fd, b'x'); os.close(fd)\n"
    "assert open(other, 'rb').read() == b'x'\n"
    "for p in (*paths, other):\n"
    "    os.remove(p)",
]
PASSES = ["x = 1", "assert x == 1"]
FAILS = ["x = 1", "raise ValueError('as always')", "print('never')"]
# what the kernel can do with the user's rights: read the store and a file in HOME
RIGHTS = '''import os, json
S = {facts!r}
R = {{"uid": os.getuid()}}
try:
    R["store"] = open(S["store"], "rb").read(16).decode("latin-1")
except OSError as e:
    R["store"] = type(e).__name__
try:
    R["home"] = open(S["home_secret"]).read()
except OSError as e:
    R["home"] = type(e).__name__
print("REPORT " + json.dumps(R))
'''

# a server that cannot make user namespaces, as on a system that forbids them (a sysctl
# user.max_user_namespaces of 0): in a user namespace of its own (the same uid and gid) whose
# limit is 0, then the server's command
NO_USERNS = r'''
import ctypes, os, sys
uid, gid = os.geteuid(), os.getegid()
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000) != 0:
    sys.exit(f"unshare(CLONE_NEWUSER): {os.strerror(ctypes.get_errno())}")
for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1\n"),
                   ("/proc/self/gid_map", f"{gid} {gid} 1\n"), ("/proc/sys/user/max_user_namespaces", "0\n")):
    with open(path, "w") as f:
        f.write(text)
os.execv(sys.argv[1], sys.argv[1:])
'''


def test_same_verdicts_with_the_sandbox_on_off_and_unavailable(tmp_path, monkeypatch):
    monkeypatch.setenv("UV_CACHE_DIR", os.environ.get("UV_CACHE_DIR") or os.path.expanduser("~/.cache/uv"))
    monkeypatch.setenv("HOME", str(tmp_path))
    home_secret = tmp_path / "home-secret.txt"
    home_secret.write_text("the user's own file\n")
    wrapper = tmp_path / "no-userns.py"
    wrapper.write_text(NO_USERNS)
    settings = {"on": ([], []), "off": (["--LocalBackend.sandbox=off"], []),
                "unavailable": ([], [sys.executable, "-I", "-S", str(wrapper)])}
    verdicts: dict[str, dict] = {}
    rights: dict[str, dict] = {}
    for setting, (extra, prefix) in settings.items():
        base = tmp_path / setting
        base.mkdir()
        server = ServerProcess(base, extra_args=extra, prefix=prefix)
        try:
            server.start()
            client = server.client()
            sandbox = detected_health(client)["sandbox"]
            if setting == "on":
                assert sandbox["enabled"] is True and sandbox["mode"] == "auto", sandbox
            elif setting == "off":
                assert sandbox["enabled"] is False and sandbox["mode"] == "off", sandbox
                assert "off" in sandbox["reason"], sandbox
            else:  # auto, and the probe failed for real: /health says so and why; the log warns
                assert sandbox["enabled"] is False and sandbox["mode"] == "auto", sandbox
                assert "unshare" in sandbox["reason"] and "No space left" in sandbox["reason"], sandbox
                assert "kernels run without a sandbox" in server.log_path.read_text(), server.log_path.read_text()
            facts = {"store": str(server.data_dir / "nbvalidation.db"), "home_secret": str(home_secret)}
            notebooks = {"passes": PASSES, "fails": FAILS, "twin": TWIN, "rights": [RIGHTS.format(facts=facts)]}
            for key, cells in notebooks.items():
                write_notebook(server.root / "nbs" / f"{key}.ipynb", cells)
            names = {key: submit(client, f"nbs/{key}.ipynb", podConfig=NOBUILD) for key in notebooks}
            done = wait_all(client, list(names.values()))
            verdicts[setting] = {key: (done[n]["status"]["phase"], done[n]["status"].get("failedCellIndex"))
                                 for key, n in names.items()}
            for key, n in names.items():
                if key != "fails":
                    assert done[n]["status"]["phase"] == "Succeeded", (setting, key, explain(done[n]))
            rights[setting] = report_of(client, names["rights"], 0)
        finally:
            server.stop()

    assert verdicts["on"] == verdicts["off"] == verdicts["unavailable"], verdicts
    assert verdicts["on"]["fails"] == ("Failed", 1), verdicts
    assert verdicts["on"]["twin"] == ("Succeeded", None), verdicts
    # with the sandbox the kernel reads neither; without it, it runs with the user's rights
    assert rights["on"]["store"] == "FileNotFoundError" and rights["on"]["home"] == "FileNotFoundError", rights
    for setting in ("off", "unavailable"):
        assert rights[setting]["uid"] == os.getuid(), rights
        assert rights[setting]["store"] == "SQLite format 3\x00", rights
        assert rights[setting]["home"] == "the user's own file\n", rights


def test_the_plan_binds_the_scratch_folders_and_keeps_the_other_rules(tmp_path):
    """Fast, no kernel: the data dir under /tmp (as in these tests), its scratch folder bound
    over /tmp before anything else; shown paths under /tmp bound again; /dev/shm a tmpfs; the
    folders made fresh (a leftover of an earlier try gone) with the real ones' mode bits."""
    import jupyter_nbvalidation.backends.workcopy as workcopy
    import jupyter_nbvalidation.runner.sandbox as sandbox

    data = tmp_path / "data"
    run = data / "jobs" / "u" / "run-1"
    (run / "tree").mkdir(parents=True)
    root = tmp_path / "root"
    root.mkdir()
    first = workcopy.make_scratch(run)
    Path(first["/tmp"], "left-over").write_text("x")
    scratch = workcopy.make_scratch(run)
    assert scratch == first and os.listdir(scratch["/tmp"]) == [] and os.listdir(scratch["/var/tmp"]) == []
    for path, folder in scratch.items():
        assert stat.S_IMODE(os.stat(folder).st_mode) == stat.S_IMODE(os.stat(path).st_mode), path
    plan = sandbox.plan_mounts([*sandbox.HIDDEN_BY_DEFAULT, str(data)], [str(root), str(run / "tree")], scratch)
    real = os.path.realpath
    assert plan[0] == ("bind", "/tmp", real(scratch["/tmp"])), plan
    assert ("bind", real("/var/tmp"), real(scratch["/var/tmp"])) in plan and ("hide", "/dev/shm") in plan, plan
    assert ("show", real(root)) in plan and ("show", real(run / "tree")) in plan, plan
    assert not [p for p in plan if p[0] == "hide" and p[1].startswith("/tmp/")], plan  # covered by the bind
    workcopy.remove(run)
    assert not (run / "scratch").exists() and not (run / "tree").exists()
