"""responses_chat.py: Responses requests -> Chat Completions requests, on every recorded Codex request and on
each item kind (custom tools, reasoning, outputs with images), with losses listed and unknown items refused."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forkpoint.bridge.translate.common import ChatOptions, TranslationError
from forkpoint.bridge.translate.responses_chat import responses_to_chat

REQUESTS = Path(__file__).parents[2] / "fixtures" / "codex" / "requests"
RECORDED = sorted(REQUESTS.glob("*/*/*_request.json"))
Check = Callable[[dict[str, Any]], None]
# tools as Codex sends them (the recorded bodies keep only their hash): a function, the freeform apply_patch, a
# hosted web_search
EXEC = {"type": "function", "name": "exec_command", "description": "Runs a command.", "strict": False,
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"],
                       "additionalProperties": False}}
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Use the `apply_patch` tool to edit files.",
               "format": {"type": "grammar", "syntax": "lark", "definition": 'start: begin_patch hunk+ end_patch'}}
WEB_SEARCH = {"type": "web_search", "external_web_access": False}


def request(*items: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-5.5", "input": list(items), **extra}


def message(role: str, *texts: str, kind: str = "input_text") -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": kind, "text": t} for t in texts]}


def test_recorded_requests_exist() -> None:
    assert len(RECORDED) == 42


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: "/".join(p.parts[-3:]))
def test_real_codex_requests_translate_to_valid_chat(path: Path, chat_request_valid: Check) -> None:
    source = json.loads(path.read_text())
    translated = responses_to_chat({**source, "tools": [EXEC, APPLY_PATCH, WEB_SEARCH]})
    chat = translated.body
    chat_request_valid(chat)
    assert chat["stream"] is True and chat["reasoning_effort"] == source["reasoning"]["effort"]
    assert chat["parallel_tool_calls"] is True and chat["tool_choice"] == "auto"
    calls = [(i["call_id"], i["name"]) for i in source["input"] if i["type"] in ("function_call",
                                                                                  "custom_tool_call")]
    outputs = [i["call_id"] for i in source["input"] if i["type"].endswith("_output")]
    assert [(c["id"], c["function"]["name"]) for m in chat["messages"] for c in m.get("tool_calls", [])] == calls
    assert [m["tool_call_id"] for m in chat["messages"] if m["role"] == "tool"] == outputs
    texts = [p["text"] for i in source["input"] if i["type"] == "message" for p in i["content"]]
    chat_texts = [part for m in chat["messages"] if m["role"] != "tool" and m["content"]
                  for part in ([m["content"]] if isinstance(m["content"], str) else [p["text"] for p in m["content"]])]
    assert chat_texts == texts
    summaries = [s["text"] for i in source["input"] if i["type"] == "reasoning" for s in i["summary"]]
    assert [m["reasoning_content"] for m in chat["messages"] if "reasoning_content" in m] == summaries
    assert ("reasoning encrypted_content dropped" in " ".join(translated.losses)) == bool(summaries)
    assert translated.custom_tools == {"apply_patch"}
    assert "hosted tool 'web_search' (web_search) dropped" in translated.losses
    for field in ("store", "include", "prompt_cache_key"):
        assert f"request field {field!r} dropped" in translated.losses


def test_the_freeform_apply_patch_call_and_tool() -> None:
    source = json.loads((REQUESTS / "0.149.0" / "apply_patch_after_1" / "first_request.json").read_text())
    patch = next(i for i in source["input"] if i["type"] == "custom_tool_call")
    chat = responses_to_chat({**source, "tools": [APPLY_PATCH]}).body
    call = next(c for m in chat["messages"] for c in m.get("tool_calls", []))
    assert call["function"]["name"] == "apply_patch"
    assert json.loads(call["function"]["arguments"]) == {"input": patch["input"]}
    tool = chat["tools"][0]["function"]
    assert tool["parameters"]["properties"] == {"input": {"type": "string"}}
    assert "start: begin_patch hunk+ end_patch" in tool["description"]


def test_instructions_roles_and_assistant_grouping(chat_request_valid: Check) -> None:
    chat = responses_to_chat(request(
        message("developer", "dev"), message("user", "a", "b"),
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}], "encrypted_content": None},
        message("assistant", "Running.", kind="output_text"),
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{\"cmd\":\"ls\"}"},
        {"type": "function_call", "call_id": "c2", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": "two"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        message("assistant", "Done.", kind="output_text"),
        instructions="be brief", tools=[EXEC], tool_choice={"type": "function", "name": "exec_command"})).body
    chat_request_valid(chat)
    assert chat["messages"] == [
        {"role": "system", "content": "be brief"}, {"role": "system", "content": "dev"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "Running.", "reasoning_content": "think", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "exec_command", "arguments": "{\"cmd\":\"ls\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "exec_command", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "assistant", "content": "Done."}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "exec_command"}}


def test_string_input_and_easy_messages() -> None:
    assert responses_to_chat({"model": "m", "input": "hi"}).body["messages"] == [{"role": "user", "content": "hi"}]
    easy = responses_to_chat(request({"role": "user", "content": "hey"})).body
    assert easy["messages"] == [{"role": "user", "content": "hey"}]


def test_outputs_with_images_and_image_inputs(chat_request_valid: Check) -> None:
    png = "data:image/png;base64,iVBORw0KGgo="
    translated = responses_to_chat(request(
        {"type": "function_call", "call_id": "v", "name": "view_image", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "v",
         "output": [{"type": "input_text", "text": "the image"}, {"type": "input_image", "image_url": png}]},
        {"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": png,
                                                         "detail": "high"}]}))
    chat_request_valid(translated.body)
    messages = translated.body["messages"]
    assert messages[1] == {"role": "tool", "tool_call_id": "v", "content": "the image"}
    assert messages[2] == {"role": "user", "content": [{"type": "image_url", "image_url": {"url": png}}]}
    assert messages[3]["content"] == [{"type": "image_url", "image_url": {"url": png, "detail": "high"}}]
    assert "tool output image moved to a user message" in translated.losses
    blind = responses_to_chat(request({"type": "message", "role": "user", "content": [
        {"type": "input_image", "image_url": png}]}), ChatOptions(images=False))
    assert blind.body["messages"][0]["content"] == "[image omitted: the model server takes no images]"
    assert "image replaced by a placeholder (upstream takes no images)" in blind.losses


def test_custom_tool_output_local_shell_and_web_search_items() -> None:
    translated = responses_to_chat(request(
        {"type": "custom_tool_call", "call_id": "p", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "p", "output": "ok"},
        {"type": "local_shell_call", "call_id": "s", "action": {"type": "exec", "command": ["ls"]}},
        {"type": "local_shell_call_output", "call_id": "s", "output": "a"},
        {"type": "web_search_call", "id": "w", "status": "completed"}))
    messages = translated.body["messages"]
    assert messages[0]["tool_calls"][0]["function"] == {"name": "apply_patch",
                                                       "arguments": '{"input":"*** Begin Patch"}'}
    assert messages[2]["tool_calls"][0]["function"]["name"] == "local_shell"
    assert [m["role"] for m in messages] == ["assistant", "tool", "assistant", "tool"]
    assert "web_search_call item dropped" in translated.losses
    assert translated.custom_tools == {"apply_patch"}


def test_settings() -> None:
    translated = responses_to_chat(request(
        message("user", "x"), max_output_tokens=50, temperature=0.1, top_p=0.5,
        reasoning={"effort": "high", "summary": "auto"},
        text={"verbosity": "low", "format": {"type": "json_schema", "name": "out", "schema": {"type": "object"},
                                             "strict": True}}), ChatOptions(reasoning_effort=False))
    chat = translated.body
    assert chat["max_tokens"] == 50 and chat["temperature"] == 0.1 and chat["top_p"] == 0.5
    assert "reasoning_effort" not in chat and "reasoning.summary dropped" in translated.losses
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "out", "schema": {"type": "object"}, "strict": True}}
    assert "text.verbosity dropped" in translated.losses


@pytest.mark.parametrize("item", [
    {"type": "item_reference", "id": "x"},
    {"type": "compaction", "encrypted_content": "x"},
    {"type": "message", "role": "critic", "content": "x"},
    {"type": "message", "role": "user", "content": [{"type": "input_audio", "data": "x"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_image", "file_id": "f"}]},
    {"type": "function_call", "call_id": "c", "name": "n", "arguments": {"not": "a string"}},
])
def test_unknown_items_are_refused(item: dict[str, Any]) -> None:
    with pytest.raises(TranslationError):
        responses_to_chat(request(item))


def test_server_side_state_is_refused() -> None:
    with pytest.raises(TranslationError, match="previous_response_id"):
        responses_to_chat(request(message("user", "x"), previous_response_id="resp_1"))


def test_strict_system_for_codex_developer_messages(chat_request_valid: Check) -> None:
    source = json.loads((REQUESTS / "0.171.0" / "parallel_after_2" / "first_request.json").read_text())
    translated = responses_to_chat(source, ChatOptions(strict_system=True))
    roles = [m["role"] for m in translated.body["messages"]]
    chat_request_valid(translated.body)
    assert roles[0] == "system" and roles.count("system") == 1
    assert translated.body["messages"][-2]["content"].startswith("<system>\n<skills_instructions>")
    assert "system message after the conversation began sent as a user message" in translated.losses
