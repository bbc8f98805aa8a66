"""Re-execute historical Claude Code tool calls with Claude Code's own semantics and output text.

``ClaudeToolExecutor`` is the adapter's ``ToolExecutor``: one per replay run, calls in order. It reproduces the
REAL tools of the verified versions (2.1.220, 2.1.332) byte for byte where they are deterministic; every rule
was measured on those binaries driven by a scripted model (see ``tool_bash`` / ``tool_read`` / ``tool_edit`` for
the rules and ``tests/adapters/claude_code/test_fixture_fidelity.py`` for the proof on the recorded fixtures).

- Bash (``tool_bash``): a shell state that keeps the working directory between calls, Claude's wrapper,
  output text, error/timeout formats, and large outputs persisted under
  ``<config_dir>/projects/<project>/<session_id>/tool-results/`` with the ``<persisted-output>`` preview.
- Read / Write / Edit (``tool_read``, ``tool_edit``, sharing ``tool_files``): Claude's numbering, reminders, error
  texts, per-session file state (2.1.220's Write-needs-Read and "file unchanged" Read; both versions'
  modified-since-read checks).
- NotebookEdit (``tool_notebook``): replace / insert / delete with Claude's notebook bytes and texts.
- TaskCreate / TaskUpdate / TaskList / TaskGet (``tool_tasks``): the session's task list, kept in memory and in
  Claude's own task files of the rebuilt session. EnterPlanMode (``tool_plan``): its constant text.
- Glob / Grep / LS / MultiEdit are not offered by these versions: their fresh result is Claude's own
  ``No such tool available`` error (the parser marks such calls stale anyway).
- Everything touches only the workspace: a path outside it (or a symlink to a regular file outside it) is a
  ``ReplayError(executor, before_effect=True)`` and nothing runs. Tool failures are observations.
- Everything runs through the run's sandbox (``context.sandbox``, default local): Bash inside it, file tools on
  the paths it exposes (under bwrap the recorded cwd). With ``--path-map`` every string of a call's input is
  rewritten recorded -> real before it runs, and every string of its content and ``toolUseResult`` real ->
  recorded afterwards (``sandbox.base.rewrite_arguments`` / ``restore_paths``, both logged for the metadata).

Volatile output: only the path of a persisted large output (agent home, session id, random file id) differs
between two runs; ``normalize_volatile`` masks exactly that for comparisons.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from forkpoint.adapters.claude_code.launch import project_dir_name, save_shell_state
from forkpoint.adapters.claude_code.policy import INTERACTIVE_TOOLS
from forkpoint.adapters.claude_code.tool_bash import BashShell, timeout_ms
from forkpoint.adapters.claude_code.tool_edit import edit, write
from forkpoint.adapters.claude_code.tool_files import SessionFiles
from forkpoint.adapters.claude_code.tool_interactive import ANSWER_FROM_RECORDING, interactive_outcome
from forkpoint.adapters.claude_code.tool_notebook import notebook_edit
from forkpoint.adapters.claude_code.tool_plan import enter_plan_mode
from forkpoint.adapters.claude_code.tool_profile import NEW, ToolOutcome, tool_profile
from forkpoint.adapters.claude_code.tool_read import read
from forkpoint.adapters.claude_code.tool_tasks import TASK_TOOLS, TaskList
from forkpoint.adapters.claude_code.tool_todos import TodoLists
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import FreshObservation, RunContext, ToolCall
from forkpoint.process import sanitized_env
from forkpoint.sandbox import home_environment, local_sandbox
from forkpoint.sandbox.base import fresh_observation, rewrite_arguments

#: Tools these versions do not offer, with the exact refusal text both versions give.
NOT_OFFERED = {
    "Glob": "Error: No such tool available: Glob. Glob is not available in this session — find files with `find` "
    "via the Bash tool instead.",
    "Grep": "Error: No such tool available: Grep. Grep is not available in this session — search file contents "
    "with `grep` via the Bash tool instead.",
    "LS": "Error: No such tool available: LS",
    "MultiEdit": "Error: No such tool available: MultiEdit",
}

_PERSISTED_PATH = re.compile(r"(<persisted-output>\nOutput too large \([^)\n]*\)\. Full output saved to: )([^\n]+)")
PERSISTED_PATH_PLACEHOLDER = "<persisted-output-path>"


def normalize_volatile(content: Any) -> Any:
    """Mask the only run-dependent part of Claude Code tool output, for comparing fresh with historical.

    That is the file path inside a ``<persisted-output>`` block (``$HOME/.claude/projects/<project>/<session>/
    tool-results/<random id>.txt``): it names the agent home, the session and a random id. Everything else,
    the size and the preview included, is left as is. Strings and lists of text blocks are handled; other
    values are returned unchanged.
    """
    if isinstance(content, str):
        return _PERSISTED_PATH.sub(lambda match: match.group(1) + PERSISTED_PATH_PLACEHOLDER, content)
    if isinstance(content, list):
        return [
            {**block, "text": normalize_volatile(block["text"])}
            if isinstance(block, dict) and isinstance(block.get("text"), str)
            else block
            for block in content
        ]
    return content


def tool_environment(version: str, session_id: str, home: Path | None) -> dict[str, str]:
    """The environment of Claude's Bash tool: forkpoint's own, sanitized, plus the variables Claude sets."""
    env = sanitized_env(os.environ, strip_credentials=True)
    for name in list(env):
        if name in ("PWD", "OLDPWD") or name.startswith(("ANTHROPIC_", "CLAUDE")):
            del env[name]
    env.update(
        {
            "AI_AGENT": f"claude-code_{version.replace('.', '-')}_agent",
            "CLAUDECODE": "1",
            "CLAUDE_CODE_CHILD_SESSION": "1",
            "CLAUDE_CODE_ENTRYPOINT": "sdk-cli",
            "CLAUDE_CODE_SESSION_ID": session_id,
            "COREPACK_ENABLE_AUTO_PIN": "0",
            "GIT_EDITOR": "true",
            "NoDefaultCurrentDirectoryInExePath": "1",
            "SHELL": "/bin/bash",
        }
    )
    if home is not None:
        home_environment(env, home)
    return env


class ClaudeToolExecutor:
    """Runs the FRESH-policy calls of one Claude Code session in order (not thread-safe: one call at a time).

    ``config_dir`` is the replayed commands' ``CLAUDE_CONFIG_DIR`` (``<home>/.claude``) and ``session_id`` the
    rebuilt session's id: large Bash outputs are saved in its ``tool-results`` folder, which is where Claude itself
    keeps them and what the content's ``Full output saved to:`` line points at. ``results_home``: the continued
    agent's own home, when it is another folder (the run's ``agent_home``): the outputs are saved there instead
    (by forkpoint, not the command), so the continued claude finds them at the path its session names, and the
    continuation shell carries them into the home it rebuilds; replayed commands may read them, not write them.
    """

    def __init__(self, context: RunContext, version: str, session_id: str, config_dir: Path,
                 results_home: Path | None = None, recorded: str | None = None) -> None:
        self.profile = tool_profile(version, recorded)  # ``recorded``: the recording's own version (a 2.0.x profile)
        workspace = context.workspace
        if not workspace.is_dir():
            raise ReplayError(ErrorKind.WORKSPACE, f"workspace {workspace} is not a directory")
        self.sandbox = context.sandbox or local_sandbox(workspace)
        self._state_dir = context.state_dir
        root = self.sandbox.roots[0]  # what `pwd -P` prints at the workspace, as the tools see it
        home = config_dir.parent if config_dir.name == ".claude" else None
        # Claude keeps large outputs under the project folder of the cwd IT sees (the recorded one under bwrap).
        results_config = config_dir if results_home is None else results_home / ".claude"
        results = results_config / "projects" / project_dir_name(Path(self.sandbox.cwd)) / session_id
        results_root = results_home or home or config_dir
        context.state_dir.mkdir(parents=True, exist_ok=True)  # the run's state dir, not /tmp: a killed run
        self._scratch = Path(tempfile.mkdtemp(prefix="forkpoint-claude-tools-", dir=context.state_dir))  # leaves none
        self.bash = BashShell(
            root,
            tool_environment(version, session_id, home),
            self.profile,
            results / "tool-results",
            self._scratch,
            self.sandbox,
            (home,) if home is not None else (),
            results_root=results_root,
            readable=(results / "tool-results",) if results_home is not None else (),
        )
        self.files = SessionFiles(
            workspace, self.profile, lambda: self.bash.cwd, str(home) if home else None, self.sandbox
        )
        self._handlers: dict[str, Callable[[dict[str, Any]], ToolOutcome]] = {
            "Bash": self._bash,
            "Read": partial(read, self.files),
            "Write": partial(write, self.files),
            "Edit": partial(edit, self.files),
            "EnterPlanMode": enter_plan_mode,
        }
        # The session's task list, where Claude keeps it: in the continued agent's own home when it has one (written
        # by forkpoint, carried into the home the continuation rebuilds, like the saved large outputs).
        self._modern = self.profile is NEW
        self._mcp = context.mcp  # the user's MCP servers (--mcp-config), None without
        # Sub-agents (measured on both versions): one file-read state with the parent (a file only the sub-agent read
        # can be edited by the parent), but a shell directory of their own: it starts where the parent's is, and the
        # sub-agent's `cd` does not move the parent's. The calls of the context not running keep their directory here.
        self._agent: str | None = None
        self._shell_dirs: dict[str | None, str] = {}
        self.tasks = TaskList(results_config / "tasks" / session_id, results_config, self._modern)
        self.todos = TodoLists()
        self._answer_version = recorded or version  # an answer's text is the recording binary's format

    def run(self, call: ToolCall) -> FreshObservation:
        self._enter(call.subagent)
        started = time.monotonic()
        handler = self._handlers.get(call.name)
        if handler is not None:
            outcome = handler(rewrite_arguments(self.sandbox, call.call_id, call.arguments))
        elif call.name in TASK_TOOLS:
            outcome = self.tasks.run(call.name, dict(call.arguments))
        elif call.name == "TodoWrite":
            outcome = self.todos.write(call.subagent, dict(call.arguments))
        elif call.name in INTERACTIVE_TOOLS and call.historical is not None:
            return self._interactive(call, started)
        elif call.name == "NotebookEdit":
            recorded = call.historical.text if call.historical is not None else None
            arguments = rewrite_arguments(self.sandbox, call.call_id, call.arguments)
            outcome = notebook_edit(self.files, arguments, recorded, self._modern)
        elif call.mcp is not None and self._mcp is not None:
            from forkpoint.adapters.claude_code.tool_mcp import mcp_outcome

            server, tool = call.mcp
            mcp = self._mcp
            outcome = mcp_outcome(mcp.call(server, tool, dict(call.arguments)), call.name,
                                  call.historical.text if call.historical is not None else None,
                                  lambda: mcp.input_schema(server, tool))
        elif call.name in NOT_OFFERED:
            message = NOT_OFFERED[call.name]
            outcome = ToolOutcome(f"<tool_use_error>{message}</tool_use_error>", True, message)
        else:
            raise ReplayError(
                ErrorKind.UNSUPPORTED_VERSION,
                f"forkpoint does not re-execute the Claude Code tool {call.name!r} (call {call.call_id})",
                before_effect=True,
            )
        return fresh_observation(self.sandbox, call.call_id, started, content=outcome.content, native=outcome.native,
                                 is_error=outcome.is_error, truncated=outcome.truncated,
                                 return_code=outcome.return_code)

    def _interactive(self, call: ToolCall, started: float) -> FreshObservation:
        """AskUserQuestion / ExitPlanMode from the recorded answer (policy re-runs only exact reproductions)."""
        assert call.historical is not None
        outcome = interactive_outcome(call.name, dict(call.arguments), call.historical.text, call.native,
                                      self._answer_version)
        if isinstance(outcome, str):
            raise ReplayError(ErrorKind.EXECUTOR, f"{call.name} call {call.call_id}: {outcome}", before_effect=True)
        fresh = fresh_observation(self.sandbox, call.call_id, started, content=outcome.content,
                                  native=outcome.native, is_error=outcome.is_error, truncated=False, return_code=None)
        return replace(fresh, note=ANSWER_FROM_RECORDING)

    def _enter(self, agent: str | None) -> None:
        """Switch the shell directory to ``agent``'s (None: the session's own); a new sub-agent starts in the
        directory of the context that ran last (its parent: calls run in order, a sub-agent's before its Agent call)."""
        if agent == self._agent:
            return
        self._shell_dirs[self._agent] = self.bash.cwd
        self.bash.cwd = self._shell_dirs.get(agent, self.bash.cwd)
        self._agent = agent

    def close(self) -> None:
        """Leave the shell's final directory for the continuation (``shell_state``), then drop the scratch dir."""
        self._enter(None)  # the session's own directory, not a sub-agent's
        try:
            self.bash.close()
        finally:
            shutil.rmtree(self._scratch, ignore_errors=True)
        with contextlib.suppress(OSError):
            save_shell_state(self._state_dir, os.path.relpath(self.bash.cwd, self.bash.root))

    def _bash(self, arguments: dict[str, Any]) -> ToolOutcome:
        command = arguments.get("command", "")
        if not isinstance(command, str) or "\0" in command:
            raise ReplayError(ErrorKind.EXECUTOR, "Bash call has no string command", before_effect=True)
        if arguments.get("run_in_background") is True:
            message = "Bash with run_in_background cannot be replayed deterministically"
            raise ReplayError(ErrorKind.EXECUTOR, message, before_effect=True)
        return self.bash.run(command, timeout_ms(arguments.get("timeout")))

