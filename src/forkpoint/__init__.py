"""forkpoint: replay a coding agent's recorded run up to a boundary and continue the real agent from there.

The public Python API (docs/python-api.md)::

    import forkpoint

    forkpoint.inspect("session.jsonl")                           # the batches, as `forkpoint inspect --json`
    result = forkpoint.replay(forkpoint.request(agent="claude-code", trajectory="session.jsonl",
                                                after_step=2, replay_only=True, workspace="/work/repo"))
    run = forkpoint.load_run(result.output_dir)                  # result.json typed, observations, branches
    forkpoint.branch(run.path, 4, upstream="stub")               # 4 continuations from the boundary snapshot

Everything else is internal. Names load on first use, so ``import forkpoint`` stays as cheap as the CLI needs.
"""

from __future__ import annotations

__version__ = "0.1.0"

TYPE_CHECKING = False  # not typing's: `forkpoint --help` loads no typing (tests/test_cli.py)
if TYPE_CHECKING:
    from forkpoint.api import Run, branch, inspect, load_run, replay, request
    from forkpoint.core.errors import ErrorKind, ReplayError
    from forkpoint.core.model import Mode
    from forkpoint.core.results import AgentInfo, Artifact, BranchesDocument, Failure, Manifest, ReplayResult
    from forkpoint.run.request import ReplayRequest

_HOMES = {
    "inspect": "forkpoint.api", "request": "forkpoint.api", "replay": "forkpoint.api", "branch": "forkpoint.api",
    "load_run": "forkpoint.api", "Run": "forkpoint.api",
    "ReplayRequest": "forkpoint.run.request", "Mode": "forkpoint.core.model",
    "ReplayResult": "forkpoint.core.results", "Failure": "forkpoint.core.results",
    "Artifact": "forkpoint.core.results", "AgentInfo": "forkpoint.core.results",
    "Manifest": "forkpoint.core.results", "BranchesDocument": "forkpoint.core.results",
    "ReplayError": "forkpoint.core.errors", "ErrorKind": "forkpoint.core.errors",
}

__all__ = [
    "AgentInfo",
    "Artifact",
    "BranchesDocument",
    "ErrorKind",
    "Failure",
    "Manifest",
    "Mode",
    "ReplayError",
    "ReplayRequest",
    "ReplayResult",
    "Run",
    "__version__",
    "branch",
    "inspect",
    "load_run",
    "replay",
    "request",
]


def __getattr__(name: str) -> object:
    import importlib

    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'forkpoint' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
