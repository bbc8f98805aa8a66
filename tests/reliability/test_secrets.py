"""Secrets: an API key in forkpoint's environment and a boundary prompt never land in state, outputs or logs.

Real ``forkpoint replay`` runs (subprocesses) with canary values in ANTHROPIC_API_KEY / OPENAI_API_KEY and other
credential-looking variables, and a boundary prompt holding a canary: replay-only runs whose replayed commands
dump their environment, and continuations of recorded fixtures through ScriptedModel (anthropic /
openai-responses upstream) and the bridge's stub. Afterwards every file under the state root, the output root
and the workspace, and the CLI's stdout/stderr, are searched: no canary anywhere.

An upstream that echoes the key it received in an error (``invalid x-api-key: sk-...``) must not get it into the
agent's hands: the bridge redacts it from what it relays (without that, the key reached the agent's session, the
journal, result.json and the CLI output).

The one place the boundary prompt is meant to be: the continued native session (``native/continued/``), the
agent's own transcript of the conversation it continued, where the prompt is the user message it answered.
There it must appear, and only inside that user message.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from forkpoint import runtimes
from forkpoint.bridge.upstream import REDACTED, Redactor
from forkpoint.testing import ScriptedModel
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use
from forkpoint.testing.codex_rollouts import CodexRolloutBuilder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
KEY_VARS = {"claude-code": "ANTHROPIC_API_KEY", "codex": "OPENAI_API_KEY"}
UPSTREAMS = {"claude-code": "anthropic", "codex": "openai-responses"}
OTHER_SECRETS = ("GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "MY_SERVICE_PASSWORD", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux")


@dataclass
class Canaries:
    key: str
    prompt_token: str
    others: dict[str, str]

    @property
    def prompt(self) -> str:
        return f"Before going on, mind {self.prompt_token} and check again."

    def env(self, agent: str) -> dict[str, str]:
        return {**os.environ, **self.others, KEY_VARS[agent]: self.key}

    def needles(self) -> dict[str, bytes]:
        found = {"api key": self.key.encode(), "prompt": self.prompt_token.encode()}
        found.update({name: value.encode() for name, value in self.others.items()})
        return found


@pytest.fixture
def canaries() -> Canaries:
    others = {name: f"{name.lower()}-canary-{uuid.uuid4().hex}" for name in OTHER_SECRETS}
    return Canaries(f"sk-canary-{uuid.uuid4().hex}", f"PROMPTCANARY{uuid.uuid4().hex}", others)


class EnvironWatcher:
    """Polls /proc while a run is going: every process whose environment names ``marker`` (the run's HOME, PWD or
    workspace: the agent, its tools, replayed commands) must carry none of the canaries in its environment."""

    def __init__(self, marker: str, needles: dict[str, bytes]) -> None:
        self.marker = marker.encode()
        self.needles = needles
        self.seen: set[int] = set()
        self.leaks: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for entry in os.listdir("/proc"):
                if not entry.isdigit() or int(entry) == os.getpid():
                    continue
                try:
                    with open(f"/proc/{entry}/environ", "rb") as handle:
                        environ = handle.read()
                except OSError:
                    continue
                if self.marker not in environ:
                    continue
                self.seen.add(int(entry))
                self.leaks.update(f"{name} in the environment of pid {entry}" for name, needle in
                                  self.needles.items() if needle in environ)
            time.sleep(0.01)

    def __enter__(self) -> EnvironWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _replay(agent: str, trajectory: Path, after: int, workspace: Path, tmp: Path, env: dict[str, str],
            *extra: str) -> subprocess.CompletedProcess[bytes]:
    argv = [sys.executable, "-m", "forkpoint.cli", "replay", "--agent", agent, "--trajectory", str(trajectory),
            "--after-step", str(after), "--workspace", str(workspace), "--state-dir", str(tmp / "state"),
            "--output-dir", str(tmp / "out"), "--run-id", "secrets", "--json", *extra]
    return subprocess.run(argv, env=env, capture_output=True, timeout=300, check=False)


def _continued_user_texts(path: Path) -> list[str]:
    """Every string inside user messages of a continued native session (Claude session or Codex rollout)."""
    texts: list[str] = []

    def strings(value: Any) -> Iterator[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for item in value.values():
                yield from strings(item)
        elif isinstance(value, list):
            for item in value:
                yield from strings(item)

    for line in path.read_text().splitlines():
        record = json.loads(line)
        payload = record.get("payload") if isinstance(record.get("payload"), dict) else record.get("message")
        if not isinstance(payload, dict):
            continue
        nested = payload.get("item")
        item: dict[str, Any] = nested if isinstance(nested, dict) else {}
        if payload.get("role") == "user":  # Claude user line, Codex response_item message
            texts.extend(strings(payload.get("content")))
        elif payload.get("type") == "user_message":  # Codex event_msg
            texts.extend(strings(payload.get("message")))
        elif item.get("type") == "UserMessage":  # Codex 0.171 event_msg item_started / item_completed
            texts.extend(strings(item.get("content")))
    return texts


def _agent_record(tmp: Path, path: Path) -> bool:
    """The agent's own records: its HOME under the state dir, its stdout/stderr log under the output dir."""
    parts = path.relative_to(tmp).parts
    return (len(parts) > 2 and parts[0] == "state" and parts[2] in ("home", "agent-home")) or (
        len(parts) > 2 and parts[0] == "out" and parts[2] == "logs")


