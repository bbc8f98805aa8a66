"""Checks shared by the translation tests: a Chat Completions request is valid against the ``openai`` package's
request types (every nested list checked: pydantic validates ``Iterable`` fields lazily)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from openai.types.chat import (
    ChatCompletionContentPartParam,
    ChatCompletionMessageParam,
    ChatCompletionMessageToolCallParam,
    ChatCompletionToolParam,
)
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from pydantic import TypeAdapter

MESSAGE: TypeAdapter[Any] = TypeAdapter(ChatCompletionMessageParam)
PART: TypeAdapter[Any] = TypeAdapter(ChatCompletionContentPartParam)
CALL = TypeAdapter(ChatCompletionMessageToolCallParam)
TOOL = TypeAdapter(ChatCompletionToolParam)
REQUEST = TypeAdapter(CompletionCreateParamsNonStreaming)


def check_chat_request(body: dict[str, Any]) -> None:
    REQUEST.validate_python({**body, "stream": False})
    assert isinstance(body["messages"], list) and body["messages"]
    for message in body["messages"]:
        MESSAGE.validate_python(message)
        if isinstance(message.get("content"), list):
            for part in message["content"]:
                PART.validate_python(part)
        for call in message.get("tool_calls", []):
            CALL.validate_python(call)
            assert isinstance(call["function"]["arguments"], str)
        if message["role"] == "tool":
            assert isinstance(message["content"], str)
    for tool in body.get("tools", []):
        TOOL.validate_python(tool)
    if body.get("stream"):
        assert body["stream_options"] == {"include_usage": True}


@pytest.fixture()
def chat_request_valid() -> Callable[[dict[str, Any]], None]:
    return check_chat_request
