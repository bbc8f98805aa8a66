"""Similarity and next-action metrics (pure)."""

from __future__ import annotations

from typing import Any

from forkpoint.adapters.codex.tool_session import session_chunk
from forkpoint.adapters.codex.tools import normalize_volatile
from forkpoint.core.model import ActionSignature, Observation
from forkpoint.run.compare import mark_timing, next_action_document, observation_entry, similarity


def test_similarity_matches_difflib_vectors() -> None:
    assert similarity("", "") == 1.0
    assert similarity("abcd", "abxd") == 0.75
    assert similarity("abc", "abc") == 1.0


def test_observation_exactness_needs_content_and_error_flag() -> None:
    historical = Observation("out\n", is_error=False)
    assert observation_entry("t", "Bash", 1, historical, "out\n", False)["exact"] is True
    assert observation_entry("t", "Bash", 1, historical, "out\n", True)["exact"] is False
    row = observation_entry("t", "Bash", 1, historical, "other\n", False)
    assert row["exact"] is False and 0 < row["similarity"] < 1
    assert row["historical_bytes"] == 4 and row["fresh_bytes"] == 6
    assert observation_entry("t", "Agent", 1, historical, "out\n", False, stale_reused=True)["exact"] is False


def test_next_action_metrics() -> None:
    original = ActionSignature("inspect\r\n file", "", (("Bash", {"command": "ls"}),))
    replayed = ActionSignature("inspect file", "", (("Bash", {"command": "ls"}),))
    metrics = next_action_document(original, replayed, input_condition="replayed_boundary_only")["metrics"]
    assert metrics["text_exact"] is False and metrics["text_similarity"] == 1.0
    assert metrics["text_comparison_status"] == "comparable"
    assert metrics["reasoning_comparison_status"] == "not_applicable_both_empty"
    assert metrics["reasoning_similarity"] is None
    assert metrics["same_tool_calls"] is True

    blank = ActionSignature("  ", "", ())
    metrics = next_action_document(blank, blank, input_condition="x")["metrics"]
    assert metrics["text_comparison_status"] == "not_applicable_both_empty" and metrics["text_exact"] is None

    other = ActionSignature("", "thought a", (("Read", {"file_path": "a"}),))
    mine = ActionSignature("", "thought b", (("Bash", {"command": "a"}),))
    metrics = next_action_document(other, mine, input_condition="x")["metrics"]
    assert metrics["reasoning_comparison_status"] == "comparable" and metrics["reasoning_similarity"] > 0
    assert metrics["ordered_tool_names_equal"] is False and metrics["tool_count_equal"] is True


def test_normalisation_masks_only_what_the_adapter_documents() -> None:
    historical = Observation("saved to /home/a/x1.txt")
    mask = lambda text: text.rsplit("/", 1)[0]  # noqa: E731 - a tiny stand-in for an adapter's normaliser
    row = observation_entry("t", "Bash", 1, historical, "saved to /home/a/y2.txt", False, normalise=mask)
    assert row["exact"] is True and row["normalised"] is True
    row = observation_entry("t", "Bash", 1, historical, "saved to /home/b/y2.txt", False, normalise=mask)
    assert row["exact"] is False and row["normalised"] is False
    assert observation_entry("t", "Bash", 1, historical, historical.content, False)["normalised"] is False


def test_a_diverging_call_keeps_bounded_previews_and_a_bounded_unified_diff() -> None:
    from forkpoint.run.compare import DIFF_MAX_LINES, PREVIEW_CHARS

    historical = Observation("line a\nline b\nline c\n")
    row = observation_entry("t", "Bash", 1, historical, "line a\nline B\nline c\n", False)
    assert row["diff"]["lines"] == ["--- historical", "+++ fresh", "@@ -1,3 +1,3 @@", " line a", "-line b",
                                    "+line B", " line c"]
    assert row["diff"]["truncated"] is False
    assert row["historical_preview"] == {"text": "line a\nline b\nline c\n", "truncated": False}
    assert observation_entry("t", "Bash", 1, historical, "line a\nline b\nline c\n", False)["diff"] is None
    big_old = "".join(f"{i}\n" for i in range(5000))
    big_new = "".join(f"{i * 2}\n" for i in range(5000))
    row = observation_entry("t", "Bash", 1, Observation(big_old), big_new, False)
    assert len(row["diff"]["lines"]) == DIFF_MAX_LINES and row["diff"]["truncated"] is True
    assert len(row["fresh_preview"]["text"]) == PREVIEW_CHARS and row["fresh_preview"]["truncated"] is True
    endings = observation_entry("t", "Bash", 1, Observation("x\n"), "x", False)["diff"]
    assert endings is not None and "line endings or trailing newline" in endings["lines"][-1]


def test_a_call_equal_after_normalisation_shows_the_masked_difference() -> None:
    def mask(content: object) -> object:
        return str(content).replace("/home/a/", "/home/X/").replace("/home/b/", "/home/X/")

    row = observation_entry("t", "Bash", 1, Observation("saved to /home/a/y.txt"), "saved to /home/b/y.txt", False,
                            normalise=mask)
    assert row["exact"] is True and row["normalised"] is True
    assert "-saved to /home/a/y.txt" in row["diff"]["lines"] and "+saved to /home/b/y.txt" in row["diff"]["lines"]


