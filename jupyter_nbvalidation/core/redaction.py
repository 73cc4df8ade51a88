"""The one masker of credentials (issue 23): what status, events, logs, build
logs, snapshots and error messages show in place of a secret.

Pure: no I/O, standard library only. One rule for the user-info of a URL,
wherever the URL is (a requirement line, a message, a log line):

- ``scheme://user:secret@`` → ``scheme://user:***@`` (the user name stays);
- ``scheme://secret@`` (no colon: a token alone) → ``scheme://***@``;
- an empty secret (``scheme://user:@``) has nothing to hide and stays.

The user-info runs to the authority's last ``@`` (``user:p@ss@host`` hides
``p@ss``, as pip and urllib split it). Masked text masks to itself.

:func:`scrub` is the free-text scrubber: the given secret values (longest
first), then the URL rule, then ``key=value`` / ``key: value`` / ``key value``
for the credential words (``token``, ``password``, ``passwd``, ``secret``,
``authorization``, ``api_key``; quoted as in JSON too; ``Authorization: Bearer x``
hides ``Bearer x``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

MASK = "***"

# A scheme starts a word (the look-behind keeps the scan linear on a long run of letters).
_SCHEME = r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]{0,31}://)"
# The user-info: up to the authority's last '@' (greedy), never past its end ('/', '?', '#'),
# a blank or a quoting character.
_USERINFO = re.compile(_SCHEME + r"([^/?#\s\"<>`]+)@")
# [an option's --], key, [closing quote], separator ('=' or ':', never '==', a version pin; or
# blanks, which count only after an option's --, or after Authorization), [opening quote], value
# (not one masked already)
_KEY_VALUE = re.compile(
    r"(?i)(--)?(token|password|passwd|secret|authorization|api[_-]?key)(['\"]?)(\s*[=:](?!=)\s*|\s+)(['\"]?)"
    r"(?!" + re.escape(MASK) + r")(?:(?:bearer|basic|token)\s+)?[^\s,;'\"&]+")


def _key_value(m: re.Match[str]) -> str:
    option, key, close, sep, open_ = m.group(1, 2, 3, 4, 5)
    if not sep.strip() and not option and key.lower() != "authorization":  # "unexpected token in line 3"
        return m.group(0)
    return f"{option or ''}{key}{close}{sep}{open_}{MASK}"


@dataclass(frozen=True)
class Userinfo:
    """The user-info of a URL: ``scheme`` (with ``://``), ``user``, whether a
    colon follows it (``colon``), the ``secret`` (the password, or the whole
    user-info when there is no colon) and the ``rest`` after the ``@``."""

    scheme: str
    user: str
    colon: bool
    secret: str
    rest: str

    def masked(self) -> str:
        """The URL as it is shown."""
        return self.with_secret(MASK)

    def with_secret(self, value: str) -> str:
        """The URL with ``value`` in place of the secret (the build form puts a placeholder there)."""
        if not self.secret:
            return f"{self.scheme}{self.user}{':' if self.colon else ''}@{self.rest}"
        return f"{self.scheme}{self.user}:{value}@{self.rest}" if self.colon else f"{self.scheme}{value}@{self.rest}"


def _parts(m: re.Match[str], rest: str) -> Userinfo:
    info = m.group(2)
    user, colon, password = info.partition(":")
    return Userinfo(m.group(1), user if colon else "", bool(colon), password if colon else info, rest)


def userinfo(url: str) -> Userinfo | None:
    """The user-info of ``url`` (a URL at the start of the text), None when it has none."""
    m = _USERINFO.match(url)
    return _parts(m, url[m.end():]) if m else None


def mask_urls(text: str) -> str:
    """``text`` with the user-info of every URL in it masked by the one rule."""
    def sub(m: re.Match[str]) -> str:
        return _parts(m, "").masked()

    return _USERINFO.sub(sub, text)


def mask_values(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with each of the given secret values replaced by ``***``, longest first."""
    for s in sorted({s for s in secrets if s and s not in MASK}, key=len, reverse=True):
        text = text.replace(s, MASK)
    return text


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """Free text (a message, a log line, a note) without credentials: the given
    secret values, the user-info of URLs, and ``key=value`` secrets."""
    text = mask_urls(mask_values(text, secrets))
    return _KEY_VALUE.sub(_key_value, text)
