"""6. Bridge overhead: streaming requests through the bridge (gate + pass-through) vs straight to ScriptedModel.

Three processes, as in a real run: ScriptedModel (``python -m forkpoint.testing.scripted_model``) as the model,
forkpoint's ``Bridge`` with the Claude gate and the ``anthropic`` pass-through upstream
(``benchmarks/_bridge_server.py``), and this client. The bodies are REAL Claude Code 2.1.332 resume requests
(tests/fixtures/claude_code/requests/2.1.332/parallel_after_2): after the first request, every request is a
"later" one (prefix + envelope + continuation), validated in full by the gate. "direct" sends the body the
gate would forward (envelope removed) straight to ScriptedModel; both answers are the same SSE stream (~30
events) and are checked byte for byte. The ~2 MB body carries a 2 MB tool output in the continuation; in the
third case the 2 MB output is batch 1's (session and requests alike), so the gate proves it on every request.

Latency: one keep-alive connection per side, direct and bridged requests alternating; time to first body byte
(TTFB) and to the end of the stream. Throughput: an aiohttp client with 8 concurrent keep-alive connections,
small bodies, bounded by request count and time, blocks in ABBA order. Targets: ≤ 1 ms added p50 latency,
≤ 2 ms added TTFB, ≥ 500 req/s sustained through the bridge.

Translation (section 6b): Claude Code's Messages and Codex's Responses requests through ``--upstream openai-chat``
(the bridge translates the validated body to Chat Completions and ScriptedModel's streamed Chat answer back) vs
the same agent's pass-through upstream, both bridges and one ScriptedModel running at once, requests alternating
ABBA; small and 2 MB bodies, TTFB, latency, req/s, and the in-process cost of the pure translators (cProfile'd in
a full run). Targets: translation adds ≤ 1 ms p50 and ≤ 2 ms TTFB for small requests.
"""

from __future__ import annotations

import asyncio
import copy
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c
from _bridge_client import CASE, Client, large_text, load_case, process, throughput
from _bridge_translation import TRANSLATED, measure_translation, translation_doc

from forkpoint.adapters.claude_code.gate import clean_later_request

ANSWER = "The bridge streams this answer through unchanged, chunk by chunk. " * 16  # ~1 KB, ~22 deltas


@contextmanager
def servers(script: Path, case: Path = CASE) -> Iterator[tuple[str, str]]:
    """(model URL, bridge base URL) with the bridge's first request already validated."""
    helper = str(Path(__file__).parent / "_bridge_server.py")
    with process([sys.executable, "-u", "-m", "forkpoint.testing.scripted_model", "--script", str(script)],
                 terminate=True) as model, process([sys.executable, "-u", helper, str(case), model]) as bridge:
        first = (case / "first_request.json").read_bytes()
        with Client(bridge) as client:
            status, _, _, _ = client.post("/v1/messages?beta=true", first)
            if status != 200:
                raise RuntimeError(f"the bridge refused the recorded first request ({status})")
        yield model, bridge

