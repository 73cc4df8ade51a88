"""A real sshd on loopback serving the git repositories of a folder (``ssh://USER@127.0.0.1:PORT/abs/path``),
for notebooks from git over ssh: its own host key, config and authorized key, in a folder of
the test's; public-key authentication only. The fetches in the tests go through git's own
ssh transport (git-upload-pack run by the login shell)."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def keypair(path: Path) -> tuple[str, str]:
    """A new ed25519 key pair without a passphrase: (private key text, public key line)."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "nbv-test", "-f", str(path)], check=True)
    return path.read_text(), path.with_suffix(".pub").read_text().strip()


class GitSSH:
    """sshd -D on 127.0.0.1 letting in the holder of ``authorized`` (public key lines)."""

    def __init__(self, base: Path, authorized: list[str]):
        self.base = base
        self.base.mkdir(parents=True, exist_ok=True)
        self.user = getpass.getuser()
        host_key = base / "host_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
        (base / "authorized_keys").write_text("\n".join(authorized) + "\n")
        os.chmod(base / "authorized_keys", 0o600)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.config = base / "sshd_config"
        self.config.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}", f"PidFile {base / 'sshd.pid'}",
            f"AuthorizedKeysFile {base / 'authorized_keys'}", "PubkeyAuthentication yes",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
            "PermitRootLogin prohibit-password", f"AllowUsers {self.user}", "LogLevel VERBOSE", ""]))
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, repo: Path) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}{repo}"

    def __enter__(self) -> "GitSSH":
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # its privilege separation folder
        self.log = open(self.base / "sshd.log", "wb")
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.base / "sshd.log").read_text()
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.1)
        raise AssertionError("sshd did not listen within 20 s:\n" + (self.base / "sshd.log").read_text())

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
