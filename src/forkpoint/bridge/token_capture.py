"""``--capture-tokens``: the token ids and logprobs of every model request, asked of an OpenAI-compatible upstream.

RL trainers (verifiers/prime-rl, ATIF's ``prompt_token_ids``/``completion_token_ids``) need the ids that came out
of the model: retokenising a messages list drifts. vLLM and SGLang return them when asked (their OpenAI serving
protocol models, read for this module):

* vLLM (>= 0.10.2), Chat Completions: ``return_token_ids: true`` -> ``prompt_token_ids`` at the top level (a
  stream: in its first chunk) and ``token_ids`` per choice (a stream: each chunk's delta tokens); ``logprobs:
  true`` -> ``choices[].logprobs.content[]`` with ``{token, logprob}``; ``return_tokens_as_token_ids: true`` makes
  each ``token`` the string ``"token_id:<id>"`` (the completion ids of a server older than ``return_token_ids``).
* SGLang, Chat Completions: ``return_prompt_token_ids`` / ``return_token_ids`` -> ``prompt_token_ids`` /
  ``token_ids`` per choice; ``logprobs`` as OpenAI's.

Unknown request fields are ignored by both servers (OpenAI's own API refuses them: capture is opt-in). What the
agent sees does not change: the fields the bridge added to the request (``ask``) are removed from every answer
chunk before it reaches the agent (``AnswerTokens.feed``; an agent that asked for logprobs itself keeps them), so
its parser meets exactly the answer it would have had. A translating upstream reads the Chat answer itself and
never passes the fields on (``strip=False``: only read).

Per model request one record goes to the run's sidecar (``tokens.jsonl``, ``TokenLog``): the ids, the logprobs,
the sampling parameters sent, a status, and the problems found — never a body, a prompt text, a token's text or
a key. Hostile answers are records, not failures: ids that are not integers refuse the record; counts that
disagree with the answer's usage (or with the logprobs, or the ``token_id:`` strings) are kept and flagged
``mismatch``; arrays beyond ``MAX_TOKENS`` drop the record's ids (``too_large``); the sidecar stops at
``MAX_SIDECAR_BYTES`` with its truncation recorded. An upstream that cannot answer them (another protocol, a
Chat server answering without them) is said once per run (``TokenLog.summary``).

Pure apart from ``TokenLog``'s append-only file; the server and the upstreams only call it. Cost on the hot path:
one ``bytes.find`` per chunk and, for an event that carries the fields, one ``orjson`` parse and dump.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from forkpoint.core.model import JsonObject

#: the sidecar in the run's (or branch's) output dir
SIDECAR = "tokens.jsonl"
SCHEMA = "forkpoint.tokens/v1"
#: the most ids (or logprobs) one array of a record keeps; a longer one drops the record's ids (``too_large``)
MAX_TOKENS = 1 << 20
#: the sidecar's size bound; records past it are counted, not written (``truncated``)
MAX_SIDECAR_BYTES = 256 * 1024 * 1024
#: one SSE event, or a whole JSON answer, larger than this passes untouched and unread (capture lost for it)
MAX_EVENT_BYTES = 64 * 1024 * 1024
#: the largest id accepted (tokenizer vocabularies are far below)
MAX_TOKEN_ID = (1 << 31) - 1
#: what the bridge adds to a Chat Completions request (vLLM's and SGLang's names; each server ignores the other's)
ASKED: dict[str, bool] = {"logprobs": True, "return_token_ids": True, "return_prompt_token_ids": True}
#: added only with ``logprobs`` (it changes the logprob entries' ``token`` text, so never when the agent asked)
AS_IDS = "return_tokens_as_token_ids"
#: the request fields recorded as the sampling parameters (numbers and the model name; never text)
SAMPLING_KEYS = ("model", "temperature", "top_p", "top_k", "min_p", "seed", "max_tokens", "max_completion_tokens",
                 "presence_penalty", "frequency_penalty", "repetition_penalty", "n", "top_logprobs", "stream")
CHAT = "openai-chat"
_MARKERS = (b'"token_ids"', b'"logprobs"', b'"prompt_token_ids"')
_ID_PREFIX = "token_id:"


class Refused(ValueError):
    """An answer's token fields the record cannot keep (not integers, not numbers)."""


def ask(body: JsonObject) -> tuple[JsonObject, frozenset[str]]:
    """The Chat Completions ``body`` asking for ids and logprobs, and the fields the agent did not ask for itself
    (removed again from the answer)."""
    out = dict(body)
    added: set[str] = set()
    for key, value in ASKED.items():
        if body.get(key) is not True:
            out[key] = value
            added.add(key)
    if "logprobs" in added and AS_IDS not in body:
        out[AS_IDS] = True
        added.add(AS_IDS)
    return out, frozenset(added)