def assert_nothing_leaked(tmp: Path, done: subprocess.CompletedProcess[bytes], canaries: Canaries, *,
                          prompt_in_agent_records: bool = False) -> list[Path]:
    """Search every file under ``tmp`` and the CLI's output; returns the continued sessions holding the prompt.

    With ``prompt_in_agent_records`` the agent's own records may hold the prompt (an upstream error quoted it to
    the agent, which logged what it was told); forkpoint's own files and output never may.
    """
    needles = canaries.needles()
    leaks: list[str] = []
    allowed: list[Path] = []
    for stream, data in (("stdout", done.stdout), ("stderr", done.stderr)):
        leaks += [f"{name} in {stream}" for name, needle in needles.items() if needle in data]
    files = [path for path in tmp.rglob("*") if path.is_file() and not path.is_symlink()]
    assert any(path.name == "journal.jsonl" for path in files), "no journal was written: nothing was searched"
    for path in files:
        data = path.read_bytes()
        for name, needle in needles.items():
            if needle not in data:
                continue
            if name == "prompt" and prompt_in_agent_records and _agent_record(tmp, path):
                continue
            continued = path.parent.name == "continued" and path.parent.parent.name == "native"
            if name == "prompt" and continued:
                inside = [text for text in _continued_user_texts(path) if canaries.prompt_token in text]
                if inside and data.count(needle) <= sum(text.count(canaries.prompt_token) for text in inside):
                    allowed.append(path)
                    continue
            leaks.append(f"{name} in {path.relative_to(tmp)}")
    assert not leaks, leaks
    return allowed


def _require(agent: str, version: str) -> None:
    if runtimes.find(agent, version) is None:
        pytest.skip(f"{agent} {version} is not installed (forkpoint agents install {agent}@{version})")


# ------------------------------------------------------------------------------- replay-only, hostile commands

ENV_DUMP = "env; env > env-dump.txt; cat /proc/$$/environ | tr '\\0' '\\n'"


def test_claude_replay_only_keeps_secrets_out(tmp_path: Path, canaries: Canaries) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    builder = ClaudeSessionBuilder(cwd=str(workspace))
    builder.user_prompt("Show me the environment.")
    builder.assistant([text("Looking."), tool_use("toolu_env", "Bash", {"command": ENV_DUMP})])
    builder.results({"toolu_env": "PATH=/usr/bin"})
    builder.assistant([text("Done.")])
    session = builder.write(tmp_path / "session.jsonl")
    with EnvironWatcher(str(tmp_path), canaries.needles()) as watcher:
        done = _replay("claude-code", session, 1, workspace, tmp_path, canaries.env("claude-code"), "--replay-only",
                       "--boundary-user-prompt", canaries.prompt)
    assert not watcher.leaks, sorted(watcher.leaks)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    assert "\nPATH=" in "\n" + (workspace / "env-dump.txt").read_text()  # the command did dump its environment
    assert assert_nothing_leaked(tmp_path, done, canaries) == []


