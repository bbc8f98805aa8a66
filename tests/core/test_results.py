"""The output documents: field order, JSON values and the exact bytes written (unchanged from the pydantic era)."""

from __future__ import annotations

import enum
import hashlib
from pathlib import Path

import pytest

from forkpoint.core.results import (
    AgentInfo,
    Artifact,
    Failure,
    ReplayResult,
    dumps_pretty,
    line_pieces,
    write_source_lines,
)


class _Colour(enum.Enum):
    RED = "red"


def test_failure_document_bytes() -> None:
    result = ReplayResult(phase=None, quality=None, agent_status="not_started", run_id="r", state_dir="s",
                          output_dir="o", failure=Failure(category="configuration_error", message="m",
                                                          retryable=False))
    assert dumps_pretty(result.to_json()) == (
        b'{\n  "schema_version": "forkpoint.result/v1",\n  "phase": null,\n  "quality": null,\n'
        b'  "agent_status": "not_started",\n  "observations_match": null,\n  "quality_reasons": [],\n'
        b'  "recorded_version": null,\n  "recorded_version_status": null,\n  "run_id": "r",\n  "agent": null,\n'
        b'  "after_step": null,\n'
        b'  "replayed_tool_calls": 0,\n  "prefix_model_turns": 0,\n  "continued_steps": 0,\n  "state_dir": "s",\n'
        b'  "output_dir": "o",\n  "artifacts": [],\n  "failure": {\n    "category": "configuration_error",\n'
        b'    "message": "m",\n    "retryable": false\n  },\n  "metadata": {}\n}\n'
    )
    assert result.exit_code == 2


def test_metadata_becomes_json_values() -> None:
    result = ReplayResult(phase="prepared", quality="verified", agent_status="not_started", run_id="r",
                          agent=AgentInfo(name="claude-code", version="2.1", profile=None), after_step=2,
                          state_dir="s", output_dir="o", artifacts=[Artifact(role="x", format="y", path="z")],
                          metadata={"p": Path("/a/b"), "t": (1, 2), "e": _Colour.RED, "n": {3: [Path("c"), None]},
                                    "s": frozenset({"only"})})
    document = result.to_json()
    assert document["agent"] == {"name": "claude-code", "version": "2.1", "profile": None, "version_status": None,
                                 "format_family": None, "tool_semantics_version": None,
                                 "tool_profile": None}
    assert document["artifacts"] == [{"role": "x", "format": "y", "path": "z"}]
    assert document["metadata"] == {"p": "/a/b", "t": [1, 2], "e": "red", "n": {"3": ["c", None]}, "s": ["only"]}
    assert result.exit_code == 0


def test_unserialisable_metadata_is_refused() -> None:
    result = ReplayResult(phase=None, quality=None, agent_status="failed", run_id=None, state_dir=None,
                          output_dir=None, metadata={"x": object()})
    with pytest.raises(TypeError):
        result.to_json()


def test_line_pieces_spell_each_span_with_one_newline() -> None:
    source = b'{"a":1}\n{"b":2}\r\n{"c":3}\n{"d":4}\n{"e":5}'
    spans = [(0, 7), (8, 7), (17, 7), (33, 7)]  # skips line d; e is unterminated
    pieces = line_pieces(source, spans)
    assert b"".join(pieces) == b'{"a":1}\n{"b":2}\n{"c":3}\n{"e":5}\n'
    assert [bytes(piece) for piece in pieces] == [b'{"a":1}\n{"b":2}', b"\n", b'{"c":3}\n', b'{"e":5}', b"\n"]
    assert line_pieces(source, []) == []


def test_write_source_lines_returns_the_written_files_sha256(tmp_path: Path) -> None:
    source = b"".join(b'{"n":%d}\n' % n for n in range(3))
    out = tmp_path / "out.jsonl"
    digest = write_source_lines(out, source, [(0, 7), (16, 7)])
    assert out.read_bytes() == b'{"n":0}\n{"n":2}\n'
    assert digest == hashlib.sha256(out.read_bytes()).hexdigest()
