"""The secrets a server knows by name (``c.NBValidation.secrets``, docs/secrets.md).

A job names secrets (``podConfig.credentials``; a git source's ``credentialsSecret``); the registry
says whether the caller may use a name (:meth:`SecretRegistry.check`, at submit) and reads its
values when a run needs them (:meth:`SecretRegistry.values`, blocking: call it off the loop). The
values are never kept: each run reads them again, so a changed value takes effect at the next run.

One entry::

    c.NBValidation.secrets = {
        "warehouse": {
            "fromEnv": {"DB_USER": "WAREHOUSE_USER", "DB_PASSWORD": "WAREHOUSE_PASSWORD"},
            # or "fromFile": "/etc/nbvalidation/warehouse.env"  (KEY=VALUE lines, or a JSON object)
            # or "fromSecret": "warehouse-creds"  (a Secret of the kubernetes backend's namespace)
            "users": ["alice"],          # Hub users who may use it
            "groups": ["analysts"],      # Hub groups whose members may use it
        },
    }

Who may use a name: the single-user server's own user (``Caller(user=None)``) may use every secret
its server is configured with; a Hub user (the team service) only a secret whose ``users`` names
them or whose ``groups`` holds one of their groups, so a secret with neither is the server's own.
An unknown name and a name the caller may not use raise the same :class:`SecretNotAvailable`: the
answer never confirms to a user that a name they may not use exists.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

# a key of a secret: an environment variable's name, or the upstream operator's keys
# (``ssh-privatekey``): letters, digits, '_', '-', '.'
KEY = re.compile(r"[A-Za-z0-9_.-]{1,128}")
NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,251}[A-Za-z0-9])?")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
FIELDS = ("fromEnv", "fromFile", "fromSecret", "users", "groups")
# a Kubernetes object's name (a DNS subdomain): what ``fromSecret`` names
K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
#: why a ``fromSecret`` entry's values are not read here (the kubernetes backend reads them)
FROM_SECRET_ONLY = "it is a Kubernetes Secret (fromSecret), which only the kubernetes backend reads"
# the same answer for a name that does not exist and a name the caller may not use
NOT_AVAILABLE = "no such secret is available to you (unknown, or not allowed for this user)"


class SecretNotAvailable(Exception):
    """A secret that cannot be used: ``name`` (as asked) and ``reason``. The message holds the name
    and the reason, never a value."""

    def __init__(self, name: str, reason: str = NOT_AVAILABLE) -> None:
        super().__init__(f"secret {name!r}: {reason}")
        self.name = name
        self.reason = reason


@dataclass(frozen=True)
class Caller:
    """Who asks: ``user`` None is the single-user server's own user; a Hub user has a name and the
    groups the Hub says they are in."""

    user: str | None = None
    groups: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _Entry:
    name: str
    from_env: Mapping[str, str] | None
    from_file: Path | None
    from_secret: str | None
    users: frozenset[str] | None
    groups: frozenset[str] | None

    def allows(self, caller: Caller) -> bool:
        if caller.user is None:
            return True
        return caller.user in (self.users or ()) or bool((self.groups or frozenset()) & caller.groups)


def _bad(name: str, field: str | None, reason: str) -> ValueError:
    where = f"c.NBValidation.secrets[{name!r}]" + (f"[{field!r}]" if field else "")
    return ValueError(f"{where}: {reason}")


def _names(name: str, field: str, value: Any) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)) \
            or not all(isinstance(v, str) and v for v in value):
        raise _bad(name, field, "must be a list of names (non-empty strings)")
    return frozenset(value)


def _entry(name: Any, raw: Any) -> _Entry:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise _bad(str(name), None, "a secret's name is 1 to 253 letters, digits, '_', '-' or '.', "
                                    "starting and ending with a letter or digit")
    if not isinstance(raw, Mapping):
        raise _bad(name, None, "must be a mapping with 'fromEnv' or 'fromFile'")
    unknown = sorted(str(k) for k in raw if k not in FIELDS)
    if unknown:
        raise _bad(name, unknown[0], f"unknown field (the fields are {', '.join(FIELDS)})")
    has_env, has_file = raw.get("fromEnv") is not None, raw.get("fromFile") is not None
    has_secret = raw.get("fromSecret") is not None
    if has_env + has_file + has_secret != 1:
        raise _bad(name, None, "give exactly one of 'fromEnv' (key -> the server's environment variable), "
                               "'fromFile' (a path) and 'fromSecret' (a Kubernetes Secret's name)")
    from_secret = None
    if has_secret:
        from_secret = raw["fromSecret"]
        if not isinstance(from_secret, str) or not K8S_NAME.fullmatch(from_secret):
            raise _bad(name, "fromSecret", "must be a Kubernetes Secret's name (lower-case letters, digits, '-' "
                                           "and '.', at most 253)")
    from_env = None
    if has_env:
        env = raw["fromEnv"]
        if not isinstance(env, Mapping) or not env:
            raise _bad(name, "fromEnv", "must be a non-empty mapping of key -> environment variable name")
        for key, var in env.items():
            if not isinstance(key, str) or not KEY.fullmatch(key):
                raise _bad(name, "fromEnv", f"key {key!r}: a key is letters, digits, '_', '-' or '.'")
            if not isinstance(var, str) or not ENV_NAME.fullmatch(var):
                raise _bad(name, "fromEnv", f"key {key!r}: {var!r} is not an environment variable's name")
        from_env = dict(env)
    from_file = None
    if has_file:
        path = raw["fromFile"]
        if not isinstance(path, (str, os.PathLike)) or not str(path):
            raise _bad(name, "fromFile", "must be a path")
        from_file = Path(os.path.expanduser(str(path)))
        if not from_file.is_absolute():
            raise _bad(name, "fromFile", "must be an absolute path (the server's working folder may change)")
    return _Entry(name, from_env, from_file, from_secret, _names(name, "users", raw.get("users")),
                  _names(name, "groups", raw.get("groups")))


def parse_file(text: str, name: str) -> dict[str, str]:
    """A secret file's keys and values: a JSON object of strings, or ``KEY=VALUE`` lines (blank
    lines and ``#`` comments skipped, ``export`` allowed, one pair of matching quotes around a value
    removed). An error names the line, never its content."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise SecretNotAvailable(name, f"its file is not valid JSON (line {e.lineno})") from None
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise SecretNotAvailable(name, "its JSON file must be an object of string values")
        out = data
    else:
        out = {}
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("export "):
                line = line[len("export "):].lstrip()
            key, eq, value = line.partition("=")
            key, value = key.strip(), value.strip()
            if not eq:
                raise SecretNotAvailable(name, f"line {n} of its file is not KEY=VALUE")
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            out[key] = value
    for key in out:
        if not KEY.fullmatch(key):
            raise SecretNotAvailable(name, f"its file has a key that is not letters, digits, '_', '-' or '.' ({key[:40]!r})")
    return dict(out)


