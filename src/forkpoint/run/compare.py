"""Fresh vs historical observations, and the first live action vs the original next action (pure)."""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Callable
from typing import Any

from forkpoint.core.hashing import sha256_hex
from forkpoint.core.model import ActionSignature, JsonObject, Observation, observation_text

NEXT_ACTION_SCHEMA = "forkpoint.next-action/v1"
#: bounds of what observations.json keeps of each observation's text, and of a diverging call's unified diff
PREVIEW_CHARS = 4096
DIFF_MAX_LINES = 200
DIFF_INPUT_LINES = 2000
#: the most of each side ``similarity`` compares: an upstream may answer 200 MB of text, and difflib's index (and
#: the whitespace split before it) costs tens of bytes per character
SIMILARITY_INPUT_CHARS = 200_000
#: what next-action.json keeps of a text (more: a preview plus its length and SHA-256) and of a call's arguments
ACTION_TEXT_CHARS = 4096
ACTION_ARGUMENT_BYTES = 64 * 1024


def similarity(a: str, b: str) -> float:
    """difflib ratio on whitespace-normalised text (1.0 for two empty strings); each side is cut to its first
    ``SIMILARITY_INPUT_CHARS`` characters first (``similarity_cut`` says when). Equal texts are 1.0 without
    difflib, which takes about a second for an equal 200 kB pair (a reused view_image data URL)."""
    if a == b:
        return 1.0
    return difflib.SequenceMatcher(None, _normalise(a[:SIMILARITY_INPUT_CHARS]),
                                   _normalise(b[:SIMILARITY_INPUT_CHARS])).ratio()


def similarity_cut(a: str, b: str) -> bool:
    return len(a) > SIMILARITY_INPUT_CHARS or len(b) > SIMILARITY_INPUT_CHARS


def _normalise(text: str) -> str:
    return " ".join(text.split())