def test_a_huge_next_action_is_kept_as_a_preview_and_a_hash_in_bounded_memory() -> None:
    """An upstream answering megabytes of text: next-action.json keeps a preview, the length and the SHA-256, and
    the similarity reads a bounded prefix (before: the whole text was split into words and indexed by difflib,
    ~45 bytes a character, and written whole into the document)."""
    import hashlib
    import json
    import random
    import tracemalloc

    import orjson

    from forkpoint.run.compare import ACTION_TEXT_CHARS

    rnd = random.Random(7)
    words = " ".join("".join(rnd.choice("abcdefghij") for _ in range(5)) for _ in range(700_000))  # ~4 MB
    original = ActionSignature("the notes say hello", "", ())
    huge = ActionSignature(words, "", (("Write", {"file_path": "/w/x", "content": words}),))
    tracemalloc.start()
    try:
        document = next_action_document(original, huge, input_condition="replayed_boundary_only")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 48 * 1024 * 1024, peak  # the old code peaked at ~200 MB here
    assert len(orjson.dumps(document)) < 64 * 1024
    replayed = document["replayed"]
    assert replayed["text"] == words[:ACTION_TEXT_CHARS] and replayed["text_truncated"] is True
    assert replayed["text_chars"] == len(words)
    assert replayed["text_sha256"] == hashlib.sha256(words.encode()).hexdigest()
    call = replayed["tools"][0]
    assert call["name"] == "Write" and call["arguments_truncated"] is True
    raw = json.dumps(huge.tools[0][1], separators=(",", ":")).encode()
    assert call["arguments_sha256"] == hashlib.sha256(raw).hexdigest()
    metrics = document["metrics"]
    assert metrics["text_comparison_status"] == "comparable" and metrics["text_similarity_input_cut"] is True
    assert "text_truncated" not in document["original"]


def _unified(status: str, output: str) -> str:
    return f"Chunk ID: 0a1b2c\nWall time: 0.2500 seconds\n{status}\nOriginal token count: 1\nOutput:\n{output}"


def _session_rows(historical: list[str], fresh: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    pairs = list(enumerate(zip(historical, fresh, strict=True)))
    rows = [observation_entry(f"c{i}", "write_stdin" if i else "exec_command", 1, Observation(h), f, False,
                              normalise=normalize_volatile) for i, (h, f) in pairs]
    return rows, {"7#1": [(i, h, f) for i, (h, f) in pairs]}


def test_a_split_that_differs_only_by_timing_is_normalised_with_reason_timing() -> None:
    running, done = "Process running with session ID 7", "Process exited with code 0"
    rows, sessions = _session_rows([_unified(running, "a"), _unified(done, "bc")],
                                   [_unified(running, "ab"), _unified(done, "c")])
    assert [row["exact"] for row in rows] == [False, False]
    mark_timing(rows, sessions, session_chunk)
    assert [(row["exact"], row["normalised_reason"]) for row in rows] == [(True, "timing"), (True, "timing")]


def test_a_session_whose_bytes_or_end_differ_is_not_timing() -> None:
    running, done = "Process running with session ID 7", "Process exited with code 0"
    for fresh in ([_unified(running, "ab"), _unified(done, "X")],  # other bytes
                  [_unified(running, "ab"), _unified("Process exited with code 1", "c")],  # other exit
                  [_unified(done, "abc"), "write_stdin failed: Unknown process id 7"]):  # ended earlier
        rows, sessions = _session_rows([_unified(running, "a"), _unified(done, "bc")], fresh)
        mark_timing(rows, sessions, session_chunk)
        assert not all(row["exact"] for row in rows), fresh
        assert all(row["normalised_reason"] != "timing" for row in rows)


def test_volatile_normalisation_names_its_reason() -> None:
    row = observation_entry("c", "exec_command", 1, Observation(_unified("Process exited with code 0", "x")),
                            _unified("Process exited with code 0", "x").replace("0a1b2c", "ffffff"), False,
                            normalise=normalize_volatile)
    assert row["exact"] and row["normalised_reason"] == "volatile"


def test_an_equal_large_observation_is_not_run_through_difflib() -> None:
    """The data URL real Codex 0.149 sent for a re-encoded 2100x40 PNG (178 kB) took ~1 s in difflib per
    comparison although both sides are equal (4.5 s for one replay of that rollout)."""
    import json
    import time
    from pathlib import Path

    rollout = Path(__file__).parents[1] / "fixtures" / "codex" / "0.149.0" / "view_image" / "rollout.jsonl"
    text = [json.loads(line)["payload"]["output"][0]["image_url"] for line in rollout.read_text().splitlines()
            if '"function_call_output"' in line and '"input_image"' in line][-1]
    assert len(text) > 150_000
    started = time.monotonic()
    assert similarity(text, text) == 1.0
    assert time.monotonic() - started < 0.2
