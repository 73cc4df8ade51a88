"""JUnit XML of a batch, shaped as pytest writes it (``<testsuites><testsuite>`` with
``<testcase classname name time>``, ``<failure message>`` / ``<error message>``,
``<system-out>``), which GitLab, Jenkins and the GitHub test reporters read."""

from __future__ import annotations

import re
import socket
import xml.etree.ElementTree as ET
from datetime import datetime, timezone

from jupyter_nbvalidation.cli.batch import ERROR, Outcome
from jupyter_nbvalidation.cli.reports import failure_of
from jupyter_nbvalidation.runner.text import strip_ansi

# characters XML 1.0 does not allow (pytest writes them as #x.. too)
_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _clean(text: str) -> str:
    return _ILLEGAL.sub(lambda m: f"#x{ord(m.group(0)):02X}", strip_ansi(text))


def classname(outcome: Outcome) -> str:
    """The notebook's folder, dotted (``docs/guides`` -> ``docs.guides``); at the top, its stem."""
    folder = outcome.item.folder.strip("/")
    if folder:
        return folder.replace("/", ".")
    return outcome.item.shown.rsplit("/", 1)[-1].removesuffix(".ipynb")


def system_out(outcome: Outcome) -> str:
    lines = [f"notebook: {outcome.item.shown}", f"verdict: {outcome.verdict}"]
    if outcome.name:
        lines.append(f"job: {outcome.name}")
    if outcome.environment:
        lines.append(f"environment: {outcome.environment}")
    if outcome.verdict == "Unchanged":
        lines.append(f"unchanged: the verdict of {outcome.name} (Succeeded) stands; nothing ran")
    elif outcome.message:
        lines.append(f"message: {outcome.message}")
    if outcome.build_log:
        lines += ["", "build log (tail):", outcome.build_log]
    return "\n".join(lines)


def document(outcomes: list[Outcome], suite: str = "nbvalidation", wall: float | None = None) -> ET.Element:
    """``wall``: the run's wall time in seconds, the suite's time (as pytest's is); without it, the sum
    of the notebooks' times (more than the run took when they ran in parallel)."""
    failures = sum(o.verdict in ("Failed", "Cancelled") for o in outcomes)
    errors = sum(o.verdict in ("Refused", ERROR) for o in outcomes)
    total_time = wall if wall is not None else sum(o.seconds for o in outcomes)
    root = ET.Element("testsuites", name=suite)
    ts = ET.SubElement(root, "testsuite", name=suite, errors=str(errors), failures=str(failures), skipped="0",
                       tests=str(len(outcomes)), time=f"{total_time:.3f}",
                       timestamp=datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds"),
                       hostname=socket.gethostname())
    for o in outcomes:
        # as pytest writes it: no file/line attributes; the environment as a property
        # (as record_property writes one: GitLab and Jenkins show them)
        tc = ET.SubElement(ts, "testcase", classname=_clean(classname(o)),
                           name=_clean(o.item.shown.rsplit("/", 1)[-1]), time=f"{o.seconds:.3f}")
        props = [("nbvalidation.environment", o.environment)] if o.environment else []
        if o.since_last_success:
            props.append(("nbvalidation.sinceLastSuccess", o.since_last_success))
        if o.culprit:
            props.append(("nbvalidation.culprit", o.culprit))
        if o.verdict == "Unchanged":  # nothing ran: the verdict is the earlier job's
            props.append(("nbvalidation.cached", f"unchanged since job {o.name}"))
        if props:
            el_props = ET.SubElement(tc, "properties")
            for key, value in props:
                ET.SubElement(el_props, "property", name=key, value=_clean(value))
        if o.verdict == "Refused":
            el = ET.SubElement(tc, "error", message=_clean(o.message.splitlines()[0] if o.message else "refused"))
            el.text = _clean(o.message)
        elif o.verdict == ERROR and o.job is not None:
            # an infrastructure fault is no failure of the notebook: an <error>, as pytest writes
            # an error in a fixture, with the cause first
            st = o.job.get("status") or {}
            cause = st.get("message") or o.message or "infrastructure error"
            el = ET.SubElement(tc, "error", message=_clean(cause.splitlines()[0]))
            el.set("type", st.get("reason") or "InfrastructureFailed")
            el.text = _clean(cause)
        elif o.verdict in ("Failed", "Cancelled") and o.job is not None:
            f = failure_of(o.job)
            headline = "Cancelled" if o.verdict == "Cancelled" else (f.headline if f else o.message)
            el = ET.SubElement(tc, "failure", message=_clean(headline.splitlines()[0] if headline else "failed"))
            el.set("type", f.reason if f else "Failed")
            el.text = _clean("\n\n".join(p for p in (headline, f.text() if f else "") if p))
        out = system_out(o)
        if out:
            ET.SubElement(tc, "system-out").text = _clean(out)
    return root


def write(outcomes: list[Outcome], path: str, wall: float | None = None) -> None:
    tree = ET.ElementTree(document(outcomes, wall=wall))
    ET.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)
