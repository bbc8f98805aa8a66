"""Re-run historical Pi calls with Pi's OWN tools (read, bash, edit, write, grep, find, ls) through the Node runner.

One supervised ``node runner.mjs tool`` per call, in the run's sandbox at the workspace: the runner goes through
the same steps as Pi's agent loop (prepareArguments, validateToolArguments, execute; a thrown error becomes the
observation text with ``isError``), so fresh observations have Pi's exact text. A call outside the recorded
enabled tool set gets the loop's own "Tool <name> not found" error without any process. Calls run one at a time
in call order (Pi runs a parallel batch concurrently, but stores and sends the results in call order).

A runner that ends without a reply is an executor failure of that call (exit 30, its stderr tail in the message),
before any effect unless the runner announced ``started`` for a tool that changes things (bash, edit, write):
then the effect may have happened and the engine reports ambiguous_execution.

``find`` runs fd. forkpoint's fd runtime (forkpoint.runtimes.fd, installed with Pi) is put first on the tools'
PATH and bound read-only into the sandbox. Without it, and without an fd >= 9 on PATH, a recorded find that
answered anything but Pi's "fd is not available" cannot re-run as it ran: it is refused before it starts with the
reason ``fd unavailable`` (``--allow-stale-observations`` reuses the recorded observation).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from forkpoint.adapters.pi.parse import DEFAULT_TOOLS, PI_TOOLS, not_found_text
from forkpoint.adapters.pi.runtime import PiRuntime
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import FreshObservation, RunContext, ToolCall, observation_text
from forkpoint.process import sanitized_env
from forkpoint.runtimes.fd import FdRuntime, find_fd, path_fd
from forkpoint.sandbox import home_environment, local_sandbox

DEFAULT_TIMEOUT_S = 3600.0
STARTUP_MARGIN_S = 60.0
#: Pi's bash keeps the tail of long output and names a random temp file holding all of it
_TEMP_LOG = re.compile(r"pi-bash-[0-9A-Za-z]+\.log")
#: tools whose execution may change the workspace; read, grep, find and ls only read it
MUTATING = frozenset({"bash", "edit", "write"})
_STARTED = b'{"started":true}'
#: Pi's find without any fd (offline it does not download one)
FD_MISSING = "fd is not available and could not be downloaded"
_TAIL = 500


@dataclass(frozen=True)
class ToolProfile:
    """How a verified Pi's agent loop turns a tool's answer into the stored result, where versions differ
    (measured with ScriptedModel on the real packages; docs/adapters/pi.md). The tool texts themselves (1.x's
    ``write`` answers ``Successfully wrote to P``, 0.83.0's ``Successfully wrote N bytes to P``) come from running
    that version's own tools, so they need no entry here, except where a release line read as a verified version
    words one differently (``PROFILE_0_85``)."""

    #: a result the tool RETURNS with ``isError: true`` is an error (1.x's bash on a non-zero exit); 0.83.0 only
    #: counts thrown errors
    flagged_errors: bool
    #: the stored toolResult carries ``durationMs`` (1.x)
    records_duration: bool
    #: ``write``'s answer names the byte count (the verified binary's own text); False: the 0.85 wording
    write_bytes: bool = True
    #: the profile's name in results (``VersionFacts.tool_profile``), when it is not a verified version's own
    label: str | None = None


PROFILES = {"0.83.0": ToolProfile(flagged_errors=False, records_duration=False),
            "1.6.0": ToolProfile(flagged_errors=True, records_duration=True)}
#: Pi 0.85.0 and 0.85.1 (measured on both real releases by ``forkpoint agents calibrate``; fixture
#: tests/fixtures/pi/0.85.1): sessions of the plain family (read as 0.83.0), 0.83.0's tools and agent loop, except
#: ``write``: its 0.85 write.js answers ``Successfully wrote to ${path}`` where 0.83.0's answers ``Successfully
#: wrote ${content.length} bytes to ${path}`` (the same effect). A Pi session names no version: a plain-family
#: recording gets this profile when its own successful writes answered without the byte count (``profile_for``);
#: without a successful write nothing tells 0.85 apart from 0.83/0.84, and nothing needs to (no other text
#: differs). Its writes re-run with 0.83.0's write, whose answer is then worded as 0.85's.
PROFILE_0_85 = ToolProfile(flagged_errors=False, records_duration=False, write_bytes=False,
                           label="pi 0.85 (write answers without the byte count; measured on 0.85.0 and 0.85.1)")
_WROTE = "Successfully wrote "
_BYTES = re.compile(r"Successfully wrote [0-9]+ bytes to ")


def write_wording(path: object, text: str) -> str | None:
    """``"bytes"`` (0.83.0/0.84 and the verified binaries), ``"plain"`` (0.85, 1.x) or None: how a successful
    ``write`` answer to ``path`` is worded."""
    if not isinstance(path, str):
        return None
    if text == f"{_WROTE}to {path}":
        return "plain"
    match = _BYTES.match(text)
    return "bytes" if match is not None and text[match.end():] == path else None


def profile_for(version: str, calls: Iterable[ToolCall]) -> ToolProfile:
    """The tool profile a recording read as ``version`` re-runs with: 0.85's when it is read as 0.83.0 and its
    successful writes are all worded without the byte count (at least one), else the verified version's."""
    verified = PROFILES.get(version, PROFILES["1.6.0"])  # a release on trial: 1.x's loop
    if version != "0.83.0":
        return verified
    wordings = {write_wording(call.arguments.get("path"), observation_text(call.historical.content))
                for call in calls if call.name == "write" and call.historical is not None
                and not call.historical.is_error}
    return PROFILE_0_85 if wordings == {"plain"} else verified


def reworded(profile: ToolProfile, call: ToolCall, content: Any, is_error: bool) -> Any:
    """The verified binary's answer in the profile's wording (0.85's ``write``); any other answer unchanged."""
    if profile.write_bytes or call.name != "write" or is_error or not isinstance(content, list) or len(content) != 1:
        return content
    block = content[0]
    path = call.arguments.get("path")
    if isinstance(block, dict) and set(block) == {"type", "text"} and block["type"] == "text" \
            and isinstance(block["text"], str) and write_wording(path, block["text"]) == "bytes":
        return [{"type": "text", "text": f"{_WROTE}to {path}"}]
    return content


def tool_environment(context: RunContext, fd: FdRuntime | None = None) -> dict[str, str]:
    """The agent's environment for its tools: no credentials, an isolated HOME, Pi offline, forkpoint's fd (when
    given) first on PATH."""
    env = home_environment(sanitized_env(os.environ, strip_credentials=True), context.home)
    env["PI_OFFLINE"] = "1"
    if fd is not None:
        env["PATH"] = os.pathsep.join(p for p in (str(fd.bin_dir), env.get("PATH")) if p)
    return env


def fd_for(tools: tuple[str, ...]) -> FdRuntime | None:
    """forkpoint's fd runtime when the enabled tools include find and it is installed."""
    return find_fd() if "find" in tools else None


def fd_paths(fd: FdRuntime | None) -> tuple[Path, ...]:
    """What a sandbox binds read-only for fd: its runtime folder."""
    return (fd.root,) if fd is not None else ()


class PiToolExecutor:
    def __init__(self, context: RunContext, runtime: PiRuntime, tools: tuple[str, ...] = DEFAULT_TOOLS,
                 profile: ToolProfile | None = None) -> None:
        self.context = context
        self.runtime = runtime
        self.tools = tools  # the recording's enabled tool set (parse.enabled_tools)
        #: the recording's tool profile (``profile_for``); default: the runtime's verified version's
        self.profile = profile if profile is not None else PROFILES.get(runtime.version, PROFILES["1.6.0"])
        self.sandbox = context.sandbox or local_sandbox(context.workspace)
        self.fd = fd_for(tools)

    def _check_fd(self, call: ToolCall) -> None:
        """Refuse (stale fallback) a find that ran with an fd when this host has none Pi could run."""
        if self.fd is not None:
            return
        recorded = call.historical.content if call.historical is not None else None
        texts = [b.get("text") for b in recorded if isinstance(b, dict)] if isinstance(recorded, list) else []
        if texts == [FD_MISSING] or path_fd(tool_environment(self.context).get("PATH", "")) is not None:
            return
        raise ReplayError(ErrorKind.EXECUTOR, f"fd unavailable: Pi's find({call.call_id}) needs fd >= 9, which this "
                                              f"host lacks (`forkpoint agents install pi@{self.runtime.version}` "
                                              "installs forkpoint's fd runtime; see docs/adapters/pi.md); "
                                              "--allow-stale-observations reuses the recorded observation",
                          before_effect=True, stale_fallback=True)

    def run(self, call: ToolCall) -> FreshObservation:
        if call.name not in self.tools:
            # Pi's agent loop answers before any tool runs: nothing to execute
            return FreshObservation(call.call_id, [{"type": "text", "text": not_found_text(call.name)}], True,
                                    native={"details": {}})
        if call.name not in PI_TOOLS:
            raise ReplayError(ErrorKind.UNSUPPORTED_TOOL, f'Pi replay profile does not support tool "{call.name}"',
                              before_effect=True)
        if call.name == "find":
            self._check_fd(call)
        profile = self.profile
        request = {"runtime_root": str(self.runtime.root), "cwd": self.sandbox.cwd, "tools": list(self.tools),
                   "flagged_errors": profile.flagged_errors,
                   "call": {"id": call.call_id, "name": call.name, "arguments": call.arguments}}
        self.context.home.mkdir(parents=True, exist_ok=True)
        result = self.sandbox.run(
            [str(self.runtime.node), str(self.runtime.runner), "tool"],
            cwd=self.sandbox.cwd,
            env=tool_environment(self.context, self.fd),
            timeout_s=_timeout(call),
            writable=(self.context.home,),
            readable=(self.runtime.root, self.runtime.runner.parent, *fd_paths(self.fd)),
            stdin=orjson.dumps(request),
            max_output_bytes=256 * 1024 * 1024,
        )
        where = f"{call.name}({call.call_id})"
        # an effect may have happened only once a changing tool was handed its arguments
        no_effect = call.name not in MUTATING or _STARTED not in result.stdout.splitlines()
        if result.timed_out:
            raise ReplayError(ErrorKind.EXECUTOR, f"Pi tool {where} did not finish in time", before_effect=no_effect)
        reply = _last_json_line(result.stdout)
        if reply is not None and "refused" in reply:
            raise ReplayError(ErrorKind.UNSUPPORTED_TOOL, str(reply["refused"]), before_effect=True)
        if reply is None or "content" not in reply or result.returncode not in (0, None):
            stderr = result.stderr.decode("utf-8", "replace").strip()[-_TAIL:]
            detail = reply.get("fatal") if reply and "fatal" in reply else None
            reason = f"failed: {detail}" if detail else "died without answering"
            raise ReplayError(ErrorKind.EXECUTOR, f"the Pi tool runner {reason} on {where} (exit {result.returncode}"
                                                  f"{', output cut' if result.stdout_truncated else ''}); stderr: "
                                                  f"{stderr or '(empty)'}", before_effect=no_effect)
        is_error = bool(reply.get("isError"))
        return FreshObservation(
            call_id=call.call_id,
            content=reworded(profile, call, reply.get("content", []), is_error),
            is_error=is_error,
            truncated=result.stdout_truncated,
            duration_ms=int(reply.get("duration_ms") or 0),
            native={"details": reply.get("details")},
        )

    def close(self) -> None:
        return None


def _timeout(call: ToolCall) -> float:
    seconds = call.arguments.get("timeout") if call.name == "bash" else None
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds > 0:
        return float(seconds) + STARTUP_MARGIN_S
    return DEFAULT_TIMEOUT_S


def _last_json_line(stdout: bytes) -> dict[str, Any] | None:
    for raw in reversed(stdout.splitlines()):
        if raw.strip():
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


def normalize_volatile(content: Any) -> Any:
    """Only the documented volatile part: the random name of bash's full-output temp file."""
    if isinstance(content, str):
        return _TEMP_LOG.sub("pi-bash-<random>.log", content)
    if isinstance(content, list):
        return [normalize_volatile(item) for item in content]
    if isinstance(content, dict):
        return {key: normalize_volatile(value) for key, value in content.items()}
    return content
