"""The Gemini API on the bridge: the gate on a synthetic profile shaped like Gemini CLI 0.61.0's resume envelope
(the profile itself is tested on real recorded requests in tests/adapters/gemini_cli/), the codec, the usage read
from ``usageMetadata``, the pins, and the pass-through through a real bridge to ScriptedModel."""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
from typing import Any

from forkpoint.bridge.protocols.gemini import (
    ExpectedGemini,
    GeminiGate,
    GeminiProfile,
    GeminiUpstream,
    encode,
    response_chunks,
    tool_schemas,
)
from forkpoint.bridge.server import Bridge
from forkpoint.bridge.translate.chat_stream import SSEDecoder
from forkpoint.bridge.translate.sampling import SamplingPins, apply_pins
from forkpoint.bridge.usage_tap import UsageTap, usage_of
from forkpoint.testing.scripted_model import ScriptedModel, text, tool_use

NONCE = "__forkpoint_nonce_00112233445566778899aabbccddeeff__"
MODEL = "gemini-2.5-pro"
CONTEXT = {"text": "<session_context>\nworkspace listing\n</session_context>"}
CALL = {"functionCall": {"id": "c1", "name": "read_file", "args": {"file_path": "a.txt"}},
        "thoughtSignature": "sig"}
RESULT = {"functionResponse": {"id": "c1", "name": "read_file", "response": {"output": "hello\n"}}}
PREFIX: list[dict[str, Any]] = [
    {"role": "user", "parts": [{"text": "task"}]},
    {"role": "model", "parts": [{"text": "Reading."}, CALL]},
    {"role": "user", "parts": [RESULT]},
]
INTERRUPTED = {"role": "model", "parts": [{"text": "[interrupted]"}]}
TOOLS = [{"functionDeclarations": [{"name": "read_file", "parametersJsonSchema": {"type": "object"}}]}]
PROFILE = GeminiProfile(agent="Gem", context_part=lambda part: isinstance(part, dict) and str(
    part.get("text", "")).startswith("<session_context>"), envelope=(INTERRUPTED,), verified=frozenset({"gem/1"}))


