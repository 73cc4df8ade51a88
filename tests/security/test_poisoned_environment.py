"""Attack 1 of issue 40: poisoning a shared environment for the next run.

Each test is the attacker's notebook, in alice/, a project of one root: it writes
into the built environment of its requirements (``six==1.16.0``) so that the next
notebook with the same requirements, bob's, imports the attacker's code. Each
checks that the attack is blocked (the write refused by the sandbox, or the
environment found changed, retired and built again, saying so), and that the
victim's run afterwards gets its own clean verdict, with no trace of the payload.

The protection checked here is the environments' own (backends/local/seal.py): a
seal taken at build, checked before an environment is handed to a run, and files
that share no inode with uv's package cache. It must hold with the sandbox off (the
write goes through, and must be found), and with it on.

Each test builds in a package cache of its own (``UV_CACHE_DIR``, one per test module
and worker: what uv downloads for six and ipykernel): an attack that went through
must never reach the machine's shared cache, where every other test builds."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_local
from helpers import write_notebook

from jupyter_nbvalidation.core.model import Phase

REQUIREMENTS = "six==1.16.0\n"
MARK = "NBV PAYLOAD RAN"


def _payload(marker: Path) -> str:
    """What the attacker's code does in whoever imports six: says so, marks six, and leaves
    a file in alice's folder (the issue's payload copied bob's files there)."""
    return (f"\nNBV_PAYLOAD = 'ran'\nprint({MARK!r})\n"
            f"try:\n    open({str(marker)!r}, 'w').write('ran')\nexcept OSError:\n    pass\n")


# the attacker's notebooks: each prints WRITTEN when its write went through, REFUSED when not
PYC_ATTACK = """\
import importlib.util, os, six
from importlib._bootstrap_external import _code_to_timestamp_pyc
src = six.__file__
st = os.stat(src)
# six's own code plus the payload, as bytecode the interpreter takes for six.py (same mtime and size)
code = compile(open(src).read() + PAYLOAD, src, 'exec')
pyc = importlib.util.cache_from_source(src)
try:
    os.makedirs(os.path.dirname(pyc), exist_ok=True)
    with open(pyc, 'wb') as f:
        f.write(_code_to_timestamp_pyc(code, st.st_mtime, st.st_size))
    print('WRITTEN', pyc)
except OSError as e:
    print('REFUSED', e)
"""

SOURCE_ATTACK = """\
import importlib.util, os, six
src = six.__file__
st = os.stat(src)
text = open(src, 'rb').read()
payload = PAYLOAD.encode()
# the same size: the license comment at the top shrinks by as much as the payload takes, the
# payload goes right after the __future__ import; then the mtime is put back
top = text.index(b'\\n\\n')
future = text.index(b'from __future__ import absolute_import\\n') + len(b'from __future__ import absolute_import\\n')
new = b'#' + b' ' * (top - 1 - len(payload)) + text[top:future] + payload + text[future:]
assert len(new) == len(text)
try:
    with open(src, 'r+b') as f:  # in place: the same inode (a hard link's other paths see it too)
        f.write(new)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    try:  # the bytecode of the old source would still be taken for it (same mtime and size)
        os.remove(importlib.util.cache_from_source(src))
    except FileNotFoundError:
        pass
    print('WRITTEN', src, os.stat(src).st_size == st.st_size, os.stat(src).st_mtime_ns == st.st_mtime_ns)
except OSError as e:
    print('REFUSED', e)
"""

VICTIM = ["import six\nprint('six', six.__version__)",
          "assert not hasattr(six, 'NBV_PAYLOAD'), 'the attacker\\'s payload ran in this kernel'"]


@pytest.fixture(scope="module")
def uv_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("uv-cache")


@pytest.fixture(autouse=True)
def own_package_cache(uv_cache, monkeypatch):
    monkeypatch.setenv("UV_CACHE_DIR", str(uv_cache))


def _projects(root: Path, attack: str) -> Path:
    marker = root / "alice" / "payload-ran"
    for who in ("alice", "bob"):
        (root / who).mkdir(parents=True, exist_ok=True)
        (root / who / "requirements.txt").write_text(REQUIREMENTS)
    write_notebook(root / "alice" / "attack.ipynb",
                   ["import six", f"PAYLOAD = {_payload(marker)!r}", attack])
    write_notebook(root / "bob" / "victim.ipynb", VICTIM)
    return marker


async def _run(local, path: str) -> tuple[dict, str]:
    """The finished job, and all its cells printed."""
    done = await local.run(notebook={"path": path})
    nb = await local.backend.executed_notebook(done) or {"cells": []}
    text = "".join(o.get("text", "") if isinstance(o.get("text"), str) else "".join(o.get("text") or [])
                   for c in nb["cells"] for o in c.get("outputs", []))
    return done, text


