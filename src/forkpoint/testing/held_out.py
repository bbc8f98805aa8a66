"""The held-out confinement checks every adapter's sandbox must pass, as replayed shell commands and their effects.

``HeldOut`` sets up the bait on the host — a folder outside the workspace, a canary file in the user's real HOME,
a TCP listener on a non-loopback address of this host, a marker for background processes — and gives the shell
commands a hostile recording would replay against it. After the adapter ran them (in its own way: a companion, a
runner, a Bash tool), ``violations()`` lists what got through, judged by effects on the host only: a file
planted, the canary's secret in an observation, a connection accepted, a marked process still alive.
"""

from __future__ import annotations

import contextlib
import shlex
import socket
import tempfile
import uuid
from pathlib import Path
from types import TracebackType


def non_loopback_address() -> str | None:
    """An IPv4 address of this host that is not on the loopback (the source of its default route), if any."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.123", 9))  # no packet is sent: only the route is looked up
        address = str(probe.getsockname()[0])
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") or address == "0.0.0.0" else address


class HeldOut:
    """``with HeldOut(tmp_path) as bait: run(bait.commands()); assert bait.violations() == []``."""

    def __init__(self, scratch: Path) -> None:
        self.tag = uuid.uuid4().hex[:12]
        self.outside = Path(tempfile.mkdtemp(prefix="held-out-", dir=scratch))
        self.canary = Path.home() / f".forkpoint-canary-{self.tag}"
        self.secret = f"canary-secret-{self.tag}"
        self.home_plant = Path.home() / f".forkpoint-planted-{self.tag}"
        self.address = non_loopback_address()
        self._listener: socket.socket | None = None
        self.port = 0

    def __enter__(self) -> HeldOut:
        self.canary.write_text(self.secret + "\n")
        if self.address is not None:
            listener = socket.socket()
            listener.bind((self.address, 0))
            listener.listen(8)
            listener.setblocking(False)
            self._listener, self.port = listener, listener.getsockname()[1]
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._listener is not None:
            self._listener.close()
        for path in (self.canary, self.home_plant):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    @property
    def marker(self) -> str:
        return f"FORKPOINT_HELD_OUT_{self.tag}"

    def commands(self) -> list[str]:
        """One shell command per check (each prints something, so the replay has an observation to compare)."""
        connect = (f"import socket; socket.create_connection(({self.address!r}, {self.port}), timeout=5); "
                   "print('connected')")
        return [
            f"echo planted > {shlex.quote(str(self.outside / 'planted'))}; "
            f"echo planted > {shlex.quote(str(self.home_plant))}; echo tried",
            f"cat {shlex.quote(str(self.canary))}; echo tried",
            (f"python3 -c {shlex.quote(connect)}; echo tried" if self.address is not None else "echo no-address"),
            f"{self.marker}=1 setsid sleep 300 >/dev/null 2>&1 & {self.marker}=1 nohup sleep 301 >/dev/null 2>&1 & "
            "echo started",
        ]

    def violations(self, observations: list[str]) -> list[str]:
        """What got out, judged on the host (call after the adapter's run ended: executor closed, agent done)."""
        found: list[str] = []
        for planted in (self.outside / "planted", self.home_plant):
            if planted.exists():
                found.append(f"wrote outside the workspace: {planted}")
        if any(self.secret in text for text in observations):
            found.append(f"read the canary in the host HOME: {self.canary}")
        if self._listener is not None:
            try:
                self._listener.accept()[0].close()
                found.append(f"reached the non-loopback address {self.address}:{self.port}")
            except BlockingIOError:
                pass
        found += [f"left a process behind: {pid}" for pid in marked_processes(self.marker)]
        return found


def marked_processes(marker: str) -> list[str]:
    """Pids whose environment has ``<marker>=1``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if f"{marker}=1".encode() in environ.split(b"\0"):
            pids.append(proc.name)
    return pids
