"""The bridge on the OpenAI Responses side: CodexGate + OpenAIResponsesUpstream / ResponsesStubUpstream.

The bodies are the REAL requests captured from Codex 0.149.0 / 0.171.0 (tests/fixtures/codex/requests/). The
upstreams are real loopback servers (ScriptedModel or a recording server defined here). The e2e tests resume
the real codex binary through the bridge (skipped when its runtime is not installed).
"""

from __future__ import annotations

import asyncio
import copy
import http.client
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp import web

from forkpoint import runtimes
from forkpoint.adapters.codex.envelope import CodexExpectedPrefix, expected_prefix
from forkpoint.adapters.codex.gate import CodexGate, clean_first_request
from forkpoint.bridge.protocols.openai_responses import OpenAIResponsesUpstream, ResponsesStubUpstream
from forkpoint.bridge.server import Bridge
from forkpoint.core.hashing import make_nonce
from forkpoint.testing import ScriptedModel, text, tool_use

REQUESTS = Path(__file__).parents[2] / "fixtures" / "codex" / "requests"
VERSIONS = ("0.149.0", "0.171.0")
UPSTREAM_KEY = "sk-upstream-test-key-0002"
AGENT_HEADERS = {"content-type": "application/json", "accept": "text/event-stream", "authorization": "Bearer dummy",
                 "originator": "codex_exec", "session-id": "sess-1", "thread-id": "sess-1",
                 "x-codex-turn-metadata": '{"turn_id":"t1"}', "openai-organization": "org-agent",
                 "user-agent": "codex_exec/test", "connection": "keep-alive, x-hop", "x-hop": "1"}
#: the fixtures store tools as a hash; ScriptedModel treats a request with tools as a main (scripted) request
TOOLS = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]


@dataclass
class Case:
    version: str
    expected: CodexExpectedPrefix
    first: dict[str, Any]
    later: dict[str, Any]
    original: dict[str, Any]
    meta: dict[str, Any]
    rollout: list[str]


def load_case(version: str = "0.171.0", name: str = "parallel_after_2") -> Case:
    case = REQUESTS / version / name
    meta = json.loads((case / "meta.json").read_text("utf-8"))
    rollout = (case / "rollout.jsonl").read_text("utf-8").splitlines()
    items = [json.loads(line)["payload"] for line in rollout if json.loads(line)["type"] == "response_item"]
    bodies = [json.loads((case / f"{n}_request.json").read_text("utf-8")) for n in ("first", "later", "original")]
    first, later, original = bodies
    return Case(version, expected_prefix(items, meta["nonce"], version), first, later, original, meta, rollout)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def request(url: str, body: Any = None, headers: dict[str, str] | None = None, method: str = "POST") -> Reply:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=15)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        connection.request(method, parts.path + (f"?{parts.query}" if parts.query else ""), body=payload,
                           headers=AGENT_HEADERS if headers is None else headers)
        response = connection.getresponse()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        connection.close()


def sse_events(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in body.decode().splitlines() if line.startswith("data: ")]


@dataclass
class RecordingUpstream:
    """Records every request (headers included) and answers with a chunked SSE stream or a set status."""

    chunks: list[bytes] = field(default_factory=lambda: [
        b'event: response.created\ndata: {"type":"response.created"}\n\n',
        b'event: response.completed\ndata: {"type":"response.completed"}\n\n'])
    status: int = 200
    extra_headers: dict[str, str] = field(default_factory=dict)
    hold: threading.Event | None = None
    received: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.received.append({"method": request.method, "path": request.path_qs,
                              "headers": {k.lower(): v for k, v in request.headers.items()},
                              "body": await request.read()})
        response = web.StreamResponse(status=self.status, headers={"Content-Type": "text/event-stream",
                                                                   **self.extra_headers})
        await response.prepare(request)
        for index, chunk in enumerate(self.chunks):
            await response.write(chunk)
            if index == 0 and self.hold is not None:
                hold = self.hold
                await asyncio.get_running_loop().run_in_executor(None, hold.wait, 10)
        await response.write_eof()
        return response

    @contextmanager
    def serve(self) -> Iterator[str]:
        loop = asyncio.new_event_loop()
        started = threading.Event()
        box: dict[str, Any] = {}

        async def start() -> None:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self.handle)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            box["runner"] = runner
            box["url"] = f"http://127.0.0.1:{runner.addresses[0][1]}"

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(start())
            started.set()
            loop.run_forever()
            loop.run_until_complete(box["runner"].cleanup())
            loop.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert started.wait(10)
        try:
            yield str(box["url"])
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)


