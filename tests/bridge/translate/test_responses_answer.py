"""responses_answer.py: streamed Chat chunks -> Responses API events Codex reads, shaped like ScriptedModel's
(which real Codex accepts), and a round trip back through the request translation."""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseStreamEvent

from forkpoint.bridge.protocols.openai_responses import response_events as responses_sse_events
from forkpoint.bridge.translate.common import DONE, TranslationError
from forkpoint.bridge.translate.responses_answer import ChatToResponsesStream, chat_completion_to_responses
from forkpoint.bridge.translate.responses_chat import responses_to_chat

Event = tuple[str, dict[str, Any]]
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello ✓ \"quoted\"\n*** End Patch\n"


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta or {},
                                                                       "finish_reason": finish}]}


def usage_chunk() -> dict[str, Any]:
    return {"id": "c", "choices": [], "usage": {"prompt_tokens": 120, "completion_tokens": 30,
                                                "prompt_tokens_details": {"cached_tokens": 100},
                                                "completion_tokens_details": {"reasoning_tokens": 7}}}


def calls(index: int, call_id: str, name: str, arguments: str, piece: int) -> list[dict[str, Any]]:
    first = chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                   "function": {"name": name, "arguments": ""}}]})
    return [first] + [chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[i:i + piece]}}]})
                      for i in range(0, len(arguments), piece)]


def run(chunks: list[Any], custom: frozenset[str] = frozenset({"apply_patch"})) -> list[Event]:
    stream = ChatToResponsesStream(response_id="resp_1", model="m", custom_tools=custom)
    events: list[Event] = []
    for item in chunks:
        events += stream.feed(item)
    return events + stream.end()


def fold(events: list[Event]) -> dict[str, Any]:
    """What Codex builds: checks sequence numbers, one item at a time, deltas adding up to the done values."""
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert all(data["type"] == name for name, data in events)
    assert [name for name, _ in events[:2]] == ["response.created", "response.in_progress"]
    items: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    text = ""
    for name, data in events[2:-1]:
        if name == "response.output_item.added":
            assert current is None and data["output_index"] == len(items)
            current, text = data["item"], ""
        elif name == "response.output_item.done":
            assert current is not None and data["item"]["id"] == current["id"]
            items.append(data["item"])
            current = None
        else:
            assert current is not None
            assert data["item_id"] == current["id"] and data["output_index"] == len(items)
            if name.endswith(".delta"):
                text += data["delta"]
            elif name in ("response.output_text.done", "response.reasoning_summary_text.done"):
                assert data["text"] == text
            elif name == "response.function_call_arguments.done":
                assert data["arguments"] == text
            elif name == "response.custom_tool_call_input.done":
                assert data["input"] == text
    final_name, final = events[-1]
    response: dict[str, Any] = final["response"]
    assert final_name in ("response.completed", "response.incomplete", "response.failed")
    if final_name != "response.failed":
        assert response["output"] == items
    return {"event": final_name, **response}


def full_answer(piece: int) -> list[Any]:
    return [chunk({"role": "assistant", "content": ""}), chunk({"reasoning": "plan"}), chunk({"content": "Patching."}),
            *calls(0, "call_a", "exec_command", json.dumps({"cmd": "ls"}), piece),
            *calls(1, "call_b", "apply_patch", json.dumps({"input": PATCH}), piece),
            chunk(finish="tool_calls"), usage_chunk(), DONE]


def test_items_and_usage() -> None:
    response = fold(run(full_answer(3)))
    assert response["event"] == "response.completed" and response["status"] == "completed"
    reasoning, text, call, patch = response["output"]
    assert reasoning == {"type": "reasoning", "id": "rs_resp_1_0", "encrypted_content": None,
                         "summary": [{"type": "summary_text", "text": "plan"}]}
    assert text["content"] == [{"type": "output_text", "text": "Patching.", "annotations": []}]
    assert call == {"type": "function_call", "id": "fc_resp_1_2", "status": "completed", "name": "exec_command",
                    "arguments": '{"cmd": "ls"}', "call_id": "call_a"}
    assert patch == {"type": "custom_tool_call", "id": "ctc_resp_1_3", "status": "completed",
                     "name": "apply_patch", "input": PATCH, "call_id": "call_b"}
    assert response["usage"] == {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 100,
                                                                               "cache_write_tokens": 0},
                                 "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 7},
                                 "total_tokens": 150}


