"""Versioned output documents and the atomic writer every output file goes through.

The documents are plain dataclasses serialised by orjson: they are built by forkpoint itself (never parsed from
input), so they need no validation layer, and the CLI starts without importing pydantic.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, BinaryIO, Literal

import orjson

RESULT_SCHEMA = "forkpoint.result/v1"
MANIFEST_SCHEMA = "forkpoint.plan/v1"
SUMMARY_SCHEMA = "forkpoint.summary/v1"

Phase = Literal["prepared", "replayed", "continued"]
Quality = Literal["verified", "degraded"]
AgentStatus = Literal["not_started", "completed", "max_steps", "failed"]


@dataclass(kw_only=True)
class Failure:
    category: str
    message: str
    retryable: bool


@dataclass(kw_only=True)
class Artifact:
    role: str
    format: str
    path: str


@dataclass(kw_only=True)
class AgentInfo:
    name: str
    #: the recorded version (a bounded, escaped label: forkpoint.adapters.versions.label)
    version: str | None
    #: the verified profile whose tool semantics re-ran the calls
    profile: str | None
    version_status: str | None = None
    format_family: str | None = None
    tool_semantics_version: str | None = None
    #: the measured tool profile of the recorded release line that re-ran the tools, when not tool_semantics_version's
    tool_profile: str | None = None


@dataclass(kw_only=True)
class ReplayResult:
    """``result.json``: the one document a script reads to know what happened."""

    schema_version: str = RESULT_SCHEMA
    phase: Phase | None
    quality: Quality | None
    agent_status: AgentStatus
    #: exact / diverged after a replay (forkpoint.run.divergence); None when nothing was replayed
    observations_match: str | None = None
    #: why the quality is degraded (unverified_version, stale_observations, failed); empty when verified
    quality_reasons: list[str] = field(default_factory=list)
    #: the agent version the recording names (a label) and what forkpoint promises for it
    recorded_version: str | None = None
    recorded_version_status: str | None = None
    run_id: str | None
    agent: AgentInfo | None = None
    after_step: int | None = None
    replayed_tool_calls: int = 0
    prefix_model_turns: int = 0
    continued_steps: int = 0
    state_dir: str | None
    output_dir: str | None
    artifacts: list[Artifact] = field(default_factory=list)
    failure: Failure | None = None
    #: the verifier's verdict on the final workspace (``--score``; forkpoint.run.scoring, docs/rl.md)
    score: dict[str, Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The document as JSON values, in field order (what ``result.json`` and ``--json`` hold)."""
        document: dict[str, Any] = orjson.loads(orjson.dumps(self, default=_json_default,
                                                             option=orjson.OPT_NON_STR_KEYS))
        if document.get("score") is None:  # only a scored run (--score) has one: other documents are unchanged
            document.pop("score", None)
        return document

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> ReplayResult:
        """A ``result.json`` read back (``forkpoint.load_run``): known keys only, nested records typed; a value of
        the wrong shape raises ``TypeError``/``ValueError`` for the caller to name the file."""
        known = {name for name in cls.__dataclass_fields__}
        values = {key: value for key, value in document.items() if key in known}
        for key, record in (("failure", Failure), ("agent", AgentInfo)):
            if isinstance(values.get(key), dict):
                values[key] = record(**values[key])
            elif values.get(key) is not None:
                raise TypeError(f"{key} is {type(values[key]).__name__}, not an object")
        values["artifacts"] = [Artifact(**item) for item in values.get("artifacts") or []]
        for key in ("phase", "quality", "run_id", "state_dir", "output_dir"):
            values.setdefault(key, None)
        values.setdefault("agent_status", "not_started")
        if not isinstance(values.get("metadata", {}), dict):
            raise ValueError("metadata is not an object")
        if not isinstance(values.get("score", {}) or {}, dict):
            raise ValueError("score is not an object")
        return cls(**values)

    @property
    def exit_code(self) -> int:
        if self.failure is None:
            return 0
        from forkpoint.core.errors import ErrorKind

        for kind in ErrorKind:
            if kind.category == self.failure.category:
                return kind.exit_code
        return 50


def _json_default(value: object) -> object:
    """What orjson leaves to us in free-form metadata: paths as strings, sets as lists."""
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, set | frozenset):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dumps_pretty(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)


def write_atomic(path: Path, data: bytes, mode: int = 0o600, *, durable: bool = True) -> None:
    """Write to a temp file beside ``path``, fsync, rename over: readers never see a half-written file.

    ``durable=False`` skips both fsyncs: the caller commits the file later with :func:`make_durable`, before the
    record that names it (one group commit instead of two fsyncs per file).
    """
    with atomic_writer(path, mode, durable=durable) as handle:
        handle.write(data)


