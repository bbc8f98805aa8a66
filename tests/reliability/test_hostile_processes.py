"""Nothing of a run outlives forkpoint: ``kill -9`` of the real CLI during a replayed tool call or a continuation.

The real ``forkpoint replay`` runs in a subprocess; a replayed Bash command (or, in a continuation, the real
claude agent's own Bash call) starts long-lived processes carrying a unique marker (in the environment, and
in the command line where ``env -i`` clears it): plain ``sleep``, a ``setsid nohup`` daemon, and a daemon
with a cleared environment that leaves the session. Once they run, forkpoint gets SIGKILL (no cleanup code of
its own can run); 5 s later no process with the marker (nor, for the continuation, the agent, found by its
state dir in its environment) may be alive. Under ``--sandbox local`` and ``--sandbox bwrap``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.testing import ScriptedModel
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use
from forkpoint.testing.scripted_model import tool_use as scripted_tool_use

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc and PR_SET_PDEATHSIG are Linux")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MARK_VAR = "FORKPOINT_HOSTILE_MARK"
SETTLE_S = 5.0
_LOOP = "while :; do sleep 1; done"
#: Each keeps the tool call running (so forkpoint is killed during it); ``{m}`` is the marker.
COMMANDS = {
    "sleep": "sleep 300",
    "daemon": f"setsid nohup sh -c '{_LOOP}' {{m}} >/dev/null 2>&1 & sleep 300",
    "daemon-env-cleared": f"(env -i setsid sh -c '{_LOOP}' {{m}} </dev/null >/dev/null 2>&1 &) ; sleep 300",
}
SANDBOXES = ["local", pytest.param("bwrap", marks=pytest.mark.skipif(shutil.which("bwrap") is None,
                                                                     reason="bubblewrap is not installed"))]


def command(kind: str, marker: str) -> str:
    return f"export {MARK_VAR}={marker}; " + COMMANDS[kind].format(m=marker)


def _alive(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except OSError:
        return False
    return raw[raw.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def marked(*needles: str) -> list[str]:
    """Live processes (not this test) whose command line or environment carries one of ``needles``."""
    wanted = [needle.encode() for needle in needles]
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
            if any(needle in data for needle in wanted) and _alive(entry):
                found.append(f"{entry} {name}: {data[:300]!r}")
                break
    return found


def _kill_and_check(cli: subprocess.Popen[bytes], *needles: str) -> None:
    """SIGKILL forkpoint; within SETTLE_S nothing carrying a needle may be left. Kills leftovers either way."""
    cli.send_signal(signal.SIGKILL)
    cli.wait(10)
    deadline = time.monotonic() + SETTLE_S
    left = marked(*needles)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = marked(*needles)
    for line in left:  # never leave the host polluted by a failing run
        with contextlib.suppress(OSError):
            os.kill(int(line.split()[0]), signal.SIGKILL)
    assert not left, f"processes outlived forkpoint (kill -9): {left}"


def _cli(argv: list[str], tmp: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """The CLI, its temp dir under ``tmp`` (a killed forkpoint cannot remove its scratch dirs: pytest does)."""
    (tmp / "tmp").mkdir()
    env = {**(os.environ if env is None else env), "TMPDIR": str(tmp / "tmp")}
    with open(tmp / "cli.out", "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "forkpoint.cli", "replay", *argv, "--state-dir",
                                 str(tmp / "state"), "--output-dir", str(tmp / "out"), "--run-id", "hostile",
                                 "--json"], stdout=out, stderr=subprocess.STDOUT, env=env)


def _started(cli: subprocess.Popen[bytes], tmp: Path, what: str, count: int, timeout_s: float, *needles: str) -> None:
    """Wait until ``count`` processes carry the needles (forkpoint still running), then let the reaper see them."""
    deadline = time.monotonic() + timeout_s
    while len(marked(*needles)) < count:
        if cli.poll() is not None or time.monotonic() > deadline:
            output = (tmp / "cli.out").read_bytes()[-3000:].decode("utf-8", "replace")
            raise AssertionError(f"{what} did not start (forkpoint exit code {cli.poll()}): {output}")
        time.sleep(0.05)
    time.sleep(0.5)  # the daemon has been orphaned and snapshotted
    assert cli.poll() is None, "forkpoint ended before it was killed"


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("kind", list(COMMANDS))
def test_kill_9_during_a_replayed_tool_call_leaves_nothing(tmp_path: Path, sandbox: str, kind: str) -> None:
    marker = f"fphostile{uuid.uuid4().hex}"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    builder = ClaudeSessionBuilder(cwd=str(workspace))
    builder.user_prompt("Run it.")
    builder.assistant([text("Running."), tool_use("toolu_long", "Bash", {"command": command(kind, marker),
                                                                         "timeout": 600000})])
    builder.results({"toolu_long": "done"})
    builder.assistant([text("Done.")])
    session = builder.write(tmp_path / "session.jsonl")
    cli = _cli(["--agent", "claude-code", "--trajectory", str(session), "--after-step", "1", "--replay-only",
                "--workspace", str(workspace), "--sandbox", sandbox], tmp_path)
    try:
        expected = 2 if kind == "sleep" else 3  # the shell and sleep; plus the daemon
        _started(cli, tmp_path, "the replayed command", expected, 60, marker)
    finally:
        _kill_and_check(cli, marker)


@pytest.mark.e2e
def test_kill_9_during_a_tool_runner_call_leaves_nothing(tmp_path: Path) -> None:
    """A tool runner (mini-swe-agent's companion, a long-lived Python process) replays the daemonising command."""
    version = "1.17.5"
    if runtimes.find("mini-swe-agent", version) is None:
        pytest.skip(f"mini-swe-agent {version} is not installed")
    marker = f"fphostile{uuid.uuid4().hex}"
    fixture = FIXTURES / "mini_swe_agent" / version / "basic"
    recorded_cwd = json.loads((fixture / "meta.json").read_text())["cwd"]
    workspace = tmp_path / "ws"
    shutil.copytree(fixture / "workspace-initial", workspace)
    document = json.loads((fixture / "trajectory.traj.json").read_text().replace(recorded_cwd, str(workspace)))
    first = document["messages"][2]
    assert first["role"] == "assistant" and "```bash\ncat calc.py\n```" in first["content"]
    first["content"] = first["content"].replace("cat calc.py", command("daemon", marker))
    trajectory = tmp_path / "hostile.traj.json"
    trajectory.write_text(json.dumps(document))
    cli = _cli(["--agent", "mini-swe-agent", "--trajectory", str(trajectory), "--after-step", "1", "--replay-only",
                "--workspace", str(workspace)], tmp_path)
    try:
        _started(cli, tmp_path, "the replayed command", 3, 120, marker)
        assert marked(str(tmp_path / "state")), "the companion was not found by its state dir"
    finally:
        _kill_and_check(cli, marker, str(tmp_path / "state"))


@pytest.mark.e2e
@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_kill_9_during_a_continuation_leaves_no_agent(tmp_path: Path, sandbox: str) -> None:
    """The real claude, continued, runs a long Bash call of its own; forkpoint dies: the agent and its tool die."""
    version = "2.1.332"
    if runtimes.find("claude-code", version) is None:
        pytest.skip(f"claude-code {version} is not installed")
    marker = f"fphostile{uuid.uuid4().hex}"
    fixture = FIXTURES / "claude_code" / version / "single_bash"
    recorded_cwd = json.loads((fixture / "meta.json").read_text())["cwd"]
    workspace = tmp_path / "ws"
    shutil.copytree(fixture / "workspace-initial", workspace)
    placement = ["--path-map", f"{recorded_cwd}={workspace}"] if sandbox == "local" else ["--sandbox", "bwrap"]
    model = ScriptedModel([[scripted_tool_use("Bash", {"command": command("daemon", marker), "timeout": 600000})]],
                          loop_last=True)
    state = str(tmp_path / "state")
    with model.serve() as url:
        env = {**os.environ, "ANTHROPIC_API_KEY": "scripted-upstream-key"}
        cli = _cli(["--agent", "claude-code", "--trajectory",
                    str(fixture / "session.jsonl"), "--after-step", "1", "--workspace", str(workspace),
                    "--upstream", "anthropic", "--upstream-url", url, *placement], tmp_path, env)
        try:
            _started(cli, tmp_path, "the agent's own command", 3, 120, marker)
            assert marked(state), "the agent was not found by its state dir"
        finally:
            _kill_and_check(cli, marker, state)
