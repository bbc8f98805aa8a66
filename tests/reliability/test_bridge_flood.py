"""A bridge flooded with large, many and slow requests over real loopback HTTP (forkpoint.bridge.limits).

Every refusal here is load shedding (503/408/413 and a closed connection), never a gate verdict: afterwards the
REAL first request captured from Claude Code still validates and is answered (200). The memory test runs the bridge
in its own process with the default limits and measures that process's peak RSS (``VmHWM``) while 32 clients send
16 MiB bodies at once (512 MiB in total).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from forkpoint.adapters.claude_code.envelope import ExpectedPrefix, expected_prefix
from forkpoint.adapters.claude_code.gate import ClaudeGate
from forkpoint.bridge.limits import Limits
from forkpoint.bridge.protocols.anthropic import AnthropicStubUpstream
from forkpoint.bridge.server import Bridge

CASE = Path(__file__).resolve().parents[1] / "fixtures" / "claude_code" / "requests" / "2.1.332" / "parallel_after_2"
MIB = 1024 * 1024

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="RSS is read from /proc")


def _case() -> tuple[ExpectedPrefix, bytes]:
    meta = json.loads((CASE / "meta.json").read_text("utf-8"))
    records = [json.loads(line) for line in (CASE / "session.jsonl").read_text("utf-8").splitlines()]
    return expected_prefix(records, meta["nonce"], "2.1.332"), (CASE / "first_request.json").read_bytes()


def _head(path: str, length: int | None, extra: str = "") -> bytes:
    size = f"Content-Length: {length}\r\n" if length is not None else ""
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{size}{extra}"
            "\r\n").encode()


def _exchange(port: int, data: bytes, body: bytes | memoryview = b"", timeout: float = 30) -> tuple[int, bytes]:
    """Send a request (the body may be cut short by the server) and read the status line; 0 = no answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
            if body:
                sock.sendall(body)
        except OSError:
            pass  # the server refused the rest of the body and closed: read what it answered
        received = b""
        try:
            while b"\r\n\r\n" not in received and (chunk := sock.recv(65536)):
                received += chunk
        except OSError:
            pass
    status = int(received.split(b" ", 2)[1]) if received.startswith(b"HTTP/1.1 ") else 0
    return status, received


def _valid(base_url: str, first: bytes) -> tuple[int, bytes]:
    parts = urlsplit(base_url)
    head = _head(f"{parts.path}/v1/messages?beta=true", len(first),
                 "anthropic-version: 2023-06-01\r\nx-api-key: dummy\r\nConnection: close\r\n")
    with socket.create_connection(("127.0.0.1", parts.port or 0), timeout=30) as sock:
        sock.sendall(head + first)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return int(received.split(b" ", 2)[1]), received


def _closed_within(sock: socket.socket, limit: float) -> float:
    """Seconds until the peer closes ``sock`` (EOF or reset); fails after ``limit``."""
    started = time.monotonic()
    sock.settimeout(limit)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"the bridge kept the connection open for more than {limit} s")
    return time.monotonic() - started


# -- memory: a flood of large concurrent bodies -------------------------------------------------------------------

_BRIDGE_PROCESS = """
import json, sys
from pathlib import Path
from forkpoint.adapters.claude_code.envelope import expected_prefix
from forkpoint.bridge.server import Bridge
from forkpoint.adapters.claude_code.gate import ClaudeGate
from forkpoint.bridge.protocols.anthropic import AnthropicStubUpstream
case = Path(sys.argv[1])
meta = json.loads((case / "meta.json").read_text("utf-8"))
records = [json.loads(line) for line in (case / "session.jsonl").read_text("utf-8").splitlines()]
with Bridge(ClaudeGate(expected_prefix(records, meta["nonce"], "2.1.332")), AnthropicStubUpstream()) as bridge:
    print(bridge.base_url, flush=True)
    sys.stdin.readline()
"""


