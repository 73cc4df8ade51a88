"""Small helpers for tests (no fixtures here)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import inspect
import io
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any, Callable

import nbformat


def write_notebook(path: Path, sources: list[str], *, tags: dict[int, list[str]] | None = None,
                   metadata: dict | None = None) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata.update({"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nb.metadata.update(metadata or {})
    for i, src in enumerate(sources):
        if src.startswith("# md\n"):
            nb.cells.append(nbformat.v4.new_markdown_cell(src[5:]))
            continue
        cell = nbformat.v4.new_code_cell(src)
        if tags and i in tags:
            cell.metadata["tags"] = tags[i]
        nb.cells.append(cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def stdout(text: str) -> list[dict]:
    """One cell's stored outputs: ``text`` printed to stdout."""
    return [{"output_type": "stream", "name": "stdout", "text": text}]


def write_golden(notebook: Path, stored: str | list[str] | dict[int, list[dict]], golden: Path | None = None, *,
                 counts: bool = False) -> Path:
    """The golden copy of ``notebook`` (the one writer of golden copies): its cells, cell i's stored
    outputs ``stored[i]`` (a list of texts: what each cell printed, from the first; a text: what the
    first cell printed; a dict: cell index -> outputs), the other cells' outputs as they are. With
    ``counts``, every code cell gets its execution count (i + 1) and, unless given, no outputs.
    Written to ``golden``, by default stem.golden.ipynb beside the notebook."""
    if isinstance(stored, str):
        stored = [stored]
    outputs = dict(enumerate(map(stdout, stored))) if isinstance(stored, list) else stored
    nb = nbformat.read(str(notebook), as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if counts:
            cell.execution_count = i + 1
            cell.outputs = []
        if i in outputs:
            cell.outputs = [nbformat.from_dict(o) for o in outputs[i]]
    golden = golden or notebook.with_name(f"{notebook.stem}.golden.ipynb")
    nbformat.write(nb, str(golden))
    return golden


def leftover_processes(basetemp: Path, marker: str) -> list[str]:
    """The command lines of running processes that hold ``marker`` and belong to
    this pytest process's tests: their working directory or their arguments lie
    under its ``basetemp``. What other pytest processes (an xdist worker beside
    this one, another checkout's run) start elsewhere is not looked at."""
    base = str(Path(basetemp).resolve())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            cwd = os.readlink(entry / "cwd")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if marker in cmdline and (cwd == base or cwd.startswith(base + os.sep) or base in cmdline):
            found.append(f"{entry.name} (cwd {cwd}): {cmdline}")
    return found


def phases(job: dict) -> list[str]:
    return [t["phase"] for t in job["status"].get("transitions", [])]


def reasons(events: list[dict]) -> list[str]:
    return [e["reason"] for e in events]


def pids_alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            alive.append(pid)
        except ProcessLookupError:
            pass
    return alive


async def slow_to_stop(stopping: asyncio.Event, ended: asyncio.Event | None = None, cleanup: float = 0.3) -> None:
    """A task that needs ``cleanup`` seconds to end once cancelled (as a run
    does while its runner shuts a kernel down): ``stopping`` is set when the
    cancellation arrives, ``ended`` when the cleanup is over."""
    try:
        await asyncio.sleep(3600)
    finally:
        stopping.set()
        await asyncio.sleep(cleanup)
        if ended is not None:
            ended.set()


async def started_run(backend: Any, job: dict, timeout: float = 120) -> Path:
    """The pid file of ``job``'s run (the local backend) once its runner started."""
    return await wait_async(lambda: next(iter(backend.job_dir(job).glob("run-*/pid")), None), timeout,
                            f"the runner of {job['metadata']['name']} to start", interval=0.05)


REST_API = ("nbvalidation", "api", "v1")


async def rest_call(jp_fetch, *parts, method="GET", body=None, params=None, raw=False):
    """One call of the extension's REST API through pytest-jupyter's ``jp_fetch``: the parsed JSON
    (or the raw response)."""
    kw = {"method": method, "params": params or {}}
    if body is not None:
        kw["body"] = body if isinstance(body, str) else json.dumps(body)
        kw["headers"] = {"Content-Type": "application/json"}
    elif method == "POST":
        kw["body"] = ""
    r = await jp_fetch(*REST_API, *parts, **kw)
    return r if raw else json.loads(r.body)


async def rest_wait_terminal(jp_fetch, name, timeout):
    """Poll ``GET /jobs/{name}`` until the job is terminal."""
    from jupyter_nbvalidation.core.model import Phase

    seen: dict = {}

    async def terminal() -> dict | None:
        seen["job"] = job = await rest_call(jp_fetch, "jobs", name)
        return job if job["status"].get("phase") in Phase.TERMINAL else None

    return await wait_async(terminal, timeout, lambda: f"{name} to finish: {seen['job']['status']}", interval=0.25)


async def plan_for(backend, job: dict, *, build_timeout: float = 15 * 60, validation_timeout: float = 30 * 60):
    """The validation plan an engine would hand ``backend`` for ``job`` (plan.make_plan over the
    backend's stored snapshot), for tests that drive a backend without an engine."""
    from jupyter_nbvalidation.spec.plan import make_plan

    snapshot = await backend.read_snapshot(job)
    return await asyncio.to_thread(make_plan, job, snapshot, build_timeout=build_timeout,
                                   validation_timeout=validation_timeout, cell_timeout=backend.default_cell_timeout)


def _what(what: str | Callable[[], Any]) -> str:
    return what() if callable(what) else what


def wait(predicate: Callable[[], Any], timeout: float, what: str | Callable[[], Any], interval: float = 0.25) -> Any:
    """The one wait for a state: the first truthy value of ``predicate()``, polled every ``interval`` s;
    AssertionError naming ``what`` (a text, or a callable giving one: the last state seen) after
    ``timeout`` s. A sleep that is no wait for a state (a pause that is the scenario) stays a sleep."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {_what(what)}")
        time.sleep(interval)


async def wait_async(predicate: Callable[[], Any], timeout: float, what: str | Callable[[], Any],
                     interval: float = 0.05) -> Any:
    """``wait`` on an event loop: ``predicate()`` may return an awaitable (an ``async def`` or a
    coroutine-returning lambda); the loop runs between polls."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {_what(what)}")
        await asyncio.sleep(interval)


