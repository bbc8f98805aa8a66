"""Translating upstreams: an Anthropic Messages (Claude Code), Responses (Codex) or Gemini API (Gemini CLI) agent on a
Chat Completions server (``--upstream openai-chat``: OpenAI, vLLM, SGLang, Ollama...).

The I/O shell around ``bridge.translate.pipeline``: the validated agent body (with the request's route, for a
protocol that carries the model in the URL) is translated (a body the translator
cannot carry without silent loss is refused before anything leaves the bridge), POSTed to ``<url>/chat/completions``
with the bridge's key, and the Chat answer is translated back and written to the agent chunk by chunk as it
arrives (never buffered whole). The bridge's key is redacted from every byte, message and fact on the way
(``bridge.secret``; a key split across deltas too). The losses of a translation (names, never content) join the
request's record. Failures before the first byte reached the agent are retried like a pass-through's
(``post_with_retries``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets

import aiohttp
import orjson
from aiohttp import web

from forkpoint.bridge.protocols.openai_chat import OpenAIChatUpstream
from forkpoint.bridge.secret import UpstreamKey
from forkpoint.bridge.translate.common import TranslationError
from forkpoint.bridge.translate.pipeline import AnswerStream, Prepared, prepare, translation_of, whole_answer
from forkpoint.bridge.translate.retry import RetryPolicy
from forkpoint.bridge.translate.sampling import SamplingPins
from forkpoint.bridge.translate.usage import Usage
from forkpoint.bridge.upstream import (
    ANSWER_READER,
    ANSWER_TOKENS,
    MAX_ERROR_BYTES,
    NO_RETRIES,
    SSE_HEADERS,
    AnswerClock,
    Sent,
    UpstreamRefusal,
    begin_capture,
    cut,
    end_for_agent,
    error_message,
    failed_attempt,
    failure_of,
    next_chunk,
    post_within,
    route_path,
    timed_out,
    write_to_agent,
)
from forkpoint.bridge.usage_tap import usage_of
from forkpoint.core.model import JsonObject
from forkpoint.core.protocols import load, wire

#: the most of a non-streamed completion or an upstream error body the bridge reads
MAX_ANSWER_BYTES = 64 * 1024 * 1024
PASSED_ERROR_HEADERS = ("retry-after", "retry-after-ms", "x-should-retry")


class TranslatingChatUpstream(OpenAIChatUpstream):
    """An agent speaking ``agent`` (a registered protocol with a ``chat`` translation) answered by a Chat
    Completions server (its ``name`` is the Chat upstream's)."""

    def __init__(self, agent: str, base_url: str, api_key: str, pins: SamplingPins | None = None,
                 retry: RetryPolicy = NO_RETRIES, **timeouts: float) -> None:
        super().__init__(base_url, api_key, retry=retry, **timeouts)
        self.agent = agent
        self.id_prefix = translation_of(agent).id_prefix
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
        return load(self.agent).error(status, message)

    def refusal(self, status: int, message: str) -> web.Response:
        """The agent's protocol's non-retryable error (a deterministic failure of the Chat server)."""
        return load(self.agent).refusal(status, message)

    def answer_id(self) -> str:
        return self.id_prefix + secrets.token_hex(12)

    async def send(self, request: web.Request, body: JsonObject) -> tuple[web.StreamResponse, Sent]:
        assert self._session is not None, "upstream not opened"
        try:
            prepared = prepare(self.agent, body, self.pins, route=route_path(request))
        except TranslationError as error:
            raise UpstreamRefusal(f"the request cannot be translated to Chat Completions: {error}") from None
        facts: JsonObject = {"translated": f"{wire(self.agent).upstream} -> {self.name}",
                             "losses": sorted(set(prepared.losses))}
        if prepared.changes:
            facts["pins"] = [change.as_json() for change in prepared.changes]
        clock = self.clock()
        outgoing = begin_capture(request, self.name, prepared.body, strip=False)  # --capture-tokens: only read
        attempted = await post_within(clock, self._session, self.url, orjson.dumps(outgoing),
                                      self.headers_for(request), self.retry)
        refused, peeked = await self._refused_stream_ids(request, attempted, prepared.body)
        if refused and attempted.response is not None:  # SGLang refused the id fields on a stream: once again
            attempted.response.close()  # without them
            peeked = None
            outgoing = begin_capture(request, self.name, prepared.body, strip=False)
            attempted = await post_within(clock, self._session, self.url, orjson.dumps(outgoing),
                                          self.headers_for(request), self.retry)
        facts = attempted.facts(facts) or facts
        if attempted.response is None:
            status, message, failure = failed_attempt(attempted)
            return self.error(status, self.key.text(message)), self._redacted(
                Sent(status, False, message, facts=facts, failure=failure))
        response: web.StreamResponse
        async with attempted.response as upstream:
            if upstream.status != 200:
                response, sent = await self._failed(upstream, facts, peeked)
            elif prepared.stream:
                response, sent = await self._stream(request, upstream, prepared, facts, clock)
            else:
                response, sent = await self._whole(request, upstream, prepared, facts, clock)
        return response, self._redacted(sent)

    def _redacted(self, sent: Sent) -> Sent:
        """The request's record says nothing of the key either (its error and losses can quote the upstream)."""
        facts = sent.facts
        if facts is not None and isinstance(facts.get("losses"), list):
            facts = {**facts, "losses": [self.key.text(str(loss)) for loss in facts["losses"]]}
        error = self.key.text(sent.error) if sent.error is not None else None
        return dataclasses.replace(sent, error=error, facts=facts)

    async def _failed(self, upstream: aiohttp.ClientResponse, facts: JsonObject,
                      peeked: bytes | None = None) -> tuple[web.Response, Sent]:
        """The Chat server's error, re-shaped for the agent (its message kept, the key redacted); a 4xx the bridge
        does not retry as the agent's non-retryable error. ``peeked``: the error body, already read."""
        raw = peeked if peeked is not None else await upstream.content.read(MAX_ERROR_BYTES)
        message = f"upstream HTTP {upstream.status}: {error_message(raw, self._api_key)}"
        status = upstream.status
        deterministic = 400 <= status < 500 and status not in (408, 429)
        response = self.refusal(status, message) if deterministic else self.error(status, message)
        for name in PASSED_ERROR_HEADERS:
            if name in upstream.headers:
                response.headers[name] = self.key.text(upstream.headers[name])
        return response, Sent(status, True, f"upstream answered HTTP {status}", facts=facts,
                              failure=failure_of(status), detail=message)

    async def _whole(self, request: web.Request, upstream: aiohttp.ClientResponse, prepared: Prepared,
                     facts: JsonObject, clock: AnswerClock) -> tuple[web.Response, Sent]:
        try:
            async with asyncio.timeout_at(clock.deadline):
                raw = await upstream.content.read(MAX_ANSWER_BYTES)
        except (TimeoutError, aiohttp.ClientError) as error:
            message = clock.why() if isinstance(error, TimeoutError) else f"upstream answer broke: {error}"
            status = 504 if timed_out(message) else 502
            return self.error(status, message), Sent(status, True, message, facts=facts,
                                                     failure=failure_of(200, message, broken=True))
        try:
            answer, losses = whole_answer(prepared, raw, answer_id=self.answer_id())
        except TranslationError as error:
            message = f"the model server's answer could not be translated: {error}"
            return self.refusal(400, message), Sent(400, True, message, facts=facts, failure="invalid_answer")
        facts["losses"] = sorted({*facts["losses"], *losses})
        if (tokens := request.get(ANSWER_TOKENS)) is not None:
            tokens.feed(raw)
            tokens.flush()
        body = self.key.data(orjson.dumps(answer))
        return web.Response(body=body, content_type="application/json"), Sent(200, True, usage=usage_of(raw),
                                                                                facts=facts)

    async def _stream(self, request: web.Request, upstream: aiohttp.ClientResponse, prepared: Prepared,
                      facts: JsonObject, clock: AnswerClock) -> tuple[web.StreamResponse, Sent]:
        """Each upstream chunk's translation is written at once: the agent sees the answer as it arrives."""
        answer = AnswerStream(prepared, answer_id=self.answer_id(), key=self.key)
        bytes_out = self.key.stream()  # and every translated byte: the same redactor as a pass-through relay
        response = web.StreamResponse(status=200, headers=SSE_HEADERS)
        await response.prepare(request)
        broken = gone = None
        tokens = request.get(ANSWER_TOKENS)
        reader = request.get(ANSWER_READER)  # the agent's sub-agent calls, read in the agent's protocol
        while not answer.done:
            chunk, broken = await next_chunk(upstream, clock)
            if broken is not None or not chunk:
                break
            if tokens is not None:
                tokens.feed(chunk)
            for part in answer.feed_parts(chunk):  # one event at a time: a huge text's closing events are each whole
                out = bytes_out.feed(part) if bytes_out is not None else part
                if reader is not None:
                    reader.feed(out)
                if out and (gone := await write_to_agent(response, out)) is not None:
                    break
            if gone is not None:
                break
        if broken is None and gone is None:
            for part in answer.close_parts():
                out = bytes_out.feed(part) if bytes_out is not None else part
                if reader is not None:
                    reader.feed(out)
                if out and (gone := await write_to_agent(response, out)) is not None:
                    break
            if gone is None:
                tail = bytes_out.flush() if bytes_out is not None else b""
                if reader is not None:
                    reader.feed(tail)
                gone = await end_for_agent(response, tail)
        if tokens is not None:
            tokens.flush()
        facts["losses"] = sorted({*facts["losses"], *answer.losses})
        reported = None if answer.usage == Usage() else answer.usage.as_json()  # a server ignoring include_usage
        failure = failure_of(200, broken, broken=True) if broken is not None else (
            "failed_answer" if answer.error is not None and gone is None else None)
        sent = Sent(200, True, broken or gone or answer.error, reported, facts, broken is not None, failure)
        if broken is not None:
            cut(request)  # the agent sees the break, not a cleanly ended half answer
        return response, sent
