"""What travels of a notebook's folder with a Kubernetes job (one without
spec.inputFiles): the folder within ``max_folder_files`` and the input ConfigMap's
bound (``max_notebook_bytes_configmap``), read as the local backend's copy of it holds
it, and the paths that never travel (the server's tokens, the kubeconfig, credentials)."""

from __future__ import annotations

import os

from jupyter_core.paths import jupyter_data_dir, jupyter_runtime_dir

import jupyter_nbvalidation.backends.kubernetes.objects as obj
import jupyter_nbvalidation.backends.workcopy as workcopy
import jupyter_nbvalidation.verdict.cache as verdict_cache
from jupyter_nbvalidation.core.errors import InputRejected


def private_paths(kubeconfig: str) -> frozenset[str]:
    """Never part of the folder that travels (nor of its verdict key): the server's
    Jupyter data and runtime dirs (its tokens), the kubeconfig and the usual
    credential dirs, should the notebook's folder hold them."""
    home = os.path.expanduser("~")
    paths = {jupyter_data_dir(), jupyter_runtime_dir(), os.path.join(home, ".kube"),
             os.path.join(home, ".docker"), os.path.join(home, ".ssh"), kubeconfig,
             *os.environ.get("KUBECONFIG", "").split(os.pathsep)}
    return frozenset(os.path.realpath(p) for p in paths if p)


def _refusal(folder: str, root: str | None, e: verdict_cache.FolderTooLarge, private: frozenset[str],
             max_files: int, limit: int) -> str:
    if e.files > max_files:
        what, bound = f"over {max_files} files", "c.KubernetesBackend.max_folder_files"
    else:
        try:  # the size the user would have to cut (a walk by stat, bounded in files)
            files, size = verdict_cache.folder_size(folder, root, private, max_files, 2**62)
            what = f"{files} files, {size} bytes"
        except (verdict_cache.FolderTooLarge, OSError):
            what = f"over {limit} bytes"
        bound = (f"its input ConfigMap, limited here to {limit} bytes with the notebook "
                 "(c.KubernetesBackend.max_notebook_bytes_configmap; Kubernetes caps ConfigMaps at 1 MiB)")
    return (f"spec.notebook.path: the notebook's folder {folder} holds {what} (.git, virtual environments "
            f"and the like left out); without spec.inputFiles it travels with the job, in {bound}: name "
            "the files the notebook reads in spec.inputFiles (only they travel then)")


def check_working_folder(folder: str, root: str | None, private: frozenset[str], max_files: int,
                         max_bytes: int) -> None:
    """The folder that travels with a job without spec.inputFiles, within
    max_files and max_bytes (a walk by stat; the exact snapshot size is checked at
    submit), or InputRejected naming it, its size, the limit and the way out."""
    try:
        verdict_cache.folder_size(folder, root, private, max_files, max_bytes)
    except verdict_cache.FolderTooLarge as e:
        raise InputRejected(_refusal(folder, root, e, private, max_files, max_bytes), "spec.notebook.path",
                            status=413, code="TooLarge") from None
    except OSError as e:
        raise InputRejected(f"spec.notebook.path: the notebook's folder {folder} cannot be read: "
                            f"{e.strerror or e}", "spec.notebook.path") from None


def folder_files(folder: str, root: str | None, private: frozenset[str], max_files: int,
                 max_bytes: int) -> dict[str, bytes]:
    """The notebook's folder as the local backend's copy of it holds it (workcopy.read_folder:
    the same walk, exclusions and file bound; links out of the root are not carried), by
    the ConfigMap keys of its input files."""
    try:
        found, _left_out = workcopy.read_folder(folder, root, private, max_files, max_bytes)
    except verdict_cache.FolderTooLarge as e:  # it grew since the check
        raise InputRejected(_refusal(folder, root, e, private, max_files, max_bytes), "spec.notebook.path",
                            status=413, code="TooLarge") from None
    except OSError as e:
        raise InputRejected(f"spec.notebook.path: the notebook's folder {folder} cannot be read: "
                            f"{e.strerror or e}", "spec.notebook.path") from None
    return {f"{obj.INPUTS_PREFIX}{rel}": data for rel, data in found.items()}