# -- forwarding ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_scripted_model_receives_the_cleaned_body_and_sse_streams_through(version: str) -> None:
    case = load_case(version)
    first = {**case.first, "tools": TOOLS}
    cleaned = clean_first_request(case.expected, first).body
    assert cleaned is not None
    model = ScriptedModel([[text("A long enough answer " * 20)]], step_mode="counter", model="gpt-5.5")
    direct_model = ScriptedModel([[text("A long enough answer " * 20)]], step_mode="counter", model="gpt-5.5")
    with direct_model.serve() as direct_url:
        direct = request(f"{direct_url}/v1/responses", body=cleaned)
    with model.serve() as url, Bridge(CodexGate(case.expected),
                                      OpenAIResponsesUpstream(f"{url}/v1", UPSTREAM_KEY)) as bridge:
        through = request(f"{bridge.base_url}/v1/responses", body=first)
        summary = bridge.finish()
    assert through.status == direct.status == 200
    assert through.headers["content-type"].startswith("text/event-stream")
    assert through.body == direct.body  # byte for byte, unchanged
    events = sse_events(through.body)
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    assert sum(e["type"] == "response.output_text.delta" for e in events) > 3
    received = model.requests[0]
    assert received["path"] == "/v1/responses" and received["kind"] == "main"
    assert received["body"] == cleaned
    assert received["body"]["input"] == case.original["input"]  # what the model saw right after batch N
    headers = {k.lower(): v for k, v in received["headers"].items()}
    assert headers["session-id"] == "sess-1" and headers["originator"] == "codex_exec"
    assert headers["x-codex-turn-metadata"] == '{"turn_id":"t1"}'
    assert summary.validated == 1 and summary.forwarded == 1 and summary.error() is None


def test_headers_sent_upstream() -> None:
    case = load_case()
    upstream = RecordingUpstream()
    with upstream.serve() as url, Bridge(CodexGate(case.expected),
                                         OpenAIResponsesUpstream(f"{url}/v1/", UPSTREAM_KEY)) as bridge:
        reply = request(f"{bridge.base_url}/v1/responses", body=case.first)
        bridge.finish()
    assert reply.status == 200 and reply.body == b"".join(upstream.chunks)
    sent = upstream.received[0]
    assert sent["path"] == "/v1/responses"
    headers = sent["headers"]
    assert headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert headers["content-type"] == "application/json" and headers["accept-encoding"] == "identity"
    for kept in ("session-id", "thread-id", "originator", "x-codex-turn-metadata", "user-agent", "accept"):
        assert headers[kept] == AGENT_HEADERS[kept]
    for dropped in ("openai-organization", "x-hop"):
        assert dropped not in headers
    assert headers["host"] != urlsplit(bridge.base_url).netloc
    assert json.loads(sent["body"]) == case.original


def test_response_is_streamed_unbuffered() -> None:
    case = load_case("0.149.0")
    hold = threading.Event()
    upstream = RecordingUpstream(hold=hold)
    with upstream.serve() as url, Bridge(CodexGate(case.expected),
                                         OpenAIResponsesUpstream(f"{url}/v1", UPSTREAM_KEY)) as bridge:
        parts = urlsplit(bridge.base_url)
        connection = http.client.HTTPConnection("127.0.0.1", parts.port, timeout=15)
        connection.request("POST", f"{parts.path}/v1/responses", body=json.dumps(case.first).encode(),
                           headers=AGENT_HEADERS)
        response = connection.getresponse()
        assert response.status == 200
        first = response.read1(65536)  # arrives while the upstream still holds the rest
        assert first == upstream.chunks[0] and not hold.is_set()
        hold.set()
        rest = response.read()
        connection.close()
    assert first + rest == b"".join(upstream.chunks)


