"""Process cleanup under hostile commands, through the real tool paths: nothing survives its deadline.

Commands that fork background children, double-fork, call setsid, ignore SIGTERM, clear their environment,
keep respawning orphans or flood stdout are killed at their deadline, again and again, through
``forkpoint.process.run_supervised``, Claude Code's Bash tool and Codex's exec_command / shell_command, and in
whole replays (the real ``forkpoint replay`` CLI) where the next batch must still run. Every process of a
command carries a unique marker (in its environment, and in its command line where ``env -i`` clears the
environment); afterwards /proc must hold no live process with it, output must stay within its caps, and the
observation must be the tool's timeout text.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from forkpoint.adapters.claude_code.tools import ClaudeToolExecutor
from forkpoint.adapters.codex.tools import CodexToolExecutor
from forkpoint.core.model import RunContext, ToolCall
from forkpoint.process import run_supervised
from forkpoint.sandbox import open_sandbox
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use
from forkpoint.testing.codex_rollouts import CodexRolloutBuilder

SLOW = os.environ.get("HYPOTHESIS_PROFILE") == "slow"
KILLS = 200 if SLOW else 8  # default: each scenario once
DEADLINE_S = 0.2
MAX_OUTPUT = 64 * 1024
MARK_VAR = "FORKPOINT_CLEANUP_MARK"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc and subreaper semantics are Linux")

_LOOP = "while :; do sleep 0.05; done"
#: Each script keeps its leader busy past the deadline; ``{m}`` is the marker (argv of every long-lived process).
SCENARIOS = {
    "background": f"sh -c '{_LOOP}' {{m}} & sleep 30",
    "double-fork": f"(sh -c '{_LOOP}' {{m}} &) ; sleep 30",
    "setsid": f"setsid sh -c '{_LOOP}' {{m}} & sleep 30",
    "ignores-sigterm": f"trap '' TERM; sh -c 'trap \"\" TERM; {_LOOP}' {{m}} & {_LOOP}",
    "daemon-env-cleared": f"(env -i setsid sh -c 'trap \"\" TERM HUP; {_LOOP}' {{m}} </dev/null >/dev/null 2>&1 &) ;"
    " sleep 30",
    "respawner": "sh -c 'while :; do (sleep 5 &) ; sleep 0.01; done' {m} & sleep 30",
    # 200 × (sh + sleep) stays under the default --max-processes 512: the storm runs, it is not refused by the limit
    "setsid-storm": "for i in $(seq 200); do setsid sh -c 'sleep 7' {m} & done; sleep 30",
    "flood": "yes {m}-bg-flood & yes {m}-flood",
}
NAMES = list(SCENARIOS)


def command(scenario: str, marker: str) -> str:
    return f"export {MARK_VAR}={marker}; " + SCENARIOS[scenario].format(m=marker)


def _state(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except OSError:
        return b"X"
    return raw[raw.rfind(b")") + 2 :].split()[0]


def marked(marker: str) -> list[str]:
    """Live processes whose command line or environment carries ``marker``."""
    needle = marker.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or entry == str(os.getpid()):
            continue
        for name in ("cmdline", "environ"):
            try:
                with open(f"/proc/{entry}/{name}", "rb") as handle:
                    data = handle.read()
            except OSError:
                continue
            if needle in data and _state(entry) not in (b"Z", b"X"):
                found.append(f"{entry}: {data[:200]!r}")
                break
    return found


def assert_no_survivors(marker: str, settle_s: float = 2.0) -> None:
    """A process already sent SIGKILL may take a moment to go; one still there after ``settle_s`` survived."""
    deadline = time.monotonic() + settle_s
    while True:
        left = marked(marker)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, f"processes outlived their command: {left}"


def _markers(count: int) -> list[tuple[str, str]]:
    return [(NAMES[index % len(NAMES)], f"fpmark{uuid.uuid4().hex}") for index in range(count)]


def _hammer(run_one: Callable[[str, str], None]) -> None:
    for scenario, marker in _markers(KILLS):
        try:
            run_one(scenario, marker)
        finally:
            assert_no_survivors(marker)


@pytest.mark.slow
def test_run_supervised_leaves_nothing_behind(tmp_path: Path) -> None:
    def run_one(scenario: str, marker: str) -> None:
        started = time.monotonic()
        result = run_supervised(["/bin/bash", "-c", command(scenario, marker)], cwd=tmp_path,
                                env=dict(os.environ), timeout_s=DEADLINE_S, max_output_bytes=MAX_OUTPUT,
                                log_path=tmp_path / "command.log")
        assert result.timed_out, scenario
        assert time.monotonic() - started < DEADLINE_S + 5, f"{scenario} was not killed at its deadline"
        assert len(result.stdout) <= MAX_OUTPUT and len(result.stderr) <= MAX_OUTPUT
        if scenario == "flood":
            assert result.stdout_truncated and len(result.stdout) == MAX_OUTPUT

    _hammer(run_one)


@pytest.mark.slow
def test_claude_bash_tool_leaves_nothing_behind(tmp_path: Path) -> None:
    context = RunContext(tmp_path / "ws", tmp_path / "state", tmp_path / "out")
    context.workspace.mkdir()
    executor = ClaudeToolExecutor(context, "2.1.332", "11111111-2222-3333-4444-555555555555",
                                  tmp_path / "state" / ".claude")
    count = iter(range(1_000_000))

    def run_one(scenario: str, marker: str) -> None:
        arguments = {"command": command(scenario, marker), "timeout": int(DEADLINE_S * 1000)}
        observation = executor.run(ToolCall(f"toolu_{next(count)}", "Bash", arguments, None))
        assert observation.is_error and observation.return_code == 143, (scenario, observation.content[:200])
        assert observation.content.startswith("Exit code 143\nCommand timed out after 0s"), scenario
        assert len(observation.content) < 40_000  # Claude's own error cut applies to the flood

    try:
        _hammer(run_one)
        # the shell is still usable after all the kills
        after = executor.run(ToolCall("toolu_after", "Bash", {"command": "echo still-here"}, None))
        assert (after.content, after.is_error) == ("still-here", False)
    finally:
        executor.close()


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["exec_command", "exec_command-tty", "shell_command"])
def test_codex_command_tools_leave_nothing_behind(tmp_path: Path, tool: str) -> None:
    context = RunContext(tmp_path / "ws", tmp_path / "state", tmp_path / "out", "thread-1")
    context.workspace.mkdir()
    # shell_command exists in 0.149 only; exec_command's yield time is clamped to >= 250 ms
    executor = CodexToolExecutor(context, "0.149.0" if tool == "shell_command" else "0.171.0")
    count = iter(range(1_000_000))

    def run_one(scenario: str, marker: str) -> None:
        script = command(scenario, marker)
        arguments: dict[str, object] = (
            {"cmd": script, "yield_time_ms": 250, "tty": tool.endswith("-tty")} if tool != "shell_command" else
            {"command": script, "timeout_ms": int(DEADLINE_S * 1000)}
        )
        name = tool.removesuffix("-tty")
        observation = executor.run(ToolCall(f"call_{next(count)}", name, arguments, None))
        content = str(observation.content)
        if name == "exec_command":
            assert "Process running with session ID" in content, (scenario, content[:300])
        else:
            assert content.startswith("Exit code: 124\n") or "timed out" in content, (scenario, content[:300])
        assert len(content) < 1_100_000

    try:
        _hammer(run_one)
    finally:
        executor.close()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_the_bwrap_executor_leaves_nothing_of_a_command_behind(tmp_path: Path, agent: str) -> None:
    """Every scenario through the replay's one sandbox (``forkpoint.sandbox.executor``): each command is killed at its
    deadline with all it started, inside the shared PID namespace, and the same sandbox answers the next one."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sandbox = open_sandbox("bwrap", workspace, "/tmp/forkpoint-rec/cleanup")
    context = RunContext(workspace, tmp_path / "state", tmp_path / "out", "thread-1", sandbox=sandbox)
    count = iter(range(1_000_000))
    executor: ClaudeToolExecutor | CodexToolExecutor
    if agent == "claude":
        executor = ClaudeToolExecutor(context, "2.1.332", "11111111-2222-3333-4444-555555555555",
                                      tmp_path / "state" / ".claude")
    else:
        executor = CodexToolExecutor(context, "0.149.0")

    def call(script: str) -> str:
        if agent == "claude":
            arguments: dict[str, object] = {"command": script, "timeout": int(DEADLINE_S * 1000)}
            return str(executor.run(ToolCall(f"toolu_{next(count)}", "Bash", arguments, None)).content)
        arguments = {"command": script, "timeout_ms": int(DEADLINE_S * 1000)}
        return str(executor.run(ToolCall(f"call_{next(count)}", "shell_command", arguments, None)).content)

    def run_one(scenario: str, marker: str) -> None:
        content = call(command(scenario, marker))
        timed_out = "Command timed out after 0s" if agent == "claude" else "Exit code: 124\n"
        assert content.startswith(("Exit code 143\n" + timed_out) if agent == "claude" else timed_out), (
            scenario, content[:300])
        assert len(content) < 1_100_000

    try:
        namespace = call("readlink /proc/self/ns/pid")
        _hammer(run_one)
        assert call("readlink /proc/self/ns/pid") == namespace  # one sandbox for all of them
        left = call("set -- /proc/[0-9]*; echo $#")
        # its init, the supervisor, this shell: nothing of the scenarios
        assert left.rstrip().endswith("\n3") or left == "3", left
    finally:
        executor.close()


