"""Rewards and groups, pure: what a verifier's output means and how branches of one boundary compare.

``run/verify.py`` runs the verifier (``--score CMD``) and hands its exit status and the tail of its stdout here;
nothing in this module starts a process or opens a file, so every rule below is tested on values.

The reward (docs/rl.md):

- ``last-line``: the last non-empty stdout line, when it is a number, is the reward; it must be FINITE (``NaN``,
  ``inf``, ``1e309`` are a score failure naming the line, never a reward). Otherwise the exit status decides:
  0 -> 1.0, anything else -> 0.0 — except 126/127 (the shell could not run the command: not found, not
  executable), which are a score failure.
- ``json``: the last non-empty stdout line is a JSON object with a finite number ``reward``; its other keys are
  kept (``extra``, at most ``MAX_EXTRA_BYTES`` of JSON). Anything else is a score failure.
- A verifier past ``--score-timeout`` is a score failure (``timeout``); so is one that could not be spawned.

A score failure is recorded (``failure``, ``reward`` null); it never fails the run.

Groups: all continuations from one boundary of one trajectory (``group_id``). Over the branches that have a
reward: ``n``, ``mean``, ``std`` (population standard deviation, ddof 0), each branch's advantage ``r - mean``
and GRPO's ``(r - mean) / std`` (0 when std is 0), and pass@k for k = 1..n with the unbiased estimator
``1 - C(n - c, k) / C(n, k)``, where a branch PASSES when its reward is greater than 0.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

ScoreFormat = Literal["last-line", "json"]
SCORE_FORMATS: tuple[str, ...] = ("last-line", "json")
DEFAULT_SCORE_TIMEOUT_S = 600.0
#: how much of the verifier's stdout (and stderr) is kept: the reward is read from the end
TAIL_BYTES = 4096
MAX_EXTRA_BYTES = 4096
#: a branch passes (pass@k) when its reward is above this
PASS_THRESHOLD = 0.0

_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_NON_FINITE = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
_SHELL_COULD_NOT_RUN = {126: "not executable", 127: "command not found"}


@dataclass(frozen=True)
class ScoreSpec:
    """What ``--score`` asked for: the command (run by ``/bin/sh -c``), its deadline and how to read it."""

    command: str
    timeout_s: float = DEFAULT_SCORE_TIMEOUT_S
    format: str = "last-line"

    def __post_init__(self) -> None:
        if not self.command.strip():
            raise ValueError("the score command is empty")
        if self.format not in SCORE_FORMATS:
            raise ValueError(f"score format must be one of {', '.join(SCORE_FORMATS)}, not {self.format!r}")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError("the score timeout must be a positive number of seconds")


@dataclass(frozen=True)
class Reading:
    reward: float | None
    failure: str | None
    extra: dict[str, Any]


def last_line(tail: bytes) -> str | None:
    """The last non-empty line of ``tail`` (stripped), or None."""
    for line in reversed(tail.decode("utf-8", "replace").splitlines()):
        if line.strip():
            return line.strip()
    return None


def read_reward(fmt: str, exit_code: int | None, stdout_tail: bytes) -> Reading:
    """The reward of a verifier that exited with ``exit_code`` having printed ``stdout_tail`` last."""
    line = last_line(stdout_tail)
    if fmt == "json":
        return _read_json(line)
    if line is not None:
        if _NUMBER.fullmatch(line):
            value = float(line)
            if math.isfinite(value):
                return Reading(value, None, {})
            return Reading(None, f"the last line {_shown(line)} is not a finite number", {})
        if _NON_FINITE.fullmatch(line):
            return Reading(None, f"the last line {_shown(line)} is not a finite number", {})
    if exit_code is None:
        return Reading(None, "the verifier has no exit status", {})
    if exit_code in _SHELL_COULD_NOT_RUN:
        return Reading(None, f"the verifier did not run (exit {exit_code}: {_SHELL_COULD_NOT_RUN[exit_code]})", {})
    return Reading(1.0 if exit_code == 0 else 0.0, None, {})


def _read_json(line: str | None) -> Reading:
    if line is None:
        return Reading(None, "json score format: the verifier printed nothing", {})
    try:
        document = json.loads(line, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        return Reading(None, f"json score format: the last line is not JSON ({str(exc)[:200]})", {})
    if not isinstance(document, dict):
        return Reading(None, "json score format: the last line is not a JSON object", {})
    reward = document.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        return Reading(None, 'json score format: no number "reward" in the last line', {})
    extra = {key: value for key, value in document.items() if key != "reward"}
    if len(json.dumps(extra)) > MAX_EXTRA_BYTES:
        extra = {"truncated": True}
    if not math.isfinite(float(reward)):
        return Reading(None, f"json score format: reward {reward!r} is not a finite number", extra)
    return Reading(float(reward), None, extra)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _shown(line: str) -> str:
    return repr(line if len(line) <= 64 else line[:64] + "…")


def score_document(spec: ScoreSpec, *, exit_code: int | None, timed_out: bool, duration_s: float,
                   stdout_tail: bytes, stderr_tail: bytes, start_error: str | None = None,
                   background_killed: bool = False) -> dict[str, Any]:
    """The ``score`` object of result.json / branches.json (the data contract of docs/rl.md)."""
    if start_error is not None:
        reading = Reading(None, f"the verifier could not start: {start_error}", {})
    elif timed_out:
        reading = Reading(None, f"the verifier ran past --score-timeout ({spec.timeout_s:g} s) and was killed", {})
    else:
        reading = read_reward(spec.format, exit_code, stdout_tail)
    shown = stdout_tail + (b"\n[stderr]\n" + stderr_tail if stderr_tail else b"")
    return {"reward": reading.reward, "exit": exit_code, "duration_s": round(duration_s, 3),
            "output_tail": shown[-TAIL_BYTES:].decode("utf-8", "replace"), "failure": reading.failure,
            "format": spec.format, "extra": reading.extra, "background_killed": background_killed}


# -- groups ---------------------------------------------------------------------------------------------------------


def group_id(trajectory_sha256: str, boundary: int) -> str:
    """A short stable id of "continuations of this trajectory from this boundary" (the same in every run/batch)."""
    import hashlib

    return hashlib.sha256(f"{trajectory_sha256}:{boundary}".encode()).hexdigest()[:16]


def reward_of(score: Any) -> float | None:
    """The reward of a ``score`` object read back (anything else: None)."""
    if not isinstance(score, dict):
        return None
    reward = score.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward):
        return None
    return float(reward)


@dataclass(frozen=True)
class GroupStats:
    n: int
    mean: float | None
    std: float | None
    passed: int

    def advantage(self, reward: float | None) -> float | None:
        return None if reward is None or self.mean is None else reward - self.mean

    def advantage_grpo(self, reward: float | None) -> float | None:
        if reward is None or self.mean is None or self.std is None:
            return None
        return 0.0 if self.std == 0 else (reward - self.mean) / self.std


def group_stats(rewards: Sequence[float | None]) -> GroupStats:
    scored = [reward for reward in rewards if reward is not None]
    if not scored:
        return GroupStats(0, None, None, 0)
    mean = math.fsum(scored) / len(scored)
    std = math.sqrt(math.fsum((reward - mean) ** 2 for reward in scored) / len(scored))
    return GroupStats(len(scored), mean, std, sum(1 for reward in scored if reward > PASS_THRESHOLD))


def pass_at_k(n: int, passed: int, k: int) -> float:
    """The unbiased pass@k estimator (Chen et al. 2021): 1 - C(n - c, k) / C(n, k)."""
    if not 1 <= k <= n or not 0 <= passed <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= passed <= n (n={n}, passed={passed}, k={k})")
    if n - passed < k:
        return 1.0
    return 1.0 - math.comb(n - passed, k) / math.comb(n, k)


def branch_group(gid: str, stats: GroupStats, reward: float | None) -> dict[str, Any]:
    """The ``group`` object of one branch record (the data contract of docs/rl.md)."""
    return {"id": gid, "n": stats.n, "mean": stats.mean, "std": stats.std,
            "advantage": stats.advantage(reward), "advantage_grpo": stats.advantage_grpo(reward)}


def group_summary(gid: str, rewards: Sequence[float | None], original_reward: float | None) -> dict[str, Any]:
    """One group's table: n, mean/std, pass@k, the original's reward and how many branches equal it."""
    stats = group_stats(rewards)
    return {
        "id": gid, "n": stats.n, "branches": len(rewards), "unscored": len(rewards) - stats.n,
        "mean": stats.mean, "std": stats.std, "passed": stats.passed,
        "pass_at_k": {str(k): pass_at_k(stats.n, stats.passed, k) for k in range(1, stats.n + 1)},
        "original_reward": original_reward,
        "equal_to_original": (None if original_reward is None else
                              sum(1 for reward in rewards if reward is not None and reward == original_reward)),
    }


def apply_groups(rows: list[dict[str, Any]], gid: str, original_reward: float | None) -> dict[str, Any] | None:
    """Give each scored branch row its ``group``; the group's summary (None when no branch was scored)."""
    scored_rows = [row for row in rows if isinstance(row.get("score"), dict)]
    if not scored_rows:
        return None
    rewards = [reward_of(row["score"]) for row in scored_rows]
    stats = group_stats(rewards)
    for row, reward in zip(scored_rows, rewards, strict=True):
        row["group"] = branch_group(gid, stats, reward)
    return group_summary(gid, rewards, original_reward)
