"""SWE-agent adapter: a 1.1.0 ``.traj`` in; replay-only without SWE-agent installed (shell actions re-run in the
workspace through forkpoint's supervised process layer, observations rendered with the recording's templates).

SWE-agent 1.x is not on PyPI (the only ``sweagent`` release there is 0.0.1 of 2024-04-02, a pre-1.0 snapshot with no
CLI; 1.x ships as git tags, installed from a clone), so forkpoint cannot install it; continuing the agent needs a
SWE-agent runtime given explicitly (see ``prepare_launch``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.base import AdapterBase
from forkpoint.adapters.kit.ids import safe_file_stem
from forkpoint.adapters.swe_agent.parse import parse_traj
from forkpoint.adapters.swe_agent.session import prefix_document, write_traj
from forkpoint.adapters.swe_agent.spec import SPEC
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import FreshObservation, LaunchTarget, NativePrefix, Plan, RunContext, Trajectory

if TYPE_CHECKING:
    from forkpoint.adapters.base import ToolExecutor

NOT_ON_PYPI = (
    "SWE-agent 1.x is not on PyPI (the only `sweagent` release there is 0.0.1 of 2024-04-02, a pre-1.0 snapshot "
    "with no CLI), so forkpoint cannot install it. Install SWE-agent 1.1.0 from its git source (editable: "
    "`uv pip install -e <SWE-agent checkout>` in its own venv) and pass that venv's Python as --agent-entrypoint; "
    "or use --replay-only / --prepare-only, which need no SWE-agent"
)
PROBE = "import sweagent, sys; sys.stdout.write(sweagent.__version__)"


class SweAgentAdapter(AdapterBase):
    spec = SPEC
    parser = staticmethod(parse_traj)

    def executor(self, plan: Plan, context: RunContext) -> ToolExecutor:
        from forkpoint.adapters.swe_agent.tools import SweAgentToolExecutor

        return SweAgentToolExecutor(plan, context)

    def write_prefix(self, plan: Plan, fresh: Mapping[str, FreshObservation] | None, out_dir: Path) -> NativePrefix:
        # run-replay files store problem_statement.id as an absolute path: a derived safe name, never that path
        # (the original stays in the result's native_session_id)
        destination = out_dir / f"{safe_file_stem(plan.trajectory.session_id or 'prefix')}.traj"
        sha256 = write_traj(prefix_document(plan, fresh), destination)
        return NativePrefix(destination, self.native_format, plan.trajectory.session_id, sha256)

    # -- continuation -----------------------------------------------------------------------------------------------

    def prepare_launch(self, trajectory: Trajectory, entrypoint: Path | None) -> LaunchTarget:
        """Only an explicitly given SWE-agent runtime (its venv's Python) can continue a recording."""
        if entrypoint is None:
            raise ReplayError(ErrorKind.CONFIGURATION, f"continuing SWE-agent needs a SWE-agent runtime: {NOT_ON_PYPI}")
        version = probe(entrypoint)
        if version != trajectory.version:
            raise ReplayError(ErrorKind.UNSUPPORTED_VERSION,
                              f"{entrypoint} runs SWE-agent {version}, but the trajectory was recorded by "
                              f"{trajectory.version}; continue a recording with the version that wrote it")
        raise ReplayError(ErrorKind.UNSUPPORTED_AGENT,
                          f"{entrypoint} runs SWE-agent {version}, but this forkpoint version has no verified "
                          "SWE-agent continuation runner yet (SWE-agent could not be installed where forkpoint is "
                          "verified); use --replay-only or --prepare-only")


def probe(entrypoint: Path) -> str:
    """The SWE-agent version a Python interpreter imports; typed errors for anything else."""
    if not entrypoint.is_file():
        raise ReplayError(ErrorKind.CONFIGURATION, f"agent entrypoint is not a file: {entrypoint}")
    from forkpoint.runtimes.base import PROBE_TIMEOUT_S, run_probe

    try:  # supervised, the allowlisted environment, a deadline that fits a loaded machine (issue 27)
        done = run_probe([str(entrypoint), "-I", "-c", PROBE], PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ReplayError(ErrorKind.CONFIGURATION, f"cannot run {entrypoint}: {error}") from None
    if done.returncode != 0 or not done.stdout.strip():
        raise ReplayError(ErrorKind.CONFIGURATION, f"{entrypoint} cannot import SWE-agent ({NOT_ON_PYPI}): "
                                                   f"{done.stderr.strip()[-300:]}")
    return done.stdout.strip()
