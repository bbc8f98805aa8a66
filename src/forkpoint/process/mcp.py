"""The user's MCP servers (``--mcp-config FILE``, Claude Code's own ``.mcp.json`` format): re-run a recorded MCP tool
call against the real server, with a deadline, through the official ``mcp`` SDK (the ``forkpoint[mcp]`` extra).

``{"mcpServers": {"<name>": {"command": "...", "args": [...], "env": {...}}, "<name>": {"type": "http", "url":
"http://...", "headers": {...}}}}``: a stdio server is a process forkpoint starts; an HTTP one (``type`` ``http``,
Streamable HTTP) is reached at its URL. The SDK speaks the protocol (initialize, ``tools/call``, the result types);
forkpoint owns what the SDK's own stdio transport leaves open, because the server is a stranger's program too:

- the process starts in a session of its own with the child-env allowlist (``process.childenv``: PATH, locale, ...,
  plus ``--env``) plus the ``env`` the config names; never forkpoint's credentials;
- its stdout is read one message (line) at a time, at most ``MAX_MESSAGE_BYTES`` each (a server flooding one endless
  line is cut off, not buffered); its stderr goes nowhere;
- every connect and every call has a deadline (``timeout_s``); past it, or when the run ends, the server's whole
  process group is killed (SIGKILL) and waited for: nothing it started in its group outlives the run.

A server that cannot be started (a command that does not exist) is a refusal before any effect; a call past its
deadline is an error naming the server (the call was sent: whether it took effect is unknown).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forkpoint.core.errors import ErrorKind, ReplayError, configuration
from forkpoint.core.fs import InputTooLargeError, NotRegularFileError, read_bounded_input

MAX_CONFIG_BYTES = 1024 * 1024
#: one JSON-RPC message from a stdio server, at most (a line longer than this ends the connection)
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class McpServer:
    """One server of the config: ``command``/``args``/``env`` (stdio) or ``url``/``headers`` (Streamable HTTP)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()


def load_config(path: Path) -> dict[str, McpServer]:
    """The servers of a Claude Code MCP config file (read bounded; any other shape is a configuration error)."""
    try:
        raw = read_bounded_input(path, MAX_CONFIG_BYTES)
    except (OSError, InputTooLargeError, NotRegularFileError) as error:
        raise configuration(f"--mcp-config {path}: cannot be read: {error}") from None
    try:
        document = json.loads(raw)
    except ValueError as error:
        raise configuration(f"--mcp-config {path}: not JSON: {error}") from None
    servers = document.get("mcpServers") if isinstance(document, dict) else None
    if not isinstance(servers, dict):
        raise configuration(f"--mcp-config {path}: expected an object with \"mcpServers\"")
    return {name: _server(path, name, entry) for name, entry in servers.items()}


def _server(path: Path, name: str, entry: Any) -> McpServer:
    where = f"--mcp-config {path}: server {name!r}"
    if not isinstance(entry, dict):
        raise configuration(f"{where} is not an object")
    kind = entry.get("type", "stdio")
    if kind in ("http", "streamable-http"):
        url = entry.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise configuration(f"{where}: an http server needs an http(s) \"url\"")
        return McpServer(name, url=url, headers=_pairs(where, "headers", entry.get("headers")))
    if kind != "stdio":
        raise configuration(f"{where}: type {kind!r} is not supported (stdio, http)")
    command, args = entry.get("command"), entry.get("args", [])
    if not isinstance(command, str) or not command or "\0" in command:
        raise configuration(f"{where}: a stdio server needs a \"command\"")
    if not isinstance(args, list) or not all(isinstance(arg, str) and "\0" not in arg for arg in args):
        raise configuration(f"{where}: \"args\" must be a list of strings")
    return McpServer(name, command=command, args=tuple(args), env=_pairs(where, "env", entry.get("env")))


def _pairs(where: str, key: str, value: Any) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise configuration(f"{where}: {key!r} must map strings to strings")
    return tuple(sorted(value.items()))


