"""The attacker's notebook of the secrets tests (docs/secrets.md): it prints a secret every way it
can think of. Its source never holds the value (it reads it from its environment, as a notebook
using podConfig.credentials does), so that the input snapshot is no artifact of the value; a scan
of every artifact then looks for the value in the forms the masking covers."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Iterable

from jupyter_nbvalidation.runner.masking import Masker, forms

# with characters a URL, base64, HTML and JSON each encode differently
VALUE = "Wh4t-a/Secr3t+Val&e=ok?"
USER = "svc_warehouse_7f3a"


def attack_cells(key: str = "DB_PASSWORD", digest: str | None = None) -> list[str]:
    """The cells: each shows the value of ``$key`` one more way; the last raises with it."""
    digest = digest or hashlib.sha256(VALUE.encode()).hexdigest()
    v = f"os.environ[{key!r}]"
    return [
        # the value reached the kernel (checked without showing it)
        f"import os, sys, base64, urllib.parse, logging, hashlib, subprocess\n"
        f"assert hashlib.sha256({v}.encode()).hexdigest() == {digest!r}, 'the secret did not reach the kernel'\n"
        f"v = {v}",
        "print(v)\nprint(repr(v))\nprint('the password is', v, 'ok')",
        "v",  # an execute_result
        "from IPython.display import display, HTML, Markdown, JSON\n"
        "display(v)\ndisplay(HTML(f'<b>{v}</b>'))\ndisplay(Markdown(f'`{v}`'))\ndisplay(JSON({'pw': v}))",
        "sys.stderr.write(v + '\\n')\nsys.stderr.flush()",
        "logging.basicConfig()\nlogging.getLogger('app').warning('connecting with %s', v)",
        "print(base64.b64encode(v.encode()).decode())\n"
        "print(base64.b64encode(('user:' + v).encode()).decode())\n"
        "print(base64.urlsafe_b64encode(v.encode()).decode())",
        "print(urllib.parse.quote(v))\nprint(urllib.parse.quote(v, safe=''))\nprint(urllib.parse.quote_plus(v))\n"
        "print('https://' + urllib.parse.quote(v, safe='') + '@example.org/')",
        "print(v[::-1])\nprint(v.encode().hex())",
        "for c in v:\n    print(c)",
        "print(v[:9], end='')\nprint(v[9:])",
        "print(list(v))",
        "print(v[:11], end='')",  # the value split across two cells
        "print(v[11:])",
        "open('leak.txt', 'w').write(v)\nprint(open('leak.txt').read())\n"
        "import tempfile\nfor d in ('/tmp', '/var/tmp', tempfile.gettempdir(), os.path.expanduser('~')):\n"
        "    try:\n        open(os.path.join(d, 'nbv-leak.txt'), 'w').write(v)\n    except OSError as e:\n"
        "        print('not written in', d, type(e).__name__)",
        "print(dict(os.environ))",
        "%env",
        f"%env {key}",
        "os.write(1, (v + '\\n').encode())\nos.write(2, (v + '\\n').encode())",
        f"print(subprocess.run(['sh', '-c', 'echo ${key}'], capture_output=True, text=True).stdout)\n"
        f"subprocess.run(['sh', '-c', 'echo ${key} >&2'])",
        "import warnings\nwarnings.warn(f'deprecated password {v}')",
        "raise ValueError(f'cannot connect to the warehouse with {v}')",
    ]


def scan_text(text: str, values: Iterable[str] = (VALUE,)) -> list[str]:
    """What of ``values`` (in every form the masking covers, split too) ``text`` holds: [] when
    nothing."""
    found = []
    masker = Masker(values)
    if masker._re is not None:
        for m in masker._re.finditer(text):
            found.append(repr(text[max(0, m.start() - 60):m.end() + 20]))
    return found


def scan_files(root: Path, values: Iterable[str] = (VALUE,)) -> list[str]:
    """Every file under ``root`` (SQLite files, logs, notebooks, JSON: as bytes read as text) that
    holds a form of ``values``: ``path: excerpt``."""
    values = list(values)
    raw = [f.encode() for v in values for f in forms(v)]
    out = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            try:
                data = path.read_bytes()
            except OSError:
                continue
            hits = [r.decode() for r in raw if r in data]
            text = data.decode("utf-8", "replace")
            hits += scan_text(text, values) if len(text) < 50_000_000 else []
            if hits:
                out.append(f"{path}: {hits[:3]}")
    return out


MASKED = re.compile(re.escape("***"))
