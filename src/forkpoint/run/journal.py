"""The durable replay fact journal of one run's state dir, its ``run.lock`` and the ambiguity check.

Why it exists: a replay re-runs real tool calls with real side effects. A fact that PRECEDES an effect
(``tool_started`` before a call, ``continuation_started`` before the agent runs) and the terminal
``run_finished``/``run_failed`` are appended and fsync'd BEFORE the engine acts on them, so after a crash the next
run can tell "never ran" from "may have run" and refuses to repeat a call whose effects are unknown
(ambiguous_execution) instead of silently running it twice.

Facts that only record what already happened (``tool_finished``, ``batch_committed``...) are appended with
``sync=False``: written at once (a killed process loses nothing: the page cache keeps them) and made durable by the
next synced append or by ``close``. The file is append-only and written in order, so an OS crash can lose only a
suffix of such records; a lost ``tool_finished`` leaves its ``tool_started`` unmatched, which the next run refuses
as ambiguous: fail closed, one fsync per re-run call instead of two or more.

A journal opened with ``durable=False`` never fsyncs: for a run that causes no effect (prepare-only), a record lost
to an OS crash protects nothing, and a later durable open of the same file makes the header and the directory
entry durable before any record can precede an effect.

Format (``<state_dir>/journal.jsonl``, forkpoint's own; one orjson line per record)::

    {"format":"forkpoint.journal/v1","journal":"<uuid4 hex>","created_at":"<ISO-8601 UTC>"}
    {"seq":0,"at":"2025-01-01T12:00:00.123Z","event":"run_started", ...payload fields}
    {"seq":1,"at":"...","event":"tool_started","call_id":"...","tool":"..."}

What the facts mean for a next run (the ambiguity rules) is pure and lives in ``forkpoint.run.journal_rules``; its
functions are re-exported here.

Privacy: the journal stores whatever payload the caller passes. Callers must never pass the boundary prompt
text or secrets; record only flags, lengths and SHA-256 digests (ARCHITECTURE.md, "Output").
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import orjson

from forkpoint.core.errors import ErrorKind, ReplayError, no_space
from forkpoint.core.results import write_atomic
from forkpoint.run.journal_rules import describe_ambiguous, executed_calls, find_ambiguous

__all__ = [
    "JOURNAL_FILE",
    "JOURNAL_FORMAT",
    "LOCK_FILE",
    "MAX_RECORD_BYTES",
    "RESERVED_KEYS",
    "Journal",
    "describe_ambiguous",
    "executed_calls",
    "find_ambiguous",
    "read_events",
]

JOURNAL_FORMAT: Final = "forkpoint.journal/v1"
JOURNAL_FILE: Final = "journal.jsonl"
LOCK_FILE: Final = "run.lock"
MAX_RECORD_BYTES: Final = 1 << 20
"""One record (a line, newline included) may not exceed 1 MiB: a bigger payload is a caller bug."""

RESERVED_KEYS: Final = frozenset({"seq", "at", "event"})

_HEADER_PREFIX: Final = b'{"format":"' + JOURNAL_FORMAT.encode() + b'",'
_HEADER_KEYS: Final = frozenset({"format", "journal", "created_at"})
_JOURNAL_ID: Final = re.compile(r"[0-9a-f]{32}")
_READ_CHUNK: Final = 1 << 20


def read_events(path: Path) -> list[dict[str, Any]]:
    """All complete records of the journal at ``path`` without taking the lock (diagnostics, tests).

    A missing or empty file has no records. An incomplete final line is ignored (the writer may be
    mid-append) but never repaired here: only the lock owner may change the file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise _executor(f"open journal {path}: {exc}") from None
    try:
        _require_regular(fd, path)
        data = _read_all(fd, path)
    finally:
        os.close(fd)
    return _parse(data, path).records


