"""Re-execute historical Codex tool calls with Codex's own semantics and output text.

``CodexToolExecutor`` is the adapter's ``ToolExecutor``: one per replay run, calls in order. It reproduces the
tools of the verified versions (0.149.0, 0.171.0) byte for byte where they are deterministic; every rule was
measured on those binaries driven by a scripted model (``tests/adapters/codex/test_fixture_fidelity.py`` is the
proof on the recorded fixtures, ``test_tools.py`` pins the probed texts):

- ``exec_command`` (``tool_exec``): the shell Codex derives (``/bin/bash -lc``, run as ``-c`` with the login
  snapshot's environment), yield time, output cap and truncation, ``rm -f`` refusal (``tool_policy``), Codex's
  argument errors (``tool_args``), the exact header. One function, ``kit.shell.run_command``, runs processes.
- ``shell_command`` (0.149 only; 0.171 answers ``unsupported call: shell_command``): the legacy output format.
- ``apply_patch`` (``tool_patch``), freeform (``custom_tool_call``) and function forms (``{"input"}`` or
  ``{"patch"}``): Codex's grammar, matching, texts and per-version line endings, confined to the workspace.
- ``update_plan``: ``Plan updated`` on 0.149 (after Codex's argument checks); ``unsupported call: update_plan``
  on 0.171. Any tool Codex does not know gets ``unsupported call: <name>``.
- ``shell`` (recordings of Codex before 0.96, ``SHELL_JSON_BEFORE``; measured on 0.40.0): the argv tool with
  the JSON output (``tool_exec.CommandTools.shell_json``). The tool profile is chosen from the RECORDED version
  (``session_meta.cli_version``), not the verified version the rest of the run is read as, and each observation
  names it (``native["tool_profile"] = "0.40.0"``). On a recording of 0.96+ ``shell`` stays unsupported.
- a recording before 0.142 (``TRUNCATION_WARNING_FROM``; measured 0.96.0-0.141.0): exec_command / write_stdin
  truncate without the ``Warning: truncated output`` first line; those observations name the profile
  (``native["tool_profile"] = NO_TRUNCATION_WARNING``).
- ``write_stdin`` (``tool_session``): a process session an exec_command left running at its yield stays alive
  (supervised, sandboxed, killed by ``close``); writes and polls are replayed with Codex's windows and texts.
- ``view_image`` (``tool_image``): the confined file read and the ``input_image`` data URL Codex sends (bytes
  unchanged); what it would resize or re-encode is refused before any effect (stale).
- ``web_search``, ... cannot be re-run (the adapter marks them stale): calling ``run`` with one is a
  ``ReplayError`` before any effect.

Everything runs through the run's sandbox (``context.sandbox``, default local): commands inside it with the network
off, apply_patch on the paths it exposes (under bwrap the recorded cwd is the session cwd). With ``--path-map``
every string of a call's input is rewritten recorded -> real before it runs, and the output text and native
metadata real -> recorded afterwards (``sandbox.base.rewrite_arguments`` / ``restore_paths``, both logged).

Every observation is the output string Codex writes to the rollout (``is_error`` is always False: Codex's tool
outputs carry no error flag). ``normalize_volatile`` masks the parts that differ on every run.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from forkpoint.adapters.codex import tool_args
from forkpoint.adapters.codex.parse import VIEW_IMAGE_MEASURED_FROM, CodexNative, Line
from forkpoint.adapters.codex.tool_exec import (
    SHELL_JSON_PROFILE,
    CommandTools,
    Environment,
    ExecOutcome,
    ExecProfile,
    shell_apply_patch,
    shell_json_content,
)
from forkpoint.adapters.codex.tool_image import view_image, view_image_040
from forkpoint.adapters.codex.tool_patch import ApplyPatch
from forkpoint.adapters.codex.tool_patch_grammar import VERIFICATION_FAILED
from forkpoint.adapters.codex.tool_session import Recorded, recorded_outcome
from forkpoint.adapters.kit.shell import Runner
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import FreshObservation, RunContext, ToolCall
from forkpoint.core.releases import number
from forkpoint.process import sanitized_env
from forkpoint.sandbox import local_sandbox
from forkpoint.sandbox.base import fresh_observation, rewrite_arguments

#: Tools Codex offers whose result cannot be re-created (a process session, an image, the web, the user, ...).
NOT_REPLAYABLE = {
    "web_search": "web search results change over time",
    "request_user_input": "it asked the original user a question",
    "tool_search": "it reflects the original session's tool registry",
    "get_goal": "goals live in the original CODEX_HOME",
    "create_goal": "goals live in the original CODEX_HOME",
    "update_goal": "goals live in the original CODEX_HOME",
}
PLAN_UPDATED = "Plan updated"


@dataclass(frozen=True)
class CodexToolProfile:
    version: str
    update_plan: bool
    shell_command: bool
    preserve_line_endings: bool
    failure_names_command: bool

    @property
    def exec(self) -> ExecProfile:
        return ExecProfile(self.version, self.failure_names_command, per_call_env=self.preserve_line_endings)


PROFILES = {
    "0.149.0": CodexToolProfile("0.149.0", True, True, False, True),
    "0.171.0": CodexToolProfile("0.171.0", False, False, True, False),
}


#: recordings of versions before this one ran the argv ``shell`` tool with JSON output (Codex 0.40's semantics):
#: the first release that offers the model ``exec_command`` / ``write_stdin`` instead of ``shell`` (bisected on the
#: real releases with the calibrate probe's tool listing: 0.95.0 offers ``shell``, 0.96.0 ``exec_command``). From
#: it on, a ``shell`` call is answered ``unsupported call: shell`` (measured on 0.145.0).
SHELL_JSON_BEFORE = (0, 96, 0)


def shell_json_profile(recorded: str | None) -> bool:
    """Whether a recording of ``recorded`` re-runs ``shell`` with Codex 0.40's semantics."""
    value = number(recorded)
    return value is not None and value < SHELL_JSON_BEFORE


