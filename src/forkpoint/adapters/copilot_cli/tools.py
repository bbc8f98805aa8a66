"""Re-run historical Copilot CLI calls with the REAL binary's own tools, one ``copilot -p`` per call.

Copilot CLI's tools (bash, view, create, edit, grep, glob) live in its native runtime, and their exact texts
(``File … updated with changes.``, ``<shellId: 0 completed with exit code 0>``, ``Path does not exist``) are the
observation. So forkpoint does not re-implement them: it serves a loopback Chat Completions endpoint here (the
CLI's documented BYOK provider, ``COPILOT_PROVIDER_BASE_URL``, with ``COPILOT_OFFLINE=true``: no GitHub service is
asked) and starts the verified ``copilot --allow-all -p`` in the workspace, in the isolated HOME, under a session
id of forkpoint's choosing. The first model request is answered with the historical call (name and arguments);
the CLI runs it with its own implementation and records its ``tool.execution_complete`` event in that session's
``events.jsonl``, which is the fresh observation (exactly what a resumed session sends for the call); the request
carrying the tool result is answered with a final text, so the CLI ends. Requests without tools get a short text.

A run that ends without the completion event fails the call (before any effect unless the host had handed a
changing tool its call: then the effect may have happened).

Under ``--sandbox bwrap`` the CLI runs in the run's sandbox at the recorded cwd, its HOME and package cache
writable, the runtime read-only, and reaches nothing but the host's port, relayed into its network namespace
(``forkpoint.sandbox.forward``, as for Gemini CLI's and OpenCode's tool hosts).

Each call is its own process, as in the recorded session (the bash tool's description: "Each command runs in a
fresh process that starts in the session working directory"); the shell id counter therefore restarts at 0, so
``<shellId: N`` is the documented volatile part.
"""

from __future__ import annotations

import re
import threading
import uuid
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from forkpoint.adapters.copilot_cli.parse import dumps, observation_of
from forkpoint.adapters.copilot_cli.runtime import copilot_env, installed_entrypoint, pkg_cache
from forkpoint.adapters.kit.npm_cli import ca_bundle_env
from forkpoint.adapters.kit.tool_host import (
    DEFAULT_TIMEOUT_S,
    PROMPT,
    STARTUP_MARGIN_S,
    HostConfinement,
    LoopbackToolHost,
)
from forkpoint.bridge.protocols.openai_chat import chat_chunks, encode, wants_usage
from forkpoint.bridge.upstream import stream_events
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import read_sandbox_file
from forkpoint.core.model import FreshObservation, JsonObject, RunContext, ToolCall
from forkpoint.sandbox import local_sandbox, runtime_paths

MODEL = "gpt-4.1"
MUTATING = frozenset({"bash", "create", "edit"})
#: the shell id counter restarts in every CLI process
_SHELL_ID = re.compile(r"<shellId: \d+ ")
_TAIL = 600
_MAX_EVENTS_BYTES = 256 * 1024 * 1024


def normalize_volatile(content: Any) -> Any:
    """Only the documented volatile part: the shell id the bash tool reports."""
    if isinstance(content, str):
        return _SHELL_ID.sub("<shellId: <id> ", content)
    return content


class ToolHost(LoopbackToolHost):
    """The loopback Chat Completions endpoint that hands the CLI one call and lets it end."""

    label = "Copilot CLI"
    thread_name = "forkpoint-copilot-toolhost"
    routes = ("/v1/chat/completions", "/chat/completions")
    url_suffix = "/v1"

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.call: ToolCall | None = None
        self.handed = False
        self.answered: str | None = None  # the tool message content the CLI sent back (what its model saw)
        self._count = 0

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages = body.get("messages") if isinstance(body, dict) else None
        last = messages[-1] if isinstance(messages, list) and messages and isinstance(messages[-1], dict) else {}
        with self._lock:
            self._count += 1
            call = self.call
            message: JsonObject = {"role": "assistant", "content": "Replay finished."}
            if not body.get("tools") or call is None:
                message = {"role": "assistant", "content": "forkpoint tool replay"}
            elif last.get("role") == "tool":
                if self.answered is None and last.get("tool_call_id") == call.call_id:
                    content = last.get("content")
                    self.answered = content if isinstance(content, str) else orjson.dumps(content).decode()
            elif not self.handed:
                self.handed = True
                message = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": call.call_id, "type": "function",
                     "function": {"name": call.name, "arguments": dumps(call.arguments).decode()}}]}
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        response_id = f"chatcmpl-forkpoint-tools-{self._count:04d}"
        if body.get("stream") is not True:
            from forkpoint.bridge.protocols.openai_chat import chat_completion

            return web.json_response(chat_completion(response_id, MODEL, message, finish))
        return await stream_events(request, encode(chat_chunks(response_id, MODEL, message, finish,
                                                               wants_usage(body))))

    def arm(self, call: ToolCall) -> None:
        with self._lock:
            self.call, self.handed, self.answered = call, False, None


