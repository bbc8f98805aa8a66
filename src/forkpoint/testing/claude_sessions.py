"""Build Claude Code session JSONL shaped like the real binaries write it (for tests and benchmarks).

Shape (measured on 2.1.220 / 2.1.332): one assistant line per content block sharing ``message.id`` and
chained linearly; one user line per tool result whose ``parentUuid`` is the line of its tool_use; the
next line hangs off the last result written. Real recordings live in tests/fixtures/claude_code/.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import orjson

from forkpoint.core.model import JsonObject


class ClaudeSessionBuilder:
    def __init__(self, session_id: str = "session-1", version: str = "2.1.332", cwd: str = "/work") -> None:
        self.session_id = session_id
        self.version = version
        self.cwd = cwd
        self.records: list[JsonObject] = []
        self.leaf: str | None = None
        self._ids = itertools.count(1)
        self._tool_lines: dict[str, str] = {}

    def _uuid(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"

    def _add(self, record: JsonObject, *, parent: str | None, move_leaf: bool = True) -> str:
        uuid = record.setdefault("uuid", self._uuid(record["type"]))
        full = {
            "parentUuid": parent,
            "isSidechain": False,
            "type": record["type"],
            "uuid": uuid,
            "sessionId": self.session_id,
            "version": self.version,
            "cwd": self.cwd,
            **{k: v for k, v in record.items() if k not in ("type", "uuid")},
        }
        self.records.append(full)
        if move_leaf:
            self.leaf = uuid
        return str(uuid)

    def user_prompt(self, text: str) -> str:
        return self._add({"type": "user", "message": {"role": "user", "content": text}}, parent=self.leaf)

    def attachment(self, kind: str = "date") -> str:
        return self._add({"type": "attachment", "attachment": {"type": kind}}, parent=self.leaf)

    def assistant(self, blocks: list[JsonObject], *, message_id: str | None = None,
                  stop_reason: str | None = None) -> list[str]:
        """One API response written one block per line; tool_use ids are remembered for results."""
        message_id = message_id or f"msg_{next(self._ids)}"
        uuids = []
        for index, block in enumerate(blocks):
            last = index == len(blocks) - 1
            has_tools = any(b.get("type") == "tool_use" for b in blocks)
            reason = stop_reason if stop_reason else ("tool_use" if has_tools else "end_turn")
            uuid = self._add(
                {
                    "type": "assistant",
                    "message": {
                        "id": message_id,
                        "type": "message",
                        "role": "assistant",
                        "model": "claude-test",
                        "content": [block],
                        "stop_reason": reason if last else None,
                    },
                },
                parent=self.leaf,
            )
            if block.get("type") == "tool_use":
                self._tool_lines[block["id"]] = uuid
            uuids.append(uuid)
        return uuids

    def results(self, outputs: dict[str, Any], *, order: list[str] | None = None,
                errors: frozenset[str] = frozenset()) -> list[str]:
        """One user line per result, in ``order`` (completion order); each hangs off its tool_use line."""
        uuids = []
        for tool_id in order or list(outputs):
            content = outputs[tool_id]
            block: JsonObject = {"tool_use_id": tool_id, "type": "tool_result", "content": content}
            block["is_error"] = tool_id in errors
            owner = self._tool_lines[tool_id]
            uuids.append(
                self._add(
                    {
                        "type": "user",
                        "message": {"role": "user", "content": [block]},
                        "sourceToolAssistantUUID": owner,
                        "toolUseResult": {"stdout": content if isinstance(content, str) else ""},
                    },
                    parent=owner,
                )
            )
        return uuids

    def bookkeeping(self, record: JsonObject) -> None:
        self.records.append(record)

    def lines(self) -> list[bytes]:
        return [orjson.dumps(record) for record in self.records]

    def write(self, path: Path) -> Path:
        path.write_bytes(b"".join(line + b"\n" for line in self.lines()))
        return path


def text(value: str) -> JsonObject:
    return {"type": "text", "text": value}


def thinking(value: str) -> JsonObject:
    return {"type": "thinking", "thinking": value, "signature": "sig"}


def tool_use(tool_id: str, name: str, arguments: JsonObject) -> JsonObject:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": arguments}


def simple_session(batches: int = 2, *, version: str = "2.1.332", outputs_bytes: int = 0) -> ClaudeSessionBuilder:
    """A task, ``batches`` single-Bash batches, and a final text: the common generated shape."""
    builder = ClaudeSessionBuilder(version=version)
    builder.user_prompt("Do the task.")
    for index in range(1, batches + 1):
        tool_id = f"toolu_{index:04d}"
        builder.assistant([text(f"step {index}"), tool_use(tool_id, "Bash", {"command": f"echo {index}"})])
        builder.results({tool_id: f"{index}\n" + "x" * outputs_bytes})
    builder.assistant([text("Done.")])
    return builder
