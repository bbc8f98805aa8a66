"""What bridge_overhead.py and its translation rows share: server processes, a keep-alive client, the bodies.

Imported by the benchmark scripts only (``sys.path`` holds ``benchmarks/``)."""

from __future__ import annotations

import asyncio
import http.client
import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import _common as c

from forkpoint.adapters.claude_code.envelope import ExpectedPrefix, expected_prefix
from forkpoint.core.model import JsonObject

CASE = c.FIXTURES / "claude_code" / "requests" / "2.1.332" / "parallel_after_2"
HEADERS = {"content-type": "application/json", "anthropic-version": "2023-06-01", "x-api-key": "dummy",
           "anthropic-beta": "claude-code-20250219", "user-agent": "claude-cli/bench", "connection": "keep-alive"}
LARGE_BYTES = 2 * 1024 * 1024
CONCURRENCY = 8


@contextmanager
def process(argv: list[str], *, terminate: bool = False) -> Iterator[str]:
    """Start a server process that prints its base URL on the first stdout line; on exit close its stdin (the
    bridge helper then stops cleanly) or, with ``terminate``, send it SIGTERM (ScriptedModel serves forever)."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"{argv} did not start: {url} {proc.stderr.read() if proc.stderr else ''}")
        yield url
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        if terminate:
            proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait(timeout=10)


class Client:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.prefix = parts.path.rstrip("/")
        self.connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.connection.close()

    def post(self, path: str, body: bytes, headers: dict[str, str] = HEADERS) -> tuple[int, float, float, bytes]:
        """(status, seconds to the first body byte, seconds to the end, whole body)."""
        started = time.perf_counter()
        self.connection.request("POST", self.prefix + path, body=body, headers=headers)
        response = self.connection.getresponse()
        first = response.read1(65536)
        ttfb = time.perf_counter() - started
        rest = response.read()
        return response.status, ttfb, time.perf_counter() - started, first + rest


def large_text() -> str:
    line = "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?\n"
    return (line * (LARGE_BYTES // len(line) + 1))[:LARGE_BYTES]


def load_case(case: Path) -> tuple[ExpectedPrefix, JsonObject]:
    """(the case's manifest, its recorded later request)."""
    meta = json.loads((case / "meta.json").read_text("utf-8"))
    records = [json.loads(line) for line in (case / "session.jsonl").read_text("utf-8").splitlines()]
    later = json.loads((case / "later_request.json").read_text("utf-8"))
    return expected_prefix(records, meta["nonce"], meta["version"]), later


async def throughput(base_url: str, body: bytes, count: int, seconds: float, route: str = "/v1/messages?beta=true",
                     headers: dict[str, str] = HEADERS) -> tuple[int, float]:
    import aiohttp

    url = base_url.rstrip("/") + route
    done = 0
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal done
            while done < count and time.perf_counter() < deadline:
                done += 1
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"HTTP {response.status}")

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return done, time.perf_counter() - started


# -- translation: Claude Code's Messages and Codex's Responses on a Chat Completions upstream --------------------
