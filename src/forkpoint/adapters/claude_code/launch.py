"""How the real `claude` continues a rebuilt session: session placement, argv, env, stream outcome, and the
continuation hooks (``ClaudeHooks``) the shell (forkpoint.adapters.kit.continuation) runs them through."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from forkpoint.adapters.kit import continuation as shell
from forkpoint.adapters.kit.continuation import AgentHooks, Collected, GateSpec, Job, LaunchSpec, Outcome, Ran
from forkpoint.adapters.kit.ids import check_id
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import ConfinementError, open_confined
from forkpoint.core.results import atomic_writer
from forkpoint.process import sanitized_env
from forkpoint.sandbox import home_environment, runtime_paths

if TYPE_CHECKING:
    from forkpoint.bridge.server import BridgeSummary

_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")


def project_dir_name(cwd: Path) -> str:
    """Claude Code's project folder for a cwd: every non-alphanumeric character becomes '-'."""
    return _NOT_ALNUM.sub("-", str(cwd))


def config_dir(home: Path) -> Path:
    return home / ".claude"


def session_path(home: Path, workspace: Path, session_id: str) -> Path:
    """`claude --resume ID` looks only in the CURRENT cwd's project folder."""
    return config_dir(home) / "projects" / project_dir_name(workspace) / f"{session_id}.jsonl"


SHELL_STATE = "claude-shell.json"


