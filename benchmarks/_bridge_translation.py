"""Section 6b of bridge_overhead.py: Claude Code's Messages, Codex's Responses and Gemini CLI's Gemini API requests
through the translating Chat Completions upstream (``--upstream openai-chat``) vs the same agent's pass-through
upstream, in one run."""

from __future__ import annotations

import asyncio
import copy
import cProfile
import io
import json
import pstats
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import _common as c
import orjson
from _bridge_client import CASE, HEADERS, Client, large_text, load_case, process, throughput
from _gemini_case import first_request as gemini_first_request
from _gemini_case import gemini_gate
from _gemini_case import later_request as gemini_later_request

from forkpoint.adapters.claude_code.gate import clean_later_request
from forkpoint.adapters.codex.envelope import expected_prefix as codex_expected_prefix
from forkpoint.adapters.codex.gate import clean_later_request as codex_clean_later_request
from forkpoint.bridge.gate import Verdict
from forkpoint.bridge.translate.pipeline import AnswerStream, prepare
from forkpoint.core.model import JsonObject

CODEX_CASE = c.FIXTURES / "codex" / "requests" / "0.171.0" / "parallel_after_2"
CODEX_HEADERS = {"content-type": "application/json", "authorization": "Bearer dummy", "accept": "text/event-stream",
                 "originator": "codex_exec", "user-agent": "codex_exec/bench", "connection": "keep-alive"}
GEMINI_CASE = c.FIXTURES / "gemini_cli" / "0.61.0" / "tools"
GEMINI_HEADERS = {"content-type": "application/json", "x-goog-api-key": "dummy", "connection": "keep-alive",
                  "user-agent": "GeminiCLI/0.61.0 (bench)"}
CHAT_HEADERS = {"content-type": "application/json", "authorization": "Bearer dummy", "connection": "keep-alive"}


@dataclass(frozen=True)
class Agent:
    """One agent protocol the bridge translates to Chat Completions (``--upstream openai-chat``)."""

    label: str
    name: str  # _bridge_server.py --agent
    protocol: str  # a registered protocol with a translation to Chat
    case: Path
    route: str
    headers: dict[str, str]
    finished: bytes  # the event that ends a complete answer, in either path's stream


TRANSLATED = (
    Agent("Claude Code (Messages → Chat)", "claude-code", "anthropic-messages", CASE, "/v1/messages?beta=true", HEADERS,
          b"event: message_stop"),
    Agent("Codex (Responses → Chat)", "codex", "openai-responses", CODEX_CASE, "/v1/responses", CODEX_HEADERS,
          b"response.completed"),
    Agent("Gemini CLI (Gemini API → Chat)", "gemini-cli", "google-generate-content", GEMINI_CASE,
          "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", GEMINI_HEADERS, b'"finishReason"'),
)
PATHS = ("pass-through", "translated")


def agent_bodies(agent: Agent) -> dict[str, tuple[JsonObject, JsonObject]]:
    """label -> (the recorded later request, the body the gate forwards), small and with a 2 MB newest tool output."""
    if agent.protocol == "google-generate-content":
        later, large = gemini_later_request(agent.case), gemini_later_request(agent.case, large_text())
    else:
        later = json.loads((agent.case / "later_request.json").read_text("utf-8"))
        large = copy.deepcopy(later)
        if agent.protocol == "anthropic-messages":
            large["messages"][-1]["content"][0]["content"] = large_text()
        else:
            output = next(item for item in reversed(large["input"]) if item["type"] == "function_call_output")
            output["output"] = large_text()
    out = {}
    for label, body in (("small", later), ("~2 MB", large)):
        verdict = gate_clean(agent, body)
        assert verdict.ok and verdict.body is not None, verdict.reason
        out[label] = (body, verdict.body)
    return out


def first_request(agent: Agent) -> bytes:
    if agent.protocol == "google-generate-content":
        return orjson.dumps(gemini_first_request(agent.case))
    return (agent.case / "first_request.json").read_bytes()