# ----------------------------------------------------------------------------------------- whole replays


def _cli(trajectory: Path, agent: str, after: int, workspace: Path, tmp: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "forkpoint.cli", "replay", "--agent", agent, "--trajectory", str(trajectory),
         "--after-step", str(after), "--replay-only", "--workspace", str(workspace), "--state-dir",
         str(tmp / "state"), "--output-dir", str(tmp / "out"), "--run-id", "cleanup", "--json"],
        capture_output=True, timeout=300, check=False,
    )
    assert done.returncode == 0, (done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _fresh(tmp: Path) -> dict[str, str]:
    """call id -> the fresh observation text, from the rebuilt native prefix (Claude tool_result / Codex output)."""
    found: dict[str, str] = {}

    def visit(value: object) -> None:
        if isinstance(value, dict):
            if value.get("type") == "tool_result":
                found[str(value["tool_use_id"])] = json.dumps(value["content"]) if not isinstance(
                    value["content"], str) else value["content"]
            elif value.get("type") == "function_call_output":
                found[str(value["call_id"])] = str(value["output"])
            for item in value.values():
                visit(item)
        elif isinstance(value, list):
            for item in value:
                visit(item)

    for path in (tmp / "out" / "cleanup" / "native" / "prefix").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            visit(json.loads(line))
    return found


def test_claude_replay_continues_after_killed_commands(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    markers = _markers(len(NAMES))
    builder = ClaudeSessionBuilder(cwd=str(workspace))
    builder.user_prompt("Run the scripts.")
    for index, (scenario, marker) in enumerate(markers, start=1):
        call_id = f"toolu_{index:04d}"
        builder.assistant([text(scenario), tool_use(call_id, "Bash", {"command": command(scenario, marker),
                                                                         "timeout": 300})])
        builder.results({call_id: "Exit code 143\nCommand timed out after 0s"}, errors=frozenset({call_id}))
    builder.assistant([tool_use("toolu_last", "Bash", {"command": "echo after-the-kills > done.txt; echo ok"})])
    builder.results({"toolu_last": "ok"})
    builder.assistant([text("Done.")])
    session = builder.write(tmp_path / "session.jsonl")
    try:
        result = _cli(session, "claude-code", len(markers) + 1, workspace, tmp_path)
    finally:
        for _, marker in markers:
            assert_no_survivors(marker)
    assert result["phase"] == "replayed" and result["failure"] is None, result
    fresh = _fresh(tmp_path)
    assert len(fresh) == len(markers) + 1
    for index in range(1, len(markers) + 1):
        assert fresh[f"toolu_{index:04d}"].startswith("Exit code 143\nCommand timed out after 0s"), fresh
        assert len(fresh[f"toolu_{index:04d}"]) < 40_000
    assert fresh["toolu_last"] == "ok" and (workspace / "done.txt").read_text() == "after-the-kills\n"


def test_codex_replay_continues_after_killed_commands(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    markers = _markers(len(NAMES))
    builder = CodexRolloutBuilder(version="0.171.0", cwd=str(workspace))
    builder.user("Run the scripts.")
    for scenario, marker in markers:
        call_id = builder.call("exec_command", {"cmd": command(scenario, marker), "yield_time_ms": 250})
        builder.output(call_id, "Process running with session ID 1")
    last = builder.call("exec_command", {"cmd": "echo after-the-kills > done.txt; echo ok"})
    builder.output(last, "ok")
    builder.assistant("Done.")
    rollout = builder.write(tmp_path / "rollout.jsonl")
    try:
        result = _cli(rollout, "codex", len(markers) + 1, workspace, tmp_path)
    finally:
        for _, marker in markers:
            assert_no_survivors(marker)
    assert result["phase"] == "replayed" and result["failure"] is None, result
    fresh = _fresh(tmp_path)
    assert len(fresh) == len(markers) + 1
    for call_id, output in fresh.items():
        expected = "Process exited with code 0" if call_id == last else "Process running with session ID"
        assert expected in output and len(output) < 1_100_000, (call_id, output[:300])
    assert (workspace / "done.txt").read_text() == "after-the-kills\n"


def _unified(status: str, output: str = "") -> str:
    return (f"Chunk ID: 0a1b2c\nWall time: 0.2500 seconds\n{status}\nOriginal token count: {(len(output) + 3) // 4}\n"
            f"Output:\n{output}")


def test_codex_process_sessions_never_outlive_the_replay(tmp_path: Path) -> None:
    """Recorded as live process sessions (Codex kept them running for write_stdin), the same hostile scripts stay
    alive across the replay's calls and are all gone when it ends; a split that differs only by timing is
    normalised with reason ``timing``."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    markers = _markers(len(NAMES))
    builder = CodexRolloutBuilder(version="0.171.0", cwd=str(workspace))
    builder.user("Run the scripts.")
    for index, (scenario, marker) in enumerate(markers):
        call_id = builder.call("exec_command", {"cmd": command(scenario, marker), "yield_time_ms": 250})
        builder.output(call_id, _unified(f"Process running with session ID {1000 + index}"))
    # recorded: nothing by the yield, "ab" at the poll; fresh: "a" comes before the yield (timing)
    split = builder.call("exec_command", {"cmd": "printf a; sleep 0.6; printf b", "yield_time_ms": 250})
    builder.output(split, _unified("Process running with session ID 77"))
    poll = builder.call("write_stdin", {"session_id": 77, "chars": "", "yield_time_ms": 5000})
    builder.output(poll, _unified("Process exited with code 0", "ab"))
    last = builder.call("exec_command", {"cmd": "echo after > done.txt; echo ok"})
    builder.output(last, _unified("Process exited with code 0", "ok\n"))
    builder.assistant("Done.")
    rollout = builder.write(tmp_path / "rollout.jsonl")
    try:
        result = _cli(rollout, "codex", len(markers) + 3, workspace, tmp_path)
    finally:
        for _, marker in markers:
            assert_no_survivors(marker)
    assert result["phase"] == "replayed" and result["failure"] is None, result
    rows = json.loads(next((tmp_path / "out").rglob("observations.json")).read_text())["observations"]
    by_id = {row["id"]: row for row in rows}
    assert by_id[split]["normalised_reason"] == "timing" and by_id[poll]["normalised_reason"] == "timing", rows
    assert all(by_id[call_id]["exact"] for call_id in (split, poll, last)), rows
    assert (workspace / "done.txt").read_text() == "after\n"
