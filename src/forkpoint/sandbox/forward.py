"""The continued agent's only way out of a network-less sandbox: the bridge's port, relayed over a Unix socket.

The bridge listens on the host's 127.0.0.1. An agent that shared the host's network namespace to reach it would
reach everything else too (local services, other loopback listeners, the internet), and so would what it runs:
its live tool calls and any hook it starts. So a sandbox with its own network namespace runs the agent behind a
two-part relay instead:

- on the host, ``HostRelay`` listens on a Unix socket in a fresh 0700 folder of the run's state dir and connects
  each connection to ``127.0.0.1:<bridge port>`` (the bridge sees a loopback peer as before). Both ends reach
  the socket as ``/proc/self/fd/<folder fd>/bridge.sock``: a Unix socket path is limited to 108 bytes, a state
  dir's path is not;
- inside the sandbox, ``forward_inside.py`` (stdlib only, run by the interpreter forkpoint runs on, bound
  read-only) listens on ``127.0.0.1:<bridge port>`` of the sandbox's private loopback, relays each connection to
  that Unix socket (the folder bound into the sandbox) and runs the agent as its child.

The agent's bridge URL is unchanged; any other address or port is unreachable from inside.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

#: the in-sandbox half (a script file: it runs under the sandbox's view of the file system)
FORWARD_INSIDE = Path(__file__).with_name("forward_inside.py")
_CHUNK = 65536


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(_CHUNK):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        for end, how in ((target, socket.SHUT_WR), (source, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                end.shutdown(how)


class HostRelay:
    """The host half: a Unix socket whose every connection is relayed to ``127.0.0.1:port``; a context manager
    (the folder and the socket are removed on exit, the threads end with their connections)."""

    def __init__(self, port: int, parent: Path) -> None:
        self.port = port
        # In the run's state dir (a run killed with -9 leaves it there, with the rest of its state, not in /tmp).
        parent.mkdir(parents=True, exist_ok=True)
        self.folder = Path(tempfile.mkdtemp(prefix="net-", dir=parent))
        self.path = self.folder / "bridge.sock"
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._threads: list[threading.Thread] = []
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        try:
            folder_fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                self._server.bind(f"/proc/self/fd/{folder_fd}/{self.path.name}")
            finally:
                os.close(folder_fd)
            self._server.listen(64)
        except BaseException:
            self.close()
            raise
        self._accepting = threading.Thread(target=self._accept, name="forkpoint-net-relay", daemon=True)
        self._accepting.start()

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` started inside the sandbox behind the in-sandbox listener on the bridge's port."""
        return [os.path.realpath(sys.executable), "-I", "-S", str(FORWARD_INSIDE), str(self.folder),
                self.path.name, str(self.port), "--", *argv]

    @property
    def readable(self) -> tuple[Path, ...]:
        """What the sandbox must show (read-only): the socket's folder, the interpreter and the script."""
        interpreter = Path(os.path.realpath(sys.executable))
        return tuple(dict.fromkeys((self.folder, Path(os.path.realpath(sys.base_prefix)), interpreter.parent,
                                    FORWARD_INSIDE.parent)))

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(client,), daemon=True)
            with self._lock:
                self._threads.append(thread)
            thread.start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._open += [client, upstream]
        back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
        back.start()
        _pump(client, upstream)
        back.join()
        client.close()
        upstream.close()

    def close(self) -> None:
        """Stop accepting, cut what is still open, wait (bounded) for the relay threads, remove the folder."""
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept loop
        self._server.close()
        accepting = getattr(self, "_accepting", None)
        if accepting is not None:
            accepting.join(timeout=5)
        with self._lock:
            for end in self._open:
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=5)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        with contextlib.suppress(OSError):
            self.folder.rmdir()  # a relay of a run killed with -9 is the state dir's, like the rest of it

    def __enter__(self) -> HostRelay:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
