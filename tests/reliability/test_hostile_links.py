"""Host-side code never follows what sandboxed code planted (issue 15, class 2).

Replayed commands and the continued agent can write the agent HOME, the Bash wrapper's folder and the
persisted-output folders; forkpoint then reads and writes there *on the host*, outside any sandbox. Here a
replayed command (real bash, under ``--sandbox local`` and ``--sandbox bwrap``), or the continued agent
itself, plants in each such folder: a symlink to a host file or folder outside (with a canary), a link to
``/dev/zero`` and a FIFO without writer. Every case must end in a tool error or a refusal with a clear message
and the right category, inside a hard deadline and an address-space limit (so the old code's hang on a FIFO or
its read of /dev/zero fails the test instead of the machine), and nothing outside may be read, written or
copied in.

The cases that need a real agent binary (the rebuilt session written into the HOME before the continuation,
the continued session read back after it) are marked e2e and drive the CLI in a child process with a timeout.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.adapters.claude_code.launch import project_dir_name
from forkpoint.adapters.claude_code.tools import ClaudeToolExecutor
from forkpoint.adapters.codex.tools import CodexToolExecutor
from forkpoint.adapters.opencode.database import reconcile
from forkpoint.core.errors import ReplayError
from forkpoint.core.model import RunContext, ToolCall
from forkpoint.sandbox import open_sandbox
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use
from forkpoint.workspace import inventory

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="O_NOFOLLOW walks, FIFOs, bwrap and /proc are Linux")

SESSION_ID = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
DEADLINE_S = 60.0
#: Room above the forked child's own address space: reading /dev/zero without bound exhausts it in seconds.
HEADROOM = 1536 * 1024 * 1024
PLANTS = ("host-link", "dev-zero", "fifo")


# --------------------------------------------------------------------------------------------- harness


def isolated(fn: Callable[[], str], timeout_s: float = DEADLINE_S) -> str:
    """``fn()`` in a forked child under an address-space limit: its text, ``RAISED ...``, or ``HANG``."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_end)
        try:
            size = int(next(line.split()[1] for line in open("/proc/self/status")  # noqa: SIM115
                            if line.startswith("VmSize:"))) * 1024
            resource.setrlimit(resource.RLIMIT_AS, (size + HEADROOM, size + HEADROOM))
            outcome = fn()
        except ReplayError as error:
            outcome = f"ReplayError {error.kind.category}: {error.message}"
        except BaseException as error:
            outcome = f"RAISED {type(error).__name__}: {error}"
        os.write(write_end, outcome.encode("utf-8", "replace")[:60_000])
        os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return "HANG"
            time.sleep(0.05)
        chunks = []
        while chunk := os.read(read_end, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", "replace") or "CRASH (no outcome: killed, e.g. out of memory)"
    finally:
        os.close(read_end)


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry under ``root`` (links not followed): type, size, mtime and content hash."""
    table: dict[str, tuple[Any, ...]] = {}
    for path in sorted(root.rglob("*")):
        st = os.lstat(path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else ""
        table[str(path.relative_to(root))] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, digest)
    return table


class Host:
    """The host files outside the sandbox: a canary file and an empty folder a link may point into."""

    def __init__(self, tmp: Path) -> None:
        self.canary = f"HOST-CANARY-{uuid.uuid4().hex}"
        self.root = tmp / "outside"
        self.drop = self.root / "drop"
        self.drop.mkdir(parents=True)
        self.secret = self.root / "secret.txt"
        self.secret.write_text(f"{self.canary}\n")
        self.before = snapshot(self.root)

    def target(self, plant: str) -> str:
        return {"host-link": str(self.secret), "dev-zero": "/dev/zero"}[plant]

    def plant(self, path: Path | str, plant: str) -> str:
        """Shell that replaces ``path`` with the planted thing."""
        quoted = f'"{path}"' if str(path).startswith("$") else f"'{path}'"
        if plant == "fifo":
            return f"{{ unlink {quoted} 2>/dev/null; mkfifo {quoted}; }}"
        return f"ln -sfn '{self.target(plant)}' {quoted}"

    def check_untouched(self, *trees: Path) -> None:
        assert snapshot(self.root) == self.before, "a host file outside the sandbox was written, created or removed"
        for tree in trees:
            for path in tree.rglob("*"):
                if path.is_file() and not path.is_symlink() and stat.S_ISREG(os.lstat(path).st_mode):
                    assert self.canary.encode() not in path.read_bytes(), f"host content copied into {path}"


@pytest.fixture()
def host(tmp_path: Path) -> Host:
    return Host(tmp_path)


@pytest.fixture(params=["local", "bwrap"])
def sandbox_name(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    name = str(request.param)
    if name == "bwrap":
        if shutil.which("bwrap") is None:
            pytest.skip("bubblewrap is not installed")
        try:
            open_sandbox("bwrap", tmp_path, str(tmp_path / "probe"))
        except ReplayError as error:
            pytest.skip(f"bwrap cannot run here: {error}")
    return name


def _context(tmp: Path, sandbox_name: str, session_id: str | None = None) -> RunContext:
    workspace = tmp / "ws"
    workspace.mkdir(exist_ok=True)
    sandbox = open_sandbox("bwrap", workspace, str(tmp / "recorded")) if sandbox_name == "bwrap" else None
    return RunContext(workspace, tmp / "state", tmp / "out", session_id, sandbox)


def _claude(context: RunContext) -> ClaudeToolExecutor:
    return ClaudeToolExecutor(context, "2.1.332", SESSION_ID, context.home / ".claude")


def _bash(executor: ClaudeToolExecutor, command: str) -> str:
    observation = executor.run(ToolCall("toolu_1", "Bash", {"command": command}, None))
    return f"OBSERVATION is_error={observation.is_error}: {observation.content}"


# --------------------------------------------------------------------------------------------- Claude's Bash


@pytest.mark.parametrize("plant", PLANTS)
def test_claude_bash_cwd_file_planted(plant: str, sandbox_name: str, host: Host, tmp_path: Path) -> None:
    """The wrapper's ``pwd -P >| <cwd file>`` target replaced, and ``exit 0`` so the wrapper never rewrites it."""
    executor = _claude(_context(tmp_path, sandbox_name))
    try:
        # The attacker reads the file's name off its own wrapper script.
        find = 'f=$(printf %s "$BASH_EXECUTION_STRING" | sed -n "s/.*pwd -P >| //p")'
        outcome = isolated(lambda: _bash(executor, f"{find}; {host.plant('$f', plant)}; exit 0"))
    finally:
        executor.close()
    assert outcome.startswith("ReplayError executor_error:"), outcome
    assert "cwd file" in outcome and "forkpoint does not follow it" in outcome, outcome
    assert host.canary not in outcome
    host.check_untouched(tmp_path / "state")


@pytest.mark.parametrize("level", ("tool-results", "session", "projects"))
def test_claude_bash_tool_results_folder_planted(level: str, sandbox_name: str, host: Host, tmp_path: Path) -> None:
    """A large output is saved under ``<HOME>/.claude/projects/<project>/<session>/tool-results``: the command
    first replaces one folder of that path with a link to a host folder."""
    context = _context(tmp_path, sandbox_name)
    executor = _claude(context)
    projects = context.home / ".claude" / "projects"
    folder = {"projects": projects, "session": projects / project_dir_name(Path(executor.sandbox.cwd)) / SESSION_ID,
              "tool-results": projects / project_dir_name(Path(executor.sandbox.cwd)) / SESSION_ID / "tool-results"}
    link = folder[level]
    command = f"mkdir -p '{link.parent}' && ln -s '{host.drop}' '{link}' && head -c 40000 /dev/zero | tr '\\0' a"
    try:
        outcome = isolated(lambda: _bash(executor, command))
    finally:
        executor.close()
    assert outcome.startswith("ReplayError executor_error: save large Bash output"), outcome
    assert "symbolic link; not followed" in outcome, outcome
    host.check_untouched(tmp_path / "state")
    assert not list(host.drop.iterdir())


def test_claude_bash_output_log_swapped_for_a_host_link(host: Host, tmp_path: Path) -> None:
    """``--sandbox local`` (the log is out of bwrap's reach): the command swaps the log forkpoint copies from."""
    executor = _claude(_context(tmp_path, "local"))
    log = executor.bash.scratch / "output.log"
    try:
        command = f"head -c 40000 /dev/zero | tr '\\0' a; {host.plant(log, 'host-link')}"
        outcome = isolated(lambda: _bash(executor, command))
    finally:
        executor.close()
    assert outcome.startswith("ReplayError executor_error: the Bash output log was replaced"), outcome
    host.check_untouched(tmp_path / "state")


# --------------------------------------------------------------------------------------------- Codex's log


def test_codex_command_log_swapped_for_a_host_link(host: Host, tmp_path: Path) -> None:
    """An output above 1 MiB is cut to head + tail, the tail read back from the log: never the host's file."""
    host.secret.write_bytes(b"x" * 1_500_000 + host.canary.encode())  # big enough for its tail to be read
    host.before = snapshot(host.root)
    executor = CodexToolExecutor(_context(tmp_path, "local", "thread-1"), "0.171.0")
    log = executor._scratch / "command.log"
    command = f"head -c 2000000 /dev/zero | tr '\\0' a; {host.plant(log, 'host-link')}"

    def run() -> str:
        observation = executor.run(ToolCall("call_1", "exec_command", {"cmd": command}, None))
        return f"OBSERVATION {observation.content}"

    try:
        outcome = isolated(run)
    finally:
        executor.close()
    assert host.canary not in outcome
    assert outcome.startswith("ReplayError executor_error: read the command log"), outcome[:300]
    host.check_untouched(tmp_path / "state")


# --------------------------------------------------------------------------------------------- OpenCode's database


def _database(path: Path, canary: str) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE message (id TEXT, session_id TEXT, time_created INT, data TEXT)")
        connection.execute("CREATE TABLE part (id TEXT, message_id TEXT, data TEXT)")
        connection.execute("INSERT INTO message VALUES ('msg_a', 'ses_1', 1, ?)", (json.dumps({"c": canary}),))
    connection.close()


@pytest.mark.parametrize("plant", ("host-db", "fifo", "wal-link", "hard-link"))
def test_opencode_database_planted(plant: str, host: Host, tmp_path: Path) -> None:
    """The continued agent (local) replaces ``<HOME>/.local/share/opencode/opencode.db`` or a sidecar."""
    home = tmp_path / "state" / "home"
    data = home / ".local" / "share" / "opencode"
    data.mkdir(parents=True)
    db = data / "opencode.db"
    host_db = host.root / "user.db"
    _database(host_db, host.canary)
    host.before = snapshot(host.root)
    if plant == "host-db":
        db.symlink_to(host_db)
    elif plant == "fifo":
        os.mkfifo(db)
    else:
        _database(db, "inside")
        if plant == "wal-link":
            (data / "opencode.db-wal").symlink_to(host.secret)
        else:
            db.unlink()
            os.link(host_db, db)
    outcome = isolated(lambda: str(reconcile(db, "ses_1", {"msg_a"}, "__forkpoint_nonce_x__", None, None, home)))
    assert outcome.startswith("ReplayError continuation_error: open the OpenCode database"), outcome
    host.check_untouched()


# --------------------------------------------------------------------------------------------- workspace inventory


def test_inventory_never_walks_a_folder_swapped_for_a_link(host: Host, tmp_path: Path) -> None:
    """A replayed command's leftover swaps a workspace folder with a link to a host folder while it is hashed."""
    for index in range(200):
        (host.drop / f"host-{index}.txt").write_text(host.canary)
    host.before = snapshot(host.root)
    workspace = tmp_path / "ws"
    (workspace / "d").mkdir(parents=True)
    (workspace / "d" / "inside.txt").write_text("inside")
    (workspace / "swap").symlink_to(host.drop)
    flipper = subprocess.Popen([sys.executable, "-c", _EXCHANGER, str(workspace / "d"), str(workspace / "swap")])
    try:
        time.sleep(0.2)
        for _ in range(3000):
            result = inventory(workspace)
            # d and swap (each a dir or a link, both a dir when the exchange falls between their looks), the one
            # file under each, an error entry for a folder that became a link before its walk: never a host file.
            assert result.files <= 2 and result.entries <= 6, result
    finally:
        flipper.kill()
        flipper.wait()
    host.check_untouched()


_EXCHANGER = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = sys.argv[1].encode(), sys.argv[2].encode()
while True:
    if libc.renameat2(-100, a, -100, b, 2) != 0:
        sys.exit(3)
"""


# --------------------------------------------------------------------------------------------- e2e: the continuation

NEEDS_BWRAP = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def _require(agent: str, version: str) -> None:
    if runtimes.find(agent, version) is None:
        pytest.skip(f"{agent} {version} is not installed (forkpoint agents install {agent}@{version})")


def _cli(args: list[str], tmp: Path, env: dict[str, str] | None = None, timeout_s: float = 240.0) -> dict[str, Any]:
    """The forkpoint CLI in a child process, killed at a deadline (a hang) or above 3 GiB of memory (an
    unbounded read); returns its result.json."""
    code = "import sys; from forkpoint.cli import main; main(sys.argv[1:])"
    process = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, **(env or {})})
    deadline = time.monotonic() + timeout_s
    problem = None
    while process.poll() is None:
        if time.monotonic() > deadline:
            problem = f"forkpoint hung (no exit within {timeout_s} s)"
        elif _rss(process.pid) > 3 * 1024**3:
            problem = "forkpoint's memory grew past 3 GiB (an unbounded read)"
        if problem:
            process.kill()
            process.communicate()
            pytest.fail(problem)
        time.sleep(0.1)
    _, stderr = process.communicate()
    results = list((tmp / "out").glob("*/result.json"))
    assert results, stderr.decode()[-2000:]
    document: dict[str, Any] = json.loads(results[0].read_text())
    document["_exit_code"] = process.returncode
    return document


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            return next((int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:")), 0)
    except OSError:
        return 0


def _claude_session(tmp: Path, command: str) -> Path:
    builder = ClaudeSessionBuilder(SESSION_ID, "2.1.332", str(tmp / "recorded"))
    builder.user_prompt("Do the task.")
    builder.assistant([text("step 1"), tool_use("toolu_0001", "Bash", {"command": command})])
    builder.results({"toolu_0001": "1"})
    builder.assistant([text("Done.")])
    return builder.write(tmp / "session.jsonl")


def _replay_args(tmp: Path, agent: str, trajectory: Path, sandbox: str) -> list[str]:
    return ["replay", "--agent", agent, "--trajectory", str(trajectory), "--after-step", "1",
            "--workspace", str(tmp / "ws"), "--state-dir", str(tmp / "state"), "--output-dir", str(tmp / "out"),
            "--run-id", "hostile", "--sandbox", sandbox, "--upstream", "stub", "--json"]


@pytest.mark.e2e
@NEEDS_BWRAP
def test_e2e_claude_replayed_command_plants_the_project_folder(host: Host, tmp_path: Path) -> None:
    """Under bwrap a replayed Bash command links the project folder of its HOME, and of the continued agent's
    home next to it, to a host folder: the continuation's home is rebuilt by forkpoint (the replay's is not the
    agent's), so the rebuilt session lands in a real folder of it and nothing lands outside."""
    _require("claude-code", "2.1.332")
    (tmp_path / "ws").mkdir()
    folder = project_dir_name(tmp_path / "recorded")
    command = " && ".join(f"mkdir -p '{projects}' && ln -s '{host.drop}' '{projects}/{folder}'" for projects in (
        tmp_path / "state" / "hostile" / home / ".claude" / "projects" for home in ("home", "agent-home")))
    result = _cli(_replay_args(tmp_path, "claude-code", _claude_session(tmp_path, command), "bwrap"), tmp_path)
    assert result["phase"] in ("replayed", "continued"), result
    host.check_untouched(tmp_path / "state", tmp_path / "out")
    assert not list(host.drop.iterdir())
    planted = tmp_path / "state" / "hostile" / "home" / ".claude" / "projects" / folder
    assert planted.is_symlink()  # the command did plant it (in its own home)
    session = tmp_path / "state" / "hostile" / "agent-home" / ".claude" / "projects" / folder / f"{SESSION_ID}.jsonl"
    assert not session.parent.is_symlink() and session.is_file()


@pytest.mark.e2e
@NEEDS_BWRAP
def test_e2e_claude_continued_agent_replaces_its_own_session_file(host: Host, tmp_path: Path) -> None:
    """The continued claude (scripted, under bwrap) runs a Bash command that replaces the session file
    forkpoint reads back with a link to /dev/zero (claude's own later appends then go there, harmlessly)."""
    from forkpoint.adapters.claude_code.parse import parse_session
    from forkpoint.testing import ScriptedModel
    from forkpoint.testing import scripted_model as scripted

    _require("claude-code", "2.1.332")
    fixture = Path(__file__).parents[1] / "fixtures" / "claude_code" / "2.1.332" / "single_bash"
    shutil.copytree(fixture / "workspace-initial", tmp_path / "ws")
    session_id = parse_session(fixture / "session.jsonl").session_id
    session_file = (tmp_path / "state" / "hostile" / "agent-home" / ".claude" / "projects"
                    / "-tmp-forkpoint-rec-single-bash" / f"{session_id}.jsonl")
    args = _replay_args(tmp_path, "claude-code", fixture / "session.jsonl", "bwrap")
    args[args.index("--upstream") + 1] = "anthropic"
    model = ScriptedModel([[scripted.tool_use("Bash", {"command": host.plant(session_file, "dev-zero")})]],
                          step_mode="counter")
    with model.serve() as url:
        result = _cli([*args, "--upstream-url", url], tmp_path, {"ANTHROPIC_API_KEY": "scripted-key"})
    failure = result["failure"]
    assert failure is not None and (failure["category"], result["_exit_code"]) == ("continuation_error", 40), result
    assert "read the continued session" in failure["message"] and "not followed" in failure["message"], failure
    assert os.readlink(session_file) == "/dev/zero"  # the agent did plant it
    host.check_untouched(tmp_path / "out")


@pytest.mark.e2e
@NEEDS_BWRAP
def test_e2e_codex_replayed_command_plants_the_sessions_folder(host: Host, tmp_path: Path) -> None:
    """Under bwrap a replayed ``exec_command`` links ``$CODEX_HOME/sessions``, and the continued agent's one next
    to it, to a host folder: the continuation's home is rebuilt by forkpoint, nothing lands outside."""
    from forkpoint.testing.codex_rollouts import CodexRolloutBuilder

    _require("codex", "0.171.0")
    (tmp_path / "ws").mkdir()
    command = " && ".join(f"mkdir -p '{codex_home}' && ln -s '{host.drop}' '{codex_home}/sessions'" for codex_home in (
        tmp_path / "state" / "hostile" / home / ".codex" for home in ("home", "agent-home")))
    builder = CodexRolloutBuilder(version="0.171.0", cwd=str(tmp_path / "recorded"))
    builder.user("Do the task.")
    call_id = builder.call("exec_command", {"cmd": command})
    builder.output(call_id, "Chunk ID: abc123\nWall time: 0.0000 seconds\nProcess exited with code 0\n"
                            "Original token count: 0\nOutput:\n")
    builder.assistant("Done.")
    rollout = builder.write(tmp_path / f"rollout-2026-11-30T00-00-00-{builder.session_id}.jsonl")
    result = _cli(_replay_args(tmp_path, "codex", rollout, "bwrap"), tmp_path)
    assert result["phase"] in ("replayed", "continued"), result
    host.check_untouched(tmp_path / "state", tmp_path / "out")
    assert not list(host.drop.iterdir())
    assert (tmp_path / "state" / "hostile" / "home" / ".codex" / "sessions").is_symlink()  # planted in its own home
    sessions = tmp_path / "state" / "hostile" / "agent-home" / ".codex" / "sessions"
    assert not sessions.is_symlink() and any(sessions.rglob("rollout-*.jsonl"))



@pytest.mark.e2e
def test_e2e_pi_replayed_command_plants_the_sessions_folder(host: Host, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Pi (``--sandbox local``): a replayed ``bash`` call links the per-cwd sessions folder of its HOME, and of
    the continued agent's home next to it (reachable without a sandbox), to a host folder: the continuation's home
    is rebuilt by forkpoint right before it starts, so the rebuilt session lands in a real folder of it."""
    from forkpoint.adapters.pi.launch import session_dir_name
    from forkpoint.testing.recordings import replay_recording

    _require("pi", "0.83.0")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    fixture = Path(__file__).parents[1] / "fixtures" / "pi" / "0.83.0" / "single_bash"
    source = (fixture / "session.jsonl").read_text()
    cwd = json.loads(source.splitlines()[0])["cwd"]
    folders = [tmp_path / "state" / "hostile" / home / ".pi" / "agent" / "sessions" / session_dir_name(cwd)
               for home in ("home", "agent-home")]
    plant = " && ".join(f"mkdir -p '{folder.parent}' && ln -s '{host.drop}' '{folder}'" for folder in folders)
    source = source.replace('"command":"ls && cat notes.txt"', json.dumps({"command": plant})[1:-1])
    assert "ln -s" in source
    trajectory = tmp_path / "session.jsonl"
    trajectory.write_text(source)
    result = replay_recording(fixture, tmp_path, agent="pi", trajectory=trajectory, after=1, run_id="hostile",
                              upstream="stub")
    assert result.failure is None, result.failure
    host.check_untouched(tmp_path / "state", tmp_path / "out")
    assert not list(host.drop.iterdir())
    assert folders[0].is_symlink()  # the command did plant it (in its own home)
    assert not folders[1].is_symlink() and any(folders[1].glob("*.jsonl"))