def sampling_of(body: JsonObject) -> JsonObject:
    """The sampling parameters a request carried (numbers, booleans and the model name)."""
    found: JsonObject = {}
    for key in SAMPLING_KEYS:
        value = body.get(key)
        if isinstance(value, bool | int | float) or (key == "model" and isinstance(value, str)):
            found[key] = value
    return found


def _ids(value: Any, where: str) -> list[int]:
    if not isinstance(value, list):
        raise Refused(f"{where} is not a list")
    for item in value:
        if type(item) is not int or not 0 <= item <= MAX_TOKEN_ID:
            raise Refused(f"{where} holds a value that is not a token id ({type(item).__name__})")
    return value


def _logprobs(content: Any) -> tuple[list[float], list[int] | None]:
    """The logprobs of ``logprobs.content`` entries, and the ids their ``token_id:<id>`` tokens name (None when
    any token is text)."""
    if not isinstance(content, list):
        raise Refused("logprobs.content is not a list")
    values: list[float] = []
    named: list[int] | None = []
    for entry in content:
        if not isinstance(entry, dict):
            raise Refused("a logprobs.content entry is not an object")
        value = entry.get("logprob")
        if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
            raise Refused("a logprob is not a number")
        values.append(float(value))
        token = entry.get("token")
        if named is not None and isinstance(token, str) and token.startswith(_ID_PREFIX):
            digits = token[len(_ID_PREFIX):]
            named.append(int(digits) if digits.isdigit() and len(digits) < 11 else -1)
        else:
            named = None
    return values, named