@pytest.mark.parametrize("version", VERSIONS)
def test_mutated_body_gets_400_and_nothing_reaches_the_model(version: str, tmp_path: Path) -> None:
    case = load_case(version)
    tampered = copy.deepcopy(case.first)
    index = max(i for i, item in enumerate(tampered["input"]) if item["type"] == "function_call_output")
    tampered["input"][index]["output"] = "a different observation"
    model = ScriptedModel([], model="gpt-5.5")
    log = tmp_path / "bridge.jsonl"
    with model.serve() as url, Bridge(CodexGate(case.expected), OpenAIResponsesUpstream(f"{url}/v1", UPSTREAM_KEY),
                                      log_path=log) as bridge:
        reply = request(f"{bridge.base_url}/v1/responses", body=tampered)
        assert reply.status == 400
        message = reply.json()["error"]["message"]
        assert message.startswith(f"forkpoint bridge refused: input item {index} (rollout item")
        assert message.endswith(f"the output of {tampered['input'][index]['call_id']} differs")
        # FAILED: the pristine request is refused too
        again = request(f"{bridge.base_url}/v1/responses", body=case.first)
        assert again.status == 400 and "FAILED earlier" in again.json()["error"]["message"]
        summary = bridge.finish()
    assert model.requests == []
    assert summary.failed and summary.validated == 0 and summary.forwarded == 0
    logged = log.read_text("utf-8")
    for secret in (case.expected.nonce, UPSTREAM_KEY, "a different observation", "Run the steps."):
        assert secret not in logged


def test_later_requests_are_validated_and_forwarded_on_both_routes() -> None:
    case = load_case("0.149.0", "parallel_after_1")
    upstream = RecordingUpstream()
    with upstream.serve() as url, Bridge(CodexGate(case.expected, "Carry on."),
                                         OpenAIResponsesUpstream(f"{url}/v1", UPSTREAM_KEY)) as bridge:
        assert request(f"{bridge.base_url}/v1/responses", body=case.first).status == 200
        assert request(f"{bridge.base_url}/responses", body=case.later).status == 200
        tampered = copy.deepcopy(case.later)
        tampered["input"][4]["arguments"] = '{"cmd": "rm -rf /"}'
        assert request(f"{bridge.base_url}/v1/responses", body=tampered).status == 400
        summary = bridge.finish()
    assert len(upstream.received) == 2 and {r["path"] for r in upstream.received} == {"/v1/responses"}
    first, later = (json.loads(r["body"]) for r in upstream.received)
    prompt = {**case.first["input"][-1], "content": [{"type": "input_text", "text": "Carry on."}]}
    assert first["input"] == [*case.original["input"], prompt]
    assert later["input"][: len(first["input"])] == first["input"]
    assert [i["type"] for i in later["input"][len(first["input"]):]] == ["message", "function_call",
                                                                         "function_call_output"]
    assert summary.validated == 2 and summary.forwarded == 2 and summary.failed


def test_upstream_status_and_headers_pass_through() -> None:
    case = load_case()
    upstream = RecordingUpstream(
        chunks=[b'{"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":null}}'],
        status=429, extra_headers={"retry-after": "7", "x-ratelimit-remaining-requests": "0",
                                   "openai-processing-ms": "12", "x-request-id": "req_1", "x-secret-upstream": "no"})
    with upstream.serve() as url, Bridge(CodexGate(case.expected),
                                         OpenAIResponsesUpstream(f"{url}/v1", UPSTREAM_KEY)) as bridge:
        reply = request(f"{bridge.base_url}/v1/responses", body=case.first)
        summary = bridge.finish()
    assert reply.status == 429 and reply.json()["error"]["type"] == "rate_limit_error"
    assert reply.headers["retry-after"] == "7" and reply.headers["x-ratelimit-remaining-requests"] == "0"
    assert reply.headers["openai-processing-ms"] == "12" and reply.headers["x-request-id"] == "req_1"
    assert "x-secret-upstream" not in reply.headers
    assert summary.forwarded == 1 and not summary.failed


