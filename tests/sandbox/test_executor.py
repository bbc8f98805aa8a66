"""One bwrap per replay for Claude Code's and Codex's commands (``forkpoint.sandbox.executor``), through the real
tool executors: one sandbox serves a replay's commands (its PID namespace is the same for all of them and differs for
another replay), ``/tmp`` carries over between one replay's commands but never to another replay, the observations
are the ones a bwrap per command gives, nothing of a command survives it, and a command that attacks the in-sandbox
supervisor (its pipes, its life) gets nothing and fails closed."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from forkpoint.adapters.claude_code.tools import ClaudeToolExecutor
from forkpoint.adapters.codex.tool_session import recorded_outcome
from forkpoint.adapters.codex.tools import CodexToolExecutor
from forkpoint.core.errors import ReplayError
from forkpoint.core.model import RunContext, ToolCall
from forkpoint.sandbox import open_sandbox
from forkpoint.sandbox.base import Sandbox
from forkpoint.sandbox.executor import MODE_ENV, SandboxExecutor
from forkpoint.testing.held_out import HeldOut

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

SESSION = "11111111-2222-3333-4444-555555555555"
RECORDED = "/tmp/forkpoint-rec/executor-project"  # under the sandbox's /tmp tmpfs: the cheap root form


def _context(tmp_path: Path, name: str) -> RunContext:
    workspace = tmp_path / name / "ws"
    workspace.mkdir(parents=True)
    sandbox = open_sandbox("bwrap", workspace, RECORDED)
    return RunContext(workspace, tmp_path / name / "state", tmp_path / name / "out", "thread-1", sandbox=sandbox)


def _claude(context: RunContext) -> ClaudeToolExecutor:
    return ClaudeToolExecutor(context, "2.1.332", SESSION, context.state_dir / "home" / ".claude")


def _bash(executor: ClaudeToolExecutor, command: str, call_id: str | None = None) -> str:
    observation = executor.run(ToolCall(call_id or f"toolu_{uuid.uuid4().hex[:8]}", "Bash", {"command": command},
                                        None))
    return str(observation.content)


def _exec(executor: CodexToolExecutor, command: str, call_id: str | None = None) -> str:
    observation = executor.run(ToolCall(call_id or f"call_{uuid.uuid4().hex[:8]}", "exec_command", {"cmd": command},
                                        None))
    return str(observation.content).partition("\nOutput:\n")[2]


def test_one_sandbox_serves_the_commands_of_a_replay_and_not_another(tmp_path: Path) -> None:
    first, second = _claude(_context(tmp_path, "a")), _claude(_context(tmp_path, "b"))
    codex = CodexToolExecutor(_context(tmp_path, "c"), "0.171.0")
    try:
        ns = "readlink /proc/self/ns/pid"
        a1, a2, a3 = _bash(first, ns), _bash(first, f"true; {ns}"), _bash(first, f"cd . && {ns}")
        b1 = _bash(second, ns)
        c1, c2 = _exec(codex, ns), _exec(codex, ns)
        assert a1.startswith("pid:[") and a1 == a2 == a3, (a1, a2, a3)
        assert c1.startswith("pid:[") and c1 == c2, (c1, c2)
        assert len({a1, b1, c1}) == 3  # another replay, another sandbox
        # planted in /tmp by one command: there for the next command of the same replay (as on the recording's
        # machine), never for another replay
        assert _bash(first, "echo planted-by-a > /tmp/plant; echo done") == "done"
        assert _bash(first, "cat /tmp/plant") == "planted-by-a"
        assert "No such file or directory" in _bash(second, "cat /tmp/plant")
        assert "No such file or directory" in _exec(codex, "cat /tmp/plant")
    finally:
        first.close()
        second.close()
        codex.close()


COMMANDS = [
    "pwd; echo $0; printf 'a\\nb\\n'",
    "env | grep -v '^FORKPOINT_SUPERVISION_ID=' | sort",
    "echo to-stderr >&2; exit 3",
    "kill -9 $$",
    "kill -TERM $$",
    "mkdir -p sub && cd sub && pwd",
    "cd /etc",
    "ls /proc/1/fd 2>&1 | head -3; ulimit -u; umask; id -u; cat /proc/self/status | grep -i '^cap'",
    "sleep 30 & echo background-left",
    "/nonexistent-program",
    "python3 -c 'import os; print(sorted(os.listdir(\"/tmp\")))'",
]


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_observations_are_the_ones_of_a_bwrap_per_command(tmp_path: Path, agent: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def observe(name: str) -> list[str]:
        context = _context(tmp_path, name)
        if agent == "claude":
            claude = _claude(context)
            try:
                texts = [_bash(claude, command, f"toolu_{index}") for index, command in enumerate(COMMANDS)]
            finally:
                claude.close()
        else:
            codex = CodexToolExecutor(context, "0.171.0")
            try:
                texts = [_exec(codex, command, f"call_{index}") for index, command in enumerate(COMMANDS)]
            finally:
                codex.close()
        return [text.replace(str(tmp_path / name), "<run>") for text in texts]

    shared = observe("shared")
    monkeypatch.setenv(MODE_ENV, "per-command")
    per_command = observe("per-command")
    assert shared == per_command
    assert "background-left" in shared[8]


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_nothing_of_a_command_outlives_it_and_the_held_out_checks_hold(tmp_path: Path, agent: str) -> None:
    context = _context(tmp_path, "held")
    executor: ClaudeToolExecutor | CodexToolExecutor = (
        _claude(context) if agent == "claude" else CodexToolExecutor(context, "0.171.0"))

    def run(command: str) -> str:
        if isinstance(executor, ClaudeToolExecutor):
            return _bash(executor, command)
        return _exec(executor, command)

    try:
        with HeldOut(tmp_path) as bait:
            outputs = []
            for command in bait.commands():
                outputs.append(run(command))
                assert bait.survivors() == [], command  # at the end of each command, not only of the replay
            namespace = run("readlink /proc/self/ns/pid")
            assert run("readlink /proc/self/ns/pid") == namespace  # still the one sandbox
            executor.close()
            assert bait.violations(outputs) == []
            joined = "\n".join(outputs)
            for outcome in ("outside-refused", "canary-hidden", "loopback-unreachable", "started"):
                assert outcome in joined, joined
    finally:
        executor.close()


def _executor(tmp_path: Path) -> tuple[Sandbox, SandboxExecutor]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sandbox = open_sandbox("bwrap", workspace, RECORDED)
    executor = sandbox.executor()
    assert isinstance(executor, SandboxExecutor)
    return sandbox, executor


ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def test_a_command_cannot_reach_the_supervisors_pipes(tmp_path: Path) -> None:
    sandbox, executor = _executor(tmp_path)
    try:
        # the supervisor (pid 2, bwrap's init's only child) is non-dumpable: its descriptors, memory and environment
        # are not the command's to open, so it cannot forge a reply nor read another command's request
        script = ("for f in $(ls /proc/2/fd); do echo fd-$f; "
                  "printf 'x\\377\\377\\377\\377garbage' 2>/dev/null >/proc/2/fd/$f && echo wrote $f; done; "
                  "cat /proc/2/environ >/dev/null 2>&1 && echo read-environ; "
                  "head -c1 /proc/2/mem >/dev/null 2>&1 && echo read-mem; tr '\\0' ' ' </proc/2/cmdline; echo; "
                  "echo tried")
        result = executor.run(["/bin/sh", "-c", script], cwd=RECORDED, env=ENV, timeout_s=30, merge_stderr=True)
        assert result.returncode == 0 and b"executor_inside.py" in result.stdout and b"tried" in result.stdout
        assert b"fd-3" in result.stdout  # its descriptors can be listed (by number), not opened
        for effect in (b"wrote", b"read-environ", b"read-mem"):
            assert effect not in result.stdout, result.stdout
        after = executor.run(["/bin/sh", "-c", "echo still-answering"], cwd=RECORDED, env=ENV, timeout_s=30)
        assert after.stdout == b"still-answering\n" and executor.starts == 1
    finally:
        executor.close()
    assert sandbox.workspace.is_dir()


def test_a_command_that_kills_the_supervisor_fails_closed(tmp_path: Path) -> None:
    _sandbox, executor = _executor(tmp_path)
    try:
        before = executor.run(["/bin/sh", "-c", "readlink /proc/self/ns/pid"], cwd=RECORDED, env=ENV, timeout_s=30)
        with pytest.raises(ReplayError) as raised:
            executor.run(["/bin/sh", "-c", "kill -9 2; sleep 30"], cwd=RECORDED, env=ENV, timeout_s=60)
        assert "the command's outcome is unknown" in str(raised.value)
        after = executor.run(["/bin/sh", "-c", "readlink /proc/self/ns/pid"], cwd=RECORDED, env=ENV, timeout_s=30)
        assert after.returncode == 0 and after.stdout != before.stdout  # a fresh sandbox, never the host
        assert executor.starts == 2
    finally:
        executor.close()


def test_the_deadline_and_the_output_cap_hold_per_command(tmp_path: Path) -> None:
    _sandbox, executor = _executor(tmp_path)
    log = tmp_path / "command.log"
    try:
        flood = executor.run(["/bin/sh", "-c", "yes flood"], cwd=RECORDED, env=ENV, timeout_s=0.3,
                             max_output_bytes=4096, merge_stderr=True, log_path=log, max_log_bytes=100_000)
        assert flood.timed_out and flood.stdout_truncated and len(flood.stdout) == 4096
        assert flood.log_truncated and log.stat().st_size == 100_000
        stubborn = executor.run(["/bin/sh", "-c", "trap '' TERM; (trap '' TERM; sleep 30) & sleep 30"],
                                cwd=RECORDED, env=ENV, timeout_s=0.3, grace_s=0.1)
        assert stubborn.timed_out and stubborn.duration_s < 10
        left = executor.run(["/bin/sh", "-c", "set -- /proc/[0-9]*; echo $#"], cwd=RECORDED, env=ENV, timeout_s=30)
        assert left.stdout == b"3\n"  # init, the supervisor and this sh: nothing of the earlier commands
    finally:
        executor.close()
    assert os.path.exists(log)


def _recorded(session_id: int | None, output: str = "", code: int = 0) -> str:
    state = (f"Process running with session ID {session_id}" if session_id is not None
             else f"Process exited with code {code}")
    return (f"Chunk ID: abcdef\nWall time: 0.2500 seconds\n{state}\nOriginal token count: {(len(output) + 3) // 4}\n"
            f"Output:\n{output}")


def test_a_codex_process_session_runs_in_the_replays_sandbox(tmp_path: Path) -> None:
    """exec_command left running + write_stdin: in the replay's one sandbox (its /tmp, its PID namespace), alive across
    other commands, typed into, and ended with everything it started when the replay closes."""
    codex = CodexToolExecutor(_context(tmp_path, "sessions"), "0.171.0")
    marker = f"fpsession{uuid.uuid4().hex}"
    count = iter(range(1000))

    def call(name: str, arguments: dict[str, object], recorded: str) -> str:
        call_id = f"call_{next(count)}"
        codex._recorded[call_id] = recorded_outcome(recorded)
        return str(codex.run(ToolCall(call_id, name, arguments, None)).content)

    try:
        namespace = _exec(codex, "echo planted > /tmp/plant; readlink /proc/self/ns/pid").strip()
        first = call("exec_command", {"cmd": "cat /tmp/plant; readlink /proc/self/ns/pid; cat", "tty": True,
                                      "yield_time_ms": 250}, _recorded(7, f"planted\r\n{namespace}\r\n"))
        assert first.endswith(f"Output:\nplanted\r\n{namespace}\r\n"), first
        background = call("exec_command", {"cmd": f"sh -c 'sleep 600' {marker}", "yield_time_ms": 250},
                          _recorded(8))
        assert "Process running with session ID 8\n" in background
        assert _exec(codex, "readlink /proc/self/ns/pid").strip() == namespace  # another command meanwhile
        typed = call("write_stdin", {"session_id": 7, "chars": "hello\n", "yield_time_ms": 250},
                     _recorded(7, "hello\r\nhello\r\n"))
        assert typed.endswith("Output:\nhello\r\nhello\r\n"), typed
        done = call("write_stdin", {"session_id": 7, "chars": "\u0004", "yield_time_ms": 2000}, _recorded(None))
        assert "Process exited with code 0\n" in done
        assert _alive(marker), "the running session did not survive the other commands"
    finally:
        codex.close()
    assert not _alive(marker), "a process session outlived the replay"


def _alive(marker: str) -> bool:
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                state = (proc / "stat").read_bytes().rsplit(b") ", 1)[-1][:1]
                if marker.encode() in (proc / "cmdline").read_bytes() and state != b"Z":
                    return True
            except OSError:
                continue
    return False


def test_a_fork_storm_stops_at_the_limit_and_the_sandbox_serves_on(tmp_path: Path) -> None:
    from forkpoint.process import limits

    if limits.metadata()["mechanism"] != limits.MECHANISM:
        pytest.skip("needs a writable cgroup v1 pids hierarchy")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    executor = SandboxExecutor(open_sandbox("bwrap", workspace, RECORDED), max_processes=30)
    try:
        storm = executor.run(["/bin/sh", "-c", "for i in $(seq 60); do sleep 5 & done"], cwd=RECORDED, env=ENV,
                             timeout_s=30)
        assert storm.process_limit_hit and not storm.timed_out  # the shell's fork failed (EAGAIN) at the cap
        calm = executor.run(["/bin/sh", "-c", "for i in $(seq 20); do sleep 0.1 & done; wait; echo calm"],
                            cwd=RECORDED, env=ENV, timeout_s=30)
        assert not calm.process_limit_hit and calm.stdout == b"calm\n"  # the cap is per command: nothing carried over
        assert executor.starts == 1
    finally:
        executor.close()
