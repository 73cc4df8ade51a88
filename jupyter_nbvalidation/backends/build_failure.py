"""A failed build step's message, cause first (issue 21, "Build failures lead with
the cause"): the installer's own error lines (uv's ``error: No solution found …`` /
``× No solution found …`` block with its ``cause:`` / ``╰─▶ Because …`` lines, pip's
``ERROR: …`` lines), in whole words, then the step and a short tail of its output cut
at a line boundary. The whole log stays where the build wrote it (``/buildlog``).
Nothing here reads more than the log the build wrote, already redacted
(``LocalBackend._run_step``); it is scrubbed again all the same (``secrets`` and
any URL user-info or ``key=value`` credential, :func:`redaction.scrub`)."""

from __future__ import annotations

import re

from jupyter_nbvalidation.core.redaction import scrub

CAUSE_LIMIT = 600  # characters of the installer's own error lines
TAIL_LIMIT = 240  # characters of the step's last lines that are not the cause
TAIL_LINES = 3

# the first line of an installer's error: uv's "error:" (plain) or "×" (fancy), pip's "ERROR:", apt's
# "E:", and this tool's own checks in an image build ("nbvalidation: ...", k8s/objects.py)
_ERROR_START = re.compile(r"^\s*(error:|ERROR:|×|fatal:|Error:|E:|nbvalidation:)")
# what continues it: uv's "cause:", "hint:", "help:", its tree drawing, or an indented line
_CONTINUES = re.compile(r"^(\s+\S|\s*(cause:|caused by:|hint:|help:|╰─▶|├─▶|│))")


def cut_words(text: str, limit: int) -> str:
    """``text`` at most ``limit`` characters, cut before a word (never inside one), "…" when cut."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    head = text[:limit]
    if " " in head:
        head = head.rsplit(" ", 1)[0]
    return head.rstrip(" ,;:|") + " …"


def _step_output(log: str) -> list[str]:
    """The lines the last step (``$ command``) printed, without blank ones."""
    lines = log.splitlines()
    start = 0
    for i, line in enumerate(lines):
        if line.startswith("$ "):
            start = i + 1
    return [ln.rstrip() for ln in lines[start:] if ln.strip()]


def cause_lines(output: list[str]) -> list[str]:
    """The installer's error lines: each line that starts an error, with the lines that continue it."""
    found: list[str] = []
    inside = False
    for line in output:
        if _ERROR_START.match(line):
            found.append(line.strip())
            inside = True
        elif inside and _CONTINUES.match(line):
            found.append(line.strip())
        else:
            inside = False
    return found


def summary(log: str, command: str, code: int, secrets: list[str] | tuple[str, ...] = ()) -> str:
    """The message of a build step that exited with ``code``: the cause, then
    "(`command` exited with code; last lines: …)". Without error lines, the tail
    alone follows the command, as before."""
    output = _step_output(log)
    cause = cause_lines(output)
    rest = [ln.strip() for ln in output if ln.strip() not in cause]
    tail: list[str] = []
    size = 0
    for line in reversed(rest[-TAIL_LINES:]):  # whole lines, newest kept, within the limit
        if tail and size + len(line) + 3 > TAIL_LIMIT:
            break
        tail.insert(0, cut_words(line, TAIL_LIMIT))
        size += len(tail[0]) + 3
    said = f"`{command}` exited with {code}"
    if cause:
        text = cut_words(" ".join(cause), CAUSE_LIMIT)
        message = f"{text} ({said}" + (f"; last lines: {' | '.join(tail)})" if tail else ")")
    else:
        message = f"{said}: {' | '.join(tail)}" if tail else said
    return scrub(message, secrets)
