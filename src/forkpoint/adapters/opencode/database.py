"""Reconcile a continued OpenCode session with its SQLite store (``<XDG_DATA_HOME>/opencode/opencode.db``).

The database, not stdout, is the full record: a step killed by the step watchdog (SIGINT) leaves no further
stdout, but its rows stay (a tool part killed mid-run stays ``running``; an empty assistant message may be
left). After the run forkpoint removes exactly what the resume transport added: the nonce user message and its
parts (or, with a boundary prompt, puts the prompt text in its place), re-points the new assistant messages at
the task's user message, and drops assistant messages that have no part at all. Everything else the agent wrote
is kept; interrupted tool parts are counted and reported.

The agent could write its data dir: before SQLite opens anything, the database and each of its sidecar files
(``-wal``, ``-shm``, ``-journal``) must be a regular file (or absent) reached without any symbolic link from
the HOME (forkpoint.core.fs strict helpers), so a planted link or FIFO is refused instead of followed or hung on.
"""

from __future__ import annotations

import json
import sqlite3
import stat
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import PlantedLinkError, lstat_strict, refused_as


def database_path(home: Path) -> Path:
    return home / ".local" / "share" / "opencode" / "opencode.db"


@dataclass(frozen=True)
class Reconciled:
    new_messages: int  # messages the continuation added (after cleanup)
    removed_nonce_messages: int
    removed_empty_messages: int
    interrupted_tool_parts: int


def check_database(home: Path, db: Path) -> None:
    """Refuse a database (or sidecar) that is not a plain regular file reached without links from ``home``."""
    with refused_as(ErrorKind.CONTINUATION, f"open the OpenCode database {db}"):
        for suffix in ("", "-wal", "-shm", "-journal"):
            path = db.with_name(db.name + suffix)
            st = lstat_strict(home, path.relative_to(home))
            if st is None:
                if not suffix:
                    raise ReplayError(ErrorKind.CONTINUATION, f"OpenCode left no database at {db}")
                continue
            if stat.S_ISLNK(st.st_mode):
                raise PlantedLinkError(f"{path} is a symbolic link; not followed")
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                raise PlantedLinkError(f"{path} is not a regular file with one link")


def reconcile(db: Path, session_id: str, prefix_ids: set[str], nonce: str, boundary_prompt: str | None,
              parent_id: str | None, home: Path | None = None) -> Reconciled:
    if home is not None:
        check_database(home, db)
    elif not db.is_file():
        raise ReplayError(ErrorKind.CONTINUATION, f"OpenCode left no database at {db}")
    with closing(sqlite3.connect(db, timeout=30)) as connection, connection:
        rows = connection.execute(
            "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id", (session_id,)).fetchall()
        new = [(row[0], json.loads(row[1])) for row in rows if row[0] not in prefix_ids]
        missing = prefix_ids - {row[0] for row in rows}
        if missing:
            raise ReplayError(ErrorKind.CONTINUATION, f"OpenCode removed messages of the rebuilt session: "
                                                      f"{sorted(missing)}")
        nonce_ids, empty_ids, kept = [], [], []
        for message_id, data in new:
            parts = [(pid, json.loads(raw)) for pid, raw in connection.execute(
                "SELECT id, data FROM part WHERE message_id = ? ORDER BY id", (message_id,))]
            if data.get("role") == "user" and any(p.get("type") == "text" and p.get("text") == nonce
                                                  for _, p in parts):
                nonce_ids.append((message_id, parts))
            elif data.get("role") == "assistant" and not parts:
                empty_ids.append(message_id)
            else:
                kept.append((message_id, data, parts))
        if len(nonce_ids) != 1:
            raise ReplayError(ErrorKind.CONTINUATION,
                              f"expected one resume nonce message in the continued session, found {len(nonce_ids)}")
        nonce_message, nonce_parts = nonce_ids[0]
        if boundary_prompt is None:
            _delete(connection, [nonce_message])
            for message_id, data, _ in kept:
                if data.get("parentID") == nonce_message and parent_id is not None:
                    data["parentID"] = parent_id
                    connection.execute("UPDATE message SET data = ? WHERE id = ?", (json.dumps(data), message_id))
        else:
            for part_id, part in nonce_parts:
                part["text"] = boundary_prompt
                connection.execute("UPDATE part SET data = ? WHERE id = ?", (json.dumps(part), part_id))
        _delete(connection, empty_ids)
        interrupted = sum(1 for _, _, parts in kept for _, p in parts
                          if p.get("type") == "tool" and (p.get("state") or {}).get("status") not in ("completed",
                                                                                                       "error"))
    return Reconciled(len(kept) + (boundary_prompt is not None), 1 if boundary_prompt is None else 0,
                      len(empty_ids), interrupted)


def _delete(connection: sqlite3.Connection, message_ids: list[str]) -> None:
    for message_id in message_ids:
        connection.execute("DELETE FROM part WHERE message_id = ?", (message_id,))
        connection.execute("DELETE FROM message WHERE id = ?", (message_id,))
