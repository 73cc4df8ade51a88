"""Bounded memory for big outputs (issue 41): a cell that prints or displays 200 MB runs in a kernel
under a 400 MiB memory limit and gets its verdict, the output budget applied as the output arrives;
the kernel sends a big write in parts with flow control (runner/outhook.py) and the runner merges
them back (runner/outputs.py), so the executed notebook and the verdict are those of a whole write.

Real kernels, the runner's command line as the local backend runs it, the machine's memory cgroup
(``--bounds``: podConfig.resources.limits.memory). The peak resident set of the runner and of its
kernel is the largest of the children's (``RUSAGE_CHILDREN`` of a parent that only waits: the
runner reaps its kernel), a property of the run, not a timing.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

from helpers import write_golden, write_notebook

import jupyter_nbvalidation.runner.outhook as outhook

MiB = 2**20
MARKER = re.compile(r"\[nbvalidation: ([\d.]+ [kMG]B) of output truncated; limit (.+) per (cell|notebook)\]")
MEASURED = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def _run(tmp_path: Path, notebook: Path, *args: str, memory: int | None = None) -> tuple[dict, dict, int]:
    """(the result, the executed notebook, the peak RSS in KiB of the runner and its kernel)."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "jupyter_nbvalidation.runner", str(notebook), "--result", str(out / "result.json"),
            "--executed", str(out / "executed.ipynb"), *args]
    if memory is not None:
        (out / "bounds.json").write_text(json.dumps(
            {"memory": {"bytes": memory, "text": f"{memory // MiB}Mi", "field": "podConfig.resources.limits.memory"}}))
        argv += ["--bounds", str(out / "bounds.json")]
    proc = subprocess.run([sys.executable, "-c", MEASURED, *argv], capture_output=True, text=True, timeout=240,
                          stdin=subprocess.DEVNULL)
    result = json.loads((out / "result.json").read_text())
    executed = json.loads((out / "executed.ipynb").read_text()) if (out / "executed.ipynb").exists() else {}
    return result, executed, int(proc.stdout.strip())


def _texts(executed: dict) -> list[list[str]]:
    return [["".join(o.get("text") or "") for o in c.get("outputs") or []] for c in executed["cells"]]


def test_a_cell_printing_200_mb_passes_under_a_400_mib_memory_limit(tmp_path):
    """Before: the kernel peaked at 812 MiB (the string, ipykernel's buffer, the JSON text, its
    bytes) and was OOMKilled under 400 MiB; the runner peaked at 591 MiB."""
    nb = write_notebook(tmp_path / "nb" / "big.ipynb", ['print("x" * 200_000_000)', 'print("after")'])
    result, executed, peak_kib = _run(tmp_path, nb, memory=400 * MiB)
    assert result["verdict"] == "Succeeded", result["message"]
    assert result["runner"]["bounds"]["memory"]["method"] in ("cgroup v1", "cgroup v2", "RLIMIT_AS"), result["runner"]
    assert peak_kib < 300 * 1024, f"peak RSS of the runner or its kernel: {peak_kib // 1024} MiB"
    texts = _texts(executed)
    assert texts[0][0] == "x" * (2 * MiB)  # one stream output: its first bytes, as a whole write gives
    marker = MARKER.fullmatch(texts[0][1].strip())
    assert marker and marker.groups() == ("197.9 MB", "2 MiB", "cell"), texts[0][1]
    assert texts[1] == ["after\n"]
    assert result["results"][0]["outputTruncated"] == {"bytes": 200_000_001 - 2 * MiB, "limit": "2 MiB per cell"}


def test_a_cell_displaying_200_mb_passes_under_a_400_mib_memory_limit(tmp_path):
    """Without a golden notebook a display past the per-cell budget is dropped whole by the runner:
    the kernel sends it without its data, its size counted (before: 622 MiB in the kernel)."""
    nb = write_notebook(tmp_path / "nb" / "display.ipynb", [
        'from IPython.display import display\ndisplay({"text/plain": "x" * 200_000_000}, raw=True)\nprint("ok")',
        'print("after")'])
    result, executed, peak_kib = _run(tmp_path, nb, memory=400 * MiB)
    assert result["verdict"] == "Succeeded", result["message"]
    assert peak_kib < 300 * 1024, f"peak RSS of the runner or its kernel: {peak_kib // 1024} MiB"
    texts = _texts(executed)
    # as the budget says: the display is dropped whole, and what came after it in the cell too
    assert len(texts[0]) == 1 and MARKER.fullmatch(texts[0][0].strip()).group(1) == "200.0 MB", texts[0]
    assert result["results"][0]["outputTruncated"]["bytes"] == 200_000_003  # the display, and "ok\n"
    assert texts[1] == ["after\n"]


def test_parts_are_merged_into_the_output_a_whole_write_gives(tmp_path):
    """3 MB printed (three parts and the newline) within a larger budget: one stream output, whole."""
    nb = write_notebook(tmp_path / "nb" / "nb.ipynb", [
        'import sys\nprint("a" * 3_000_000)\nsys.stderr.write("é" * 1_500_000)\nprint("b")'])
    result, executed, _ = _run(tmp_path, nb, "--max-cell-output-bytes", str(16 * MiB))
    assert result["verdict"] == "Succeeded", result["message"]
    outputs = executed["cells"][0]["outputs"]
    assert [(o["name"], "".join(o["text"])) for o in outputs] == [
        ("stdout", "a" * 3_000_000 + "\n"), ("stderr", "é" * 1_500_000), ("stdout", "b\n")]


