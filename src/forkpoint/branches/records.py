"""What a re-run of planned branches takes from branches.json (pure): each branch's recorded prompt identity and
model/seed/temperature variant, checked as untrusted input, and the given flags checked against them.

``forkpoint continue RUN_DIR`` re-runs the planned branches a killed run never started. Such a branch must run as it
was planned, never as whatever the second command line happens to say: its variant is read back from the row the
plan wrote, and its prompt (never stored, only its SHA-256 and length) must be given again and match. Flags that
would change a recorded branch are refused rather than silently ignored or silently applied.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from forkpoint.branches.branching import BranchRequest, BranchVariant, BranchVariants
from forkpoint.core.errors import configuration
from forkpoint.core.hashing import sha256_hex

#: bounds on what a row may claim (a hand-edited or planted branches.json is input like any other)
MAX_BRANCH_INDEX = 100_000
MAX_MODEL_CHARS = 256
MAX_PROMPT_CHARS = 1 << 24
SEED_RANGE = range(-(1 << 63), 1 << 63)  # what the Chat Completions ``seed`` (int64) can carry
_SHA256 = re.compile(r"[0-9a-f]{64}")
#: the variant field, the flag that sets it
_FLAGS = {"model": "--branch-model", "seed": "--branch-seed", "temperature": "--branch-temperature"}


#: the run-level model choice a planned row records (``run_pins``), with the flag that sets each
RUN_PIN_FLAGS = {"model": "--model", "temperature": "--temperature", "top_p": "--top-p", "seed": "--seed",
                 "max_output_tokens": "--max-output-tokens", "disable_thinking": "--disable-thinking",
                 "reasoning_effort": "--reasoning-effort"}


@dataclass(frozen=True)
class PlannedBranch:
    """One ``planned`` row of branches.json: its id, its prompt's identity (None: it had none), its variant and
    the run-level model choice it was planned under (None: a row written before those were recorded)."""

    index: int
    prompt_sha256: str | None
    prompt_length: int | None
    variant: BranchVariant
    run_pins: dict[str, Any] | None = None

    def matches(self, prompt: str) -> bool:
        return len(prompt) == self.prompt_length and sha256_hex(prompt) == self.prompt_sha256


def planned_branches(document: Any, where: str) -> list[PlannedBranch]:
    """The rows still ``planned`` (their branch may have started since: the branch's journal says), validated."""
    rows = document.get("branches") if isinstance(document, dict) else None
    if not isinstance(rows, list) or len(rows) > MAX_BRANCH_INDEX:
        raise configuration(f"{where}: 'branches' must be a list of at most {MAX_BRANCH_INDEX} rows")
    planned = [_planned(row, f"{where}: branch row {number}") for number, row in enumerate(rows, 1)
               if isinstance(row, dict) and row.get("status") == "planned"]
    if len({branch.index for branch in planned}) != len(planned):
        raise configuration(f"{where}: a branch id is planned twice")
    return planned


def _planned(row: dict[str, Any], where: str) -> PlannedBranch:
    index = row.get("branch")
    if not _is_int(index) or not 1 <= index <= MAX_BRANCH_INDEX:
        raise configuration(f"{where}: 'branch' must be an integer in 1..{MAX_BRANCH_INDEX}")
    where = f"{where} (branch {index})"
    digest, length = row.get("prompt_sha256"), row.get("prompt_length")
    if (digest is None) != (length is None):
        raise configuration(f"{where}: prompt_sha256 and prompt_length are recorded together or not at all")
    if digest is not None and not (isinstance(digest, str) and _SHA256.fullmatch(digest)):
        raise configuration(f"{where}: prompt_sha256 must be 64 lowercase hex digits")
    if length is not None and not (_is_int(length) and 1 <= length <= MAX_PROMPT_CHARS):
        raise configuration(f"{where}: prompt_length must be an integer in 1..{MAX_PROMPT_CHARS}")
    model, seed, temperature = row.get("model"), row.get("seed"), row.get("temperature")
    if model is not None and not (isinstance(model, str) and model.strip() != "" and len(model) <= MAX_MODEL_CHARS
                                  and model.isprintable()):
        raise configuration(f"{where}: model must be a printable non-empty string of at most {MAX_MODEL_CHARS} "
                            "characters")
    if seed is not None and not (_is_int(seed) and seed in SEED_RANGE):
        raise configuration(f"{where}: seed must be an integer that fits 64 bits")
    if temperature is not None and not (isinstance(temperature, int | float) and not isinstance(temperature, bool)
                                        and math.isfinite(temperature) and 0 <= temperature <= 2):
        raise configuration(f"{where}: temperature must be a number within [0, 2]")
    return PlannedBranch(index, digest, length, BranchVariant(
        model, seed, None if temperature is None else float(temperature)), _run_pins(row.get("run_pins"), where))


def _run_pins(value: Any, where: str) -> dict[str, Any] | None:
    """A row's recorded run-level choice, validated as the command line's would be (SamplingPins)."""
    from forkpoint.bridge.translate.sampling import SamplingPins

    if value is None:
        return None
    if not isinstance(value, dict) or not set(value) <= set(RUN_PIN_FLAGS):
        raise configuration(f"{where}: run_pins must be an object with keys among {', '.join(RUN_PIN_FLAGS)}")
    model = value.get("model")
    if model is not None and not (isinstance(model, str) and len(model) <= MAX_MODEL_CHARS and model.isprintable()):
        raise configuration(f"{where}: run_pins.model must be a printable string of at most {MAX_MODEL_CHARS} "
                            "characters")
    kinds: dict[str, type | tuple[type, ...]] = {
        "temperature": (int, float), "top_p": (int, float), "seed": int, "max_output_tokens": int,
        "disable_thinking": bool, "reasoning_effort": str}
    for key, kind in kinds.items():
        found = value.get(key)
        if found is not None and (not isinstance(found, kind) or (kind is not bool and isinstance(found, bool))
                                  or (isinstance(found, float) and not math.isfinite(found))
                                  or (key == "seed" and found not in SEED_RANGE)):
            raise configuration(f"{where}: run_pins.{key} has the wrong type or range")
    try:
        SamplingPins(**value)
    except ValueError as error:
        raise configuration(f"{where}: run_pins: {error}") from None
    return {key: found for key, found in value.items() if found is not None and found is not False}


def recorded_run_choice(rerun: Sequence[PlannedBranch], given: dict[str, Any]) -> dict[str, Any]:
    """The run-level model choice for a ``continue`` that re-runs ``rerun``: what their rows recorded, which the
    command line may restate but not change (a re-run branch runs as it was planned). ``given`` holds the command
    line's values by request key (None / False: not given); returns the values to use for the recorded keys."""
    recorded = [branch for branch in rerun if branch.run_pins is not None]
    if not recorded:
        return {}
    first = recorded[0]
    for branch in recorded[1:]:
        if branch.run_pins != first.run_pins:
            raise configuration(f"branches {first.index} and {branch.index} were planned with different run-level "
                                "model choices (--model, --temperature, ...); a continue runs all its branches with "
                                "one: they cannot be re-run together")
    pins = first.run_pins or {}
    for key, flag in RUN_PIN_FLAGS.items():
        wanted, was = given.get(key), pins.get(key)
        if wanted is not None and wanted is not False and wanted != was:
            said = f"{flag} {was!r}" if was is not None else f"no {flag}"
            raise configuration(f"branch {first.index} was planned with {said}; `forkpoint continue` re-runs a "
                                f"planned branch with the run-level choice it was planned under: drop {flag}, or "
                                "finish the planned branches first and add new ones with --branches K")
    return dict(pins)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def resume_request(planned: Sequence[PlannedBranch], started: Collection[int], prompts: Sequence[str],
                   given: BranchVariants, *, adds_branches: bool, parallel: int) -> BranchRequest:
    """The request that finishes ``planned``: each branch with its recorded variant, and, when it has not
    ``started`` (those are only read back, never run again), the given prompt that matches its record.

    Without ``adds_branches`` (no ``--branches K``) the given prompts and ``--branch-*`` values can only be meant
    for the branches re-run here: a prompt that matches none of them, or a value that differs from a branch's
    recorded one, is refused. With it they belong to the new branches; a re-run branch still takes its prompt
    from them by hash (and is refused when it is not there).
    """
    indices = [branch.index for branch in planned]
    if not indices or indices != list(range(indices[0], indices[0] + len(indices))):
        raise configuration(f"the planned branches {indices} are not one run of consecutive ids (branches.json "
                            "was edited?)")  # each plan appends one such run; its rows are all updated at its end
    rerun = [branch for branch in planned if branch.index not in started]
    chosen: dict[int, str | None] = {branch.index: _prompt_of(branch, prompts, adds_branches) for branch in rerun}
    if not adds_branches:
        for number, prompt in enumerate(prompts, 1):
            if not any(branch.matches(prompt) for branch in rerun):
                raise configuration(f"--branch-prompt #{number} matches no planned branch to re-run (a re-run "
                                    "branch keeps its recorded prompt; new branches need --branches K)")
        _check_unchanged(rerun, given)
    return BranchRequest(len(planned), tuple(chosen.get(index) for index in indices), parallel, indices[0],
                         tuple(branch.variant for branch in planned))


def _prompt_of(branch: PlannedBranch, prompts: Sequence[str], adds_branches: bool) -> str | None:
    if branch.prompt_sha256 is None:
        return None
    found = next((prompt for prompt in prompts if branch.matches(prompt)), None)
    if found is None:
        hint = (" (the given ones are for the new branches: finish the planned ones first, without --branches)"
                if adds_branches and prompts else " (none of the given ones matches)" if prompts else "")
        raise configuration(f"branch {branch.index} was planned with a --branch-prompt of {branch.prompt_length} "
                            f"characters (SHA-256 {branch.prompt_sha256[:12]}…) and only its hash is kept: give "
                            f"the same text again with --branch-prompt to re-run it{hint}")
    return found


def _check_unchanged(rerun: Sequence[PlannedBranch], given: BranchVariants) -> None:
    """A ``--branch-*`` value (one for all, or one per re-run branch in id order) must equal each recorded one."""
    lists = {"model": given.models, "seed": given.seeds, "temperature": given.temperatures}
    for field, values in lists.items():
        if not values:
            continue
        flag = _FLAGS[field]
        if not rerun:
            raise configuration(f"{flag} without --branches applies to the planned branches a killed run did not "
                                "start; there is none")
        if len(values) not in (1, len(rerun)):
            raise configuration(f"give {flag} once for all {len(rerun)} re-run branches or once per re-run branch, "
                                f"not {len(values)} times")
        for position, branch in enumerate(rerun):
            wanted = values[0] if len(values) == 1 else values[position]
            recorded = branch.variant.facts()[field]
            if wanted != recorded:
                was = f"{field} {recorded!r}" if recorded is not None else f"no {flag} (the run's own setting)"
                raise configuration(f"branch {branch.index} was planned with {was}; `forkpoint continue` re-runs a "
                                    f"planned branch with its recorded variant: drop {flag}, or add new branches "
                                    "with --branches K")
