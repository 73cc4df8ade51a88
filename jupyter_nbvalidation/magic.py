"""``%nbvalidate`` — validate the notebook this kernel belongs to (or another).

    %load_ext jupyter_nbvalidation
    %nbvalidate                       # this notebook (found from the server's session of this kernel)
    %nbvalidate other.ipynb --golden golden.ipynb --no-build --timeout 10m --no-wait
    %nbvalidate --abs-tol 1e-6 --rel-tol 0 --ignore-output stream:stderr -p epochs 1

It takes the spec options of ``jupyter nbvalidation submit`` (``cli.spec_options.add_spec_options``:
parameters, tolerances, ignored outputs, timeouts, lax mode, sanitizer files, build
options), with files relative to the kernel's working directory (the notebook's folder).
What it does not give comes from the project settings file (``[tool.nbvalidation]``,
docs/project-settings.md), which the server reads: an argument wins over the file.

It talks to the Jupyter server that runs this kernel through the REST API,
shows the phase, elapsed time and a compact timeline in the cell output
(updated in place) and ends with the verdict. Waiting is a plain loop with
short sleeps, so interrupting the kernel stops the waiting at once (the job
keeps running on the server).
"""

from __future__ import annotations

import argparse
import html
import os
import shlex
import time
from pathlib import Path
from typing import Any, Callable

import jupyter_nbvalidation.cli.render as render
from jupyter_nbvalidation.cli.spec_options import add_spec_options, spec_from_options
from jupyter_nbvalidation.clients.base import ClientError
from jupyter_nbvalidation.clients.http import ServerClient, running_servers
from jupyter_nbvalidation.core.model import Phase, is_terminal


class MagicError(Exception):
    pass


class MagicHelp(MagicError):
    """``%nbvalidate --help``: the whole help text (printed as it is)."""


def _kernel_id() -> str | None:
    try:
        from ipykernel.connect import get_connection_file  # deferred: start-up time (IPython: only in a kernel)

        name = Path(get_connection_file()).name
    except Exception:
        return None
    if name.startswith("kernel-") and name.endswith(".json"):
        return name[len("kernel-"):-len(".json")]
    return None


def locate_session(kernel_id: str | None) -> tuple[ServerClient, str | None]:
    """The server that runs this kernel, and the notebook path of its session."""
    servers = running_servers()
    if not servers:
        raise MagicError("No running Jupyter server was found (no runtime files); "
                         "start JupyterLab, or pass --server URL --token TOKEN.")
    reachable = []
    for info in servers:
        client = ServerClient.from_info(info)
        try:
            sessions = client.request_root("GET", "api/sessions", timeout=3)
        except ClientError:
            continue
        reachable.append(client)
        for s in sessions or []:
            if kernel_id and (s.get("kernel") or {}).get("id") == kernel_id:
                return client, s.get("path")
    if not reachable:
        raise MagicError(f"None of the {len(servers)} Jupyter server(s) in the runtime files could be reached; "
                         "start JupyterLab, or pass --server URL --token TOKEN.")
    return reachable[0], None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="%nbvalidate", add_help=False,
                                description="Validate this notebook (or NOTEBOOK) through the Jupyter server "
                                            "that runs this kernel; the options of `jupyter nbvalidation submit`.")
    p.add_argument("-h", "--help", action="store_true", help="show this help")
    p.add_argument("notebook", nargs="?", help="a notebook, relative to this notebook's folder (default: this one)")
    p.add_argument("--golden", help="golden notebook, relative to this notebook's folder")
    add_spec_options(p)
    p.add_argument("--no-wait", action="store_true", help="submit and return without waiting for the verdict")
    p.add_argument("--server", help="the server's URL (default: the one that runs this kernel)")
    p.add_argument("--token", default="", help="the server's token (with --server)")
    return p


def parse(line: str) -> argparse.Namespace:
    p = parser()
    words = shlex.split(line)
    if "-h" in words or "--help" in words:
        raise MagicHelp(p.format_help())
    try:
        return p.parse_args(words)
    except SystemExit:
        raise MagicError("usage: %nbvalidate [NOTEBOOK] [--golden G] [--no-build] [--timeout 10m] "
                         "[--abs-tol X] [--rel-tol X] [--ignore-output SELECTOR] "
                         "[-p NAME VALUE] [--lax] [--sanitize-with FILE] [--no-wait] [--server URL --token T] "
                         "(the options of `jupyter nbvalidation submit`)") from None


COLOURS: dict[str, str] = {Phase.SUCCEEDED: "var(--jp-success-color1, green)", Phase.FAILED: "var(--jp-error-color1, red)",
           render.CANCELLED: "var(--jp-warn-color1, #b45f06)"}


