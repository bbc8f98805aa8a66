"""ScriptedModel's vLLM-style token ids and logprobs (``--capture-tokens`` tests against a real answer shape).

When a Chat Completions request asks (``return_token_ids``, ``logprobs``, ``return_tokens_as_token_ids``: vLLM's
fields), the answer carries what vLLM's does: ``prompt_token_ids`` at the top level (a stream: in its first
chunk), ``token_ids`` per choice (a stream: each chunk's delta tokens) and ``logprobs.content`` entries
``{token, logprob, bytes, top_logprobs}`` (``token`` = ``"token_id:<id>"`` when asked); ``usage`` then counts the
ids. The tokenizer is byte-level and exact: a text's UTF-8 bytes, each + ``OFFSET`` (so any id can be decoded
back and a test sees every id it was sent). The prompt's text is the request's ``messages`` as compact JSON.

``token_mode`` makes a hostile server: ``mismatch`` (one id more than ``usage`` counts), ``non_integer`` (an id
sent as a string), ``huge`` (``HUGE`` prompt ids), ``wrong_text`` (ids of another text than the one sent, as many
as ``usage`` counts: what no check without the tokenizer can see); or answers like SGLang (``sglang``): the ids per
choice (``choices[].token_ids``, ``choices[].prompt_token_ids`` with ``return_prompt_token_ids``), logprob tokens
as text (SGLang has no ``return_tokens_as_token_ids``), and a streamed request asking for ids refused with HTTP 400
and SGLang's message (its ``serving_chat.py`` rejects ``return_token_ids`` / ``return_prompt_token_ids`` with
``stream``). What was sent goes into the request log entry as
``sent_tokens``: the ids the tests compare with the bridge's record, id for id.
"""

from __future__ import annotations

from typing import Any

import orjson

OFFSET = 3
HUGE = 3_000_000
MODES = ("vllm", "mismatch", "non_integer", "huge", "wrong_text", "sglang")
#: SGLang's answer to a streamed Chat request asking for ids (its ErrorResponse, HTTP 400)
SGLANG_STREAM_REFUSAL = {
    "return_prompt_token_ids": "return_prompt_token_ids is not supported with streaming. Please set stream=false when "
                               "using return_prompt_token_ids=true.",
    "return_token_ids": "return_token_ids is not supported with streaming on /v1/chat/completions. Please set "
                        "stream=false when using return_token_ids=true.",
}


def tokenize(text: str) -> list[int]:
    """The byte-level ids of ``text``."""
    return [byte + OFFSET for byte in text.encode()]


def logprob(token: int) -> float:
    """A deterministic logprob per id (in (-1, 0))."""
    return -((token * 7919) % 1000 + 1) / 1001


def asked(body: dict[str, Any]) -> bool:
    return body.get("return_token_ids") is True or body.get("logprobs") is True


def refusal(body: dict[str, Any], mode: str) -> dict[str, Any] | None:
    """SGLang's HTTP 400 error body for a streamed request asking for ids (``sglang`` mode), else None."""
    if mode != "sglang" or not body.get("stream"):
        return None
    for field, message in SGLANG_STREAM_REFUSAL.items():
        if body.get(field) is True:
            return {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}
    return None


def prompt_ids(body: dict[str, Any], mode: str) -> list[Any]:
    if mode == "huge":
        return [OFFSET] * HUGE
    return tokenize(orjson.dumps(body.get("messages")).decode())


def delta_text(delta: dict[str, Any]) -> str:
    """The generated text of one delta (or whole message), in the order the stream sends it."""
    parts = [delta.get("reasoning_content") or "", delta.get("content") or ""]
    for call in delta.get("tool_calls") or []:
        function = call.get("function") or {}
        parts += [function.get("name") or "", function.get("arguments") or ""]
    return "".join(parts)


def logprobs_of(ids: list[int], as_ids: bool) -> dict[str, Any]:
    return {"content": [{"token": f"token_id:{token}" if as_ids else chr(token - OFFSET),
                         "logprob": logprob(token), "bytes": [token - OFFSET], "top_logprobs": []}
                        for token in ids]}


class TokenAnswer:
    """Decorates one answer's chunks (or whole completion) with the fields the request asked for."""

    def __init__(self, body: dict[str, Any], mode: str = "vllm") -> None:
        if mode not in MODES:
            raise ValueError(f"token_mode must be one of {', '.join(MODES)}")
        self.mode = mode
        self.want_ids = body.get("return_token_ids") is True
        self.want_logprobs = body.get("logprobs") is True
        self.as_ids = body.get("return_tokens_as_token_ids") is True and mode != "sglang"
        #: SGLang: the prompt ids per choice, asked for apart
        self.choice_prompt = mode == "sglang" and body.get("return_prompt_token_ids") is True
        self.prompt: list[Any] = prompt_ids(body, mode) if self.want_ids or self.choice_prompt else []
        self.completion: list[int] = []
        self.logprobs: list[float] = []
        self.prompt_sent = False

    def _choice(self, choice: dict[str, Any], text: str) -> dict[str, Any]:
        ids = tokenize(text)
        if self.mode == "wrong_text":  # the ids of another text (each byte one higher), as many
            ids = [token + 1 for token in ids]
        self.completion += ids
        out = dict(choice)
        if self.choice_prompt and not self.prompt_sent:
            out["prompt_token_ids"] = self.prompt
            self.prompt_sent = True
        if self.want_ids:
            sent: list[Any] = list(ids)
            if self.mode == "non_integer" and sent:
                sent[0] = str(sent[0])
            out["token_ids"] = sent
        if self.want_logprobs:
            out["logprobs"] = logprobs_of(ids, self.as_ids)
            self.logprobs += [logprob(token) for token in ids]
        return out

    def chunk(self, chunk: dict[str, Any], first: bool) -> dict[str, Any]:
        out = dict(chunk)
        out["choices"] = [self._choice(choice, delta_text(choice.get("delta") or {}))
                          for choice in chunk.get("choices") or []]
        if first and self.want_ids and self.mode != "sglang":
            out["prompt_token_ids"] = self.prompt
        if out.get("usage") is not None:
            out["usage"] = self.usage()
        return out

    def whole(self, completion: dict[str, Any]) -> dict[str, Any]:
        out = dict(completion)
        out["choices"] = [self._choice(choice, delta_text(choice.get("message") or {}))
                          for choice in completion.get("choices") or []]
        if self.want_ids and self.mode != "sglang":
            out["prompt_token_ids"] = self.prompt
        out["usage"] = self.usage()
        return out

    def usage(self) -> dict[str, int]:
        """What vLLM counts: the ids (``mismatch``: one completion token fewer than sent)."""
        completion = len(self.completion) - (1 if self.mode == "mismatch" else 0)
        return {"prompt_tokens": len(self.prompt), "completion_tokens": completion,
                "total_tokens": len(self.prompt) + completion}

    def sent(self) -> dict[str, Any]:
        """What the answer carried (the request log's ``sent_tokens``)."""
        return {"prompt_token_ids": self.prompt if self.mode != "huge" else len(self.prompt),
                "completion_token_ids": self.completion, "logprobs": self.logprobs}
