"""A run dir is input from a stranger: `forkpoint continue` empties and refills only a workspace that is still the
very directory the replay made (device and inode recorded in the state dir's snapshot description, the run dir and
state dir too) or one the user names with --workspace, after the recorded-path check; `forkpoint gc` removes only
a snapshot that names the run dir it was given. Each attack is made as a stranger would make it (a bundle with
relative paths, a run dir naming another run's state dir, a replaced workspace) and run through the real CLI; the
effect is observed on the victim's files. `continue` also checks the variants it read back against the protocol it
speaks (the rest of continue: tests/e2e/test_branching.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from forkpoint.branches.resume import ContinueOptions, collect_snapshots, continue_run_dir
from forkpoint.core.errors import ErrorKind, ReplayError


def _run_dir(tmp_path: Path, state: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text(json.dumps({"state_dir": str(state)}))
    return run


def _replayed(tmp_path: Path, sandbox: str = "local", run_id: str = "r1") -> tuple[Path, Path, Path]:
    """A real replay-only run (keeps its boundary snapshot) of a one-call Claude session recorded in
    ``tmp_path/ws-<run_id>``: (run dir, state dir, workspace)."""
    from forkpoint.run.engine import execute
    from forkpoint.run.request import build_request
    from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use

    workspace = tmp_path / f"ws-{run_id}"
    workspace.mkdir()
    (workspace / "data.txt").write_text("data\n")
    builder = ClaudeSessionBuilder(session_id="00000000-0000-4000-8000-000000000001", cwd=str(workspace))
    builder.user_prompt("go")
    builder.assistant([text("x"), tool_use("toolu_0001", "Bash", {"command": "echo hi > out.txt && cat data.txt"})])
    builder.results({"toolu_0001": "data"})
    builder.assistant([text("Done.")])
    session = builder.write(tmp_path / f"session-{run_id}.jsonl")
    result = execute(build_request({
        "agent": "claude-code", "trajectory": str(session), "after_step": 1, "workspace": str(workspace),
        "replay_only": True, "sandbox": sandbox, "state_dir": str(tmp_path / "state"),
        "output_dir": str(tmp_path / "out"), "run_id": run_id}, source="test"))
    assert result.failure is None, result.failure
    return Path(result.output_dir or ""), Path(result.state_dir or ""), workspace


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forkpoint.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def _continue(run: Path, *extra: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return _cli("continue", str(run), "--branches", "1", "--upstream", "stub", "--json", *extra, cwd=cwd)


def _victim(path: Path) -> Path:
    path.mkdir()
    (path / "precious.txt").write_text("keep me\n")
    return path


def _untouched(victim: Path) -> None:
    assert sorted(p.name for p in victim.iterdir()) == ["precious.txt"]
    assert (victim / "precious.txt").read_text() == "keep me\n"


def _edit(path: Path, change: Any) -> None:
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))


@pytest.mark.parametrize("state_path", ["relative", "absolute"])
def test_continue_on_a_shipped_bundle_never_empties_the_folder_its_documents_name(
        tmp_path: Path, state_path: str) -> None:
    """The attack: a bundle (run dir + state dir + trajectory) whose result.json names another folder as the
    workspace. Before, `continue` emptied that folder and planted the snapshot's files, then the path check refused
    (exit 1). Now the bundle is not the run dir the replay made: refused before any effect (exit 2)."""
    run, state, _ = _replayed(tmp_path)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    shutil.copytree(run, bundle / "run")
    shutil.copytree(state, bundle / "state")
    shutil.copy(tmp_path / "session-r1.jsonl", bundle / "session.jsonl")
    victim = _victim(tmp_path / "victim")

    def crafted(result: dict[str, Any]) -> None:
        result["state_dir"] = "state" if state_path == "relative" else str(bundle / "state")
        result["metadata"]["sandbox"]["workspace"] = str(victim)

    _edit(bundle / "run" / "result.json", crafted)
    _edit(bundle / "run" / "manifest.json", lambda manifest: manifest["source"].update(path="session.jsonl"))
    done = _continue(Path("run"), cwd=bundle)
    _untouched(victim)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert ("relative state dir" if state_path == "relative" else "--workspace DIR") in done.stdout
    assert not (bundle / "run" / "branches.json").exists()  # nothing planned, nothing ran


def test_continue_refuses_a_recorded_workspace_that_was_replaced_and_a_named_one_off_the_recorded_path(
        tmp_path: Path) -> None:
    """The run dir is the real one, but its workspace path now holds another directory (another inode): it is not
    emptied. A workspace named with --workspace is checked against the recorded cwd before
    the restore would empty it."""
    run, _, workspace = _replayed(tmp_path)
    other = _victim(tmp_path / "other")  # made while the workspace exists: another inode
    shutil.rmtree(workspace)
    other.rename(workspace)
    replaced = _continue(run)
    _untouched(workspace)
    assert replaced.returncode == 20 and "no longer the directory the run replayed in" in replaced.stdout, (
        replaced.stdout, replaced.stderr)
    elsewhere = _victim(tmp_path / "elsewhere")
    named = _continue(run, "--workspace", str(elsewhere))
    _untouched(elsewhere)
    assert named.returncode == 20 and "recorded in" in named.stdout, (named.stdout, named.stderr)


def test_continue_of_a_copied_run_dir_restores_only_into_the_workspace_the_user_names(tmp_path: Path) -> None:
    """A run dir moved elsewhere (copied with its state dir) continues once the user names the workspace."""
    from forkpoint import runtimes

    if runtimes.find("claude-code", "2.1.332") is None:
        pytest.skip("claude-code 2.1.332 is not installed")
    run, state, workspace = _replayed(tmp_path)
    copy = tmp_path / "moved"
    shutil.copytree(run, copy)
    (workspace / "out.txt").unlink()  # the boundary's file: the restore brings it back
    refused = _continue(copy)
    assert refused.returncode == 2 and "--workspace DIR" in refused.stdout
    assert not (workspace / "out.txt").exists()
    named = _continue(copy, "--workspace", str(workspace))
    assert "branches" in json.loads(named.stdout), (named.stdout, named.stderr)
    assert (workspace / "out.txt").read_text() == "hi\n"  # restored from the snapshot into the named workspace
    assert (state / "branches" / "1" / "journal.jsonl").is_file()


def test_continue_under_bwrap_refuses_a_run_dir_naming_another_runs_state_dir(tmp_path: Path) -> None:
    """Under bwrap the workspace is never written, the state dir is: a crafted run dir naming another run's state
    dir (its snapshot facts copied) would add branches there and replace its TMPDIR. Refused: the snapshot names
    its own run (a token the crafted run dir does not have)."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    run, state, _ = _replayed(tmp_path, sandbox="bwrap", run_id="victim")
    (state / "tmp").mkdir(exist_ok=True)
    (state / "tmp" / "kept.txt").write_text("keep me\n")
    crafted = tmp_path / "crafted"
    shutil.copytree(run, crafted)
    _edit(crafted / "result.json", lambda result: result["metadata"]["boundary_snapshot"].pop("owner", None))
    before = sorted(str(p.relative_to(state)) for p in state.rglob("*"))
    done = _continue(crafted)
    assert sorted(str(p.relative_to(state)) for p in state.rglob("*")) == before
    assert (state / "tmp" / "kept.txt").read_text() == "keep me\n"
    assert done.returncode == 20 and "does not belong to the run" in done.stdout, (done.stdout, done.stderr)


