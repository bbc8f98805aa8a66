"""The continued agent's network under bwrap: the bridge's port and nothing else (``forkpoint.sandbox.forward``).

A real bwrap sandbox with its own network namespace, a "bridge" (an HTTP server on the host's 127.0.0.1) and
another host loopback listener: from inside, 127.0.0.1:<bridge port> answers through the relay, the other port is
refused (the listener's backlog stays empty).
"""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpoint.sandbox.bwrap import BwrapSandbox
from forkpoint.sandbox.forward import HostRelay

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

RECORDED = "/srv/forkpoint-forward-test/app"
#: a state dir whose path alone passes the 108-byte limit of Unix socket paths
STATE = "state-" + "x" * 110


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"bridge saw {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def bridge() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture()
def other() -> Iterator[socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    try:
        yield server
    finally:
        server.close()


def _backlog(server: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = server.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


PROBE = """
import socket, sys, urllib.request
print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/token/v1/messages", timeout=10).read().decode())
for port in sys.argv[2:]:
    try:
        socket.create_connection(("127.0.0.1", int(port)), timeout=5)
        print("connected", port)
    except OSError as exc:
        print("refused", port, type(exc).__name__)
"""


def test_inside_only_the_bridge_port_is_reachable(tmp_path: Path, bridge: int, other: socket.socket) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sandbox = BwrapSandbox(workspace, RECORDED)
    python = os.path.realpath(sys.executable)
    other_port = other.getsockname()[1]
    with HostRelay(bridge, tmp_path / STATE) as relay:
        result = sandbox.run(relay.wrap([python, "-I", "-S", "-c", PROBE, str(bridge), str(other_port)]),
                             cwd=RECORDED, env={"PATH": os.environ["PATH"]}, timeout_s=60, network=False,
                             readable=relay.readable)
        folder = relay.folder
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    lines = result.stdout.decode().splitlines()
    assert lines == ["bridge saw /token/v1/messages", f"refused {other_port} ConnectionRefusedError"], lines
    assert _backlog(other) == 0
    assert len(str(folder)) > 108 and not folder.exists()  # the relay's socket folder is gone with it


def test_the_agents_exit_status_comes_through(tmp_path: Path, bridge: int) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sandbox = BwrapSandbox(workspace, RECORDED)
    with HostRelay(bridge, tmp_path / STATE) as relay:
        result = sandbox.run(relay.wrap(["/bin/sh", "-c", "exit 7"]), cwd=RECORDED, env={"PATH": os.environ["PATH"]},
                             timeout_s=60, network=False, readable=relay.readable)
    assert result.returncode == 7


def test_without_the_relay_the_host_is_reachable(tmp_path: Path, other: socket.socket) -> None:
    """Control: the shared network namespace (``network=True``, the old continuation) reaches the other port."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sandbox = BwrapSandbox(workspace, RECORDED)
    python = os.path.realpath(sys.executable)
    code = f"import socket; socket.create_connection(('127.0.0.1', {other.getsockname()[1]}), timeout=5)"
    result = sandbox.run([python, "-I", "-S", "-c", code], cwd=RECORDED, env={"PATH": os.environ["PATH"]},
                         timeout_s=60, network=True, readable=(Path(os.path.realpath(sys.base_prefix)),))
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert _backlog(other) == 1
