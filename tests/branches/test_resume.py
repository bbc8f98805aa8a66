"""`forkpoint gc` removes only what forkpoint made: a crafted result.json naming another folder as its state dir
cannot make it delete that folder's `snapshot/` or `branches/*/workspace`. `forkpoint continue` checks the variants
it read back against the protocol it speaks (the rest of continue: tests/e2e/test_branching.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from forkpoint.branches.branching import SNAPSHOT_SCHEMA
from forkpoint.branches.resume import ContinueOptions, collect_snapshots, continue_run_dir
from forkpoint.core.errors import ErrorKind, ReplayError


def _run_dir(tmp_path: Path, state: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text(json.dumps({"state_dir": str(state)}))
    return run


def test_gc_removes_a_real_snapshot_and_branch_copies(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "snapshot" / "workspace").mkdir(parents=True)
    (state / "snapshot" / "workspace" / "f").write_text("x" * 5000)
    (state / "snapshot" / "snapshot.json").write_text(json.dumps({"schema_version": SNAPSHOT_SCHEMA}))
    (state / "branches" / "1" / "workspace").mkdir(parents=True)
    (state / "branches" / "1" / "journal.jsonl").write_text("")
    freed = collect_snapshots(_run_dir(tmp_path, state))
    assert freed["bytes"] >= 5000 and len(freed["removed"]) == 2
    assert not (state / "snapshot").exists() and not (state / "branches" / "1" / "workspace").exists()


def test_gc_leaves_folders_forkpoint_did_not_make(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    (victim / "snapshot").mkdir(parents=True)
    (victim / "snapshot" / "precious.txt").write_text("keep")
    (victim / "branches" / "x" / "workspace").mkdir(parents=True)
    freed = collect_snapshots(_run_dir(tmp_path, victim))
    assert freed["removed"] == []
    assert (victim / "snapshot" / "precious.txt").read_text() == "keep"
    assert (victim / "branches" / "x" / "workspace").is_dir()


def test_branch_variants_one_for_all_or_one_per_branch_change_only_their_branch() -> None:
    import sys

    from forkpoint.branches.branching import BranchRequest, BranchVariant, BranchVariants
    from forkpoint.bridge.translate.sampling import SamplingPins
    from forkpoint.core.model import ContinueSettings, LaunchTarget

    request = BranchRequest.of(2, [], 1, first_index=3, variants=BranchVariants(seeds=(1, 2), models=("m",)))
    assert [request.variant(i) for i in request.indices] == [BranchVariant("m", 1), BranchVariant("m", 2)]
    assert BranchRequest.of(2, [], 1).variant(1) == BranchVariant()
    with pytest.raises(ReplayError, match="give one --branch-seed for all branches or one per branch"):
        BranchRequest.of(3, [], 1, variants=BranchVariants(seeds=(1, 2)))
    base = ContinueSettings(LaunchTarget(Path(sys.executable), "1"), "stub", None, model="run-model",
                            sampling=SamplingPins(temperature=0.5, top_p=0.9))
    assert BranchVariant().settings(base) is base
    varied = BranchVariant(seed=2).settings(base)
    assert (varied.model, varied.sampling) == ("run-model", SamplingPins(temperature=0.5, top_p=0.9, seed=2))
    assert BranchVariant("other", temperature=0.0).settings(base).model == "other"
    assert BranchVariant(seed=1).facts() == {"model": None, "seed": 1, "temperature": None}


def test_recorded_variants_are_checked_against_the_protocol_this_continue_speaks() -> None:
    from forkpoint.branches.branching import BranchRequest, BranchVariant
    from forkpoint.branches.resume import check_recorded_pins
    from forkpoint.run.request import build_request

    def request(agent: str) -> Any:
        return build_request({"agent": agent, "trajectory": "t.jsonl", "after_step": 1}, source="test")

    seeded = BranchRequest(2, (None, None), 1, 3, (BranchVariant(seed=7), BranchVariant(model="m")))
    check_recorded_pins(seeded, request("pi"))  # Chat Completions carries a seed
    with pytest.raises(ReplayError, match="the Anthropic Messages API has no seed") as caught:
        check_recorded_pins(seeded, request("claude-code"))  # a seed planted in a claude run's branches.json
    assert caught.value.kind.exit_code == 2
    check_recorded_pins(BranchRequest(1, (None,), 1, 1, (BranchVariant(temperature=0.5),)), request("claude-code"))


MANIFEST = {"mode": "replay-only", "agent": {"name": "claude-code"}, "source": {"path": "/nowhere", "sha256": "0"},
            "boundary": {"after_step": 1}}


@pytest.mark.parametrize(("files", "says"), [
    ({}, "has no manifest.json"),
    ({"manifest.json": "[1, 2]"}, "manifest.json is not a JSON object"),
    ({"manifest.json": "{"}, "manifest.json is unreadable"),
    ({"manifest.json": MANIFEST, "branches.json": '"branches"'}, "branches.json is not a JSON object"),
    ({"manifest.json": MANIFEST, "result.json": {"metadata": ["not", "an", "object"]}},
     "is not what forkpoint wrote"),
    ({"manifest.json": {**MANIFEST, "agent": "claude-code"}, "result.json": {"state_dir": "/s"}},
     "is not what forkpoint wrote"),
    ({"manifest.json": {**MANIFEST, "boundary": {"after_step": "two"}}}, "is not what forkpoint wrote"),
    ({"manifest.json": MANIFEST, "result.json": {"metadata": {"sandbox": "bwrap"}}}, "is not what forkpoint wrote"),
], ids=["no-manifest", "manifest-a-list", "manifest-torn", "branches-a-string", "metadata-a-list",
        "agent-a-string", "after-step-a-word", "sandbox-a-string"])
def test_continue_refuses_run_documents_of_the_wrong_shape_as_a_configuration_error(
        tmp_path: Path, files: dict[str, Any], says: str) -> None:
    """These were internal errors (AttributeError, TypeError) before: a run dir is a folder a person may edit."""
    run = tmp_path / "run"
    run.mkdir()
    for name, content in files.items():
        (run / name).write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(ReplayError) as refused:
        continue_run_dir(run, ContinueOptions(branches=1), lambda _: None)
    assert refused.value.kind is ErrorKind.CONFIGURATION and says in str(refused.value)


def test_continue_and_gc_refuse_a_fifo_where_a_run_document_should_be_instead_of_blocking(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "manifest.json")
    os.mkfifo(run / "result.json")
    with pytest.raises(ReplayError, match=r"manifest\.json is unreadable: not a regular file"):
        continue_run_dir(run, ContinueOptions(branches=1), lambda _: None)
    with pytest.raises(ReplayError, match=r"result\.json is unreadable: not a regular file"):
        collect_snapshots(run)