@dataclass
class AnswerTokens:
    """One model request's capture: ``feed`` the answer's bytes in order (it returns what the agent gets), then
    ``flush``; ``record`` is the sidecar line. ``strip=False`` only reads (a translating upstream)."""

    added: frozenset[str] = frozenset()
    sampling: JsonObject = field(default_factory=dict)
    strip: bool = True
    auxiliary: bool = False
    #: why nothing can be captured for this request (another protocol): the record says so
    unavailable: str | None = None
    prompt: list[int] | None = None
    completion: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    #: the ids ``token_id:<id>`` logprob tokens named (None once one was text)
    named: list[int] | None = field(default_factory=list)
    saw_ids: bool = False
    saw_logprobs: bool = False
    finish_reason: str | None = None
    problems: list[str] = field(default_factory=list)
    refused: str | None = None
    too_large: bool = False
    _buffer: bytearray = field(default_factory=bytearray)
    _mode: str | None = None  # "sse" | "json" | "raw" (given up: passed untouched)

    # -- the answer's bytes --------------------------------------------------------------------------------------

    def feed(self, chunk: bytes) -> bytes:
        """Read ``chunk`` (any split of the answer); returns the bytes the agent gets now (complete events)."""
        if self._mode is None:
            head = (bytes(self._buffer) + chunk).lstrip()
            if not head:
                self._buffer += chunk
                return b""
            self._mode = "json" if head[:1] == b"{" else "sse"
        if self._mode == "raw":
            return chunk
        self._buffer += chunk
        if len(self._buffer) > MAX_EVENT_BYTES:
            return self._give_up("an answer event larger than the capture reads")
        if self._mode == "json":
            return b""
        return self._events()

    def flush(self) -> bytes:
        """The answer ended: what is still held (a whole JSON answer, rewritten; an unterminated last event)."""
        held, self._buffer = bytes(self._buffer), bytearray()
        if self._mode == "json" and held:
            return self._rewrite(held, held)
        if self._mode == "sse" and held:
            return self._event(held)
        return held

    def _give_up(self, why: str) -> bytes:
        self._mode = "raw"
        self.problems.append(why)
        held, self._buffer = bytes(self._buffer), bytearray()
        return held

    def _events(self) -> bytes:
        out = bytearray()
        start = 0
        buffer = self._buffer
        while True:
            end = buffer.find(b"\n\n", start)
            if end == -1:
                crlf = buffer.find(b"\r\n\r\n", start)
                if crlf == -1:
                    break
                end, size = crlf, 4
            else:
                crlf = buffer.find(b"\r\n\r\n", start, end)
                end, size = (crlf, 4) if crlf != -1 else (end, 2)
            out += self._event(bytes(buffer[start:end + size]))
            start = end + size
        if start:
            del buffer[:start]
        return bytes(out)

    def _event(self, event: bytes) -> bytes:
        """One SSE event: its ``data:`` JSON read and, when it carries added fields, rewritten without them."""
        if not any(marker in event for marker in _MARKERS):
            self._finish_reason(event)
            return event
        lines = event.splitlines(keepends=True)
        data = [line for line in lines if line.startswith(b"data:")]
        if len(data) != 1:
            return event
        payload = data[0][5:].strip()
        rewritten = self._rewrite(payload, event)
        if rewritten is event:
            return event
        ending = b"\r\n\r\n" if event.endswith(b"\r\n\r\n") else b"\n\n"
        kept = b"".join(line for line in lines if line is not data[0] and line.strip())
        return kept + b"data: " + rewritten + ending

    def _finish_reason(self, event: bytes) -> None:
        if b'"finish_reason"' in event and b'"finish_reason":null' not in event.replace(b" ", b""):
            try:
                value = orjson.loads(event.split(b"data:", 1)[1]) if b"data:" in event else None
            except (orjson.JSONDecodeError, IndexError):
                return
            self._read_finish(value)

    def _read_finish(self, value: Any) -> None:
        choices = value.get("choices") if isinstance(value, dict) else None
        for choice in choices if isinstance(choices, list) else ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0 and isinstance(choice.get("finish_reason"),
                                                                                       str):
                self.finish_reason = choice["finish_reason"]

    def _rewrite(self, payload: bytes, original: bytes) -> bytes:
        """Read one JSON chunk (or whole answer); returns it without the added fields, or ``original`` unchanged
        when nothing was removed or it is not a chunk."""
        try:
            value = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return original
        if not isinstance(value, dict):
            return original
        self.read(value)
        if not self.strip or not self.added or not _strip(value, self.added):
            return original
        return orjson.dumps(value)

    # -- reading one chunk -----------------------------------------------------------------------------------------

    def read(self, value: JsonObject) -> None:
        """Take the token fields of one Chat chunk (or whole completion); nothing here raises."""
        if self.refused is not None or self.too_large:
            return
        try:
            self._read(value)
        except Refused as refusal:
            self.refused = str(refusal)
            self.prompt, self.completion, self.logprobs, self.named = None, [], [], None

    def _read(self, value: JsonObject) -> None:
        if "prompt_token_ids" in value and value["prompt_token_ids"] is not None:
            self._prompt(_ids(value["prompt_token_ids"], "prompt_token_ids"))
        choices = value.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                if isinstance(choice, dict) and "index" in choice and "several choices" not in self.problems:
                    self.problems.append("several choices: only choice 0 is recorded")
                continue
            if choice.get("prompt_token_ids") is not None:
                self._prompt(_ids(choice["prompt_token_ids"], "choices[0].prompt_token_ids"))
            if choice.get("token_ids") is not None:
                self.saw_ids = True
                self._extend(self.completion, _ids(choice["token_ids"], "choices[0].token_ids"))
            logprobs = choice.get("logprobs")
            if isinstance(logprobs, dict) and logprobs.get("content") is not None:
                values, named = _logprobs(logprobs["content"])
                self.saw_logprobs = True
                self._extend(self.logprobs, values)
                if named is None:
                    self.named = None
                elif self.named is not None:
                    self._extend(self.named, named)
            if isinstance(choice.get("finish_reason"), str):
                self.finish_reason = choice["finish_reason"]

    def _prompt(self, ids: list[int]) -> None:
        if self.prompt is not None and self.prompt != ids:
            self.problems.append("the answer named two different prompt_token_ids")
        if len(ids) > MAX_TOKENS:
            self._too_large()
            return
        self.prompt = ids

    def _extend(self, into: list[Any], more: list[Any]) -> None:
        if len(into) + len(more) > MAX_TOKENS:
            self._too_large()
            return
        into.extend(more)

    def _too_large(self) -> None:
        self.too_large = True
        self.prompt, self.completion, self.logprobs, self.named = None, [], [], None

    # -- the record ------------------------------------------------------------------------------------------------

    def record(self, usage: JsonObject | None) -> JsonObject:
        """The sidecar line of this request (``usage``: the normalised counts the answer reported, if any)."""
        completion: list[int] | None = self.completion if self.saw_ids else None
        problems = list(self.problems)
        source = "token_ids" if completion is not None else None
        if completion is None and self.named and all(i >= 0 for i in self.named):
            completion, source = list(self.named), "logprobs"
        elif completion is not None and self.named and self.named != completion:
            problems.append("the logprob tokens name other ids than token_ids")
        logprobs = self.logprobs if self.saw_logprobs else None
        if self.unavailable is not None:
            status = "unavailable"
        elif self.refused is not None:
            status, problems = "refused", [*problems, self.refused]
        elif self.too_large:
            status, problems = "too_large", [*problems, f"a token array longer than {MAX_TOKENS}"]
        elif completion is None and self.prompt is None:
            status = "unavailable"
        else:
            problems += _mismatches(self.prompt, completion, logprobs, usage)
            status = "mismatch" if problems else "ok"
        keep = status in ("ok", "mismatch")
        return {"status": status, "auxiliary": self.auxiliary, "problems": problems,
                "reason": self.unavailable or (None if keep or status != "unavailable"
                                               else "the upstream answered without token ids"),
                "sampling": self.sampling, "finish_reason": self.finish_reason,
                "usage": None if usage is None else {"prompt_tokens": usage.get("input_tokens"),
                                                     "completion_tokens": usage.get("output_tokens")},
                "completion_source": source if keep else None,
                "prompt_token_ids": self.prompt if keep else None,
                "completion_token_ids": completion if keep else None,
                "completion_logprobs": logprobs if keep else None}