def completion_event(events: bytes, call_id: str) -> JsonObject | None:
    """The data of the CLI's ``tool.execution_complete`` event for ``call_id`` (a top-level one)."""
    for line in events.splitlines():
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        data = event.get("data") if isinstance(event, dict) else None
        if (isinstance(event, dict) and event.get("type") == "tool.execution_complete" and isinstance(data, dict)
                and data.get("toolCallId") == call_id):
            return data
    return None


class CopilotToolExecutor:
    def __init__(self, context: RunContext, entrypoint: Path | None = None) -> None:
        self.context = context
        self.entrypoint = entrypoint or installed_entrypoint()
        self.sandbox = context.sandbox or local_sandbox(context.workspace)
        self.host = ToolHost()
        self.confinement = HostConfinement(self.sandbox, context.state_dir)

    def run(self, call: ToolCall) -> FreshObservation:
        url = self.host.start()
        self.host.arm(call)
        session_id = str(uuid.uuid4())
        home = self.context.home
        home.mkdir(parents=True, exist_ok=True)
        cache = pkg_cache(self.entrypoint)
        cache.mkdir(exist_ok=True)
        argv = [str(self.entrypoint), "--allow-all", "--no-auto-update", "--disable-client-telemetry",
                "--no-custom-instructions", "--disable-builtin-mcps", "--no-ask-user", "-s",
                f"--session-id={session_id}", "-p", PROMPT]
        argv, readable, network = self.confinement.confine(argv, runtime_paths(self.entrypoint), url)
        # in an image root it refuses to start without trust roots: the host's CA bundle
        env = {**copilot_env(home, url, MODEL, self.entrypoint), **ca_bundle_env(self.sandbox)}
        result = self.sandbox.run(argv, cwd=self.sandbox.cwd, env=env,
                                  timeout_s=DEFAULT_TIMEOUT_S + STARTUP_MARGIN_S, network=network,
                                  writable=(home, cache), readable=readable,
                                  max_output_bytes=64 * 1024 * 1024, die_with_parent=True)
        handed = self.host.handed
        where = f"{call.name}({call.call_id})"
        no_effect = call.name not in MUTATING or not handed
        events_path = home / ".copilot" / "session-state" / session_id / "events.jsonl"
        data: JsonObject | None = None
        if handed and events_path.exists():
            events = read_sandbox_file(home, events_path, kind=ErrorKind.EXECUTOR, what="the tool replay's events",
                                       max_bytes=_MAX_EVENTS_BYTES)
            data = completion_event(events, call.call_id)
        observation = None if data is None else observation_of(data)
        if data is None or observation is None:
            stderr = result.stderr.decode("utf-8", "replace").strip()[-_TAIL:]
            reason = "did not finish in time" if result.timed_out else f"exited {result.returncode}"
            raise ReplayError(ErrorKind.EXECUTOR, f"Copilot CLI {reason} without recording {where}"
                                                  f"{'' if handed else ' (the call was never handed over)'}; "
                                                  f"stderr: {stderr or '(empty)'}", before_effect=no_effect)
        shell = data.get("shellExecution")
        exit_code = shell.get("exitCode") if isinstance(shell, dict) else None
        native: JsonObject = {"success": data.get("success"), "error": data.get("error"),
                              "shellExecution": shell, "model_text": self.host.answered}
        return FreshObservation(call.call_id, observation.content, is_error=observation.is_error,
                                truncated=result.stdout_truncated,
                                return_code=exit_code if isinstance(exit_code, int) else None, native=native)

    def close(self) -> None:
        self.confinement.close()
        self.host.close()
