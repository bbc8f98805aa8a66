"""Codex process sessions in a replay: a session that never exits ends with the replay, unknown and hostile session
ids get Codex's answer or a refusal before any effect, and the recorded outcome steers the wait (timing)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.codex.tool_session import Recorded, recorded_outcome, session_chunk
from forkpoint.adapters.codex.tools import CodexToolExecutor
from forkpoint.core.errors import ReplayError
from forkpoint.core.model import RunContext, ToolCall
from forkpoint.testing.processes import alive, gone_within


def _running(session_id: int, output: str = "") -> str:
    tokens = (len(output.encode()) + 3) // 4
    return (f"Chunk ID: abcdef\nWall time: 0.2500 seconds\nProcess running with session ID {session_id}\n"
            f"Original token count: {tokens}\nOutput:\n{output}")


def _exited(code: int, output: str) -> str:
    tokens = (len(output.encode()) + 3) // 4
    return (f"Chunk ID: abcdef\nWall time: 0.2500 seconds\nProcess exited with code {code}\n"
            f"Original token count: {tokens}\nOutput:\n{output}")


class Replay:
    """An executor whose calls carry a recorded outcome, the way the rollout's outputs give it."""

    def __init__(self, workspace: Path, state: Path) -> None:
        self.executor = CodexToolExecutor(RunContext(workspace, state / "state", state / "out", "thread-1"), "0.171.0")
        self.count = 0
        self.workspace = workspace

    def call(self, name: str, arguments: dict[str, Any], recorded: str | None = None) -> str:
        self.count += 1
        call_id = f"call_{self.count}"
        self.executor._recorded[call_id] = recorded_outcome(recorded)
        content = self.executor.run(ToolCall(call_id, name, arguments, None)).content
        assert isinstance(content, str)
        return content


@pytest.fixture
def replay(tmp_path: Path) -> Iterator[Replay]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    current = Replay(workspace, tmp_path)
    yield current
    current.executor.close()


def test_a_session_that_never_exits_is_killed_with_the_replay(replay: Replay) -> None:
    cmd = "sleep 600 & echo $! > bg.pid; echo $$ > fg.pid; exec sleep 601"
    out = replay.call("exec_command", {"cmd": cmd, "yield_time_ms": 250}, _running(4242))
    assert "Process running with session ID 4242\n" in out
    started = time.monotonic()
    polled = replay.call("write_stdin", {"session_id": 4242, "chars": "", "yield_time_ms": 250}, _running(4242))
    assert "Process running with session ID 4242\n" in polled
    assert 4.5 < time.monotonic() - started < 15  # a poll waits at least 5 s, as in Codex
    pids = [int((replay.workspace / name).read_text()) for name in ("bg.pid", "fg.pid")]
    assert pids and any(alive(pid) for pid in pids), "the session is not alive between calls"
    replay.executor.close()
    assert not [pid for pid in pids if not gone_within(pid)], "a process session outlived the replay"


def test_output_written_between_calls_reaches_the_next_call_once(replay: Replay) -> None:
    first = replay.call("exec_command", {"cmd": "echo start; cat", "tty": True, "yield_time_ms": 250},
                        _running(7, "start\r\n"))
    assert first.endswith("Output:\nstart\r\n")
    typed = replay.call("write_stdin", {"session_id": 7, "chars": "hello\n", "yield_time_ms": 250},
                        _running(7, "hello\r\nhello\r\n"))
    assert typed.endswith("Output:\nhello\r\nhello\r\n"), typed
    done = replay.call("write_stdin", {"session_id": 7, "chars": "\u0004", "yield_time_ms": 2000}, _exited(0, ""))
    assert "Process exited with code 0\n" in done and done.endswith("Output:\n")
    gone = replay.call("write_stdin", {"session_id": 7, "chars": "x"}, None)
    assert gone == "write_stdin failed: Unknown process id 7"


def test_the_recorded_outcome_makes_the_split_deterministic(replay: Replay) -> None:
    """Recorded 'running with 1 byte' then 'exited with the rest': the fresh split follows it even though the
    fresh process is slower than its yield window (sleep 0.4 > 250 ms)."""
    first = replay.call("exec_command", {"cmd": "sleep 0.4; printf a; sleep 0.4; printf bc", "yield_time_ms": 250},
                        _running(9, "a"))
    assert first.endswith("Output:\na"), first
    rest = replay.call("write_stdin", {"session_id": 9, "chars": "", "yield_time_ms": 5000}, _exited(0, "bc"))
    assert "Process exited with code 0\n" in rest and rest.endswith("Output:\nbc")


@pytest.mark.parametrize("hostile", ["../../etc", "1", -1, 2**63, True, None, 1.5, {"id": 1}])
def test_hostile_session_ids_are_refused_before_any_effect(replay: Replay, hostile: Any) -> None:
    with pytest.raises(ReplayError) as error:
        replay.call("write_stdin", {"session_id": hostile, "chars": "rm -rf /\n"}, _running(1))
    assert error.value.before_effect


def test_a_recorded_session_id_out_of_range_is_not_a_session(replay: Replay, tmp_path: Path) -> None:
    """A recording claiming session ID 99999999999: no live session is kept under it (the call is killed at its
    yield, as before), and a write to it gets Codex's unknown-id answer, not a wrapped integer."""
    assert recorded_outcome(_running(99_999_999_999)) == Recorded(True, None, 0)
    out = replay.call("exec_command", {"cmd": "sleep 5", "yield_time_ms": 250}, _running(99_999_999_999))
    assert "Process running with session ID" in out
    assert replay.executor.commands.sessions.live == {}


def test_session_chunk_reads_status_and_output() -> None:
    assert session_chunk(_running(3, "ab")) == ("running", "ab")
    assert session_chunk(_exited(2, "x\n")) == ("exited 2", "x\n")
    assert session_chunk("write_stdin failed: Unknown process id 3") is None
    assert session_chunk(42) is None


def test_a_write_to_a_session_that_exited_meanwhile_reports_its_exit(replay: Replay) -> None:
    first = replay.call("exec_command", {"cmd": "echo hi; sleep 0.5", "tty": True, "yield_time_ms": 250},
                        _running(11, "hi\r\n"))
    assert first.endswith("Output:\nhi\r\n")
    process = replay.executor.commands.sessions.live[11]
    deadline = time.monotonic() + 10
    while not process.exited and time.monotonic() < deadline:  # it exits while no call runs
        time.sleep(0.02)
    assert process.exited
    done = replay.call("write_stdin", {"session_id": 11, "chars": "late\n", "yield_time_ms": 250}, _exited(0, ""))
    assert "Process exited with code 0\n" in done and done.endswith("Output:\n"), done