def test_upstream_connection_error_is_a_502_in_the_openai_shape() -> None:
    case = load_case()
    upstream = RecordingUpstream()
    with upstream.serve() as dead_url:
        pass  # the server is gone: its port refuses connections now
    with Bridge(CodexGate(case.expected), OpenAIResponsesUpstream(f"{dead_url}/v1", UPSTREAM_KEY)) as bridge:
        reply = request(f"{bridge.base_url}/v1/responses", body=case.first)
        summary = bridge.finish()
    assert reply.status == 502
    body = reply.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "server_error" and "upstream connection failed" in body["error"]["message"]
    assert UPSTREAM_KEY not in reply.body.decode()
    assert summary.validated == 1 and summary.forwarded == 0 and not summary.failed


def test_upstream_url_and_validation() -> None:
    assert OpenAIResponsesUpstream("https://api.openai.com/v1", "k").url == "https://api.openai.com/v1/responses"
    assert OpenAIResponsesUpstream("http://127.0.0.1:9/v1/", "k").url == "http://127.0.0.1:9/v1/responses"
    assert OpenAIResponsesUpstream("http://h/v1/responses", "k").url == "http://h/v1/responses"
    assert UPSTREAM_KEY not in repr(OpenAIResponsesUpstream("http://h/v1", UPSTREAM_KEY))
    with pytest.raises(ValueError):
        OpenAIResponsesUpstream("ftp://x", "k")
    with pytest.raises(ValueError):
        OpenAIResponsesUpstream("http://x", "")


# -- the stub --------------------------------------------------------------------------------------------------


def test_responses_stub_answers_itself() -> None:
    case = load_case("0.149.0")
    with Bridge(CodexGate(case.expected), ResponsesStubUpstream("stub says hi")) as bridge:
        streamed = request(f"{bridge.base_url}/v1/responses", body=case.first)
        plain = request(f"{bridge.base_url}/v1/responses", body={**case.later, "stream": False})
        summary = bridge.finish()
    assert streamed.status == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    events = sse_events(streamed.body)
    # the one Responses SSE encoding (bridge.protocols.openai_responses), shared with ScriptedModel
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "response.output_item.added",
                                           "response.content_part.added", "response.output_text.delta",
                                           "response.output_text.done", "response.content_part.done",
                                           "response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for e in events] == list(range(9))
    assert events[4]["delta"] == "stub says hi"
    done = events[-1]["response"]
    assert done["status"] == "completed" and done["model"] == case.first["model"]
    assert done["output"][0]["content"][0]["text"] == "stub says hi" and done["usage"]["total_tokens"] == 1
    response = plain.json()
    assert plain.status == 200 and response["status"] == "completed"
    assert response["output"][0]["role"] == "assistant"
    assert summary.validated == 2 and summary.forwarded == 0 and summary.error() is None


# -- the real codex binary through the bridge ----------------------------------------------------------------------


def _runtime(version: str) -> runtimes.Runtime:
    runtime = runtimes.find("codex", version)
    if runtime is None:
        pytest.skip(f"codex {version} is not installed")
    return runtime


def _config(base_url: str, provider: str) -> str:
    # 0.171 resumes a thread only with its recorded provider id configured
    return "\n".join([
        'model = "gpt-5.5"', f'model_provider = "{provider}"', "", f"[model_providers.{provider}]",
        'name = "forkpoint bridge"', f'base_url = "{base_url}/v1"', 'wire_api = "responses"',
        'env_key = "FORKPOINT_TEST_KEY"', "request_max_retries = 0", "stream_max_retries = 0", "", "[features]",
        "plugins = false", "remote_plugin = false", "apps = false", "",
    ])


def _resume(case: Case, bridge_for: Any, tmp_path: Path, *, tamper: bool = False,
            cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str], Bridge]:
    runtime = _runtime(case.version)
    nonce = make_nonce()
    items = [json.loads(line)["payload"] for line in case.rollout if json.loads(line)["type"] == "response_item"]
    expected = expected_prefix(items, nonce, case.version)
    lines = list(case.rollout)
    if tamper:  # the agent gets a rollout whose last observation differs from the manifest's
        last = json.loads(lines[-1])
        last["payload"]["output"] = "tampered observation"
        lines[-1] = json.dumps(last)
    home = tmp_path / "home"
    target = home / ".codex" / case.meta["rollout_path"]
    target.parent.mkdir(parents=True)
    target.write_text("\n".join(lines) + "\n", "utf-8")
    workdir = cwd or Path(case.meta["recorded_cwd"])
    workdir.mkdir(parents=True, exist_ok=True)
    provider = json.loads(lines[0])["payload"]["model_provider"]
    bridge: Bridge = bridge_for(expected)
    with bridge:
        (home / ".codex" / "config.toml").write_text(_config(bridge.base_url, provider), "utf-8")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "CODEX_HOME": str(home / ".codex"),
               "FORKPOINT_TEST_KEY": "dummy", "LANG": "C.UTF-8"}
        done = subprocess.run(
            [str(runtime.entrypoint), "exec", "resume", case.meta["session_id"], "--json", "--skip-git-repo-check",
             "--dangerously-bypass-approvals-and-sandbox", nonce],
            cwd=workdir, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False)
        bridge.finish()
    return done, bridge


