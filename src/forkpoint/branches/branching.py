"""Replay once, branch K: K continuations of the real agent from one re-executed boundary.

After the replay, the boundary state is kept as a snapshot (``<state>/snapshot/workspace``, a reflink copy where the
file system has them, its inventory hash recorded); the rebuilt native session is the run's prefix file. Each
branch ``i`` then gets identical copies and its own everything: state dir (``<state>/branches/<i>``: journal, agent
home, bridge log), outputs (``<out>/branches/<i>``: result.json, continued native session, next-action.json, logs),
nonce and bridge. Under ``--sandbox bwrap`` each branch works in its own copy of the snapshot, mounted at the recorded
cwd, so branches run concurrently (``--parallel``); with ``local`` the recorded path is the one workspace, so
branches run one after another, each starting from the snapshot restored into it (and it is left at the boundary).

Crash safety: the plan (which branch ids, which prompt hash) is written before any branch starts; each branch
journals ``continuation_started`` durably before its agent starts. A branch that started and has no outcome is
``ambiguous`` and never re-run; one that never started is run by ``forkpoint continue RUN_DIR``, as it was planned:
its variant read back from its row, its prompt given again and matched against the recorded hash (branch_records).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.hashing import sha256_hex
from forkpoint.core.model import Continuation, ContinueSettings, NativePrefix, Plan, RunContext
from forkpoint.core.results import Failure, write_json

if TYPE_CHECKING:
    from forkpoint.run.request import ReplayRequest
    from forkpoint.run.scoring import ScoreSpec

BRANCHES_SCHEMA = "forkpoint.branches/v1"
BRANCH_RESULT_SCHEMA = "forkpoint.branch-result/v1"
SNAPSHOT_SCHEMA = "forkpoint.snapshot/v1"


@dataclass(frozen=True)
class BranchRequest:
    """Which branches to run: ``count`` from ``first_index``, each with its prompt (None: the nonce only)."""

    count: int
    prompts: tuple[str | None, ...]
    parallel: int
    first_index: int = 1
    #: each branch's model / seed / temperature (``--branch-model``...); empty: every branch as the run's settings
    variants: tuple[BranchVariant, ...] = ()

    @classmethod
    def of(cls, count: int, prompts: list[str], parallel: int | None, first_index: int = 1,
           variants: BranchVariants | None = None) -> BranchRequest:
        if count < 1:
            raise ReplayError(ErrorKind.CONFIGURATION, "--branches must be at least 1")
        if prompts and len(prompts) not in (1, count):
            raise ReplayError(ErrorKind.CONFIGURATION, f"give one --branch-prompt for all branches or one per "
                                                       f"branch ({count}), not {len(prompts)}")
        chosen: tuple[str | None, ...] = tuple(prompts * count if len(prompts) == 1 else prompts) or (None,) * count
        return cls(count, chosen, max(1, parallel or os.cpu_count() or 1), first_index,
                   () if variants is None else variants.per_branch(count))

    @property
    def indices(self) -> range:
        return range(self.first_index, self.first_index + self.count)

    def variant(self, index: int) -> BranchVariant:
        return self.variants[index - self.first_index] if self.variants else BranchVariant()


@dataclass(frozen=True)
class BranchVariant:
    """What one branch changes in the run's model choice (None: as the run's ``--model``/``--seed``...)."""

    model: str | None = None
    seed: int | None = None
    temperature: float | None = None

    def facts(self) -> dict[str, Any]:
        """For branches.json and the branch's result (the values themselves: they are no prompt text)."""
        return {"model": self.model, "seed": self.seed, "temperature": self.temperature}

    def settings(self, settings: ContinueSettings) -> ContinueSettings:
        """The run's settings with this branch's model and pins."""
        from forkpoint.bridge.translate.sampling import SamplingPins

        if self == BranchVariant():
            return settings
        pins = settings.sampling or SamplingPins()
        pins = dataclasses.replace(pins, seed=pins.seed if self.seed is None else self.seed,
                                   temperature=pins.temperature if self.temperature is None else self.temperature)
        return dataclasses.replace(settings, model=self.model or settings.model, sampling=pins)


