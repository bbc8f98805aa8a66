"""Reconciling a continued session in opencode.db (the tables as OpenCode 1.17/1.18 create them)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.opencode.database import reconcile
from forkpoint.core.errors import ReplayError

NONCE = "__forkpoint_nonce_feedfacefeedfacefeedface__"
SCHEMA = """
CREATE TABLE message (id text PRIMARY KEY, session_id text NOT NULL, time_created integer NOT NULL,
                      time_updated integer NOT NULL, data text NOT NULL);
CREATE TABLE part (id text PRIMARY KEY, message_id text NOT NULL, session_id text NOT NULL,
                   time_created integer NOT NULL, time_updated integer NOT NULL, data text NOT NULL);
"""


def make_db(path: Path, messages: list[tuple[str, dict[str, Any], list[dict[str, Any]]]]) -> Path:
    with sqlite3.connect(path) as connection:
        connection.executescript(SCHEMA)
        for time, (message_id, data, parts) in enumerate(messages):
            connection.execute("INSERT INTO message VALUES (?, 'ses_1', ?, ?, ?)",
                               (message_id, time, time, json.dumps(data)))
            for index, part in enumerate(parts):
                connection.execute("INSERT INTO part VALUES (?, ?, 'ses_1', ?, ?, ?)",
                                   (f"prt_{message_id}_{index}", message_id, time, time, json.dumps(part)))
    return path


def rows(path: Path) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    with sqlite3.connect(path) as connection:
        out = {}
        for message_id, data in connection.execute("SELECT id, data FROM message"):
            parts = [json.loads(raw) for (raw,) in connection.execute(
                "SELECT data FROM part WHERE message_id = ? ORDER BY id", (message_id,))]
            out[message_id] = (json.loads(data), parts)
        return out


def continued(tmp_path: Path, *, interrupted: bool = False) -> Path:
    tool_state = {"status": "running" if interrupted else "completed", "input": {"command": "ls"}}
    return make_db(tmp_path / "opencode.db", [
        ("msg_a", {"role": "user"}, [{"type": "text", "text": "task"}]),
        ("msg_b", {"role": "assistant", "parentID": "msg_a"}, [{"type": "tool", "state": {"status": "completed"}}]),
        ("msg_c", {"role": "user"}, [{"type": "text", "text": NONCE}]),
        ("msg_d", {"role": "assistant", "parentID": "msg_c"}, [{"type": "tool", "state": tool_state}]),
        ("msg_e", {"role": "assistant", "parentID": "msg_c"}, []),
    ])


def test_nonce_message_and_empty_messages_are_removed(tmp_path: Path) -> None:
    db = continued(tmp_path)
    done = reconcile(db, "ses_1", {"msg_a", "msg_b"}, NONCE, None, "msg_a")
    assert (done.new_messages, done.removed_nonce_messages, done.removed_empty_messages) == (1, 1, 1)
    left = rows(db)
    assert sorted(left) == ["msg_a", "msg_b", "msg_d"]
    assert left["msg_d"][0]["parentID"] == "msg_a"  # re-pointed at the task's user message
    assert NONCE not in json.dumps(left)


def test_interrupted_parts_are_kept_and_counted(tmp_path: Path) -> None:
    db = continued(tmp_path, interrupted=True)
    done = reconcile(db, "ses_1", {"msg_a", "msg_b"}, NONCE, None, "msg_a")
    assert done.interrupted_tool_parts == 1
    assert rows(db)["msg_d"][1][0]["state"]["status"] == "running"


def test_boundary_prompt_replaces_the_nonce_text(tmp_path: Path) -> None:
    db = continued(tmp_path)
    done = reconcile(db, "ses_1", {"msg_a", "msg_b"}, NONCE, "Look again.", "msg_a")
    assert done.removed_nonce_messages == 0 and done.new_messages == 2
    assert rows(db)["msg_c"][1] == [{"type": "text", "text": "Look again."}]


def test_lost_prefix_rows_or_a_missing_nonce_are_errors(tmp_path: Path) -> None:
    db = continued(tmp_path)
    with pytest.raises(ReplayError, match="removed messages"):
        reconcile(db, "ses_1", {"msg_a", "msg_b", "msg_gone"}, NONCE, None, "msg_a")
    with pytest.raises(ReplayError, match="found 0"):
        reconcile(db, "ses_1", {"msg_a", "msg_b"}, "__forkpoint_nonce_other_value_____", None, "msg_a")
    with pytest.raises(ReplayError, match="no database"):
        reconcile(tmp_path / "absent.db", "ses_1", set(), NONCE, None, None)