def save_shell_state(state_dir: Path, relative_cwd: str) -> None:
    """Where the replayed Bash shell ended, relative to the workspace (written by the executor on close)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / SHELL_STATE).write_bytes(orjson.dumps({"cwd": relative_cwd}))


def resume_directory(state_dir: Path, workspace: Path, launch_root: str) -> tuple[str, dict[str, Any]]:
    """The cwd to start the continued `claude` in, and the metadata that says whether the shell cwd was kept.

    Claude Code does not restore its Bash tool's directory on ``--resume``: the shell starts in the launch cwd
    and the first request says ``# Environment update - Primary working directory: <launch cwd> (was <recorded
    shell cwd>)``. So the continued agent is started in the directory the replayed shell ended in (inside the
    workspace, opened through the confined walk: no link planted by a replayed command is followed), so its
    commands run where the original's did. Side effect, recorded in the metadata: that directory is the
    continued session's project root.
    """
    try:
        relative = orjson.loads((state_dir / SHELL_STATE).read_bytes()).get("cwd", ".")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        relative = "."
    if not isinstance(relative, str) or relative in ("", "."):
        return launch_root, {"replayed": ".", "restored": True}
    facts: dict[str, Any] = {"replayed": relative}
    parts = relative.split("/")
    if os.path.isabs(relative) or "\0" in relative or any(part in ("", ".", "..") for part in parts):
        return launch_root, {**facts, "restored": False, "reason": "the recorded shell directory is not a plain "
                                                                    "relative path inside the workspace"}
    try:
        fd = open_confined(workspace, relative, os.O_RDONLY | os.O_DIRECTORY)
    except (OSError, ConfinementError) as exc:
        return launch_root, {**facts, "restored": False, "reason": f"the replayed shell directory is gone or not a "
                                                                    f"directory inside the workspace ({exc})"}
    os.close(fd)
    return os.path.join(launch_root, relative), {**facts, "restored": True, "project_root": relative}


_TOOL_NAME = re.compile(r"[A-Z][A-Za-z0-9]{0,63}")


def recorded_tool_set(lines: list[bytes]) -> list[str] | None:
    """The built-in tools the original run was started with (``--tools``), when its session file shows them.

    2.1.332 writes each request's tool list into the session (``api-request-shape``). A default run always has
    ``ToolSearch`` (the other tools are deferred behind it); a list without it was an explicit ``--tools`` set,
    complete as shown (e.g. the task tools, which a default ``-p`` run does not offer), and the continuation gets
    the same set. Otherwise (a default run, or 2.1.220, which writes no shape) the default stays: None.
    """
    names: list[Any] | None = None
    for raw in lines:
        if b'"api-request-shape"' not in raw:
            continue
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        shape = line.get("shape") if isinstance(line, dict) and line.get("type") == "api-request-shape" else None
        tools = shape.get("tools") if isinstance(shape, dict) else None
        if isinstance(tools, list):
            names = [tool.get("name") for tool in tools if isinstance(tool, dict)]
    if not names or "ToolSearch" in names:
        return None
    built_in = [name for name in names if isinstance(name, str) and name != "DeferredToolPlaceholder"]
    if not all(_TOOL_NAME.fullmatch(name) for name in built_in):
        return None  # an MCP tool or an unknown shape: keep Claude's default rather than guess
    return built_in


#: the ``entrypoint`` the Claude Agent SDK's sessions carry (``CLAUDE_CODE_ENTRYPOINT``: Python, TypeScript)
SDK_ENTRYPOINTS = frozenset({"sdk-py", "sdk-ts"})


def recorded_entrypoint(lines: list[bytes]) -> str | None:
    """The Agent SDK entrypoint the session was written through, if it was (the last record naming one).

    Measured on 2.1.332 driven by ``claude-agent-sdk`` 0.2.184 (fixtures ``sdk_*``): every conversation record
    says ``"entrypoint": "sdk-py"`` and the binary puts it in its first system block (``cc_entrypoint=sdk-py``) and
    its User-Agent; a plain ``claude -p`` resume says ``sdk-cli`` instead, so the continued requests' system prompt
    would differ from the original's. With the recorded value in ``CLAUDE_CODE_ENTRYPOINT`` it is the original's,
    byte for byte (the binary restores the system prompt itself from the session's ``prompt_snapshot``).
    """
    for raw in reversed(lines):
        if b'"entrypoint"' not in raw:
            continue
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        value = record.get("entrypoint") if isinstance(record, dict) else None
        if isinstance(value, str):
            return value if value in SDK_ENTRYPOINTS else None
    return None


def argv(entrypoint: Path, session_id: str, nonce: str, max_turns: int | None,
         tools: list[str] | None = None, mcp_config: Path | None = None, stream_input: bool = False) -> list[str]:
    """``stream_input``: the prompt comes on stdin as a stream-json user message (``stream_prompt``), as the Agent
    SDK sends it, instead of as the ``-p`` argument."""
    command = [
        str(entrypoint),
        "--resume", check_id(session_id, "session id"),  # validated by the parser; never an option
        *(["-p", "--input-format", "stream-json"] if stream_input else ["-p", nonce]),
        "--output-format", "stream-json",
        "--verbose",
        "--dangerously-skip-permissions",
    ]
    if max_turns is not None:
        command += ["--max-turns", str(max_turns)]
    if tools:
        command += ["--tools", ",".join(tools)]  # one argv value; every name checked against _TOOL_NAME
    if mcp_config is not None:  # forkpoint's own copy in the agent's home: only the servers the user gave
        command += ["--mcp-config", str(mcp_config), "--strict-mcp-config"]
    return command


MCP_CONFIG = "forkpoint-mcp.json"


def continued_mcp(settings_config: Path | None, home: Path, path_env: str) -> tuple[Path | None, tuple[Path, ...]]:
    """The user's ``--mcp-config`` servers for the continued claude (issue 29): a validated copy written in its
    home (``--mcp-config`` + ``--strict-mcp-config``: no other server), and what its stdio servers need visible in
    a sandbox (``process.mcp.server_paths``). Claude starts the stdio servers itself, in its cwd, inside the run's
    sandbox; an HTTP one is reached from there (refused up front under bwrap, whose network is the bridge only)."""
    if settings_config is None:
        return None, ()
    from forkpoint.process.mcp import config_document, load_config, server_paths

    servers = load_config(settings_config)
    target = config_dir(home) / MCP_CONFIG
    shell.write_home_file(home, target, config_document(servers), "the MCP config")
    readable = tuple(dict.fromkeys(path for server in servers.values() for path in server_paths(server, path_env)))
    return target, readable


def stream_prompt(text: str) -> bytes:
    """The one user message a stream-json input run gets (what the Agent SDK writes for ``query(prompt)``)."""
    return orjson.dumps({"type": "user", "message": {"role": "user", "content": text}}) + b"\n"


def environment(base: Mapping[str, str], home: Path, bridge_url: str, bridge_key: str,
                sdk_entrypoint: str | None = None) -> dict[str, str]:
    """A sanitized env: no stray credentials, an isolated HOME/config, the model behind the bridge (and, for a
    session the Agent SDK wrote, its entrypoint: ``recorded_entrypoint``)."""
    env = sanitized_env(base, strip_credentials=True)
    for name in list(env):
        if name.startswith(("ANTHROPIC_", "CLAUDE_")):
            del env[name]
    shell.loopback_no_proxy(env)
    home_environment(env, home)  # HOME and XDG_* under the state dir, never the user's real home
    env.update(
        {
            "CLAUDE_CONFIG_DIR": str(config_dir(home)),
            "ANTHROPIC_BASE_URL": bridge_url,
            "ANTHROPIC_API_KEY": bridge_key,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
    )
    if sdk_entrypoint in SDK_ENTRYPOINTS:
        env["CLAUDE_CODE_ENTRYPOINT"] = str(sdk_entrypoint)
    if os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"  # claude refuses --dangerously-skip-permissions as root otherwise
    return env


@dataclass(frozen=True)
class StreamOutcome:
    """What the stream-json stdout says about how the run ended."""

    status: str  # completed | max_steps | failed | unknown
    session_id: str | None
    num_turns: int | None
    detail: str | None


def read_stream(stdout: bytes) -> StreamOutcome:
    session_id: str | None = None
    result: dict[str, Any] | None = None
    for raw in stdout.splitlines():
        try:
            event = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(event, dict):
            continue
        if event.get("type") == "system" and event.get("subtype") == "init":
            session_id = event.get("session_id") if isinstance(event.get("session_id"), str) else None
        if event.get("type") == "result":
            result = event
    if result is None:
        return StreamOutcome("unknown", session_id, None, "no result event on stdout")
    subtype = result.get("subtype")
    turns = result.get("num_turns") if isinstance(result.get("num_turns"), int) else None
    if subtype == "success" and not result.get("is_error"):
        return StreamOutcome("completed", session_id, turns, None)
    if subtype == "error_max_turns":
        return StreamOutcome("max_steps", session_id, turns, None)
    detail = result.get("result") if isinstance(result.get("result"), str) else str(subtype)
    return StreamOutcome("failed", session_id, turns, detail)


@dataclass(frozen=True)
class Installed:
    session_id: str
    rebuilt: list[bytes]
    session_file: Path  # in the HOME's project folder of the cwd the agent starts in
    cwd: str
    shell_cwd: dict[str, Any]
    tools: list[str] | None = None  # the recorded explicit tool set (recorded_tool_set), if any
    mcp_config: Path | None = None  # the user's MCP servers, copied into the home (continued_mcp)
    mcp_readable: tuple[Path, ...] = ()
    sdk_entrypoint: str | None = None  # the Agent SDK entrypoint the session was written through (sdk-py, sdk-ts)


def _recorded_lines(job: Job) -> list[bytes]:
    """The original session's lines up to the boundary (where its tool shape is; the rebuild keeps tree lines)."""
    native = job.plan.trajectory.native
    source = getattr(native, "source", None)
    terminals = getattr(native, "batch_terminals", None)
    if not isinstance(source, bytes) or not terminals or job.plan.after_step > len(terminals):
        return []
    return source[: terminals[job.plan.after_step - 1].offset].splitlines()


class ClaudeHooks(AgentHooks[Installed]):
    """``claude --resume ID -p NONCE``: Claude has ``--max-turns``, so the budget is its own, not the bridge's."""

    protocol = "anthropic-messages"
    label = "claude"
    native_cli = "claude"
    budget_at_bridge = False

    def install(self, job: Job) -> Installed:
        session_id = job.prefix.session_id
        assert session_id is not None
        rebuilt = job.prefix.path.read_bytes().splitlines()
        # Start where the replayed shell ended (Claude keeps no shell cwd across --resume; see resume_directory).
        cwd, shell_cwd = resume_directory(job.context.state_dir, job.context.workspace, job.sandbox.cwd)
        # `claude --resume` looks under the project folder of the cwd it sees (the recorded one under bwrap).
        session_file = session_path(job.context.home, Path(cwd), session_id)
        # Replayed commands could write the HOME: no link planted there is followed (forkpoint.core.fs strict helpers).
        shell.write_home_file(job.context.home, session_file, b"".join(line + b"\n" for line in rebuilt),
                              "the rebuilt session")
        # the re-run sub-agents' transcripts, where the binary keeps them (<session-id>/subagents/ beside the file)
        for path in job.prefix.extra_paths:
            relative = path.relative_to(job.prefix.path.parent)
            shell.write_home_file(job.context.home, session_file.parent / relative, path.read_bytes(),
                                  "a sub-agent transcript")
        search_path = sanitized_env(os.environ, strip_credentials=True).get("PATH", os.defpath)  # the agent's PATH
        mcp_config, mcp_readable = continued_mcp(job.settings.mcp_config, job.context.home, search_path)
        return Installed(session_id, rebuilt, session_file, cwd, shell_cwd, recorded_tool_set(_recorded_lines(job)),
                         mcp_config, mcp_readable, recorded_entrypoint(rebuilt))

    def carried(self, job: Job) -> list[Path]:
        """The large Bash outputs and the task list the replay saved in this home (``ClaudeToolExecutor``'s
        ``results_home``)."""
        session_id = job.prefix.session_id
        if session_id is None:
            return []
        checked = check_id(session_id, "session id")
        project = config_dir(Path()) / "projects" / project_dir_name(Path(job.sandbox.cwd))
        return [project / checked / "tool-results", config_dir(Path()) / "tasks" / checked]

    def gate(self, job: Job, state: Installed) -> GateSpec:
        from forkpoint.adapters.claude_code.envelope import expected_prefix
        from forkpoint.adapters.claude_code.gate import ClaudeGate
        from forkpoint.runtimes import trial_release

        # the form the SENDING binary wraps the prefix in (a release on trial in a calibration sends its own)
        target = job.settings.target
        expected = expected_prefix([orjson.loads(line) for line in state.rebuilt], job.nonce, target.version,
                                   sender=trial_release("claude-code", target.entrypoint) or target.version)
        return GateSpec(ClaudeGate(expected, job.boundary_prompt), expected.to_json())

    def launch(self, job: Job, state: Installed, bridge_url: str) -> LaunchSpec:
        entrypoint = job.settings.target.entrypoint
        return LaunchSpec(
            argv(entrypoint, state.session_id, job.nonce, job.settings.remaining_steps, state.tools, state.mcp_config,
                 stream_input=state.sdk_entrypoint is not None),
            environment(os.environ, job.context.home, bridge_url, shell.BRIDGE_KEY, state.sdk_entrypoint), state.cwd,
            job.context.logs / "claude-code.jsonl", writable=(job.context.home,),
            readable=(*runtime_paths(entrypoint), *state.mcp_readable),
            # an Agent SDK session continues the way the SDK drives the binary (measured: with the prompt as -p's
            # argument, 2.1.332's Bash tool schema differs from the recorded one; on stdin it is the recorded one)
            stdin=stream_prompt(job.nonce) if state.sdk_entrypoint is not None else None)

    def outcome(self, job: Job, state: Installed, ran: Ran, summary: BridgeSummary) -> Outcome:
        assert ran.process is not None
        stream = read_stream(ran.process.stdout)
        detail = stream.detail or ran.process.stderr.decode("utf-8", "replace").strip()[-500:]
        status = stream.status if stream.status in ("max_steps", "failed") else "completed"
        kind = None
        if stream.session_id is not None and stream.session_id != state.session_id:
            status, kind = "failed", ErrorKind.CONTINUATION
            detail = f"claude resumed session {stream.session_id}, not the rebuilt {state.session_id}"
        facts: dict[str, Any] = {"native_session_id": state.session_id, "shell_cwd": state.shell_cwd,
                                 "num_turns_reported": stream.num_turns}
        if state.sdk_entrypoint is not None:  # continued as the Agent SDK drives the binary
            facts["sdk_entrypoint"] = state.sdk_entrypoint
        return Outcome(status, detail, kind, facts)

    def collect(self, job: Job, state: Installed, ran: Ran, outcome: Outcome,
                summary: BridgeSummary) -> Collected:
        from forkpoint.adapters.claude_code.continued import clean_continued
        from forkpoint.adapters.claude_code.parse import parse_session

        # one copy of a huge answer at a time: the read bytes die with the split, the lines with the cleaning, the
        # cleaned lines are written one by one and dropped before the re-parse (a 20 MB answer cost ~7 copies)
        lines = shell.read_home_file(job.context.home, state.session_file, "the continued session").splitlines()
        cleaned = clean_continued(lines, state.rebuilt, job.nonce, job.settings.boundary_prompt)
        del lines
        path = job.continued_dir / f"{state.session_id}.jsonl"
        with atomic_writer(path) as handle:
            for line in cleaned.lines:
                handle.write(line)
                handle.write(b"\n")
        turns, removed = cleaned.continued_turns, cleaned.removed_envelope_lines
        del cleaned
        try:
            actions = parse_session(path).next_actions
        except ReplayError as error:
            raise shell.reparse_error("session", error) from None
        return Collected(path, turns, shell.next_action_at(actions, job.plan.after_step),
                         {"envelope_lines_removed": removed})