@dataclass(frozen=True)
class BranchVariants:
    """``--branch-model`` / ``--branch-seed`` / ``--branch-temperature``: each one value for all or one per branch
    (the request validated the lengths)."""

    models: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()
    temperatures: tuple[float, ...] = ()

    def per_branch(self, count: int) -> tuple[BranchVariant, ...]:
        if not (self.models or self.seeds or self.temperatures):
            return ()
        for name, given in (("--branch-model", self.models), ("--branch-seed", self.seeds),
                            ("--branch-temperature", self.temperatures)):
            if given and len(given) not in (1, count):
                raise ReplayError(ErrorKind.CONFIGURATION, f"give one {name} for all branches or one per branch "
                                                           f"({count}), not {len(given)}")

        def pick(values: tuple[Any, ...], index: int) -> Any:
            return None if not values else values[0] if len(values) == 1 else values[index]

        return tuple(BranchVariant(pick(self.models, i), pick(self.seeds, i), pick(self.temperatures, i))
                     for i in range(count))


def branch_variants(request: ReplayRequest) -> BranchVariants:
    return BranchVariants(tuple(request.branch_models), tuple(request.branch_seeds),
                          tuple(request.branch_temperatures))


# -- the boundary snapshot ------------------------------------------------------------------------------------------


def take_snapshot(workspace: Path, state_dir: Path, run_dir: Path, run_id: str) -> dict[str, Any]:
    """Copy the replayed workspace to ``<state>/snapshot/workspace``; returns (and writes) its description.

    One pass: each file is hashed while it is copied (the inventory of the copy, as ``inventory`` would take it).
    The description names the run it belongs to (``owner``: run id, a random token the run dir's documents carry
    too, the run dir and state dir by path, device and inode) and the workspace it was taken from (path, device,
    inode, lock key): ``continue`` and ``gc`` act only on what these still match, never on paths the run dir's
    documents alone name.
    """
    import secrets

    from forkpoint.branches.tree_copy import copy_with_entries
    from forkpoint.workspace import inventory_of
    from forkpoint.workspace.lock import lock_key

    folder = state_dir / "snapshot"
    if folder.exists():
        shutil.rmtree(folder)
    target = folder / "workspace"
    target.mkdir(parents=True, mode=0o700)
    owner = {"run_id": run_id, "token": secrets.token_hex(16), "run_dir": directory_identity(run_dir),
             "state_dir": directory_identity(state_dir)}
    recorded_workspace = {**directory_identity(workspace), "lock_key": lock_key(os.stat(workspace))}
    tree = inventory_of(copy_with_entries(workspace, target))
    description = {"schema_version": SNAPSHOT_SCHEMA, "path": str(target), "inventory_sha256": tree.sha256,
                   "files": tree.files, "entries": tree.entries, "owner": owner, "workspace": recorded_workspace}
    write_json(folder / "snapshot.json", description)
    return description


def directory_identity(path: Path) -> dict[str, Any]:
    """A directory as a run saw it: absolute path, device and inode (a copied, moved, re-created or crafted folder
    has another device or inode)."""
    info = os.stat(path)
    return {"path": os.path.abspath(path), "dev": info.st_dev, "ino": info.st_ino}


def same_directory(path: Path, recorded: Any) -> bool:
    """Whether ``path`` is (without following a link at its end) the directory ``recorded`` by
    :func:`directory_identity`."""
    import stat

    if not isinstance(recorded, dict):
        return False
    try:
        info = os.stat(path, follow_symlinks=False)
    except (OSError, ValueError):
        return False
    return stat.S_ISDIR(info.st_mode) and (info.st_dev, info.st_ino) == (recorded.get("dev"), recorded.get("ino"))


