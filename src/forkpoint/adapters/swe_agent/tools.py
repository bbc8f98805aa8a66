"""Re-run SWE-agent shell actions without SWE-agent: one emulated persistent bash session per run.

What SWE-agent 1.1.0 (with SWE-ReX 1.4) does with an action, and how forkpoint mirrors it:

- ``run_action = action.strip()`` is typed into ONE long-lived interactive bash on a pseudo-terminal (pexpect,
  24x80, echo off); the output is what the terminal printed before the next prompt, ANSI escapes removed and
  ``\\r\\n`` turned into ``\\n`` (``swerex.runtime.local._strip_control_chars``). forkpoint runs each action with
  ``bash -c`` on a fresh 24x80 pseudo-terminal through forkpoint's supervised process layer and carries the shell
  state over between actions: the working directory and the exported variables (``export -p``). Not carried over:
  aliases, functions and unexported variables, and history expansion (``!``) is off (a non-interactive shell).
- The session starts in ``/<repo_name>`` with ``LANG=LC_ALL=C.UTF-8``, ``agent.tools.env_variables``, ``ROOT`` (the
  repository's physical path, ``SWEEnv._reset_repository``) and ``PROBLEM_STATEMENT`` (text problem statements)
  exported.
- The default bundles' tools (``str_replace_editor``, ``submit``: see bundle_tools.py) are commands on ``PATH``
  like SWE-agent's ``/root/tools/<bundle>/bin``: small wrappers in the run's scratch directory that run forkpoint's
  re-implementation with forkpoint's own Python (``-I``), against a registry file seeded with
  ``agent.tools.registry_variables`` (SWE-agent's ``/root/.swe-agent-env``) and a private ``model.patch``.
- A command still running after ``agent.tools.execution_timeout`` seconds (default 30) is killed with all its
  descendants; the observation is ``command_cancelled_timeout_template`` (SWE-agent interrupts the session).
- The step's ``state`` (``_state_anthropic``) is ``{"working_dir": <cwd after the action>}``; the message the
  model sees is the raw output rendered with the recording's ``next_step_template`` (no-output and truncated
  variants included: see templates.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from forkpoint.adapters.kit.shell import CommandSpec, Runner, run_command
from forkpoint.adapters.swe_agent import bundle_tools
from forkpoint.adapters.swe_agent.parse import SweAgentNative
from forkpoint.adapters.swe_agent.templates import TemplateError, render
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import NotRegularFileError, lstat_strict, read_sandbox_file, refused_as
from forkpoint.core.model import FreshObservation, Plan, RunContext, ToolCall
from forkpoint.process import SUPERVISION_ENV, sanitized_env
from forkpoint.runtimes.flake8 import ensure_flake8
from forkpoint.sandbox import local_sandbox

SHELL = "/bin/bash"
KEEP_BYTES = 8 * 1024 * 1024
_MAX_STATE_BYTES = 16 * 1024 * 1024
_ANSI = re.compile(r"\x1B[@-_][0-?]*[ -/]*[@-~]")


def clean_terminal_output(raw: bytes, *, legacy: bool = False) -> str:
    """SWE-ReX's ``_strip_control_chars`` on pexpect's decoded text (utf-8, backslashreplace). ``legacy``: SWE-ReX
    before 2025-05-20 (SWE-agent 1.0 development trajectories) kept the CRLF and stripped the output."""
    text = _ANSI.sub("", raw.decode("utf-8", "backslashreplace"))
    return text.strip() if legacy else text.replace("\r\n", "\n")


def action_script(action: str, state_file: Path, next_state_file: Path) -> str:
    """The bash program running one action in the carried-over shell state, then saving the new state."""
    state, after = shlex.quote(str(state_file)), shlex.quote(str(next_state_file))
    save = f"{{ unset {SUPERVISION_ENV} OLDPWD; export -p; printf 'cd %q\\n' \"$PWD\"; }} > {after} 2>/dev/null"
    return f"source {state} || exit 97\n{action}\n__forkpoint_rc=$?\n{save}\nexit $__forkpoint_rc\n"


def initial_state(cwd: str, env_variables: dict[str, str], *, tool_dir: Path | None = None,
                  problem_statement: str | None = None) -> str:
    """The shell state SWE-agent's setup leaves: exports, the bundles' bin dir on PATH, ``cd`` into the repo."""
    exports = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", **env_variables}
    if problem_statement is not None:
        exports["PROBLEM_STATEMENT"] = problem_statement
    lines = [f"export {name}={shlex.quote(value)}" for name, value in exports.items()]
    if tool_dir is not None:
        lines.append(f"export PATH={shlex.quote(str(tool_dir))}:\"$PATH\"")
    return "\n".join([*lines, f"cd {shlex.quote(cwd)}", 'export ROOT="$(pwd -P)"', ""])


def tool_wrapper(tool: str, registry: Path, patch: Path, *, legacy: bool = False) -> str:
    """The ``/bin/sh`` script standing in for SWE-agent's bundle script ``tool`` (bundle_tools.py's name for it);
    ``legacy``: the tools of SWE-agent's 1.0 development trajectories."""
    argv = [sys.executable, "-I", bundle_tools.__file__, *(["--legacy"] if legacy else []), str(registry), str(patch),
            tool]
    return f"#!/bin/sh\nexec {' '.join(shlex.quote(word) for word in argv)} \"$@\"\n"