class Journal:
    """The open, locked journal of one state dir; create it with :meth:`Journal.open`.

    While open it holds an exclusive ``flock`` on ``run.lock``, so two forkpoint processes never replay
    into the same state. A failed write makes it refuse further appends: after a failed write or fsync
    the file's state is unknown, and the torn tail is repaired by the next :meth:`open`.
    """

    def __init__(
        self,
        path: Path,
        lock_fd: int,
        fd: int,
        header: dict[str, Any],
        records: list[dict[str, Any]],
        size: int,
        durable: bool = True,
    ) -> None:
        self._path = path
        self._durable = durable
        self._lock_fd: int | None = lock_fd
        self._fd: int | None = fd
        self._header = header
        self._records = records
        self._size = size
        self._failed = False
        self._unsynced = False

    @classmethod
    def open(cls, state_dir: Path, *, durable: bool = True) -> Journal:
        """Create/lock the state dir, recover its records (repairing a torn tail) and refuse ambiguity.

        ``durable=False`` (a run that causes no effect) skips every fsync; see the module doc.

        Raises ReplayError: ambiguous_execution when another process holds the lock, the journal is not
        ours or is corrupt (left untouched), or a started tool call has no recorded outcome; executor on
        I/O failure. The lock is released whenever this raises.
        """
        try:
            state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise _io_failure(f"create state dir {state_dir}", exc, state_dir) from None
        lock_path = state_dir / LOCK_FILE
        try:
            lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise _io_failure(f"open run lock {lock_path}", exc, lock_path) from None
        try:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise _ambiguous(f"another forkpoint process owns the state dir {state_dir}") from None
            except OSError as exc:
                raise _executor(f"lock {lock_path}: {exc}") from None
            return cls._recover(state_dir / JOURNAL_FILE, lock_fd, durable)
        except BaseException:
            os.close(lock_fd)  # closing the only descriptor releases the flock
            raise

    @classmethod
    def _recover(cls, path: Path, lock_fd: int, durable: bool) -> Journal:
        fd = _open_journal_file(path)
        try:
            _require_regular(fd, path)
            data = _read_all(fd, path)
            recovered = _parse(data, path)  # refuses before anything is written: a bad file stays untouched
            try:
                if recovered.header is None:  # new file, empty file, or a header torn by a crash
                    header = _new_header()
                    os.ftruncate(fd, 0)
                    line = orjson.dumps(header, option=orjson.OPT_APPEND_NEWLINE)
                    _write_all(fd, line)
                    if durable:
                        os.fsync(fd)
                        _fsync_dir(path.parent)  # also when it existed: a non-durable run may have created it
                    size = len(line)
                else:
                    header = recovered.header
                    size = recovered.valid_size
                    # tail repair: the torn append never returned, so nothing acted on that record
                    if size < len(data):
                        os.ftruncate(fd, size)
                    if durable:  # the file may come from a non-durable run: make it and its entry durable now
                        os.fsync(fd)
                        _fsync_dir(path.parent)
            except OSError as exc:
                raise _io_failure(f"recover journal {path}", exc, path) from None
            ambiguous = describe_ambiguous(recovered.records)
            if ambiguous is not None:
                raise _ambiguous(
                    f"state contains {ambiguous}; its effects are unknown — use a fresh workspace and a new run id "
                    "to replay from the start"
                )
        except BaseException:
            os.close(fd)
            raise
        return cls(path, lock_fd, fd, header, recovered.records, size, durable)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def journal_id(self) -> str:
        return str(self._header["journal"])

    def append(self, event: str, /, *, sync: bool = True, **fields: Any) -> None:
        """Record one fact: returns after the line is written and (``sync``, the default) fsync'd together with
        every earlier unsynced record. ``sync=False`` only for facts that follow an effect (see the module doc).

        Payload keys may not be ``seq``, ``at``, ``event`` or ``sync``; never pass prompt text or secrets.
        """
        fd = self._writable_fd()
        if not isinstance(event, str) or not event:
            raise _internal(f"journal event name must be a non-empty string, got {event!r}")
        clash = sorted(RESERVED_KEYS & fields.keys())
        if clash:
            raise _internal(f"journal event {event!r}: payload keys {clash} are reserved")
        record = {"seq": len(self._records), "at": _now(), "event": event, **fields}
        try:
            line = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
        except orjson.JSONEncodeError as exc:
            raise _internal(f"journal event {event!r} is not JSON-serializable: {exc}") from None
        if len(line) > MAX_RECORD_BYTES:
            raise _internal(f"journal event {event!r} is {len(line)} bytes; the limit is {MAX_RECORD_BYTES}")
        try:
            _write_all(fd, line)
            if sync and self._durable:
                os.fsync(fd)
        except OSError as exc:
            self._failed = True
            raise _io_failure(f"commit journal record {event!r} to {self._path}", exc, self._path) from None
        self._size += len(line)
        self._unsynced = self._durable and not sync
        self._records.append(orjson.loads(line))  # keep exactly what is on disk, not the caller's objects

    def sync(self) -> None:
        """Make every appended record durable now (a no-op when nothing is pending)."""
        fd = self._writable_fd()
        if self._unsynced:
            try:
                os.fsync(fd)
            except OSError as exc:
                self._failed = True
                raise _executor(f"fsync journal {self._path}: {exc}") from None
            self._unsynced = False

    def events(self) -> list[dict[str, Any]]:
        """Every committed record of this journal, recovered ones included, oldest first (copies)."""
        return [dict(record) for record in self._records]

    def completed_calls_in_current_run(self) -> int:
        """Distinct call ids that ran (``tool_finished``, not refused before any effect) since the last
        ``run_started`` (or the journal start)."""
        start = 0
        for index, record in enumerate(self._records):
            if record["event"] == "run_started":
                start = index + 1
        return len(executed_calls(self._records[start:]))

    def copy_to(self, path: Path, *, durable: bool = True) -> None:
        """Atomically write the committed journal bytes to ``path`` (the output's ``replay-events.jsonl``)."""
        if self._fd is None:
            raise _internal(f"journal {self._path} is closed")
        try:
            data = _pread_exact(self._fd, self._size)
            write_atomic(path, data, durable=durable)
        except OSError as exc:
            raise _io_failure(f"copy journal to {path}", exc, path) from None

    def close(self) -> None:
        """Close the journal and release the state dir lock; idempotent."""
        fd, self._fd = self._fd, None
        lock_fd, self._lock_fd = self._lock_fd, None
        try:
            if fd is not None:
                try:
                    if self._unsynced and not self._failed:
                        with contextlib.suppress(OSError):  # best effort: the records are written already
                            os.fsync(fd)
                finally:
                    os.close(fd)
        finally:
            if lock_fd is not None:
                with contextlib.suppress(OSError):
                    fcntl.flock(lock_fd, fcntl.LOCK_UN)
                os.close(lock_fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _writable_fd(self) -> int:
        if self._fd is None:
            raise _internal(f"journal {self._path} is closed")
        if self._failed:
            raise _executor(f"journal {self._path} refused the append: an earlier write failed")
        return self._fd


@dataclass(frozen=True)
class _Recovered:
    header: dict[str, Any] | None  # None: no complete header line yet
    records: list[dict[str, Any]]
    valid_size: int  # bytes up to the end of the last complete line


def _parse(data: bytes, path: Path) -> _Recovered:
    """Validate every complete line; an incomplete last line counts as torn only if it could be ours."""
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]
    valid_size = len(data) - len(tail)
    if not complete:
        if tail and not _could_be_torn(tail, _HEADER_PREFIX):
            raise _unsupported(path)
        return _Recovered(None, [], 0)
    header = _parse_header(complete[0], path)
    records = [_parse_record(raw, index, path) for index, raw in enumerate(complete[1:])]
    if tail and not _could_be_torn(tail, b'{"seq":%d,"at":"' % len(records)):
        line = len(complete) + 1
        raise _corrupt(path, line, "incomplete final line that is not a torn journal record")
    return _Recovered(header, records, valid_size)


