"""Find forkpoint runs under the paths given to `forkpoint export`, and read what a row needs from each (I/O).

A run dir is one with ``result.json`` of schema ``forkpoint.result/v1``; a directory without one is searched
(sorted, a few levels deep: an output root, a batch dir) for run dirs. Runs are yielded one at a time, so an
export's memory does not grow with their number. Every file is read bounded and never through a link.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from forkpoint.adapters import exporter
from forkpoint.core.fs import DEFAULT_MAX_INPUT_BYTES
from forkpoint.core.results import Failure, ReplayResult
from forkpoint.export.chat import Conversation

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

RESULT_SCHEMA = "forkpoint.result/v1"
MAX_DEPTH = 4

class SkippedRun(Exception):
    """A directory that cannot be exported (not a run, unfinished, another schema): reported and counted."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class Run:
    """One finished run as export sees it: its documents, and its native sessions converted to chat."""

    path: Path
    #: result.json, typed (a branch's: the run's with the branch's status, failure and metadata)
    result: ReplayResult
    summary: dict[str, Any]
    next_action: dict[str, Any] | None
    tool_schemas: list[dict[str, Any]] | None
    prefix: Conversation
    continued: Conversation | None
    #: run-relative folders of the native files: the prefix's, and the continued session's (a branch's own)
    native: tuple[tuple[str, ...], ...] = (("native", "prefix"), ("native", "continued"))


def find_runs(paths: list[Path]) -> Iterator[Path | SkippedRun]:
    """Run dirs under ``paths`` in a stable order; a path that holds no run is reported, not dropped."""
    for path in paths:
        if not path.is_dir():
            yield SkippedRun(path, "not a directory")
            continue
        found = False
        for run_dir in _walk(path, 0):
            found = True
            yield run_dir
        if not found:
            yield SkippedRun(path, "no forkpoint run (result.json) under it")