def checked_snapshot(state_dir: Path, expected_sha256: str | None) -> Path:
    """The snapshot's workspace, refused (workspace_error) when it is gone or no longer what was recorded."""
    from forkpoint.workspace import inventory

    target = state_dir / "snapshot" / "workspace"
    if not target.is_dir() or target.is_symlink():
        raise ReplayError(ErrorKind.WORKSPACE, f"the boundary snapshot {target} is gone (dropped or collected); "
                                               "replay again to branch from this boundary")
    found = inventory(target).sha256
    if expected_sha256 is None or found != expected_sha256:
        raise ReplayError(ErrorKind.WORKSPACE, f"the boundary snapshot {target} changed since the replay "
                                               f"(inventory {found[:12]}…, recorded {str(expected_sha256)[:12]}…); "
                                               "refusing to branch from it")
    return target


def restore(snapshot: Path, workspace: Path) -> None:
    """Make ``workspace`` hold exactly the snapshot (its own entries removed first; the directory itself kept)."""
    from forkpoint.workspace import copy_tree

    for entry in os.scandir(workspace):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    copy_tree(snapshot, workspace)


def changed_files(before: Path, after: Path) -> dict[str, list[str]]:
    """Paths added, removed and modified between two trees (type, size, content hash, link target)."""
    from forkpoint.workspace import tree_entries

    old = {os.fsdecode(path): entry for path, entry in tree_entries(before)}
    new = {os.fsdecode(path): entry for path, entry in tree_entries(after)}
    return {"added": sorted(set(new) - set(old)), "removed": sorted(set(old) - set(new)),
            "modified": sorted(path for path in set(old) & set(new) if old[path] != new[path]
                               and old[path].get("type") != "dir")}


# -- running branches -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BranchSetup:
    """What every branch shares: the plan, the rebuilt prefix, the agent, the run's dirs and sandbox choice."""

    adapter: Any  # a ContinuingAdapter
    plan: Plan
    prefix: NativePrefix
    settings: ContinueSettings
    workspace: Path
    state_dir: Path
    output_dir: Path
    session_id: str | None
    sandbox_name: str
    recorded_cwd: str | None
    snapshot: Path
    #: the verifier each branch's final workspace is scored with (``--score``), its group, the original's reward
    score: ScoreSpec | None = None
    group_id: str | None = None
    original_reward: float | None = None
    #: ``--path-map`` of a ``local`` run (a batch job's private workspace): each branch's sandbox maps recorded
    #: paths into the workspace as the run's own did
    path_map: tuple[str, ...] = ()


def run_pins(settings: ContinueSettings) -> dict[str, Any]:
    """The run-level model choice (``--model`` and the sampling pins) a planned row records, so that a branch re-run
    by ``forkpoint continue`` runs under the same one (values only, never prompt text; unset ones left out)."""
    pins = dataclasses.asdict(settings.sampling) if settings.sampling is not None else {}
    pins["model"] = settings.model
    return {key: value for key, value in pins.items() if value is not None and value is not False}


def plan_branches(setup: BranchSetup, request: BranchRequest, snapshot: dict[str, Any]) -> dict[str, Any]:
    """Write the plan into branches.json before any branch starts (what a resume reads)."""
    document = _read_document(setup.output_dir) or {
        "schema_version": BRANCHES_SCHEMA, "state_dir": str(setup.state_dir), "snapshot": snapshot,
        "sandbox": setup.sandbox_name, "workspace": str(setup.workspace),
        "prefix": {"name": setup.prefix.path.name, "format": setup.prefix.format,
                   "session_id": setup.prefix.session_id, "sha256": setup.prefix.sha256},
        "branches": [],
    }
    pins = run_pins(setup.settings)
    for index, prompt in zip(request.indices, request.prompts, strict=True):
        document["branches"].append({"branch": index, "status": "planned", **_prompt_facts(prompt),
                                     **request.variant(index).facts(), "run_pins": pins})
    write_json(setup.output_dir / "branches.json", document)
    return document


