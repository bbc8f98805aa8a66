"""Token usage from any upstream protocol normalised into one record, and summed over a run.

``input`` counts every prompt token including cached ones (the OpenAI meaning); Anthropic reports cache reads
and cache writes apart from ``input_tokens``, so they are added back. ``cached`` is the part of ``input`` read
from a prompt cache. Servers differ: vLLM and SGLang send ``prompt_tokens_details.cached_tokens`` only when
prefix caching stats are on (otherwise the details are missing or ``null``), DeepSeek-style servers send
``prompt_cache_hit_tokens``. A missing, negative, boolean or non-integer count reads as 0: usage is bookkeeping,
never a reason to fail a run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Usage:
    """Tokens of one or more model calls: ``input`` includes ``cached``; ``output`` includes ``reasoning``."""

    input: int = 0
    output: int = 0
    cached: int = 0
    reasoning: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input + other.input, self.output + other.output, self.cached + other.cached,
                     self.reasoning + other.reasoning)

    def merged(self, later: Usage) -> Usage:
        """One call's usage from two of its cumulative reports (Anthropic's message_start then message_delta,
        vLLM's usage on every chunk): each count is the larger, so a report that omits a count keeps it."""
        return Usage(max(self.input, later.input), max(self.output, later.output), max(self.cached, later.cached),
                     max(self.reasoning, later.reasoning))

    def as_json(self) -> dict[str, int]:
        return {"input_tokens": self.input, "output_tokens": self.output, "cached_tokens": self.cached,
                "reasoning_tokens": self.reasoning}


def count(value: Any) -> int:
    """A token count from untrusted JSON: a non-negative int, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _field(mapping: Any, *names: str) -> Any:
    for name in names:
        if not isinstance(mapping, Mapping):
            return None
        mapping = mapping.get(name)
    return mapping


def from_anthropic(usage: Any) -> Usage:
    """Anthropic Messages ``usage`` (message_start's or message_delta's, or a whole message's)."""
    cache_read = count(_field(usage, "cache_read_input_tokens"))
    cache_write = count(_field(usage, "cache_creation_input_tokens"))
    return Usage(input=count(_field(usage, "input_tokens")) + cache_read + cache_write,
                 output=count(_field(usage, "output_tokens")), cached=cache_read)


def from_responses(usage: Any) -> Usage:
    """OpenAI Responses ``usage`` (``response.completed``'s)."""
    return Usage(input=count(_field(usage, "input_tokens")), output=count(_field(usage, "output_tokens")),
                 cached=count(_field(usage, "input_tokens_details", "cached_tokens")),
                 reasoning=count(_field(usage, "output_tokens_details", "reasoning_tokens")))


def from_chat(usage: Any) -> Usage:
    """Chat Completions ``usage`` (the last chunk's with ``stream_options.include_usage``, or the completion's)."""
    cached = count(_field(usage, "prompt_tokens_details", "cached_tokens")) or count(
        _field(usage, "prompt_cache_hit_tokens"))
    return Usage(input=count(_field(usage, "prompt_tokens")), output=count(_field(usage, "completion_tokens")),
                 cached=cached, reasoning=count(_field(usage, "completion_tokens_details", "reasoning_tokens")))


def from_gemini(usage: Any) -> Usage:
    """Gemini ``usageMetadata``: ``candidatesTokenCount`` excludes the thinking tokens, which are output too."""
    thoughts = count(_field(usage, "thoughtsTokenCount"))
    return Usage(input=count(_field(usage, "promptTokenCount")),
                 output=count(_field(usage, "candidatesTokenCount")) + thoughts,
                 cached=count(_field(usage, "cachedContentTokenCount")), reasoning=thoughts)


def total(usages: Iterable[Usage]) -> Usage:
    return sum(usages, Usage())


def to_anthropic(usage: Usage) -> dict[str, int]:
    """The Anthropic ``usage`` for a normalised record (``input_tokens`` without the cache reads)."""
    return {"input_tokens": max(usage.input - usage.cached, 0), "output_tokens": usage.output,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": usage.cached}


def to_responses(usage: Usage) -> dict[str, Any]:
    """The Responses API ``usage`` for a normalised record (cache writes are not tracked: 0, a field the openai
    package's ``ResponseUsage`` requires)."""
    return {"input_tokens": usage.input, "input_tokens_details": {"cached_tokens": usage.cached,
                                                                  "cache_write_tokens": 0},
            "output_tokens": usage.output, "output_tokens_details": {"reasoning_tokens": usage.reasoning},
            "total_tokens": usage.input + usage.output}
