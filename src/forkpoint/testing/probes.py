"""Held-out isolation probes for a replayed command: one shell script that tries to escape, and the host-side
checks of its effects (not of what it printed).

``HostProbes`` prepares, on the host: a canary in the user's real HOME, a folder outside the workspace, a TCP
listener on every address (reached on loopback or on the host's non-loopback address) and a unique marker.
``script()`` is the command text a recording's call is swapped for (written into the workspace as ``probe.sh``,
so the recorded command stays a plain ``sh probe.sh``). After the run, ``escapes()`` lists what got out: a file
written outside the workspace, the canary read (its content in the observation), a connection accepted by the
listener, a process left running. Used by the per-adapter sandbox e2e tests (``tests/e2e/test_*_sandbox.py``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
import uuid
from pathlib import Path
from types import TracebackType

PROBE_FILE = "probe.sh"
PROBE_COMMAND = f"sh {PROBE_FILE}"


def non_loopback_address() -> str | None:
    """The host's address on its default route (no packet is sent), or None when it has only loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.254", 9))
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


class HostProbes:
    """The host side of one probe run (a context manager: the canary and the listener are removed on exit)."""

    def __init__(self, outside: Path) -> None:
        self.marker = f"forkpoint-probe-{uuid.uuid4().hex}"
        self.canary_text = f"CANARY-{uuid.uuid4().hex}"
        self.canary = Path(os.path.expanduser("~")) / f".{self.marker}-canary"
        self.outside = outside
        self.address = non_loopback_address()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("0.0.0.0", 0))
        self.listener.listen(16)
        self.listener.setblocking(False)
        self.port: int = self.listener.getsockname()[1]
        outside.mkdir(parents=True, exist_ok=True)
        self.canary.write_text(self.canary_text + "\n")

    def script(self, workspace_host_path: Path) -> str:
        """What the replayed command runs (sh): each escape attempt, its outcome printed, then a detached process."""
        connect = "import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)"
        targets = [("127.0.0.1", "loopback")] + ([(self.address, "address")] if self.address else [])
        lines = [
            f"echo planted > {self.outside}/planted 2>/dev/null && echo wrote-outside || echo outside-refused",
            f"echo planted > {workspace_host_path}/planted-at-host-path 2>/dev/null && echo wrote-host-path "
            "|| echo host-path-refused",
            f"cat {self.canary} 2>/dev/null || echo canary-hidden",
            *(f"python3 -c '{connect}' {host} {self.port} 2>/dev/null && echo reached-{name} || echo {name}-unreachable"
              for host, name in targets),
            f"setsid python3 -c 'import time; time.sleep(300)' {self.marker} </dev/null >/dev/null 2>&1 &",
            f"nohup python3 -c 'import time; time.sleep(301)' {self.marker} </dev/null >/dev/null 2>&1 &",
            "echo probed",
        ]
        return "\n".join(lines) + "\n"

    def survivors(self) -> list[int]:
        """Processes whose command line carries the marker (the detached sleepers, if anything let them live; a
        zombie's command line is empty)."""
        found = []
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                with contextlib.suppress(OSError):
                    if self.marker.encode() in (proc / "cmdline").read_bytes():
                        found.append(int(proc.name))
        return found

    def escapes(self, observed: str) -> list[str]:
        """Every effect that got out of the sandbox (empty: contained). ``observed`` is the fresh observation text."""
        found = []
        if (self.outside / "planted").exists():
            found.append("wrote outside the workspace")
        if self.canary_text in observed:
            found.append("read the canary in the host HOME")
        try:
            self.listener.accept()[0].close()
            found.append("reached a host listener")
        except BlockingIOError:
            pass
        if self.survivors():
            found.append(f"left processes {self.survivors()}")
        return found

    def close(self) -> None:
        """Kill what the probe left (only its own sleepers carry the marker; bounded wait until they are gone),
        close the listener, remove the canary."""
        deadline = time.monotonic() + 10
        while (left := self.survivors()) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        self.listener.close()
        self.canary.unlink(missing_ok=True)

    def __enter__(self) -> HostProbes:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
