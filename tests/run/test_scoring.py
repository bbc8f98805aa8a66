"""The reward rules and the group maths of forkpoint.run.scoring, on values."""

from __future__ import annotations

import math

import pytest

from forkpoint.run.scoring import (
    ScoreSpec,
    apply_groups,
    group_id,
    group_stats,
    pass_at_k,
    read_reward,
    score_document,
)


@pytest.mark.parametrize(("tail", "code", "reward"), [
    (b"collected 3\n0.75\n\n", 1, 0.75),  # a number wins over the exit status
    (b"-2e-3\n", 0, -0.002),
    (b"3 passed in 0.01s\n", 0, 1.0),  # not a number: the exit status
    (b"1 failed\n", 1, 0.0),
    (b"", 0, 1.0),
    (b"1_000\n", 2, 0.0),  # Python's float() would take it; not a number here
])
def test_last_line_reward(tail: bytes, code: int, reward: float) -> None:
    reading = read_reward("last-line", code, tail)
    assert reading.failure is None and reading.reward == pytest.approx(reward)


@pytest.mark.parametrize("line", [b"NaN", b"nan", b"inf", b"-Infinity", b"1e309", b"-1e400"])
def test_a_non_finite_last_line_is_a_score_failure(line: bytes) -> None:
    reading = read_reward("last-line", 0, b"ok\n" + line + b"\n")
    assert reading.reward is None and reading.failure is not None and "not a finite number" in reading.failure


@pytest.mark.parametrize("code", [126, 127])
def test_a_command_the_shell_could_not_run_is_a_score_failure(code: int) -> None:
    reading = read_reward("last-line", code, b"sh: 1: nope: not found\n")
    assert reading.reward is None and reading.failure is not None and f"exit {code}" in reading.failure


def test_json_reward_keeps_extra_keys_bounded() -> None:
    reading = read_reward("json", 1, b'log\n{"reward": 0.5, "tests": 4, "passed": 2}\n')
    assert reading.reward == 0.5 and reading.extra == {"tests": 4, "passed": 2} and reading.failure is None
    big = read_reward("json", 0, b'{"reward": 1, "blob": "' + b"x" * 10_000 + b'"}')
    assert big.reward == 1.0 and big.extra == {"truncated": True}
    for bad in (b"0.5", b'{"reward": "1"}', b'{"reward": true}', b'{"reward": NaN}', b'{"reward": 1e999}', b"[1]"):
        failed = read_reward("json", 0, bad)
        assert failed.reward is None and failed.failure, bad


def test_score_document_shape_and_failures() -> None:
    spec = ScoreSpec("true", 5.0)
    document = score_document(spec, exit_code=None, timed_out=True, duration_s=5.01, stdout_tail=b"x" * 9000,
                              stderr_tail=b"")
    assert set(document) >= {"reward", "exit", "duration_s", "output_tail", "failure", "format", "extra"}
    assert document["reward"] is None and "--score-timeout" in document["failure"]
    assert len(document["output_tail"]) <= 4096
    started = score_document(spec, exit_code=None, timed_out=False, duration_s=0.0, stdout_tail=b"",
                             stderr_tail=b"", start_error="no bwrap")
    assert started["failure"] == "the verifier could not start: no bwrap"
    with pytest.raises(ValueError):
        ScoreSpec("true", math.nan)
    with pytest.raises(ValueError):
        ScoreSpec("true", 1.0, "yaml")


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    assert pass_at_k(4, 2, 1) == pytest.approx(0.5)
    assert pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)
    assert pass_at_k(4, 2, 3) == 1.0
    assert pass_at_k(4, 0, 4) == 0.0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_groups_advantages_and_the_original() -> None:
    gid = group_id("ab" * 32, 3)
    assert gid == group_id("ab" * 32, 3) != group_id("ab" * 32, 4) and len(gid) == 16
    rows: list[dict[str, object]] = [{"branch": i, "score": {"reward": r}} for i, r in enumerate([1.0, 0.0, 1.0, 0.0])]
    rows.append({"branch": 9, "score": {"reward": None, "failure": "timeout"}})
    rows.append({"branch": 10})  # not scored (planned, never run): no group
    summary = apply_groups(rows, gid, original_reward=1.0)
    assert summary is not None
    assert summary["n"] == 4 and summary["unscored"] == 1 and summary["mean"] == 0.5 and summary["std"] == 0.5
    assert summary["pass_at_k"]["1"] == pytest.approx(0.5) and summary["equal_to_original"] == 2
    groups = [row.get("group") for row in rows]
    assert groups[0] == {"id": gid, "n": 4, "mean": 0.5, "std": 0.5, "advantage": 0.5, "advantage_grpo": 1.0}
    assert groups[1]["advantage_grpo"] == -1.0  # type: ignore[index]
    assert groups[4]["advantage"] is None and groups[5] is None  # type: ignore[index]
    same = group_stats([1.0, 1.0])
    assert same.std == 0.0 and same.advantage_grpo(1.0) == 0.0
    assert apply_groups([{"branch": 1}], gid, None) is None