def test_codex_replay_only_keeps_secrets_out(tmp_path: Path, canaries: Canaries) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    builder = CodexRolloutBuilder(version="0.171.0", cwd=str(workspace))
    builder.user("Show me the environment.")
    for name, arguments in (("exec_command", {"cmd": ENV_DUMP}), ("exec_command", {"cmd": "env", "tty": True})):
        builder.output(builder.call(name, arguments), "PATH=/usr/bin")
    builder.assistant("Done.")
    rollout = builder.write(tmp_path / "rollout.jsonl")
    with EnvironWatcher(str(tmp_path), canaries.needles()) as watcher:
        done = _replay("codex", rollout, 2, workspace, tmp_path, canaries.env("codex"), "--replay-only",
                       "--boundary-user-prompt", canaries.prompt)
    assert not watcher.leaks, sorted(watcher.leaks)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    assert "\nPATH=" in "\n" + (workspace / "env-dump.txt").read_text()
    assert assert_nothing_leaked(tmp_path, done, canaries) == []


# ------------------------------------------------------------------------------- continuations (real agents)

CONTINUATIONS = [
    pytest.param("claude-code", "2.1.332", "single_bash", "scripted", id="claude-2.1.332-scripted"),
    pytest.param("claude-code", "2.1.220", "file_tools", "stub", id="claude-2.1.220-stub"),
    pytest.param("codex", "0.171.0", "exec_basic", "scripted", id="codex-0.171.0-scripted"),
    pytest.param("codex", "0.149.0", "apply_patch", "stub", id="codex-0.149.0-stub"),
]


@pytest.mark.e2e
@pytest.mark.parametrize(("agent", "version", "scenario", "upstream"), CONTINUATIONS)
def test_continuation_keeps_secrets_out(
    tmp_path: Path, canaries: Canaries, agent: str, version: str, scenario: str, upstream: str
) -> None:
    _require(agent, version)
    fixture = FIXTURES / agent.replace("-", "_") / version / scenario
    recorded_cwd = json.loads((fixture / "meta.json").read_text())["cwd"]
    workspace = tmp_path / "ws"
    shutil.copytree(fixture / "workspace-initial", workspace)
    trajectory = fixture / ("session.jsonl" if agent == "claude-code" else "rollout.jsonl")
    extra = ["--path-map", f"{recorded_cwd}={workspace}", "--boundary-user-prompt", canaries.prompt]
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        if upstream == "stub":
            extra += ["--upstream", "stub"]
        else:
            extra += ["--upstream", UPSTREAMS[agent], "--upstream-url", url if agent == "claude-code" else f"{url}/v1"]
        with EnvironWatcher(str(tmp_path), canaries.needles()) as watcher:
            done = _replay(agent, trajectory, 1, workspace, tmp_path, canaries.env(agent), *extra)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    result = json.loads(done.stdout)
    assert result["phase"] == "continued" and result["metadata"]["boundary_user_prompt"]["injected"] is True
    if upstream == "scripted":
        # the real key did reach the upstream (so it was in play), and the prompt reached the model
        assert model.requests, "the scripted upstream saw no request"
        assert canaries.prompt_token in json.dumps([entry.get("body") for entry in model.requests])
    allowed = assert_nothing_leaked(tmp_path, done, canaries)
    assert [path.parent.name for path in allowed] == ["continued"], allowed
    # the agent (and what it ran) never had the key or the other secrets in its environment
    assert watcher.seen, "no process of the run was observed"
    assert not watcher.leaks, sorted(watcher.leaks)