#: recordings of releases before this one truncate a long exec_command / write_stdin output without the first line
#: ``Warning: truncated output (original token count: N)`` (0.142.0 adds it); the rest of the text is the verified
#: versions'. Measured from 0.96.0, the first ``exec_command`` release (fixture 0.96.0/truncation_096), on 0.101.0,
#: 0.105.0, 0.110.0, 0.113.0, 0.128.0, 0.130.0 and 0.137.0-0.141.0 (the release sweep's probes; 0.116.0/0.118.0
#: write the same text after their own ``Command:`` line). Chosen from the RECORDED version, named in each
#: observation.
TRUNCATION_WARNING_FROM = (0, 142, 0)
#: the name of that tool-profile difference (``native["tool_profile"]``, the version note)
NO_TRUNCATION_WARNING = "0.96.0-0.141.0 truncation text"


def truncation_warning(recorded: str | None) -> bool:
    """Whether a recording of ``recorded`` re-runs exec_command with the warning line (unknown: yes)."""
    value = number(recorded)
    return value is None or value >= TRUNCATION_WARNING_FROM


def profile_for_version(version: str) -> CodexToolProfile:
    profile = PROFILES.get(version)
    if profile is None:
        raise ReplayError(
            ErrorKind.UNSUPPORTED_VERSION,
            f"forkpoint re-executes the tools of Codex {', '.join(PROFILES)} only, not {version or '(unknown)'}",
            before_effect=True,
        )
    return profile


# ----------------------------------------------------------------------------------------- volatile parts

CHUNK_ID_PLACEHOLDER = "<chunk-id>"
WALL_TIME_PLACEHOLDER = "<wall-time>"
SESSION_ID_PLACEHOLDER = "<session-id>"
DURATION_PLACEHOLDER = "<duration>"
_UNIFIED_HEADER = re.compile(r"\AChunk ID: [0-9a-f]{6}\nWall time: \d+(?:\.\d+)? seconds\n")
_RUNNING = re.compile(r"\AProcess running with session ID \d+\n")
_LEGACY_HEADER = re.compile(r"\A(Exit code: -?\d+\n)Wall time: \d+(?:\.\d+)? seconds\n")
_SHELL_JSON = re.compile(
    r'\A(\{"output":")(command timed out after \d+ milliseconds\\n)?(.*,"metadata":\{"exit_code":-?\d+,)'
    r'"duration_seconds":\d+(?:\.\d+)?(?:e[+-]?\d+)?\}\}\Z', re.DOTALL)
