"""Credentials in a job's requirements (``https://user:PASS@host``,
``https://TOKEN@host``): never stored, never shown.

Everything stored or shown has ``***`` in place of a credential (the display
form). The build form has ``${NBV_SECRET_<n>}`` there (pip and uv expand it),
the values set in the build's environment. The process that accepted the job
holds the values in memory (:func:`hold`); :func:`placeholders` turns a stored
display line back into the build form."""

from __future__ import annotations

import re

from jupyter_nbvalidation.core.redaction import MASK, userinfo

SECRET_ENV_PREFIX = "NBV_SECRET_"
PLACEHOLDER = re.compile(r"\$\{" + SECRET_ENV_PREFIX + r"(\d+)\}")
_MASKED = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^/?#@\s]*\*\*\*[^/?#@\s]*)@")


def placeholder(n: int) -> str:
    return "${" + f"{SECRET_ENV_PREFIX}{n}" + "}"


def redact_url(url: str, secrets: list[str]) -> tuple[str, str]:
    """(build form, display form) of a URL: its credential, appended to ``secrets``,
    becomes a placeholder / ***. Raises ValueError for a credential that is the mask."""
    info = userinfo(url)
    if info is None or not info.secret:
        return url, url
    if MASK in info.secret:
        raise ValueError(f"{MASK} is not a credential (it is how credentials are shown)")
    n = len(secrets)
    secrets.append(info.secret)
    return info.with_secret(placeholder(n)), info.masked()


def placeholders(line: str, counter: list[int]) -> str:
    """A stored (display) line with a placeholder for each ``***`` credential, numbered
    on from ``counter[0]`` (which counts them)."""
    def sub(m: re.Match[str]) -> str:
        n = counter[0]
        counter[0] += 1
        info = m.group(2)
        return m.group(1) + info.replace(MASK, placeholder(n)) + "@"
    return _MASKED.sub(sub, line)


_HELD: dict[str, list[str]] = {}  # job name -> credential values, this process only


def hold(job_name: str, secrets: list[str]) -> None:
    if secrets:
        _HELD[job_name] = list(secrets)


def release(job_name: str) -> None:
    _HELD.pop(job_name, None)


def held(job_name: str) -> list[str] | None:
    return _HELD.get(job_name)
