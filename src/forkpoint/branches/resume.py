"""`forkpoint continue RUN_DIR`: more continuations from a replayed run's boundary snapshot, no tool re-run.

The run dir says what was replayed (manifest.json: agent, version, source and its SHA-256, boundary; the rebuilt
native prefix; result.json or branches.json: the state dir and the snapshot's recorded inventory hash). The
trajectory is parsed again (it must still have the recorded SHA-256), the snapshot is checked against its hash
(refused, exit 20, when it changed or is gone), and the branches run as in `replay --branches`. Without
``--branches`` the planned branches that never started (a killed run) are run, each as it was planned (its recorded
``--branch-*`` variant, its prompt given again: forkpoint.branches.records); with it, K new branches get ids after the
existing ones and the given variants. A branch that started and has no outcome is reported ambiguous, never run
again.

A run dir may come from someone else: the folders ``continue`` empties and ``gc`` removes never come from its
documents alone. The snapshot description in the state dir names its run (a token the run dir carries, the run dir
and state dir by device and inode) and its workspace (path, device, inode, lock key); see
:func:`continued_workspace` and :func:`collect_snapshots`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpoint.branches.branching import SNAPSHOT_SCHEMA
from forkpoint.core.errors import ErrorKind, ReplayError, configuration
from forkpoint.core.hashing import file_sha256
from forkpoint.core.model import Mode, NativePrefix
from forkpoint.core.results import RunDocuments, not_written_by_forkpoint, read_document, read_run

if TYPE_CHECKING:
    from forkpoint.branches.branching import BranchRequest, BranchSetup, BranchVariants
    from forkpoint.run.request import ReplayRequest


@dataclass(frozen=True)
class ContinueOptions:
    branches: int | None = None
    branch_prompts: tuple[str, ...] = ()
    parallel: int | None = None
    upstream: str | None = None
    upstream_url: str | None = None
    max_steps: int | None = None
    agent_entrypoint: Path | None = None
    #: ``--model``, the sampling pins, ``--upstream-retries`` and the ``--branch-*`` lists, by request key
    model_choice: dict[str, Any] = field(default_factory=dict)
    agent_version: str | None = None  # a verified cross-version pair (``--agent-version``)
    record_tool_schemas: bool = False
    capture_tokens: bool = False  # ``--capture-tokens``
    #: ``--workspace DIR``: the directory to restore the boundary into, named by the user (a moved run dir)
    workspace: Path | None = None
    max_processes: int | None = None  # per supervised command (forkpoint.process.limits) [512]
    #: ``--score``, ``--score-timeout``, ``--score-format``, ``--original-reward``, by request key (docs/rl.md)
    score: dict[str, Any] = field(default_factory=dict)


def continue_run_dir(run_dir: Path, options: ContinueOptions, report: Callable[[str], None]) -> dict[str, Any]:
    """Run the branches; returns branches.json as it is afterwards."""
    from forkpoint.adapters import agent_spec, get_adapter, versions
    from forkpoint.branches.branching import BranchSetup, checked_snapshot, started
    from forkpoint.branches.records import planned_branches, recorded_run_choice
    from forkpoint.process import childenv
    from forkpoint.run.request import BRANCH_LISTS, build_request, continue_settings, score_spec
    from forkpoint.run.scoring import group_id

    documents = read_run(run_dir, manifest="manifest.json (is this a forkpoint run dir?)")
    manifest, result, branches_doc = documents.manifest, documents.result, documents.branches
    assert manifest is not None  # required
    if (result is not None and result.phase == "prepared") or manifest.mode == Mode.PREPARE_ONLY.value:
        raise configuration("a prepare-only run replayed nothing: there is no boundary state to continue from")
    metadata = result.metadata if result is not None else {}
    try:  # free-form metadata a person may have edited: a wrong shape is a refusal, never a crash
        recorded_sandbox = dict(metadata.get("sandbox") or {})
    except (TypeError, ValueError) as error:
        raise not_written_by_forkpoint(run_dir / "result.json", error) from None
    snapshot_facts = documents.snapshot or {}
    state_dir = Path(documents.state_dir or "")
    agent, source, source_sha256 = manifest.agent, manifest.source_path, manifest.source_sha256
    after_step = manifest.after_step
    if not snapshot_facts or not str(state_dir):
        raise ReplayError(ErrorKind.WORKSPACE, f"{run_dir} kept no boundary snapshot (it was continued once without "
                                               "--keep-snapshot, or replayed with --drop-snapshot)")
    _require_absolute(run_dir, state_dir)
    snapshot = checked_snapshot(state_dir, snapshot_facts.get("inventory_sha256"))
    if not source.is_file() or file_sha256(source) != source_sha256:
        raise ReplayError(ErrorKind.TRAJECTORY, f"the trajectory {source} is gone or no longer the replayed one "
                                                "(SHA-256 differs)")
    adapter = get_adapter(agent)
    parsed = adapter.parse(source)
    plan = versions.plan_for(adapter, parsed, after_step, Mode.REPLAY_AND_CONTINUE)
    parsed = plan.trajectory
    prefix = _prefix(run_dir, documents)
    sandbox = str((branches_doc.sandbox if branches_doc else None) or recorded_sandbox.get("name") or "local")
    workspace, lock_key = continued_workspace(run_dir, state_dir, snapshot_facts, sandbox, options.workspace)
    path_map = recorded_path_map(recorded_sandbox.get("path_map"), parsed.cwd, workspace, sandbox,
                                 "path_map" in agent_spec(agent).sandbox_features, run_dir)
    # The --branch-* lists vary the new branches (--branches K); without it they can only restate the planned
    # branches' recorded variants (branch_records checks that), so they are no part of the request.
    run_choice = {key: value for key, value in options.model_choice.items()
                  if options.branches or key not in BRANCH_LISTS}
    # Branches a killed run planned and never started run under the run-level choice they were planned with.
    rerun = [branch for branch in planned_branches(branches_doc.document if branches_doc else {"branches": []},
                                                   f"{run_dir}/branches.json")
             if not started(state_dir, branch.index)]
    run_choice.update(recorded_run_choice(rerun, run_choice))
    request = build_request({
        "agent": agent, "trajectory": str(source), "after_step": plan.after_step, "workspace": str(workspace),
        "upstream": options.upstream, "upstream_url": options.upstream_url, "max_steps": options.max_steps,
        "agent_entrypoint": str(options.agent_entrypoint) if options.agent_entrypoint else None,
        "sandbox": sandbox, "path_map": list(path_map), "branches": options.branches or 1, **run_choice,
        "record_tool_schemas": options.record_tool_schemas, "capture_tokens": options.capture_tokens,
        **options.score}, source="continue")
    launch = adapter.prepare_launch(versions.launch_trajectory(agent_spec(agent), plan, options.agent_version),
                                    options.agent_entrypoint)
    setup = BranchSetup(adapter=adapter, plan=plan, prefix=prefix,
                        settings=continue_settings(request, agent_spec(agent), launch, plan), workspace=workspace,
                        state_dir=state_dir, output_dir=run_dir, session_id=prefix.session_id, sandbox_name=sandbox,
                        recorded_cwd=parsed.cwd, path_map=path_map, snapshot=snapshot, score=score_spec(request),
                        group_id=group_id(source_sha256, plan.after_step), original_reward=request.original_reward)
    # Like a replay, every child gets the run's own TMPDIR (removed at the end; a killed run's is replaced).
    from forkpoint.process import limits

    if options.max_processes is not None and options.max_processes < 1:
        raise configuration("--max-processes must be positive")
    with _holding(workspace, sandbox, lock_key, run_dir, parsed.cwd, path_map), \
            childenv.passing(childenv.resolve(request.env, os.environ).values, temp_dir=state_dir / "tmp"), \
            limits.limiting(options.max_processes or limits.DEFAULT_MAX_PROCESSES):
        return _run_planned(setup, run_dir, options, request, snapshot_facts, plan.after_step, report)


def _require_absolute(run_dir: Path, state_dir: Path) -> None:
    """forkpoint records absolute paths: a relative one is a crafted document, and would resolve against whatever
    folder ``continue`` or ``gc`` runs in."""
    if not state_dir.is_absolute():
        raise configuration(f"{run_dir} names a relative state dir ({state_dir}); forkpoint records absolute paths, "
                            "so this run dir was not written by forkpoint (or was edited)")


def snapshot_owner(run_dir: Path, state_dir: Path, snapshot_facts: dict[str, Any]) -> dict[str, Any] | None:
    """The state dir's snapshot description (snapshot.json, written at replay time) when it belongs to the run of
    ``run_dir``: its owner token equals the one the run dir's documents carry. None for a snapshot taken before
    snapshots named their run; a snapshot that names another run is refused (a run dir pointing at another run's
    state dir must not act on it)."""
    import hmac

    description = read_document(state_dir / "snapshot" / "snapshot.json") or {}
    owner = description.get("owner")
    if owner is None and not (snapshot_facts.get("owner")):
        return None
    recorded = (snapshot_facts.get("owner") or {}) if isinstance(snapshot_facts.get("owner"), dict) else {}
    token, claimed = recorded.get("token"), owner.get("token") if isinstance(owner, dict) else None
    if not (isinstance(token, str) and isinstance(claimed, str) and hmac.compare_digest(token, claimed)):
        who = owner.get("run_dir") if isinstance(owner, dict) else None
        named = f" (it names the run dir {str(who.get('path'))[:300]})" if isinstance(who, dict) else ""
        raise ReplayError(ErrorKind.WORKSPACE, f"the boundary snapshot in {state_dir} does not belong to the run "
                                               f"{run_dir}{named}; nothing was touched")
    return description


def bound_here(run_dir: Path, state_dir: Path, owner: dict[str, Any]) -> bool:
    """Whether the run dir and its state dir are the very directories the replay made (device and inode as
    recorded): False for a run dir or state dir that was copied, moved to another file system or machine, or
    shipped as a bundle."""
    from forkpoint.branches.branching import same_directory

    return same_directory(run_dir.resolve(), owner.get("run_dir")) and same_directory(state_dir, owner.get("state_dir"))


def continued_workspace(run_dir: Path, state_dir: Path, snapshot_facts: dict[str, Any], sandbox: str,
                        given: Path | None) -> tuple[Path, str | None]:
    """The directory ``continue`` may restore the boundary snapshot into (emptying it first), decided before any
    effect and never from the run documents alone: the one the user names (``--workspace``), else the workspace the
    replay recorded in the state dir's snapshot description, only while the run dir and state dir are the ones
    the replay made and that path is still the same directory (device and inode). Also returns the recorded lock
    key the workspace must still have once locked (None: named by the user, or not written under bwrap)."""
    from forkpoint.branches.branching import same_directory

    description = snapshot_owner(run_dir, state_dir, snapshot_facts)
    if given is not None:
        if not given.is_dir():
            raise ReplayError(ErrorKind.WORKSPACE, f"--workspace {given} is not a directory")
        return Path(os.path.abspath(given)), None
    if description is None:
        raise configuration(f"the boundary snapshot of {run_dir} does not record which workspace it was taken from "
                            "(replayed by an older forkpoint); name the workspace to restore it into: "
                            "--workspace DIR")
    recorded = description.get("workspace")
    recorded = recorded if isinstance(recorded, dict) else {}
    path = Path(str(recorded["path"])) if recorded.get("path") else None
    if sandbox == "bwrap" and path is not None:
        return path, None  # never written: each branch restores the snapshot into its own copy under the state dir
    if not bound_here(run_dir, state_dir, description["owner"]):
        raise configuration(f"{run_dir} or its state dir {state_dir} is not the directory the replay made (copied, "
                            "moved or shipped from elsewhere): continue restores the boundary snapshot — emptying "
                            "the workspace first — only into a workspace you name: --workspace DIR")
    if path is None or not path.is_absolute() or not same_directory(path, recorded):
        raise ReplayError(ErrorKind.WORKSPACE, f"the workspace {path} is no longer the directory the run replayed in "
                                               "(removed or replaced since); name the workspace to restore the "
                                               "boundary into: --workspace DIR")
    return path, str(recorded.get("lock_key"))


def recorded_path_map(recorded: Any, recorded_cwd: str | None, workspace: Path, sandbox: str, supported: bool,
                      run_dir: Path) -> tuple[str, ...]:
    """The ``--path-map`` a continue of a path-mapped run (a batch job's private workspace) gives its branches.

    The run dir's map is a stranger's input: it must have the CLI flag's shape (``PathMap.parse``: absolute, no
    root, no identity, no duplicate), be for ``--sandbox local`` and an agent that supports maps, and hold only the
    entry for the recorded cwd. That entry is re-targeted at the workspace continue verified (device and inode, or
    named with ``--workspace``): the documents never choose where anything is written."""
    from forkpoint.sandbox.base import PathMap

    if not recorded:
        return ()
    where = f"{run_dir}/result.json metadata.sandbox.path_map"
    if not isinstance(recorded, list) or len(recorded) > 64 or not all(
            isinstance(entry, dict) and isinstance(entry.get("recorded"), str) and isinstance(entry.get("real"), str)
            for entry in recorded):
        raise configuration(f"{where} is not a list of {{recorded, real}} paths: not a map forkpoint wrote; refused")
    specs = [f"{entry['recorded']}={entry['real']}" for entry in recorded]
    entries = PathMap.parse(specs).entries  # refused like a bad --path-map
    if sandbox != "local" or not supported:
        raise configuration(f"{where} maps paths, but the run is continued under --sandbox {sandbox} with an agent "
                            f"that {'supports' if supported else 'does not support'} --path-map; refused")
    cwd = os.path.normpath(recorded_cwd) if recorded_cwd else None
    others = [old for old, _ in entries if old != cwd]
    if cwd is None or others:
        raise configuration(f"{where} maps {', '.join(others[:3]) or 'paths'} besides the recorded cwd {cwd}; "
                            "continue carries only the recorded cwd's entry — replay again to change the map")
    return () if os.path.normpath(workspace) == cwd else (f"{cwd}={workspace}",)


def _holding(workspace: Path, sandbox: str, lock_key: str | None, run_dir: Path, recorded_cwd: str | None,
             path_map: tuple[str, ...] = ()) -> Any:
    """The workspace lock (as a replay holds it) while branches restore into a ``local`` workspace, checked once
    more under the lock against the recorded lock key; the recorded-path check of the sandbox, before any effect."""
    import contextlib

    from forkpoint.sandbox import open_sandbox
    from forkpoint.workspace.lock import lock_workspace

    if sandbox == "bwrap":
        return contextlib.nullcontext()
    open_sandbox(sandbox, workspace, recorded_cwd, path_map)
    lock = lock_workspace(workspace, f"continue {run_dir.name}")
    if lock_key is not None and lock.name != lock_key:
        lock.release()
        raise ReplayError(ErrorKind.WORKSPACE, f"the workspace {workspace} changed while continue checked it; "
                                               "nothing was touched")
    return lock


def _run_planned(setup: BranchSetup, run_dir: Path, options: ContinueOptions, request: ReplayRequest,
                 snapshot_facts: dict[str, Any], after_step: int, report: Callable[[str], None]) -> dict[str, Any]:
    """Finish the branches a killed run left (each as it was planned), then run the new ones asked for; every
    refusal comes before any branch runs."""
    from forkpoint.branches.branching import (
        BranchRequest,
        branch_variants,
        next_index,
        plan_branches,
        run_branches,
        started,
    )
    from forkpoint.branches.records import planned_branches, resume_request

    planned = planned_branches(read_document(run_dir / "branches.json") or {"branches": []},
                               f"{run_dir}/branches.json")
    if not planned and not options.branches:
        raise configuration("nothing to do: every planned branch has run; ask for more with --branches K")
    resume = resume_request(planned, {b.index for b in planned if started(setup.state_dir, b.index)},
                            options.branch_prompts, _given_variants(options), adds_branches=bool(options.branches),
                            parallel=options.parallel or 1) if planned else None
    if resume is not None:
        check_recorded_pins(resume, request)
    more = BranchRequest.of(options.branches, list(options.branch_prompts), options.parallel,
                            first_index=next_index(run_dir), variants=branch_variants(request)) \
        if options.branches else None
    if resume is not None:
        report(f"finishing {resume.count} planned branch(es): {', '.join(map(str, resume.indices))}")
        run_branches(setup, resume, report)
    if more is not None:
        plan_branches(setup, more, snapshot_facts)
        report(f"branches {more.indices.start}..{more.indices.stop - 1} from the boundary after batch "
               f"{after_step}")
        return run_branches(setup, more, report)
    return read_document(run_dir / "branches.json", "branches.json") or {}


def _given_variants(options: ContinueOptions) -> BranchVariants:
    from forkpoint.branches.branching import BranchVariants

    choice = options.model_choice
    return BranchVariants(tuple(choice.get("branch_models") or ()), tuple(choice.get("branch_seeds") or ()),
                          tuple(float(value) for value in choice.get("branch_temperatures") or ()))


def check_recorded_pins(resume: BranchRequest, request: ReplayRequest) -> None:
    """The recorded variants must still be something the protocol leaving the bridge can carry (a seed recorded
    for a Chat run is refused when this continue goes through Anthropic Messages), checked before anything runs."""
    import dataclasses

    from forkpoint.adapters import agent_spec
    from forkpoint.core.protocols import outgoing_protocol
    from forkpoint.run.request import all_pins, check_pins

    variants = [resume.variant(index) for index in resume.indices]
    models = [v.model for v in variants if v.model is not None]
    seeds = [v.seed for v in variants if v.seed is not None]
    temperatures = [v.temperature for v in variants if v.temperature is not None]
    if not (models or seeds or temperatures):
        return
    protocol = outgoing_protocol(agent_spec(request.agent).protocol, request.upstream)
    recorded = dataclasses.replace(request, branch_models=models, branch_seeds=seeds,
                                   branch_temperatures=temperatures)
    for pins in all_pins(recorded):
        check_pins(pins, protocol)


def _prefix(run_dir: Path, documents: RunDocuments) -> NativePrefix:
    """The rebuilt prefix as the replay described it (branches.json, else result.json's artifact), unchanged."""
    result, branches = documents.result, documents.branches
    try:
        metadata = result.metadata if result else {}
        facts = dict((branches.prefix if branches else None) or next(
            ({"name": Path(str(a.path)).name, "format": a.format, "session_id": metadata.get("native_session_id"),
              "sha256": metadata.get("native_prefix_sha256")}
             for a in (result.artifacts if result else []) if a.role == "native_prefix"), {}))
        name, sha256, native_format = Path(str(facts["name"])).name, str(facts["sha256"]), str(facts["format"])
    except (KeyError, TypeError, ValueError):
        raise ReplayError(ErrorKind.TRAJECTORY, f"{run_dir} does not describe its native prefix") from None
    path = run_dir / "native" / "prefix" / name
    if not path.is_file() or path.is_symlink() or file_sha256(path) != sha256:
        raise ReplayError(ErrorKind.WORKSPACE, f"the native prefix {path} is gone or changed since the replay")
    session_id = facts.get("session_id")
    return NativePrefix(path=path, format=native_format, sha256=sha256,
                        session_id=None if session_id is None else str(session_id))


def collect_snapshots(run_dir: Path, *, dry_run: bool = False) -> dict[str, Any]:
    """`forkpoint gc RUN_DIR`: remove the run's boundary snapshot and its branches' workspace copies (what
    `forkpoint continue` would branch from); returns what was (or, with ``dry_run``, would be) freed.

    Only what belongs to the run dir given: the snapshot description in the state dir names its owning run (the
    token the run dir's documents carry, the run dir and state dir by device and inode), so a crafted run dir
    naming another run's state dir — or any other folder — removes nothing.
    """
    import shutil

    documents = read_run(run_dir, with_manifest=False)
    state = documents.state_dir
    if not state:
        raise configuration(f"{run_dir} is not a forkpoint run dir (no result.json or branches.json naming its state)")
    state_dir = Path(state)
    _require_absolute(run_dir, state_dir)
    snapshot = state_dir / "snapshot"
    if not (_plain_dir(snapshot) and (snapshot / "snapshot.json").is_file()):
        return {"run_dir": str(run_dir), "removed": [], "bytes": 0, "dry_run": dry_run}
    description = snapshot_owner(run_dir, state_dir, documents.snapshot or {})
    if description is None or description.get("schema_version") != SNAPSHOT_SCHEMA:
        raise ReplayError(ErrorKind.WORKSPACE, f"the boundary snapshot in {state_dir} does not name the run it "
                                               "belongs to (taken by an older forkpoint); gc removes only what it "
                                               "can tell is this run's — remove it yourself if it is")
    if not bound_here(run_dir, state_dir, description["owner"]):
        raise ReplayError(ErrorKind.WORKSPACE, f"{run_dir} or its state dir {state_dir} is not the directory the "
                                               "replay made (copied or moved): gc removes nothing through it")
    # branch copies first, the snapshot (with the description that proves ownership) last: an interrupted gc
    # can be run again
    targets = [path for path in sorted((state_dir / "branches").glob("*/workspace"))
               if path.parent.name.isdigit() and (path.parent / "journal.jsonl").is_file()]
    found = [path for path in [*targets, snapshot] if _plain_dir(path)]
    freed = sum(_disk_usage(path) for path in found)
    if not dry_run:
        for path in found:
            shutil.rmtree(path)
    return {"run_dir": str(run_dir), "removed": [str(path) for path in found], "bytes": freed,
            "dry_run": dry_run}


def _disk_usage(path: Path) -> int:
    freed = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                freed += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return freed


def _plain_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and not any(p.is_symlink() for p in path.parents)