def test_continue_under_bwrap_of_a_copied_run_dir_needs_no_workspace(tmp_path: Path) -> None:
    """Under bwrap the workspace is never written: a copy of the run dir (its token too) continues from the
    state dir whose snapshot names that token."""
    from forkpoint import runtimes

    if shutil.which("bwrap") is None or runtimes.find("claude-code", "2.1.332") is None:
        pytest.skip("bubblewrap or claude-code 2.1.332 is not installed")
    run, state, workspace = _replayed(tmp_path, sandbox="bwrap")
    copy = tmp_path / "moved"
    shutil.copytree(run, copy)
    (workspace / "mine.txt").write_text("the user's own\n")
    done = _continue(copy)
    assert "branches" in json.loads(done.stdout), (done.stdout, done.stderr)
    assert (state / "branches" / "1" / "journal.jsonl").is_file()
    assert (workspace / "mine.txt").read_text() == "the user's own\n"  # never restored into


def test_a_snapshot_that_names_no_run_is_continued_only_into_a_named_workspace_and_never_collected(
        tmp_path: Path) -> None:
    """Runs replayed before snapshots named their run: nothing proves whose workspace or state dir it is."""
    run, state, workspace = _replayed(tmp_path)
    _edit(state / "snapshot" / "snapshot.json", lambda description: description.pop("owner"))
    _edit(run / "result.json", lambda result: result["metadata"]["boundary_snapshot"].pop("owner"))
    (workspace / "mine.txt").write_text("the user's own\n")
    refused = _continue(run)
    assert refused.returncode == 2 and "older forkpoint" in refused.stdout, (refused.stdout, refused.stderr)
    assert (workspace / "mine.txt").read_text() == "the user's own\n"
    with pytest.raises(ReplayError, match="does not name the run it belongs to"):
        collect_snapshots(run)
    assert (state / "snapshot" / "workspace").is_dir()


def test_gc_removes_the_snapshot_of_the_run_it_was_given(tmp_path: Path) -> None:
    run, state, _ = _replayed(tmp_path)
    (state / "branches" / "1" / "workspace").mkdir(parents=True)
    (state / "branches" / "1" / "workspace" / "f").write_text("x" * 5000)
    (state / "branches" / "1" / "journal.jsonl").write_text("")
    freed = collect_snapshots(run)
    assert freed["bytes"] >= 5000 and len(freed["removed"]) == 2
    assert not (state / "snapshot").exists() and not (state / "branches" / "1" / "workspace").exists()
    assert collect_snapshots(run)["removed"] == []  # nothing left to free


