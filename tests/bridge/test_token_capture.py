"""``--capture-tokens`` through a real bridge and ScriptedModel answering like vLLM: the sidecar holds, id for id,
what the model sent; the agent's answer is the one it would have had without the capture; an upstream that cannot
answer them is said once; hostile answers (ids that disagree with usage, non-integer ids, enormous arrays) are
records, never failures; the sidecar is bounded. The gate accepts every body: what is under test is the capture."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from tests.bridge.test_server import request
from tests.bridge.test_usage_accounting import HEADERS, KEY, ROUTES, AcceptingGate, body_for, upstream_for

from forkpoint.bridge.protocols.translating import TranslatingChatUpstream
from forkpoint.bridge.server import Bridge
from forkpoint.bridge.token_capture import MAX_TOKENS, AnswerTokens, TokenLog, ask
from forkpoint.testing import ScriptedModel, text, tool_use
from forkpoint.testing.scripted_tokens import TokenAnswer

SCRIPT = [[text("Let me look."), tool_use("Bash", {"command": "ls -la"})], [text("done " * 40)]]


def events(body: bytes) -> list[Any]:
    """An answer as the agent parses it: each SSE data payload (or the whole JSON), decoded; ``usage`` apart (the
    scripted server counts the ids it sent when asked for them, else a fixed prompt size)."""
    if body.lstrip().startswith(b"{"):
        return [{key: value for key, value in json.loads(body).items() if key != "usage"}]
    return [payload if payload == "[DONE]" else {k: v for k, v in json.loads(payload).items() if k != "usage"}
            for line in body.decode().splitlines() if line.startswith("data:")
            for payload in [line[5:].strip()]]


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def serve(tmp_path: Path, protocol: str, stream: bool, capture: bool, token_mode: str = "vllm",
          requests: int = 2) -> tuple[ScriptedModel, list[bytes], TokenLog | None]:
    model = ScriptedModel(SCRIPT, step_mode="counter", token_mode=token_mode, tools_required=False)
    tmp_path.mkdir(exist_ok=True)
    log = TokenLog(tmp_path / "tokens.jsonl") if capture else None
    with model.serve() as url, Bridge(AcceptingGate(), upstream_for(protocol, url), tokens=log) as bridge:
        replies = [request(bridge.base_url + ROUTES[protocol], body=body_for(protocol, stream), headers=HEADERS)
                   for _ in range(requests)]
        bridge.finish()
    assert [reply.status for reply in replies] == [200] * requests
    return model, [reply.body for reply in replies], log


@pytest.mark.parametrize("stream", [True, False])
def test_the_sidecar_holds_what_the_model_sent_and_the_agent_sees_no_change(tmp_path: Path, stream: bool) -> None:
    model, captured, log = serve(tmp_path / "on", "chat", stream, capture=True)
    _, plain, _ = serve(tmp_path / "off", "chat", stream, capture=False)
    assert [events(body) for body in captured] == [events(body) for body in plain]  # the agent's view unchanged
    assert all(b"token_ids" not in body and b"token_id:" not in body for body in captured)
    asked = [entry["body"] for entry in model.requests]
    assert all(body["return_token_ids"] is True and body["logprobs"] is True for body in asked)
    sent = [entry["sent_tokens"] for entry in model.requests]
    assert log is not None
    lines = records(tmp_path / "on" / "tokens.jsonl")
    assert [line["status"] for line in lines] == ["ok", "ok"]
    assert [line["prompt_token_ids"] for line in lines] == [s["prompt_token_ids"] for s in sent]
    assert [line["completion_token_ids"] for line in lines] == [s["completion_token_ids"] for s in sent]
    assert [line["completion_logprobs"] for line in lines] == [s["logprobs"] for s in sent]
    assert all(line["completion_token_ids"] and line["prompt_token_ids"] for line in lines)
    assert lines[0]["sampling"] == {"model": "m", "stream": stream}
    assert lines[0]["finish_reason"] == "tool_calls" and lines[1]["finish_reason"] == "stop"
    text_of = (tmp_path / "on" / "tokens.jsonl").read_text("utf-8")
    assert "ls -la" not in text_of and "done" not in text_of and KEY not in text_of  # ids only, never text
    assert log.summary()["status"] == "captured" and log.summary()["records"] == 2


def test_an_agent_that_asked_for_logprobs_keeps_them(tmp_path: Path) -> None:
    model = ScriptedModel([[text("hello")]], tools_required=False)
    log = TokenLog(tmp_path / "tokens.jsonl")
    body = {**body_for("chat", False), "logprobs": True}
    with model.serve() as url, Bridge(AcceptingGate(), upstream_for("chat", url), tokens=log) as bridge:
        reply = request(bridge.base_url + ROUTES["chat"], body=body, headers=HEADERS)
        bridge.finish()
    choice = json.loads(reply.body)["choices"][0]
    assert choice["logprobs"]["content"][0]["token"] == "h" and "token_ids" not in choice
    assert "return_tokens_as_token_ids" not in model.requests[0]["body"]
    assert records(tmp_path / "tokens.jsonl")[0]["completion_logprobs"] == model.requests[0]["sent_tokens"]["logprobs"]


@pytest.mark.parametrize("stream", [True, False])
def test_a_translating_upstream_asks_the_chat_server_and_records_its_ids(tmp_path: Path, stream: bool) -> None:
    model = ScriptedModel(SCRIPT, step_mode="counter", tools_required=False)
    log = TokenLog(tmp_path / "tokens.jsonl")
    with model.serve() as url:
        upstream = TranslatingChatUpstream("anthropic-messages", url + "/v1", KEY)
        with Bridge(AcceptingGate(), upstream, tokens=log) as bridge:
            reply = request(bridge.base_url + ROUTES["anthropic"], body=body_for("anthropic", stream),
                            headers=HEADERS)
            bridge.finish()
    assert reply.status == 200 and b"token_ids" not in reply.body and b"logprob" not in reply.body
    line = records(tmp_path / "tokens.jsonl")[0]
    sent = model.requests[0]["sent_tokens"]
    assert line["status"] == "ok", line
    assert (line["prompt_token_ids"], line["completion_token_ids"]) == (sent["prompt_token_ids"],
                                                                        sent["completion_token_ids"])


@pytest.mark.parametrize("protocol", ["anthropic", "responses"])
def test_an_upstream_that_cannot_answer_them_is_said_once(tmp_path: Path, protocol: str) -> None:
    model, _, log = serve(tmp_path, protocol, True, capture=True)
    assert log is not None
    summary = log.summary()
    assert summary["status"] == "unavailable" and summary["requests"] == 2
    assert f"the {'anthropic' if protocol == 'anthropic' else 'openai-responses'} upstream returns no token ids" \
        in summary["reason"]
    assert all("return_token_ids" not in entry["body"] for entry in model.requests)  # nothing added to the body


def test_a_chat_server_answering_without_them_is_unavailable_not_a_failure(tmp_path: Path) -> None:
    log = TokenLog(tmp_path / "tokens.jsonl")
    answer = AnswerTokens(added=ask({"messages": []})[1])
    out = answer.feed(b'data: {"choices":[{"index":0,"delta":{"content":"x"},"logprobs":null}]}\n\n')
    log.finish(answer, None)
    assert b'"content":"x"' in out
    assert log.summary()["status"] == "unavailable" and "without token ids" in str(log.summary()["reason"])


def test_ids_that_disagree_with_usage_are_kept_and_flagged(tmp_path: Path) -> None:
    model, _, _ = serve(tmp_path, "chat", False, capture=True, token_mode="mismatch", requests=1)
    line = records(tmp_path / "tokens.jsonl")[0]
    assert line["status"] == "mismatch"
    assert any("completion token ids, usage says" in problem for problem in line["problems"])
    assert line["completion_token_ids"] == model.requests[0]["sent_tokens"]["completion_token_ids"]


@pytest.mark.parametrize("stream", [True, False])
def test_non_integer_ids_refuse_the_record_and_keep_the_run(tmp_path: Path, stream: bool) -> None:
    _, bodies, log = serve(tmp_path, "chat", stream, capture=True, token_mode="non_integer")
    lines = records(tmp_path / "tokens.jsonl")
    assert [line["status"] for line in lines] == ["refused", "refused"]
    assert lines[0]["completion_token_ids"] is None and "not a token id" in lines[0]["problems"][-1]
    assert all(b"token_ids" not in body for body in bodies)  # the agent still got its answer, cleaned
    assert log is not None and log.summary()["status"] == "unavailable"


def test_an_enormous_token_array_is_bounded(tmp_path: Path) -> None:
    _, bodies, _ = serve(tmp_path, "chat", False, capture=True, token_mode="huge", requests=1)
    line = records(tmp_path / "tokens.jsonl")[0]
    assert line["status"] == "too_large" and line["prompt_token_ids"] is None
    assert f"longer than {MAX_TOKENS}" in line["problems"][-1]
    assert b"prompt_token_ids" not in bodies[0]
    assert (tmp_path / "tokens.jsonl").stat().st_size < 4096


def test_the_sidecar_stops_at_its_bound_and_says_so(tmp_path: Path) -> None:
    log = TokenLog(tmp_path / "tokens.jsonl", max_bytes=2000)
    for _ in range(5):
        answer = AnswerTokens()
        answer.read({"prompt_token_ids": list(range(100)), "choices": [{"index": 0, "token_ids": [1, 2]}]})
        log.finish(answer, None)
    summary = log.summary()
    assert summary["truncated"] and summary["records"] + summary["dropped_records"] == 5
    assert summary["records"] >= 1 and (tmp_path / "tokens.jsonl").stat().st_size <= 2000


def test_any_split_of_the_stream_reads_the_same() -> None:
    body, added = ask({"model": "m", "messages": [{"role": "user", "content": "go é"}], "stream": True})
    tokens = TokenAnswer(body)
    from forkpoint.bridge.protocols.openai_chat import chat_chunks, chat_message, encode

    message, finish = chat_message([text("héllo " * 30), tool_use("Bash", {"command": "ls"}, "call_1")], str)
    raw = b"".join(encode(tokens.chunk(c, i == 0) for i, c in enumerate(
        chat_chunks("c", "m", message, finish, True))))
    raw = raw.replace(b"\n\n", b"\r\n\r\n", 3)  # CRLF events too
    rng = random.Random(31)
    for _ in range(20):
        answer = AnswerTokens(added=added)
        out, at = b"", 0
        while at < len(raw):
            size = rng.randint(1, 64)
            out += answer.feed(raw[at:at + size])
            at += size
        out += answer.flush()
        assert b"token_ids" not in out and b"token_id:" not in out
        assert len([line for line in out.splitlines() if line.startswith(b"data:")]) == raw.count(b"data:")
        line = answer.record({"input_tokens": len(tokens.prompt), "output_tokens": len(tokens.completion)})
        assert line["status"] == "ok" and line["completion_token_ids"] == tokens.completion


def _record(chunk: dict[str, Any], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    answer = AnswerTokens()
    answer.feed(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    answer.flush()
    return answer.record(usage)


def _choice(ids: Any, tokens: list[Any], logprobs: list[Any] | None = None) -> dict[str, Any]:
    values = logprobs if logprobs is not None else [-0.5] * len(tokens)
    return {"choices": [{"index": 0, "token_ids": ids, "logprobs": {"content": [
        {"token": token, "logprob": value} for token, value in zip(tokens, values, strict=True)]}}]}


def test_logprob_tokens_that_name_other_ids_are_a_mismatch() -> None:
    line = _record(_choice([5, 6], ["token_id:5", "token_id:7"]))
    assert line["status"] == "mismatch" and line["completion_token_ids"] == [5, 6]
    assert "the logprob tokens name other ids than token_ids" in line["problems"]
    only_named = _record({"choices": [{"index": 0, "logprobs": {"content": [{"token": "token_id:9", "logprob": -1}]}}]})
    assert (only_named["status"], only_named["completion_token_ids"], only_named["completion_source"]) == (
        "ok", [9], "logprobs")


@pytest.mark.parametrize("ids", [[1, True], [1, 2.0], [1, "2"], [1, None], [1, [2]], [1, 12345678901], [-1]])
def test_anything_but_a_token_id_refuses_the_record(ids: list[Any]) -> None:
    line = _record(_choice(ids, ["a"] * len(ids)))
    assert line["status"] == "refused" and line["completion_token_ids"] is None and line["prompt_token_ids"] is None


@pytest.mark.parametrize("logprob", [float("nan"), float("inf"), "x", None, True])
def test_a_logprob_that_is_not_a_finite_number_refuses_the_record(logprob: Any) -> None:
    answer = AnswerTokens()
    answer.read(_choice([1], ["a"], [logprob]))  # as parsed (orjson reads NaN/Infinity nowhere: built in Python)
    assert answer.record(None)["status"] == "refused"


def _chunk(ids: list[int], *, prompt: list[int] | None = None, **choice: Any) -> bytes:
    body: dict[str, Any] = {"id": "c", "choices": [{"index": 0, "delta": {"content": "é\\n\n\"x"}, "token_ids": ids,
                                                     "logprobs": {"content": [{"token": f"token_id:{i}",
                                                                               "logprob": -0.5} for i in ids]},
                                                     **choice}]}
    if prompt is not None:
        body["prompt_token_ids"] = prompt
    return b"data: " + json.dumps(body).encode() + b"\n\n"


HOSTILE_EVENTS = [
    _chunk([5], prompt=[1, 2, 3]), _chunk([6]), b": a comment\n\n", _chunk([7]),
    b'data: {"choices":[{"index":0,"token_ids":[8],"logprobs":null}]}\n\n',  # logprobs null
    b'data: {"choices":[{"index":0,"token_ids":[9],"logprobs":{"content":[]}},{"index":1,"token_ids":[1]}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{}}]}\n\n',  # no fields: passes byte for byte
    b'data: {"a":1},{"choices":[]}\n\n',  # not one JSON value: untouched
    b'data: ["token_ids"]\n\n', b"event: x\ndata: " + _chunk([10])[6:],  # two lines
    _chunk([11], finish_reason="stop", prompt_token_ids=[1, 2, 3]),  # SGLang's per-choice prompt ids
    _chunk([12]), b'data: {"choices":{"0":{"token_ids":[13],"logprobs":{"content":[]}}}}\n\n',  # not a list
    b'data: {"choices":["x"]}\n\n', b'data: {"choices":[{"index":1,"token_ids":[14],"logprobs":{"content":[]}}]}\n\n',
    _chunk([15]), b"data: [DONE]\n\n",
]


@pytest.mark.parametrize("agent_asked", [{}, {"logprobs": True}, {"logprobs": True, "return_token_ids": True}])
@pytest.mark.parametrize("refuse", [False, True])
@pytest.mark.parametrize("strip", [True, False])
def test_the_batched_relay_path_gives_what_the_event_by_event_path_gives(agent_asked: dict[str, Any],
                                                                          refuse: bool, strip: bool) -> None:
    """Blocks of usual chunks are read and stripped in line (the relay's fast path; ``strip=False``: only read, as
    for a translating upstream); any split of any mixture of usual and odd events gives the agent, byte for byte,
    and the record what reading each event alone gives."""
    _, added = ask({"messages": [], **agent_asked})
    events = list(HOSTILE_EVENTS)
    if refuse:  # a bad id mid-stream refuses the record; the later chunks are still stripped
        events.insert(4, b'data: {"choices":[{"index":0,"token_ids":["9"],"logprobs":{"content":[]}}]}\n\n')
    reference = AnswerTokens(added=added, strip=strip)
    expected = b"".join(reference._event(event) for event in events)
    raw = b"".join(events)
    rng = random.Random(7)
    for size in (1, 7, 64, 4096, len(raw)):
        answer = AnswerTokens(added=added, strip=strip)
        out, at = b"", 0
        while at < len(raw):
            step = rng.randint(1, size)
            out += answer.feed(raw[at:at + step])
            at += step
        out += answer.flush()
        assert out == expected
        assert answer.record(None) == reference.record(None)
    if strip and not agent_asked:  # the usual chunks reached the agent without the fields
        assert expected.count(b'"token_ids"') < raw.count(b'"token_ids"') - 6


def test_sglang_refusing_ids_on_a_stream_gets_the_request_again_without_them(tmp_path: Path) -> None:
    """SGLang answers HTTP 400 to a streamed Chat request with return_token_ids / return_prompt_token_ids: the
    bridge sends that request once more asking for logprobs only (and the run's later streamed requests so from the
    start); the agent gets its answer, the records say why they hold no ids."""
    model, captured, log = serve(tmp_path / "on", "chat", True, capture=True, token_mode="sglang")
    _, plain, _ = serve(tmp_path / "off", "chat", True, capture=False, token_mode="sglang")
    assert [events(body) for body in captured] == [events(body) for body in plain]
    assert all(b"logprobs\": {" not in body and b"token_ids" not in body for body in captured)
    asked = [entry["body"] for entry in model.requests]
    assert len(asked) == 3 and asked[0]["return_token_ids"] is True  # refused once, then never asked again
    assert all("return_token_ids" not in body and "return_prompt_token_ids" not in body and body["logprobs"] is True
               for body in asked[1:])
    lines = records(tmp_path / "on" / "tokens.jsonl")
    assert [line["status"] for line in lines] == ["unavailable", "unavailable"]
    assert all("refuses token ids on streamed" in line["reason"] for line in lines)
    assert log is not None and "SGLang" in str(log.summary()["reason"])


def test_sglang_ids_per_choice_are_recorded_unstreamed(tmp_path: Path) -> None:
    model, captured, _ = serve(tmp_path, "chat", False, capture=True, token_mode="sglang")
    sent = [entry["sent_tokens"] for entry in model.requests]
    lines = records(tmp_path / "tokens.jsonl")
    assert [line["status"] for line in lines] == ["ok", "ok"]
    assert [line["prompt_token_ids"] for line in lines] == [s["prompt_token_ids"] for s in sent]
    assert [line["completion_token_ids"] for line in lines] == [s["completion_token_ids"] for s in sent]
    assert all(b"token_ids" not in body and b'"logprobs": {' not in body for body in captured)


@pytest.mark.parametrize("stream", [True, False])
def test_a_translating_upstream_survives_sglangs_refusal(tmp_path: Path, stream: bool) -> None:
    model = ScriptedModel(SCRIPT, step_mode="counter", tools_required=False, token_mode="sglang")
    log = TokenLog(tmp_path / "tokens.jsonl")
    with model.serve() as url:
        upstream = TranslatingChatUpstream("anthropic-messages", url + "/v1", KEY)
        with Bridge(AcceptingGate(), upstream, tokens=log) as bridge:
            reply = request(bridge.base_url + ROUTES["anthropic"], body=body_for("anthropic", stream),
                            headers=HEADERS)
            bridge.finish()
    assert reply.status == 200 and b"Let me look." in reply.body
    line = records(tmp_path / "tokens.jsonl")[0]
    assert line["status"] == ("unavailable" if stream else "ok")
    assert len(model.requests) == (2 if stream else 1)


@pytest.mark.parametrize("stream", [True, False])
def test_ids_that_do_not_match_the_text_are_recorded_as_sent(tmp_path: Path, stream: bool) -> None:
    """Ids of another text than the one sent (as many as usage counts): no check without the model's tokenizer
    can see it, so the record holds what the server sent, id for id, and the agent's answer is unchanged."""
    from forkpoint.testing.scripted_tokens import tokenize

    model, captured, _ = serve(tmp_path / "on", "chat", stream, capture=True, token_mode="wrong_text")
    _, plain, _ = serve(tmp_path / "off", "chat", stream, capture=False, token_mode="wrong_text")
    assert [events(body) for body in captured] == [events(body) for body in plain]
    lines = records(tmp_path / "on" / "tokens.jsonl")
    sent = [entry["sent_tokens"] for entry in model.requests]
    assert [line["completion_token_ids"] for line in lines] == [s["completion_token_ids"] for s in sent]
    assert lines[1]["completion_token_ids"] != tokenize("done " * 40)
    assert [line["status"] for line in lines] == ["ok", "ok"]


@pytest.mark.parametrize("translating", [False, True])
def test_another_400_under_capture_reaches_the_agent_as_without_it(tmp_path: Path, translating: bool) -> None:
    """The capture reads a 400 to a streamed request to tell SGLang's refusal of the id fields; any other 400 is
    passed on as it would be without the capture, and nothing is sent again."""
    from forkpoint.testing.script import Fault, Turn

    replies = {}
    for capture in (True, False):
        model = ScriptedModel([Turn((text("never"),), faults=(Fault(400),))], tools_required=False)
        log = TokenLog(tmp_path / f"tokens-{capture}.jsonl") if capture else None
        with model.serve() as url:
            upstream = (TranslatingChatUpstream("anthropic-messages", url + "/v1", KEY) if translating
                        else upstream_for("chat", url))
            route = ROUTES["anthropic" if translating else "chat"]
            with Bridge(AcceptingGate(), upstream, tokens=log) as bridge:
                reply = request(bridge.base_url + route, body=body_for("anthropic" if translating else "chat", True),
                                headers=HEADERS)
                bridge.finish()
        assert len(model.requests) == 1
        replies[capture] = (reply.status, json.loads(reply.body))
    assert replies[True] == replies[False] and replies[True][0] == 400
