"""Writers of exported rows (I/O): parquet, messages JSONL, ATIF, native copies.

Every writer writes under a temporary name beside the destination and renames at the end, so a failed or
interrupted export never leaves a half-written file where the output should be. Rows arrive one at a time;
parquet buffers one row group, the others nothing.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import orjson

from forkpoint.export.redact import Redactor
from forkpoint.export.runs import Run

ROW_GROUP_ROWS = 512


class RowWriter(Protocol):
    def write(self, row: dict[str, Any], run: Run) -> None: ...

    def commit(self) -> None: ...

    def abort(self) -> None: ...


class _Staged:
    """A destination written under ``.<name>.partial`` and renamed over nothing at commit."""

    def __init__(self, out: Path, *, directory: bool) -> None:
        self.out = out
        self.temp = out.with_name(f".{out.name}.partial-{os.getpid()}")
        if directory:
            self.temp.mkdir(mode=0o755)

    def commit(self) -> None:
        os.rename(self.temp, self.out)

    def abort(self) -> None:
        if self.temp.is_dir():
            shutil.rmtree(self.temp, ignore_errors=True)
        else:
            self.temp.unlink(missing_ok=True)


class JsonlWriter(_Staged):
    def __init__(self, out: Path) -> None:
        super().__init__(out, directory=False)
        self.handle = self.temp.open("wb")

    def write(self, row: dict[str, Any], run: Run) -> None:
        self.handle.write(orjson.dumps(row) + b"\n")

    def commit(self) -> None:
        self.handle.close()
        super().commit()

    def abort(self) -> None:
        self.handle.close()
        super().abort()


def parquet_schema() -> Any:
    import pyarrow as pa

    call = pa.struct([("id", pa.string()), ("type", pa.string()),
                      ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())]))])
    message = pa.struct([
        ("role", pa.string()), ("content", pa.string()), ("reasoning_content", pa.string()),
        ("tool_calls", pa.list_(call)), ("tool_call_id", pa.string()),
        ("segment", pa.string()), ("trainable", pa.bool_()),
    ])
    strings = ("tools", "tools_source", "run_id", "agent", "recorded_version", "recorded_version_status",
               "continuing_version", "profile", "mode", "phase", "quality", "agent_status", "failure_category",
               "source_sha256", "upstream", "model", "sampling", "bridge_verdict", "forkpoint_version", "group_id")
    integers = ("prefix_message_count", "branch", "after_step", "observations_exact", "observations_diverged",
                "stale_observations_reused", "redaction_count")
    fields = [("messages", pa.list_(message))]
    fields += [(name, pa.string()) for name in strings]
    fields += [(name, pa.int64()) for name in integers]
    fields += [(name, pa.float64()) for name in ("reward", "advantage", "advantage_grpo", "original_reward")]
    fields += [("next_action_match", pa.bool_()), ("redacted", pa.bool_()), ("notes", pa.list_(pa.string()))]
    return pa.schema(fields)


class ParquetWriter(_Staged):
    def __init__(self, out: Path) -> None:
        import pyarrow.parquet as pq

        super().__init__(out, directory=False)
        self.schema = parquet_schema()
        self.writer = pq.ParquetWriter(self.temp, self.schema, compression="zstd")
        self.pending: list[dict[str, Any]] = []

    def write(self, row: dict[str, Any], run: Run) -> None:
        self.pending.append(row)
        if len(self.pending) >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self.pending:  # column by column: Table.from_pylist would import pandas
            columns = [pa.array([row.get(f.name) for row in self.pending], type=f.type) for f in self.schema]
            self.writer.write_table(pa.Table.from_arrays(columns, schema=self.schema))
            self.pending = []

    def commit(self) -> None:
        self._flush()
        self.writer.close()
        super().commit()

    def abort(self) -> None:
        self.writer.close()
        super().abort()


class TokensWriter(JsonlWriter):
    """``--format tokens``: one JSONL row per captured model request (``forkpoint.export.tokens``); ``counts``:
    every token record's status (the report's ``token_requests``)."""

    def __init__(self, out: Path, max_bytes: int) -> None:
        super().__init__(out)
        self.max_bytes = max_bytes
        self.counts: Counter[str] = Counter()
        self.rows = 0

    def write(self, row: dict[str, Any], run: Run) -> None:
        from forkpoint.export.tokens import token_rows

        for line in token_rows(run, row, self.counts, self.max_bytes):
            self.handle.write(orjson.dumps(line) + b"\n")
            self.rows += 1


class AtifWriter(_Staged):
    """Per row ``<run>.json`` (prefix steps marked ``is_copied_context``, then the live steps) and
    ``<run>.prefix.json`` (task + prefix only, ``continued_trajectory_ref`` naming the first); with
    ``--capture-tokens`` records, each live agent step's ``metrics`` holds its request's token ids and logprobs."""

    def __init__(self, out: Path, max_bytes: int = 1 << 31) -> None:
        super().__init__(out, directory=True)
        self.max_bytes = max_bytes

    def write(self, row: dict[str, Any], run: Run) -> None:
        from forkpoint.export.atif import trajectories
        from forkpoint.export.tokens import records

        name = _row_name(row)
        steps = [record for record in records(run, self.max_bytes) if not record.get("auxiliary")]
        for suffix, document in trajectories(row, name, str(row["run_id"]), steps):
            path = self.temp / f"{name if suffix != '.prefix' else row['run_id']}{suffix}.json"
            if not path.exists():  # branches share their run's prefix document
                path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))


class NativeWriter(_Staged):
    """Per row ``<run>/``: the native prefix and continued sessions (string values redacted when on) and
    ``provenance.json``."""

    def __init__(self, out: Path, redactor: Redactor | None) -> None:
        super().__init__(out, directory=True)
        self.redactor = redactor

    def write(self, row: dict[str, Any], run: Run) -> None:
        from forkpoint.core.fs import read_regular_file

        target = self.temp / _row_name(row)
        target.mkdir()
        for kind, parts in zip(("prefix", "continued"), run.native, strict=True):
            folder = run.path.joinpath(*parts)
            if not folder.is_dir() or folder.is_symlink():
                continue
            (target / kind).mkdir()
            for entry in sorted(os.scandir(folder), key=lambda e: e.name):
                if not entry.is_file(follow_symlinks=False):
                    continue
                data = read_regular_file(run.path, Path(*parts, entry.name), max_bytes=1 << 31).data
                (target / kind / entry.name).write_bytes(self._redact(data, entry.name))
        provenance = {key: value for key, value in row.items() if key != "messages"}
        (target / "provenance.json").write_bytes(orjson.dumps(provenance, option=orjson.OPT_INDENT_2))

    def _redact(self, data: bytes, name: str) -> bytes:
        if self.redactor is None:
            return data
        redact: Callable[[Any], Any] = lambda value: _redact_strings(value, self.redactor)  # noqa: E731
        if name.endswith(".jsonl"):
            lines = [line for line in data.split(b"\n") if line.strip()]
            return b"".join(orjson.dumps(redact(orjson.loads(line))) + b"\n" for line in lines)
        return orjson.dumps(redact(orjson.loads(data)))


class DpoWriter(_Staged):
    """JSONL of preference pairs (forkpoint.export.dpo): rows are kept per group (the best and the worst), the
    pairs written at commit."""

    def __init__(self, out: Path) -> None:
        from forkpoint.export.dpo import DpoPairs

        super().__init__(out, directory=False)
        self.collected = DpoPairs()
        self.skipped: dict[str, int] = {}
        self.written = 0

    def write(self, row: dict[str, Any], run: Run) -> None:
        self.collected.add(row)

    def commit(self) -> None:
        pairs, self.skipped = self.collected.pairs()
        with self.temp.open("wb") as handle:
            for pair in pairs:
                handle.write(orjson.dumps(pair) + b"\n")
        self.written = len(pairs)
        super().commit()


def _redact_strings(value: Any, redactor: Redactor | None) -> Any:
    if redactor is None:
        return value
    if isinstance(value, str):
        return redactor.text(value)
    if isinstance(value, list):
        return [_redact_strings(item, redactor) for item in value]
    if isinstance(value, dict):
        return {key: _redact_strings(item, redactor) for key, item in value.items()}
    return value


def _row_name(row: dict[str, Any]) -> str:
    branch = row.get("branch")
    return f"{row['run_id']}" + (f".b{branch}" if branch is not None else "")


def open_writer(fmt: str, out: Path, redactor: Redactor | None, max_bytes: int = 1 << 31) -> RowWriter:
    if fmt == "tokens":
        return TokensWriter(out, max_bytes)
    if fmt == "parquet":
        return ParquetWriter(out)
    if fmt == "messages-jsonl":
        return JsonlWriter(out)
    if fmt == "atif":
        return AtifWriter(out, max_bytes)
    if fmt == "native":
        return NativeWriter(out, redactor)
    if fmt == "dpo":
        return DpoWriter(out)
    raise ValueError(f"unknown export format {fmt!r}")


def dumps_report(report: dict[str, Any]) -> bytes:
    return json.dumps(report, indent=2, sort_keys=True).encode() + b"\n"
