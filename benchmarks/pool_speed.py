"""Issue 43: pre-started kernels (LocalBackend.kernel_pool_size) against nbmake, and the
corpus with the pool on and off. Prints figures; not a test.

    .venv/bin/python benchmarks/pool_speed.py [--rounds 5] [--only one,folder,server,corpus]

(one)     one notebook through a running `jupyter server` whose pool is warm (a ready slot is
          waited for before each timed run, not timed): `jupyter nbvalidation submit NB --wait
          --no-build` against `pytest --nbmake NB`; and the same submit with the pool off
          (a server started with kernel_pool_size 0), so the pool's own share shows.
(folder)  12 notebooks: `jupyter nbvalidation run DIR -j 2 --no-build --no-cache --local` (its
          own process: the pool warms the folder's key at start from recent.json) against
          `pytest --nbmake -n 2 DIR`.
(server)  the same 12 through the warm server (`run -j 2 --no-build --no-cache`).
(corpus)  the whole corpus (shared/corpus, tests/peers/test_corpus.py's manifest), each group of
          options one `run -j 2 --local --no-cache`, with the pool on and off: the verdicts per
          case (they must agree) and the wall time of both.

Every figure is a whole process timed from outside, the tools alternating A B A B, medians of the
rounds and their ratio (benchmarks/ci_speed.py's helpers). Needs nbmake, pytest-xdist and ipykernel
in this interpreter or in the one --nbmake-python names.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ci_speed  # noqa: E402

HERE = Path(__file__).resolve().parent
CORPUS_TEST = HERE.parent / "tests" / "peers" / "test_corpus.py"
NBMAKE_PYTHON = sys.executable  # --nbmake-python: an interpreter with nbmake, pytest-xdist and ipykernel
NICENESS: int | None = None  # --niceness: LocalBackend.niceness (default 10: ours niced, nbmake not)


def config_dir(base: Path, pool: bool) -> Path:
    """A Jupyter config dir setting the pool (for a server, and for the CLI's own engine)."""
    path = base / ("config-pool" if pool else "config-nopool")
    path.mkdir(parents=True, exist_ok=True)
    (path / "jupyter_server_config.json").write_text(json.dumps(
        {"LocalBackend": {"kernel_pool_size": 1 if pool else 0, **({} if NICENESS is None else {"niceness": NICENESS})}}))
    return path


class Server:
    """A `jupyter server` with the extension on loopback, its own runtime and data dirs."""

    def __init__(self, base: Path, root: Path, pool: bool) -> None:
        self.root, self.token = root, secrets.token_hex(8)
        self.runtime = base / ("runtime-pool" if pool else "runtime-nopool")
        self.runtime.mkdir(parents=True, exist_ok=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(self.runtime),
                    "JUPYTER_CONFIG_DIR": str(config_dir(base, pool))}
        self.log = open(base / f"server-{'pool' if pool else 'nopool'}.log", "w")
        self.proc = subprocess.Popen(
            [ci_speed.JUPYTER, "server", "--no-browser", "--allow-root", f"--port={self.port}", "--ip=127.0.0.1",
             f"--ServerApp.token={self.token}", f"--ServerApp.root_dir={root}",
             f"--LocalBackend.data_dir={base / ('data-pool' if pool else 'data-nopool')}"],
            stdout=self.log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        deadline = time.monotonic() + 120
        while self.health() is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start: {(base / 'server.log')}")
            time.sleep(0.2)

    def health(self) -> dict | None:
        try:
            req = urllib.request.Request(f"http://127.0.0.1:{self.port}/nbvalidation/api/v1/health",
                                         headers={"Authorization": f"token {self.token}"})
            with urllib.request.urlopen(req, timeout=5) as r:
                return json.loads(r.read())
        except Exception:
            return None

    def pool(self) -> dict:
        return (self.health() or {}).get("kernelPool") or {}

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.pool().get("ready", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)


def bench_one(base: Path, rounds: int) -> None:
    folder = ci_speed.make_folder(base / "one", 1)
    nb = "nb00.ipynb"
    servers = {pool: Server(base, folder, pool) for pool in (True, False)}
    try:
        argv = [ci_speed.JUPYTER, "nbvalidation", "submit", nb, "--wait", "--no-build"]
        for s in servers.values():  # warm-up: the server's first job (the pool learns the key)
            ci_speed.timed(argv, cwd=folder, env={"JUPYTER_RUNTIME_DIR": str(s.runtime)})
        ci_speed.timed(ci_speed.nbmake_argv(nb, workers=None, python=NBMAKE_PYTHON), cwd=folder)
        warm, cold, theirs = [], [], []
        for _ in range(rounds):
            servers[True].wait_ready()
            warm.append(ci_speed.timed_cpu(argv, cwd=folder, env={"JUPYTER_RUNTIME_DIR": str(servers[True].runtime)}))
            theirs.append(ci_speed.timed_cpu(ci_speed.nbmake_argv(nb, workers=None, python=NBMAKE_PYTHON), cwd=folder))
            cold.append(ci_speed.timed_cpu(argv, cwd=folder,
                                           env={"JUPYTER_RUNTIME_DIR": str(servers[False].runtime)}))
        ci_speed.report("(one) one notebook through a server, pool warm", warm, theirs, "submit --wait",
                        "pytest --nbmake NB")
        ci_speed.report("(one) the same, pool off", cold, theirs, "submit --wait (pool off)", "pytest --nbmake NB")
        print(f"# pool of the pool-on server: {servers[True].pool()}", flush=True)
    finally:
        for s in servers.values():
            s.stop()


def bench_folder(base: Path, n: int, rounds: int, through_server: bool) -> None:
    folder = ci_speed.make_folder(base / ("folder-server" if through_server else "folder"), n)
    server = Server(base, folder, True) if through_server else None
    try:
        if server is not None:
            argv = [ci_speed.JUPYTER, "nbvalidation", "run", str(folder), "-j", "2", "--no-build", "--no-cache"]
            env = {"JUPYTER_RUNTIME_DIR": str(server.runtime)}
        else:
            argv = [ci_speed.JUPYTER, "nbvalidation", "run", str(folder), "-j", "2", "--no-build", "--no-cache",
                    "--local", "--data-dir", str(base / "folder-data")]
            env = {"JUPYTER_RUNTIME_DIR": str(base / "no-servers"), "JUPYTER_CONFIG_DIR": str(config_dir(base, True))}
        ci_speed.timed(argv, cwd=folder, env=env)  # warm-up (and the key learnt)
        ci_speed.timed(ci_speed.nbmake_argv(str(folder), workers=2, python=NBMAKE_PYTHON), cwd=folder)
        ours, theirs = [], []
        for _ in range(rounds):
            if server is not None:
                server.wait_ready()
            ours.append(ci_speed.timed_cpu(argv, cwd=folder, env=env))
            theirs.append(ci_speed.timed_cpu(ci_speed.nbmake_argv(str(folder), workers=2, python=NBMAKE_PYTHON), cwd=folder))
        label = "through a server, pool warm" if server else "run --local (pool warmed at start)"
        ci_speed.report(f"(folder) {n} notebooks, 2 at a time, no build, {label}", ours, theirs,
                        "nbvalidation run -j 2", "pytest --nbmake -n 2")
        if server is not None:
            print(f"# pool of the server: {server.pool()}", flush=True)
    finally:
        if server is not None:
            server.stop()


def _corpus_module():
    import importlib.util  # deferred: only the corpus figure reads the manifest

    spec = importlib.util.spec_from_file_location("nbv_corpus_manifest", CORPUS_TEST)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def corpus_verdicts(base: Path, rows: list[dict], pool: bool, tag: str) -> tuple[dict, float, int]:
    """The rows run by `run -j 2 --local --no-cache`, one run per group of options:
    ({(path, options): (verdict, first failure)}, wall seconds, runs that used a pre-started kernel)."""
    corpus = _corpus_module()
    groups: dict[tuple[str, ...], list[dict]] = {}
    for row in rows:
        groups.setdefault(corpus.options_of(row)[0], []).append(row)
    data = base / f"corpus-data-{tag}"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(base / "no-servers"),
           "JUPYTER_CONFIG_DIR": str(config_dir(base, pool))}
    out: dict[tuple[str, tuple[str, ...]], tuple[str, str | None]] = {}
    started = time.perf_counter()
    for args, group in groups.items():
        paths = list(dict.fromkeys(row["path"] for row in group))
        proc = subprocess.run([ci_speed.JUPYTER, "nbvalidation", "run", *paths, *args, "-j", "2", "--local",
                               "--data-dir", str(data), "--no-cache", "-o", "json"], cwd=corpus.NOTEBOOKS,
                              capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL, env=env)
        assert proc.returncode in (0, 1, 2), proc.stdout[-2000:] + proc.stderr[-2000:]
        for o in json.loads(proc.stdout):  # (the data dir, which differs between the two, masked)
            out[(o["notebook"], args)] = (o["verdict"], (o.get("firstFailure") or "").replace(str(data), "<DATA>"))
    wall = time.perf_counter() - started
    pooled = sum(".pool/slot-" in " ".join(json.loads(p.read_text()).get("argv", []))
                 for p in data.glob("jobs/*/run-*/run.json"))
    return out, wall, pooled


def bench_corpus(base: Path) -> None:
    corpus = _corpus_module()
    rows = corpus.manifest()
    on, wall_on, pooled = corpus_verdicts(base, rows, True, "on")
    off, wall_off, pooled_off = corpus_verdicts(base, rows, False, "off")
    differ = {k: (on.get(k), off.get(k)) for k in set(on) | set(off) if on.get(k) != off.get(k)}
    print(f"(corpus) {len(on)} cases: pool on {wall_on:.1f} s ({pooled} runs on a pre-started kernel), "
          f"pool off {wall_off:.1f} s ({pooled_off}); verdicts that differ: {len(differ)}", flush=True)
    for (path, args), (a, b) in sorted(differ.items()):
        print(f"  DIFFERS {path} {' '.join(args)}: pool on {a}, pool off {b}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--notebooks", type=int, default=12)
    ap.add_argument("--only", default="one,folder,server,corpus")
    ap.add_argument("--nbmake-python", default=sys.executable,
                    help="the interpreter pytest --nbmake runs with (default: this one)")
    ap.add_argument("--niceness", type=int, default=None,
                    help="LocalBackend.niceness of ours (default 10): 0 runs ours at nbmake's priority, which a "
                         "machine loaded by others needs for a fair figure")
    args = ap.parse_args()
    global NBMAKE_PYTHON, NICENESS
    NBMAKE_PYTHON, NICENESS = args.nbmake_python, args.niceness
    only = set(args.only.split(","))
    print(f"# machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    with tempfile.TemporaryDirectory(prefix="nbv-pool-speed-") as tmp:
        base = Path(tmp)
        if "one" in only:
            bench_one(base, args.rounds)
        if "folder" in only:
            bench_folder(base, args.notebooks, args.rounds, through_server=False)
        if "server" in only:
            bench_folder(base, args.notebooks, args.rounds, through_server=True)
        if "corpus" in only:
            bench_corpus(base)
    print(f"# load average at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()