@pytest.mark.parametrize("piece", [1, 2, 5, 10_000])
def test_one_char_pieces_give_the_same_items(piece: int) -> None:
    assert fold(run(full_answer(piece)))["output"] == fold(run(full_answer(10_000)))["output"]


def test_events_have_the_fields_scripted_model_sends_to_real_codex() -> None:
    """Per event type, at least the fields (and item fields) of ScriptedModel's Responses stream, which the Codex
    e2e tests prove real Codex 0.149/0.171 accept; the extra ones are what the openai types require (below)."""
    items: list[dict[str, Any]] = [
             {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}],
              "encrypted_content": None},
             {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
              "content": [{"type": "output_text", "text": "Patching.", "annotations": []}]},
             {"type": "function_call", "id": "fc_1", "status": "completed", "name": "exec_command",
              "arguments": '{"cmd": "ls"}', "call_id": "call_a"},
             {"type": "custom_tool_call", "id": "ctc_1", "status": "completed", "name": "apply_patch",
              "input": PATCH, "call_id": "call_b"}]
    envelope = {"id": "resp_1", "object": "response", "created_at": 0, "status": "in_progress", "model": "m",
                "output": [], "usage": None}
    usage = {"input_tokens": 1, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 1,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 2}
    extra = {"logprobs", "tool_choice", "tools", "parallel_tool_calls"}

    def shapes(events: list[tuple[str, dict[str, Any]]]) -> dict[str, set[tuple[frozenset[str], frozenset[str]]]]:
        found: dict[str, set[tuple[frozenset[str], frozenset[str]]]] = {}
        for name, data in events:
            item = data.get("item") or data.get("response")
            found.setdefault(name, set()).add((frozenset(data) - extra,
                                               frozenset(item) - extra if isinstance(item, dict) else frozenset()))
        return found

    served = [(name, {"type": name, "sequence_number": number, **data})  # as ScriptedModel writes them
              for number, (name, data) in enumerate(responses_sse_events(envelope, items, usage))]
    assert shapes(run(full_answer(4))) == shapes(served)


def official_event_types() -> dict[str, Any]:
    union = ResponseStreamEvent
    if typing.get_origin(union) is typing.Annotated:
        union = typing.get_args(union)[0]
    return {typing.get_args(cls.model_fields["type"].annotation)[0]: cls for cls in typing.get_args(union)}


def test_events_validate_against_the_openai_package_types() -> None:
    types = official_event_types()
    request = {"tool_choice": "auto", "tools": [], "parallel_tool_calls": True}
    streams = [full_answer(3), [chunk({"content": "cut"}), chunk(finish="length"), DONE], [chunk({"content": "x"})]]
    names = set()
    for chunks in streams:
        stream = ChatToResponsesStream(response_id="resp_1", model="m", custom_tools=frozenset({"apply_patch"}),
                                       request=request)
        for name, data in [e for c in chunks for e in stream.feed(c)] + stream.end():
            types[name].model_validate(data)
            names.add(name)
    assert {"response.completed", "response.incomplete", "response.failed",
            "response.custom_tool_call_input.done", "response.reasoning_summary_text.delta"} <= names


def test_text_only_answer_and_empty_answer() -> None:
    response = fold(run([chunk({"content": "hi"}), chunk(finish="stop"), DONE]))
    assert [i["type"] for i in response["output"]] == ["message"]
    empty = fold(run([chunk({"role": "assistant"}), chunk(finish="stop"), usage_chunk(), DONE]))
    assert empty["output"] == [] and empty["status"] == "completed"


@pytest.mark.parametrize(("finish", "reason"), [("length", "max_output_tokens"), ("content_filter", "content_filter")])
def test_incomplete_answers(finish: str, reason: str) -> None:
    response = fold(run([chunk({"content": "cut"}), chunk(finish=finish), DONE]))
    assert response["event"] == "response.incomplete"
    assert response["incomplete_details"] == {"reason": reason}


