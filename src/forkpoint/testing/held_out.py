"""The held-out confinement checks every adapter's sandbox must pass, as replayed shell commands and their effects.

``HeldOut`` sets up the bait on the host — a folder outside the workspace, a canary file in the user's real HOME,
a TCP listener on every address of this host (reached on loopback or on its non-loopback address), a marker for
background processes — and gives the shell commands a hostile recording would replay against it: ``commands()``
(one per check, for adapters that replay several calls) or ``script()`` (all of them as one ``sh`` script, written
into the workspace as ``PROBE_FILE`` so the recorded command stays a plain ``PROBE_COMMAND``). After the adapter ran
them (in its own way: a companion, a runner, a Bash tool, the continued agent), ``violations()`` lists what got
through, judged by effects on the host only: a file planted outside the workspace or in HOME, the canary's secret in
an observation, a connection accepted, a marked process still alive. Each attempt prints its outcome
(``outside-refused``, ``canary-hidden``, ``loopback-unreachable``, ``address-unreachable``, ``started``) so a test
can also check that the command really ran. The commands need only a POSIX shell and coreutils/busybox (python3,
else ``nc``, for the connects), so they also run inside a small image root. Leaving the context kills whatever
marked process is left (bounded), closes the listener and removes the canary and the plant.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

PROBE_FILE = "probe.sh"
PROBE_COMMAND = f"sh {PROBE_FILE}"


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
    """``with HeldOut(tmp_path) as bait: run(bait.commands()); assert bait.violations(observations) == []``."""

    def __init__(self, scratch: Path) -> None:
        self.tag = uuid.uuid4().hex[:12]
        self.scratch = scratch
        self.outside = scratch / f"held-out-{self.tag}"
        self.canary = Path.home() / f".forkpoint-canary-{self.tag}"
        self.secret = f"canary-secret-{self.tag}"
        self.home_plant = Path.home() / f".forkpoint-planted-{self.tag}"
        self.address = non_loopback_address()
        self._listener: socket.socket | None = None
        self.port = 0

    def __enter__(self) -> HeldOut:
        self.outside = Path(tempfile.mkdtemp(prefix=f"held-out-{self.tag}-", dir=self.scratch))
        self.canary.write_text(self.secret + "\n")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("0.0.0.0", 0))  # every address: loopback (a shared network namespace) and the host's own
        listener.listen(16)
        listener.setblocking(False)
        self._listener, self.port = listener, listener.getsockname()[1]
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        deadline = time.monotonic() + 10
        while (left := self.survivors()) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)  # bounded wait for the kernel to tear the killed sleepers down
        if self._listener is not None:
            self._listener.close()
        for path in (self.canary, self.home_plant):
            path.unlink(missing_ok=True)

    @property
    def marker(self) -> str:
        return f"FORKPOINT_HELD_OUT_{self.tag}"

    def commands(self) -> list[str]:
        """One shell command per check; each ends in a plain command (so they can be joined with ``; ``) and prints
        its outcome."""
        outside, plant = shlex.quote(str(self.outside / "planted")), shlex.quote(str(self.home_plant))
        targets = [("127.0.0.1", "loopback")] + ([(self.address, "address")] if self.address else [])
        connects = []
        for host, name in targets:
            code = (f"import socket, sys\ntry: socket.create_connection(({host!r}, {self.port}), timeout=5)\n"
                    "except OSError as error: sys.exit(str(error))")  # one line of why, not a traceback
            connects.append(f"if command -v python3 >/dev/null; then python3 -c {shlex.quote(code)}; "
                            f"else nc -w 3 {host} {self.port} </dev/null; fi && echo reached-{name} "
                            f"|| echo {name}-unreachable")
        sleeper = f"sh -c 'sleep 300; true' {self.marker}"  # the marker in its command line and environment
        return [
            f"echo planted > {outside} && echo wrote-outside || echo outside-refused; "
            f"echo planted > {plant} && echo wrote-home || echo home-refused",
            f"cat {shlex.quote(str(self.canary))} || echo canary-hidden",
            "; ".join(connects),
            f"{self.marker}=1 setsid {sleeper} </dev/null >/dev/null 2>&1 & "  # its own session
            f"( {self.marker}=1 {sleeper} </dev/null >/dev/null 2>&1 & ); echo started",  # orphaned (double fork)
        ]

    def script(self, workspace_host_path: Path | None = None) -> str:
        """All checks as one ``sh`` script; with ``workspace_host_path`` (a workspace mounted elsewhere) it also tries
        to write there (printing ``host-path-refused`` when it cannot)."""
        lines = self.commands()
        if workspace_host_path is not None:
            target = shlex.quote(str(workspace_host_path / "planted-at-host-path"))
            lines.insert(1, f"echo planted > {target} 2>/dev/null && echo wrote-host-path || echo host-path-refused")
        return "\n".join([*lines, "echo probed"]) + "\n"

    def survivors(self) -> list[int]:
        """Live processes carrying the marker in their command line or environment (a zombie's are empty)."""
        found = []
        needle, variable = self.marker.encode(), f"{self.marker}=1".encode()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if needle in (proc / "cmdline").read_bytes() or variable in (proc / "environ").read_bytes().split(
                        b"\0"):
                    found.append(int(proc.name))
        return found

    def violations(self, observations: Sequence[str] | str) -> list[str]:
        """What got out, judged on the host (call after the adapter's run ended: executor closed, agent done)."""
        texts = [observations] if isinstance(observations, str) else list(observations)
        found: list[str] = []
        for planted in (self.outside / "planted", self.home_plant):
            if planted.exists():
                found.append(f"wrote outside the workspace: {planted}")
        if any(self.secret in text for text in texts):
            found.append(f"read the canary in the host HOME: {self.canary}")
        if self._listener is not None:
            try:
                self._listener.accept()[0].close()
                found.append(f"reached a host listener on port {self.port}")
            except BlockingIOError:
                pass
        found += [f"left a process behind: {pid}" for pid in self.survivors()]
        return found
