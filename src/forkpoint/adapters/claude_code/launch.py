"""How the real `claude` binary is started on a rebuilt session (argv, env, session placement)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from forkpoint.fs import ConfinementError, open_confined
from forkpoint.ids import check_id
from forkpoint.process import sanitized_env
from forkpoint.sandbox import home_environment

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


def argv(entrypoint: Path, session_id: str, nonce: str, max_turns: int | None) -> list[str]:
    command = [
        str(entrypoint),
        "--resume", check_id(session_id, "session id"),  # validated by the parser; never an option
        "-p", nonce,
        "--output-format", "stream-json",
        "--verbose",
        "--dangerously-skip-permissions",
    ]
    if max_turns is not None:
        command += ["--max-turns", str(max_turns)]
    return command


def environment(base: Mapping[str, str], home: Path, bridge_url: str, bridge_key: str) -> dict[str, str]:
    """A sanitized env: no stray credentials, an isolated HOME/config, the model behind the bridge."""
    env = sanitized_env(base, strip_credentials=True)
    for name in list(env):
        if name.startswith(("ANTHROPIC_", "CLAUDE_")):
            del env[name]
    no_proxy = [part for part in env.get("NO_PROXY", env.get("no_proxy", "")).split(",") if part]
    for host in ("127.0.0.1", "localhost", "::1"):
        if host not in no_proxy:
            no_proxy.append(host)
    home_environment(env, home)  # HOME and XDG_* under the state dir, never the user's real home
    env.update(
        {
            "CLAUDE_CONFIG_DIR": str(config_dir(home)),
            "ANTHROPIC_BASE_URL": bridge_url,
            "ANTHROPIC_API_KEY": bridge_key,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "NO_PROXY": ",".join(no_proxy),
            "no_proxy": ",".join(no_proxy),
        }
    )
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
