"""The user's MCP servers (``--mcp-config``): REAL servers written with the official SDK (forkpoint.testing.mcp_server)
over stdio and Streamable HTTP on 127.0.0.1; hostile ones: a command that does not exist, a server that hangs (and
leaves a child in its group), a server flooding its stdout, a config of the wrong shape."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.process.mcp import MAX_MESSAGE_BYTES, McpClients, McpServer, load_config

SRC = str(Path(__file__).resolve().parents[2] / "src")


def tiny(**env: str) -> McpServer:
    return McpServer("tiny", command=sys.executable, args=("-m", "forkpoint.testing.mcp_server"),
                     env=tuple({"PYTHONPATH": SRC, **env}.items()))


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _gone(pid: int, within: float = 10.0) -> bool:
    """Whether ``pid`` is gone (bounded wait: a SIGKILLed process needs a moment to be torn down)."""
    deadline = time.monotonic() + within
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_stdio_server_answers_and_acts_in_its_cwd(tmp_path: Path) -> None:
    with McpClients({"tiny": tiny()}, 30, tmp_path) as clients:
        echoed = clients.call("tiny", "echo", {"text": "hi"})
        assert echoed.structured == {"result": "echo: hi"} and not echoed.is_error
        two = clients.call("tiny", "two", {"text": "t"})
        assert [block["text"] for block in two.content] == ["one t", "two t"] and two.structured is None
        assert clients.call("tiny", "count", {"label": "a"}).content[0]["text"] == "a: 1"
        failed = clients.call("tiny", "fail", {"reason": "x"})
        assert failed.is_error and failed.content[0]["text"] == "Error executing tool fail"
        assert clients.input_schema("tiny", "fail") == {
            "properties": {"reason": {"title": "Reason", "type": "string"}}, "required": ["reason"],
            "type": "object", "title": "failArguments"}
    assert (tmp_path / "count.txt").read_text() == "a\n"


def test_stdio_server_gets_only_the_allowlisted_environment(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORKPOINT_TEST_SECRET_TOKEN", "canary-value")
    monkeypatch.setenv("LANG", "C.UTF-8")
    with McpClients({"tiny": tiny(GIVEN="by-config")}, 30, tmp_path) as clients:
        def env(name: str) -> str:
            return str(clients.call("tiny", "env", {"name": name}).content[0]["text"])
        assert env("FORKPOINT_TEST_SECRET_TOKEN") == "<unset>"  # forkpoint's own environment stays out
        assert env("GIVEN") == "by-config" and env("LANG") == "C.UTF-8"


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    port_file = tmp_path / "port"
    server = subprocess.Popen([sys.executable, "-m", "forkpoint.testing.mcp_server", "http", str(port_file)],
                              env={**os.environ, "PYTHONPATH": SRC}, cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:  # until it accepts connections (bounded)
            assert time.monotonic() < deadline and server.poll() is None, "the HTTP MCP server did not start"
            if port_file.is_file() and port_file.read_text():
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", int(port_file.read_text()))) == 0:
                        break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port_file.read_text()}/mcp"
    finally:
        os.killpg(server.pid, 9)
        server.wait()


def test_http_server_answers(http_server: str, tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"web": {"type": "http", "url": http_server}}}))
    with McpClients(load_config(config), 30) as clients:
        assert clients.call("web", "echo", {"text": "over http"}).structured == {"result": "echo: over http"}
        assert clients.call("web", "plain", {"text": "p"}).content == [{"type": "text", "text": "plain: p"}]


def test_a_command_that_does_not_exist_is_refused_before_any_effect(tmp_path: Path) -> None:
    server = McpServer("ghost", command=str(tmp_path / "no-such-server"))
    with McpClients({"ghost": server}, 10) as clients, pytest.raises(ReplayError) as raised:
        clients.call("ghost", "anything", {})
    assert raised.value.before_effect and "ghost" in raised.value.message
    assert "could not be started" in raised.value.message


def test_a_hanging_server_is_killed_with_its_group_at_the_deadline(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    started = time.monotonic()
    with McpClients({"tiny": tiny(MCP_CHILD_PID_FILE=str(pid_file))}, 8, tmp_path) as clients:
        with pytest.raises(ReplayError) as raised:
            clients.call("tiny", "hang", {"spawn": True})
        assert raised.value.kind is ErrorKind.EXECUTOR and "did not answer hang within 8 s" in raised.value.message
    assert time.monotonic() - started < 40
    child = int(pid_file.read_text())
    assert _gone(child), "the hanging server's child outlived the run"


def test_a_server_flooding_its_stdout_is_cut_off(tmp_path: Path) -> None:
    started = time.monotonic()
    with McpClients({"tiny": tiny()}, 60, tmp_path) as clients, pytest.raises(ReplayError) as raised:
        clients.call("tiny", "flood", {})
    assert "tiny" in raised.value.message and f"over {MAX_MESSAGE_BYTES} bytes" in raised.value.message
    assert time.monotonic() - started < 30  # cut off at the bound, not at the deadline


@pytest.mark.parametrize(("document", "words"), [
    ("[]", "mcpServers"),
    ('{"mcpServers": {"a": {"type": "sse", "url": "http://x"}}}', "not supported"),
    ('{"mcpServers": {"a": {"args": ["x"]}}}', 'needs a "command"'),
    ('{"mcpServers": {"a": {"type": "http", "url": "file:///etc/passwd"}}}', "http(s)"),
    ('{"mcpServers": {"a": {"command": "x", "env": {"A": 1}}}}', "strings to strings"),
])
def test_a_config_of_the_wrong_shape_is_a_configuration_error(tmp_path: Path, document: str, words: str) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(document)
    with pytest.raises(ReplayError) as raised:
        load_config(path)
    assert raised.value.kind is ErrorKind.CONFIGURATION and words in raised.value.message


def test_a_fifo_config_is_refused_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    os.mkfifo(path)
    with pytest.raises(ReplayError) as raised:
        load_config(path)
    assert raised.value.kind is ErrorKind.CONFIGURATION
