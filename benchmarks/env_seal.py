"""What sealing an environment costs (backends/local/seal.py). Prints figures; not a test.

    .venv/bin/python benchmarks/env_seal.py [--rounds 5] [--requirements "numpy matplotlib"]

Two figures:

(build)  `uv venv` + `uv pip install ipykernel REQUIREMENTS` from uv's cache (offline), as the
         local backend builds: its old flags (uv's default link mode: hard links from the cache;
         no bytecode) against its sealed build's (`--link-mode copy --compile-bytecode`), then the
         seal taken (every file hashed), alternating A B A B; wall seconds, and the CPU of the
         build's processes;
(verify) the check before a run (seal.load + seal.verify) of the sealed environment, nothing
         changed (every file's inode, size, ctime, mtime and mode as sealed: none hashed again),
         the manifest read once per process as the backend does; and the same with every file's
         ctime moved (a copy of the environment: every file hashed again); wall and CPU seconds.

Needs uv's cache to hold the packages (run a build of them once first).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jupyter_nbvalidation.backends.local.seal as seal  # noqa: E402
from jupyter_nbvalidation.backends.local.backend import LocalBackend  # noqa: E402


def figures(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} s, min {min(values):.3f} s, max {max(values):.3f} s (n={len(values)})"


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def build(uv: str, env: Path, requirements: list[str], sealed: bool) -> tuple[float, float]:
    shutil.rmtree(env, ignore_errors=True)
    cpu, start = children_cpu(), time.perf_counter()
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(env)], check=True)
    flags = ["--link-mode", "copy", "--compile-bytecode"] if sealed else []
    subprocess.run([uv, "pip", "install", "--quiet", "--offline", *flags, "--python", str(env / "bin" / "python"),
                    "ipykernel", *requirements], check=True)
    if sealed:
        seal.take(env)
    return time.perf_counter() - start, children_cpu() - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requirements", default="numpy matplotlib")
    args = parser.parse_args()
    uv = LocalBackend().uv_path
    requirements = args.requirements.split()
    with tempfile.TemporaryDirectory(prefix="nbv-seal-bench-") as tmp:
        env = Path(tmp) / "env"
        times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for _ in range(args.rounds):
            for sealed in (False, True):
                times[sealed].append(build(uv, env, requirements, sealed))
        for sealed in (False, True):
            wall, cpu = [t[0] for t in times[sealed]], [t[1] for t in times[sealed]]
            print(f"build ipykernel {' '.join(requirements)} {'sealed' if sealed else 'before'}: wall {figures(wall)}; "
                  f"CPU median {statistics.median(cpu):.2f} s")
        manifest = seal.take(env)
        print(f"environment: {len(manifest['files'])} entries, "
              f"{sum(v[2] for v in manifest['files'].values()) / 1e6:.0f} MB of files")
        seal.write(Path(tmp) / "envs", "k", env, manifest, None)
        path = seal.seal_path(Path(tmp) / "envs", "k", manifest["ino"])
        for label, root in (("as sealed", env), ("every file hashed (a copy)", Path(tmp) / "copy")):
            if root != env:
                shutil.copytree(env, root, symlinks=True)
            wall, cpu = [], []
            for _ in range(args.rounds):
                c, t = time.process_time(), time.perf_counter()
                assert seal.verify(root, seal.load(path) or {}) == []
                wall.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
            print(f"verify, {label}: wall {figures(wall)}; CPU median {statistics.median(cpu):.3f} s")
        os.sync()


if __name__ == "__main__":
    main()