@contextmanager
def _bridge_process() -> Iterator[tuple[int, str]]:
    process = subprocess.Popen([sys.executable, "-c", _BRIDGE_PROCESS, str(CASE)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield process.pid, process.stdout.readline().strip()
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=30)


def _memory_kib(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


def test_many_concurrent_large_bodies_keep_the_bridge_memory_bounded() -> None:
    _, first = _case()
    clients, size = 32, 16 * MIB
    body = memoryview(b"x" * size)
    with _bridge_process() as (pid, base_url):
        parts = urlsplit(base_url)
        port = parts.port or 0
        assert _valid(base_url, first)[0] == 200  # warm: the first answer's own allocations are not the flood's
        before = _memory_kib(pid)["VmRSS"]
        statuses: list[int] = []
        head = _head(f"{parts.path}/v1/messages/count_tokens", size)
        threads = [threading.Thread(target=lambda: statuses.append(_exchange(port, head, body)[0]))
                   for _ in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        growth_mib = (_memory_kib(pid)["VmHWM"] - before) / 1024
        assert statuses.count(200) >= 1, statuses  # bodies within the budget are still served
        assert set(statuses) <= {200, 503, 0}, statuses  # the rest are shed (or cut off mid-body)
        # 512 MiB were sent at once; the default budget buffers 64 MiB (plus the copy of a finished body)
        assert growth_mib < 200, f"the bridge grew by {growth_mib:.0f} MiB"
        assert _valid(base_url, first)[0] == 200  # afterwards the validated agent is served


# -- slow, many, and over-budget requests (in process, small limits) -----------------------------------------------


@contextmanager
def _bridge(**limits: Any) -> Iterator[tuple[Bridge, int, str, bytes]]:
    expected, first = _case()
    with Bridge(ClaudeGate(expected), AnthropicStubUpstream(), limits=Limits(**limits)) as bridge:
        parts = urlsplit(bridge.base_url)
        yield bridge, parts.port or 0, parts.path, first


def test_slow_headers_are_cut_off_and_the_agent_is_served_afterwards() -> None:
    with _bridge(header_timeout_s=1.0) as (bridge, port, token_path, first):
        partial = socket.create_connection(("127.0.0.1", port))
        silent = socket.create_connection(("127.0.0.1", port))
        with partial, silent:
            partial.sendall(f"POST {token_path}/v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ".encode())
            assert 0.5 < _closed_within(partial, 5.0) < 4.0
            assert _closed_within(silent, 5.0) < 4.0  # a connection that never sends a byte is closed too
        status, _ = _valid(bridge.base_url, first)
        summary = bridge.finish()
    assert status == 200
    assert not summary.failed and summary.validated == 1 and summary.shed == 2


def test_headers_trickled_byte_by_byte_are_cut_off_at_the_same_deadline() -> None:
    with _bridge(header_timeout_s=1.0) as (bridge, port, token_path, first):
        header = f"POST {token_path}/v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode() + b"X-Slow: a" * 100
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port)) as sock:
            try:
                for byte in header:  # one byte every 50 ms: each byte is progress, the deadline does not move
                    sock.sendall(bytes([byte]))
                    time.sleep(0.05)
                    assert time.monotonic() - started < 4, "the trickling client was never cut off"
            except OSError:
                pass  # closed by the bridge
        assert time.monotonic() - started < 4
        status, _ = _valid(bridge.base_url, first)
        summary = bridge.finish()
    assert status == 200 and not summary.failed and summary.shed == 1


def test_a_chunked_body_over_the_byte_budget_is_cut_off() -> None:
    with _bridge(max_buffered_bytes=1 * MIB) as (bridge, port, token_path, first):
        head = _head(f"{token_path}/v1/messages/count_tokens", None, "Transfer-Encoding: chunked\r\n")
        chunk = b"%x\r\n%s\r\n" % (256 * 1024, b"y" * 256 * 1024)
        status, _ = _exchange(port, head, chunk * 8 + b"0\r\n\r\n", timeout=10)  # 2 MiB, no Content-Length
        assert status == 503
        status, _ = _valid(bridge.base_url, first)
        summary = bridge.finish()
    assert status == 200 and not summary.failed and summary.shed == 1


def test_a_slow_body_gets_408_and_the_agent_is_served_afterwards() -> None:
    with _bridge(body_timeout_s=1.0) as (bridge, port, token_path, first):
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(_head(f"{token_path}/v1/messages", len(first)) + first[:100])  # and then nothing
            answer = sock.recv(65536)
            assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
            _closed_within(sock, 5.0)
        assert time.monotonic() - started < 5
        status, _ = _valid(bridge.base_url, first)
        summary = bridge.finish()
    assert status == 200 and not summary.failed and summary.validated == 1
    assert [r.verdict for r in bridge.records] == ["shed", "ok"]


def test_requests_beyond_the_in_flight_bound_get_503_at_once() -> None:
    with _bridge(max_in_flight=2, body_timeout_s=30.0) as (bridge, port, token_path, first):
        holders = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
        for holder in holders:  # two requests in flight, their bodies still coming
            holder.sendall(_head(f"{token_path}/v1/messages", 1000) + b"{")
        time.sleep(0.3)
        started = time.monotonic()
        status, answer = _exchange(port, _head(f"{token_path}/v1/messages", len(first)), first, timeout=10)
        assert status == 503 and b"Retry-After: 1" in answer, answer[:300]
        assert time.monotonic() - started < 2
        for holder in holders:
            holder.close()
        time.sleep(0.3)
        status, _ = _valid(bridge.base_url, first)  # the same request, once the others are gone
        summary = bridge.finish()
    assert status == 200 and not summary.failed and summary.validated == 1


def test_a_body_over_the_shared_byte_budget_is_refused_unread() -> None:
    with _bridge(max_buffered_bytes=1 * MIB) as (bridge, port, token_path, first):
        started = time.monotonic()
        # 2 MiB declared, not one byte sent: answered from the headers alone
        status, _ = _exchange(port, _head(f"{token_path}/v1/messages", 2 * MIB), timeout=10)
        assert status == 503 and time.monotonic() - started < 2
        status, _ = _valid(bridge.base_url, first)  # ~90 KB: fits the budget
        summary = bridge.finish()
    assert status == 200 and not summary.failed and summary.shed == 1


def test_connections_beyond_the_bound_are_closed_at_once() -> None:
    with _bridge(max_connections=3, header_timeout_s=30.0) as (bridge, port, _, first):
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        time.sleep(0.2)
        with socket.create_connection(("127.0.0.1", port)) as extra:
            assert _closed_within(extra, 5.0) < 1.0
        for sock in idle:
            sock.close()
        time.sleep(0.2)
        status, _ = _valid(bridge.base_url, first)
        summary = bridge.finish()
    assert status == 200 and not summary.failed and summary.shed == 1


def test_the_default_limits_are_finite() -> None:
    limits = Limits()
    assert limits.max_in_flight == 8 and limits.max_buffered_bytes == 64 * MIB
    assert 0 < limits.header_timeout_s <= 30 and 0 < limits.body_timeout_s <= 120
    assert 0 < limits.max_connections <= 256
    assert os.cpu_count()  # (the flood above uses threads, not processes)