def _walk(directory: Path, depth: int) -> Iterator[Path]:
    if _is_file(directory / "result.json"):
        yield directory
        return
    if depth >= MAX_DEPTH:
        return
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(Path(entry.path), depth + 1)


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def load_runs(run_dir: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> list[Run]:
    """The run, or one Run per branch of a branched run (``branches.json``): the shared prefix, each branch's own
    continued session, status and next action; the branch index in ``metadata.branch``."""
    run = load_run(run_dir, max_bytes)
    with RunFiles(run_dir, max_bytes) as files:
        document = files.json("branches.json")
        if not isinstance(document, dict) or not isinstance(document.get("branches"), list):
            return [run]
        convert = exporter(run.result.agent.name if run.result.agent else None)
        if convert is None:  # load_run skipped such a run
            return [run]
        branches = []
        for row in document["branches"]:
            index = str(row.get("branch"))
            name = str(row.get("continued_path") or "").rsplit("/", 1)[-1]
            data = files.read("branches", index, "native", "continued", name) if name else None
            action = _branch_json(files, index, "next-action.json")
            metadata = {**run.result.metadata, "branch": row.get("branch"),
                        "boundary_user_prompt": {"injected": row.get("prompt_length") is not None,
                                                 "sha256": row.get("prompt_sha256"),
                                                 "length": row.get("prompt_length")},
                        "model_bridge": row.get("model_bridge")}
            result = dataclasses.replace(run.result, metadata=metadata, agent_status=row.get("agent_status"),
                                         phase="continued" if data is not None else run.result.phase,
                                         failure=_branch_failure(row.get("failure")),
                                         score=row["score"] if isinstance(row.get("score"), dict) else None)
            try:
                continued = convert(data) if data is not None else None
            except ValueError:
                continued = None
            branches.append(Run(path=run_dir, result=result, summary=run.summary, next_action=action,
                                tool_schemas=run.tool_schemas, prefix=run.prefix, continued=continued,
                                native=(("native", "prefix"), ("branches", index, "native", "continued"))))
    return branches or [run]


def _branch_failure(failure: Any) -> Failure | None:
    """A branch row's failure as the typed record (export reads its category); None when the row has none."""
    if not isinstance(failure, dict) or failure.get("category") is None:
        return None
    return Failure(category=failure["category"], message=str(failure.get("message") or ""),
                   retryable=bool(failure.get("retryable")))


def _branch_json(files: RunFiles, index: str, name: str) -> dict[str, Any] | None:
    data = files.read("branches", index, name)
    try:
        value = orjson.loads(data) if data is not None else None
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def load_run(run_dir: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Run:
    """The run's documents and conversations, or SkippedRun saying why it cannot be exported."""
    with RunFiles(run_dir, max_bytes) as files:
        result = files.json("result.json", required=True)
        if not isinstance(result, dict) or result.get("schema_version") != RESULT_SCHEMA:
            found = result.get("schema_version") if isinstance(result, dict) else None
            raise SkippedRun(run_dir, f"result.json has schema {found!r}, expected {RESULT_SCHEMA!r}")
        typed = typed_result(run_dir, result)
        if typed.phase is None:
            raise SkippedRun(run_dir, "the run failed before it wrote a native session (no phase)")
        agent = typed.agent.name if typed.agent else None
        convert = exporter(agent)
        if convert is None:
            raise SkippedRun(run_dir, f"no exporter for agent {agent!r}")
        prefix_data = files.read(*artifact_parts(result, "native_prefix"))
        if prefix_data is None:
            raise SkippedRun(run_dir, "no native prefix among the run's files")
        continued_data = files.read(*artifact_parts(result, "continued_native_session"))
        summary = files.json("replay-summary.json")
        next_action = files.json("next-action.json")
        schemas = files.json("tool-schemas.json")
    try:
        prefix = convert(prefix_data)
        continued = convert(continued_data) if continued_data is not None else None
    except ValueError as error:
        raise SkippedRun(run_dir, f"cannot parse its native session: {error}") from None
    tools = schemas.get("tools") if isinstance(schemas, dict) else None
    return Run(
        path=run_dir,
        result=typed,
        summary=summary if isinstance(summary, dict) else {},
        next_action=next_action if isinstance(next_action, dict) else None,
        tool_schemas=tools if isinstance(tools, list) else None,
        prefix=prefix,
        continued=continued,
    )


class RunFiles:
    """Reads files of one run dir relative to its directory fd: every component opened with ``O_NOFOLLOW``, only
    regular files read (a FIFO never blocks: ``O_NONBLOCK``), each read bounded; a run dir from a stranger cannot
    lead the exporter elsewhere. A missing file reads as None."""

    def __init__(self, run_dir: Path, max_bytes: int) -> None:
        self.run_dir = run_dir
        self.max_bytes = max_bytes
        try:
            self.fd = os.open(run_dir, _DIR_FLAGS)
        except OSError as error:
            raise SkippedRun(run_dir, f"cannot open the run dir: {error.strerror}") from None

    def __enter__(self) -> RunFiles:
        return self

    def __exit__(self, *_: object) -> None:
        os.close(self.fd)

    def read(self, *parts: str) -> bytes | None:
        if not parts or any(part in ("", ".", "..") or "/" in part for part in parts):
            return None
        opened: list[int] = []
        try:
            parent = self.fd
            for part in parts[:-1]:
                parent = os.open(part, _DIR_FLAGS, dir_fd=parent)
                opened.append(parent)
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
            opened.append(fd)
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise SkippedRun(self.run_dir, f"{'/'.join(parts)} is not a regular file")
            if info.st_size > self.max_bytes:
                raise SkippedRun(self.run_dir, f"{'/'.join(parts)} exceeds {self.max_bytes} bytes")
            chunks: list[bytes] = []
            remaining = self.max_bytes + 1
            while remaining > 0 and (chunk := os.read(fd, min(remaining, 1 << 20))):
                chunks.append(chunk)
                remaining -= len(chunk)
            if remaining <= 0:
                raise SkippedRun(self.run_dir, f"{'/'.join(parts)} exceeds {self.max_bytes} bytes")
            return b"".join(chunks)
        except FileNotFoundError:
            return None
        except OSError as error:  # ELOOP: a link where a file or folder should be
            raise SkippedRun(self.run_dir, f"cannot read {'/'.join(parts)}: {error.strerror}") from None
        finally:
            for fd in opened:
                os.close(fd)

    def json(self, name: str, *, required: bool = False) -> Any:
        data = self.read(name)
        if data is None:
            if required:
                raise SkippedRun(self.run_dir, f"no {name} (unfinished or not a forkpoint run)")
            return None
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as error:
            raise SkippedRun(self.run_dir, f"{name} is unreadable: {error}") from None


def typed_result(run_dir: Path, document: dict[str, Any]) -> ReplayResult:
    """result.json as the typed document (its shape checked): a wrong one skips the run, naming the file."""
    try:
        return ReplayResult.from_json(document)
    except (TypeError, ValueError) as error:
        raise SkippedRun(run_dir, f"result.json is not what forkpoint wrote ({type(error).__name__}: {error})") \
            from None


def artifact_parts(result: dict[str, Any], role: str) -> tuple[str, ...]:
    """The run-relative path parts of the artifact of ``role`` (the recorded absolute path may be another host's):
    ``native/<kind>/<file>``; () when the run has none."""
    for artifact in result.get("artifacts") or []:
        if isinstance(artifact, dict) and artifact.get("role") == role and isinstance(artifact.get("path"), str):
            parts = tuple(artifact["path"].rsplit("/", 3)[-3:])
            return parts if len(parts) == 3 and parts[0] == "native" else ()
    return ()