def _mismatches(prompt: list[int] | None, completion: list[int] | None, logprobs: list[float] | None,
                usage: JsonObject | None) -> list[str]:
    """Where the ids disagree with the answer's own counts (what can be checked without the tokenizer)."""
    found: list[str] = []
    if usage is not None:
        said_prompt, said_completion = usage.get("input_tokens"), usage.get("output_tokens")
        if prompt is not None and said_prompt and len(prompt) != said_prompt:
            found.append(f"{len(prompt)} prompt token ids, usage says {said_prompt}")
        if completion is not None and said_completion and len(completion) != said_completion:
            found.append(f"{len(completion)} completion token ids, usage says {said_completion}")
    if completion is not None and logprobs is not None and len(logprobs) != len(completion):
        found.append(f"{len(logprobs)} logprobs for {len(completion)} completion token ids")
    return found


def _strip(value: JsonObject, added: frozenset[str]) -> bool:
    """Remove the fields the bridge asked for from one chunk, in place; whether anything changed."""
    changed = False
    if "return_token_ids" in added and "prompt_token_ids" in value:
        del value["prompt_token_ids"]
        changed = True
    choices = value.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        if not isinstance(choice, dict):
            continue
        if "return_token_ids" in added and "token_ids" in choice:
            del choice["token_ids"]
            changed = True
        if "return_prompt_token_ids" in added and "prompt_token_ids" in choice:
            del choice["prompt_token_ids"]
            changed = True
        if "logprobs" in added and choice.get("logprobs") is not None:
            choice["logprobs"] = None
            changed = True
    return changed


@dataclass
class TokenLog:
    """The run's capture: hands out one ``AnswerTokens`` per model request and writes its record to the sidecar
    (bounded); ``summary`` is the result metadata's ``token_capture``."""

    path: Path
    max_bytes: int = MAX_SIDECAR_BYTES
    requests: int = 0
    written: int = 0
    dropped: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    #: the first reason a request's tokens were unavailable (said once per run)
    reason: str | None = None
    _bytes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def begin(self, protocol: str, body: JsonObject, *, strip: bool = True,
              auxiliary: bool = False) -> tuple[JsonObject, AnswerTokens]:
        """The body to send (asking for ids when ``protocol`` is Chat Completions) and the request's capture."""
        if protocol != CHAT:
            return body, AnswerTokens(auxiliary=auxiliary, sampling=sampling_of(body), unavailable=(
                f"the {protocol} upstream returns no token ids (only OpenAI-compatible Chat Completions servers "
                "such as vLLM and SGLang do)"))
        asked, added = ask(body)
        return asked, AnswerTokens(added=added, sampling=sampling_of(body), strip=strip, auxiliary=auxiliary)

    def finish(self, answer: AnswerTokens, usage: JsonObject | None) -> None:
        """Write one request's record (never raises: the capture is bookkeeping)."""
        record = answer.record(usage)
        with self._lock:
            self.requests += 1
            record = {"schema": SCHEMA, "request": self.requests, **record}
            self.statuses[record["status"]] = self.statuses.get(record["status"], 0) + 1
            if record["status"] == "unavailable" and self.reason is None:
                self.reason = record["reason"]
            line = orjson.dumps(record) + b"\n"
            if self._bytes + len(line) > self.max_bytes:
                self.dropped += 1
                return
            try:
                with self.path.open("ab") as handle:
                    handle.write(line)
            except OSError:
                self.dropped += 1
                return
            self._bytes += len(line)
            self.written += 1

    def summary(self) -> JsonObject:
        """``token_capture`` in the result metadata: captured, partly, or unavailable (and why, once)."""
        with self._lock:
            kept = self.statuses.get("ok", 0) + self.statuses.get("mismatch", 0)
            status = ("unavailable" if kept == 0 else "captured" if kept == self.requests and not self.dropped
                      else "partial")
            return {"status": status, "reason": self.reason if status != "captured" else None,
                    "file": self.path.name if self.written else None, "requests": self.requests,
                    "records": self.written, "statuses": dict(sorted(self.statuses.items())),
                    "truncated": self.dropped > 0, "dropped_records": self.dropped}
