"""Re-run historical Qwen Code calls with the REAL binary's own tools: one ``qwen -p`` executes every call.

Qwen Code's tools (read_file, write_file, edit, run_shell_command, glob, grep_search) live in its bundle, and their
exact output (``Successfully created and wrote to new file: …``, the shell's ``Command: …\\nDirectory: …`` block,
error texts) is the observation. They also keep per-process state the recording relied on: 0.24.4's ``edit``
refuses a file that was not read in the same session (measured; a ``--resume`` in a new process does not restore
it). So forkpoint starts ONE ``qwen --yolo -p`` in the workspace and the isolated HOME (a session id of its own)
against a loopback Chat Completions endpoint served here under a secret path segment, and answers each model
request with the next historical call (its id, name and arguments), in order. The CLI runs it with its own
implementation and records the ``functionResponse`` in its session file before it sends the next request; that
request is the signal, and the recorded response is the fresh observation (the wire carries only its text).
``close`` answers with a final text, so the CLI ends; anything left is ended by the supervised process group.

A call the CLI does not answer fails (before any effect unless a changing tool was handed over). The CLI runs in the
run's sandbox, at the cwd the tools see (under bwrap the recorded cwd, the workspace mounted there), its HOME
writable and the runtime read-only; a sandbox with its own network namespace gets nothing but the host's port,
relayed into it like the bridge for a continued agent (``forkpoint.sandbox.forward``).
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from forkpoint.adapters.kit.npm_cli import node_command
from forkpoint.adapters.kit.tool_host import (
    DEFAULT_TIMEOUT_S,
    PROMPT,
    STARTUP_MARGIN_S,
    HostConfinement,
    LoopbackToolHost,
)
from forkpoint.adapters.qwen_code.parse import response_of
from forkpoint.adapters.qwen_code.runtime import NODE_START, installed_entrypoint, project_dir, qwen_env, write_settings
from forkpoint.bridge.protocols.openai_chat import chat_chunks, encode
from forkpoint.bridge.upstream import stream_events
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import read_sandbox_file
from forkpoint.core.model import FreshObservation, JsonObject, RunContext, ToolCall
from forkpoint.process import ProcessResult
from forkpoint.sandbox import local_sandbox

MODEL = "qwen3-coder-plus"
MUTATING = frozenset({"write_file", "edit", "run_shell_command"})
_TAIL = 600
_FINAL: JsonObject = {"role": "assistant", "content": "Replay finished."}


class ToolHost(LoopbackToolHost):
    """The loopback Chat Completions endpoint: each tools request gets the next queued call (or, after ``finish``,
    the final text); a request whose last message answers the pending call signals it."""

    label = "Qwen Code"
    thread_name = "forkpoint-qwen-toolhost"
    routes = ("/v1/chat/completions",)

    def __init__(self) -> None:
        super().__init__()
        self.calls: queue.Queue[ToolCall | None] = queue.Queue()
        self.answered: queue.Queue[str] = queue.Queue()
        self.pending: str | None = None

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages = body.get("messages") if isinstance(body, dict) else None
        last = messages[-1] if isinstance(messages, list) and messages and isinstance(messages[-1], dict) else {}
        message = _FINAL
        if isinstance(body, dict) and body.get("tools"):
            if self.pending is not None and last.get("role") == "tool" and last.get("tool_call_id") == self.pending:
                self.answered.put(self.pending)
            import asyncio

            call = await asyncio.get_running_loop().run_in_executor(None, self.calls.get)
            self.pending = None if call is None else call.call_id
            if call is not None:
                message = {"role": "assistant", "content": None, "tool_calls": [{
                    "id": call.call_id, "type": "function",
                    "function": {"name": call.name, "arguments": orjson.dumps(call.arguments).decode()}}]}
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return await stream_events(request, encode(chat_chunks("forkpoint-tools", MODEL, message, finish, True)))


class QwenToolExecutor:
    def __init__(self, context: RunContext, entrypoint: Path | None = None) -> None:
        self.context = context
        self.entrypoint = entrypoint or installed_entrypoint()
        self.sandbox = context.sandbox or local_sandbox(context.workspace)
        self.host = ToolHost()
        self.session_id = str(uuid.uuid4())
        self.confinement = HostConfinement(self.sandbox, context.state_dir)
        self._thread: threading.Thread | None = None
        self._result: ProcessResult | None = None
        self._error: BaseException | None = None

    def _start(self) -> None:
        url = self.host.start()
        write_settings(self.context.home, ErrorKind.EXECUTOR)
        node = node_command(self.sandbox, self.entrypoint, NODE_START)
        argv = [*node.argv, "--yolo", "--auth-type", "openai", "-m", MODEL, "-o", "json",
                "--session-id", self.session_id, "-p", PROMPT]
        env, sandbox = {**qwen_env(self.context.home, url), **node.env}, self.sandbox
        # under a sandbox with its own network namespace only the tool host's port, relayed in (as for the
        # continued agent)
        argv, readable, network = self.confinement.confine(argv, node.readable, url)
        self.context.logs.mkdir(parents=True, exist_ok=True)

        def run() -> None:
            try:
                self._result = sandbox.run(argv, cwd=sandbox.cwd, env=env, timeout_s=24 * 3600.0, grace_s=2.0,
                                           network=network, writable=(self.context.home,), readable=readable,
                                           log_path=self.context.logs / "qwen-code-tools.log", die_with_parent=True)
            except BaseException as error:  # surfaced by the next call / close
                self._error = error

        self._thread = threading.Thread(target=run, daemon=True, name="forkpoint-qwen-toolrun")
        self._thread.start()

    def run(self, call: ToolCall) -> FreshObservation:
        if self._thread is None:
            self._start()
        self.host.calls.put(call)
        where = f"{call.name}({call.call_id})"
        deadline = time.monotonic() + DEFAULT_TIMEOUT_S + STARTUP_MARGIN_S
        answered = False
        while not answered:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                answered = self.host.answered.get(timeout=min(remaining, 0.2)) == call.call_id
            except queue.Empty:
                if self._thread is not None and not self._thread.is_alive():
                    break
        handed = self.host.pending == call.call_id or answered
        no_effect = call.name not in MUTATING or not handed
        record = self._await_record(call, deadline) if answered else None
        if record is None:
            raise ReplayError(ErrorKind.EXECUTOR, f"Qwen Code did not run {where} ({self._exit_text()})",
                              before_effect=no_effect)
        response = response_of(record) or {}
        if response.get("name") != call.name:
            raise ReplayError(ErrorKind.EXECUTOR, f"Qwen Code answered {where} with a response for "
                                                  f"{response.get('name')!r}", before_effect=no_effect)
        content = response.get("response")
        content = content if isinstance(content, dict) else {"output": content}
        result = record.get("toolCallResult")
        status = result.get("status") if isinstance(result, dict) else None
        return FreshObservation(call.call_id, content, is_error=status == "error", native={"response": response})

    def _await_record(self, call: ToolCall, deadline: float) -> JsonObject | None:
        """The call's ``tool_result`` record, once the CLI has appended it (it writes its session asynchronously:
        the record can land just after the next request was sent); None when it does not come in time."""
        while True:
            record = self._result_record(call)
            if record is not None or time.monotonic() > deadline or not (self._thread and self._thread.is_alive()):
                return record
            time.sleep(0.05)  # a condition poll with a deadline: the CLI gives no other signal for its write

    def _result_record(self, call: ToolCall) -> JsonObject | None:
        """The ``tool_result`` record for ``call`` in the session file the CLI wrote (read strictly: a replayed
        call could have planted a link there)."""
        home = self.context.home
        path = (home / ".qwen" / "projects" / project_dir(str(self.sandbox.cwd)) / "chats"
                / f"{self.session_id}.jsonl")
        data = read_sandbox_file(home, path, kind=ErrorKind.EXECUTOR, what="the tool replay's session")
        for line in reversed(data.splitlines()):
            try:
                record: Any = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("type") == "tool_result":
                response = response_of(record)
                if response is not None and response.get("id") == call.call_id:
                    return record
        return None

    def _exit_text(self) -> str:
        if self._error is not None:
            return f"{type(self._error).__name__}: {self._error}"
        result = self._result
        if result is None:
            return "no answer in time" if self._thread is not None and self._thread.is_alive() else "no result"
        return f"exit {result.returncode}: {result.stderr[-_TAIL:].decode('utf-8', 'replace').strip()}"

    def close(self) -> None:
        self.host.calls.put(None)
        if self._thread is not None:
            self._thread.join(30.0)
        self.confinement.close()
        self.host.close()
