"""The embedded local backend: SQLite store, virtual environments, local kernels.

Layout under ``data_dir`` (default ``<jupyter data dir>/nbvalidation``)::

    nbvalidation.db                 jobs + events (store/sqlite.py)
    jobs/<uid>/input/               the snapshot taken at submit
    jobs/<uid>/run-<n>/             one validation attempt: result.json, executed.ipynb, runner.log,
                                    pid, owner.json (who started it: engine and runner)
    jobs/<uid>/run-<n>/tree/        its kernel's working copy (workcopy.py), removed after the run
    jobs/<uid>/run-<n>/scratch/     its sandboxed kernel's /tmp and /var/tmp, removed with the copy
    envs/<key>/                     a finished environment (content-addressed; .last-use: its LRU time)
    envs/.tmp-<key>-<rand>/         an environment being built (never used)
    envs/.tmp-<key>-<rand>.owner.json  who builds it (engine and current build step)
    envs/.seals/<key>-<inode>.json  its seal: the content manifest taken at build (seal.py), and
                                    .record.json, its environment record; beside it, never in it
    envs/.retired-<key>-<rand>/     an environment found changed since its build, out of sight
    logs/build-<key>-<stamp>.log    build logs

An environment becomes visible atomically: it is built in a temporary folder
and renamed to ``envs/<key>`` only once complete, with a marker file written
last. Every subprocess runs without blocking the event loop.

Several processes (servers, CLIs) may share one data dir: only the holder of
the store's Lease reconciles. A process kills only what it started itself
(an owner record names the engine and the child by pid *and* start time, so a
reused pid is never mistaken for it); a new holder adopts a run or build of
another engine by waiting for its outcome, and stops one only when its owner
is provably dead.
"""

from jupyter_nbvalidation.backends.local.backend import LocalBackend
from jupyter_nbvalidation.backends.local.builds import uv_refresh_args
from jupyter_nbvalidation.backends.local.disk import (
    ENV_MARKER,
    LAST_USE,
    RECORD_FILE,
    RUNNER_COMMAND,
    _Build,
    _Run,
    folder_refusal,
    owner_alive,
    proc_start,
    process_record,
    same_process_alive,
)
from jupyter_nbvalidation.backends.local.environments import tool_identity

__all__ = ["ENV_MARKER", "LAST_USE", "RECORD_FILE", "RUNNER_COMMAND", "LocalBackend", "_Build", "_Run",
           "folder_refusal", "owner_alive", "proc_start", "process_record", "same_process_alive", "tool_identity",
           "uv_refresh_args"]
