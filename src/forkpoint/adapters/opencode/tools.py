"""Re-run historical OpenCode tool calls with OpenCode's own implementation (see toolhost) and policy checks.

Before a call reaches OpenCode, forkpoint confines it: every path argument (``filePath`` of read/write/edit,
``path`` of glob/grep, ``workdir`` of bash) must resolve inside the workspace, else the call is refused before it
has any effect. The fresh observation is OpenCode's own: the ``output`` of a ``completed`` part (a bash command
with a non-zero exit is ``completed``, its code in ``metadata.exit``) or the ``error`` text of an ``error`` part.
The whole fresh tool state (output, metadata, title, time) is kept for the rebuilt session.

``skill`` runs OpenCode's own skill tool: it finds the skill among the SKILL.md files of the workspace (and of the
tool host's private, empty config), so it re-runs exactly what the workspace holds (1.17 and 1.18 name the base
directory as a path, 1.2 as a ``file://`` URL: such a recording differs there). A recorded skill load that the
replay's OpenCode cannot find (``Skill "<name>" not found``: the skill file is not in the workspace, or it came from
the original machine's own configuration) is a stale fallback naming the file the original loaded
(``skill_file_missing``), never a silently different observation; the skill tool has no effect to undo.

``apply_patch`` (what OpenCode offers GPT models instead of edit/write) names its files inside ``patchText``: every
``*** Add/Delete/Update File:`` and ``*** Move to:`` header must resolve inside the workspace too. OpenCode only
offers it to a GPT model id, so it runs in a second tool host whose model id is one (``GPT_MODEL``); edit/write
run in the first (a GPT model id hides them), every other tool in whichever host ran the previous call.
"""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpoint.adapters.opencode.toolhost import GPT_MODEL, MODEL, HostCall, ToolHost
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import InputTooLargeError, lstat_strict, read_file_strict
from forkpoint.core.model import FreshObservation, JsonObject, RunContext, ToolCall
from forkpoint.sandbox import local_sandbox
from forkpoint.sandbox.base import inside_roots, within

if TYPE_CHECKING:
    from forkpoint.sandbox.base import Sandbox

PATH_ARGUMENTS = {"read": "filePath", "write": "filePath", "edit": "filePath", "glob": "path", "grep": "path",
                  "bash": "workdir"}
#: the patch headers OpenCode's parser reads a path from (``line.startswith``, the rest trimmed); a line that only
#: starts so after leading blanks is checked too (fail closed)
PATCH_HEADERS = ("*** Add File:", "*** Delete File:", "*** Update File:", "*** Move to:")
#: the tools OpenCode offers only to a GPT model id / only to any other model id
GPT_ONLY = frozenset({"apply_patch"})
NON_GPT_ONLY = frozenset({"edit", "write"})
DEFAULT_TIMEOUT_S = 600.0
#: the saved-output path of a truncated bash output names the replaying HOME and a random id
_SAVED_OUTPUT = re.compile(r"(Full output saved to: )\S+")


#: the reason code of a recorded skill load the replay's OpenCode cannot find
SKILL_MISSING = "skill_file_missing"
#: the reason code of a call whose tool host would load a project's plugin
PROJECT_PLUGIN = "project_plugin"
#: the first release whose newer config service loads a project's plugins (a ``plugin`` entry of its
#: ``opencode.json(c)``, a file in ``.opencode/plugin(s)/``) whatever ``TOOL_HOST_FLAGS`` say: measured, 1.18.33
#: loads them, 1.17.11 and 1.2.6 do not
PLUGINS_DESPITE_FLAGS = (1, 18, 0)
#: the project files that configure plugins, relative to the cwd OpenCode starts in
PLUGIN_CONFIGS = ("opencode.json", "opencode.jsonc", ".opencode/opencode.json", ".opencode/opencode.jsonc")
PLUGIN_FOLDERS = (".opencode/plugin", ".opencode/plugins")
CONFIG_READ_LIMIT = 4 * 1024 * 1024


def normalize_volatile(content: Any) -> Any:
    """Only what OpenCode draws at random or per HOME: the saved-output file of a truncated output."""
    return _SAVED_OUTPUT.sub(r"\1<saved output>", content) if isinstance(content, str) else content


def patch_paths(patch: str) -> list[str]:
    """Every path a patch text names in a header OpenCode's parser reads (a superset: blanks before it allowed)."""
    paths = []
    for line in patch.split("\n"):
        stripped = line.lstrip()
        for header in PATCH_HEADERS:
            if stripped.startswith(header):
                paths.append(stripped[len(header):].strip())
    return [path for path in paths if path]


