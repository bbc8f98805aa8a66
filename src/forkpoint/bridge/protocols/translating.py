"""Translating upstreams: an Anthropic Messages (Claude Code) or Responses (Codex) agent on a Chat Completions
server (``--upstream openai-chat``: OpenAI, vLLM, SGLang, Ollama...).

The I/O shell around ``bridge.translate.pipeline``: the validated agent body is translated (a body the translator
cannot carry without silent loss is refused before anything leaves the bridge), POSTed to ``<url>/chat/completions``
with the bridge's key, and the Chat answer is translated back and written to the agent chunk by chunk as it
arrives (never buffered whole). The bridge's key is redacted from every byte, message and fact on the way
(``bridge.secret``; a key split across deltas too). The losses of a translation (names, never content) join the
request's record. Failures before the first byte reached the agent are retried like a pass-through's
(``post_with_retries``).
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import ClassVar

import aiohttp
import orjson
from aiohttp import web

from forkpoint.bridge.protocols.openai import openai_error_response
from forkpoint.bridge.protocols.openai_chat import OpenAIChatUpstream
from forkpoint.bridge.secret import UpstreamKey
from forkpoint.bridge.translate.common import TranslationError
from forkpoint.bridge.translate.pipeline import AgentProtocol, AnswerStream, Prepared, prepare, whole_answer
from forkpoint.bridge.translate.retry import RetryPolicy
from forkpoint.bridge.translate.sampling import SamplingPins
from forkpoint.bridge.translate.usage import Usage
from forkpoint.bridge.upstream import (
    NO_RETRIES,
    SSE_HEADERS,
    Sent,
    UpstreamRefusal,
    cut,
    end_for_agent,
    error_response,
    next_chunk,
    post_with_retries,
    write_to_agent,
)
from forkpoint.bridge.usage_tap import usage_of
from forkpoint.model import JsonObject

#: the most of a non-streamed completion or an upstream error body the bridge reads
MAX_ANSWER_BYTES = 64 * 1024 * 1024
MAX_ERROR_BYTES = 64 * 1024
PASSED_ERROR_HEADERS = ("retry-after", "retry-after-ms", "x-should-retry")


class TranslatingChatUpstream(OpenAIChatUpstream):
    """An agent speaking ``agent`` (``anthropic`` or ``openai-responses``) answered by a Chat Completions server."""

    name = "openai-chat"
    id_prefix: ClassVar[dict[str, str]] = {"anthropic": "msg_forkpoint_", "openai-responses": "resp_forkpoint_"}

    def __init__(self, agent: AgentProtocol, base_url: str, api_key: str, pins: SamplingPins | None = None,
                 retry: RetryPolicy = NO_RETRIES, **timeouts: float) -> None:
        super().__init__(base_url, api_key, retry=retry, **timeouts)
        self.agent = agent
        #: --model and the sampling pins go on the TRANSLATED body (the Chat server's fields)
        self.pins = pins or SamplingPins()
        #: the one redactor (``bridge.secret``) every byte, message and fact of an answer passes
        self.key = UpstreamKey(api_key)

    def __repr__(self) -> str:  # never show the key
        return f"{type(self).__name__}({self.agent!r}, {self.base_url!r})"

    def headers_for(self, request: web.Request) -> dict[str, str]:
        """Only the bridge's own headers: the agent's are for another protocol (anthropic-beta, openai-beta...)."""
        return {**self.key_headers(self._api_key), "content-type": "application/json",
                "accept-encoding": "identity"}

    def error(self, status: int, message: str) -> web.Response:
        """An error in the AGENT's protocol (the agent parses it, not the Chat server)."""
        if self.agent == "anthropic":
            kind = "rate_limit_error" if status == 429 else "overloaded_error" if status in (503, 529) else "api_error"
            return error_response(status, kind, message)
        return openai_error_response(status, "rate_limit_exceeded" if status == 429 else "server_error", message,
                                     "upstream_error")

    def answer_id(self) -> str:
        return self.id_prefix[self.agent] + secrets.token_hex(12)

    async def send(self, request: web.Request, body: JsonObject) -> tuple[web.StreamResponse, Sent]:
        assert self._session is not None, "upstream not opened"
        try:
            prepared = prepare(self.agent, body, self.pins)
        except TranslationError as error:
            raise UpstreamRefusal(f"the request cannot be translated to Chat Completions: {error}") from None
        facts: JsonObject = {"translated": f"{self.agent} -> openai-chat", "losses": sorted(set(prepared.losses))}
        if prepared.changes:
            facts["pins"] = [change.as_json() for change in prepared.changes]
        attempted = await post_with_retries(self._session, self.url, orjson.dumps(prepared.body),
                                            self.headers_for(request), self.retry)
        facts = attempted.facts(facts) or facts
        if attempted.response is None:
            message = attempted.error or "forkpoint bridge: upstream connection failed"
            return self.error(502, message), Sent(502, False, message, facts=facts)
        response: web.StreamResponse
        async with attempted.response as upstream:
            if upstream.status != 200:
                response, sent = await self._failed(upstream, facts)
            elif prepared.stream:
                response, sent = await self._stream(request, upstream, prepared, facts)
            else:
                response, sent = await self._whole(upstream, prepared, facts)
        return response, self._redacted(sent)

    def _redacted(self, sent: Sent) -> Sent:
        """The request's record says nothing of the key either (its error and losses can quote the upstream)."""
        facts = sent.facts
        if facts is not None and isinstance(facts.get("losses"), list):
            facts = {**facts, "losses": [self.key.text(str(loss)) for loss in facts["losses"]]}
        error = self.key.text(sent.error) if sent.error is not None else None
        return dataclasses.replace(sent, error=error, facts=facts)

    async def _failed(self, upstream: aiohttp.ClientResponse, facts: JsonObject) -> tuple[web.Response, Sent]:
        """The Chat server's error, re-shaped for the agent (its message kept, the key redacted)."""
        raw = await upstream.content.read(MAX_ERROR_BYTES)
        try:
            value = orjson.loads(raw)
            detail = value.get("error", value) if isinstance(value, dict) else value
            message = str(detail.get("message", detail) if isinstance(detail, dict) else detail)
        except orjson.JSONDecodeError:
            message = raw.decode("utf-8", "replace")
        message = self.key.text(message)[:2000]
        response = self.error(upstream.status, f"upstream HTTP {upstream.status}: {message}")
        for name in PASSED_ERROR_HEADERS:
            if name in upstream.headers:
                response.headers[name] = self.key.text(upstream.headers[name])
        return response, Sent(upstream.status, True, f"upstream answered HTTP {upstream.status}", facts=facts)

    async def _whole(self, upstream: aiohttp.ClientResponse, prepared: Prepared,
                     facts: JsonObject) -> tuple[web.Response, Sent]:
        raw = await upstream.content.read(MAX_ANSWER_BYTES)
        try:
            answer, losses = whole_answer(prepared, raw, answer_id=self.answer_id())
        except TranslationError as error:
            message = f"the model server's answer could not be translated: {error}"
            return self.error(502, message), Sent(502, True, message, facts=facts)
        facts["losses"] = sorted({*facts["losses"], *losses})
        body = self.key.data(orjson.dumps(answer))
        return web.Response(body=body, content_type="application/json"), Sent(200, True, usage=usage_of(raw),
                                                                                facts=facts)

    async def _stream(self, request: web.Request, upstream: aiohttp.ClientResponse, prepared: Prepared,
                      facts: JsonObject) -> tuple[web.StreamResponse, Sent]:
        """Each upstream chunk's translation is written at once: the agent sees the answer as it arrives."""
        answer = AnswerStream(prepared, answer_id=self.answer_id(), key=self.key)
        bytes_out = self.key.stream()  # and every translated byte: the same redactor as a pass-through relay
        response = web.StreamResponse(status=200, headers=SSE_HEADERS)
        await response.prepare(request)
        broken = gone = None
        while not answer.done:
            chunk, broken = await next_chunk(upstream)
            if broken is not None or not chunk:
                break
            out = answer.feed(chunk)
            out = bytes_out.feed(out) if bytes_out is not None else out
            if out and (gone := await write_to_agent(response, out)) is not None:
                break
        if broken is None and gone is None:
            tail = answer.close()
            tail = bytes_out.feed(tail) + bytes_out.flush() if bytes_out is not None else tail
            gone = await end_for_agent(response, tail)
        facts["losses"] = sorted({*facts["losses"], *answer.losses})
        reported = None if answer.usage == Usage() else answer.usage.as_json()  # a server ignoring include_usage
        sent = Sent(200, True, broken or gone or answer.error, reported, facts, broken is not None)
        if broken is not None:
            cut(request)  # the agent sees the break, not a cleanly ended half answer
        return response, sent
