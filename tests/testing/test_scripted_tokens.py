"""ScriptedModel's vLLM-style token fields over real HTTP: asked for, a streamed and a whole answer carry the same
ids (the byte-level tokenizer decodes back to the answer's text), ``usage`` counts them, and nothing is added to
an answer that did not ask; the hostile modes send what they say."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from forkpoint.testing import ScriptedModel, text, tool_use
from forkpoint.testing.scripted_tokens import OFFSET, logprob

ASK = {"return_token_ids": True, "logprobs": True, "return_tokens_as_token_ids": True}
MESSAGES = [{"role": "user", "content": "go"}]


def post(url: str, body: dict[str, Any]) -> bytes:
    request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return bytes(response.read())


def chunks(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in raw.decode().splitlines()
            if line.startswith("data:") and line[5:].strip() != "[DONE]"]


def decode(ids: list[int]) -> str:
    return bytes(token - OFFSET for token in ids).decode()


def test_stream_and_whole_answers_carry_the_same_ids_and_usage_counts_them() -> None:
    script = [[text("héllo"), tool_use("Bash", {"command": "ls"}, "call_1")]]
    model = ScriptedModel(script, tools_required=False, step_mode="counter", loop_last=True)
    with model.serve() as url:
        whole = json.loads(post(url, {"messages": MESSAGES, **ASK}))
        streamed = chunks(post(url, {"messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True},
                                     **ASK}))
        plain = json.loads(post(url, {"messages": MESSAGES}))
    ids = whole["choices"][0]["token_ids"]
    assert decode(ids) == 'héllo' + "Bash" + '{"command": "ls"}'
    assert [e["logprob"] for e in whole["choices"][0]["logprobs"]["content"]] == [logprob(i) for i in ids]
    assert whole["choices"][0]["logprobs"]["content"][0]["token"] == f"token_id:{ids[0]}"
    assert decode(whole["prompt_token_ids"]) == json.dumps(MESSAGES, separators=(",", ":"))
    assert whole["usage"]["completion_tokens"] == len(ids)
    assert streamed[0]["prompt_token_ids"] == whole["prompt_token_ids"]
    assert [i for c in streamed for choice in c["choices"] for i in choice["token_ids"]] == ids
    assert streamed[-1]["usage"]["prompt_tokens"] == len(whole["prompt_token_ids"])
    assert "prompt_token_ids" not in plain and "token_ids" not in plain["choices"][0]
    assert model.requests[0]["sent_tokens"]["completion_token_ids"] == ids


@pytest.mark.parametrize("mode", ["mismatch", "non_integer"])
def test_hostile_modes_send_what_they_say(mode: str) -> None:
    model = ScriptedModel([[text("abc")]], tools_required=False, token_mode=mode)
    with model.serve() as url:
        whole = json.loads(post(url, {"messages": MESSAGES, **ASK}))
    choice = whole["choices"][0]
    if mode == "mismatch":
        assert whole["usage"]["completion_tokens"] == len(choice["token_ids"]) - 1
    else:
        assert isinstance(choice["token_ids"][0], str)


def test_sglang_mode_answers_ids_per_choice_and_refuses_them_on_a_stream() -> None:
    """SGLang's shapes: unstreamed, ids and prompt ids per choice and logprob tokens as text (it has no
    return_tokens_as_token_ids); streamed with the id fields, HTTP 400 and its message; streamed with logprobs only,
    an answer."""
    import urllib.error

    model = ScriptedModel([[text("abc")]], tools_required=False, token_mode="sglang", loop_last=True)
    with model.serve() as url:
        whole = json.loads(post(url, {"model": "m", "messages": MESSAGES, **ASK, "return_prompt_token_ids": True}))
        choice = whole["choices"][0]
        assert decode(choice["token_ids"]) == "abc" and "prompt_token_ids" not in whole
        assert decode(choice["prompt_token_ids"]) == json.dumps(MESSAGES, separators=(",", ":"))
        assert [entry["token"] for entry in choice["logprobs"]["content"]] == ["a", "b", "c"]
        with pytest.raises(urllib.error.HTTPError) as refused:
            post(url, {"model": "m", "messages": MESSAGES, "stream": True, **ASK})
        assert refused.value.code == 400
        assert "not supported with streaming" in json.loads(refused.value.read())["message"]
        streamed = chunks(post(url, {"model": "m", "messages": MESSAGES, "stream": True, "logprobs": True}))
        assert all("token_ids" not in c["choices"][0] for c in streamed if c["choices"])
    assert [entry.get("refused") is not None for entry in model.requests] == [False, True, False]


def test_wrong_text_mode_sends_the_ids_of_another_text() -> None:
    model = ScriptedModel([[text("abc")]], tools_required=False, token_mode="wrong_text")
    with model.serve() as url:
        whole = json.loads(post(url, {"model": "m", "messages": MESSAGES, **ASK}))
    choice = whole["choices"][0]
    assert choice["message"]["content"] == "abc" and decode(choice["token_ids"]) == "bcd"
    assert whole["usage"]["completion_tokens"] == 3
    assert model.requests[0]["sent_tokens"]["completion_token_ids"] == choice["token_ids"]