def check_paths(call: ToolCall, workspace: Path, sandbox: Sandbox | None = None) -> None:
    """Refuse (before any effect) a call whose path argument (or a file its patch names) leaves the workspace.

    Paths are read as OpenCode sees them: relative to the sandbox's cwd (under bwrap the recorded cwd, where the
    workspace is mounted), then followed on the host from the workspace's host path (no link may lead out)."""
    box = sandbox or local_sandbox(workspace)
    if call.name == "apply_patch":
        patch = call.arguments.get("patchText")
        for path in patch_paths(patch) if isinstance(patch, str) else []:
            check_path(call, workspace, "patchText", path, box)
        return
    key = PATH_ARGUMENTS.get(call.name)
    value = call.arguments.get(key) if key else None
    if key is not None and value is not None:
        check_path(call, workspace, key, value, box)


def check_path(call: ToolCall, workspace: Path, key: str, value: Any, sandbox: Sandbox | None = None) -> None:
    if not isinstance(value, str) or not value or "\0" in value:
        raise ReplayError(ErrorKind.EXECUTOR, f"{call.name} {call.call_id}: {key} is not a path", before_effect=True)
    box = sandbox or local_sandbox(workspace)
    refusal = (f"{call.name} {call.call_id}: {key} {value!r} is outside the workspace {box.cwd}; forkpoint confines "
               "replayed tools to it")
    seen = inside_roots(value, box.cwd, (box.cwd, *box.roots), refusal)
    root = os.path.realpath(workspace)
    target = os.path.realpath(box.host_path(seen))
    if not within(target, root):
        raise ReplayError(ErrorKind.EXECUTOR, refusal, before_effect=True)


def wire_call_id(call: ToolCall) -> str:
    """The model-given call id (``call_id`` carries ``@<part id>`` only to stay unique across runs)."""
    part = call.native if isinstance(call.native, dict) else {}
    return str(part.get("callID") or call.call_id)


def call_timeout(call: ToolCall) -> float:
    value = call.arguments.get("timeout") if call.name == "bash" else None
    if isinstance(value, (int, float)) and value > 0:
        return min(float(value) / 1000.0 + 30.0, 24 * 3600.0)
    return DEFAULT_TIMEOUT_S


def observation(call: ToolCall, part: JsonObject, duration_ms: int) -> FreshObservation:
    state: JsonObject = part["state"] if isinstance(part.get("state"), dict) else {}
    status = state.get("status")
    if status == "error":
        return FreshObservation(call.call_id, str(state.get("error") or ""), is_error=True, duration_ms=duration_ms,
                                native=state)
    if status != "completed":
        raise ReplayError(ErrorKind.EXECUTOR, f"OpenCode left {call.name} {call.call_id} in state {status!r}")
    metadata: JsonObject = state["metadata"] if isinstance(state.get("metadata"), dict) else {}
    exit_code = metadata.get("exit") if isinstance(metadata.get("exit"), int) else None
    output = state.get("output") if isinstance(state.get("output"), str) else ""
    return FreshObservation(call.call_id, output, truncated=bool(metadata.get("truncated")), return_code=exit_code,
                            duration_ms=duration_ms, native=state)


def project_plugins(workspace: Path) -> list[str]:
    """What of the workspace would make OpenCode load a plugin: a config file with a ``"plugin`` string (bytes, no
    JSONC parse: one in a comment or a value counts too) or any ``\\u`` escape, a script in a plugin folder. No
    link is followed on the way (core.fs strict helpers); a link, a special file, an unreadable or oversized config
    where one of these is counts (fail closed)."""
    found = []
    for relative in (".opencode", *PLUGIN_CONFIGS, *PLUGIN_FOLDERS):
        try:
            info = lstat_strict(workspace, relative)
        except OSError:
            found.append(f"{relative} (not a plain file or folder on the way)")
            continue
        if info is None:
            continue
        if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
            found.append(f"{relative} (not a plain file or folder)")
        elif relative in PLUGIN_CONFIGS:
            try:
                text = read_file_strict(workspace, relative, max_bytes=CONFIG_READ_LIMIT)
                mentions = b'"plugin' in text or b"\\u" in text  # a key is quoted; an escape could spell it
            except (OSError, ValueError, InputTooLargeError, ReplayError):
                mentions = True
            if mentions:
                found.append(f"{relative} (its plugin list)")
        elif relative in PLUGIN_FOLDERS and stat.S_ISDIR(info.st_mode):
            found.extend(f"{relative}/{name}" for name in sorted(os.listdir(workspace / relative))[:20]
                         if name.endswith((".js", ".ts")))
    return found


