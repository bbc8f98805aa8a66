"""A re-run of planned branches takes each branch's recorded variant and prompt identity from branches.json (checked
as untrusted input) and refuses flags that would change a recorded branch."""

from __future__ import annotations

import json
from typing import Any

import pytest

from forkpoint.branches.branching import BranchRequest, BranchVariant, BranchVariants
from forkpoint.branches.records import PlannedBranch, planned_branches, recorded_run_choice, resume_request
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.hashing import sha256_hex

PROMPT = "Take branch BRAVO."


def _row(index: int, status: str = "planned", prompt: str | None = None, **variant: Any) -> dict[str, Any]:
    return {"branch": index, "status": status, "prompt_sha256": sha256_hex(prompt) if prompt else None,
            "prompt_length": len(prompt) if prompt else None,
            **{"model": None, "seed": None, "temperature": None, **variant}}


def _planned(*rows: dict[str, Any]) -> list[PlannedBranch]:
    return planned_branches({"branches": list(rows)}, "branches.json")


def _resume(planned: list[PlannedBranch], *, started: tuple[int, ...] = (), prompts: tuple[str, ...] = (),
            given: BranchVariants | None = None, adds: bool = False) -> BranchRequest:
    return resume_request(planned, set(started), prompts, given or BranchVariants(), adds_branches=adds, parallel=1)


def test_planned_rows_are_read_back_with_their_variant_and_prompt_identity() -> None:
    planned = _planned(_row(1, "finished", seed=1), _row(2, prompt=PROMPT, seed=22, model="other"),
                       _row(3, temperature=1))
    assert [b.index for b in planned] == [2, 3]
    assert planned[0].variant == BranchVariant("other", 22) and planned[0].matches(PROMPT)
    assert not planned[0].matches(PROMPT + " ") and planned[1].prompt_sha256 is None
    assert planned[1].variant == BranchVariant(temperature=1.0) and isinstance(planned[1].variant.temperature, float)
    # rows a forkpoint without per-branch variants wrote have no such keys: the run's own settings
    assert _planned({"branch": 1, "status": "planned"})[0].variant == BranchVariant()


@pytest.mark.parametrize(("change", "message"), [
    ({"branch": True}, "'branch' must be an integer"),
    ({"branch": 0}, "'branch' must be an integer"),
    ({"seed": "7"}, "seed must be an integer"),
    ({"seed": False}, "seed must be an integer"),
    ({"seed": 1 << 63}, "seed must be an integer that fits 64 bits"),
    ({"temperature": 2.5}, "temperature must be a number within"),
    ({"temperature": float("nan")}, "temperature must be a number within"),
    ({"temperature": True}, "temperature must be a number within"),
    ({"model": ""}, "model must be a printable non-empty string"),
    ({"model": "gpt\n-evil"}, "model must be a printable non-empty string"),
    ({"model": "m" * 257}, "model must be a printable non-empty string"),
    ({"model": ["m"]}, "model must be a printable non-empty string"),
    ({"prompt_sha256": "ab" * 32}, "recorded together or not at all"),
    ({"prompt_sha256": "AB" * 32, "prompt_length": 3}, "64 lowercase hex digits"),
    ({"prompt_sha256": "ab" * 32, "prompt_length": 0}, "prompt_length must be an integer"),
    ({"run_pins": ["temperature"]}, "run_pins must be an object with keys among"),
    ({"run_pins": {"api_key": "x"}}, "run_pins must be an object with keys among"),
    ({"run_pins": {"temperature": "0.5"}}, "run_pins.temperature has the wrong type"),
    ({"run_pins": {"temperature": 3}}, "run_pins: --temperature must be within"),
    ({"run_pins": {"top_p": float("nan")}}, "run_pins.top_p has the wrong type"),
    ({"run_pins": {"seed": True}}, "run_pins.seed has the wrong type"),
    ({"run_pins": {"seed": 1 << 64}}, "run_pins.seed has the wrong type or range"),
    ({"run_pins": {"disable_thinking": 1}}, "run_pins.disable_thinking has the wrong type"),
    ({"run_pins": {"model": "a\nb"}}, "run_pins.model must be a printable string"),
    ({"run_pins": {"max_output_tokens": 0}}, "run_pins: --max-output-tokens must be at least 1"),
])
def test_a_hostile_planned_row_is_refused(change: dict[str, Any], message: str) -> None:
    row = json.loads(json.dumps({**_row(2), **change}))  # as read from disk (NaN survives: json reads it)
    with pytest.raises(ReplayError, match=message) as caught:
        _planned(row)
    assert caught.value.kind is ErrorKind.CONFIGURATION and "branch row 1" in caught.value.message


def test_a_document_that_is_no_list_of_rows_or_plans_a_branch_twice_is_refused() -> None:
    with pytest.raises(ReplayError, match="'branches' must be a list"):
        planned_branches({"branches": {"1": {}}}, "branches.json")
    with pytest.raises(ReplayError, match="'branches' must be a list"):
        planned_branches(["not", "an", "object"], "branches.json")
    with pytest.raises(ReplayError, match="planned twice"):
        _planned(_row(2), _row(2))
    with pytest.raises(ReplayError, match="not one run of consecutive ids"):
        _resume(_planned(_row(2), _row(4)))


