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

import itertools
import operator
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
#: what the bridge adds to a Chat Completions request (vLLM's and SGLang's names; each server ignores the other's)
ASKED: dict[str, bool] = {"logprobs": True, "return_token_ids": True, "return_prompt_token_ids": True}
#: added only with ``logprobs`` (it changes the logprob entries' ``token`` text, so never when the agent asked)
AS_IDS = "return_tokens_as_token_ids"
#: the request fields recorded as the sampling parameters (numbers and the model name; never text)
SAMPLING_KEYS = ("model", "temperature", "top_p", "top_k", "min_p", "seed", "max_tokens", "max_completion_tokens",
                 "presence_penalty", "frequency_penalty", "repetition_penalty", "n", "top_logprobs", "stream")
CHAT = "openai-chat"
_ID_PREFIX = "token_id:"


class Refused(ValueError):
    """An answer's token fields the record cannot keep (not integers, not numbers)."""


#: the id fields SGLang refuses on a streamed Chat request (HTTP 400, its ``serving_chat.py``); logprobs it streams
STREAM_REFUSED = ("return_token_ids", "return_prompt_token_ids")
#: why a streamed request's record has no ids once the upstream refused them
STREAM_REFUSED_REASON = ("the upstream refuses token ids on streamed Chat Completions requests (SGLang answers HTTP "
                         "400); streamed requests ask for logprobs only")


def refuses_streamed_ids(error: bytes) -> bool:
    """Whether an upstream's HTTP 400 body is SGLang's refusal of the id fields on a streamed request."""
    return b"not supported with streaming" in error and any(name.encode() in error for name in STREAM_REFUSED)


def ask(body: JsonObject, without: tuple[str, ...] = ()) -> tuple[JsonObject, frozenset[str]]:
    """The Chat Completions ``body`` asking for ids and logprobs (minus the fields ``without``), and the fields the
    agent did not ask for itself (removed again from the answer)."""
    out = dict(body)
    added: set[str] = set()
    for key, value in ASKED.items():
        if body.get(key) is not True and key not in without:
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


#: what the JSON of a valid id list may hold besides its brackets: digits and commas
_ID_CHARS = b"0123456789,"
#: and of a logprob list: numbers (orjson writes NaN and infinities as null: refused)
_NUMBER_CHARS = b"0123456789,.-+eE"
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_ELEVEN = b"0" * 11
_LOGPROB = operator.itemgetter("logprob")
_TOKEN = operator.itemgetter("token")


def _too_long(digits: bytes) -> bool:
    """Whether a run of digits and separators holds a number of more than 10 digits (a byte scan)."""
    return _ELEVEN in digits.translate(_DIGITS_AS_ZERO)


def _check_ids(value: list[Any], where: str) -> list[int]:
    """``value`` when every item is a token id (a non-negative integer of at most 10 digits), else Refused. One
    ``orjson.dumps`` and byte scans, no Python loop: a bool, float, string, null or nested list shows as a byte
    that is not a digit or a comma."""
    dumped = orjson.dumps(value)
    if dumped[:1] != b"[" or dumped[1:-1].translate(None, _ID_CHARS) or _too_long(dumped):
        raise Refused(f"{where} holds a value that is not a token id")
    return value


def _check_numbers(value: list[Any]) -> list[float]:
    """``value`` when every item is a finite number (orjson writes NaN and infinities as null), else Refused."""
    if orjson.dumps(value)[1:-1].translate(None, _NUMBER_CHARS):
        raise Refused("a logprob is not a number")
    return value


def _named_ids(tokens: list[Any]) -> list[int] | None:
    """The ids ``token_id:<id>`` logprob tokens name (vLLM's ``return_tokens_as_token_ids``); None when any token
    is text."""
    try:
        joined = "\n".join(tokens)
    except TypeError:  # a token that is not a string
        return None
    if not tokens or joined.count(_ID_PREFIX) != len(tokens) or not joined.startswith(_ID_PREFIX):
        return None
    body = joined.replace(_ID_PREFIX, "")
    if "\n\n" in body or body.endswith("\n") or not body.replace("\n", "").isascii() \
            or not body.replace("\n", "").isdigit() or _too_long(body.encode()):
        return None
    return list(map(int, body.split("\n")))