def _could_be_torn(tail: bytes, expected_start: bytes) -> bool:
    return expected_start.startswith(tail) or tail.startswith(expected_start)


def _parse_header(raw: bytes, path: Path) -> dict[str, Any]:
    try:
        header = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise _unsupported(path) from None
    if not isinstance(header, dict) or header.get("format") != JOURNAL_FORMAT:
        raise _unsupported(path)
    if set(header) != _HEADER_KEYS:
        raise _corrupt(path, 1, f"header keys must be {sorted(_HEADER_KEYS)}")
    journal_id = header["journal"]
    if not isinstance(journal_id, str) or not _JOURNAL_ID.fullmatch(journal_id):
        raise _corrupt(path, 1, "header journal id must be 32 lowercase hex digits")
    if not isinstance(header["created_at"], str):
        raise _corrupt(path, 1, "header created_at must be a string")
    return header


def _parse_record(raw: bytes, seq: int, path: Path) -> dict[str, Any]:
    line = seq + 2
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _corrupt(path, line, f"invalid JSON ({exc})") from None
    if not isinstance(record, dict):
        raise _corrupt(path, line, "not a JSON object")
    found = record.get("seq")
    if not isinstance(found, int) or isinstance(found, bool):
        raise _corrupt(path, line, "missing or non-integer seq")
    if found != seq:
        raise _corrupt(path, line, f"seq {found} where {seq} was expected")
    if not isinstance(record.get("at"), str):
        raise _corrupt(path, line, "missing or non-string at")
    event = record.get("event")
    if not isinstance(event, str) or not event:
        raise _corrupt(path, line, "missing or empty event")
    return record


