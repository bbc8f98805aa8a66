"""gemini_chat.py: a Gemini ``generateContent`` request (its route's model and method folded in) -> a Chat
Completions request; odd and hostile inputs are refused or listed as losses, never crash or pass silently."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forkpoint.bridge.translate.common import ChatOptions, TranslationError
from forkpoint.bridge.translate.gemini_chat import MAX_SCHEMA_DEPTH, TOOL_ERROR_MARK, gemini_to_chat, with_route
from forkpoint.bridge.translate.pipeline import prepare

from .conftest import check_chat_request

ROUTE = "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
PROTOCOL = "google-generate-content"


def user(*parts: Any) -> dict[str, Any]:
    return {"role": "user", "parts": list(parts)}


def model(*parts: Any) -> dict[str, Any]:
    return {"role": "model", "parts": list(parts)}


def call(name: str, args: Any, call_id: str | None = None) -> dict[str, Any]:
    inner: dict[str, Any] = {"name": name, "args": args}
    if call_id is not None:
        inner["id"] = call_id
    return {"functionCall": inner}


def result(name: str, response: Any, call_id: str | None = None) -> dict[str, Any]:
    inner: dict[str, Any] = {"name": name, "response": response}
    if call_id is not None:
        inner["id"] = call_id
    return {"functionResponse": inner}


def translate(contents: list[Any], **fields: Any) -> tuple[dict[str, Any], tuple[str, ...]]:
    translated = gemini_to_chat(with_route(ROUTE, {"contents": contents, **fields}))
    check_chat_request(translated.body)
    return translated.body, translated.losses


def test_the_route_gives_the_model_and_the_stream_and_is_refused_when_it_is_not_a_model_method() -> None:
    body, _ = translate([user({"text": "hi"})])
    assert body["model"] == "gemini-2.5-pro" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    whole = gemini_to_chat(with_route("/v1beta/models/m:generateContent", {"contents": [user({"text": "hi"})]}))
    assert whole.body["model"] == "m" and "stream" not in whole.body
    for path in ("", "/v1beta/models/m:countTokens", "/v1beta/models/a/b:generateContent", "/v1/models/m:x"):
        with pytest.raises(TranslationError, match="not a Gemini model method"):
            with_route(path, {"contents": []})
    # the pipeline passes the route in: the same translation through prepare
    assert prepare(PROTOCOL, {"contents": [user({"text": "hi"})]}, route=ROUTE).model == "gemini-2.5-pro"


def test_a_conversation_with_calls_results_thoughts_and_a_system_instruction() -> None:
    body, losses = translate(
        [user({"text": "<session_context>"}, {"text": "fix it"}),
         model({"text": "plan", "thought": True}, {"text": "I'll look."},
               {**call("read_file", {"file_path": "a.py"}), "thoughtSignature": "sig"},
               call("list_directory", {"dir_path": "."})),
         user(result("read_file", {"output": "print(1)\n"}), result("list_directory", {"error": "denied"})),
         model({"text": "done"})],
        systemInstruction={"role": "user", "parts": [{"text": "be brief"}, {"text": "no lies"}]})
    messages = body["messages"]
    assert messages[0] == {"role": "system", "content": "be brief\n\nno lies"}
    assert messages[1]["content"] == [{"type": "text", "text": "<session_context>"}, {"type": "text", "text": "fix it"}]
    assistant = messages[2]
    assert assistant["content"] == "I'll look." and assistant["reasoning_content"] == "plan"
    ids = [c["id"] for c in assistant["tool_calls"]]
    assert len(set(ids)) == 2 and json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {
        "file_path": "a.py"}
    assert messages[3] == {"role": "tool", "tool_call_id": ids[0], "content": "print(1)\n"}
    assert messages[4] == {"role": "tool", "tool_call_id": ids[1], "content": TOOL_ERROR_MARK + "denied"}
    assert messages[5] == {"role": "assistant", "content": "done"}
    assert losses == ("thoughtSignature dropped",)


def test_ids_pair_results_with_calls_of_the_same_name_and_an_identical_repeat_is_dropped_as_measured() -> None:
    """Gemini CLI 0.61.0 resends a resumed call's response (once from the call's result, once from the user
    message): an identical repeat is dropped and listed; a different one answering no call is refused."""
    first = model(call("read_file", {"file_path": "a"}, "read_file__c1"), call("read_file", {"file_path": "b"}, "c2"))
    body, losses = translate([user({"text": "go"}), first,
                              user(result("read_file", {"output": "B"}, "c2"), result("read_file", {"output": "A"}),
                                   result("read_file", {"output": "A"}, "read_file__c1"))])
    tools = [m for m in body["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tools] == [("c2", "B"), ("read_file__c1", "A")]
    assert losses == ("repeated identical functionResponse dropped (Chat answers a call once)",)
    with pytest.raises(TranslationError, match="answers no call"):
        translate([user({"text": "go"}), first, user(result("read_file", {"output": "A"}, "read_file__c1"),
                                                     result("read_file", {"output": "other"}, "read_file__c1"))])
    with pytest.raises(TranslationError, match="answers no call"):  # a result of a call never made
        translate([user({"text": "go"}), model({"text": "hm"}), user(result("run_shell_command", {"output": ""}))])
    with pytest.raises(TranslationError, match="answers no call"):  # calls are answered by the next turn only
        translate([user({"text": "go"}), first, user(result("read_file", {"output": "B"}, "c2"),
                                                     result("read_file", {"output": "A"}, "read_file__c1")),
                   model({"text": "x"}), user(result("read_file", {"output": "B"}, "c2"))])


def test_a_structured_response_is_sent_as_its_json_and_a_user_text_after_results_follows_the_tool_messages() -> None:
    body, losses = translate([user({"text": "go"}), model(call("f", {})),
                              user({"text": "note"}, result("f", {"output": "x", "extra": [1, "é"]}))])
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "user"]
    assert json.loads(body["messages"][2]["content"]) == {"output": "x", "extra": [1, "é"]}
    assert body["messages"][1]["content"] is None
    assert losses == ("user content before a functionResponse moved after the tool messages",)


def test_tools_config_and_generation_settings_map_and_the_rest_is_listed() -> None:
    declarations: list[dict[str, Any]] = [{"name": "read_file", "description": "read", "parametersJsonSchema": {
                        "type": "object", "properties": {"file_path": {"type": "string"}}}},
                    {"name": "legacy", "parameters": {"type": "OBJECT", "properties": {
                        "n": {"type": "INTEGER"}, "tags": {"type": "ARRAY", "items": {"type": "STRING"}}}}},
                    {"name": "bare", "behavior": "NON_BLOCKING"}]
    body, losses = translate(
        [user({"text": "hi"})], tools=[{"functionDeclarations": declarations}, {"googleSearch": {}}],
        toolConfig={"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["read_file"]}},
        generationConfig={"temperature": 0.2, "topP": 0.9, "topK": 40, "maxOutputTokens": 512, "seed": 7,
                          "stopSequences": ["END"], "thinkingConfig": {"thinkingBudget": 0},
                          "responseMimeType": "application/json", "candidateCount": 1},
        safetySettings=[{"category": "HARM_CATEGORY_X", "threshold": "BLOCK_NONE"}])
    functions = [tool["function"] for tool in body["tools"]]
    assert [f["name"] for f in functions] == ["read_file", "legacy", "bare"]
    assert functions[0]["parameters"] is declarations[0]["parametersJsonSchema"]  # shared, not copied
    assert functions[1]["parameters"] == {"type": "object", "properties": {
        "n": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}}
    assert functions[2]["parameters"] == {"type": "object", "properties": {}}
    assert body["tool_choice"] == {"type": "function", "function": {"name": "read_file"}}
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"], body["stop"]) == (
        0.2, 0.9, 512, 7, ["END"])
    assert body["response_format"] == {"type": "json_object"}
    assert set(losses) == {"function declaration field 'behavior' dropped", "built-in tool 'googleSearch' dropped",
                           "generationConfig field 'topK' dropped", "generationConfig field 'thinkingConfig' dropped",
                           "request field 'safetySettings' dropped"}
    assert gemini_to_chat(with_route(ROUTE, {"contents": [user({"text": "x"})], "generationConfig": {
        "maxOutputTokens": 5}}), ChatOptions(max_tokens_field="max_completion_tokens")).body[
        "max_completion_tokens"] == 5


def test_images_become_image_parts_and_other_media_placeholders_that_are_listed() -> None:
    parts = [{"text": "look"}, {"inlineData": {"mimeType": "image/png", "data": "AAAA"}},
             {"inlineData": {"mimeType": "audio/wav", "data": "BBBB"}},
             {"fileData": {"mimeType": "video/mp4", "fileUri": "gs://x"}}]
    body, losses = translate([user(*parts)])
    content = body["messages"][0]["content"]
    assert content[1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    assert "audio/wav" in content[2]["text"] and "file omitted" in content[3]["text"]
    assert len(losses) == 2
    text_only = gemini_to_chat(with_route(ROUTE, {"contents": [user(*parts[:2])]}), ChatOptions(images=False))
    assert "image omitted" in text_only.body["messages"][0]["content"][1]["text"]


@pytest.mark.parametrize(("contents", "fields", "why"), [
    ([user({"text": "a", "functionCall": {"name": "x"}})], {}, "exactly one"),
    ([user({})], {}, "exactly one"),
    ([user({"text": 3})], {}, "expected a string"),
    ([{"role": "tool", "parts": [{"text": "x"}]}], {}, "unknown role"),
    ([user({"text": "x"}), model({"executableCode": {"code": "1"}})], {}, "cannot be translated"),
    ([user({"text": "x"}), model(call("f", "not an object"))], {}, "expected an object"),
    ([user({"text": "x"}), model({"functionCall": {"args": {}}})], {}, "expected a string"),
    ([user({"text": "x"})], {"generationConfig": {"candidateCount": 2}}, "one candidate"),
    ([user({"text": "x"})], {"systemInstruction": {"parts": [{"inlineData": {}}]}}, "not text"),
    ([user({"text": "x"})], {"tools": [{"functionDeclarations": [{"description": "no name"}]}]}, "expected a string"),
    ([user({"text": "x"})], {"tools": [{"functionDeclarations": [{"name": "f", "parameters": []}]}]}, "object"),
    ([user({"text": "x"})], {"toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}}, "unknown mode"),
    ([], {}, "nothing to send"),
    ("not a list", {}, "list of objects"),
])
def test_odd_requests_are_refused(contents: Any, fields: dict[str, Any], why: str) -> None:
    with pytest.raises(TranslationError, match=why):
        translate(contents, **fields)


def test_a_schema_nested_too_deep_is_refused_not_a_recursion_error() -> None:
    schema: dict[str, Any] = {"type": "STRING"}
    for _ in range(MAX_SCHEMA_DEPTH + 5):
        schema = {"type": "OBJECT", "properties": {"x": schema}}
    with pytest.raises(TranslationError, match="nested deeper"):
        translate([user({"text": "x"})], tools=[{"functionDeclarations": [{"name": "f", "parameters": schema}]}])


KEYS = ["role", "parts", "text", "thought", "functionCall", "functionResponse", "name", "args", "id", "response",
        "output", "error", "inlineData", "mimeType", "data", "fileData", "thoughtSignature", "functionDeclarations",
        "parameters", "parametersJsonSchema", "type", "mode", "functionCallingConfig", "maxOutputTokens"]
WORDS = ["user", "model", "system", "f", "image/png", "OBJECT", "ANY", "AUTO", "NONE", "application/json"]
leaf = st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.text(max_size=3), st.sampled_from(WORDS))
value = st.recursive(leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
                     max_leaves=15)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(st.sampled_from(["contents", "systemInstruction", "tools", "toolConfig", "generationConfig",
                                        "labels"]), value, max_size=5))
def test_any_request_translates_to_a_chat_body_or_is_refused(body: dict[str, Any]) -> None:
    """Anything but ``TranslationError`` escapes and fails the test."""
    try:
        translated = gemini_to_chat(with_route(ROUTE, body))
    except TranslationError as error:
        assert str(error)
        return
    assert translated.body["model"] == "gemini-2.5-pro"
    assert all(m["role"] in ("system", "user", "assistant", "tool") for m in translated.body["messages"])
