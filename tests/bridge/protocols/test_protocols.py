"""make_upstream: one registry of every protocol's pass-through upstream and stub."""

from __future__ import annotations

import pytest

from forkpoint.bridge.protocols import make_upstream
from forkpoint.bridge.protocols.anthropic import AnthropicStubUpstream, AnthropicUpstream
from forkpoint.bridge.protocols.gemini import GeminiStubUpstream, GeminiUpstream
from forkpoint.bridge.protocols.openai_chat import ChatStubUpstream, OpenAIChatUpstream
from forkpoint.bridge.protocols.openai_responses import OpenAIResponsesUpstream, ResponsesStubUpstream
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.protocols import UPSTREAMS

KEY = "sk-registry-key-0001"


def test_each_protocol_builds_its_own_pass_through_and_stub() -> None:
    assert isinstance(make_upstream("anthropic-messages", "stub", None, None), AnthropicStubUpstream)
    assert isinstance(make_upstream("openai-responses", "stub", None, None), ResponsesStubUpstream)
    assert isinstance(make_upstream("openai-chat", "stub", "http://ignored", KEY), ChatStubUpstream)
    anthropic = make_upstream("anthropic-messages", "anthropic", None, KEY)
    assert isinstance(anthropic, AnthropicUpstream) and anthropic.url == "https://api.anthropic.com/v1/messages"
    responses = make_upstream("openai-responses", "openai-responses", "http://127.0.0.1:9/v1", KEY)
    assert isinstance(responses, OpenAIResponsesUpstream) and responses.url == "http://127.0.0.1:9/v1/responses"
    chat = make_upstream("openai-chat", "openai-chat", None, KEY)
    assert isinstance(chat, OpenAIChatUpstream) and chat.url == "https://api.openai.com/v1/chat/completions"
    assert KEY not in repr(chat)
    gemini = make_upstream("google-generate-content", "gemini", None, KEY)
    assert isinstance(gemini, GeminiUpstream) and gemini.url == "https://generativelanguage.googleapis.com/v1beta"
    assert isinstance(make_upstream("google-generate-content", "stub", None, None), GeminiStubUpstream)
    assert sorted(UPSTREAMS) == ["anthropic", "gemini", "openai-chat", "openai-responses", "stub"]


@pytest.mark.parametrize(("protocol", "name", "key", "message"), [
    ("anthropic-messages", "anthropic", None, "needs ANTHROPIC_API_KEY"),
    ("openai-chat", "openai-chat", "", "needs OPENAI_API_KEY"),
    ("openai-chat", "anthropic", KEY, "forkpoint translates only"),
    ("anthropic-messages", "openai-responses", KEY, "forkpoint translates only"),
    ("gopher", "stub", None, "no bridge protocol 'gopher'"),
    ("openai-chat", "gopher", KEY, "unknown upstream 'gopher'"),
])
def test_a_missing_key_or_an_unsupported_pair_is_a_configuration_error(protocol: str, name: str, key: str | None,
                                                                        message: str) -> None:
    with pytest.raises(ReplayError, match=message) as caught:
        make_upstream(protocol, name, None, key)
    assert caught.value.kind is ErrorKind.CONFIGURATION