_LEGACY_TIMEOUT = re.compile(r"\A((?:Total output lines: \d+\n)?Output:\n)command timed out after \d+ milliseconds\n")


def normalize_volatile(content: Any) -> Any:
    """Mask the run-dependent parts of Codex tool output, for comparing a fresh observation with the historical one.

    Only header fields Codex fills with a random or measured value are masked, never command output:

    - exec_command: ``Chunk ID: <6 random hex>`` and ``Wall time: <measured> seconds`` (first two lines), and
      ``Process running with session ID <random>`` (a command still running when its yield time ended);
    - apply_patch / shell_command: ``Wall time: <measured, 0.1 s> seconds`` (second line), and for a timed-out
      shell_command the measured ``command timed out after <N> milliseconds`` first output line.

    - Codex 0.40's ``shell`` JSON: ``"duration_seconds"`` (measured, 0.1 s) and a timed-out command's measured
      ``command timed out after <N> milliseconds`` first output line.

    Everything else (exit code, token count, truncation, output bytes) must match exactly. Values other than
    strings are returned unchanged.
    """
    if not isinstance(content, str):
        return content
    json_shell = _SHELL_JSON.match(content)
    if json_shell:
        timed_out = f"command timed out after {DURATION_PLACEHOLDER} milliseconds\\n" if json_shell.group(2) else ""
        return (f'{json_shell.group(1)}{timed_out}{json_shell.group(3)}'
                f'"duration_seconds":"{DURATION_PLACEHOLDER}"}}}}')

    match = _UNIFIED_HEADER.match(content)
    if match:
        rest = content[match.end() :]
        running = _RUNNING.match(rest)
        if running:
            rest = f"Process running with session ID {SESSION_ID_PLACEHOLDER}\n" + rest[running.end() :]
        return f"Chunk ID: {CHUNK_ID_PLACEHOLDER}\nWall time: {WALL_TIME_PLACEHOLDER} seconds\n{rest}"
    match = _LEGACY_HEADER.match(content)
    if match:
        rest = content[match.end() :]
        timeout = _LEGACY_TIMEOUT.match(rest)
        if timeout:
            rest = f"{timeout.group(1)}command timed out after {DURATION_PLACEHOLDER} milliseconds\n" + rest[
                timeout.end() :
            ]
        return f"{match.group(1)}Wall time: {WALL_TIME_PLACEHOLDER} seconds\n{rest}"
    return content


# ----------------------------------------------------------------------------------------- the executor


def runtime_path_dir(version: str) -> Path | None:
    """The runtime's ``codex-path`` dir (Codex puts it first on the PATH of commands: its bundled ``rg``)."""
    from forkpoint import runtimes

    runtime = runtimes.find("codex", version)
    if runtime is None:
        return None
    candidate = runtime.entrypoint.parent.parent / "codex-path"
    return candidate if candidate.is_dir() else None


def tool_environment() -> dict[str, str]:
    """forkpoint's environment without what would redirect Python or leak credentials to replayed commands."""
    return sanitized_env(os.environ, strip_credentials=True)


