"""Run historical tool calls through the REAL OpenCode binary, one call per model step (the I/O shell).

OpenCode's tools (bash, read, write, edit with its fuzzy matchers, glob/grep over ripgrep) live inside the
Bun binary, and their exact output text, error text and exit-code conventions are the observation the model
sees. So forkpoint does not re-implement them: it starts the recorded version of ``opencode run`` in the
workspace, in a private HOME/XDG tree, with a provider that points at a loopback Chat Completions endpoint
served here. Every model request is answered with the next historical call (one ``tool_calls`` entry with the
recorded call id, name and arguments); OpenCode runs it with its own implementation and prints the terminal
``tool_use`` event on stdout, which is the fresh observation. ``close`` answers the next request with a final
text, so OpenCode ends its loop and exits; anything left is ended by the supervised process group.

A release whose ``run --format=json`` prints no event for a FAILED tool (1.2: only ``completed`` parts reach
stdout; ``error_events=False``) is read from the model side: when its step's ``step_finish`` went by with no
``tool_use`` for the call, the call failed, and the error text is the ``tool`` message for its id in the next
request (OpenCode sends the ``error`` text there, byte for byte; the part's time is the host's).

The project's own OpenCode configuration is never loaded (``TOOL_HOST_FLAGS``): a plugin it names would be installed
from npm and run, an MCP server started; they are a stranger's code, and no built-in tool's text depends on them.

Title requests (no ``tools``) get a fixed title. Nothing leaves loopback: the model endpoint is ours, and the
proxy variables point at a closed loopback port so OpenCode's background fetches fail at once.

The host runs in the run's sandbox, at the cwd the tools see (under bwrap the recorded cwd, the workspace mounted
there), its HOME writable and the runtime read-only. A sandbox with its own network namespace gets nothing but the
model endpoint's port, relayed into it like the bridge for a continued agent (``forkpoint.sandbox.forward``).
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from aiohttp import web

from forkpoint.bridge.protocols.openai_chat import chat_chunks, encode
from forkpoint.bridge.upstream import stream_events
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import refused_as, write_file_strict
from forkpoint.core.model import JsonObject
from forkpoint.process import WATCH_TERMINATE, ProcessResult, sanitized_env
from forkpoint.process.loop_thread import LoopThread
from forkpoint.process.loopback import LoopbackSite
from forkpoint.sandbox import local_sandbox, runtime_paths

if TYPE_CHECKING:
    from forkpoint.sandbox.base import Sandbox
    from forkpoint.sandbox.forward import HostRelay

PROVIDER = "forkpoint-tools"
MODEL = "replay"
#: OpenCode offers ``apply_patch`` (and no ``edit``/``write``) exactly when the model id contains ``gpt-`` but
#: neither ``oss`` nor ``gpt-4`` (ToolRegistry.tools, 1.17/1.18): a host with this model id runs the GPT tool set
GPT_MODEL = "gpt-5-forkpoint-replay"
PROMPT = "forkpoint-tool-replay"
#: the queue entry a model request's tool results become (a type no OpenCode event has)
REQUEST_RESULTS = "forkpoint.request_results"
PROXY_SINK = "http://127.0.0.1:9"  # nothing listens there: background fetches fail immediately
START_TIMEOUT_S = 120.0
#: the tool host runs OpenCode's built-in tools and nothing of the project's configuration: no ``opencode.json(c)``
#: of the project (its ``plugin`` list, which OpenCode would install from npm, its MCP servers, which it would start
#: or connect to), no ``.opencode/`` directory (its plugins, custom tools, agents, its npm dependency install), and
#: no external plugin at all (``OPENCODE_PURE``, 1.17 and later). Measured on 1.2.6, 1.17.11 and 1.18.33: the
#: built-in tools' texts do not change (``read`` appends a directory's AGENTS.md either way, and a project's
#: ``instructions`` do not change it); only the project's skills would be lost, so they are named (``skill_paths``)
TOOL_HOST_FLAGS = {"OPENCODE_DISABLE_PROJECT_CONFIG": "1", "OPENCODE_PURE": "1"}
#: the skill folders of a project's ``.opencode`` (``.claude/skills`` and ``.agents/skills`` OpenCode finds anyway)
PROJECT_SKILL_DIRS = (".opencode/skills", ".opencode/skill")
STOP_GRACE_S = 15.0


def opencode_env(home: Path, cwd: Path | str, base: dict[str, str] | None = None, *,
                 shell: str | None = None, workspace: Path | None = None) -> dict[str, str]:
    """A private HOME/XDG tree, OpenCode's network extras off, every proxy at a closed loopback port.

    No default plugin: 1.0.162 installs ``opencode-copilot-auth`` from npm at start and exits 1 when that fails
    offline; 1.17.11 sends the same requests with or without them (measured: only ports and session ids differ).

    ``PWD`` is set to the cwd: OpenCode takes its project directory from it (an inherited PWD would point its
    tools at forkpoint's own directory). ``SHELL`` comes from the recording, never from the caller: OpenCode runs
    bash-tool commands with ``$SHELL`` started as that path (``$0``, and every shell error line, names it), else
    with ``bash`` found on PATH; so it is the ``shell`` the recording showed (parse.recorded_shell), or unset. A
    recorded path that is not an executable file of this host outside the workspace (which replayed calls write) is
    not used: OpenCode would not run it either, or it would be a program the recording planted. ``cwd`` is the
    directory as OpenCode sees it (under bwrap the recorded cwd); ``workspace`` its host path, when different.
    """
    env = sanitized_env(os.environ if base is None else base, strip_credentials=True)
    env["PWD"] = str(cwd)
    env.pop("SHELL", None)
    if shell is not None and all(usable_shell(shell, Path(root)) for root in {str(cwd), str(workspace or cwd)}):
        env["SHELL"] = shell
    for name in list(env):
        if name.startswith(("OPENCODE_", "XDG_")) or name.lower() in ("http_proxy", "https_proxy", "all_proxy"):
            del env[name]
    env.update({
        "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_CACHE_HOME": str(home / ".cache"), "XDG_STATE_HOME": str(home / ".local/state"),
        "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "HTTP_PROXY": PROXY_SINK, "HTTPS_PROXY": PROXY_SINK, "http_proxy": PROXY_SINK, "https_proxy": PROXY_SINK,
        "NO_PROXY": "127.0.0.1,localhost,::1", "no_proxy": "127.0.0.1,localhost,::1",
    })
    return env


def usable_shell(shell: str, workspace: Path) -> bool:
    real, root = os.path.realpath(shell), os.path.realpath(workspace)
    inside = real == root or real.startswith(root.rstrip("/") + "/")
    return os.path.isabs(shell) and not inside and os.path.isfile(real) and os.access(real, os.X_OK)


def provider_config(provider: str, model: str, base_url: str, api_key: str) -> JsonObject:
    """``opencode.json``: one openai-compatible provider, every permission allowed, no step limit, no sharing."""
    return {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"{provider}/{model}",
        "small_model": f"{provider}/{model}",
        "provider": {provider: {
            "npm": "@ai-sdk/openai-compatible", "name": "forkpoint",
            "options": {"baseURL": base_url, "apiKey": api_key},
            "models": {model: {"name": model, "tool_call": True, "reasoning": False,
                               "limit": {"context": 128000, "output": 8192}}}}},
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "allow", "external_directory": "allow"},
    }


def skill_paths(config: JsonObject, cwd: Path | str) -> JsonObject:
    """``config`` with the project's ``.opencode`` skill folders (as OpenCode sees the cwd) as extra skill paths:
    the skill tool finds them exactly as with the project's configuration loaded (same text, same base directory),
    and no other part of that configuration is read."""
    return {**config, "skills": {"paths": [os.path.join(str(cwd), folder) for folder in PROJECT_SKILL_DIRS]}}


def write_config(home: Path, config: JsonObject, kind: ErrorKind = ErrorKind.CONTINUATION) -> None:
    """``opencode.json`` in the HOME, which replayed tools can write: no link planted there is followed."""
    home.mkdir(parents=True, exist_ok=True)
    with refused_as(kind, f"write {home / '.config/opencode/opencode.json'}"):
        write_file_strict(home, ".config/opencode/opencode.json", json.dumps(config, indent=2).encode())


@dataclass
class EventWatch:
    """Collects complete stdout JSON lines (thread-safe queue) and ends the run when asked to stop."""

    lines: queue.Queue[JsonObject] = field(default_factory=queue.Queue)
    stop_at: float | None = None
    _buffer: bytes = b""

    def output(self, stream: str, chunk: bytes) -> None:
        if stream != "stdout":
            return
        self._buffer += chunk
        *complete, self._buffer = self._buffer.split(b"\n")
        for raw in complete:
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            if isinstance(event, dict):
                self.lines.put(event)

    def action(self, now: float) -> int | None:
        if self.stop_at is not None and now - self.stop_at > STOP_GRACE_S:
            return WATCH_TERMINATE
        return None


@dataclass(frozen=True)
class HostCall:
    call_id: str
    name: str
    arguments: JsonObject


class ToolHost:
    """One ``opencode run`` that executes the calls it is given, in order; start lazily, ``close`` always."""

    def __init__(self, entrypoint: Path, workspace: Path, home: Path, log_dir: Path, *,
                 shell: str | None = None, model: str = MODEL, sandbox: Sandbox | None = None,
                 relay_dir: Path | None = None, error_events: bool = True) -> None:
        self.entrypoint = entrypoint
        self.error_events = error_events
        self.dispatched = 0  # calls sent: call k runs in the session's k-th step
        self.finished = 0  # ``step_finish`` events read
        #: request number -> its ``tool`` messages (call id -> content); call k's result is in request k + 1
        self.results: dict[int, dict[str, object]] = {}
        self.model = model
        self.workspace = workspace
        self.sandbox = sandbox or local_sandbox(workspace)
        self.relay_dir = relay_dir or home.parent  # where the bridge relay's socket folder goes (bwrap)
        self._relay: HostRelay | None = None
        self.shell = shell
        self.home = home
        self.log_dir = log_dir
        self.watch = EventWatch()
        self._serving: LoopThread[str] = LoopThread("forkpoint-opencode-toolhost")
        self._commands: asyncio.Queue[HostCall | None] | None = None
        self._site = LoopbackSite()
        self._process_thread: threading.Thread | None = None
        self._result: ProcessResult | None = None
        self._error: BaseException | None = None
        self.requests = 0

    # -- the loopback model endpoint -------------------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        assert self._commands is not None
        if not body.get("tools"):
            message: JsonObject = {"role": "assistant", "content": "forkpoint tool replay"}
            finish = "stop"
        else:
            self.requests += 1
            if not self.error_events:  # sequenced with the stdout events (the same queue)
                self.watch.lines.put({"type": REQUEST_RESULTS, "request": self.requests, "results": {
                    str(m.get("tool_call_id")): m.get("content") for m in body.get("messages") or []
                    if isinstance(m, dict) and m.get("role") == "tool"}})
            command = await self._commands.get()
            if command is None:
                message, finish = {"role": "assistant", "content": "Replay finished."}, "stop"
            else:
                call = {"id": command.call_id, "type": "function",
                        "function": {"name": command.name,
                                     "arguments": json.dumps(command.arguments, ensure_ascii=False)}}
                message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        return await stream_events(request, encode(chat_chunks(
            f"chatcmpl-forkpoint-{self.requests}", str(body.get("model", self.model)), message, finish,
            include_usage=True)))

    async def _listen(self) -> str:
        self._commands = asyncio.Queue()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        return await self._site.start(app) + "/v1"

    # -- lifecycle -------------------------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._process_thread is not None

    def start(self) -> None:
        try:
            url = self._serving.start(self._listen, self._site.stop, 10.0)
        except Exception as error:
            raise ReplayError(ErrorKind.EXECUTOR, f"the OpenCode tool host did not start: {error}") from error
        sandbox = self.sandbox
        write_config(self.home, skill_paths(provider_config(PROVIDER, self.model, url, "forkpoint-tools"), sandbox.cwd),
                     ErrorKind.EXECUTOR)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        argv = [str(self.entrypoint), "run", "--format=json", "--model", f"{PROVIDER}/{self.model}", PROMPT]
        env = {**opencode_env(self.home, sandbox.cwd, shell=self.shell, workspace=self.workspace), **TOOL_HOST_FLAGS}
        log_path = self.log_dir / ("opencode-tools.log" if self.model == MODEL else "opencode-tools-gpt.log")
        readable = runtime_paths(self.entrypoint)
        if sandbox.private_network:
            # no network in the sandbox but the model endpoint's port, relayed (as for the continued agent)
            from forkpoint.sandbox.forward import HostRelay

            port = urlsplit(url).port
            assert port is not None
            self._relay = HostRelay(port, self.relay_dir)
            # the relay starts the binary inside: in an image root it must run on the host's loader
            argv = self._relay.wrap(sandbox.host_command(argv))
            readable = (*readable, *self._relay.readable)

        def run() -> None:
            try:
                self._result = sandbox.run(argv, cwd=sandbox.cwd, env=env, timeout_s=24 * 3600.0, grace_s=2.0,
                                           watch=self.watch, log_path=log_path, die_with_parent=True,
                                           writable=(self.home,), readable=readable)
            except BaseException as error:  # surfaced by the next call / close
                self._error = error

        self._process_thread = threading.Thread(target=run, daemon=True, name="forkpoint-opencode-toolrun")
        self._process_thread.start()

    def execute(self, call: HostCall, timeout_s: float) -> JsonObject:
        """Send one call and wait for its terminal tool part (``tool_use`` event); returns the part."""
        if not self.started:
            self.start()
        loop = self._serving.loop
        assert loop is not None and self._commands is not None
        loop.call_soon_threadsafe(self._commands.put_nowait, call)
        self.dispatched += 1
        started_ms = int(time.time() * 1000)
        deadline = time.monotonic() + timeout_s + START_TIMEOUT_S
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReplayError(ErrorKind.EXECUTOR, f"OpenCode did not finish {call.name} {call.call_id} within "
                                                      f"{timeout_s + START_TIMEOUT_S:.0f} s")
            try:
                event = self.watch.lines.get(timeout=min(remaining, 0.2))
            except queue.Empty:
                if self._process_thread is not None and not self._process_thread.is_alive():
                    raise ReplayError(ErrorKind.EXECUTOR, f"the OpenCode tool host exited before {call.name} "
                                                          f"{call.call_id} finished ({self._exit_text()})") from None
                continue
            part = event.get("part")
            if event.get("type") == "tool_use" and isinstance(part, dict) and part.get("callID") == call.call_id:
                return part
            if self.error_events:
                continue
            if event.get("type") == "step_finish":
                self.finished += 1
            elif event.get("type") == REQUEST_RESULTS:
                self.results[int(event["request"])] = event["results"]
            after = self.results.get(self.dispatched + 1)
            if self.finished >= self.dispatched and after is not None:
                self.results = {k: v for k, v in self.results.items() if k > self.dispatched}
                if call.call_id not in after:
                    raise ReplayError(ErrorKind.EXECUTOR, f"OpenCode printed no result for {call.name} "
                                                          f"{call.call_id} and sent none for it")
                return self._failed(call, after[call.call_id], started_ms)

    def _failed(self, call: HostCall, content: object, started_ms: int) -> JsonObject:
        """The part of a call whose step finished with no ``tool_use`` event: failed, its error as sent."""
        if not isinstance(content, str):
            raise ReplayError(ErrorKind.EXECUTOR, f"OpenCode printed no result for {call.name} {call.call_id} and "
                                                  "sent a non-text tool message for it")
        return {"type": "tool", "callID": call.call_id, "tool": call.name, "state": {
            "status": "error", "input": call.arguments, "error": content,
            "time": {"start": started_ms, "end": int(time.time() * 1000)}}}

    def _exit_text(self) -> str:
        if self._error is not None:
            return f"{type(self._error).__name__}: {self._error}"
        result = self._result
        if result is None:
            return "no result"
        return f"exit {result.returncode}: {result.stderr[-400:].decode('utf-8', 'replace').strip()}"

    def close(self) -> None:
        loop = self._serving.loop
        if loop is not None and self._commands is not None and self._serving.running:
            loop.call_soon_threadsafe(self._commands.put_nowait, None)
        self.watch.stop_at = time.monotonic()
        if self._process_thread is not None:
            self._process_thread.join(STOP_GRACE_S + 10.0)
        if self._relay is not None:
            self._relay.close()
        self._serving.stop(10.0)