# ------------------------------------------------------------------------------- an upstream that echoes the key


class EchoingUpstream:
    """A model stand-in that refuses every request with an error quoting the credential it received (as some APIs
    and proxies do). The bridge must not hand the real key to the agent, which would print and store it."""

    def __init__(self, quote_request: bool = False) -> None:
        self.quote_request = quote_request  # also quote the request text around the boundary prompt
        self.seen: list[str] = []
        self._ready = threading.Event()
        self._stop = threading.Event()
        self.port = 0
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        credential = request.headers.get("x-api-key") or request.headers.get("authorization") or ""
        self.seen.append(credential)
        message = f"invalid request for credential {credential}"
        if self.quote_request:
            body = await request.text()
            at = max(body.find("PROMPTCANARY"), 0)
            message = f"invalid content near: {body[max(at - 40, 0) : at + 80]}"
        if request.path.endswith("/messages"):
            return web.json_response({"type": "error", "error": {"type": "invalid_request_error",
                                                                  "message": message}}, status=400)
        return web.json_response({"error": {"type": "invalid_request_error", "message": message, "code": None}},
                                 status=400)

    async def _main(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(runner.addresses[0][1])
        self._ready.set()
        while not self._stop.is_set():
            await asyncio.sleep(0.05)
        await runner.cleanup()

    def __enter__(self) -> str:
        self._thread.start()
        assert self._ready.wait(10)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.mark.e2e
@pytest.mark.parametrize("echo", ["key", "request"])
@pytest.mark.parametrize(("agent", "version", "scenario"), [("claude-code", "2.1.332", "single_bash"),
                                                             ("codex", "0.171.0", "exec_basic")])
def test_an_upstream_echoing_secrets_does_not_leak_them(
    tmp_path: Path, canaries: Canaries, agent: str, version: str, scenario: str, echo: str
) -> None:
    _require(agent, version)
    fixture = FIXTURES / agent.replace("-", "_") / version / scenario
    recorded_cwd = json.loads((fixture / "meta.json").read_text())["cwd"]
    workspace = tmp_path / "ws"
    shutil.copytree(fixture / "workspace-initial", workspace)
    trajectory = fixture / ("session.jsonl" if agent == "claude-code" else "rollout.jsonl")
    upstream = EchoingUpstream(quote_request=echo == "request")
    with upstream as url:
        done = _replay(agent, trajectory, 1, workspace, tmp_path, canaries.env(agent), "--path-map",
                       f"{recorded_cwd}={workspace}", "--upstream", UPSTREAMS[agent], "--upstream-url",
                       url if agent == "claude-code" else f"{url}/v1", "--boundary-user-prompt", canaries.prompt)
    failure = json.loads(done.stdout)["failure"]
    assert done.returncode != 0 and failure is not None
    assert any(canaries.key in credential for credential in upstream.seen), "the upstream never got the key"
    assert assert_nothing_leaked(tmp_path, done, canaries, prompt_in_agent_records=echo == "request") == []
    if echo == "key":
        agent_files = b"".join(path.read_bytes() for path in (tmp_path / "state").rglob("*") if path.is_file())
        assert REDACTED in agent_files + done.stdout  # the echo reached the agent, redacted
    else:
        assert "<boundary prompt>" in failure["message"]  # the agent's error was quoted, the prompt scrubbed


@given(st.binary(max_size=300), st.lists(st.integers(min_value=0, max_value=400), max_size=12),
       st.sampled_from(["sk-ant-canary-0123456789", "aaab", "k", "]x]"]))
def test_redactor_removes_the_key_across_any_chunking(noise: bytes, cuts: list[int], secret: str) -> None:
    key = secret.encode()
    stream = key + noise[: len(noise) // 2] + key + key[:-1] + key + noise[len(noise) // 2 :] + key[:3]
    bounds = sorted({min(cut, len(stream)) for cut in cuts} | {0, len(stream)})
    redactor = Redactor(secret)
    out = b"".join(redactor.feed(stream[a:b]) for a, b in itertools.pairwise(bounds)) + redactor.flush()
    assert out == stream.replace(key, REDACTED)
    assert key not in out.replace(REDACTED, b"|")


# ------------------------------------------------------------------------------- a Chat upstream echoing the key


class EchoingChatUpstream(EchoingUpstream):
    """A Chat Completions stand-in that answers 200 with a streamed completion quoting the Authorization header it
    received (as a misconfigured proxy or a hostile endpoint might): the key split across deltas AND across the
    TCP writes (``answer``), a mid-stream ``{"error": ...}`` chunk quoting it (``error_chunk``), or an HTTP 400
    whose message quotes it (``status``). The translating bridge must hand none of it to the agent."""

    def __init__(self, echo: str) -> None:
        super().__init__()
        self.echo = echo

    @staticmethod
    def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {"id": "chatcmpl-echo", "object": "chat.completion.chunk", "created": 1, "model": "echo",
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        credential = request.headers.get("authorization") or ""
        self.seen.append(credential)
        if self.echo == "status":
            return web.json_response({"error": {"message": f"bad credential {credential}", "type": "invalid"}},
                                     status=400)
        key = credential.removeprefix("Bearer ")
        half = len(key) // 2
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        stream = self._chunk({"role": "assistant", "content": "The upstream saw Authorization: Bearer "})
        stream += self._chunk({"content": key[:half]}) + self._chunk({"content": key[half:] + " and " + key})
        if self.echo == "error_chunk":
            stream += b"data: " + json.dumps({"error": {"message": f"quota for {key} exceeded"}}).encode() + b"\n\n"
        else:
            stream += self._chunk({"content": "."}, "stop") + b"data: [DONE]\n\n"
        at = stream.find(key[half:].encode()) + 3  # a TCP write ends inside the key's second half
        for piece in (stream[:at], stream[at:]):
            await response.write(piece)
        await response.write_eof()
        return response


@pytest.mark.e2e
@pytest.mark.parametrize(("echo", "sandbox"), [("answer", "local"), ("status", "local"), ("answer", "bwrap")])
@pytest.mark.parametrize(("agent", "version", "scenario"), [("claude-code", "2.1.332", "single_bash"),
                                                             ("codex", "0.171.0", "exec_basic")])
def test_a_chat_upstream_echoing_the_key_does_not_leak_it_through_translation(
    tmp_path: Path, canaries: Canaries, agent: str, version: str, scenario: str, echo: str, sandbox: str
) -> None:
    """(error_chunk: tests/bridge/translate; the agents retry it for minutes.)"""
    if sandbox == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bwrap is not installed")
    _require(agent, version)
    fixture = FIXTURES / agent.replace("-", "_") / version / scenario
    recorded_cwd = json.loads((fixture / "meta.json").read_text())["cwd"]
    workspace = tmp_path / "ws"
    shutil.copytree(fixture / "workspace-initial", workspace)
    trajectory = fixture / ("session.jsonl" if agent == "claude-code" else "rollout.jsonl")
    env = {**canaries.env(agent), "OPENAI_API_KEY": canaries.key}
    upstream = EchoingChatUpstream(echo)
    with upstream as url:
        where = ["--path-map", f"{recorded_cwd}={workspace}"] if sandbox == "local" else []  # bwrap: mounted there
        done = _replay(agent, trajectory, 1, workspace, tmp_path, env, *where, "--upstream", "openai-chat",
                       "--upstream-url", f"{url}/v1", "--sandbox", sandbox)
    assert any(canaries.key in credential for credential in upstream.seen), "the upstream never got the key"
    assert assert_nothing_leaked(tmp_path, done, canaries) == []
    agent_files = b"".join(path.read_bytes() for path in tmp_path.rglob("*") if path.is_file())
    assert REDACTED in agent_files + done.stdout  # the echo reached the agent (or the record), redacted
    if echo == "answer":
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
        assert json.loads(done.stdout)["phase"] == "continued"