def prefix_case(directory: Path) -> Path:
    """The recorded case with its first tool output (batch 1, in every request's prefix) made ~2 MB: session and
    requests alike, so the gate proves a prefix holding it on every request."""
    records = [json.loads(line) for line in (CASE / "session.jsonl").read_text("utf-8").splitlines()]
    tool_id = next(block["tool_use_id"] for record in records if isinstance(record.get("message"), dict)
                   for block in record["message"].get("content") or []
                   if isinstance(block, dict) and block.get("type") == "tool_result")
    text = large_text()

    def enlarge(value: object) -> None:
        if isinstance(value, dict):
            if value.get("type") == "tool_result" and value.get("tool_use_id") == tool_id:
                value["content"] = text
            for item in value.values():
                enlarge(item)
        elif isinstance(value, list):
            for item in value:
                enlarge(item)

    directory.mkdir()
    enlarge(records)
    (directory / "session.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), "utf-8")
    (directory / "meta.json").write_text((CASE / "meta.json").read_text("utf-8"), "utf-8")
    for name in ("first_request.json", "later_request.json"):
        request = json.loads((CASE / name).read_text("utf-8"))
        enlarge(request)
        (directory / name).write_text(json.dumps(request), "utf-8")
    return directory

def bodies(big_prefix: Path) -> dict[str, tuple[Path, bytes, bytes]]:
    """label -> (case, body the agent sends to the bridge, body the gate forwards = what direct sends)."""
    expected, later = load_case(CASE)
    large = copy.deepcopy(later)
    large["messages"][-1]["content"][0]["content"] = large_text()  # the continuation's new tool output
    out = {}
    for label, case, body in (("small", CASE, later), ("~2 MB", CASE, large),
                              ("~2 MB in the prefix", big_prefix, load_case(big_prefix)[1])):
        verdict = clean_later_request(expected if case == CASE else load_case(case)[0], body, None)
        assert verdict.ok and verdict.body is not None, verdict.reason
        out[label] = (case, orjson.dumps(body), orjson.dumps(verdict.body))
    return out


def gate_cost(case: Path, raw: bytes, rounds: int) -> tuple[float, float]:
    """In-process median of what the bridge does to a body besides I/O (orjson.loads + gate + orjson.dumps), and
    the share of the gate's time spent in ``count_text`` (the nonce search: an orjson serialisation of the body)."""
    expected, _ = load_case(case)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        verdict = clean_later_request(expected, orjson.loads(raw), None)
        orjson.dumps(verdict.body)
        times.append(time.perf_counter() - started)
    body = orjson.loads(raw)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(rounds):
        clean_later_request(expected, body, None)
    profiler.disable()
    stats = pstats.Stats(profiler, stream=io.StringIO()).stats  # type: ignore[attr-defined]
    total = sum(cum for (_, _, name), (_, _, _, cum, _) in stats.items() if name == "clean_later_request")
    search = sum(cum for (_, _, name), (_, _, _, cum, _) in stats.items() if name == "count_text")
    return c.median(times), search / total if total else float("nan")

def pass_through(tmp: Path, script: Path, rounds: dict[str, int], count: int, seconds: float, smoke: bool) -> str:
    """The pass-through rows: direct to ScriptedModel vs through the bridge (Claude gate + anthropic upstream)."""
    latency: dict[tuple[str, str], list[float]] = {}
    first_byte: dict[tuple[str, str], list[float]] = {}
    payloads = bodies(prefix_case(tmp / "big_prefix"))
    for label, (case, agent_body, forwarded_body) in payloads.items():
        with servers(script, case) as (model, bridge), Client(model) as direct, Client(bridge) as bridged:
            sides = {"direct": (direct, forwarded_body), "bridge": (bridged, agent_body)}
            answers = {}
            for side, (client, body) in sides.items():  # warm-up + the same answer check
                status, _, _, answers[side] = client.post("/v1/messages?beta=true", body)
                assert status == 200, (side, status)
            if answers["direct"] != answers["bridge"]:
                raise RuntimeError("the bridged answer differs from the direct one")
            for side in sides:
                latency[(label, side)], first_byte[(label, side)] = [], []
            for index in range(rounds[label]):
                for side in (("direct", "bridge") if index % 2 == 0 else ("bridge", "direct")):
                    client, body = sides[side]
                    status, ttfb, total, _ = client.post("/v1/messages?beta=true", body)
                    assert status == 200
                    latency[(label, side)].append(total)
                    first_byte[(label, side)].append(ttfb)
    rates: dict[str, list[tuple[int, float]]] = {"direct": [], "bridge": []}
    _, small_agent, small_forwarded = payloads["small"]
    for side in ("direct", "bridge", "bridge", "direct"):
        with servers(script) as (model, bridge):  # fresh servers: ScriptedModel keeps every request in memory
            target = model if side == "direct" else bridge
            body = small_forwarded if side == "direct" else small_agent
            rates[side].append(asyncio.run(throughput(target, body, count // 2, seconds / 2)))
    gate = {label: gate_cost(case, agent_body, 5 if smoke else 30)
            for label, (case, agent_body, _) in payloads.items()}

    rows = []
    for label, (_, agent_body, _) in payloads.items():
        for side in ("direct", "bridge"):
            lat, fb = latency[(label, side)], first_byte[(label, side)]
            rows.append([f"{label} ({len(agent_body) / 1e6:.2f} MB)", side, len(lat), c.ms(c.median(fb)),
                         c.ms(c.p95(fb)), c.ms(c.median(lat)), c.ms(c.p95(lat)), "", ""])
        added_latency = c.median(latency[(label, "bridge")]) - c.median(latency[(label, "direct")])
        added_ttfb = c.median(first_byte[(label, "bridge")]) - c.median(first_byte[(label, "direct")])
        rows.append([f"{label}", "**added by the bridge**", "", c.ms(added_ttfb), "", c.ms(added_latency), "",
                     c.verdict(added_ttfb <= 0.002), c.verdict(added_latency <= 0.001)])
    doc = c.table(["body", "path", "n", "TTFB p50 ms", "TTFB p95 ms", "latency p50 ms", "latency p95 ms",
                    "≤ 2 ms TTFB", "≤ 1 ms p50"], rows)
    rate = {side: sum(n for n, _ in runs) / sum(t for _, t in runs) for side, runs in rates.items()}
    doc += "\n\n" + c.table(
        ["sustained (small bodies, 8 connections)", "requests", "req/s", "≥ 500 req/s"],
        [[side, sum(n for n, _ in rates[side]), f"{rate[side]:.0f}",
          c.verdict(rate[side] >= 500) if side == "bridge" else ""] for side in ("direct", "bridge")])
    doc += f"""

In-process cost of the gate alone (orjson.loads + `clean_later_request` + orjson.dumps, median):
{', '.join(f'{label} {c.ms(value)} ms' for label, (value, _) in gate.items())}; of the gate's own time,
{', '.join(f'{label} {share:.0%}' for label, (_, share) in gate.items())} is `hashing.count_text`, the
search for the nonce (an orjson serialisation of the whole body, tools and system included), done once per
request (the cleaned copy is not searched again: the cleaning removed the one message holding the nonce, so only
the inserted boundary prompt is). The rest of the added time is the extra loopback hop: aiohttp reading the body
and orjson parsing it (the model pays both again), the serialised cleaned body, a second HTTP request to the
upstream and the chunk-by-chunk relay of the stream. All three processes share the 2 cores, so the throughput
test measures the whole system; throughput blocks are bounded at {count // 2} requests / {seconds / 2:.0f} s each."""
    return doc


def main() -> None:
    parser = c.parser(__doc__ or "", repeat=200)
    parser.add_argument("--translation-only", action="store_true",
                        help="only the translation rows (implies --no-write: the section holds both, from one run)")
    parser.add_argument("--seconds", type=float, default=None, help="time bound per throughput block [default 8]")
    args = c.finish_args(parser.parse_args())
    rounds = {"small": args.repeat, "~2 MB": max(2, args.repeat // 5), "~2 MB in the prefix": max(2, args.repeat // 5)}
    if args.smoke:
        rounds = {"small": 5, "~2 MB": 2, "~2 MB in the prefix": 2}
    count = 20 if args.smoke else 1000
    seconds = args.seconds or (2.0 if args.smoke else 8.0)
    args.no_write = args.no_write or args.translation_only
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-bridge-") as tmp:
        script = Path(tmp) / "script.json"
        script.write_text(json.dumps({"turns": [{"content": [{"type": "text", "text": ANSWER}]}] * 40}))
        doc = "" if args.translation_only else pass_through(Path(tmp), script, rounds, count, seconds, args.smoke)
        runs = [(agent, measure_translation(agent, script, rounds, count, seconds, not args.smoke))
                for agent in TRANSLATED]
    doc += "\n\n### 6b. Translation to Chat Completions (`--upstream openai-chat`) vs pass-through\n\n"
    doc += translation_doc(runs, count, seconds)
    c.emit("bridge_overhead", "6. Bridge overhead (gate + pass-through; translation)", doc, args)


if __name__ == "__main__":
    main()