def guard_multiline_input(action: str, multiline: dict[str, str]) -> str:
    """SWE-agent's ``_guard_multiline_input`` (``ToolHandler.guard_multiline_input``): a command with an end marker
    (``edit <start>:<end>`` ... ``end_of_edit``) gets ``<< '<end>'`` on its first line, so its body is a heredoc."""
    patterns = [re.compile(rf"^\s*({re.escape(name)})\s*(.*?)^({re.escape(end)})\s*$", re.DOTALL | re.MULTILINE)
                for name, end in multiline.items()]
    ends = re.compile("|".join(rf"^{re.escape(end)}\s*$" for end in multiline.values()), re.MULTILINE)
    parsed, rest = [], action
    while rest.strip():
        # a match ends at an end marker: search only up to the last one, so a command line with no marker after it
        # is never scanned to the end of a hostile action again and again (quadratic)
        last = max((marker.end() for marker in ends.finditer(rest)), default=0)
        matches = sorted((m for m in (pattern.search(rest, 0, last) for pattern in patterns) if m),
                         key=lambda m: m.start())
        if not matches:
            parsed.append(rest)
            break
        match = matches[0]
        before, command, rest = rest[:match.start()], rest[match.start():match.end()], rest[match.end():]
        if before.strip():
            parsed.append(before)
        if command.strip():
            end = match.group(3).strip()
            if not command.split("\n")[0].strip().endswith(f"<< '{end}'"):
                guarded = command[match.start():]  # SWE-agent slices the match by its offset again
                first = guarded.split("\n")[0]
                command = guarded.replace(first, first + f" << '{end}'", 1)
            parsed.append(command)
    return "\n".join(parsed)


