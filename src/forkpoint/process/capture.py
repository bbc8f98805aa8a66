"""Where a supervised command's output goes: a bounded in-memory head per stream and an optional size-capped log.

Both are fed every chunk the supervisor reads, so a chatty command can neither exhaust memory nor fill the disk,
while the pipes are always drained (a full pipe would block the command).
"""

from __future__ import annotations

import os
from pathlib import Path

from forkpoint.core.errors import ErrorKind, ReplayError


class Capture:
    """Keeps the head of a stream up to a limit and counts the rest, so memory stays bounded."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.total = 0
        self.open = True

    def feed(self, chunk: bytes) -> None:
        room = self.limit - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.total += len(chunk)

    @property
    def truncated(self) -> bool:
        return self.total > len(self.data)


class Log:
    """A private (0600) log file that never follows a link and stops writing at ``limit`` bytes."""

    def __init__(self, path: Path, limit: int) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            self.fd = os.open(path, flags, 0o600)
            os.fchmod(self.fd, 0o600)  # an existing file keeps its old mode under O_CREAT
        except OSError as exc:
            message = f"create process log {path}: {exc.strerror or exc}"
            raise ReplayError(ErrorKind.EXECUTOR, message) from exc
        self.path = path
        self.limit = limit
        self.written = 0
        self.truncated = False

    def write(self, chunk: bytes) -> None:
        room = self.limit - self.written
        if room < len(chunk):
            self.truncated = True
            chunk = chunk[: max(room, 0)]
        view = memoryview(chunk)
        try:
            while view:
                count = os.write(self.fd, view)
                view = view[count:]
                self.written += count
        except OSError as exc:
            raise ReplayError(ErrorKind.EXECUTOR, f"write process log {self.path}: {exc.strerror}") from exc

    def close(self) -> None:
        os.close(self.fd)