def _progress(job: dict[str, Any], timeline: dict[str, Any] | None, started: float) -> tuple[str, str]:
    st = job.get("status") or {}
    phase = render.phase_label(job)
    head = (f"{job['metadata']['name']}  {job['spec']['notebook']['path']}\n"
            f"phase: {phase}   elapsed: {time.monotonic() - started:.1f}s")
    if st.get("phase") == Phase.VALIDATION_RUNNING and st.get("progress"):
        head += f"\n{render.progress_text(st['progress'])}"  # "cell 4 running, 3.2 s · 3 of 12 code cells done"
    elif st.get("message") and not is_terminal(st.get("phase")):
        head += f"\n{st['message']}"
    body = render.timeline_bars(timeline) if timeline else ""
    text = head + ("\n" + body if body else "")
    if is_terminal(st.get("phase")):
        text += "\n" + render.verdict_line(job)
        extra = (render.environment_lines(job) if st.get("phase") == Phase.FAILED else []) + render.failure_lines(job)
        if extra:
            text += "\n" + "\n".join(extra)
    colour = COLOURS.get(phase, "inherit")
    # white-space: pre and a scroll bar: a narrow output area never wraps a line in the
    # middle of a word ("BuildStar/ted"); the message goes on a line of its own
    html_text = (f"<pre style='border-left: 3px solid {colour}; padding-left: 6px; white-space: pre; "
                 f"overflow-x: auto; word-break: normal; overflow-wrap: normal'>"
                 f"{html.escape(text)}</pre>")
    return text, html_text


def nbvalidate(line: str, display: Any = None, sleep: float = 0.5) -> dict[str, Any] | None:
    args = parse(line)
    if args.server:
        client = ServerClient(args.server, args.token)
        session_path = None
    else:
        client, session_path = locate_session(_kernel_id())
    if args.notebook:
        # a path as the kernel sees it (relative to its cwd = the notebook's folder)
        base = Path(session_path).parent.as_posix() if session_path else None
        if os.path.isabs(args.notebook) or base is None:
            rel = client.api_path(args.notebook) if client.root_dir else args.notebook
        else:
            rel = (Path(base) / args.notebook).as_posix() if base not in ("", ".") else args.notebook
        path = rel
    elif session_path:
        path = session_path
    else:
        raise MagicError("This kernel has no notebook session on a reachable server; "
                         "name the notebook: %nbvalidate path/to/notebook.ipynb")
    spec: dict[str, Any] = {"notebook": {"path": path}}
    if args.golden:
        base = Path(path).parent.as_posix()
        spec["goldenNotebook"] = {"path": args.golden if base in ("", ".") else f"{base}/{args.golden}"}
    spec.update(spec_from_options(args))
    job: dict[str, Any] = client.request("POST", "jobs", spec)
    name = job["metadata"]["name"]
    started = time.monotonic()
    show = display or _ipython_display()
    handle = show(job, None, started, None)
    if args.no_wait:
        return job
    try:
        while True:
            job = client.request("GET", f"jobs/{name}")
            timeline = client.request("GET", f"jobs/{name}/timeline")
            handle = show(job, timeline, started, handle)
            if is_terminal((job.get("status") or {}).get("phase")):
                return job
            time.sleep(sleep)
    except KeyboardInterrupt:
        print(f"Stopped waiting; {name} keeps running on the server "
              f"(`jupyter nbvalidation describe {name}`).")
        return job


def _ipython_display() -> Callable[..., Any]:
    from IPython.display import display as ipy_display  # deferred: start-up time (IPython: only in a kernel)

    def show(job: dict[str, Any], timeline: dict[str, Any] | None, started: float, handle: Any) -> Any:
        text, html_text = _progress(job, timeline, started)
        bundle = {"text/plain": text, "text/html": html_text}
        if handle is None:
            return ipy_display(bundle, raw=True, display_id=True)  # type: ignore[no-untyped-call]
        handle.update(bundle, raw=True)
        return handle

    return show


def load_ipython_extension(ipython: Any) -> None:
    from IPython.core.magic import register_line_magic  # deferred: start-up time (IPython: only in a kernel)

    @register_line_magic("nbvalidate")  # type: ignore[arg-type]
    def _nbvalidate(line: str) -> None:
        try:
            job = nbvalidate(line)
        except MagicHelp as e:
            print(e)
            return None
        except (MagicError, ClientError) as e:
            print(f"%nbvalidate: {e}")
            return None
        ipython.user_ns["_nbvalidation_job"] = job
        return None