def _new_header() -> dict[str, Any]:
    return {"format": JOURNAL_FORMAT, "journal": uuid.uuid4().hex, "created_at": _now()}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _open_journal_file(path: Path) -> int:
    """Open read-write/append (created if missing), refusing symlinks."""
    flags = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        try:
            return os.open(path, flags)
        except FileNotFoundError:
            return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise _executor(f"open journal {path}: {exc}") from None


def _require_regular(fd: int, path: Path) -> None:
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        raise _executor(f"stat journal {path}: {exc}") from None
    if not stat.S_ISREG(mode):
        raise _executor(f"journal {path} is not a regular file")


def _read_all(fd: int, path: Path) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    try:
        while chunk := os.pread(fd, _READ_CHUNK, offset):
            chunks.append(chunk)
            offset += len(chunk)
    except OSError as exc:
        raise _executor(f"read journal {path}: {exc}") from None
    return b"".join(chunks)


def _pread_exact(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while offset < size:
        chunk = os.pread(fd, min(_READ_CHUNK, size - offset), offset)
        if not chunk:
            raise OSError(f"journal shrank to {offset} of {size} committed bytes")
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _executor(message: str) -> ReplayError:
    return ReplayError(ErrorKind.EXECUTOR, message)


def _io_failure(action: str, exc: OSError, path: Path) -> ReplayError:
    """A full disk is an output_error naming the file; any other I/O failure stays an executor error."""
    return no_space(exc, path) or _executor(f"{action}: {exc}")


def _ambiguous(message: str) -> ReplayError:
    return ReplayError(ErrorKind.AMBIGUOUS_EXECUTION, message)


def _internal(message: str) -> ReplayError:
    return ReplayError(ErrorKind.INTERNAL, message)


def _unsupported(path: Path) -> ReplayError:
    return ReplayError(
        ErrorKind.AMBIGUOUS_EXECUTION,
        f"unsupported journal format in {path}: line 1 is not a {JOURNAL_FORMAT} header; left untouched",
        line=1,
    )


def _corrupt(path: Path, line: int, detail: str) -> ReplayError:
    message = f"journal {path} is corrupt at line {line}: {detail}; left untouched"
    return ReplayError(ErrorKind.AMBIGUOUS_EXECUTION, message, line=line)
