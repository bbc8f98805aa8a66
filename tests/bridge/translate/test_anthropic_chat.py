"""anthropic_chat.py: Anthropic Messages requests -> Chat Completions requests, on real Claude Code requests and
on every block kind, with losses listed and unknown content refused."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forkpoint.bridge.translate.anthropic_chat import TOOL_ERROR_MARK, anthropic_to_chat
from forkpoint.bridge.translate.common import ChatOptions, TranslationError

REQUESTS = Path(__file__).parents[2] / "fixtures" / "claude_code" / "requests"
RECORDED = sorted(REQUESTS.glob("*/*/*_request.json"))
Check = Callable[[dict[str, Any]], None]


def body(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 100, "messages": list(messages), **extra}


def user(*blocks: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def test_recorded_requests_exist() -> None:
    assert len(RECORDED) == 24


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: "/".join(p.parts[-3:]))
def test_real_claude_requests_translate_to_valid_chat(path: Path, chat_request_valid: Check) -> None:
    source = json.loads(path.read_text())
    translated = anthropic_to_chat(source)
    chat = translated.body
    chat_request_valid(chat)
    assert chat["model"] == source["model"] and chat["max_tokens"] == source["max_tokens"]
    assert chat["stream"] is True
    # the system blocks become the first message, in order
    assert source["system"][0]["text"].startswith("x-anthropic-billing-header:")
    assert chat["messages"][0] == {"role": "system", "content": "\n\n".join(b["text"] for b in source["system"][1:])}
    assert "Claude Code's billing header system block dropped" in translated.losses
    # every tool_use id comes back as a tool_call id, every tool_result as a tool message, in order
    uses = [b["id"] for m in source["messages"] if isinstance(m["content"], list) for b in m["content"]
            if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for m in source["messages"] if isinstance(m["content"], list)
               for b in m["content"] if b["type"] == "tool_result"]
    assert [c["id"] for m in chat["messages"] for c in m.get("tool_calls", [])] == uses
    assert [m["tool_call_id"] for m in chat["messages"] if m["role"] == "tool"] == results
    # each tool message directly follows the assistant turn (or tool message) that called it
    for number, message in enumerate(chat["messages"]):
        if message["role"] == "tool":
            assert chat["messages"][number - 1]["role"] in ("assistant", "tool")
    # tool definitions keep name and schema; the deferred placeholder is dropped, said so
    kept = {t["function"]["name"]: t["function"]["parameters"] for t in chat["tools"]}
    for tool in source["tools"]:
        if tool.get("defer_loading"):
            assert tool["name"] not in kept
        else:
            assert kept[tool["name"]] == tool["input_schema"]
    # the last user text (the boundary nonce) arrives as is
    assert chat["messages"][-1]["role"] in ("user", "tool", "system")
    assert "cache_control dropped" in " ".join(translated.losses)
    for field in ("metadata", "thinking", "context_management", "output_config"):
        assert f"request field {field!r} dropped" in translated.losses


def test_the_nonce_reaches_chat_as_the_last_user_text() -> None:
    source = json.loads((REQUESTS / "2.1.332" / "parallel_after_2" / "first_request.json").read_text())
    chat = anthropic_to_chat(source).body
    nonce = source["messages"][-1]["content"][-1]["text"]
    assert chat["messages"][-1] == {"role": "user", "content": nonce}


def test_system_role_messages_stay_in_place() -> None:
    chat = anthropic_to_chat(body(user(text("a")), {"role": "system", "content": "env"},
                                  {"role": "system", "content": [text("x"), text("y")]})).body
    assert chat["messages"][1:] == [{"role": "system", "content": "env"}, {"role": "system", "content": "x\n\ny"}]


def test_tool_use_and_results_with_errors_and_order(chat_request_valid: Check) -> None:
    source = body(
        user(text("go")),
        assistant(text("two at once"),
                  {"type": "tool_use", "id": "toolu_b", "name": "Bash", "input": {"command": "échо b"}},
                  {"type": "tool_use", "id": "toolu_c", "name": "Read", "input": {}}),
        user({"type": "tool_result", "tool_use_id": "toolu_c", "content": [text("1\tx"), text("2\ty")]},
             {"type": "tool_result", "tool_use_id": "toolu_b", "content": "boom", "is_error": True},
             text("and then?")))
    chat = anthropic_to_chat(source).body
    chat_request_valid(chat)
    assert chat["messages"][1] == {"role": "assistant", "content": "two at once", "tool_calls": [
        {"id": "toolu_b", "type": "function", "function": {"name": "Bash", "arguments": '{"command":"échо b"}'}},
        {"id": "toolu_c", "type": "function", "function": {"name": "Read", "arguments": "{}"}}]}
    assert chat["messages"][2:] == [
        {"role": "tool", "tool_call_id": "toolu_c", "content": "1\tx\n2\ty"},
        {"role": "tool", "tool_call_id": "toolu_b", "content": TOOL_ERROR_MARK + "boom"},
        {"role": "user", "content": "and then?"}]


def test_assistant_with_only_tool_calls_has_null_content() -> None:
    chat = anthropic_to_chat(body(assistant({"type": "tool_use", "id": "t", "name": "n", "input": {"a": 1}}))).body
    assert chat["messages"][0]["content"] is None


def test_empty_content() -> None:
    chat = anthropic_to_chat(body(user(), assistant(), {"role": "user", "content": ""})).body
    assert chat["messages"] == [{"role": "assistant", "content": ""}, {"role": "user", "content": ""}]


def test_thinking_becomes_reasoning_content_and_the_signature_loss_is_listed() -> None:
    translated = anthropic_to_chat(body(assistant(
        {"type": "thinking", "thinking": "hmm", "signature": "c2ln"},
        {"type": "redacted_thinking", "data": "xxx"}, text("ok"))))
    assert translated.body["messages"][0] == {"role": "assistant", "content": "ok", "reasoning_content": "hmm"}
    assert "thinking signature dropped" in translated.losses
    assert "redacted_thinking block dropped" in translated.losses
    other = anthropic_to_chat(body(assistant({"type": "thinking", "thinking": "h", "signature": ""})),
                              ChatOptions(reasoning_field="reasoning"))
    assert other.body["messages"][0]["reasoning"] == "h" and other.losses == ()


PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}


def test_images_become_data_urls_or_placeholders(chat_request_valid: Check) -> None:
    source = body(user(text("look"), {"type": "image", "source": PNG},
                       {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}))
    chat = anthropic_to_chat(source).body
    chat_request_valid(chat)
    assert chat["messages"][0]["content"][1:] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]
    blind = anthropic_to_chat(source, ChatOptions(images=False))
    assert [p["type"] for p in blind.body["messages"][0]["content"]] == ["text", "text", "text"]
    assert "image replaced by a placeholder (upstream takes no images) (x2)" in blind.losses


def test_images_in_tool_results_move_to_a_user_message(chat_request_valid: Check) -> None:
    source = body(assistant({"type": "tool_use", "id": "t1", "name": "Read", "input": {}}),
                  user({"type": "tool_result", "tool_use_id": "t1",
                        "content": [text("an image"), {"type": "image", "source": PNG}]}))
    translated = anthropic_to_chat(source)
    chat_request_valid(translated.body)
    assert translated.body["messages"][1] == {"role": "tool", "tool_call_id": "t1", "content": "an image"}
    assert translated.body["messages"][2]["content"][0]["type"] == "image_url"
    assert "tool_result image moved to a user message" in translated.losses


def test_documents() -> None:
    pdf = {"type": "document", "title": "spec", "source": {"type": "base64", "media_type": "application/pdf",
                                                           "data": "JVBERi0="}}
    plain = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hello"}}
    translated = anthropic_to_chat(body(user(pdf, plain)))
    parts = translated.body["messages"][0]["content"]
    assert parts[0]["text"].startswith("[document: spec]\n[document omitted")
    assert parts[1] == {"type": "text", "text": "hello"}
    assert "document replaced by a placeholder (upstream takes no files)" in translated.losses
    with_files = anthropic_to_chat(body(user(pdf)), ChatOptions(files=True)).body
    assert with_files["messages"][0]["content"] == [
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "spec"}}]


def test_tools_tool_choice_and_parameters(chat_request_valid: Check) -> None:
    schema = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
    source = body(user(text("x")), tools=[
        {"name": "Bash", "description": "run", "input_schema": schema, "cache_control": {"type": "ephemeral"}},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}],
        tool_choice={"type": "any", "disable_parallel_tool_use": True}, stop_sequences=["END"], temperature=0.2,
        top_p=0.9, top_k=5, stream=True)
    translated = anthropic_to_chat(source)
    chat = translated.body
    chat_request_valid(chat)
    assert chat["tools"] == [{"type": "function", "function": {"name": "Bash", "description": "run",
                                                               "parameters": schema}}]
    assert chat["tool_choice"] == "required" and chat["parallel_tool_calls"] is False
    assert chat["stop"] == ["END"] and chat["temperature"] == 0.2 and chat["top_p"] == 0.9
    assert chat["stream_options"] == {"include_usage": True} and "top_k" not in chat
    assert "server tool 'web_search' (web_search_20250305) dropped" in translated.losses
    assert "request field 'top_k' dropped" in translated.losses
    assert "tool field 'cache_control' dropped" in translated.losses


@pytest.mark.parametrize(("choice", "expected"), [
    ({"type": "auto"}, "auto"), ({"type": "none"}, "none"), ({"type": "any"}, "required"),
    ({"type": "tool", "name": "Bash"}, {"type": "function", "function": {"name": "Bash"}})])
def test_tool_choice(choice: dict[str, Any], expected: Any) -> None:
    tools = [{"name": "Bash", "input_schema": {"type": "object"}}]
    assert anthropic_to_chat(body(user(text("x")), tool_choice=choice, tools=tools)).body["tool_choice"] == expected


def test_max_tokens_field_is_configurable() -> None:
    chat = anthropic_to_chat(body(user(text("x"))), ChatOptions(max_tokens_field="max_completion_tokens")).body
    assert chat["max_completion_tokens"] == 100 and "max_tokens" not in chat


@pytest.mark.parametrize("message", [
    user({"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}),
    assistant({"type": "web_search_tool_result", "tool_use_id": "s", "content": []}),
    assistant({"type": "mystery"}),
    user({"type": "image", "source": {"type": "file", "file_id": "f"}}),
    {"role": "tool", "content": "x"},
    user({"type": "text", "text": 3}),
])
def test_unknown_content_is_refused_not_dropped(message: dict[str, Any]) -> None:
    with pytest.raises(TranslationError):
        anthropic_to_chat(body(message))


def test_unknown_top_level_fields_are_listed() -> None:
    translated = anthropic_to_chat(body(user(text("x")), brand_new_option=True))
    assert "request field 'brand_new_option' dropped" in translated.losses
    assert "brand_new_option" not in translated.body


@pytest.mark.parametrize("path", RECORDED[:12:5] + RECORDED[12::5], ids=lambda p: "/".join(p.parts[-3:]))
def test_strict_system_leaves_one_system_message_first(path: Path, chat_request_valid: Check) -> None:
    source = json.loads(path.read_text())
    loose = anthropic_to_chat(source).body["messages"]
    translated = anthropic_to_chat(source, ChatOptions(strict_system=True))
    messages = translated.body["messages"]
    chat_request_valid(translated.body)
    assert [m["role"] for m in messages].count("system") == 1 and messages[0] == loose[0]
    later = [m["content"] for m in loose[1:] if m["role"] == "system"]
    wrapped = [m["content"] for m in messages if m["role"] == "user" and str(m["content"]).startswith("<system>")]
    assert wrapped == [f"<system>\n{t}\n</system>" for t in later] and len(messages) == len(loose)
    assert bool(later) == any("sent as a user message" in loss for loss in translated.losses)


def test_tool_references_and_search_results_in_tool_results() -> None:
    source = body(assistant({"type": "tool_use", "id": "t1", "name": "ToolSearch", "input": {"query": "x"}}),
                  user({"type": "tool_result", "tool_use_id": "t1", "content": [
                      {"type": "tool_reference", "tool_name": "WebFetch"},
                      {"type": "search_result", "source": "https://a", "title": "A", "content": [text("hit")]}]}))
    translated = anthropic_to_chat(source)
    assert translated.body["messages"][1]["content"] == "[tool reference: WebFetch]\n[search result: A (https://a)]\nhit"
    assert "tool_reference read as text (Chat has no tool search)" in translated.losses


def test_tool_choice_without_tools_is_not_sent() -> None:
    translated = anthropic_to_chat(body(user(text("x")), tool_choice={"type": "any"},
                                        tools=[{"type": "web_search_20250305", "name": "web_search"}]))
    assert "tool_choice" not in translated.body and "tools" not in translated.body
    assert "tool_choice dropped (no tools left to choose)" in translated.losses