class SecretRegistry:
    """The secrets of ``c.NBValidation.secrets``, checked at start (a bad entry is a ``ValueError``
    naming it and its field)."""

    def __init__(self, config: Mapping[str, Mapping[str, Any]]) -> None:
        if not isinstance(config, Mapping):
            raise ValueError("c.NBValidation.secrets: must be a mapping of secret name -> entry")
        self._entries = {e.name: e for e in (_entry(k, v) for k, v in config.items())}

    def names(self) -> list[str]:
        """Every configured name, sorted (for the server's own use: never shown to a Hub user)."""
        return sorted(self._entries)

    def check(self, name: str, caller: Caller) -> None:
        """Raise :class:`SecretNotAvailable` (the same one for both) when ``name`` is unknown or
        ``caller`` may not use it."""
        entry = self._entries.get(name) if isinstance(name, str) else None
        if entry is None or not entry.allows(caller):
            raise SecretNotAvailable(str(name))

    def kubernetes_secret(self, name: str) -> str | None:
        """The Kubernetes Secret a ``fromSecret`` entry names (None: another kind, or no such entry)."""
        entry = self._entries.get(name) if isinstance(name, str) else None
        return entry.from_secret if entry is not None else None

    def values(self, name: str) -> dict[str, str]:
        """The secret's keys and values, read now (the server's environment, or its file): blocking,
        call it off the loop. Raises :class:`SecretNotAvailable` naming what is missing, never a
        value."""
        entry = self._entries.get(name)
        if entry is None:
            raise SecretNotAvailable(name)
        if entry.from_env is not None:
            out = {}
            for key, var in entry.from_env.items():
                value = os.environ.get(var)
                if value is None:
                    raise SecretNotAvailable(name, f"the server's environment variable {var} (key {key}) is not set")
                out[key] = value
            return out
        if entry.from_secret is not None:
            raise SecretNotAvailable(name, FROM_SECRET_ONLY)
        assert entry.from_file is not None
        try:
            text = entry.from_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise SecretNotAvailable(name, f"its file {entry.from_file} cannot be read "
                                           f"({type(e).__name__}{': ' + e.strerror if isinstance(e, OSError) and e.strerror else ''})") from None
        return parse_file(text, name)