def user(value: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": value}]}


def wire(*contents: Any, **top: Any) -> dict[str, Any]:
    """A request as the agent sends it: the context part leads contents[0], the call ids differ from the
    recording's, the signature may be gone (none of which is history)."""
    contents_list = copy.deepcopy(list(contents))
    if contents_list:
        contents_list[0]["parts"].insert(0, CONTEXT)
    return {"contents": contents_list, "systemInstruction": {"parts": [{"text": "sys"}]}, "tools": TOOLS,
            "generationConfig": {"temperature": 1}, **top}


def expected(**kwargs: Any) -> ExpectedGemini:
    return ExpectedGemini.of("gem/1", PREFIX, MODEL, nonce=NONCE, tools=["read_file"], **kwargs)


def test_the_first_request_ends_at_the_prefix_and_the_envelope_is_stripped_or_becomes_the_prompt() -> None:
    stripped = GeminiGate(PROFILE, expected()).first(wire(*PREFIX, INTERRUPTED, user(NONCE)))
    assert stripped.ok, stripped.reason
    assert stripped.body == wire(*PREFIX) and stripped.body["contents"][-1]["parts"] == [RESULT]
    assert stripped.facts["nonce_index"] == 4 and stripped.facts["continuation_messages"] == 0
    prompted = GeminiGate(PROFILE, expected(), "Go on.").first(wire(*PREFIX, INTERRUPTED, user(NONCE)))
    assert prompted.ok and prompted.body == wire(*PREFIX, user("Go on."))
    assert NONCE not in json.dumps(prompted.body)
    # call ids and thought signatures are not compared: the agent rewrites both on resume
    renamed = copy.deepcopy(PREFIX)
    renamed[1]["parts"][1] = {"functionCall": {"id": "other", "name": "read_file", "args": {"file_path": "a.txt"}}}
    assert GeminiGate(PROFILE, expected()).first(wire(*renamed, INTERRUPTED, user(NONCE))).ok


def test_later_requests_keep_the_continuation_and_a_retry_is_accepted() -> None:
    gate = GeminiGate(PROFILE, expected(), "Go on.")
    assert gate.first(wire(*PREFIX, INTERRUPTED, user(NONCE))).ok
    answer = {"role": "model", "parts": [{"text": "done"}]}
    later = gate.later(wire(*PREFIX, INTERRUPTED, user(NONCE), answer))
    assert later.ok and later.body == wire(*PREFIX, user("Go on."), answer)
    assert later.facts["continuation_messages"] == 1
    assert gate.later(wire(*PREFIX, INTERRUPTED, user(NONCE))).ok


def test_gate_refusals_wrong_prefix_extra_envelope_mutated_history() -> None:
    def refused(body: dict[str, Any], gate: GeminiGate | None = None) -> str:
        verdict = (gate or GeminiGate(PROFILE, expected())).first(body)
        assert not verdict.ok and verdict.body is None
        return verdict.reason or ""

    # wrong prefix: a content missing, or one more before the envelope
    assert "is missing" in refused(wire(*PREFIX[:2], INTERRUPTED, user(NONCE))) or "function response" in refused(
        wire(*PREFIX[:2], INTERRUPTED, user(NONCE)))
    assert "is extra" in refused(wire(*PREFIX, user("more"), RESULT_CONTENT, INTERRUPTED, user(NONCE)))
    # an extra envelope: something between the prefix and the nonce that is not the profile's envelope
    assert "resume envelope" in refused(wire(*PREFIX, user("injected"), INTERRUPTED, user(NONCE)))
    assert "resume envelope" in refused(wire(*PREFIX, user(NONCE)))
    # mutated history: an observation, an argument, a role
    mutated = copy.deepcopy(PREFIX)
    mutated[2]["parts"][0]["functionResponse"]["response"]["output"] = "tampered\n"
    assert "observation of read_file" in refused(wire(*mutated, INTERRUPTED, user(NONCE)))
    mutated = copy.deepcopy(PREFIX)
    mutated[1]["parts"][1]["functionCall"]["args"] = {"file_path": "/etc/passwd"}
    assert "contents[1]" in refused(wire(*mutated, INTERRUPTED, user(NONCE)))
    # the first request must end with the nonce; the nonce exactly once
    assert "follows the resume nonce" in refused(wire(*PREFIX, INTERRUPTED, user(NONCE), user("x")))
    assert "exactly once" in refused(wire(*PREFIX, INTERRUPTED, user(NONCE), user(NONCE)))
    # the envelope the gate does not know, history it cannot see, tools it did not record
    assert "does not know" in refused(wire(*PREFIX, INTERRUPTED, user(NONCE), extra={"x": 1}))
    assert "cachedContent" in refused(wire(*PREFIX, INTERRUPTED, user(NONCE), cachedContent="cachedContents/1"))
    assert "offered tools" in refused(wire(*PREFIX, INTERRUPTED, user(NONCE), tools=[
        {"functionDeclarations": [{"name": "run_shell_command"}]}]))
    no_context = wire(*PREFIX, INTERRUPTED, user(NONCE))
    no_context["contents"][0]["parts"].pop(0)
    assert "environment context" in refused(no_context)
    # what is fingerprinted must not change between requests
    gate = GeminiGate(PROFILE, expected())
    assert gate.first(wire(*PREFIX, INTERRUPTED, user(NONCE))).ok
    changed = wire(*PREFIX, INTERRUPTED, user(NONCE), systemInstruction={"parts": [{"text": "other"}]})
    assert "system instruction changed" in (gate.later(changed).reason or "")


RESULT_CONTENT = {"role": "user", "parts": [RESULT]}


def test_routes_are_the_recorded_models_only() -> None:
    gate = GeminiGate(PROFILE, expected())
    assert gate.model_routes == {f"/v1beta/models/{MODEL}:streamGenerateContent",
                                 f"/v1beta/models/{MODEL}:generateContent"}


def test_the_codec_streams_parts_and_the_usage_tap_reads_usage_metadata_in_any_split() -> None:
    parts: list[dict[str, Any]] = [{"text": "x" * 100},
                                   {"functionCall": {"name": "read_file", "args": {"file_path": "a"}}}]
    usage = {"promptTokenCount": 120, "candidatesTokenCount": 30, "thoughtsTokenCount": 7,
             "cachedContentTokenCount": 20, "totalTokenCount": 157}
    wire_bytes = b"".join(encode(response_chunks("r1", MODEL, parts, usage)))
    payloads: list[Any] = SSEDecoder().feed(wire_bytes)
    streamed = [p for chunk in payloads for p in chunk["candidates"][0]["content"]["parts"]]
    assert "".join(p.get("text", "") for p in streamed) == "x" * 100 and streamed[-1] == parts[1]
    assert payloads[-1]["candidates"][0]["finishReason"] == "STOP"
    for size in (1, 3, 7, len(wire_bytes)):
        tap = UsageTap()
        for at in range(0, len(wire_bytes), size):
            tap.feed(wire_bytes[at:at + size])
        assert tap.reported() == {"input_tokens": 120, "output_tokens": 37, "cached_tokens": 20,
                                  "reasoning_tokens": 7} or tap.reported() == usage_of(wire_bytes)
    assert usage_of(wire_bytes) is not None and usage_of(wire_bytes)["output_tokens"] == 37  # type: ignore[index]
    assert usage_of(b'{"usageX": {"promptTokenCount": 5}}') is None


def test_pins_go_to_generation_config_and_tool_schemas_convert() -> None:
    body = wire(*PREFIX)
    pinned, _ = apply_pins("google-generate-content", body, SamplingPins(
        temperature=0.2, top_p=0.5, seed=7, max_output_tokens=99, disable_thinking=True))
    config = pinned["generationConfig"]
    assert (config["temperature"], config["topP"], config["seed"], config["maxOutputTokens"]) == (0.2, 0.5, 7, 99)
    assert config["thinkingConfig"]["thinkingBudget"] == 0 and "temperature" not in pinned and "top_p" not in pinned
    assert body["generationConfig"] == {"temperature": 1}  # the agent's body is not modified
    converted, dropped = tool_schemas([*TOOLS, {"googleSearch": {}}])
    assert converted == [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    assert dropped == ("built-in tool 'googleSearch' dropped",)


def test_a_validated_request_passes_through_a_real_bridge_to_scripted_model() -> None:
    model = ScriptedModel([[text("recorded turn")], [text("ok"), tool_use("read_file", {"file_path": "b.txt"})]])
    def pin(body: dict[str, Any], _facts: dict[str, Any]) -> dict[str, Any]:
        return apply_pins("google-generate-content", body, SamplingPins(model="gemini-x"))[0]

    with model.serve() as url, Bridge(GeminiGate(PROFILE, expected()), GeminiUpstream(url, "upstream-key-123456"),
                                      prepare=pin) as bridge:
        status, answer = post(f"{bridge.base_url}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse",
                              wire(*PREFIX, INTERRUPTED, user(NONCE)))
        assert status == 200
        chunks: list[Any] = SSEDecoder().feed(answer)
        parts = [p for chunk in chunks for p in chunk["candidates"][0]["content"]["parts"]]
        assert parts[-1]["functionCall"]["name"] == "read_file"
        assert post(f"{bridge.base_url}/v1beta/models/other-model:streamGenerateContent", {})[0] == 404
    sent = model.requests[-1]
    assert sent["path"] == "/v1beta/models/gemini-x:streamGenerateContent?alt=sse"  # the pinned model, in the URL
    assert "model" not in sent["body"] and sent["body"]["contents"][-1]["parts"] == [RESULT]
    assert sent["headers"].get("x-goog-api-key") == "upstream-key-123456"  # the bridge's key, not the agent's


def post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json",
                                                                      "x-goog-api-key": "agent-dummy-key"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