def gate_clean(agent: Agent, body: JsonObject) -> Verdict:
    if agent.protocol == "google-generate-content":
        gate = gemini_gate(agent.case)
        first = gate.first(gemini_first_request(agent.case))
        assert first.ok, first.reason
        return gate.later(body)
    meta = json.loads((agent.case / "meta.json").read_text("utf-8"))
    if agent.protocol == "anthropic-messages":
        return clean_later_request(load_case(agent.case)[0], body, None)
    lines = [json.loads(line) for line in (agent.case / "rollout.jsonl").read_text("utf-8").splitlines()]
    items = [line["payload"] for line in lines if line["type"] == "response_item"]
    return codex_clean_later_request(codex_expected_prefix(items, meta["nonce"], meta["version"]), body, None)


@contextmanager
def translation_servers(agent: Agent, script: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """(model URL, path -> bridge URL): one ScriptedModel and two bridges on it with the same gate, the agent's own
    pass-through upstream and the translating Chat upstream, each with its first request already validated."""
    helper = str(Path(__file__).parent / "_bridge_server.py")
    with ExitStack() as stack:
        model = stack.enter_context(process(
            [sys.executable, "-u", "-m", "forkpoint.testing.scripted_model", "--script", str(script),
             "--no-tools-required"], terminate=True))  # Codex's recorded bodies carry no tools (hashed away)
        bridges = {}
        for path, upstream in zip(PATHS, ("native", "openai-chat"), strict=True):
            bridges[path] = stack.enter_context(process(
                [sys.executable, "-u", helper, str(agent.case), model, "--agent", agent.name, "--upstream", upstream]))
            with Client(bridges[path]) as client:
                status, _, _, _ = client.post(agent.route, first_request(agent), agent.headers)
                if status != 200:
                    raise RuntimeError(f"the {path} bridge refused the recorded first request ({status})")
        yield model, bridges


@dataclass
class TranslationRun:
    """Per agent: (label, path) -> TTFB and latency samples; path -> throughput blocks; in-process costs."""

    first_byte: dict[tuple[str, str], list[float]]
    latency: dict[tuple[str, str], list[float]]
    rates: dict[str, list[tuple[int, float]]]
    sizes: dict[str, int]
    in_process: dict[str, tuple[float, float]]


def measure_translation(agent: Agent, script: Path, rounds: dict[str, int], count: int, seconds: float,
                        profile: bool) -> TranslationRun:
    """Pass-through and translated requests alternate on two keep-alive connections (ABBA), against bridges and a
    model that run at the same time, so that the machine's noise hits both paths alike."""
    payloads = agent_bodies(agent)
    run = TranslationRun({}, {}, {path: [] for path in PATHS}, {}, {})
    with translation_servers(agent, script) as (model, bridges), ExitStack() as stack:
        clients = {path: stack.enter_context(Client(url)) for path, url in bridges.items()}
        for label, (agent_body, forwarded) in payloads.items():
            raw = orjson.dumps(agent_body)
            run.sizes[label] = len(raw)
            for path, client in clients.items():  # warm-up + a complete answer on both paths
                status, _, _, answer = client.post(agent.route, raw, agent.headers)
                if status != 200 or agent.finished not in answer:
                    raise RuntimeError(f"{agent.label} {label} {path}: HTTP {status}, answer {answer[-300:]!r}")
                run.first_byte[(label, path)], run.latency[(label, path)] = [], []
            for index in range(rounds[label]):
                for path in (PATHS if index % 2 == 0 else PATHS[::-1]):
                    status, ttfb, total, _ = clients[path].post(agent.route, raw, agent.headers)
                    assert status == 200
                    run.first_byte[(label, path)].append(ttfb)
                    run.latency[(label, path)].append(total)
            run.in_process[label] = translation_cost(agent, model, forwarded, 5 if rounds[label] < 10 else 30,
                                                     profile and label == "small")
        small = orjson.dumps(payloads["small"][0])
        for path in (*PATHS, *PATHS[::-1]):
            run.rates[path].append(asyncio.run(throughput(bridges[path], small, count // 2, seconds / 2,
                                                          agent.route, agent.headers)))
    return run


def translation_cost(agent: Agent, model: str, forwarded: JsonObject, rounds: int,
                     profile: bool) -> tuple[float, float]:
    """In-process medians (seconds) of the two pure halves of a translated request: ``prepare`` (agent body ->
    Chat body, serialised) and the answer (ScriptedModel's recorded Chat SSE stream, event by event, -> the agent's
    SSE bytes). With ``profile``, prints cProfile's top functions of both."""
    route = agent.route if agent.protocol == "google-generate-content" else ""  # the model is in Gemini's URL
    prepared = prepare(agent.protocol, forwarded, route=route)
    with Client(model) as client:
        status, _, _, stream = client.post("/v1/chat/completions", orjson.dumps(prepared.body), CHAT_HEADERS)
    assert status == 200, status
    events = [event + b"\n\n" for event in stream.split(b"\n\n") if event]

    def request_half() -> None:
        orjson.dumps(prepare(agent.protocol, forwarded, route=route).body)

    def answer_half() -> None:
        answer = AnswerStream(prepared, answer_id="msg_bench")
        for event in events:
            answer.feed(event)
        answer.close()
        assert answer.error is None, answer.error

    costs = []
    for half in (request_half, answer_half):
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            half()
            times.append(time.perf_counter() - started)
        costs.append(c.median(times))
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(rounds):
            request_half()
            answer_half()
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
        print(f"-- cProfile of {agent.label}, small, {rounds} requests (by own time) --\n{out.getvalue()}")
    return costs[0], costs[1]


def translation_doc(runs: list[tuple[Agent, TranslationRun]], count: int, seconds: float) -> str:
    rows = []
    for agent, run in runs:
        for label in run.sizes:
            for path in PATHS:
                fb, lat = run.first_byte[(label, path)], run.latency[(label, path)]
                rows.append([agent.label, f"{label} ({run.sizes[label] / 1e6:.2f} MB)", path, len(lat),
                             c.ms(c.median(fb)), c.ms(c.p95(fb)), c.ms(c.median(lat)), c.ms(c.p95(lat)), "", ""])
            added_ttfb = c.median(run.first_byte[(label, "translated")]) - c.median(run.first_byte[(label, PATHS[0])])
            added = c.median(run.latency[(label, "translated")]) - c.median(run.latency[(label, PATHS[0])])
            goal = label == "small"
            rows.append([agent.label, label, "**added by translation**", "", c.ms(added_ttfb), "", c.ms(added), "",
                         c.verdict(added_ttfb <= 0.002) if goal else "(no goal)",
                         c.verdict(added <= 0.001) if goal else "(no goal)"])
    doc = c.table(["agent (protocol → upstream)", "body", "path", "n", "TTFB p50 ms", "TTFB p95 ms",
                   "latency p50 ms", "latency p95 ms", "≤ 2 ms TTFB", "≤ 1 ms p50"], rows)
    rate_rows = []
    for agent, run in runs:
        rate = {path: sum(n for n, _ in blocks) / sum(t for _, t in blocks) for path, blocks in run.rates.items()}
        for path in PATHS:
            rate_rows.append([agent.label, path, sum(n for n, _ in run.rates[path]), f"{rate[path]:.0f}",
                              f"{rate[path] / rate[PATHS[0]]:.2f}"])
    doc += "\n\n" + c.table(["sustained (small bodies, 8 connections)", "path", "requests", "req/s",
                             "vs pass-through"], rate_rows)
    doc += "\n\nIn-process cost of the translation alone (median; `prepare` + orjson.dumps of the Chat body | the " \
           "answer: ScriptedModel's Chat SSE stream fed event by event to `AnswerStream`):\n"
    doc += "; ".join(f"{agent.label} {label} {c.ms(req)} ms | {c.ms(ans)} ms"
                     for agent, run in runs for label, (req, ans) in run.in_process.items()) + "."
    doc += f"""

Both paths run at the same time against one ScriptedModel (`--no-tools-required`: Codex's recorded bodies carry
no `tools`, the fixtures keep only their hash), each through its own bridge process with the same gate: the
agent's own pass-through upstream (Anthropic Messages / Responses, ScriptedModel answering in that protocol) and
`--upstream openai-chat` (the validated body translated to Chat Completions, ScriptedModel's streamed Chat answer
translated back event by event). Requests alternate ABBA on one keep-alive connection per path; the answer is
the same ~1 KB text either way. The bodies are the recorded later requests (Claude Code 2.1.332
`parallel_after_2`, Codex 0.171.0 `parallel_after_2`; Gemini CLI 0.61.0: the recorded `--session-file` resume of
the `tools` fixture after batch 3 plus one more call and its response, with a short system text and name-only tool
schemas, the fixture keeping only their hash and names), the 2 MB ones with the continuation's newest tool output
made 2 MB. Throughput blocks in ABBA order, {count // 2} requests / {seconds / 2:.0f} s each."""
    return doc
