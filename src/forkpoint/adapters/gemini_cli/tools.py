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
import secrets
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import web

from forkpoint.adapters.gemini_cli.runtime import gemini_env, installed_entrypoint, write_settings
from forkpoint.bridge.protocols.gemini import encode, response_chunks, usage_metadata
from forkpoint.bridge.upstream import stream_events
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import FreshObservation, JsonObject, RunContext, ToolCall
from forkpoint.process.loop_thread import LoopThread
from forkpoint.process.loopback import LoopbackSite
from forkpoint.sandbox import local_sandbox, runtime_paths

if TYPE_CHECKING:
    from forkpoint.sandbox.forward import HostRelay

PROMPT = "forkpoint-tool-replay"
MODEL = "gemini-2.5-pro"
DEFAULT_TIMEOUT_S = 600.0
STARTUP_MARGIN_S = 120.0
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


class ToolHost:
    """The loopback Gemini API that hands the CLI one call and catches its function response."""

    def __init__(self) -> None:
        self._serving: LoopThread[str] = LoopThread("forkpoint-gemini-toolhost")
        self._site = LoopbackSite()
        self._lock = threading.Lock()
        self.call: ToolCall | None = None
        self.handed = False
        self.response: JsonObject | None = None
        self.url: str | None = None
        #: the routes live under a per-executor secret path segment (like the bridge's token): another local
        #: process cannot hand the host a function response without it
        self.token = secrets.token_urlsafe(18)

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

    async def _listen(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post(f"/{self.token}/v1beta/models/{{call}}", self._answer)
        return f"{await self._site.start(app)}/{self.token}"

    def start(self) -> str:
        if self.url is None:
            try:
                self.url = self._serving.start(self._listen, self._site.stop, 10.0)
            except Exception as error:
                raise ReplayError(ErrorKind.EXECUTOR, f"the Gemini CLI tool host did not start: {error}") from error
        return self.url

    def arm(self, call: ToolCall) -> None:
        with self._lock:
            self.call, self.handed, self.response = call, False, None

    def close(self) -> None:
        self._serving.stop(10.0)


class GeminiToolExecutor:
    def __init__(self, context: RunContext, entrypoint: Path | None = None) -> None:
        self.context = context
        self.entrypoint = entrypoint or installed_entrypoint()
        self.sandbox = context.sandbox or local_sandbox(context.workspace)
        self.host = ToolHost()
        self._relay: HostRelay | None = None

    def _confined(self, url: str) -> tuple[list[str], tuple[Path, ...], bool]:
        """The CLI's argv, what it reads and whether it shares the host's network: in a sandbox with its own
        network namespace only the host's port is relayed in (one relay for every call)."""
        argv = [str(self.entrypoint), "--yolo", "--skip-trust", "-m", MODEL, "-o", "json", "-p", PROMPT]
        readable = runtime_paths(self.entrypoint)
        if not self.sandbox.private_network:
            return argv, readable, True
        if self._relay is None:
            from forkpoint.sandbox.forward import HostRelay

            port = urlsplit(url).port
            assert port is not None
            self._relay = HostRelay(port, self.context.state_dir)
        return self._relay.wrap(self.sandbox.host_command(argv)), (*readable, *self._relay.readable), False

    def run(self, call: ToolCall) -> FreshObservation:
        url = self.host.start()
        write_settings(self.context.home, ErrorKind.EXECUTOR)
        self.host.arm(call)
        argv, readable, network = self._confined(url)
        result = self.sandbox.run(argv, cwd=self.sandbox.cwd, env=gemini_env(self.context.home, url),
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
        if self._relay is not None:
            self._relay.close()
        self.host.close()