def job_of(api: Any, name: str) -> dict:
    """``GET /jobs/{name}`` through a REST client, or {} while a server that just started
    answers 503 (its store is not synced yet: Retry-After)."""
    from jupyter_nbvalidation.clients.http import ClientError

    try:
        return api.request("GET", f"jobs/{name}")
    except ClientError as e:
        if e.status == 503:
            return {}
        raise


# --- jobs through a server's REST client (tests/test_sandbox.py, tests/test_scratch.py) ---

NOBUILD = {"buildConfig": {"enabled": False}}


def submit(client, path: str, **spec) -> str:
    job = client.request("POST", "jobs", {"notebook": {"path": path}, **spec})
    return job["metadata"]["name"]


def wait_all(client, names: list[str], timeout: float = 600) -> dict[str, dict]:
    done: dict[str, dict] = {}

    def all_done() -> bool:
        for name in names:
            if name not in done:
                job = client.request("GET", f"jobs/{name}")
                if (job.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    done[name] = job
        return len(done) == len(names)

    wait(all_done, timeout, lambda: f"jobs to finish; not finished: {sorted(set(names) - set(done))}", interval=0.5)
    return done


def explain(job: dict) -> str:
    st = job.get("status") or {}
    return f"{st.get('phase')} {st.get('reason')}: {st.get('message')} {json.dumps(st.get('results'))[-1500:]}"


def detected_health(client, timeout: float = 120) -> dict:
    """The server's /health once it has detected the sandbox (its field is null until then)."""
    seen: dict = {}

    def detected() -> dict | None:
        seen["health"] = health = client.request("GET", "health")
        return health if health.get("sandbox") else None

    return wait(detected, timeout, lambda: f"the sandbox's detection: {seen['health']}", interval=0.3)


def make_wheel(name: str, version: str, source: str) -> bytes:
    """A minimal pure-Python wheel of ``name`` whose ``__init__.py`` is ``source``."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": source,
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(
        f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(c.encode()).digest()).rstrip(b'=').decode()},"
        f"{len(c.encode())}\n" for p, c in files.items()) + f"{dist}/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for p, c in {**files, f"{dist}/RECORD": record}.items():
            z.writestr(p, c)
    return buf.getvalue()


def make_local_package(folder: Path, value: int) -> None:
    """A setuptools project ``mylocalpkg`` 1.0 in ``folder`` whose ``VALUE`` is ``value``."""
    (folder / "mylocalpkg").mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools>=61"]\n'
                                           'build-backend = "setuptools.build_meta"\n'
                                           '[project]\nname = "mylocalpkg"\nversion = "1.0"\n')
    (folder / "mylocalpkg" / "__init__.py").write_text(f"VALUE = {value}\n")


def held_setup_py(release: Path, name: str, module: str, limit: float = 600) -> str:
    """A setup.py that builds ``name`` (one module, ``module``) once ``release`` exists (at most
    ``limit`` s later): a build that lasts exactly until the test has seen what it looks for."""
    return (f"import os, time\nfrom setuptools import setup\n"
            f"deadline = time.monotonic() + {limit!r}\n"
            f"while not os.path.exists({str(release)!r}) and time.monotonic() < deadline:\n"
            f"    time.sleep(0.05)\n"
            f"setup(name={name!r}, version='0.1', py_modules=[{module!r}])\n")


def cell_outputs(nb: dict) -> list[str]:
    """Each cell's outputs; consecutive stream outputs of one stream joined (the kernel may send one
    print as two messages, "more v1" then "\n", as it did once in CI; JupyterLab shows them joined)."""
    out: list[str] = []
    for c in nb["cells"]:
        last = None
        for o in c.get("outputs", []):
            if o.get("output_type") == "stream":
                text = "".join(o.get("text", ""))
                if last == o.get("name"):
                    out[-1] += text
                    continue
                last = o.get("name")
                out.append(text)
            else:
                last = None
                out.append(o.get("ename", ""))
    return out


# --- `run` of a repository (the environment discovery tests) ------------------------------------

JUPYTER = shutil.which("jupyter", path=os.path.dirname(sys.executable)) or "jupyter"


def cli(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300,
        no_servers: bool = False) -> subprocess.CompletedProcess:
    """`jupyter nbvalidation ARGS` in ``cwd``, as a user runs it (stdin closed; ``env`` over this
    process's environment). ``no_servers``: with an empty JUPYTER_RUNTIME_DIR (``cwd``/no-servers),
    so that the CLI finds no Jupyter server running on this machine and works without one."""
    env = {**os.environ, **(env or {})}
    if no_servers:
        env["JUPYTER_RUNTIME_DIR"] = str(cwd / "no-servers")
    return subprocess.run([JUPYTER, "nbvalidation", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL)


def run_repo(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """`run repo --local` from tmp_path (the run root), its one JSON row."""
    proc = cli("run", "repo", "--local", "--data-dir", str(tmp_path / "data"), "-j", "1", "-o", "json", *args,
               cwd=tmp_path, timeout=900, no_servers=True)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    [row] = json.loads(proc.stdout)
    return proc, row


def building(tmp_path: Path, job: str) -> str:
    """The job's "Building the environment: …" event message; the origin in it is the one stored
    with the job (what a restarted server, or another one, shows)."""
    proc = cli("describe", job, "--local", "--data-dir", str(tmp_path / "data"), "-o", "json", cwd=tmp_path,
               timeout=120, no_servers=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    [message] = [e["note"] for e in doc["events"] if e.get("note", "").startswith("Building the environment:")]
    from jupyter_nbvalidation.environment.requirements import ORIGIN_ANNOTATION

    assert doc["job"]["metadata"]["annotations"][ORIGIN_ANNOTATION] in message
    return message


def report_of(client, name: str) -> dict:
    """The JSON an attacker's notebook printed as its first cell's "REPORT ..." line (its executed
    notebook, read through ``client``)."""
    executed = client.request("GET", f"jobs/{name}/notebook")
    text = "".join(o.get("text", "") for o in executed["cells"][0].get("outputs", []) if o.get("name") == "stdout")
    line = next((ln for ln in text.splitlines() if ln.startswith("REPORT ")), None)
    assert line, f"the attack printed no report: {text[-2000:]}"
    return json.loads(line[len("REPORT "):])
