"""``apt.txt`` beside the environment's file: repo2docker's Debian packages, one a
line, ``#`` comments, for a backend that installs them (its image)."""

from __future__ import annotations

import os
import re

from jupyter_nbvalidation.environment.reading import FIELD, RequirementsError, read_text, rel

APT_TXT = "apt.txt"
MAX_SYSTEM_PACKAGES = 200
# a Debian package name (policy 5.6.1), with an optional :architecture and =version
_APT_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?(=[A-Za-z0-9.+~:-]+)?$")


def read_apt_txt(folder: str, root: str) -> tuple[list[str], str] | None:
    """The Debian packages of ``apt.txt`` in ``folder`` (repo2docker's: one a line,
    ``#`` comments), checked as package names (``name[:arch][=version]``: nothing
    else reaches apt-get), and where it is; None when there is no apt.txt."""
    path = os.path.join(folder, APT_TXT)
    if not os.path.lexists(path):
        return None
    shown = rel(os.path.realpath(path), os.path.realpath(root))
    packages: list[str] = []
    for n, raw in enumerate(read_text(path, root, shown).splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        for word in line.split():
            if not _APT_PACKAGE.match(word):
                raise RequirementsError(FIELD, f"{shown} line {n}: {word!r} is not a Debian package name "
                                               "(name[:architecture][=version])")
            if word not in packages:
                packages.append(word)
    if len(packages) > MAX_SYSTEM_PACKAGES:
        raise RequirementsError(FIELD, f"{shown}: {len(packages)} packages; the limit is {MAX_SYSTEM_PACKAGES}")
    return packages, shown


class AptTxt:
    """repo2docker's apt.txt: system packages, installed by a backend that can."""

    name = APT_TXT

    def detect(self, folder: str) -> str | None:
        """Its path in ``folder`` (None: none there)."""
        path = os.path.join(folder, self.name)
        return path if os.path.lexists(path) else None

    def system_packages(self, folder: str, root: str) -> tuple[list[str], str] | None:
        """:func:`read_apt_txt`."""
        return read_apt_txt(folder, root)
