"""forkpoint from Python: the same operations as the CLI, with typed requests and results.

The CLI is a thin layer over these (argument parsing and printing); an RL loop, a notebook or a batch driver of
its own calls them directly. Failures a user can cause come back as a :class:`ReplayResult` with ``failure`` set
(``replay``) or as :class:`ReplayError` (the others), never as an internal traceback.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forkpoint.core.results import BranchesDocument, Manifest, ReplayResult
    from forkpoint.run.request import ReplayRequest

Progress = Callable[[str], None]


def inspect(trajectory: str | os.PathLike[str], *, agent: str | None = None,
            max_bytes: int | None = None) -> dict[str, Any]:
    """What ``forkpoint inspect --json`` prints: the agent, version, cwd and the batches with their calls.

    The agent is detected from the file's structure unless given. Raises :class:`ReplayError` (trajectory,
    configuration) for input forkpoint cannot read."""
    from forkpoint.run.inspection import describe

    return describe(Path(trajectory), agent, *(() if max_bytes is None else (max_bytes,)))


def request(values: Mapping[str, Any] | None = None, /, **options: Any) -> ReplayRequest:
    """A validated :class:`ReplayRequest` from the keys of ``forkpoint replay --request`` (snake_case), given as a
    mapping and/or keyword arguments: ``forkpoint.request(agent="codex", trajectory="r.jsonl", after_step=2,
    replay_only=True)``. Raises :class:`ReplayError` (configuration) naming the bad key, like the CLI."""
    from forkpoint.run.request import build_request

    merged = {**(values or {}), **options}
    return build_request({key: os.fspath(value) if isinstance(value, os.PathLike) else value
                          for key, value in merged.items()}, source="forkpoint.request()")


def replay(replay_request: ReplayRequest | Mapping[str, Any], *, progress: Progress | None = None,
           warn: Progress | None = None) -> ReplayResult:
    """Run one replay (prepare-only, replay-only or replay and continue) to its result; writes the run dir like
    the CLI. Never raises for a failure a user can cause: it is in ``result.failure`` (``result.exit_code`` is the
    CLI's exit code). ``progress`` receives the phase lines, ``warn`` the diverging-call lines."""
    from forkpoint.run.engine import execute
    from forkpoint.run.request import ReplayRequest

    if not isinstance(replay_request, ReplayRequest):
        replay_request = request(replay_request)
    return execute(replay_request, progress, warn)


def branch(run_dir: str | os.PathLike[str], k: int | None = None, *, prompts: Sequence[str] = (),
           upstream: str | None = None, upstream_url: str | None = None, max_steps: int | None = None,
           parallel: int | None = None, model_choice: Mapping[str, Any] | None = None,
           score: Mapping[str, Any] | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """``forkpoint continue RUN_DIR``: ``k`` more continuations from a replayed run's boundary snapshot (no tool is
    re-run), or, with ``k=None``, the branches a killed run planned and never started. Returns ``branches.json``
    as it is afterwards. ``model_choice`` takes the request keys of ``--model`` and the sampling pins; ``score``
    the verifier's (``score``, ``score_timeout``, ``score_format``, ``original_reward``: docs/rl.md)."""
    from forkpoint.branches.resume import ContinueOptions, continue_run_dir

    options = ContinueOptions(branches=k, branch_prompts=tuple(prompts), parallel=parallel, upstream=upstream,
                              upstream_url=upstream_url, max_steps=max_steps, model_choice=dict(model_choice or {}),
                              score=dict(score or {}))
    return continue_run_dir(Path(run_dir), options, progress or (lambda _message: None))


@dataclass(frozen=True)
class Run:
    """A run dir read back: ``result.json``, ``manifest.json`` and ``branches.json`` typed (each keeps the whole
    document as read in ``document``), the observations as the JSON rows they are."""

    path: Path
    result: ReplayResult
    #: what was replayed (agent, source and its SHA-256, boundary, batches); None when the run wrote no plan
    manifest: Manifest | None = None
    #: per replayed call: exact, similarity, previews, diff (``observations.json``); empty when nothing ran
    observations: list[dict[str, Any]] = field(default_factory=list)
    #: ``branches.json`` of a branched run, else None
    branches: BranchesDocument | None = None

    def artifact(self, role: str) -> Path | None:
        """The path of the artifact with this role (``native_prefix``, ``native_continued`` ...), if written."""
        for item in self.result.artifacts:
            if item.role == role:
                return self.path / item.path if not Path(item.path).is_absolute() else Path(item.path)
        return None


def load_run(run_dir: str | os.PathLike[str]) -> Run:
    """Read a run dir (``<output-dir>/<run-id>``) written by ``replay``/the CLI. Documents are read bounded and a
    FIFO is refused; a missing ``result.json`` or any document of the wrong shape raises :class:`ReplayError`
    (configuration) naming the file."""
    from forkpoint.core.results import read_document, read_run

    path = Path(run_dir)
    documents = read_run(path, result="result.json (is this a forkpoint run dir?)")
    assert documents.result is not None  # required
    observations = read_document(path / "observations.json") or {}
    rows = observations.get("observations")
    return Run(path=path, result=documents.result, manifest=documents.manifest,
               observations=[row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else [],
               branches=documents.branches)