def test_a_parted_write_goes_after_what_the_other_stream_wrote_before_it(tmp_path):
    """A small write to stdout (still in ipykernel's buffer, flushed within 0.2 s) then a big one
    to stderr (sent in parts at once): the stdout text comes first, as written (before, the parts
    went ahead of it; under load that moved print's newline after a later stderr output)."""
    nb = write_notebook(tmp_path / "nb" / "nb.ipynb", [
        'import sys\nsys.stdout.write("small")\nsys.stderr.write("é" * 1_500_000)\nprint("b")'])
    result, executed, _ = _run(tmp_path, nb, "--max-cell-output-bytes", str(16 * MiB))
    assert result["verdict"] == "Succeeded", result["message"]
    outputs = executed["cells"][0]["outputs"]
    assert [(o["name"], "".join(o["text"])[:5]) for o in outputs] == [
        ("stdout", "small"), ("stderr", "é" * 5), ("stdout", "b\n")], [(o["name"], len(o["text"])) for o in outputs]


def test_an_output_that_was_cleared_no_longer_counts_against_the_budget(tmp_path):
    """The budget as outputs arrive counts what the cell shows at its end: 3 MB printed, then
    cleared (``wait=True``: at the next output) leaves the cell's budget whole (before, the cleared
    output still counted and the next one was cut)."""
    nb = write_notebook(tmp_path / "nb" / "nb.ipynb", [
        'from IPython.display import clear_output\nprint("a" * 3_000_000)\nclear_output(wait=True)\nprint("short")',
        'from IPython.display import clear_output\nprint("b" * 3_000_000)\nclear_output()\nprint("c" * 5)'])
    result, executed, _ = _run(tmp_path, nb)
    assert result["verdict"] == "Succeeded", result["message"]
    assert _texts(executed) == [["short\n"], ["ccccc\n"]]
    assert "outputTruncated" not in result["results"][0] and "outputTruncated" not in result["results"][1], result


def test_with_a_golden_notebook_parts_are_compared_in_full(tmp_path):
    """The cut is made after the comparison: a difference past the budget in a parted write
    still fails, the same output passes."""
    big = "y" * 3_000_000
    nb = write_notebook(tmp_path / "nb" / "nb.ipynb", [f'print("{"y" * 10}" * 300_000 + "tail")'])
    same = write_golden(write_notebook(tmp_path / "g1" / "g.ipynb", ["# same"]), [big + "tail\n"],
                        tmp_path / "g1" / "g.ipynb")
    result, executed, _ = _run(tmp_path, nb, "--golden", str(same))
    assert result["verdict"] == "Succeeded" and "compared with the golden notebook in full" in result["message"], \
        result["message"]
    assert MARKER.fullmatch(_texts(executed)[0][1].strip())
    other = write_golden(write_notebook(tmp_path / "g2" / "g.ipynb", ["# other"]), [big + "tall\n"],
                         tmp_path / "g2" / "g.ipynb")
    result, executed, _ = _run(tmp_path, nb, "--golden", str(other))
    assert result["verdict"] == "Failed" and result["reason"] == "GoldenMismatch", result["message"]


def _with_kernel(scenario) -> None:
    from jupyter_client.manager import start_new_async_kernel  # deferred: the kernel's client, only here

    async def run() -> None:
        km, kc = await start_new_async_kernel(kernel_name="python3",
                                              extra_arguments=["--HistoryManager.hist_file=:memory:"])
        try:
            assert await outhook.install(kc)
            await scenario(kc)
        finally:
            kc.stop_channels()
            await km.shutdown_kernel(now=True)

    asyncio.run(run())


async def _next_part(kc, msg_id: str, timeout: float = 30) -> dict:
    while True:
        msg = await kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
            return msg


def test_a_write_nobody_acknowledges_still_arrives_whole():
    """Never a hang: without acknowledgements (nobody reads the parts) the kernel waits WAIT
    seconds once, then sends the rest of the write as before."""
    parts = outhook.WINDOW + 4

    async def scenario(kc) -> None:
        msg_id = kc.execute(f'print("w" * {parts * outhook.PART})')
        got = [await _next_part(kc, msg_id, timeout=outhook.WAIT * 4) for _ in range(parts + 1)]
        assert [outhook.part_of(m) for m in got] == [*range(1, parts + 1), None]  # the parts, then print's newline
        assert "".join(m["content"]["text"] for m in got) == "w" * (parts * outhook.PART) + "\n"

    _with_kernel(scenario)


def test_the_kernel_sends_at_most_a_window_of_parts_ahead_of_the_runner():
    """The flow control itself, against a real kernel: unacknowledged, the kernel stops after
    WINDOW parts; each acknowledgement lets the next ones go; all arrive, in order."""
    parts = outhook.WINDOW * 3

    async def scenario(kc) -> None:
        msg_id = kc.execute(f'print("z" * {parts * outhook.PART})')
        got = [await _next_part(kc, msg_id) for _ in range(outhook.WINDOW)]
        try:  # the kernel waits for the runner: no part beyond the window (it waits WAIT s)
            extra = await asyncio.wait_for(_next_part(kc, msg_id), outhook.WAIT / 5)
        except asyncio.TimeoutError:
            extra = None
        assert extra is None, "a part was sent beyond the window without an acknowledgement"
        while len(got) < parts:
            outhook.acknowledge(kc, outhook.part_of(got[-1]) or 0)
            got += [await _next_part(kc, msg_id) for _ in range(min(outhook.WINDOW, parts - len(got)))]
        assert [outhook.part_of(m) for m in got] == list(range(1, parts + 1))
        assert "".join(m["content"]["text"] for m in got) == "z" * (parts * outhook.PART)

    _with_kernel(scenario)
