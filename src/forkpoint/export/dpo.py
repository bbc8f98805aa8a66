"""`forkpoint export --format dpo` (pure): one preference pair per reward group, in TRL's conversational format.

Per group (docs/rl.md: every exported continuation of one trajectory from one boundary), the highest-reward row is
``chosen`` and the lowest-reward row ``rejected``; ``prompt`` is the messages both conversations share from the
start (the task, the replayed prefix, and a boundary prompt when both have the same), ``chosen`` / ``rejected``
what follows in each (the live turns). This is the shape TRL's ``DPOTrainer`` loads: ``{"prompt": [messages],
"chosen": [messages], "rejected": [messages]}``. A group whose best and worst rewards are equal (a tie), that has
one scored row, or whose best or worst has no live turn gives no pair; each is counted in the export report.
Rows keep only what a pair needs, so memory is two rows per group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: the message keys a pair keeps (OpenAI chat; ``segment`` / ``trainable`` are forkpoint's row labels)
MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id")


def pair_message(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message as a pair carries it: role and content (never null), tool calls / id where present."""
    kept: dict[str, Any] = {"role": message.get("role"), "content": message.get("content") or ""}
    if message.get("tool_calls"):
        kept["tool_calls"] = message["tool_calls"]
    if message.get("tool_call_id"):
        kept["tool_call_id"] = message["tool_call_id"]
    return kept


@dataclass
class Candidate:
    reward: float
    messages: list[dict[str, Any]]
    run_id: Any
    branch: Any


@dataclass
class DpoPairs:
    """Keeps the best and the worst row of each group as rows arrive; ``pairs`` makes the pairs at the end."""

    best: dict[str, Candidate] = field(default_factory=dict)
    worst: dict[str, Candidate] = field(default_factory=dict)
    scored: dict[str, int] = field(default_factory=dict)

    def add(self, row: dict[str, Any]) -> None:
        gid, reward = row.get("group_id"), row.get("reward")
        if not isinstance(gid, str) or not isinstance(reward, float):
            return
        candidate = Candidate(reward, [pair_message(m) for m in row.get("messages") or []], row.get("run_id"),
                              row.get("branch"))
        self.scored[gid] = self.scored.get(gid, 0) + 1
        if gid not in self.best or reward > self.best[gid].reward:
            self.best[gid] = candidate
        if gid not in self.worst or reward < self.worst[gid].reward:
            self.worst[gid] = candidate

    def pairs(self) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """The pairs in the order groups were first seen, and what was skipped (``ties``, ``single``, ``empty``)."""
        out: list[dict[str, Any]] = []
        skipped = {"ties": 0, "single": 0, "empty": 0}
        for gid, best in self.best.items():
            worst = self.worst[gid]
            if self.scored[gid] < 2:
                skipped["single"] += 1
                continue
            if best.reward == worst.reward:
                skipped["ties"] += 1
                continue
            shared = shared_prefix(best.messages, worst.messages)
            chosen, rejected = best.messages[shared:], worst.messages[shared:]
            if not chosen or not rejected:
                skipped["empty"] += 1
                continue
            out.append({"prompt": best.messages[:shared], "chosen": chosen, "rejected": rejected, "group_id": gid,
                        "chosen_reward": best.reward, "rejected_reward": worst.reward,
                        "chosen_run_id": best.run_id, "chosen_branch": best.branch,
                        "rejected_run_id": worst.run_id, "rejected_branch": worst.branch})
        return out, skipped


def shared_prefix(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> int:
    """How many leading messages the two conversations have in common."""
    count = 0
    for mine, theirs in zip(first, second, strict=False):
        if mine != theirs:
            break
        count += 1
    return count