def run_branches(setup: BranchSetup, request: BranchRequest, report: Any) -> dict[str, Any]:
    """Run the planned branches of ``request`` (concurrently under bwrap) and return the updated branches.json."""
    prompts = dict(zip(request.indices, request.prompts, strict=True))
    parallel = request.parallel if setup.sandbox_name == "bwrap" else 1
    results: dict[int, dict[str, Any]] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=parallel) as pool:
        futures = {pool.submit(_one_branch, setup, index, prompts[index], request.variant(index), report): index
                   for index in prompts}
        for future in concurrent.futures.as_completed(futures):
            results[futures[future]] = future.result()
    if setup.sandbox_name != "bwrap":
        restore(setup.snapshot, setup.workspace)  # the workspace is left at the boundary
    document = _read_document(setup.output_dir) or {"branches": []}
    for row in document["branches"]:
        if row["branch"] in results:
            row.update(results[row["branch"]])
    document["agreement"] = agreement(document["branches"])
    if setup.group_id is not None:
        from forkpoint.run.scoring import apply_groups

        group = apply_groups(document["branches"], setup.group_id, setup.original_reward)
        if group is not None:
            document["group"] = group
    write_json(setup.output_dir / "branches.json", document)
    return document


def _one_branch(setup: BranchSetup, index: int, prompt: str | None, variant: BranchVariant,
                report: Any) -> dict[str, Any]:
    from forkpoint.run.compare import next_action_document
    from forkpoint.run.journal import Journal
    from forkpoint.sandbox import open_sandbox

    state = setup.state_dir / "branches" / str(index)
    out = setup.output_dir / "branches" / str(index)
    previous = _branch_events(state)
    if any(e.get("event") == "continuation_started" for e in previous):
        if any(e.get("event") in ("run_finished", "run_failed") for e in previous):
            return _read_result(out)
        return {"status": "ambiguous", "agent_status": "failed",
                "failure": {"category": "ambiguous_execution", "retryable": False,
                            "message": f"branch {index} started its agent and has no recorded outcome (killed?); "
                                       "it is not run again"}}
    out.mkdir(parents=True, exist_ok=True)
    with Journal.open(state) as journal:
        try:  # nothing of the branch has started yet: a failure here is this branch's, recorded, and final
            if setup.sandbox_name == "bwrap":
                workspace = state / "workspace"
                if workspace.exists():
                    shutil.rmtree(workspace)
                workspace.mkdir()
                restore(setup.snapshot, workspace)
                sandbox = open_sandbox("bwrap", workspace, setup.recorded_cwd)
            else:  # the recorded-path check comes before the restore empties the workspace
                workspace = setup.workspace
                sandbox = open_sandbox(setup.sandbox_name, workspace, setup.recorded_cwd, setup.path_map)
                restore(setup.snapshot, workspace)
        except (ReplayError, OSError) as error:
            kind = error.kind if isinstance(error, ReplayError) else ErrorKind.WORKSPACE
            message = error.message if isinstance(error, ReplayError) else f"preparing the branch: {error}"
            journal.append("run_failed", category=kind.category, message=message)
            return {"status": "failed", "agent_status": "failed", "continued_steps": 0,
                    "failure": {"category": kind.category, "message": message, "retryable": kind.retryable}}
        _inherit_replay_state(setup.state_dir, state)
        context = RunContext(workspace, state, out, setup.session_id, sandbox=sandbox)
        settings = dataclasses.replace(variant.settings(setup.settings), boundary_prompt=prompt)
        journal.append("continuation_started", branch=index, **{k: v for k, v in _prompt_facts(prompt).items()})
        report(f"branch {index}: continuing {setup.adapter.name} {settings.target.version}")
        failure: dict[str, Any] | None = None
        continuation: Continuation | None = None
        try:
            continuation = setup.adapter.continue_run(setup.plan, setup.prefix, context, settings)
        except ReplayError as error:
            failure = {"category": error.kind.category, "message": error.message, "retryable": error.kind.retryable}
            journal.append("run_failed", category=error.kind.category, message=error.message)
        else:
            journal.append("run_finished", status=continuation.agent_status)
        action = next_action_document(setup.plan.original_next_action,
                                      continuation.next_action if continuation else None,
                                      input_condition="boundary_user_prompt_appended" if prompt else
                                      "replayed_boundary_only")
        write_json(out / "next-action.json", action)
        from forkpoint.process import limits

        row: dict[str, Any] = {
            "status": "failed" if failure else "finished",
            "agent_status": "failed" if failure else ("max_steps" if continuation and
                                                      continuation.agent_status == "max_steps" else "completed"),
            "continued_steps": continuation.continued_steps if continuation else 0,
            "failure": failure,
            "first_action": action.get("replayed"),
            "same_as_original": (action.get("metrics") or {}).get("same_tool_calls"),
            "files_changed": changed_files(setup.snapshot, workspace),
            "model_bridge": (continuation.metadata.get("model_bridge") if continuation else None),
            "model_usage": (continuation.metadata.get("model_usage") if continuation else None),
            "continued_path": str(continuation.continued_path) if continuation else None,
            "process_limit": limits.describe(),
        }
        if setup.score is not None:  # after files_changed, before the next branch restores the workspace
            from forkpoint.run.verify import run_verifier

            report(f"branch {index}: scoring")
            score = run_verifier(setup.score, sandbox)
            row["score"] = score
            journal.append("scored", reward=score["reward"], exit=score["exit"], failure=score["failure"])
        write_json(out / "result.json", {"schema_version": BRANCH_RESULT_SCHEMA, "branch": index,
                                         **_prompt_facts(prompt), **variant.facts(), **row})
        return row


