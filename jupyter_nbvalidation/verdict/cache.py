"""The verdict cache's key: what a job's verdict depends on, hashed once, here.

A job is stored with its key (annotation ``nbvalidation.dev/verdict-key``, on
both backends); ``run`` reports a notebook "unchanged" with the name of an
earlier **Succeeded** job of the same notebook path whose key equals the key its
inputs have now, and runs nothing. The key covers:

- the validated spec (comparison options, timeouts, kernel env, build options);
- every file of the job's snapshot by content (the notebook, the golden copy, the
  requirements as the build reads them, the input files);
- the kernel's environment, as the backend knows it (``Backend.verdict_environment``):
  locally, the environment key of a built one (interpreter, requirement lines, local
  paths' content, kernel packages) or, with the build disabled, the interpreter and
  every distribution installed in it; on Kubernetes, the content tag of the image a
  build would push (base image digest, requirement lines, runner) or, with the build
  disabled, the image by its digest;
- the runner's identity (verdict/identity.py): what of this tool, and of what it runs
  on, can change a verdict, and only that: the runner, the modules a verdict's
  judgement runs through (the comparison, the cell markers, ...) and the installed
  distributions a run goes through (nbclient, nbformat, jupyter_client, ipykernel and
  what they require) by their RECORD; not the CLI, the server, the engine or the docs;
- what the kernel inherits from this process: the locale (``LANG``, ``LANGUAGE``,
  ``LC_*``) and ``TZ`` (runner/environment.py passes them through);
- the backend's defaults a verdict depends on (the per-cell timeout);
- without spec.inputFiles (the kernel works in a copy of the notebook's own folder,
  backends/workcopy.py): what ``walk_folder`` gives, the same entries that copy holds:
  every file in that folder and below it by content, hidden ones included, through
  symbolic links that stay inside the server's root (a link leaving it, or leading
  nowhere, by its target only); EXCLUDED_DIRS and virtual environments left out of
  both; other notebooks only when this one names them;
- with the build disabled, the source of every editable (``-e``) install of the
  interpreter (every file of its folder by content, data files included, bytecode left
  out), since its name and version stay while its code changes.

Only the **newest** job with the key decides: a hit is that job when it Succeeded; a
newer Failed, Cancelled or still running job of the same key means the notebook runs.

A hit also needs the earlier job's environment to be the one a run would get now
(``Backend.same_verdict_environment``: not evicted or built again since, locally; the
registry still serving the image the job ran, on Kubernetes).

When one of these cannot be known (a backend without an environment key, a
build-disabled interpreter other than this one, a base image whose digest the
registry does not give, a folder over the bounds) there is no key, and the
notebook always runs: never a false "unchanged".

Beside the key, what the kernel actually read (``status.readSet``, verdict/readset.py,
recorded by the runner's audit hook on the local backend) must still hold
(:func:`reads_hold`): a file it read under the root (``../data.csv``, a sibling
notebook read under a computed name, a script it ran, by content and mode), a folder it
listed, a file of its environment it imported (by size and times); a verdict whose kernel
read outside the root and its environment is never reused."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol
from urllib.parse import unquote, urlparse

from jupyter_nbvalidation.core.folders import walk_folder
from jupyter_nbvalidation.core.vocabulary import Phase
from jupyter_nbvalidation.verdict.identity import runner_identity
from jupyter_nbvalidation.verdict.inherited import PASSED_THROUGH
from jupyter_nbvalidation.verdict.markers import notebook_opts_out_of_cache
from jupyter_nbvalidation.verdict.readset import first_change

ANNOTATION = "nbvalidation.dev/verdict-key"
VERSION = 4  # of the key's recipe: a change of recipe never matches an older key
MAX_FOLDER_FILES = 5000
MAX_FOLDER_BYTES = 512 * 2**20
class KeyedBackend(Protocol):
    """What the key needs of the backend a job goes to (backends/base.py's ``Backend``
    has it): its name and its defaults of the runner options (a verdict depends on
    them: ``runner_defaults``, from the spec table) and the real paths it hides from a
    kernel (left out of the folder's digest)."""

    @property
    def name(self) -> str: ...

    def runner_defaults(self) -> Mapping[str, Any]: ...

    def private_paths(self) -> frozenset[str]: ...


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def installed_distributions(python: str) -> str | None:
    """Every distribution (name and version) of ``python``'s environment, when it is
    this interpreter (otherwise None: not known without running it). From the
    ``NAME-VERSION.dist-info`` folder names on ``sys.path``: a few directory
    listings, not a read of every distribution's metadata."""
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return None
    seen = []
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for n in names:
            path = Path(entry or ".") / n
            if n.endswith((".dist-info", ".egg-info")):
                seen.append(f"{entry}/{n}")
                source = _editable_source(path)
            elif n.endswith(".egg-link"):  # a setuptools develop install: its first line is the source
                try:
                    source = Path(path.read_text(encoding="utf-8").splitlines()[0].strip())
                except (OSError, IndexError):
                    return None
            else:
                continue
            if source is not None:
                digest = source_digest(source)
                if digest is None:
                    return None  # an editable source too big to read: not known
                seen.append(f"{entry}/{n} -e {source} {digest}")
    return _sha("\n".join(sorted(seen)).encode())


def _editable_source(dist_info: Path) -> Path | None:
    """The source folder of an editable install (PEP 610 ``direct_url.json``), or None."""
    try:
        info = json.loads((dist_info / "direct_url.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    url = info.get("url") or ""
    if not (info.get("dir_info") or {}).get("editable") or not url.startswith("file://"):
        return None
    return Path(unquote(urlparse(url).path))


class FolderTooLarge(Exception):
    def __init__(self, files: int, nbytes: int):
        super().__init__(f"over {files} files or {nbytes} bytes")
        self.files, self.nbytes = files, nbytes


def folder_size(folder: str | Path, root: str | Path | None, skip: frozenset[str] | set[str],
                max_files: int, max_bytes: int) -> tuple[int, int]:
    """(files, bytes) of what ``walk_folder`` gives, from ``stat`` only; FolderTooLarge
    as soon as either passes its bound."""
    files = total = 0
    for e in walk_folder(folder, root, skip):
        if e.kind == "file":
            files += 1
            total += e.size
            if files > max_files or total > max_bytes:
                raise FolderTooLarge(files, total)
    return files, total


def _tree_digest(folder: Path, keep: Callable[[Path], bool], root: Path | None = None,
                 skip: frozenset[str] | set[str] = frozenset(),
                 keep_other: Callable[[Path], bool] | None = None) -> str | None:
    """The entries of ``walk_folder`` (the files ``keep`` accepts, by relative path and
    content; folders, links not followed and folders reached twice by what they are).
    None over the bounds or on a read error."""
    h = hashlib.sha256()
    count = total = 0
    try:
        for e in walk_folder(folder, root, skip):
            if e.kind != "file":
                if keep_other is None or keep_other(Path(e.path)):
                    h.update(f"{e.rel}\0{e.kind} {e.real if e.kind != 'dir' else ''}\0".encode())
                continue
            if not keep(Path(e.path)):
                continue
            data = Path(e.path).read_bytes()
            count += 1
            total += len(data)
            if count > MAX_FOLDER_FILES or total > MAX_FOLDER_BYTES:
                return None
            h.update(e.rel.encode() + b"\0" + _sha(data).encode() + b"\0")
    except OSError:
        return None
    return h.hexdigest()


def source_digest(folder: Path) -> str | None:
    """An editable install's source folder by content: every module, and every file of its
    packages (a folder with an ``__init__.py``, or one inside it: a ``.json`` beside its
    modules), bytecode and EXCLUDED_DIRS left out. What lies outside its packages (a checkout's
    build output, test artifacts, a cluster's state) is nothing an import reads."""
    packages: dict[Path, bool] = {}

    def in_package(path: Path) -> bool:
        for d in path.parents:
            if d == folder or folder not in d.parents:
                return False
            if d not in packages:
                packages[d] = (d / "__init__.py").is_file()
            if packages[d]:
                return True
        return False

    def keep(path: Path) -> bool:
        return path.suffix not in (".pyc", ".pyo") and (path.suffix in (".py", ".pyi", ".pth") or in_package(path))

    return _tree_digest(folder, keep, keep_other=in_package)


def folder_digest(folder: Path, notebook_text: str, skip: set[Path], root: Path | None = None,
                  skip_real: frozenset[str] | set[str] = frozenset()) -> str | None:
    """The content of every file under ``folder`` the kernel could read from it (its copy
    holds exactly what ``walk_folder`` gives); another notebook only when this one names
    it (``%run other.ipynb``)."""
    return _tree_digest(folder, lambda path: path.resolve() not in skip
                        and not (path.suffix == ".ipynb" and path.name not in notebook_text), root, skip_real)


def inherited_environment() -> dict[str, str]:
    """The variables a kernel inherits from this process (verdict/inherited.py: the runner
    passes them through, runner/environment.py)."""
    return {k: v for k, v in sorted(os.environ.items()) if k in PASSED_THROUGH or k.startswith("LC_")}


def opts_out(notebook: bytes) -> bool:
    """The notebook's metadata says ``"nbvalidation": {"cache": false}``."""
    try:
        nb = json.loads(notebook)
    except ValueError:
        return False
    return isinstance(nb, dict) and notebook_opts_out_of_cache(nb)


def _counted(name: str, spec: dict[str, Any], files: dict[str, bytes]) -> bool:
    """Whether a job file is part of the key. The notebook's folder that travels with a job
    (``inputs/...`` without ``spec.inputFiles``: the Kubernetes backend) counts as the local
    folder does in :func:`folder_digest`: another notebook only when this one names it."""
    if spec.get("inputFiles") or not (name.startswith("inputs/") and name.endswith(".ipynb")):
        return True
    return name.rsplit("/", 1)[-1] in files.get("notebook.ipynb", b"").decode("utf-8", "replace")


def _defaults(defaults: Mapping[str, Any]) -> dict[str, Any]:
    """A backend's runner defaults as the key names them since recipe 3: ``default`` and
    the name in camel case (NAME ``some_limit`` as ``defaultSomeLimit``)."""
    return {"default" + "".join(word.title() for word in name.split("_")): value for name, value in defaults.items()}


def verdict_key(spec: dict[str, Any], files: dict[str, bytes], environment: str | None, *, workdir: Path | None,
                notebook_path: Path | None, backend: KeyedBackend, root: Path | None = None) -> str | None:
    """The key of a job about to be submitted, or None when it cannot be known or the
    notebook opts out (``metadata.nbvalidation.cache`` false: it always runs)."""
    if environment is None or opts_out(files.get("notebook.ipynb", b"")):
        return None
    parts: dict[str, Any] = {
        "recipe": VERSION,
        "spec": spec,
        "files": {name: _sha(data) for name, data in sorted(files.items()) if _counted(name, spec, files)},
        "environment": environment,
        "runner": runner_identity(),
        "inherited": inherited_environment(),
        "backend": {"name": backend.name, **_defaults(backend.runner_defaults())},
    }
    if workdir is not None:
        skip = {notebook_path.resolve()} if notebook_path else set()
        text = files.get("notebook.ipynb", b"").decode("utf-8", "replace")
        private = backend.private_paths()  # e.g. a data dir inside the folder
        digest = folder_digest(workdir, text, skip, root, private)
        if digest is None:
            return None
        parts["folder"] = digest
    return _sha(json.dumps(parts, sort_keys=True, default=str).encode())


def has_key(job: Mapping[str, Any], key: str) -> bool:
    """A job submitted with this verdict key."""
    return ((job.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION) == key


def reads_hold(job: Mapping[str, Any], root: str) -> bool:
    """What the job's kernel read (``status.readSet``, verdict/readset.py) is as it was: every
    file under the root by content and mode, every folder it listed by its names, every file
    of its environment by size and times; and it read nothing it cannot be held to. A job
    without a read-set (another backend, spec.inputFiles without a root) holds by its key
    alone. Blocks: reads files."""
    read_set = (job.get("status") or {}).get("readSet")
    if read_set is None:
        return True
    return isinstance(read_set, dict) and first_change(read_set, root) is None


def matches(job: Mapping[str, Any], key: str) -> bool:
    """A job that can stand for a notebook with this key: Succeeded, same key. Only the
    newest job with the key may stand (JobService.unchanged)."""
    return (job.get("status") or {}).get("phase") == Phase.SUCCEEDED and has_key(job, key)
