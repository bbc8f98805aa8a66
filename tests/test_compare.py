"""Similarity and next-action metrics (pure)."""

from __future__ import annotations

from forkpoint.compare import next_action_document, observation_entry, similarity
from forkpoint.model import ActionSignature, Observation


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