class CodexToolExecutor:
    """Runs the FRESH-policy calls of one Codex rollout in order (not thread-safe: one call at a time).

    ``context.workspace`` is Codex's session cwd (the rollout's recorded cwd), ``context.home`` the agent HOME
    commands see (``CODEX_HOME`` = ``<home>/.codex``), ``context.session_id`` the thread id they see. ``native`` is
    the parsed rollout (``Trajectory.native``): with it, argument errors quote the raw JSON the model sent
    (without it the arguments are re-serialised, which can shift a reported column).
    """

    def __init__(
        self,
        context: RunContext,
        version: str,
        *,
        native: CodexNative | None = None,
        path_prepend: Path | None = None,
    ) -> None:
        self.profile = profile_for_version(version)
        recorded = native.session_meta.get("cli_version") if native is not None else None
        self.shell_json = shell_json_profile(recorded if isinstance(recorded, str) else None)
        # view_image before 0.149 runs only in 0.40's measured form (parse.VIEW_IMAGE_UNMEASURED): not bisected
        recorded_number = number(recorded if isinstance(recorded, str) else None)
        self.image_040 = recorded_number is not None and recorded_number < VIEW_IMAGE_MEASURED_FROM
        workspace = context.workspace
        if not workspace.is_dir():
            raise ReplayError(ErrorKind.WORKSPACE, f"workspace {workspace} is not a directory")
        self.workspace = workspace
        self.sandbox = context.sandbox or local_sandbox(workspace)
        cwd = self.sandbox.cwd  # Codex's session cwd as the tools see it (under bwrap: the recorded cwd)
        self._lines: dict[int, Line] = {line.index: line for line in native.lines} if native is not None else {}
        self._recorded: dict[str, Recorded | None] = {
            str(line.payload.get("call_id")): recorded_outcome(line.payload.get("output"))
            for line in (native.lines if native is not None else ())
            if line.payload.get("type") == "function_call_output"
        }
        context.state_dir.mkdir(parents=True, exist_ok=True)  # the run's state dir, not /tmp: a killed run
        self._scratch = Path(tempfile.mkdtemp(prefix="forkpoint-codex-tools-", dir=context.state_dir))  # leaves none
        home = context.home
        home.mkdir(parents=True, exist_ok=True)
        prepend = path_prepend if path_prepend is not None else runtime_path_dir(version)
        # One sandbox for all of the replay's commands under bwrap (``forkpoint.sandbox.executor``), ended by close.
        self._executor = self.sandbox.executor()
        runner = Runner(self.sandbox, (home,), (prepend,) if prepend is not None else (), self._executor)
        environment = Environment(
            tool_environment(), Path(cwd), home, context.session_id, prepend, self._scratch, runner
        )
        exec_profile = self.profile.exec
        self.truncation_warning = truncation_warning(recorded if isinstance(recorded, str) else None)
        if not self.truncation_warning:
            exec_profile = replace(exec_profile, truncation_warning=False)
        self.commands = CommandTools(workspace, environment, exec_profile, self._scratch, self.sandbox)
        host_roots = (os.path.abspath(workspace), os.path.realpath(workspace))
        self.patcher = ApplyPatch(
            workspace,
            self.profile.preserve_line_endings,
            cwd=cwd,
            aliases=tuple(root for root in self.sandbox.roots if root not in host_roots),
            host_path=self.sandbox.host_path,
        )

    def run(self, call: ToolCall) -> FreshObservation:
        started = time.monotonic()
        sandbox = self.sandbox
        if sandbox.path_map:
            call = replace(call, arguments=rewrite_arguments(sandbox, call.call_id, call.arguments))
        outcome = self._dispatch(call)
        if not self.truncation_warning and call.name in ("exec_command", "write_stdin"):
            outcome = replace(outcome, native={**outcome.native, "tool_profile": NO_TRUNCATION_WARNING})
        image = not isinstance(outcome.content, str)  # view_image's data URL: base64 is not text to path-map
        observation = fresh_observation(sandbox, call.call_id, started, content="" if image else outcome.content,
                                        native=outcome.native, is_error=False, truncated=outcome.truncated,
                                        return_code=outcome.return_code)
        return replace(observation, content=outcome.content) if image else observation

    def close(self) -> None:
        try:
            self.commands.close()  # every live process session ends with the replay
        finally:
            try:
                self._executor.close()
            finally:
                shutil.rmtree(self._scratch, ignore_errors=True)

    # -- dispatch

    def _dispatch(self, call: ToolCall) -> ExecOutcome:
        name = call.name
        arguments = call.arguments
        if name in NOT_REPLAYABLE:
            raise ReplayError(
                ErrorKind.EXECUTOR,
                f"Codex tool {name!r} cannot be re-executed: {NOT_REPLAYABLE[name]} (call {call.call_id})",
                before_effect=True,
            )
        if "_raw_arguments" in arguments:
            raise ReplayError(
                ErrorKind.EXECUTOR,
                f"the arguments of call {call.call_id} are not a JSON object; Codex's own error is reused (stale)",
                before_effect=True,
            )
        if name == "exec_command":
            recorded = self._recorded.get(call.call_id)
            return self.commands.exec_command(arguments, self._raw(call), call.call_id, recorded)
        if name == "write_stdin":
            return self.commands.write_stdin(arguments, self._recorded.get(call.call_id))
        if name == "shell_command" and self.profile.shell_command:
            return self.commands.shell_command(arguments, self._raw(call))
        if name == "apply_patch":
            return self._apply_patch(call)
        if name == "view_image" and not self.image_040:
            content = view_image(arguments, self.patcher.cwd, self.workspace, self.patcher.aliases,
                                 self.sandbox.host_path, self.profile.version)
            return ExecOutcome(content, None, {})
        if name == "view_image":  # 0.40: the image goes in the user message after the constant output
            content = view_image_040(arguments, self.patcher.cwd, self.workspace, self.patcher.aliases,
                                     self.sandbox.host_path)
            return ExecOutcome(content, None, {"image_message": True})
        if name == "shell" and self.shell_json:
            argv = arguments.get("command")
            patch = shell_apply_patch(argv) if isinstance(argv, list) and all(isinstance(a, str) for a in argv) \
                else None
            if patch is not None:
                return self._shell_apply_patch(patch)
            return self.commands.shell_json(arguments, self._raw(call))
        if name == "update_plan" and (self.profile.update_plan or self.shell_json):
            problem = tool_args.check(self._raw(call), tool_args.UPDATE_PLAN)
            return ExecOutcome(problem or PLAN_UPDATED, None, {})
        return ExecOutcome(f"unsupported call: {name}", None, {})

    def _line(self, call: ToolCall) -> Line | None:
        return self._lines.get(call.native) if isinstance(call.native, int) else None

    def _raw(self, call: ToolCall) -> str:
        line = self._line(call)
        if line is not None and isinstance(line.payload.get("arguments"), str):
            return str(line.payload["arguments"])
        return tool_args.raw_arguments(call.arguments)

    def _shell_apply_patch(self, patch: str) -> ExecOutcome:
        """Codex 0.40's apply_patch through ``shell`` (measured): success is the shell JSON with the summary,
        a refused patch is ``error: <message>``. An empty patch or a failure after a write is not measured: it
        is reported in the same shapes and marked ``unmeasured``."""
        started = time.monotonic()
        result = self.patcher.run(patch)
        native: dict[str, Any] = {"tool_profile": SHELL_JSON_PROFILE, "changed_paths": list(result.changed)}
        if result.exit_code is None:
            message = result.content.removeprefix(VERIFICATION_FAILED)
            if message == result.content:
                native["unmeasured"] = True
            return ExecOutcome(f"error: {message}", None, native)
        body = result.content.split("Output:\n", 1)[1] if "Output:\n" in result.content else result.content
        if result.exit_code != 0:
            native["unmeasured"] = True
        content = shell_json_content(body, result.exit_code, time.monotonic() - started)
        return ExecOutcome(content, result.exit_code, native)

    def _apply_patch(self, call: ToolCall) -> ExecOutcome:
        line = self._line(call)
        freeform = line.payload.get("type") == "custom_tool_call" if line is not None else None
        arguments = call.arguments
        patch = arguments.get("input")
        if not isinstance(patch, str) and freeform is not True:
            patch = arguments.get("patch")
            if not isinstance(patch, str):
                problem = tool_args.check(self._raw(call), tool_args.APPLY_PATCH_FUNCTION)
                return ExecOutcome(problem or "failed to parse function arguments: missing field `input`", None, {})
        if not isinstance(patch, str):
            patch = ""
        result = self.patcher.run(patch)
        return ExecOutcome(result.content, result.exit_code, {"changed_paths": list(result.changed)})
