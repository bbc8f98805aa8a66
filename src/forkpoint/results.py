"""Versioned output documents and the atomic writer every output file goes through."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Literal

import orjson
from pydantic import BaseModel, ConfigDict

RESULT_SCHEMA = "forkpoint.result/v1"
MANIFEST_SCHEMA = "forkpoint.plan/v1"
SUMMARY_SCHEMA = "forkpoint.summary/v1"

Phase = Literal["prepared", "replayed", "continued"]
Quality = Literal["verified", "degraded"]
AgentStatus = Literal["not_started", "completed", "max_steps", "failed"]


class Failure(BaseModel):
    model_config = ConfigDict(extra="forbid")

    category: str
    message: str
    retryable: bool


class Artifact(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: str
    format: str
    path: str


class AgentInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    version: str | None
    profile: str | None


class ReplayResult(BaseModel):
    """``result.json``: the one document a script reads to know what happened."""

    model_config = ConfigDict(extra="forbid")

    schema_version: str = RESULT_SCHEMA
    phase: Phase | None
    quality: Quality | None
    agent_status: AgentStatus
    run_id: str | None
    agent: AgentInfo | None = None
    after_step: int | None = None
    replayed_tool_calls: int = 0
    prefix_model_turns: int = 0
    continued_steps: int = 0
    state_dir: str | None
    output_dir: str | None
    artifacts: list[Artifact] = []
    failure: Failure | None = None
    metadata: dict[str, Any] = {}

    @property
    def exit_code(self) -> int:
        if self.failure is None:
            return 0
        from forkpoint.errors import ErrorKind

        for kind in ErrorKind:
            if kind.category == self.failure.category:
                return kind.exit_code
        return 50


def dumps_pretty(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write to a temp file beside ``path``, fsync, rename over: readers never see a half-written file."""
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp_name, mode)
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise
    _fsync_dir(path.parent)


@contextlib.contextmanager
def atomic_writer(path: Path, mode: int = 0o600) -> Iterator[BinaryIO]:
    """``write_atomic`` for content produced piece by piece: the file appears (complete) only on success."""
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp_name, mode)
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise
    _fsync_dir(path.parent)


def write_json(path: Path, value: Any) -> None:
    write_atomic(path, dumps_pretty(value))


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