@dataclass
class AnswerTokens:
    """One model request's capture: ``feed`` the answer's bytes in order (it returns what the agent gets), then
    ``flush``; ``record`` is the sidecar line. ``strip=False`` only reads (a translating upstream).

    While the answer passes, the token fields are only collected (their lengths bounded): checking every id is
    ``record``'s work, done once the answer reached the agent."""

    added: frozenset[str] = frozenset()
    sampling: JsonObject = field(default_factory=dict)
    strip: bool = True
    auxiliary: bool = False
    #: why nothing can be captured for this request (another protocol): the record says so
    unavailable: str | None = None
    #: why the answer will carry no ids although it is read (not asked: the upstream refuses them on streams)
    no_ids: str | None = None
    prompt: list[Any] | None = None
    #: the choice-0 ``token_ids`` lists and ``logprobs.content`` lists of the chunks, in order (unchecked)
    completion_parts: list[Any] = field(default_factory=list)
    logprob_parts: list[Any] = field(default_factory=list)
    held: int = 0
    finish_reason: str | None = None
    problems: list[str] = field(default_factory=list)
    refused: str | None = None
    too_large: bool = False
    _buffer: bytearray = field(default_factory=bytearray)
    _mode: str | None = None  # "sse" | "json" | "raw" (given up: passed untouched)
    _scanned: int = 0

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
        """The complete events held, read (and rewritten). An event ends at a blank line: ``\\n\\n`` or
        ``\\n\\r\\n`` (CRLF lines); each pattern's next place is found once, so every byte is searched once.

        The usual block (what vLLM and SGLang send: ``data: {...}\\n\\n`` events, LF only) is parsed with one
        ``orjson.loads`` of all its events as a JSON array (``_batch``); anything else goes event by event."""
        buffer = self._buffer
        since = max(0, self._scanned - 2)
        lf = buffer.find(b"\n\n", since)
        crlf = buffer.find(b"\n\r\n", since)
        if lf == -1 and crlf == -1:
            self._scanned = len(buffer)
            return b""
        if crlf == -1:  # LF only: the block ends at the last blank line
            end = buffer.rfind(b"\n\n") + 2
            block = bytes(buffer[:end])
            del buffer[:end]
            self._scanned = len(buffer)
            return self._batch(block)
        out = bytearray()
        start = 0
        while lf != -1 or crlf != -1:
            end = lf + 2 if crlf == -1 or (lf != -1 and lf < crlf) else crlf + 3
            out += self._event(bytes(buffer[start:end]))
            start = end
            if lf != -1 and lf < end:
                lf = buffer.find(b"\n\n", end)
            if crlf != -1 and crlf < end:
                crlf = buffer.find(b"\n\r\n", end)
        if start:
            del buffer[:start]
        self._scanned = len(buffer)
        return bytes(out)

    def _batch(self, block: bytes) -> bytes:
        """Complete LF events, when every one is a single line (else event by event).

        The usual chunk — one choice (choice 0) with a ``token_ids`` list and a ``logprobs.content`` list, no
        prompt ids — is read and stripped in line, with ``read``'s and ``_strip``'s exact effect on that shape
        (also when only read: ``strip=False``, or the agent asked for some of the fields itself);
        any other event takes ``_event``. Only events that carried an added field are re-serialised (the others,
        and the block when none did, pass as they came, byte for byte)."""
        parts = block.split(b"\n")  # one-line events, each ended by a blank line: [e1, b"", e2, b"", b""]
        events = parts[0::2]
        if len(parts) % 2 == 0 or any(parts[1::2]) or events.pop() or b"\r" in block:
            return b"".join(self._event(event + b"\n\n") for event in block[:-2].split(b"\n\n"))
        fast = self.refused is None and not self.too_large
        drop_ids = self.strip and "return_token_ids" in self.added  # (``_strip``'s effect on the usual chunk)
        drop_logprobs = self.strip and "logprobs" in self.added
        loads, dumps, event_of = orjson.loads, orjson.dumps, self._event
        completion_parts, logprob_parts = self.completion_parts, self.logprob_parts
        held, limit = self.held, 2 * MAX_TOKENS
        changed = False
        for index, event in enumerate(events):
            if fast and event.startswith(b"data: {"):
                try:  # (a choice that is not an object fails its subscript: no type check needed)
                    value = loads(event[6:])
                    (choice,) = value["choices"]
                    ids, content = choice["token_ids"], choice["logprobs"]["content"]
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    pass
                else:
                    if type(ids) is list and type(content) is list and choice.get("index", 0) == 0 \
                            and "prompt_token_ids" not in value and "prompt_token_ids" not in choice:
                        held += len(ids) + len(content)
                        completion_parts.append(ids)
                        logprob_parts.append(content)
                        reason = choice.get("finish_reason")
                        if reason is not None and type(reason) is str:
                            self.finish_reason = reason
                        if drop_ids:
                            del choice["token_ids"]
                        if drop_logprobs:
                            choice["logprobs"] = None
                        if drop_ids or drop_logprobs:
                            events[index] = b"data: " + dumps(value)
                            changed = True
                        if held > limit:
                            self.held = held
                            self._too_large()
                            fast = False
                        continue
                self.held = held
            rewritten = event_of(event + b"\n\n")
            held = self.held
            if fast and (self.refused is not None or self.too_large):
                fast = False
            if rewritten[:-2] != event:
                events[index] = rewritten[:-2]
                changed = True
        self.held = held
        return b"\n\n".join(events) + b"\n\n" if changed else block

    def _event(self, event: bytes) -> bytes:
        """One SSE event: its ``data:`` JSON read and, when it carries added fields, rewritten without them."""
        if b'"token_ids"' not in event and b'"logprobs"' not in event:  # (prompt_token_ids holds the first)
            self._finish_reason(event)
            return event
        body = event.rstrip(b"\r\n")
        if body.startswith(b"data:") and b"\n" not in body:  # the usual event: one data line
            rewritten = self._rewrite(body[5:].strip(), event)
            return event if rewritten is event else b"data: " + rewritten + event[len(body):]
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
            choices = value.get("choices") if isinstance(value, dict) else None
            for choice in choices if isinstance(choices, list) else ():
                if isinstance(choice, dict) and choice.get("index", 0) == 0 and isinstance(
                        choice.get("finish_reason"), str):
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
        """Collect the token fields of one Chat chunk (or whole completion); nothing here raises."""
        if self.refused is not None or self.too_large:
            return
        prompt = value.get("prompt_token_ids")
        if prompt is not None:
            self._prompt(prompt)
        choices = value.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                if isinstance(choice, dict) and "several choices: only choice 0 is recorded" not in self.problems:
                    self.problems.append("several choices: only choice 0 is recorded")
                continue
            if choice.get("prompt_token_ids") is not None:
                self._prompt(choice["prompt_token_ids"])
            ids = choice.get("token_ids")
            if ids is not None:
                self._hold(self.completion_parts, ids)
            logprobs = choice.get("logprobs")
            if isinstance(logprobs, dict) and logprobs.get("content") is not None:
                self._hold(self.logprob_parts, logprobs["content"])
            if isinstance(choice.get("finish_reason"), str):
                self.finish_reason = choice["finish_reason"]

    def _prompt(self, ids: Any) -> None:
        if not isinstance(ids, list):
            self._refuse("prompt_token_ids is not a list")
        elif len(ids) > MAX_TOKENS:
            self._too_large()
        elif self.prompt is not None and self.prompt != ids:
            self.problems.append("the answer named two different prompt_token_ids")
        else:
            self.prompt = ids

    def _hold(self, into: list[Any], part: Any) -> None:
        if not isinstance(part, list):
            self._refuse("a token field is not a list")
            return
        self.held += len(part)
        if self.held > 2 * MAX_TOKENS:
            self._too_large()
            return
        into.append(part)

    def _refuse(self, why: str) -> None:
        self.refused = why
        self._drop()

    def _too_large(self) -> None:
        self.too_large = True
        self._drop()

    def _drop(self) -> None:
        self.prompt, self.completion_parts, self.logprob_parts = None, [], []

    # -- the record ------------------------------------------------------------------------------------------------

    def record(self, usage: JsonObject | None) -> JsonObject:
        """The sidecar line of this request (``usage``: the normalised counts the answer reported, if any); every
        id and logprob is checked here."""
        problems = list(self.problems)
        prompt: list[int] | None = None
        completion: list[int] | None = None
        logprobs: list[float] | None = None
        source: str | None = None
        status = "ok"
        try:
            if self.unavailable is not None or self.refused is not None or self.too_large:
                raise Refused(self.refused or "")
            prompt = None if self.prompt is None else _check_ids(self.prompt, "prompt_token_ids")
            if self.completion_parts:
                completion = _check_ids(list(itertools.chain.from_iterable(self.completion_parts)),
                                        "choices[0].token_ids")
                source = "token_ids"
            if self.logprob_parts:
                entries = list(itertools.chain.from_iterable(self.logprob_parts))
                try:
                    logprobs = _check_numbers(list(map(_LOGPROB, entries)))
                    named = _named_ids(list(map(_TOKEN, entries)))
                except (KeyError, TypeError):
                    raise Refused("a logprobs.content entry is not a {token, logprob} object") from None
                if completion is None and named is not None:
                    completion, source = named, "logprobs"
                elif completion is not None and named is not None and named != completion:
                    problems.append("the logprob tokens name other ids than token_ids")
            if len(completion or ()) > MAX_TOKENS:
                self.too_large = True
                raise Refused("")
        except Refused as refusal:
            prompt = completion = logprobs = source = None
            if self.unavailable is not None:
                status = "unavailable"
            elif self.too_large:
                status, problems = "too_large", [*problems, f"a token array longer than {MAX_TOKENS}"]
            else:
                status, problems = "refused", [*problems, str(refusal)]
        if status == "ok" and completion is None and prompt is None:
            status, logprobs, source = "unavailable", None, None
        if status == "ok":
            problems += _mismatches(prompt, completion, logprobs, usage)
            status = "mismatch" if problems else "ok"
        reason = self.unavailable or ((self.no_ids or "the upstream answered without token ids")
                                      if status == "unavailable" else None)
        return {"status": status, "auxiliary": self.auxiliary, "problems": problems, "reason": reason,
                "sampling": self.sampling, "finish_reason": self.finish_reason,
                "usage": None if usage is None else {"prompt_tokens": usage.get("input_tokens"),
                                                     "completion_tokens": usage.get("output_tokens")},
                "completion_source": source, "prompt_token_ids": prompt, "completion_token_ids": completion,
                "completion_logprobs": logprobs}


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
    #: the upstream refused the id fields on a streamed request (SGLang): later streamed requests ask for logprobs
    streamed_ids_refused: bool = False
    _bytes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def begin(self, protocol: str, body: JsonObject, *, strip: bool = True,
              auxiliary: bool = False) -> tuple[JsonObject, AnswerTokens]:
        """The body to send (asking for ids when ``protocol`` is Chat Completions) and the request's capture."""
        if protocol != CHAT:
            return body, AnswerTokens(auxiliary=auxiliary, sampling=sampling_of(body), unavailable=(
                f"the {protocol} upstream returns no token ids (only OpenAI-compatible Chat Completions servers "
                "such as vLLM and SGLang do)"))
        refused = self.streamed_ids_refused and body.get("stream") is True
        asked, added = ask(body, STREAM_REFUSED if refused else ())
        return asked, AnswerTokens(added=added, sampling=sampling_of(body), strip=strip, auxiliary=auxiliary,
                                   no_ids=STREAM_REFUSED_REASON if refused else None)

    def refused_streamed_ids(self, body: JsonObject) -> bool:
        """The upstream refused the id fields the bridge added to a streamed request (``refuses_streamed_ids``):
        from now on the run's streamed requests ask for logprobs only; whether ``body`` (as the agent sent it) is to
        be sent again so (not when the agent asked for those fields itself)."""
        if body.get("stream") is not True or any(body.get(name) is True for name in STREAM_REFUSED):
            return False  # the agent asked for them itself: its own request, its own error
        with self._lock:
            self.streamed_ids_refused = True
        return True

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