def _agent_messages(stdout: str) -> list[str]:
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return [e["item"]["text"] for e in events
            if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"]


@pytest.mark.e2e
@pytest.mark.parametrize("version", VERSIONS)
def test_real_codex_accepts_the_responses_stub(version: str, tmp_path: Path) -> None:
    case = load_case(version)
    done, bridge = _resume(case, lambda expected: Bridge(CodexGate(expected), ResponsesStubUpstream("Stub OK.")),
                           tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _agent_messages(done.stdout) == ["Stub OK."]
    summary = bridge.summary()
    assert summary.validated == 1 and summary.forwarded == 0 and summary.error() is None
    assert [r.path for r in bridge.records] == ["/v1/responses"]
    # + an <environment_context> update (stripped by the gate) when today is not the recording's current_date
    recorded_date = json.dumps(case.rollout).split('current_date\\":\\"', 1)[-1][:10]
    changed = [] if recorded_date == datetime.now().astimezone().date().isoformat() else ["environment_context"]
    assert bridge.records[0].facts["envelope_items"] in (["skills_instructions"],
                                                         ["skills_instructions", *changed])


@pytest.mark.e2e
@pytest.mark.parametrize("version", VERSIONS)
def test_real_codex_through_the_openai_upstream(version: str, tmp_path: Path) -> None:
    case = load_case(version, "parallel_after_1")
    model = ScriptedModel([[text("One more."), tool_use("exec_command", {"cmd": "echo four"})]], step_mode="counter",
                          model="gpt-5.5", final_text="All done.")
    with model.serve() as url:
        done, bridge = _resume(case, lambda expected: Bridge(
            CodexGate(expected), OpenAIResponsesUpstream(f"{url}/v1", UPSTREAM_KEY)), tmp_path,
            cwd=tmp_path / "elsewhere")  # another cwd: Codex adds an <environment_context> item, stripped too
    assert done.returncode == 0, done.stderr[-2000:]
    assert _agent_messages(done.stdout) == ["One more.", "All done."]
    summary = bridge.summary()
    assert summary.validated == 2 and summary.forwarded == 2 and summary.error() is None
    assert bridge.records[0].facts["envelope_items"] == ["skills_instructions", "environment_context"]
    first, later = (entry["body"] for entry in model.requests)
    assert first["input"] == case.original["input"]  # the model sees exactly what it saw after batch 1
    assert later["input"][: len(first["input"])] == first["input"]
    output = later["input"][-1]
    assert output["type"] == "function_call_output" and output["output"].endswith("Output:\nfour\n")


@pytest.mark.e2e
@pytest.mark.parametrize("version", VERSIONS)
def test_real_codex_with_a_tampered_rollout_is_refused(version: str, tmp_path: Path) -> None:
    case = load_case(version)
    model = ScriptedModel([], model="gpt-5.5")
    with model.serve() as url:
        done, bridge = _resume(case, lambda expected: Bridge(
            CodexGate(expected), OpenAIResponsesUpstream(f"{url}/v1", UPSTREAM_KEY)), tmp_path, tamper=True)
    assert model.requests == []
    summary = bridge.summary()
    assert summary.failed and summary.forwarded == 0
    assert summary.first_failure is not None and "differs from the rebuilt rollout: the output of" in (
        summary.first_failure)
    assert [r.verdict for r in bridge.records] == ["refused"]  # Codex does not retry a 400
    assert done.returncode == 1 and '"type":"turn.failed"' in done.stdout and "forkpoint bridge refused" in done.stdout