def observation_entry(
    call_id: str,
    name: str,
    batch: int,
    historical: Observation | None,
    fresh_content: Any,
    fresh_is_error: bool,
    *,
    truncated: bool = False,
    stale_reused: bool = False,
    normalise: Callable[[Any], Any] | None = None,
    reused: str | None = None,
    subagent: str | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    """One row of observations.json. ``exact`` means the same content AND the same error flag.

    ``normalise`` masks the adapter's documented volatile parts (e.g. a persisted-output file path) on
    both sides before comparing; ``normalised`` says whether it changed anything. ``reused``: the quality reason
    of an observation reused by design (not compared, like a stale one); ``subagent``: who made the call; ``note``:
    the quality reason of a re-run whose input came partly from the recording (compared like any re-run).
    """
    historical_text = historical.text if historical else ""
    fresh_text = observation_text(fresh_content)
    raw_equal = historical is not None and historical.content == fresh_content
    equal = raw_equal
    if not raw_equal and historical is not None and normalise is not None:
        equal = normalise(historical.content) == normalise(fresh_content)
    compared = not stale_reused and reused is None
    exact = historical is not None and compared and equal and historical.is_error == fresh_is_error
    return {
        "id": call_id,
        "name": name,
        "batch": batch,
        "subagent": subagent,
        "reused": reused,
        **({"note": note} if note else {}),
        "exact": exact,
        "similarity": round(similarity(historical_text, fresh_text), 6),
        "historical_bytes": len(historical_text.encode("utf-8")),
        "fresh_bytes": len(fresh_text.encode("utf-8")),
        "historical_is_error": historical.is_error if historical else None,
        "fresh_is_error": fresh_is_error,
        "truncated": truncated,
        "stale_reused": stale_reused,
        "normalised": equal and not raw_equal,
        "normalised_reason": "volatile" if equal and not raw_equal else None,
        "historical_preview": preview(historical_text),
        "fresh_preview": preview(fresh_text),
        # also for a call equal only after normalisation: the diff shows the masked volatile parts
        "diff": None if raw_equal or historical is None or not compared else unified_diff(historical_text, fresh_text),
    }


def preview(text: str) -> dict[str, Any]:
    """The head of an observation's text (``PREVIEW_CHARS`` at most) and whether it was cut."""
    return {"text": text[:PREVIEW_CHARS], "truncated": len(text) > PREVIEW_CHARS}


def unified_diff(historical: str, fresh: str) -> dict[str, Any]:
    """A bounded unified diff (historical -> fresh): the first ``DIFF_INPUT_LINES`` lines of each side are compared
    (difflib is quadratic at worst) and at most ``DIFF_MAX_LINES`` diff lines kept; ``truncated`` says if cut."""
    old, new = historical.splitlines(), fresh.splitlines()
    cut = len(old) > DIFF_INPUT_LINES or len(new) > DIFF_INPUT_LINES
    lines = list(difflib.unified_diff(old[:DIFF_INPUT_LINES], new[:DIFF_INPUT_LINES], "historical", "fresh",
                                      lineterm="", n=2))
    if not lines and historical != fresh:  # same lines, other line endings or a final newline
        lines = ["--- historical", "+++ fresh", f"@@ the texts differ only in line endings or trailing newline "
                 f"({historical[-1:]!r} vs {fresh[-1:]!r}) @@"]
    return {"lines": lines[:DIFF_MAX_LINES], "truncated": cut or len(lines) > DIFF_MAX_LINES}


def _text_metrics(original: str, replayed: str, label: str) -> dict[str, Any]:
    original_present = bool(original) and not original.isspace()  # no copy of a huge text
    replayed_present = bool(replayed) and not replayed.isspace()
    if not original_present and not replayed_present:
        status, exact, ratio = "not_applicable_both_empty", None, None
    elif not original_present:
        status, exact, ratio = "original_empty", False, 0.0
    elif not replayed_present:
        status, exact, ratio = "replayed_empty", False, 0.0
    else:
        status, exact, ratio = "comparable", original == replayed, round(similarity(original, replayed), 6)
    return {
        f"original_{label}_present": original_present,
        f"replayed_{label}_present": replayed_present,
        f"{label}_comparison_status": status,
        f"{label}_exact": exact,
        f"{label}_similarity": ratio,
        f"{label}_similarity_input_cut": similarity_cut(original, replayed),
    }


def kept_text(action: JsonObject, key: str, text: str) -> None:
    """``action[key]``: the text, or its first ``ACTION_TEXT_CHARS`` characters plus its length and SHA-256 (a
    huge answer must not make a huge document: the continued session holds it whole)."""
    action[key] = text[:ACTION_TEXT_CHARS]
    if len(text) > ACTION_TEXT_CHARS:
        action[f"{key}_truncated"] = True
        action[f"{key}_chars"] = len(text)
        action[f"{key}_sha256"] = text_sha256(text)


def text_sha256(text: str, piece: int = 1 << 20) -> str:
    """The SHA-256 of ``text``'s UTF-8, encoded a piece at a time (no second copy of a huge text; a piece boundary
    never splits a code point: ``str`` slices are whole characters)."""
    digest = hashlib.sha256()
    for start in range(0, len(text), piece):
        digest.update(text[start:start + piece].encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def action_json(action: ActionSignature) -> JsonObject:
    """An action as next-action.json keeps it: bounded texts and arguments (previews + SHA-256 beyond the bound)."""
    kept: JsonObject = {}
    kept_text(kept, "text", action.text)
    kept_text(kept, "reasoning", action.reasoning)
    tools: list[JsonObject] = []
    for name, arguments in action.tools:
        # json, not orjson: orjson reserves ~15x a long string's size while it encodes
        raw = json.dumps(arguments, ensure_ascii=False, separators=(",", ":")).encode()
        if len(raw) <= ACTION_ARGUMENT_BYTES:
            tools.append({"name": name, "arguments": arguments})
            continue
        tools.append({"name": name, "arguments": {}, "arguments_truncated": True, "arguments_bytes": len(raw),
                      "arguments_sha256": sha256_hex(raw),
                      "arguments_preview": raw[:ACTION_TEXT_CHARS].decode("utf-8", "ignore")})
    kept["tools"] = tools
    return kept


def next_action_document(
    original: ActionSignature | None,
    replayed: ActionSignature | None,
    *,
    input_condition: str,
) -> dict[str, Any]:
    """next-action.json: informational, never gating (the model may legitimately act differently)."""
    metrics: dict[str, Any] = {}
    if original is not None and replayed is not None:
        metrics.update(_text_metrics(original.text, replayed.text, "text"))
        metrics.update(_text_metrics(original.reasoning, replayed.reasoning, "reasoning"))
        same_count = len(original.tools) == len(replayed.tools)
        pairs = list(zip(original.tools, replayed.tools, strict=False))
        metrics["tool_count_equal"] = same_count
        metrics["ordered_tool_names_equal"] = same_count and all(a[0] == b[0] for a, b in pairs)
        metrics["tool_arguments_equal"] = same_count and all(a[1] == b[1] for a, b in pairs)
        metrics["same_tool_calls"] = metrics["ordered_tool_names_equal"] and metrics["tool_arguments_equal"]
    return {
        "schema_version": NEXT_ACTION_SCHEMA,
        "original": action_json(original) if original else None,
        "replayed": action_json(replayed) if replayed else None,
        "metrics": metrics,
        "gating": False,
        "input_condition": input_condition,
    }


def mark_timing(
    rows: list[dict[str, Any]],
    sessions: dict[str, list[tuple[int, Any, Any]]],
    chunk: Callable[[Any], tuple[str, str] | None],
) -> None:
    """Count a process session's calls as normalised with reason ``timing`` when only the split differs.

    ``sessions`` maps a fresh process session to its calls in order: (row index, historical content, fresh
    content). Output a process produces between two calls lands in one or the other depending on timing (Codex's
    yield windows); when some call of a session is not exact but the session's concatenated output is equal on
    both sides and its last call ends the same way (``chunk`` gives each observation's final status and output),
    the differing calls are exact after normalisation, reason ``timing``. Anything else stays as compared.
    """
    for calls in sessions.values():
        if all(rows[index]["exact"] for index, _, _ in calls):
            continue
        historical = [chunk(content) for _, content, _ in calls]
        fresh = [chunk(content) for _, _, content in calls]
        if any(part is None for part in historical + fresh) or any(rows[i]["stale_reused"] for i, _, _ in calls):
            continue
        old = [part for part in historical if part is not None]
        new = [part for part in fresh if part is not None]
        if old[-1][0] != new[-1][0] or "".join(o for _, o in old) != "".join(o for _, o in new):
            continue
        for index, _, _ in calls:
            row = rows[index]
            if not row["exact"] and row["historical_is_error"] == row["fresh_is_error"]:
                row.update(exact=True, normalised=True, normalised_reason="timing")
