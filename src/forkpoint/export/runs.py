"""Find forkpoint runs under the paths given to `forkpoint export`, and read what a row needs from each (I/O).

A run dir is one with ``result.json`` of schema ``forkpoint.result/v1``; a directory without one is searched
(sorted, a few levels deep: an output root, a batch dir) for run dirs. Runs are yielded one at a time, so an
export's memory does not grow with their number. Every file is read bounded and never through a link.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any

import orjson

from forkpoint.export.chat import Conversation
from forkpoint.fs import DEFAULT_MAX_INPUT_BYTES, ConfinementError, NotRegularFileError, read_regular_file

RESULT_SCHEMA = "forkpoint.result/v1"
MAX_DEPTH = 4

#: agent name -> module with ``to_chat(data: bytes) -> Conversation`` (imported when first needed)
CONVERTERS = {
    "claude-code": "forkpoint.adapters.claude_code.messages",
    "codex": "forkpoint.adapters.codex.messages",
    "opencode": "forkpoint.adapters.opencode.messages",
    "pi": "forkpoint.adapters.pi.messages",
    "mini-swe-agent": "forkpoint.adapters.mini_swe_agent.messages",
    "swe-agent": "forkpoint.adapters.swe_agent.messages",
    "openhands": "forkpoint.adapters.openhands.messages",
}


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
    result: dict[str, Any]
    summary: dict[str, Any]
    next_action: dict[str, Any] | None
    tool_schemas: list[dict[str, Any]] | None
    prefix: Conversation
    continued: Conversation | None


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


def load_run(run_dir: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Run:
    """The run's documents and conversations, or SkippedRun saying why it cannot be exported."""
    result = _json(run_dir, "result.json", max_bytes)
    if not isinstance(result, dict) or result.get("schema_version") != RESULT_SCHEMA:
        found = result.get("schema_version") if isinstance(result, dict) else None
        raise SkippedRun(run_dir, f"result.json has schema {found!r}, expected {RESULT_SCHEMA!r}")
    if result.get("phase") is None:
        raise SkippedRun(run_dir, "the run failed before it wrote a native session (no phase)")
    agent = (result.get("agent") or {}).get("name")
    if agent not in CONVERTERS:
        raise SkippedRun(run_dir, f"no exporter for agent {agent!r}")
    convert = import_module(CONVERTERS[agent]).to_chat
    prefix_path = _artifact(run_dir, result, "native_prefix")
    if prefix_path is None:
        raise SkippedRun(run_dir, "no native prefix among the run's artifacts")
    continued_path = _artifact(run_dir, result, "continued_native_session")
    summary = _json(run_dir, "replay-summary.json", max_bytes, required=False)
    next_action = _json(run_dir, "next-action.json", max_bytes, required=False)
    schemas = _json(run_dir, "tool-schemas.json", max_bytes, required=False)
    try:
        prefix = convert(_read(run_dir, prefix_path, max_bytes))
        continued = convert(_read(run_dir, continued_path, max_bytes)) if continued_path else None
    except ValueError as error:
        raise SkippedRun(run_dir, f"cannot parse its native session: {error}") from None
    return Run(
        path=run_dir,
        result=result,
        summary=summary if isinstance(summary, dict) else {},
        next_action=next_action if isinstance(next_action, dict) else None,
        tool_schemas=schemas["tools"] if isinstance(schemas, dict) and isinstance(schemas.get("tools"), list) else None,
        prefix=prefix,
        continued=continued,
    )


def _read(run_dir: Path, relative: Path, max_bytes: int) -> bytes:
    """A file of the run, through the confined walk: no link leads out of the run dir, no FIFO or device is read."""
    try:
        read = read_regular_file(run_dir, relative, max_bytes=max_bytes)
    except (OSError, ConfinementError, NotRegularFileError) as error:
        raise SkippedRun(run_dir, f"cannot read {relative}: {error}") from None
    if read.truncated:
        raise SkippedRun(run_dir, f"{relative} exceeds {max_bytes} bytes (raise --max-file-bytes)")
    return read.data


def _artifact(run_dir: Path, result: dict[str, Any], role: str) -> Path | None:
    """The artifact of ``role``, found inside ``run_dir`` (the recorded absolute path may be from another host)."""
    for artifact in result.get("artifacts") or []:
        if not isinstance(artifact, dict) or artifact.get("role") != role or not isinstance(artifact.get("path"), str):
            continue
        recorded = Path(artifact["path"])
        output_dir = Path(str(result.get("output_dir", "")))
        try:
            relative = recorded.relative_to(output_dir)
        except ValueError:
            relative = Path(*recorded.parts[-3:])  # native/<kind>/<file>
        if ".." in relative.parts or relative.is_absolute():
            return None
        return relative if _is_file(run_dir / relative) else None
    return None


def _json(run_dir: Path, name: str, max_bytes: int, *, required: bool = True) -> Any:
    if not _is_file(run_dir / name):
        if required:
            raise SkippedRun(run_dir, f"no {name} (unfinished or not a forkpoint run)")
        return None
    try:
        return orjson.loads(_read(run_dir, Path(name), max_bytes))
    except ValueError as error:
        raise SkippedRun(run_dir, f"{name} is unreadable: {error}") from None
