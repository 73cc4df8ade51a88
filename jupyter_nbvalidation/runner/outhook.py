"""Big writes to the kernel's stdout and stderr, sent in parts with flow control.

A cell that prints 200 MB hands ipykernel one 200 MB string: its ``OutStream`` copies it
into a buffer, takes it out again, and its session turns it into one message (the JSON
text, then its bytes), so the kernel holds four copies of the output at once and the
runner receives it whole. :func:`install` runs a silent execute before the first cell
(nothing lands in the notebook's namespace or history), whose user expression gives the kernel's
``sys.stdout`` and ``sys.stderr`` (ipykernel's ``OutStream`` objects, an attribute of
each instance: ``write``) a write that sends a string longer than ``PART`` characters as
``stream`` messages of ``PART`` characters each, marked in their metadata
(``nbvalidation_part``: a sequence number), after what was buffered before it. At most
``WINDOW`` parts are ahead of the runner: the runner acknowledges the parts it has
taken (:func:`acknowledge`, a control-channel message that ipykernel's control thread
hands to the hook while the cell runs), and the writer waits for that. Where no
acknowledgement comes within ``WAIT`` seconds (nobody reads the parts: a thread that
writes after its cell ended; an ipykernel without a control thread), the rest of that write
is sent as fast as ipykernel sends, as before; the next write waits again.

So the kernel holds the notebook's own string (its own memory, not copied) and about
``WINDOW`` parts; the runner merges the parts back into one stream output
(:mod:`.outputs`), so the executed notebook has the output it had before.

A ``display_data`` or ``execute_result`` is one message: it cannot be sent in parts (a
frontend shows it whole). Where nothing needs it (no golden notebook) and it is larger than
the per-cell output budget (so the runner would drop it whole), the kernel's session sends it
without its data, its size in the message's metadata (``nbvalidation_dropped``), which the
runner counts as dropped: the kernel then holds only the notebook's own value. With a golden
notebook it is sent whole, and the kernel's session makes its JSON text and then its bytes
(with the value, three times its size at the moment of sending).
"""

from __future__ import annotations

import logging
from typing import Any

from jupyter_nbvalidation.core.tasks import wait_within
from jupyter_nbvalidation.runner.kernel import shell_reply

PART = 2**20  # characters per part message
WINDOW = 8  # parts sent and not yet acknowledged
WAIT = 5.0  # seconds without an acknowledgement before the rest of a write goes unthrottled
PART_KEY = "nbvalidation_part"  # the parts' metadata key (their sequence number)
DROP_KEY = "nbvalidation_dropped"  # a display sent without its data: its size
ACK_TYPE = "nbvalidation_output_ack"  # the runner's acknowledgement, on the control channel
_NAME = "_nbvalidation_output"  # the kernel's sys attribute that says the hook is there
REPLY_TIMEOUT = 60.0
log = logging.getLogger(__name__)