class SweAgentToolExecutor:
    def __init__(self, plan: Plan[SweAgentNative], context: RunContext) -> None:
        native = plan.trajectory.native
        self.native = native
        self.sandbox = context.sandbox or local_sandbox(context.workspace)
        self.cwd = self.sandbox.cwd
        context.state_dir.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix="swe-agent-shell-", dir=context.state_dir))
        self.home = context.home
        self.home.mkdir(parents=True, exist_ok=True)
        self.state_file = self.scratch / "state.sh"
        # the linting edit bundles' install.sh runs `pip install flake8`: forkpoint's pinned, cached copy
        self.flake8 = ensure_flake8() if native.bundles.lints else None
        tool_dir = self._install_tools() if native.bundle_commands else None
        self.state_file.write_text(initial_state(self.cwd, native.env_variables, tool_dir=tool_dir,
                                                 problem_statement=native.problem_statement), "utf-8")
        env = sanitized_env(os.environ, strip_credentials=True)
        env.update({"HOME": str(self.home), "TERM": "xterm"})
        self.env = env
        # Under bwrap one sandbox runs the replay's actions (``forkpoint.sandbox.executor``: one bwrap per action
        # cost ~2x local per call), as SWE-agent ran them all in one container; ``close`` ends it.
        self.executor = self.sandbox.executor()

    def run(self, call: ToolCall) -> FreshObservation:
        templates = self.native.templates
        if templates is None:
            raise ReplayError(ErrorKind.EXECUTOR, f"cannot render {call.call_id}: {self.native.template_problem}",
                              before_effect=True)
        action = str(call.arguments["action"])
        if self.native.bundles.multiline:
            action = guard_multiline_input(action, self.native.bundles.multiline)
        action = action.strip()
        next_state = self.scratch / "state.next.sh"
        next_state.unlink(missing_ok=True)
        spec = CommandSpec((SHELL, "-c", action_script(action, self.state_file, next_state)), Path(self.cwd),
                           self.env, self.native.execution_timeout_s, KEEP_BYTES, 0, tty=True)
        readable = (Path(bundle_tools.__file__).parent, *((self.flake8,) if self.flake8 is not None else ()))
        output = run_command(spec, self.scratch,
                             Runner(self.sandbox, (self.home, self.scratch), readable, self.executor))
        # The command can write the scratch folder: its next state must be a plain file, never a link or FIFO.
        with refused_as(ErrorKind.EXECUTOR, f"the emulated SWE-agent shell state {next_state}"):
            planted = lstat_strict(self.scratch, next_state.name)
            if planted is not None and not stat.S_ISREG(planted.st_mode):
                raise NotRegularFileError(f"not a regular file: {next_state}")
        if output.returncode == 97 and planted is None:
            raise ReplayError(ErrorKind.EXECUTOR, f"the emulated SWE-agent shell could not restore its state "
                                                  f"before {call.call_id}: {clean_terminal_output(output.head)[-300:]}")
        timed_out = output.returncode is None
        if timed_out:
            raw = self._render(templates.timeout, {"command": action, "timeout": _number(
                self.native.execution_timeout_s)}, call)
        else:
            # DefaultAgent.handle_action removes the edit tools' retry token from every observation
            raw = clean_terminal_output(output.head + output.tail, legacy=templates.format_style).replace(
                bundle_tools.RETRY_WITH_OUTPUT, "")
            if planted is not None:
                next_state.replace(self.state_file)
        state = self._state(_recorded_state_keys(self.native, call))
        try:
            message = templates.observation_message(raw, {**self.native.format_values, **state})
        except TemplateError as error:
            raise ReplayError(ErrorKind.EXECUTOR, f"cannot render the observation of {call.call_id}: {error}") \
                from None
        content = _same_shape(call.historical.content if call.historical else None, message)
        native: dict[str, Any] = {"observation": raw, "state": state, "execution_time": round(output.wall_time_s, 6),
                                  "timed_out": timed_out}
        return FreshObservation(call.call_id, content, is_error=False, truncated=output.total_bytes > KEEP_BYTES,
                                return_code=output.returncode, duration_ms=int(output.wall_time_s * 1000),
                                native=native)

    def _install_tools(self) -> Path:
        """The bundles' commands as wrappers in ``scratch/bin``, the registry seeded like ``ToolHandler.reset``."""
        tool_dir = self.scratch / "bin"
        tool_dir.mkdir()
        registry, patch = self.scratch / "registry.json", self.scratch / "model.patch"
        # 1.0 development trajectories (str.format templates) ran the late-2024 scripts (bundle_tools.LEGACY)
        legacy = bool(self.native.templates and self.native.templates.format_style)
        registry.write_text(json.dumps(self.native.bundles.initial_registry(self.native.env_variables)), "utf-8")
        for tool in sorted(self.native.bundle_commands):
            wrapper = tool_dir / tool
            wrapper.write_text(tool_wrapper(self.native.bundles.tool(tool), registry, patch, legacy=legacy), "utf-8")
            wrapper.chmod(stat.S_IRWXU)
        if self.flake8 is not None:  # on PATH like the container's pip-installed flake8 (and nothing else of its venv)
            flake8 = tool_dir / "flake8"
            flake8.write_text(f"#!/bin/sh\nexec {shlex.quote(str(self.flake8 / 'bin' / 'flake8'))} \"$@\"\n", "utf-8")
            flake8.chmod(stat.S_IRWXU)
        return tool_dir

    def _render(self, template: str, values: dict[str, Any], call: ToolCall) -> str:
        try:
            return render(template, {**self.native.format_values, **values})
        except TemplateError as error:
            raise ReplayError(ErrorKind.EXECUTOR, f"cannot render the timeout message of {call.call_id}: {error}") \
                from None

    def _state(self, keys: list[str]) -> dict[str, str]:
        """The recorded state keys recomputed: ``_state_anthropic``'s cwd, ``_state``'s open file too."""
        state: dict[str, str] = {}
        for key in keys:
            if key == "working_dir":
                state[key] = self._working_dir()
            elif key == "open_file":
                state[key] = self._open_file()
        return state

    def _open_file(self) -> str:
        """The windowed ``_state``: ``n/a`` or the registry's CURRENT_FILE (the tools store it resolved inside
        the sandbox, so the host never resolves a path the replayed commands control)."""
        registry = self.scratch / "registry.json"
        try:
            raw = read_sandbox_file(self.scratch, registry, kind=ErrorKind.EXECUTOR,
                                    what="the emulated SWE-agent registry", max_bytes=_MAX_STATE_BYTES)
            data = json.loads(raw.decode("utf-8", "replace"))
        except ValueError:  # a command overwrote it: the windowed tools would fail the same way
            data = {}
        current = data.get("CURRENT_FILE") if isinstance(data, dict) else None
        return str(current) if isinstance(current, str) and current else "n/a"

    def _working_dir(self) -> str:
        state = read_sandbox_file(self.scratch, self.state_file, kind=ErrorKind.EXECUTOR,
                                  what="the emulated SWE-agent shell state", max_bytes=_MAX_STATE_BYTES)
        for line in reversed(state.decode("utf-8", "replace").splitlines()):
            if line.startswith("cd "):
                words = shlex.split(line[3:])
                if words:
                    return words[0]
        return self.cwd

    def close(self) -> None:
        self.executor.close()
        tools = [self.scratch / "bin" / tool for tool in (*self.native.bundle_commands, "flake8")]
        for path in (self.state_file, self.scratch / "state.next.sh", self.scratch / "registry.json",
                     self.scratch / "model.patch", *tools):
            path.unlink(missing_ok=True)
        for directory in (self.scratch / "bin", self.scratch):
            with contextlib.suppress(OSError):
                directory.rmdir()


def _recorded_state_keys(native: SweAgentNative, call: ToolCall) -> list[str]:
    """The state keys the step recorded that forkpoint recomputes, in the recorded order."""
    index = call.native if isinstance(call.native, int) else -1
    steps = native.data.get("trajectory")
    if not isinstance(steps, list) or not 0 <= index < len(steps):
        return []
    state = steps[index].get("state") if isinstance(steps[index], dict) else None
    return [key for key in state if key in native.bundles.state_keys] if isinstance(state, dict) else []


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _same_shape(historical: Any, text: str) -> Any:
    """The fresh message in the recorded content shape (a string, or text parts keeping e.g. cache_control)."""
    if isinstance(historical, list) and len(historical) == 1 and isinstance(historical[0], dict) \
            and historical[0].get("type") == "text":
        return [{**historical[0], "text": text}]
    return text