def config_document(servers: Mapping[str, McpServer]) -> bytes:
    """The servers as a Claude Code ``--mcp-config`` document again (what was validated, nothing else), for the
    continued agent: it starts the stdio servers itself and reaches the HTTP ones at their URL."""
    entries: dict[str, Any] = {}
    for name, server in servers.items():
        if server.url is not None:
            entries[name] = {"type": "http", "url": server.url, "headers": dict(server.headers)}
        else:
            entries[name] = {"command": server.command, "args": list(server.args), "env": dict(server.env)}
    return json.dumps({"mcpServers": entries}, ensure_ascii=False).encode()


def server_paths(server: McpServer, search_path: str) -> tuple[Path, ...]:
    """What a stdio server must see inside a sandbox that hides most of the host (bwrap: /root, /home, /tmp): its
    command as resolved on ``search_path`` and that install's prefix (``<prefix>/bin/cmd`` -> ``<prefix>``: an
    interpreter's standard library), and every absolute path its arguments and ``env`` values name (a script, a
    ``PYTHONPATH`` entry). Read-only; a path that does not exist is left out."""
    import shutil

    if server.command is None:
        return ()
    found: list[Path] = []
    resolved = shutil.which(server.command, path=search_path) if "/" not in server.command else server.command
    if resolved:
        real = Path(os.path.realpath(resolved))
        found += [Path(resolved).absolute().parent, real.parent.parent if real.parent.name == "bin" else real.parent]
    named = [*server.args, *(part for _, value in server.env for part in value.split(os.pathsep))]
    found += [Path(value) for value in named if os.path.isabs(value) and os.path.exists(value)]
    return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class McpResult:
    """A ``tools/call`` result as the SDK gives it: content blocks (JSON), structuredContent, isError."""

    content: list[dict[str, Any]]
    structured: dict[str, Any] | None
    is_error: bool


@dataclass
class _Connection:
    session: Any
    stop: asyncio.Event
    task: asyncio.Task[None]
    pid: int | None = None
    broken: _Broken | None = None  # a stdio server's transport, once it ended (EOF, an oversized message)


@dataclass
class _Broken:
    """Set by a stdio transport's reader when the connection can carry no more answers, with why."""

    event: asyncio.Event = field(default_factory=asyncio.Event)
    why: str = ""

    def set(self, why: str) -> None:
        if not self.event.is_set():
            self.why = why
            self.event.set()