@contextlib.contextmanager
def atomic_writer(path: Path, mode: int = 0o600, *, durable: bool = True) -> Iterator[BinaryIO]:
    """``write_atomic`` for content produced piece by piece: the file appears (complete) only on success."""
    # what tempfile.mkstemp opens, without importing tempfile (and shutil, random) on every run's path
    temp_name = str(path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(temp_name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(temp_name, mode)
        os.replace(temp_name, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        _name_the_file(exc, path)
        raise
    if durable:
        _fsync_dir(path.parent)


def _name_the_file(exc: BaseException, path: Path) -> None:
    """A failed ``write`` (disk full) raises an OSError without a file name: give it the file being written."""
    if isinstance(exc, OSError) and exc.filename is None:
        exc.filename = str(path)


def line_pieces(source: bytes, spans: Iterable[tuple[int, int]]) -> list[memoryview | bytes]:
    """Slices of ``source`` that spell each span (offset, length without terminator) followed by one ``\n``.

    Adjacent spans already followed by ``\n`` in the source stay one slice, so a prefix that is the head of a
    JSONL file is a single piece and nothing is copied.
    """
    view = memoryview(source)
    pieces: list[memoryview | bytes] = []
    run_start, run_end = 0, -1  # the pending run of whole source lines, none while run_end < 0
    for offset, length in spans:
        stop = offset + length
        if offset != run_end:
            if run_end >= 0:
                pieces.append(view[run_start:run_end])
            run_start = offset
        if source[stop:stop + 1] == b"\n":
            run_end = stop + 1
        else:  # a "\r\n" terminator outside the span, or an unterminated last line
            pieces += [view[run_start:stop], b"\n"]
            run_end = -1
    if run_end >= 0:
        pieces.append(view[run_start:run_end])
    return pieces


def write_source_lines(path: Path, source: bytes, spans: Iterable[tuple[int, int]]) -> str:
    """Atomically write the given lines of ``source``, each ended by one ``\n``; returns the file's SHA-256.

    Prefix writers cut their lines from the bytes that were parsed and hashed, so a source that changed since
    cannot leak in; the output is hashed on a helper thread while it is written (see ``sha256_pending``).
    """
    from forkpoint.core.hashing import sha256_pending

    pieces = line_pieces(source, spans)
    written_sha256 = sha256_pending(pieces)
    with atomic_writer(path) as out:
        for piece in pieces:
            out.write(piece)
    return written_sha256()


def write_json(path: Path, value: Any, *, durable: bool = True) -> None:
    write_atomic(path, dumps_pretty(value), durable=durable)


def make_durable(paths: Iterable[Path], *, directories: bool = True) -> None:
    """fsync files written with ``durable=False``, then each of their directories once (the renames).

    ``directories=False`` when a durable write into the same directory follows (its directory fsync commits
    every earlier rename there too).
    """
    parents: dict[Path, None] = {}
    for path in paths:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        parents.setdefault(path.parent)
    for directory in parents if directories else ():
        _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- reading a run dir back (forkpoint continue / gc, forkpoint.load_run) ----------------------------------------------

#: the most of a run document (result, manifest, observations, branches, snapshot description) is read
MAX_RUN_DOCUMENT_BYTES = 64 * 1024 * 1024


def read_document(path: Path, required: str | None = None) -> dict[str, Any] | None:
    """A JSON-object document of a run dir, read bounded (a FIFO or device refused without blocking); None when it
    is absent and not ``required`` (``required`` says what the missing file means). Every failure is a
    configuration error naming the file: a run dir is a folder a person may edit or plant."""
    from forkpoint.core.errors import configuration
    from forkpoint.core.fs import InputChangedError, InputTooLargeError, NotRegularFileError, read_bounded_input

    try:
        value = orjson.loads(read_bounded_input(path, MAX_RUN_DOCUMENT_BYTES))
    except FileNotFoundError:
        if required:
            raise configuration(f"{path.parent} has no {required}") from None
        return None
    except (OSError, ValueError, InputTooLargeError, InputChangedError, NotRegularFileError) as error:
        raise configuration(f"{path} is unreadable: {error}") from None
    if not isinstance(value, dict):
        raise configuration(f"{path} is not a JSON object")
    return value


def not_written_by_forkpoint(path: Path, error: Exception) -> Exception:
    """The configuration error for a document of the wrong shape (a reader's TypeError/ValueError/KeyError)."""
    from forkpoint.core.errors import configuration

    return configuration(f"{path} is not what forkpoint wrote ({type(error).__name__}: {error})")


def _typed(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    """``value`` when it is a ``kind`` (a bool is no int here), else TypeError naming ``where``."""
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple)
                                                                                   else (kind,))):
        raise TypeError(f"{where} is {type(value).__name__}")
    return value


@dataclass(frozen=True)
class Manifest:
    """``manifest.json`` read back: what the run replayed (``continue`` parses the source again and checks it)."""

    agent: str
    mode: str
    source_path: Path
    source_sha256: str
    after_step: int
    #: the planned batches with their calls, as written (``report`` lists them)
    batches: list[dict[str, Any]]
    #: the whole document as read
    document: dict[str, Any]

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> Manifest:
        """Raises TypeError/KeyError for a wrong shape, for the caller to name the file."""
        agent, source, boundary = document["agent"], document["source"], document["boundary"]
        batches = document.get("batches") or []
        return cls(agent=_typed(_typed(agent, dict, "agent")["name"], str, "agent.name"),
                   mode=_typed(document.get("mode", ""), str, "mode"),
                   source_path=Path(_typed(_typed(source, dict, "source")["path"], str, "source.path")),
                   source_sha256=_typed(source["sha256"], str, "source.sha256"),
                   after_step=_typed(_typed(boundary, dict, "boundary")["after_step"], int, "boundary.after_step"),
                   batches=[b for b in _typed(batches, list, "batches") if isinstance(b, dict)], document=document)


@dataclass(frozen=True)
class BranchesDocument:
    """``branches.json`` read back (forkpoint.branches.branching writes it): the facts a branched run shares; the
    rows stay JSON (forkpoint.branches.records validates the ones ``continue`` runs)."""

    state_dir: str | None
    snapshot: dict[str, Any] | None
    sandbox: str | None
    prefix: dict[str, Any] | None
    rows: list[Any]
    document: dict[str, Any]

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> BranchesDocument:
        """Raises TypeError for a wrong shape, for the caller to name the file."""
        state_dir, sandbox = document.get("state_dir"), document.get("sandbox")
        snapshot, prefix = document.get("snapshot"), document.get("prefix")
        return cls(state_dir=None if state_dir is None else _typed(state_dir, str, "state_dir"),
                   snapshot=None if snapshot is None else _typed(snapshot, dict, "snapshot"),
                   sandbox=None if sandbox is None else _typed(sandbox, str, "sandbox"),
                   prefix=None if prefix is None else _typed(prefix, dict, "prefix"),
                   rows=list(document.get("branches") or []) if isinstance(document.get("branches"), list) else [],
                   document=document)


@dataclass(frozen=True)
class RunDocuments:
    """The documents of a run dir, each typed and each optional (a killed run has branches.json and no
    result.json; a run refused before its plan has no manifest)."""

    path: Path
    manifest: Manifest | None
    result: ReplayResult | None
    branches: BranchesDocument | None

    @property
    def state_dir(self) -> str | None:
        """The run's state dir as its documents name it (result.json, else branches.json)."""
        recorded = self.result.state_dir if self.result else None
        if recorded is not None and not isinstance(recorded, str):
            raise not_written_by_forkpoint(self.path / "result.json", TypeError(f"state_dir is "
                                                                                f"{type(recorded).__name__}"))
        return recorded or (self.branches.state_dir if self.branches else None)

    @property
    def snapshot(self) -> dict[str, Any] | None:
        """The boundary snapshot's description as the run recorded it (result metadata, else branches.json)."""
        recorded = self.result.metadata.get("boundary_snapshot") if self.result else None
        if recorded is not None and not isinstance(recorded, dict):
            raise not_written_by_forkpoint(self.path / "result.json", TypeError("metadata.boundary_snapshot is "
                                                                                f"{type(recorded).__name__}"))
        return recorded or (self.branches.snapshot if self.branches else None)


def read_run(run_dir: Path, *, manifest: str | None = None, result: str | None = None,
             with_manifest: bool = True) -> RunDocuments:
    """manifest.json (unless not ``with_manifest``), result.json and branches.json of ``run_dir``, read bounded and
    typed; a document that is absent is None unless required (``manifest``/``result``: what its absence means);
    one of the wrong shape is a configuration error naming the file."""
    def typed(name: str, required: str | None, reader: Any) -> Any:
        document = read_document(run_dir / name, required)
        if document is None:
            return None
        try:
            return reader(document)
        except (KeyError, TypeError, ValueError) as error:
            raise not_written_by_forkpoint(run_dir / name, error) from None

    plan = typed("manifest.json", manifest, Manifest.from_json) if with_manifest else None
    return RunDocuments(path=run_dir, manifest=plan,
                        result=typed("result.json", result, ReplayResult.from_json),
                        branches=typed("branches.json", None, BranchesDocument.from_json))
