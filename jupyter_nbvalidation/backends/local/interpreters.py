"""The base interpreters of the local backend: the version of ``LocalBackend.python``
(read at start), and the other interpreters environments may be built with
(``LocalBackend.pythons``, else every python3 and python3.N on PATH), each asked its
version once, in a thread, only when a repository asks for a Python ``python`` is not."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess

from jupyter_nbvalidation.backends.local.state import LocalState


class InterpretersRoom(LocalState):
    """A room of LocalBackend (backend.py): the state it uses is declared by LocalState (state.py)."""

    async def _check_python(self) -> None:
        proc = await asyncio.create_subprocess_exec(
            self.python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        out, _ = await proc.communicate()
        self._python_version = out.decode().strip() or "unknown"
        # the other interpreters (LocalBackend.pythons) are not asked here: only a job whose
        # repository asks for a Python this one is not needs them (_know_pythons_for)

    def _candidate_pythons(self) -> list[str]:
        if self.pythons:
            return list(self.pythons)
        found: list[str] = []
        seen: set[str] = set()
        for folder in os.environ.get("PATH", "").split(os.pathsep):
            with contextlib.suppress(OSError):
                for name in sorted(os.listdir(folder or ".")):
                    path = os.path.join(folder, name)
                    if re.fullmatch(r"python3(\.\d+)?", name) and os.access(path, os.X_OK):
                        real = os.path.realpath(path)  # /bin/python3 and /usr/bin/python3.11: asked once
                        if real not in seen:
                            seen.add(real)
                            found.append(path)
        return found

    def _wants_other_python(self, python_requires: tuple[str, str] | None) -> bool:
        """Whether a repository asks for a Python that ``python`` (read at start) is not."""
        if python_requires is None:
            return False
        from packaging.specifiers import InvalidSpecifier, SpecifierSet  # deferred: start-up time (packaging)

        try:
            wanted = SpecifierSet(python_requires[0])
        except InvalidSpecifier:
            return False  # refused at submit
        return not (self._python_version and wanted.contains(self._python_version, prereleases=True))

    async def _know_pythons_for(self, python_requires: tuple[str, str] | None) -> None:
        """Ask the other interpreters their versions, in a thread, once, when a job needs
        one: before any key of such a job is computed on the event loop. Not at start:
        every python3* on PATH is run to ask it, about a second of CPU and two of wall time
        where pyenv's shims (shell scripts) are on PATH, which every server, CLI and
        in-process run would pay for the few jobs that ask for another Python."""
        if self._interpreters is None and self._wants_other_python(python_requires):
            await asyncio.to_thread(self.build_pythons)

    def build_pythons(self) -> list[tuple[str, str]]:
        """(path, version) of the other base interpreters environments can be built with
        (LocalBackend.pythons), each asked its version once; one per version, the first
        found. Runs interpreters: in a worker thread (``_know_pythons_for``, the submit's
        checks), never on the event loop."""
        if self._interpreters is None:
            got: dict[str, str] = {}
            for path in self._candidate_pythons():
                try:
                    out = subprocess.run([path, "-I", "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3]) "
                                          "if sys.implementation.name == 'cpython' else None"],
                                         capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
                except (OSError, subprocess.TimeoutExpired):
                    continue
                version = out.stdout.strip()
                if out.returncode == 0 and re.fullmatch(r"3\.\d+\.\d+", version):
                    got.setdefault(version, path)
            self._interpreters = [(path, version) for version, path in got.items()]
        return self._interpreters

    def build_python_version(self) -> str | None:
        """Called in a worker thread (service._collect): before start() has read it, the
        base interpreter is asked here, synchronously, off the event loop."""
        if self._python_version is None:
            try:
                out = subprocess.run([self.python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                                     capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
                self._python_version = out.stdout.strip() or "unknown"
            except (OSError, subprocess.TimeoutExpired):
                return None
        return self._python_version if self._python_version != "unknown" else None