@dataclass
class McpClients:
    """The run's connections to the configured servers, opened on first use, closed (processes killed) by ``close``.

    Calls come from the replay thread; the SDK runs on a loop thread of its own (``LoopThread``)."""

    servers: Mapping[str, McpServer]
    timeout_s: float = DEFAULT_TIMEOUT_S
    cwd: Path | None = None  # where a stdio server starts (the workspace: Claude starts it in its own cwd)
    env: Mapping[str, str] = field(default_factory=dict)  # the allowlisted child environment (set by ``open``)
    _loop: Any = field(default=None, init=False)
    _connections: dict[str, _Connection] = field(default_factory=dict, init=False)
    _pids: set[int] = field(default_factory=set, init=False)

    def start(self) -> None:
        from forkpoint.process.environment import sanitized_env
        from forkpoint.process.loop_thread import LoopThread

        self.env = sanitized_env(os.environ, strip_credentials=True)
        self._loop = LoopThread("mcp-clients")
        self._loop.start(_noop, self._close_all)

    def call(self, server: str, tool: str, arguments: dict[str, Any]) -> McpResult:
        """Run one tool call (connecting first if needed); a ReplayError on a failure or past the deadline."""
        if server not in self.servers:
            raise ReplayError(ErrorKind.EXECUTOR, f"MCP server {server!r} is not in --mcp-config", before_effect=True)
        loop = self._loop.loop if self._loop is not None else None
        if loop is None:
            raise ReplayError(ErrorKind.EXECUTOR, "the MCP clients are not started", before_effect=True)
        future: Future[McpResult] = asyncio.run_coroutine_threadsafe(self._call(server, tool, arguments), loop)
        try:
            return future.result(self.timeout_s * 2 + 10)  # the coroutine has its own deadlines
        except TimeoutError:
            future.cancel()
            raise ReplayError(ErrorKind.EXECUTOR, f"MCP server {server!r} did not answer {tool} in time") from None

    def input_schema(self, server: str, tool: str) -> dict[str, Any] | None:
        """The tool's ``inputSchema`` as the server lists it (``tools/list``), None when it lists no such tool."""
        loop = self._loop.loop if self._loop is not None else None
        if loop is None or server not in self.servers:
            return None
        future: Future[dict[str, Any] | None] = asyncio.run_coroutine_threadsafe(self._schema(server, tool), loop)
        return future.result(self.timeout_s * 2 + 10)

    async def _schema(self, server: str, tool: str) -> dict[str, Any] | None:
        connection = self._connections.get(server)
        if connection is None:
            return None
        listed = await asyncio.wait_for(connection.session.list_tools(), self.timeout_s)
        for entry in listed.tools:
            if entry.name == tool:
                schema = entry.model_dump(mode="json", by_alias=True, exclude_none=True).get("inputSchema")
                return schema if isinstance(schema, dict) else None
        return None

    def close(self) -> None:
        if self._loop is not None:
            self._loop.stop(self.timeout_s + 10)
            self._loop = None
        for pid in list(self._pids):  # the loop is gone: whatever is left of a group is killed here
            _kill_group(pid)

    async def _call(self, server: str, tool: str, arguments: dict[str, Any]) -> McpResult:
        connection = self._connections.get(server)
        if connection is None:
            connection = await self._connect(self.servers[server])
            self._connections[server] = connection
        try:
            result = await _answer(connection, connection.session.call_tool(tool, arguments), self.timeout_s)
        except TimeoutError:
            await self._drop(server)
            raise ReplayError(ErrorKind.EXECUTOR, f"MCP server {server!r} did not answer {tool} within "
                                                  f"{self.timeout_s:g} s (its processes were killed); whether the "
                                                  "call took effect is unknown") from None
        except ReplayError as error:
            await self._drop(server)
            raise ReplayError(ErrorKind.EXECUTOR, f"MCP server {server!r} failed during {tool}: {error.message}; "
                                                  "whether the call took effect is unknown") from None
        except Exception as error:  # the SDK's transport/protocol errors: the connection is gone
            broken = connection.broken
            why = broken.why if broken is not None and broken.event.is_set() else f"{type(error).__name__}: {error}"
            await self._drop(server)
            raise ReplayError(ErrorKind.EXECUTOR, f"MCP server {server!r} failed during {tool}: {why}; whether the "
                                                  "call took effect is unknown") from None
        dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        content = [block for block in dumped.get("content") or [] if isinstance(block, dict)]
        structured = dumped.get("structuredContent")
        return McpResult(content, structured if isinstance(structured, dict) else None,
                         dumped.get("isError") is True)

    async def _connect(self, server: McpServer) -> _Connection:
        ready: asyncio.Future[tuple[Any, int | None]] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        broken = _Broken()
        task = asyncio.create_task(self._hold(server, ready, stop, broken))
        try:
            session, pid = await asyncio.wait_for(asyncio.shield(ready), self.timeout_s)
        except TimeoutError:
            stop.set()
            await _finish(task, self._pids)
            raise ReplayError(ErrorKind.EXECUTOR, f"MCP server {server.name!r} did not complete its start-up "
                                                  f"within {self.timeout_s:g} s (its processes were killed)",
                              before_effect=True) from None
        return _Connection(session, stop, task, pid, broken)

    async def _hold(self, server: McpServer, ready: asyncio.Future[tuple[Any, int | None]],
                    stop: asyncio.Event, broken: _Broken) -> None:
        """Open the transport and the SDK session, hand them over, and keep them open until ``stop``."""
        from mcp import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                if server.url is not None:
                    from mcp.client.streamable_http import streamable_http_client
                    from mcp.shared._httpx_utils import create_mcp_http_client

                    client = create_mcp_http_client(headers=dict(server.headers) or None)
                    await stack.enter_async_context(client)
                    read, write = await stack.enter_async_context(streamable_http_client(server.url,
                                                                                         http_client=client))
                    pid = None
                else:
                    read, write, pid = await stack.enter_async_context(_stdio(server, self.env, self._pids,
                                                                              self.cwd, broken))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                ready.set_result((session, pid))
                await stop.wait()
        except BaseException as error:
            if not ready.done():
                ready.set_exception(_start_error(server, error))
            if not isinstance(error, Exception):
                raise

    async def _drop(self, server: str) -> None:
        connection = self._connections.pop(server, None)
        if connection is not None:
            if connection.pid is not None:
                _kill_group(connection.pid)
            connection.stop.set()
            await _finish(connection.task, self._pids)

    async def _close_all(self) -> None:
        for server in list(self._connections):
            await self._drop(server)

    def __enter__(self) -> McpClients:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


