"""What all of issue 40's protections cost on one trivial notebook, against the sandbox off.
Prints figures; not a test.

    .venv/bin/python benchmarks/protections_cost.py [--rounds 7]

Paired runs, alternating off / on in one process on the same interpreter, of a one-cell notebook
(`print(1)`) by the runner's own function (runner/verdict.run_notebook: a kernel started, the cell
run, the kernel shut down), wall seconds, after one warm-up run of each:

(off) no sandbox, no bounds: the kernel as the runner's user, on the host's network;
(on)  what the local backend gives a run with its defaults and a memory limit: the sandbox
      (namespaces, the data dir and HOME hidden, /tmp and /var/tmp scratch folders on disk,
      every mount read-only but the run's own, Landlock on writes and, run as root, idmapped
      mounts and the kernel as nobody), one network per run (slirp4netns or pasta where
      installed, else the loopback only), the memory limit (a cgroup where one can be made, else
      RLIMIT_AS) and the disk budget (its watcher, /dev/shm of the budget).

Prints each side's figures, wall and CPU (user+sys of the kernel's processes: the launcher, the
namespace's processes, the kernel, slirp4netns; less sensitive to a busy machine than the wall
time), and the difference of the medians and the median of the paired differences, in ms (target:
under 150 ms).
"""

from __future__ import annotations

import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _sandbox_bench import arguments, figures, load, project

import jupyter_nbvalidation.runner.netns as netns
import jupyter_nbvalidation.runner.sandbox_probe as sandbox_probe
from jupyter_nbvalidation.runner.verdict import run_notebook

MEMORY = 1 << 30  # a job's podConfig.resources.limits.memory of 1 GiB
DISK = 4 << 30  # LocalBackend.run_disk_limit's default


def main() -> None:
    args = arguments(__doc__, rounds=7)
    found = sandbox_probe.detect(sys.executable)
    if not found["available"]:
        raise SystemExit(f"the sandbox is not available here: nothing to compare ({found['reason']})")
    tool = netns.find_tool()
    network = {"mode": "user", **tool} if tool else {"mode": "none"}
    print(f"sandbox uses: {', '.join(found['uses'])}; network: {network.get('tool', 'none')}")
    print(f"missing: {'; '.join(found['missing']) or 'nothing'}")
    with tempfile.TemporaryDirectory(prefix="nbv-protections-bench-") as tmp:
        p = project(Path(tmp))
        scratch = {}
        for name in ("tmp", "var-tmp"):
            folder = p.base / "scratch" / name
            folder.mkdir(parents=True)
            folder.chmod(0o1777)
            scratch["/tmp" if name == "tmp" else "/var/tmp"] = str(folder)
        on = {"sandbox": p.sandbox(network=network, scratch=scratch),
              "bounds": {"memory": {"bytes": MEMORY, "text": "1Gi", "field": "podConfig.resources.limits.memory"},
                         "disk": {"bytes": DISK, "text": "4 GiB", "field": "LocalBackend.run_disk_limit",
                                  "paths": [str(p.proj), *scratch.values()]}}}
        sides = {"off": {}, "on": on}

        def run(side: str) -> tuple[float, float]:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.monotonic()
            result = run_notebook(p.notebook, cwd=str(p.proj), python=sys.executable, **sides[side])
            took = time.monotonic() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            assert result["verdict"] == "Succeeded", result
            return took, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)

        for side in sides:  # warm-up, not counted
            run(side)
        print(f"before: {load()}")
        times: dict[str, list[float]] = {"off": [], "on": []}
        cpu: dict[str, list[float]] = {"off": [], "on": []}
        for i in range(args.rounds):
            for side in (("off", "on") if i % 2 == 0 else ("on", "off")):  # each first in half the pairs
                took, used = run(side)
                times[side].append(took)
                cpu[side].append(used)
        print(f"after: {load()}")
    for what, table in (("wall", times), ("CPU of the kernel's processes (user+sys)", cpu)):
        print(what)
        for side in ("off", "on"):
            print(f"  protections {side:3}: {figures(table[side])}")
        medians = (statistics.median(table["on"]) - statistics.median(table["off"])) * 1000
        paired = statistics.median(b - a for a, b in zip(table["off"], table["on"], strict=True)) * 1000
        print(f"  the protections add {medians:+.0f} ms (difference of the medians), "
              f"{paired:+.0f} ms (median of the {args.rounds} paired differences); target under 150 ms")


if __name__ == "__main__":
    main()