@pytest.mark.parametrize("chunks", [[chunk({"content": "x"})], [{"error": {"message": "boom"}}],
                                    [chunk({"content": "x"}), chunk(finish="abort")]])
def test_failures(chunks: list[Any]) -> None:
    response = fold(run(chunks))
    assert response["event"] == "response.failed" and response["status"] == "failed"
    assert response["error"]["message"]


def test_a_custom_call_with_raw_text_arguments_is_passed_raw_and_listed() -> None:
    stream = ChatToResponsesStream(response_id="r", model="m", custom_tools=frozenset({"apply_patch"}))
    fed: list[Any] = [*calls(0, "p", "apply_patch", PATCH, 7), chunk(finish="tool_calls"), DONE]
    events = [e for c in fed
              for e in stream.feed(c)]
    assert fold(events)["output"][0]["input"] == PATCH
    assert stream.losses == ["tool call 'apply_patch' arguments were not valid JSON",
                             "custom tool call 'apply_patch': arguments were not {'input': string}, passed raw"]


def test_nothing_after_the_end() -> None:
    stream = ChatToResponsesStream(response_id="r", model="m")
    stream.feed(chunk(finish="stop"))
    stream.feed(DONE)
    with pytest.raises(TranslationError):
        stream.feed(chunk({"content": "late"}))


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=20), st.text(max_size=20),
       st.lists(st.dictionaries(st.text(min_size=1, max_size=4), st.text(max_size=8), max_size=3), max_size=3),
       st.text(max_size=30), st.integers(min_value=1, max_value=6))
def test_answer_round_trips_through_the_next_request(reasoning: str, text: str, arguments: list[dict[str, str]],
                                                      patch: str, piece: int) -> None:
    """Chat answer -> Responses items (what Codex stores and sends back) -> the next Chat request: the assistant
    turn the model sees again is the one it produced."""
    chunks: list[Any] = [chunk({"reasoning_content": reasoning[i:i + piece]}) for i in range(0, len(reasoning), piece)]
    chunks += [chunk({"content": text[i:i + piece]}) for i in range(0, len(text), piece)]
    expected_calls = []
    for index, args in enumerate(arguments):
        encoded = json.dumps(args)
        chunks += calls(index, f"call_{index}", "exec_command", encoded, piece)
        expected_calls.append({"id": f"call_{index}", "type": "function",
                               "function": {"name": "exec_command", "arguments": encoded}})
    index = len(arguments)
    chunks += calls(index, "call_p", "apply_patch", json.dumps({"input": patch}), piece)
    expected_calls.append({"id": "call_p", "type": "function",
                           "function": {"name": "apply_patch", "arguments": json.dumps({"input": patch},
                                                                                       ensure_ascii=False,
                                                                                       separators=(",", ":"))}})
    output = fold(run([*chunks, chunk(finish="tool_calls"), DONE]))["output"]
    chat = responses_to_chat({"model": "m", "input": output}).body
    expected: dict[str, Any] = {"role": "assistant", "content": text or None, "tool_calls": expected_calls}
    if reasoning:
        expected["reasoning_content"] = reasoning
    assert chat["messages"] == [expected]


def test_whole_completion_agrees_with_the_stream() -> None:
    completion = {"id": "c", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Patching.", "reasoning_content": "plan", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "exec_command",
                                                              "arguments": json.dumps({"cmd": "ls"})}},
            {"id": "call_b", "type": "function", "function": {"name": "apply_patch",
                                                              "arguments": json.dumps({"input": PATCH})}}]}}],
        "usage": usage_chunk()["usage"]}
    response, losses = chat_completion_to_responses(completion, response_id="resp_1", model="m",
                                                    custom_tools=frozenset({"apply_patch"}))
    streamed = fold(run(full_answer(3)))
    assert response["output"] == streamed["output"] and response["usage"] == streamed["usage"]
    assert response["status"] == "completed" and losses == []
    with pytest.raises(TranslationError):
        chat_completion_to_responses({"choices": []}, response_id="r", model="m")
    with pytest.raises(TranslationError):
        chat_completion_to_responses({"choices": [{"message": {"content": "x"}, "finish_reason": "abort"}]},
                                     response_id="r", model="m")