async def _noop() -> None:
    return None


async def _answer(connection: _Connection, request: Any, timeout_s: float) -> Any:
    """``request``'s answer, or ReplayError as soon as the transport broke, or TimeoutError past ``timeout_s``."""
    call = asyncio.ensure_future(request)
    broken = connection.broken
    waiter = asyncio.ensure_future(broken.event.wait()) if broken is not None else None
    try:
        done, _ = await asyncio.wait({call} | ({waiter} if waiter else set()), timeout=timeout_s,
                                     return_when=asyncio.FIRST_COMPLETED)
        if call in done:
            return call.result()
        if waiter is not None and waiter in done and broken is not None:
            raise ReplayError(ErrorKind.EXECUTOR, f"the connection ended: {broken.why}")
        raise TimeoutError
    finally:
        for task in (call, waiter):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task


def _start_error(server: McpServer, error: BaseException) -> ReplayError:
    if isinstance(error, ReplayError):
        return error
    what = f"command {server.command!r}" if server.command else f"URL {server.url}"
    return ReplayError(ErrorKind.EXECUTOR, f"MCP server {server.name!r} ({what}) could not be started or "
                                           f"reached: {type(error).__name__}: {error}", before_effect=True)


async def _finish(task: asyncio.Task[None], pids: set[int]) -> None:
    try:
        await asyncio.wait_for(task, 10)
    except (TimeoutError, asyncio.CancelledError, Exception):
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


@contextlib.asynccontextmanager
async def _stdio(server: McpServer, env: Mapping[str, str], pids: set[int], cwd: Path | None,
                 broken: _Broken) -> Any:
    """The server process in a session of its own, and SDK streams over its stdin/stdout (bounded lines)."""
    import anyio
    from mcp import types
    from mcp.shared.message import SessionMessage

    assert server.command is not None
    process = await anyio.open_process([server.command, *server.args], stdin=-1, stdout=-1, stderr=-3,
                                       env={**env, **dict(server.env)}, cwd=cwd, start_new_session=True)
    pid = process.pid
    pids.add(pid)
    to_session, read = anyio.create_memory_object_stream[Any](0)
    write, from_session = anyio.create_memory_object_stream[Any](0)

    async def deliver(line: bytes) -> None:
        if not line.strip():
            return
        try:
            message: Any = SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
        except ValueError as error:
            message = error
        await to_session.send(message)

    async def reader() -> None:
        """Lines of at most MAX_MESSAGE_BYTES: each chunk is searched once (no rescans of a growing buffer)."""
        assert process.stdout is not None
        pending = bytearray()
        async with to_session:
            with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                async for chunk in process.stdout:
                    start = 0
                    while (end := chunk.find(b"\n", start)) >= 0:
                        pending += chunk[start:end]
                        line = bytes(pending)
                        pending.clear()
                        await deliver(line)
                        start = end + 1
                    pending += chunk[start:]
                    if len(pending) > MAX_MESSAGE_BYTES:
                        _kill_group(pid)
                        broken.set(f"the server wrote a message over {MAX_MESSAGE_BYTES} bytes (its processes "
                                   "were killed)")
                        return
        broken.set("the server closed its output (it exited)")

    async def writer() -> None:
        assert process.stdin is not None
        async with from_session:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(reader)
            group.start_soon(writer)
            try:
                yield read, write, pid
            finally:
                _kill_group(pid)
                group.cancel_scope.cancel()
    finally:
        _kill_group(pid)
        with anyio.CancelScope(shield=True):
            with contextlib.suppress(Exception):
                await process.wait()
            with contextlib.suppress(Exception):
                await process.aclose()
        pids.discard(pid)
