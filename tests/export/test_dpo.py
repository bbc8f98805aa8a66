"""Preference pairs per reward group (forkpoint.export.dpo), on rows as `forkpoint export` builds them."""

from __future__ import annotations

from typing import Any

from forkpoint.export.dpo import DpoPairs

PREFIX = [{"role": "user", "content": "fix the test", "segment": "task", "trainable": False},
          {"role": "assistant", "content": "", "segment": "prefix", "trainable": False, "tool_calls": [
              {"id": "c1", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}]},
          {"role": "tool", "content": "1 failed", "tool_call_id": "c1", "segment": "prefix", "trainable": False}]


def _row(gid: str | None, reward: float | None, live: str | None, branch: int) -> dict[str, Any]:
    messages = [dict(m) for m in PREFIX]
    if live is not None:
        messages.append({"role": "assistant", "content": live, "reasoning_content": None, "segment": "live",
                         "trainable": True})
    return {"group_id": gid, "reward": reward, "messages": messages, "run_id": "r", "branch": branch}


def test_the_best_and_the_worst_of_each_group_make_one_pair() -> None:
    pairs = DpoPairs()
    for index, (reward, live) in enumerate([(0.0, "gave up"), (1.0, "fixed it"), (0.5, "half"), (0.0, "no")]):
        pairs.add(_row("g1", reward, live, index + 1))
    pairs.add(_row("g2", 1.0, "a", 1))  # a tie
    pairs.add(_row("g2", 1.0, "b", 2))
    pairs.add(_row("g3", 1.0, "alone", 1))  # one scored row
    pairs.add(_row("g4", 1.0, "x", 1))  # the worst has no live turn
    pairs.add(_row("g4", 0.0, None, 2))
    pairs.add(_row(None, 1.0, "unscored group", 1))  # not scored: ignored
    pairs.add(_row("g1", None, "score failure", 9))
    made, skipped = pairs.pairs()
    assert skipped == {"ties": 1, "single": 1, "empty": 1}
    assert len(made) == 1
    pair = made[0]
    assert pair["prompt"] == [{"role": "user", "content": "fix the test"},
                              {"role": "assistant", "content": "", "tool_calls": PREFIX[1]["tool_calls"]},
                              {"role": "tool", "content": "1 failed", "tool_call_id": "c1"}]
    assert pair["chosen"] == [{"role": "assistant", "content": "fixed it"}]
    assert pair["rejected"] == [{"role": "assistant", "content": "gave up"}]  # the first of the lowest
    assert (pair["chosen_reward"], pair["rejected_reward"], pair["chosen_branch"], pair["rejected_branch"]) == (
        1.0, 0.0, 2, 1)