INSTALL = r'''
def _nbvalidation_install_output(part, window, wait, key, ack_type, drop_over, drop_key):
    import os, sys, threading
    from IPython import get_ipython
    kernel = getattr(get_ipython(), "kernel", None)
    if kernel is None or getattr(sys, "_nbvalidation_output", None) is not None:
        return
    state = {"sent": 0, "acked": 0}
    cond = threading.Condition()

    def ack(stream, ident, msg):
        with cond:
            state["acked"] = max(state["acked"], int(msg["content"].get("seq") or 0))
            cond.notify_all()

    kernel.control_handlers[ack_type] = ack
    master = os.getpid()

    hooked = []

    def hook(stream):
        original = stream.write
        if not any(each is stream for each in hooked):  # (hooked again at each cell)
            hooked.append(stream)

        def write(string):
            if (string.__class__ is not str or len(string) <= part or os.getpid() != master
                    or stream.pub_thread is None):
                return original(string)
            echo = getattr(stream, "echo", None)
            if echo is not None:  # as ipykernel's write does
                try:
                    echo.write(string)
                except OSError:
                    pass
            for each in hooked:  # what was written before, on either stream, goes first
                each.flush()
            parent, session, name, n = stream.parent_header, stream.session, stream.name, len(string)
            throttled = True
            for start in range(0, n, part):
                with cond:
                    state["sent"] += 1
                    seq = state["sent"]
                    if throttled and not cond.wait_for(lambda: state["acked"] >= seq - window, wait):
                        throttled = False  # no runner taking the parts: the rest of this write as before
                msg = session.msg("stream", {"name": name, "text": string[start:start + part]}, parent=parent,
                                  metadata={key: seq})
                session.send(stream.pub_thread, msg, ident=stream.topic)
                del msg
            return n

        stream.write = write

    def measure(value):  # the runner's size of a data value (runner/outputs.py): UTF-8 bytes of its text
        if value.__class__ is str:
            if value.isascii():
                return len(value)
            return sum(len(value[i:i + part].encode("utf-8", "surrogatepass")) for i in range(0, len(value), part))
        if value.__class__ is list and all(v.__class__ is str for v in value):
            return sum(measure(v) for v in value)
        return None  # not measured here: sent

    def stub(msg_or_type, content):
        """A display or result larger than the cell's whole budget, which the runner would
        drop whole: sent without its data, its size in the message's metadata."""
        kind = msg_or_type.get("msg_type") if msg_or_type.__class__ is dict else msg_or_type
        if kind not in ("display_data", "execute_result") or os.getpid() != master:
            return None
        if msg_or_type.__class__ is dict:
            content = msg_or_type.get("content")
        data = content.get("data") if content.__class__ is dict else None
        if data.__class__ is not dict or (content.get("transient") or {}).get("display_id") is not None:
            return None
        size = 0
        for value in data.values():
            n = measure(value)
            if n is None:
                return None
            size += n
        return size if size > drop_over else None

    def hook_session(session):
        original = session.send

        def send(stream, msg_or_type, content=None, parent=None, ident=None, buffers=None, track=False,
                 header=None, metadata=None):
            size = stub(msg_or_type, content)
            if size is not None:
                if msg_or_type.__class__ is dict:
                    msg_or_type = {**msg_or_type, "content": {**msg_or_type["content"], "data": {}},
                                   "metadata": {**(msg_or_type.get("metadata") or {}), drop_key: size}}
                else:
                    content = {**content, "data": {}}
                    metadata = {**(metadata or {}), drop_key: size}
            return original(stream, msg_or_type, content, parent, ident, buffers, track, header, metadata)

        session.send = send

    def install():  # outside the cell: IPython puts back each stream's write when a cell ends
        for stream in (sys.stdout, sys.stderr):
            if type(stream).__name__ == "OutStream" and hasattr(stream, "session"):
                hook(stream)
        if drop_over > 0 and getattr(kernel, "session", None) is not None:
            hook_session(kernel.session)
        sys._nbvalidation_output = True
        return True

    sys._nbvalidation_output = install

_nbvalidation_install_output(%(part)d, %(window)d, %(wait)r, %(key)r, %(ack_type)r, %(drop_over)d, %(drop_key)r)
del _nbvalidation_install_output
'''


async def install(kc: Any, drop_over: int | None = None) -> bool:
    """Give the kernel's streams the parted write (a silent execute); whether it is there.
    ``drop_over``: a display or result whose data is larger is sent without it (its size in
    the metadata, ``DROP_KEY``): only where nothing needs it (no golden notebook) and the
    runner would drop it whole (larger than the per-cell budget)."""
    code = INSTALL % {"part": PART, "window": WINDOW, "wait": WAIT, "key": PART_KEY, "ack_type": ACK_TYPE,
                      "drop_over": drop_over or 0, "drop_key": DROP_KEY}
    # the user expression runs after the silent cell, out of IPython's stream capture (which
    # restores each stream's write at the cell's end): the streams get their write there
    msg_id = kc.execute(code, silent=True, store_history=False,
                        user_expressions={"ok": f"__import__('sys').{_NAME}()"})
    try:
        reply = await wait_within(shell_reply(kc, msg_id), REPLY_TIMEOUT)
        return bool(reply["content"]["status"] == "ok"
                    and reply["content"]["user_expressions"]["ok"]["data"]["text/plain"] == "True")
    except Exception:  # no reply in time, a kernel that died: big writes are sent whole, as before
        return False


def part_of(msg: Any) -> int | None:
    """The sequence number of a part message (None for any other message)."""
    seq = (msg.get("metadata") or {}).get(PART_KEY) if isinstance(msg, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def dropped_of(msg: Any) -> int | None:
    """The size of the data a display or result was sent without (None: sent whole)."""
    size = (msg.get("metadata") or {}).get(DROP_KEY) if isinstance(msg, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def acknowledge(kc: Any, seq: int) -> None:
    """Tell the kernel that the parts up to ``seq`` are taken (never fails the run)."""
    try:
        sent = kc.control_channel.send(kc.session.msg(ACK_TYPE, {"seq": seq}))
        if hasattr(sent, "add_done_callback"):  # zmq.asyncio: a future; its failure is only logged
            sent.add_done_callback(lambda f: f.cancelled() or f.exception())
    except Exception as e:  # a closed channel: the kernel's wait ends by its own time
        log.debug("cannot acknowledge output part %s: %s", seq, e)