def skill_missing(call: ToolCall, error: str, recorded_cwd: str | None) -> str | None:
    """The stale reason of a recorded skill load whose skill the replay's OpenCode did not find, else None."""
    name = call.arguments.get("name")
    if not isinstance(name, str) or not error.startswith(f'Skill "{name}" not found'):
        return None
    part = call.native if isinstance(call.native, dict) else {}
    state: JsonObject = part["state"] if isinstance(part.get("state"), dict) else {}
    metadata: JsonObject = state["metadata"] if isinstance(state.get("metadata"), dict) else {}
    directory = metadata.get("dir")
    if not isinstance(directory, str) or not directory:
        where = "the recording does not say where the original found it"
    elif recorded_cwd is not None and within(os.path.normpath(directory), os.path.normpath(recorded_cwd)):
        relative = os.path.relpath(os.path.normpath(directory), os.path.normpath(recorded_cwd))
        where = (f"the original loaded {directory}/SKILL.md from the project: put {relative}/SKILL.md into the "
                 "workspace")
    else:
        where = f"the original loaded {directory}/SKILL.md from outside the project (its own configuration)"
    return (f"{SKILL_MISSING}: OpenCode finds no skill {name[:80]!r} here ({error[:300]}); {where}, or pass "
            "--allow-stale-observations to reuse the recorded observation")


class OpenCodeToolExecutor:
    """FRESH calls go through one OpenCode tool host (the recorded version, or its line's: tool_profile) started
    on the first call. ``error_events``: whether the binary prints a ``tool_use`` event for a failed call."""

    def __init__(self, context: RunContext, entrypoint: Path, *, shell: str | None = None,
                 error_events: bool = True, recorded_cwd: str | None = None,
                 version: tuple[int, int, int] | None = None) -> None:
        self.context = context
        #: None: unknown, treated as a release that loads a project's plugins (fail closed)
        self.version = version
        self.error_events = error_events
        self.recorded_cwd = recorded_cwd
        self.entrypoint = entrypoint
        self.shell = shell
        self.workspace = context.workspace
        self.sandbox = context.sandbox or local_sandbox(context.workspace)
        self.hosts: dict[str, ToolHost] = {}
        self.last_model = MODEL

    def host_for(self, name: str) -> ToolHost:
        """The host whose model id makes OpenCode offer ``name`` (started lazily, one per model id)."""
        model = GPT_MODEL if name in GPT_ONLY else MODEL if name in NON_GPT_ONLY else self.last_model
        self.last_model = model
        if model not in self.hosts:
            home = self.context.state_dir / ("opencode-tools-home" if model == MODEL else "opencode-tools-gpt-home")
            self.hosts[model] = ToolHost(self.entrypoint, self.workspace, home, self.context.logs, shell=self.shell,
                                         model=model, sandbox=self.sandbox, relay_dir=self.context.state_dir,
                                         error_events=self.error_events)
        return self.hosts[model]

    def run(self, call: ToolCall) -> FreshObservation:
        check_paths(call, self.workspace, self.sandbox)
        if self.version is None or self.version >= PLUGINS_DESPITE_FLAGS:
            plugins = project_plugins(self.workspace)
            if plugins:
                version = ".".join(map(str, self.version)) if self.version else "this"
                raise ReplayError(ErrorKind.EXECUTOR, (
                    f"{PROJECT_PLUGIN}: OpenCode {version} would load the project's plugins ({', '.join(plugins)}) "
                    "in forkpoint's tool host, and forkpoint never runs a project's plugin; pass "
                    "--allow-stale-observations to reuse the recorded observation"),
                    before_effect=True, stale_fallback=True)
        started = time.monotonic()
        host = self.host_for(call.name)
        part = host.execute(HostCall(wire_call_id(call), call.name, call.arguments), call_timeout(call))
        if part.get("tool") != call.name:
            raise ReplayError(ErrorKind.EXECUTOR, f"OpenCode ran {part.get('tool')!r} for {call.name} {call.call_id} "
                                                  "(it rejected the call as invalid)")
        fresh = observation(call, part, int((time.monotonic() - started) * 1000))
        if call.name == "skill" and fresh.is_error and not (call.historical and call.historical.is_error):
            missing = skill_missing(call, str(fresh.content), self.recorded_cwd)
            if missing is not None:
                raise ReplayError(ErrorKind.EXECUTOR, missing, before_effect=True, stale_fallback=True)
        return fresh

    def close(self) -> None:
        for host in self.hosts.values():
            host.close()
