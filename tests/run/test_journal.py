"""The replay fact journal: durable records, run.lock, recovery and the ambiguity rule (real files)."""

from __future__ import annotations

import fcntl
import os
import re
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.run.journal import (
    JOURNAL_FILE,
    JOURNAL_FORMAT,
    LOCK_FILE,
    Journal,
    describe_ambiguous,
    find_ambiguous,
    read_events,
)

AT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def _ev(event: str, **fields: Any) -> dict[str, Any]:
    return {"event": event, **fields}


def _write_events(state: Path, *events: tuple[str, dict[str, Any]]) -> Path:
    """Record events through a real journal; the file may be ambiguous for the next open."""
    with Journal.open(state) as journal:
        for name, fields in events:
            journal.append(name, **fields)
    return state / JOURNAL_FILE


def _open_refused(state: Path) -> ReplayError:
    with pytest.raises(ReplayError) as caught:
        Journal.open(state)
    assert caught.value.kind is ErrorKind.AMBIGUOUS_EXECUTION
    return caught.value


def _lock_is_free(state: Path) -> bool:
    fd = os.open(state / LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


# --- reference rules (§10.4), adapted to forkpoint.journal/v1 --------------------------------------------


def test_legacy_plain_jsonl_is_rejected_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / JOURNAL_FILE
    path.write_bytes(b'{"event":"run_started"}\n')
    with pytest.raises(ReplayError) as caught:
        read_events(path)
    assert caught.value.kind is ErrorKind.AMBIGUOUS_EXECUTION
    error = _open_refused(tmp_path)
    assert "unsupported journal format" in error.message
    assert path.read_bytes() == b'{"event":"run_started"}\n'
    assert _lock_is_free(tmp_path)


def test_foreign_header_is_rejected_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / JOURNAL_FILE
    content = b'{"format":"pvisor.trace/5","journal":"j"}\n{"position":{"journal":"j","offset":0}}\n'
    path.write_bytes(content)
    assert "unsupported journal format" in _open_refused(tmp_path).message
    assert path.read_bytes() == content


def test_finished_tool_without_terminal_run_is_ambiguous(tmp_path: Path) -> None:
    events = [
        _ev("run_started"),
        _ev("tool_started", call_id="same-call"),
        _ev("tool_finished", call_id="same-call"),
    ]
    assert find_ambiguous(events) == "same-call"
    _write_events(tmp_path, *((e.pop("event"), e) for e in events))
    assert "same-call" in _open_refused(tmp_path).message


def test_interruption_before_any_tool_starts_is_retryable(tmp_path: Path) -> None:
    assert find_ambiguous([_ev("run_started"), _ev("plan_validated", tool_calls=2)]) is None
    _write_events(tmp_path, ("run_started", {"run_id": "r1"}), ("plan_validated", {"tool_calls": 2}))
    with Journal.open(tmp_path) as journal:
        assert [e["event"] for e in journal.events()] == ["run_started", "plan_validated"]


def test_failed_run_does_not_resolve_an_unfinished_tool(tmp_path: Path) -> None:
    events = [
        _ev("tool_started", call_id="call-1"),
        _ev("run_failed", category="executor_error", message="x"),
    ]
    assert find_ambiguous(events) == "call-1"
    _write_events(tmp_path, *((e.pop("event"), e) for e in events))
    assert "call-1" in _open_refused(tmp_path).message


@pytest.mark.parametrize("terminal", ["run_finished", "run_failed"])
def test_terminal_run_with_finished_tool_is_retryable(tmp_path: Path, terminal: str) -> None:
    events = [_ev("tool_started", call_id="call-1"), _ev("tool_finished", call_id="call-1"), _ev(terminal)]
    assert find_ambiguous(events) is None
    _write_events(tmp_path, *((e.pop("event"), e) for e in events))
    with Journal.open(tmp_path) as journal:
        assert len(journal.events()) == 3


def test_opening_rejects_ambiguous_state_while_holding_the_lock_then_releases_it(tmp_path: Path) -> None:
    _write_events(tmp_path, ("run_started", {}), ("tool_started", {"call_id": "call-1", "tool": "Bash"}))
    error = _open_refused(tmp_path)
    assert error.message == (
        'state contains tool call "call-1" that started but has no recorded outcome; its effects are unknown '
        "— use a fresh workspace and a new run id to replay from the start"
    )
    assert _lock_is_free(tmp_path)


def test_ambiguity_names_the_call_that_did_not_finish(tmp_path: Path) -> None:
    """"a" finished, "b" started and never finished: the message names "b", whose effects are really unknown."""
    events = [_ev("run_started"), _ev("tool_started", call_id="a"), _ev("tool_finished", call_id="a"),
              _ev("tool_started", call_id="b")]
    assert find_ambiguous(events) == "b"
    _write_events(tmp_path, *((e.pop("event"), e) for e in events))
    message = _open_refused(tmp_path).message
    assert message.startswith('state contains tool call "b" that started but has no recorded outcome')
    assert '"a"' not in message


def test_a_finished_call_of_an_unended_run_is_named_as_finished(tmp_path: Path) -> None:
    _write_events(tmp_path, ("run_started", {}), ("tool_started", {"call_id": "a"}),
                  ("tool_finished", {"call_id": "a"}))
    assert describe_ambiguous(read_events(tmp_path / JOURNAL_FILE)) == (
        'tool call "a" that finished, but its run never recorded its end (its batch may have been cut short)')
    assert "has no recorded outcome" not in _open_refused(tmp_path).message


# --- format and durability ----------------------------------------------------------------------------------


def test_new_journal_has_header_records_and_private_modes(tmp_path: Path) -> None:
    state = tmp_path / "state" / "run-1"
    with Journal.open(state) as journal:
        journal.append("run_started", run_id="run-1", after_step=2)
        journal.append("tool_started", call_id="c1", tool="Bash")
        journal_id = journal.journal_id
    lines = (state / JOURNAL_FILE).read_bytes().splitlines()
    header = orjson.loads(lines[0])
    assert header["format"] == JOURNAL_FORMAT
    assert header["journal"] == journal_id and re.fullmatch(r"[0-9a-f]{32}", journal_id)
    assert AT.fullmatch(header["created_at"])
    first, second = (orjson.loads(line) for line in lines[1:])
    assert list(first) == ["seq", "at", "event", "run_id", "after_step"]
    assert (first["seq"], first["event"], first["run_id"], first["after_step"]) == (
        0,
        "run_started",
        "run-1",
        2,
    )
    assert AT.fullmatch(first["at"])
    assert (second["seq"], second["call_id"]) == (1, "c1")
    assert stat.S_IMODE((state / JOURNAL_FILE).stat().st_mode) & 0o077 == 0
    assert stat.S_IMODE(state.stat().st_mode) & 0o077 == 0


@pytest.mark.parametrize("key", ["seq", "at", "event"])
def test_reserved_payload_keys_are_refused_and_nothing_is_written(tmp_path: Path, key: str) -> None:
    with Journal.open(tmp_path) as journal:
        before = (tmp_path / JOURNAL_FILE).read_bytes()
        with pytest.raises(ReplayError, match="reserved"):
            payload: dict[str, Any] = {key: 1}
            journal.append("tool_started", **payload)
        assert journal.events() == []
    assert (tmp_path / JOURNAL_FILE).read_bytes() == before


def test_unserializable_payload_is_refused(tmp_path: Path) -> None:
    with Journal.open(tmp_path) as journal:
        with pytest.raises(ReplayError, match="not JSON-serializable"):
            journal.append("session_prepared", path=object())
        journal.append("session_prepared", path="ok")
        assert [e["seq"] for e in journal.events()] == [0]


def test_content_is_readable_after_reopen(tmp_path: Path) -> None:
    with Journal.open(tmp_path) as journal:
        journal.append("run_started", run_id="r", note="héllo ✓", nested={"a": [1, 2.5, None]})
        journal.append("run_finished", status="completed")
        written = journal.events()
    assert read_events(tmp_path / JOURNAL_FILE) == written
    with Journal.open(tmp_path) as journal:
        assert journal.events() == written


def test_records_survive_a_writer_that_dies_without_closing(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from forkpoint.run.journal import Journal
        journal = Journal.open(Path({str(tmp_path)!r}))
        journal.append("run_started", run_id="r")
        journal.append("plan_validated", tool_calls=0)
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    with Journal.open(tmp_path) as journal:
        assert [(e["seq"], e["event"]) for e in journal.events()] == [
            (0, "run_started"),
            (1, "plan_validated"),
        ]


def test_seq_continues_across_reopen(tmp_path: Path) -> None:
    _write_events(tmp_path, ("run_started", {}), ("run_finished", {"status": "prepared"}))
    with Journal.open(tmp_path) as journal:
        journal.append("run_started")
        assert [e["seq"] for e in journal.events()] == [0, 1, 2]
    assert [e["seq"] for e in read_events(tmp_path / JOURNAL_FILE)] == [0, 1, 2]


def test_header_is_kept_across_reopen(tmp_path: Path) -> None:
    with Journal.open(tmp_path) as journal:
        first_id = journal.journal_id
    with Journal.open(tmp_path) as journal:
        assert journal.journal_id == first_id


# --- recovery ------------------------------------------------------------


@pytest.mark.parametrize(
    "torn", [b"{", b'{"seq":2,"at":"2025-01-01T00:00', b'{"seq":2,"at":"x","event":"tool_star']
)
def test_torn_final_line_is_truncated_away(tmp_path: Path, torn: bytes) -> None:
    path = _write_events(tmp_path, ("run_started", {}), ("run_finished", {"status": "ok"}))
    intact = path.read_bytes()
    with path.open("ab") as handle:
        handle.write(torn)
    assert len(read_events(path)) == 2  # the reader ignores the tail but does not repair it
    assert path.read_bytes() == intact + torn
    with Journal.open(tmp_path) as journal:
        assert path.read_bytes() == intact
        journal.append("run_started")
        assert journal.events()[-1]["seq"] == 2
    assert len(read_events(path)) == 3


def test_torn_header_of_a_new_journal_is_rewritten(tmp_path: Path) -> None:
    path = tmp_path / JOURNAL_FILE
    path.write_bytes(b'{"format":"forkpoint.jour')
    assert read_events(path) == []
    with Journal.open(tmp_path) as journal:
        journal.append("run_started")
    assert orjson.loads(path.read_bytes().splitlines()[0])["format"] == JOURNAL_FORMAT


def test_empty_file_gets_a_header(tmp_path: Path) -> None:
    path = tmp_path / JOURNAL_FILE
    path.touch()
    assert read_events(path) == []
    with Journal.open(tmp_path) as journal:
        assert journal.events() == []
    assert orjson.loads(path.read_bytes())["format"] == JOURNAL_FORMAT


def _good_line(seq: int, event: str = "run_started") -> bytes:
    return orjson.dumps({"seq": seq, "at": "2025-01-01T00:00:00.000Z", "event": event}) + b"\n"


@pytest.mark.parametrize(
    ("line3", "detail"),
    [
        (b"{not json\n", "invalid JSON"),
        (b"[1,2]\n", "not a JSON object"),
        (b'{"at":"2025-01-01T00:00:00.000Z","event":"x"}\n', "seq"),
        (_good_line(5), "seq 5 where 1 was expected"),
        (b'{"seq":1,"event":"x"}\n', "at"),
        (b'{"seq":1,"at":"2025-01-01T00:00:00.000Z"}\n', "event"),
        (b"\n", "invalid JSON"),
    ],
)
def test_corrupt_middle_line_is_refused_and_the_file_is_unchanged(
    tmp_path: Path, line3: bytes, detail: str
) -> None:
    path = _write_events(tmp_path)
    content = path.read_bytes() + _good_line(0) + line3 + _good_line(2) + b'{"seq":3,'  # torn tail too
    path.write_bytes(content)
    error = _open_refused(tmp_path)
    assert "line 3" in error.message and detail in error.message and error.line == 3
    assert path.read_bytes() == content
    with pytest.raises(ReplayError, match="line 3"):
        read_events(path)
    assert _lock_is_free(tmp_path)


def test_bad_header_fields_are_reported_at_line_1(tmp_path: Path) -> None:
    path = tmp_path / JOURNAL_FILE
    content = b'{"format":"forkpoint.journal/v1","journal":"nope","created_at":"x"}\n'
    path.write_bytes(content)
    error = _open_refused(tmp_path)
    assert "line 1" in error.message and error.line == 1
    assert path.read_bytes() == content


def test_incomplete_final_line_that_is_not_ours_is_refused(tmp_path: Path) -> None:
    path = _write_events(tmp_path, ("run_started", {}))
    content = path.read_bytes() + b"garbage without newline"
    path.write_bytes(content)
    assert "line 3" in _open_refused(tmp_path).message
    assert path.read_bytes() == content


def test_symlinked_journal_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.jsonl"
    target.write_bytes(b"")
    state = tmp_path / "state"
    state.mkdir()
    (state / JOURNAL_FILE).symlink_to(target)
    with pytest.raises(ReplayError) as caught:
        Journal.open(state)
    assert caught.value.kind is ErrorKind.EXECUTOR
    assert target.read_bytes() == b""
    assert _lock_is_free(state)


def test_read_events_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_events(tmp_path / "absent.jsonl") == []


# --- lock --------------------------------------------------------------------------------------------------


def test_lock_held_by_another_process_is_refused(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from forkpoint.run.journal import Journal
        with Journal.open(Path({str(tmp_path)!r})):
            print("locked", flush=True)
            sys.stdin.readline()
        """
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        error = _open_refused(tmp_path)
        assert error.message == f"another forkpoint process owns the state dir {tmp_path}"
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    assert holder.returncode == 0
    with Journal.open(tmp_path):
        pass


def test_lock_is_released_after_close(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path)
    assert not _lock_is_free(tmp_path)
    with pytest.raises(ReplayError, match="another forkpoint process"):
        Journal.open(tmp_path)  # a second open file description conflicts even within one process
    journal.close()
    journal.close()  # idempotent
    assert _lock_is_free(tmp_path)
    with Journal.open(tmp_path) as again:
        again.append("run_started")
    assert _lock_is_free(tmp_path)
    with pytest.raises(ReplayError, match="closed"):
        again.append("run_started")


# --- queries and copies ------------------------------------------------------------


def test_completed_calls_in_current_run(tmp_path: Path) -> None:
    with Journal.open(tmp_path) as journal:
        assert journal.completed_calls_in_current_run() == 0
        for call in ("a", "b"):
            journal.append("tool_started", call_id=call)
            journal.append("tool_finished", call_id=call)
        assert journal.completed_calls_in_current_run() == 2  # no run_started yet: counted from the start
        journal.append("run_finished", status="completed")
        journal.append("run_started")
        assert journal.completed_calls_in_current_run() == 0
        journal.append("tool_started", call_id="c")
        assert journal.completed_calls_in_current_run() == 0
        journal.append("tool_finished", call_id="c")
        journal.append("tool_finished", call_id="c")
        journal.append("tool_started", call_id="d")
        journal.append("tool_finished", call_id="d")
        assert journal.completed_calls_in_current_run() == 2


def test_copy_to_writes_an_atomic_identical_copy(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    target = out / "replay-events.jsonl"
    target.write_bytes(b"stale")
    with Journal.open(tmp_path / "state") as journal:
        journal.append("run_started")
        journal.copy_to(target)
        assert target.read_bytes() == journal.path.read_bytes()
        journal.append("run_finished", status="prepared")
        journal.copy_to(target)
        assert target.read_bytes() == journal.path.read_bytes()
        with pytest.raises(ReplayError) as caught:
            journal.copy_to(tmp_path / "missing" / "x.jsonl")
        assert caught.value.kind is ErrorKind.EXECUTOR
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in out.iterdir()) == ["replay-events.jsonl"]
    assert len(read_events(target)) == 2


def test_unsynced_records_are_written_at_once_and_made_durable_by_the_next_synced_one(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    journal = Journal.open(tmp_path)
    synced: list[str] = request.getfixturevalue("fsynced_paths")  # from here on
    journal.append("batch_started", sync=False, batch=1)
    journal.append("tool_finished", sync=False, batch=1, call_id="a")
    assert synced == []
    # a killed process loses nothing: the lines are in the file (page cache) before any fsync
    assert [e["event"] for e in read_events(tmp_path / JOURNAL_FILE)] == ["batch_started", "tool_finished"]
    journal.append("tool_started", batch=2, call_id="b")
    assert len(synced) == 1
    journal.sync()  # nothing pending: no fsync
    assert len(synced) == 1
    journal.append("tool_finished", sync=False, batch=2, call_id="b")
    journal.sync()
    assert len(synced) == 2
    journal.append("batch_committed", sync=False, batch=2)
    journal.close()  # pending records are fsync'd on close
    assert len(synced) == 3
    assert [e["event"] for e in read_events(tmp_path / JOURNAL_FILE)][-1] == "batch_committed"


def test_sync_is_not_a_payload_key(tmp_path: Path) -> None:
    with Journal.open(tmp_path) as journal:
        journal.append("x", sync=False, value=1)
        assert journal.events()[-1] == {"seq": 0, "at": journal.events()[-1]["at"], "event": "x", "value": 1}


def test_a_lost_unsynced_tool_finished_fails_closed(tmp_path: Path) -> None:
    """What an OS crash could leave (only the synced prefix): the unmatched tool_started is ambiguous."""
    with Journal.open(tmp_path) as journal:
        journal.append("run_started", sync=False, run_id="r")
        journal.append("tool_started", batch=1, call_id="a")
        synced_size = (tmp_path / JOURNAL_FILE).stat().st_size
        journal.append("tool_finished", sync=False, batch=1, call_id="a")
    with (tmp_path / JOURNAL_FILE).open("r+b") as handle:
        handle.truncate(synced_size)
    error = _open_refused(tmp_path)
    assert error.kind is ErrorKind.AMBIGUOUS_EXECUTION


def test_a_replay_fsyncs_the_journal_once_per_rerun_call(tmp_path: Path, fsynced_paths: list[str]) -> None:
    from forkpoint.run.engine import execute
    from forkpoint.run.request import build_request
    from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use

    workspace = tmp_path / "ws"
    workspace.mkdir()
    builder = ClaudeSessionBuilder(session_id="fsync-0000-4000-8000-000000000000", cwd=str(workspace))
    builder.user_prompt("Count.")
    for n in range(1, 6):
        builder.assistant([text(str(n)), tool_use(f"toolu_{n:05d}", "Bash", {"command": f"echo {n}"})])
        builder.results({f"toolu_{n:05d}": f"{n}"})
    builder.assistant([text("Counted.")])
    trajectory = builder.write(tmp_path / "session.jsonl")
    result = execute(build_request({"agent": "claude-code", "trajectory": str(trajectory), "after_step": 5,
                                    "replay_only": True, "workspace": str(workspace),
                                    "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
                                    "run_id": "r"}, source="test"))
    assert result.failure is None and result.replayed_tool_calls == 5
    # the new journal's header + each tool_started (before its effect) + run_finished
    assert len([path for path in fsynced_paths if path.endswith(JOURNAL_FILE)]) == 1 + 5 + 1


def test_a_journal_of_a_run_without_effects_never_fsyncs_yet_keeps_every_record(
    tmp_path: Path, fsynced_paths: list[str]
) -> None:
    synced = fsynced_paths
    with Journal.open(tmp_path, durable=False) as journal:
        journal.append("run_started", run_id="r")
        journal.append("session_prepared", sync=False, sha256="0" * 64)
        journal.append("run_finished", status="prepared")
        journal.sync()
    assert synced == []
    assert [e["event"] for e in read_events(tmp_path / JOURNAL_FILE)] == [
        "run_started", "session_prepared", "run_finished"]


def test_a_durable_open_of_a_non_durable_journal_makes_file_and_entry_durable_first(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with Journal.open(tmp_path, durable=False) as journal:
        journal.append("run_started", run_id="r")
    synced: list[str] = request.getfixturevalue("fsynced_paths")  # from here on
    with Journal.open(tmp_path) as journal:
        assert synced == [str(tmp_path / JOURNAL_FILE), str(tmp_path)]  # before any record can precede an effect
        journal.append("tool_started", batch=1, call_id="a")
    assert len(synced) == 3


def test_prepare_only_fsyncs_no_journal(tmp_path: Path, fsynced_paths: list[str]) -> None:
    from forkpoint.run.engine import execute
    from forkpoint.run.request import build_request
    from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use

    workspace = tmp_path / "ws"
    workspace.mkdir()
    builder = ClaudeSessionBuilder(session_id="fsync-0000-4000-8000-000000000001", cwd=str(workspace))
    builder.user_prompt("Count.")
    builder.assistant([text("1"), tool_use("toolu_00001", "Bash", {"command": "echo 1"})])
    builder.results({"toolu_00001": "1"})
    builder.assistant([text("Counted.")])
    trajectory = builder.write(tmp_path / "session.jsonl")
    synced = fsynced_paths
    result = execute(build_request({"agent": "claude-code", "trajectory": str(trajectory), "after_step": 1,
                                    "prepare_only": True, "workspace": str(workspace),
                                    "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
                                    "run_id": "r"}, source="test"))
    assert result.phase == "prepared" and result.failure is None
    assert not [path for path in synced if path.startswith(str(tmp_path / "state"))]
    assert any("result.json" in Path(path).name for path in synced)  # the outputs stay durable
    assert [e["event"] for e in read_events(tmp_path / "state" / "r" / JOURNAL_FILE)][-1] == "run_finished"
