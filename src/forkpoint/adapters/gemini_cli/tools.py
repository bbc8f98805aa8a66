"""Re-run historical Gemini CLI calls with the REAL binary's own tools, one ``gemini -p`` per call.

Gemini CLI's tools (read_file, write_file, replace, run_shell_command, glob, grep_search, list_directory) live in
its bundle, and their exact output (``Successfully created and wrote to new file: …``, the shell's
``<untrusted_context>`` wrapper, error texts) is the observation. So forkpoint does not re-implement them: it
serves a loopback Gemini API here and starts the verified ``gemini --yolo -p`` in the workspace, in the isolated
HOME (the API under a secret path segment). The first model request is answered with the historical call (its name
and arguments); the CLI runs it with its own implementation and sends the function response in the next request,
which is the fresh observation; that request is answered with a final text, so the CLI ends. Requests without
tools get a short text.

A run that ends without sending the function response fails the call (before any effect unless the host had
handed a changing tool its call: then the effect may have happened).

The CLI runs in the run's sandbox, at the cwd the tools see (under bwrap the recorded cwd, the workspace mounted
there), its HOME writable and the runtime read-only. A sandbox with its own network namespace gets nothing but the
host's port, relayed into it like the bridge for a continued agent (``forkpoint.sandbox.forward``, as OpenCode's
tool host does): a replayed command reaches no other address.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

from forkpoint.adapters.gemini_cli.runtime import NODE_START, gemini_env, installed_entrypoint, write_settings
from forkpoint.adapters.kit.npm_cli import node_command
from forkpoint.adapters.kit.tool_host import (
    DEFAULT_TIMEOUT_S,
    PROMPT,
    STARTUP_MARGIN_S,
    HostConfinement,
    LoopbackToolHost,
)
from forkpoint.bridge.protocols.gemini import encode, response_chunks, usage_metadata
from forkpoint.bridge.upstream import stream_events
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import FreshObservation, JsonObject, RunContext, ToolCall
from forkpoint.sandbox import local_sandbox

MODEL = "gemini-2.5-pro"
MUTATING = frozenset({"write_file", "replace", "run_shell_command"})
#: the shell's process group id differs on every run
_PGID = re.compile(r"Process Group PGID: \d+")
_TAIL = 600


def normalize_volatile(content: Any) -> Any:
    """Only the documented volatile part: the process group id run_shell_command reports."""
    if isinstance(content, str):
        return _PGID.sub("Process Group PGID: <pgid>", content)
    if isinstance(content, list):
        return [normalize_volatile(item) for item in content]
    if isinstance(content, dict):
        return {key: normalize_volatile(value) for key, value in content.items()}
    return content


class ToolHost(LoopbackToolHost):
    """The loopback Gemini API that hands the CLI one call and catches its function response."""

    label = "Gemini CLI"
    thread_name = "forkpoint-gemini-toolhost"
    routes = ("/v1beta/models/{call}",)

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.call: ToolCall | None = None
        self.handed = False
        self.response: JsonObject | None = None

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        contents = body.get("contents") if isinstance(body, dict) else None
        last = contents[-1] if isinstance(contents, list) and contents and isinstance(contents[-1], dict) else {}
        responses = [p["functionResponse"] for p in last.get("parts") or []
                     if isinstance(p, dict) and isinstance(p.get("functionResponse"), dict)]
        with self._lock:
            call = self.call
            if not body.get("tools") or call is None:
                parts: list[JsonObject] = [{"text": "forkpoint tool replay"}]
            elif responses:
                if self.response is None:
                    self.response = responses[0]
                parts = [{"text": "Replay finished."}]
            elif self.handed:
                parts = [{"text": "Replay finished."}]
            else:
                self.handed = True
                parts = [{"functionCall": {"id": call.call_id, "name": call.name, "args": call.arguments}}]
        return await stream_events(request, encode(response_chunks("forkpoint-tools", MODEL, parts,
                                                                   usage_metadata(parts))))

    def arm(self, call: ToolCall) -> None:
        with self._lock:
            self.call, self.handed, self.response = call, False, None


class GeminiToolExecutor:
    def __init__(self, context: RunContext, entrypoint: Path | None = None) -> None:
        self.context = context
        self.entrypoint = entrypoint or installed_entrypoint()
        self.sandbox = context.sandbox or local_sandbox(context.workspace)
        self.host = ToolHost()
        self.confinement = HostConfinement(self.sandbox, context.state_dir)

    def _confined(self, url: str) -> tuple[list[str], tuple[Path, ...], bool, dict[str, str]]:
        """The CLI's argv, what it reads, whether it shares the host's network (HostConfinement) and what its
        environment gets in an image root (``node_command``)."""
        node = node_command(self.sandbox, self.entrypoint, NODE_START)
        argv = [*node.argv, "--yolo", "--skip-trust", "-m", MODEL, "-o", "json", "-p", PROMPT]
        argv, readable, network = self.confinement.confine(argv, node.readable, url)
        return argv, readable, network, node.env

    def run(self, call: ToolCall) -> FreshObservation:
        url = self.host.start()
        write_settings(self.context.home, ErrorKind.EXECUTOR)
        self.host.arm(call)
        argv, readable, network, extra = self._confined(url)
        result = self.sandbox.run(argv, cwd=self.sandbox.cwd, env={**gemini_env(self.context.home, url), **extra},
                                  timeout_s=DEFAULT_TIMEOUT_S + STARTUP_MARGIN_S, network=network,
                                  writable=(self.context.home,), readable=readable,
                                  max_output_bytes=64 * 1024 * 1024, die_with_parent=True)
        response, handed = self.host.response, self.host.handed
        where = f"{call.name}({call.call_id})"
        no_effect = call.name not in MUTATING or not handed
        if response is None:
            stderr = result.stderr.decode("utf-8", "replace").strip()[-_TAIL:]
            reason = "did not finish in time" if result.timed_out else f"exited {result.returncode}"
            raise ReplayError(ErrorKind.EXECUTOR, f"Gemini CLI {reason} without running {where}"
                                                  f"{'' if handed else ' (the call was never handed over)'}; "
                                                  f"stderr: {stderr or '(empty)'}", before_effect=no_effect)
        if response.get("name") != call.name:
            raise ReplayError(ErrorKind.EXECUTOR, f"Gemini CLI answered {where} with a response for "
                                                  f"{response.get('name')!r}", before_effect=no_effect)
        content = response.get("response")
        content = content if isinstance(content, dict) else {"output": content}
        return FreshObservation(call.call_id, content, is_error="error" in content,
                                truncated=result.stdout_truncated, native={"response": response})

    def close(self) -> None:
        self.confinement.close()
        self.host.close()