#: the run's own files in its state dir; every other top-level file is state the replay left for the continuation
_RUN_OWN = frozenset({"journal.jsonl", "run.lock", "bridge-log.jsonl", "expected-prefix.json"})


def _inherit_replay_state(run_state: Path, branch_state: Path) -> None:
    """Give the branch what the replay left for the continuation in the run's state dir (e.g. where Claude's
    replayed shell ended), so each branch resumes exactly like a single continuation would."""
    for entry in os.scandir(run_state):
        if entry.name not in _RUN_OWN and entry.is_file(follow_symlinks=False):
            shutil.copyfile(entry.path, branch_state / entry.name, follow_symlinks=False)


def agreement(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How the finished branches agree: with the original action N+1, with each other, on completing."""
    done = [row for row in rows if row.get("status") == "finished"]
    if not done:
        return {"branches": 0}
    signatures = Counter(json.dumps((row.get("first_action") or {}).get("tools"), sort_keys=True) for row in done)
    return {
        "branches": len(done),
        "same_next_action_as_original": sum(1 for row in done if row.get("same_as_original")) / len(done),
        "completed": sum(1 for row in done if row.get("agent_status") == "completed") / len(done),
        "largest_group_same_first_tools": signatures.most_common(1)[0][1] / len(done),
        "distinct_first_tool_calls": len(signatures),
    }


def _prompt_facts(prompt: str | None) -> dict[str, Any]:
    return {"prompt_sha256": sha256_hex(prompt), "prompt_length": len(prompt)} if prompt else {
        "prompt_sha256": None, "prompt_length": None}


def _branch_events(state: Path) -> list[dict[str, Any]]:
    from forkpoint.run.journal import read_events

    return read_events(state / "journal.jsonl") if state.is_dir() else []


def _read_result(out: Path) -> dict[str, Any]:
    try:
        document = json.loads((out / "result.json").read_text("utf-8"))
    except (OSError, ValueError):
        return {"status": "failed", "agent_status": "failed", "failure": {
            "category": "internal_error", "retryable": False, "message": "the branch's result.json is missing"}}
    return {key: value for key, value in document.items() if key not in ("schema_version", "branch")}


def _read_document(output_dir: Path) -> dict[str, Any] | None:
    path = output_dir / "branches.json"
    if not path.is_file():
        return None
    document: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return document


def next_index(output_dir: Path) -> int:
    document = _read_document(output_dir)
    return 1 + max((row["branch"] for row in document["branches"]), default=0) if document else 1


def started(state_dir: Path, index: int) -> bool:
    """Whether branch ``index`` journaled its agent's start (such a branch is never run again)."""
    return any(e.get("event") == "continuation_started" for e in _branch_events(state_dir / "branches" / str(index)))


def aggregate(document: dict[str, Any]) -> Continuation:
    """The run-level continuation of a branched run: the worst agent status, steps summed, branches in metadata,
    the branches' ``model_usage`` summed."""
    from forkpoint.bridge.accounting import combined

    rows = document["branches"]
    order = {"completed": 0, "max_steps": 1, "failed": 2}
    worst = max((row.get("agent_status", "failed") for row in rows), key=lambda s: order.get(s, 2), default="failed")
    failed = _failed_rows(rows)
    return Continuation(
        agent_status=worst, continued_steps=sum(int(row.get("continued_steps") or 0) for row in rows),
        continued_path=Path(document.get("state_dir", ".")) / "branches", next_action=None,
        metadata={"branches": {"count": len(rows), "agreement": document.get("agreement"),
                               "statuses": dict(Counter(str(row.get("status")) for row in rows)),
                               "failed": len(failed), "failure_categories": _categories(failed),
                               **({"group": document["group"]} if document.get("group") else {})},
                  "model_usage": combined(row.get("model_usage") for row in rows)},
    )


def _failed_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The branches that did not finish (failed, or ambiguous: started without a recorded outcome)."""
    return [row for row in rows if row.get("status") != "finished"]


def _categories(failed: list[dict[str, Any]]) -> dict[str, int]:
    return dict(sorted(Counter(_category(row) for row in failed).items()))


def _category(row: dict[str, Any]) -> str:
    failure = row.get("failure")
    category = failure.get("category") if isinstance(failure, dict) else None
    return category if isinstance(category, str) and category else "internal_error"


def branches_failure(document: dict[str, Any]) -> Failure | None:
    """The run's failure when EVERY branch failed (a branched run must not report success it cannot back): the
    branches' common category (``continuation_error`` when they differ), retryable only when every branch's
    failure is. None when at least one branch finished (a partial run: its counts are in the metadata)."""
    rows = document["branches"]
    failed = _failed_rows(rows)
    if not rows or len(failed) < len(rows):
        return None
    categories = _categories(failed)
    category = next(iter(categories)) if len(categories) == 1 else ErrorKind.CONTINUATION.category
    retryable = all(isinstance(row.get("failure"), dict) and row["failure"].get("retryable") is True
                    for row in failed)
    first = next((row["failure"].get("message") for row in failed if isinstance(row.get("failure"), dict)
                  and isinstance(row["failure"].get("message"), str)), None)
    summary = ", ".join(f"{name} x{count}" for name, count in categories.items())
    message = f"all {len(rows)} branches failed ({summary})" + (f"; the first: {first[:1500]}" if first else "")
    return Failure(category=category, message=message, retryable=retryable)


def partial_text(branches: Any) -> str | None:
    """``partial: K of N branches failed (categories)`` for a branched run some of whose branches failed."""
    if not isinstance(branches, dict) or not isinstance(branches.get("failed"), int) or not branches["failed"]:
        return None
    categories = branches.get("failure_categories") or {}
    detail = ", ".join(f"{name} x{count}" for name, count in categories.items()) if isinstance(categories, dict) else ""
    return f"partial: {branches['failed']} of {branches.get('count')} branches failed" + (f" ({detail})" if detail
                                                                                          else "")