def test_gc_through_a_crafted_or_copied_run_dir_never_removes_another_runs_snapshot(tmp_path: Path) -> None:
    """The attack: a run dir whose result.json names another run's state dir. Before, `forkpoint gc` removed that
    run's snapshot. Now the snapshot names its run (token, run dir and state dir by device and inode)."""
    run, state, _ = _replayed(tmp_path)
    crafted = tmp_path / "crafted"
    crafted.mkdir()
    (crafted / "result.json").write_text(json.dumps({"state_dir": str(state)}))
    copied = tmp_path / "copied"
    shutil.copytree(run, copied)  # the token too: a copy is still not the run dir the snapshot belongs to
    relative = tmp_path / "relative"
    relative.mkdir()
    (relative / "result.json").write_text(json.dumps({"state_dir": os.path.relpath(state, tmp_path)}))
    for other, says in ((crafted, "does not belong to the run"), (copied, "is not the directory the replay made"),
                        (relative, "relative state dir")):
        done = _cli("gc", str(other), cwd=tmp_path)
        assert done.returncode in (2, 20) and says in done.stderr + done.stdout, (other, done.stdout, done.stderr)
        assert (state / "snapshot" / "snapshot.json").is_file() and (state / "snapshot" / "workspace").is_dir()
    assert _cli("gc", str(run)).returncode == 0 and not (state / "snapshot").exists()


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


def _path_mapped(tmp_path: Path) -> tuple[Path, Path, str]:
    """A real replay-only run of a one-call Claude session recorded at a path that does not exist, replayed in a
    private workspace with ``--path-map RECORDED=WORKSPACE`` (what a batch job does): (run dir, workspace,
    recorded cwd)."""
    from forkpoint.run.engine import execute
    from forkpoint.run.request import build_request
    from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use

    recorded = str(tmp_path / "recorded" / "ws")
    workspace = tmp_path / "private"
    workspace.mkdir()
    (workspace / "data.txt").write_text("data\n")
    builder = ClaudeSessionBuilder(session_id="00000000-0000-4000-8000-000000000001", cwd=recorded)
    builder.user_prompt("go")
    builder.assistant([text("x"), tool_use("toolu_0001", "Bash", {"command": f"echo hi > {recorded}/out.txt"})])
    builder.results({"toolu_0001": ""})
    builder.assistant([text("Done.")])
    session = builder.write(tmp_path / "session.jsonl")
    result = execute(build_request({
        "agent": "claude-code", "trajectory": str(session), "after_step": 1, "workspace": str(workspace),
        "replay_only": True, "path_map": [f"{recorded}={workspace}"], "state_dir": str(tmp_path / "state"),
        "output_dir": str(tmp_path / "out"), "run_id": "mapped"}, source="test"))
    assert result.failure is None, result.failure
    assert (workspace / "out.txt").read_text() == "hi\n"
    return Path(result.output_dir or ""), workspace, recorded


def test_continue_of_a_path_mapped_run_carries_the_recorded_cwds_entry(tmp_path: Path) -> None:
    """A run replayed with --path-map (a batch job's run dir) was refused by `continue` before anything ran (the
    workspace checked without the map): now its branch runs in the mapped workspace, the map re-targeted at the
    workspace continue verified."""
    from forkpoint import runtimes

    if runtimes.find("claude-code", "2.1.332") is None:
        pytest.skip("claude-code 2.1.332 is not installed")
    run, workspace, recorded = _path_mapped(tmp_path)
    (workspace / "out.txt").unlink()  # the boundary's file: the restore brings it back
    done = _continue(run)
    assert "branches" in json.loads(done.stdout), (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert (workspace / "out.txt").read_text() == "hi\n"  # the boundary restored into the mapped workspace
    assert not os.path.lexists(recorded)  # nothing was made at the recorded path
    events = (tmp_path / "state" / "mapped" / "branches" / "1" / "journal.jsonl").read_text()
    assert "continuation_started" in events  # the agent ran (the sandbox accepted the mapped workspace)


@pytest.mark.parametrize("extra", [{"recorded": "/etc", "real": "/tmp/elsewhere"},
                                   {"recorded": "relative", "real": "/tmp/x"}, "not an entry"])
def test_continue_refuses_a_run_dirs_path_map_with_more_than_the_recorded_cwds_entry(
        tmp_path: Path, extra: Any) -> None:
    """A run dir's map is a stranger's: an extra entry, a relative path or a wrong shape is refused before any
    effect (the workspace keeps what the replay left)."""
    run, workspace, _ = _path_mapped(tmp_path)
    (workspace / "planted.txt").write_text("keep\n")
    _edit(run / "result.json", lambda document: document["metadata"]["sandbox"]["path_map"].append(extra))
    done = _continue(run)
    assert done.returncode == 2 and "path_map" in done.stdout, (done.returncode, done.stdout[-2000:])
    assert (workspace / "planted.txt").read_text() == "keep\n" and not (run / "branches.json").exists()