async def _attack_then_victim(tmp_path: Path, sandbox: str, attack: str, found: str) -> None:
    local = make_local(tmp_path, backend_kw={"sandbox": sandbox}, run_timeout=900)
    marker = _projects(local.root, attack)
    await local.engine.start()
    try:
        attacker, said = await _run(local, "alice/attack.ipynb")
        assert attacker["status"]["phase"] == Phase.SUCCEEDED, attacker["status"]
        assert "WRITTEN" in said or "REFUSED" in said, said
        victim, printed = await _run(local, "bob/victim.ipynb")
        st = victim["status"]
        # its own verdict: the one the same notebook gets in an environment nothing ran in
        assert st["phase"] == Phase.SUCCEEDED, st
        assert MARK not in printed and not marker.exists(), printed
        events = await local.events(victim)
        if "WRITTEN" in said:  # the write went through: found, retired, built again, and said so
            notes = [e for e in events if e["reason"] == "EnvironmentRetired"]
            assert len(notes) == 1 and notes[0]["type"] == "Warning", events
            assert found in notes[0]["note"] and "retired" in notes[0]["note"], notes
            assert found in st["buildStatus"]["message"] and "rebuilt" in st["buildStatus"]["message"], st
            envs = local.backend.root / "envs"
            assert len([d for d in envs.iterdir() if d.name.startswith(".retired-")]) == 1
        else:  # refused by the sandbox: nothing to find
            assert not [e for e in events if e["reason"] == "EnvironmentRetired"], events
    finally:
        await local.engine.stop()


@pytest.mark.asyncio
@pytest.mark.parametrize("sandbox", ["off", "auto"])
async def test_a_pyc_written_into_the_environment_does_not_run_in_the_next_notebook(tmp_path, sandbox):
    """(a) Bytecode for six written into the environment's __pycache__, valid for six.py's mtime
    and size: the next import of six would run it, had the environment been handed on."""
    await _attack_then_victim(tmp_path, sandbox, PYC_ATTACK, "six.cpython-")


@pytest.mark.asyncio
@pytest.mark.parametrize("sandbox", ["off", "auto"])
async def test_a_same_size_edit_of_a_module_with_its_mtime_put_back_does_not_run_in_the_next_notebook(
        tmp_path, sandbox):
    """(b) six.py edited in place keeping its size, its mtime put back, its bytecode removed."""
    await _attack_then_victim(tmp_path, sandbox, SOURCE_ATTACK, "six.py")


@pytest.mark.asyncio
@pytest.mark.parametrize("sandbox", ["off", "auto"])
async def test_an_edit_of_an_environment_never_reaches_the_package_cache_of_the_next_build(
        tmp_path, sandbox, uv_cache):
    """(c) After (b) on an environment, another server (a data dir of its own, the same package
    cache) builds the same requirements: its kernel imports the clean six. An environment's files
    share no inode with the cache, so the edit changed the environment and nothing else."""
    for server in ("server-1", "server-2"):
        (tmp_path / server).mkdir()
    first = make_local(tmp_path / "server-1", backend_kw={"sandbox": sandbox}, run_timeout=900)
    marker = _projects(first.root, SOURCE_ATTACK)
    await first.engine.start()
    try:
        attacker, said = await _run(first, "alice/attack.ipynb")
        assert attacker["status"]["phase"] == Phase.SUCCEEDED and ("WRITTEN" in said or "REFUSED" in said), said
        (env,) = [d for d in (first.backend.root / "envs").iterdir() if not d.name.startswith(".")]
        (six_py,) = env.glob("lib/python*/site-packages/six.py")
        assert (b"NBV_PAYLOAD" in six_py.read_bytes()) == ("WRITTEN" in said)
    finally:
        await first.engine.stop()

    second = make_local(tmp_path / "server-2", backend_kw={"sandbox": sandbox}, run_timeout=900)
    _projects(second.root, SOURCE_ATTACK)
    await second.engine.start()
    try:
        victim, printed = await _run(second, "bob/victim.ipynb")
        assert victim["status"]["phase"] == Phase.SUCCEEDED, victim["status"]
        assert MARK not in printed and not marker.exists(), printed
        events = await second.events(victim)
        assert not [e for e in events if e["reason"] == "EnvironmentRetired"], events  # built clean
    finally:
        await second.engine.stop()
    # the edit changed the attacker's environment and nothing else: its six.py is its own file
    assert six_py.stat().st_nlink == 1
    cached = list(uv_cache.rglob("six.py"))
    assert cached and not [p for p in cached if b"NBV_PAYLOAD" in p.read_bytes()], cached