def test_a_rerun_branch_takes_its_recorded_variant_and_the_given_prompt_that_matches_its_hash() -> None:
    planned = _planned(_row(1, prompt="ALPHA", seed=11), _row(2, prompt=PROMPT, seed=22, model="other"),
                       _row(3, seed=33))
    request = _resume(planned, started=(1,), prompts=(PROMPT,))
    assert list(request.indices) == [1, 2, 3]
    assert request.prompts == (None, PROMPT, None)  # the started branch is only read back: no prompt needed
    assert [request.variant(i) for i in request.indices] == [
        BranchVariant(seed=11), BranchVariant("other", 22), BranchVariant(seed=33)]
    # the same values given again are no conflict (one for all, or one per re-run branch in id order)
    _resume(planned, started=(1,), prompts=(PROMPT,), given=BranchVariants(seeds=(22, 33)))
    _resume(planned[2:], given=BranchVariants(seeds=(33,)))


def test_a_rerun_branch_whose_prompt_is_missing_or_different_is_refused() -> None:
    planned = _planned(_row(2, prompt=PROMPT), _row(3))
    with pytest.raises(ReplayError, match=r"branch 2 was planned with a --branch-prompt of 18 characters .*give the "
                                          r"same text again with --branch-prompt to re-run it$"):
        _resume(planned)
    with pytest.raises(ReplayError, match="none of the given ones matches"):
        _resume(planned, prompts=("Take branch ALPHA.",))
    with pytest.raises(ReplayError, match="finish the planned ones first"):
        _resume(planned, prompts=("new branches' prompt",), adds=True)
    assert _resume(planned, prompts=(PROMPT,), adds=True).prompts == (PROMPT, None)


def test_flags_that_would_change_a_recorded_branch_are_refused_without_branches_k() -> None:
    planned = _planned(_row(2, seed=22), _row(3, seed=33, model="m"))
    with pytest.raises(ReplayError, match=r"branch 2 was planned with seed 22; .* drop --branch-seed"):
        _resume(planned, given=BranchVariants(seeds=(5,)))
    with pytest.raises(ReplayError, match=r"branch 2 was planned with no --branch-model \(the run's own setting\)"):
        _resume(planned, given=BranchVariants(models=("m",)))
    with pytest.raises(ReplayError, match="once per re-run branch, not 3 times"):
        _resume(planned, given=BranchVariants(seeds=(22, 33, 44)))
    with pytest.raises(ReplayError, match="--branch-prompt #1 matches no planned branch to re-run"):
        _resume(planned, prompts=(PROMPT,))
    with pytest.raises(ReplayError, match="there is none"):  # every planned branch had started
        _resume(planned, started=(2, 3), given=BranchVariants(seeds=(22,)))
    # with --branches K the flags are the new branches': the re-run ones keep their records
    request = _resume(planned, given=BranchVariants(seeds=(5,)), adds=True)
    assert [request.variant(i).seed for i in request.indices] == [22, 33]


PINS = {"model": "open-model-7b", "temperature": 0.5, "seed": 7, "disable_thinking": True}


def test_rerun_branches_take_the_run_level_choice_they_were_planned_under() -> None:
    planned = _planned(_row(2, run_pins=PINS), _row(3, run_pins=PINS))
    assert planned[0].run_pins == PINS
    assert recorded_run_choice(planned, {}) == PINS  # nothing given: the recorded choice
    restated = {"model": "open-model-7b", "temperature": 0.5, "seed": None, "disable_thinking": False}
    assert recorded_run_choice(planned, restated) == PINS  # restating (part of) it is fine
    assert recorded_run_choice([], {"temperature": 0.9}) == {}  # nothing re-run: the call's own choice
    # rows written before run_pins existed constrain nothing
    assert recorded_run_choice(_planned(_row(2)), {"temperature": 0.9}) == {}


@pytest.mark.parametrize(("given", "message"), [
    ({"temperature": 0.9}, "branch 2 was planned with --temperature 0.5"),
    ({"top_p": 0.9}, "branch 2 was planned with no --top-p"),
    ({"model": "another"}, "branch 2 was planned with --model 'open-model-7b'"),
])
def test_a_run_level_flag_that_would_change_a_rerun_branch_is_refused(given: dict[str, Any], message: str) -> None:
    with pytest.raises(ReplayError, match=message) as caught:
        recorded_run_choice(_planned(_row(2, run_pins=PINS)), given)
    assert caught.value.kind is ErrorKind.CONFIGURATION and "--branches K" in caught.value.message


def test_rerun_branches_planned_under_different_run_level_choices_cannot_run_together() -> None:
    planned = _planned(_row(2, run_pins=PINS), _row(3, run_pins={**PINS, "seed": 8}))
    with pytest.raises(ReplayError, match="branches 2 and 3 were planned with different run-level"):
        recorded_run_choice(planned, {})
