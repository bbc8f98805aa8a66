"""Build Codex rollout JSONL shaped like the real binaries write it (for tests and benchmarks).

Real recordings live in tests/fixtures/codex/; this builder makes the edge cases they cannot.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import orjson

from forkpoint.core.model import JsonObject


class CodexRolloutBuilder:
    def __init__(self, session_id: str = "019a0000-0000-7000-8000-000000000001", version: str = "0.149.0",
                 cwd: str = "/work") -> None:
        self.session_id = session_id
        self.version = version
        self.cwd = cwd
        self.lines: list[JsonObject] = []
        self._ids = itertools.count(1)
        self._add("session_meta", {"id": session_id, "session_id": session_id, "timestamp": "2026-11-30T00:00:00Z",
                                   "cwd": cwd, "originator": "codex_exec", "cli_version": version})

    def _add(self, kind: str, payload: JsonObject) -> None:
        self.lines.append({"timestamp": f"2026-11-30T00:00:{len(self.lines):02d}.000Z", "type": kind,
                           "payload": payload})

    def item(self, payload: JsonObject) -> None:
        self._add("response_item", payload)

    def user(self, text: str) -> None:
        self.item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})

    def assistant(self, text: str) -> None:
        self.item({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})

    def call(self, name: str, arguments: JsonObject, call_id: str | None = None) -> str:
        call_id = call_id or f"call_{next(self._ids)}"
        self.item({"type": "function_call", "id": f"fc_{call_id}", "name": name,
                   "arguments": json.dumps(arguments), "call_id": call_id})
        return call_id

    def output(self, call_id: str, output: str) -> None:
        self.item({"type": "function_call_output", "id": f"fco_{call_id}", "call_id": call_id, "output": output})

    def event(self, kind: str, **payload: Any) -> None:
        self._add("event_msg", {"type": kind, **payload})

    def write(self, path: Path) -> Path:
        path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in self.lines))
        return path


def simple_rollout(batches: int = 2, version: str = "0.149.0") -> CodexRolloutBuilder:
    builder = CodexRolloutBuilder(version=version)
    builder.user("Do the task.")
    for index in range(1, batches + 1):
        call_id = builder.call("exec_command", {"cmd": f"echo {index}"})
        builder.output(call_id, f"Chunk ID: abc123\nWall time: 0.0000 seconds\nProcess exited with code 0\n"
                                f"Original token count: 1\nOutput:\n{index}\n")
    builder.assistant("Done.")
    return builder
