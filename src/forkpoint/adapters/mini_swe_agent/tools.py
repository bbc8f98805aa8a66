"""Re-run historical mini-swe-agent actions with the package's own environment and observation formatter.

One companion process (companion.py, in the verified runtime's venv) serves the whole replay: it rebuilds the
recording's agent/model/environment from ``info.config`` with ``cwd`` = the workspace, and each ``execute``
request runs one action exactly as the agent would (``LocalEnvironment.execute``: a fresh subshell per command,
the recorded ``env`` and ``timeout``) and returns the native observation message (1.x templates; 2.x
``format_observation_messages``), including timeouts and over-long output.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from forkpoint.adapters.mini_swe_agent.parse import MiniNative, is_error_v1, is_error_v2
from forkpoint.adapters.mini_swe_agent.runner import Confinement, RunnerSession, companion_env
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import FreshObservation, Plan, RunContext, ToolCall
from forkpoint.core.results import write_atomic
from forkpoint.sandbox import interpreter_paths, local_sandbox

#: added to the recorded environment timeout while waiting for one action's reply
REPLY_MARGIN_S = 60.0
LOG_NAME = "mini-swe-agent.log"


def open_session(python: Path, plan: Plan[MiniNative], context: RunContext, log_name: str,
                 deadline_s: float = 24 * 3600.0, *, network: bool = False,
                 wrap: Callable[[list[str]], list[str]] | None = None, readable: Sequence[Path] = (),
                 writable: Sequence[Path] = ()) -> RunnerSession:
    """Start the companion in the run's sandbox and load the recording into it (version checked inside the venv).

    The companion sees the workspace where the tools do (``sandbox.cwd``: the recorded cwd under bwrap), its
    HOME (the replay's, or the continued agent's) read-write and the recording as a copy in a state-dir folder
    (the recording's own folder, perhaps in a hidden home, is never shown to it); network off unless asked
    (the continuation reaches the bridge: shared under local, relayed by ``wrap`` under bwrap).
    """
    sandbox = context.sandbox or local_sandbox(context.workspace)
    inbox = context.state_dir / "mini-swe-agent"
    inbox.mkdir(parents=True, exist_ok=True)
    source = inbox / "recording.traj.json"
    write_atomic(source, plan.trajectory.source_path.read_bytes())
    context.home.mkdir(parents=True, exist_ok=True)
    confinement = Confinement(sandbox, sandbox.cwd, writable=(context.home, *writable),
                              readable=(*interpreter_paths(python), inbox, *readable), network=network, wrap=wrap)
    session = RunnerSession(python, context.workspace, companion_env(os.environ, context.home),
                            context.logs / log_name, deadline_s, socket_parent=context.state_dir,
                            confinement=confinement)
    session.start()
    from forkpoint.runtimes import trial_release

    # a calibration runs a release in a verified version's place (forkpoint.runtimes.trial): the venv holds it
    version = trial_release(plan.trajectory.agent, python) or plan.trajectory.version
    reply = session.request({"op": "open", "source": str(source), "workspace": sandbox.cwd,
                             "version": version}, timeout_s=300.0)
    if not reply.get("ok"):
        session.close()
        kind = ErrorKind.UNSUPPORTED_TOOL if reply.get("refusal") == "unsupported" else ErrorKind.TRAJECTORY
        raise ReplayError(kind, f"the mini-swe-agent companion cannot load the recording: {reply.get('error')}",
                          before_effect=True)
    degradations = reply.get("degradations")
    session.degradations = [str(item) for item in degradations] if isinstance(degradations, list) else []
    return session


def environment_timeout(native: MiniNative) -> float:
    config = native.data.get("info", {}).get("config", {})
    environment = config.get("environment") if isinstance(config, dict) else None
    timeout = environment.get("timeout") if isinstance(environment, dict) else None
    return float(timeout) if isinstance(timeout, int | float) and timeout > 0 else 30.0


class MiniToolExecutor:
    """``keep``: hand the companion over at close (the continuation reuses it: litellm imports once) instead of
    closing it."""

    def __init__(self, plan: Plan[MiniNative], context: RunContext, python: Path,
                 keep: Callable[[RunnerSession], None] | None = None) -> None:
        self.plan, self.context, self.python, self.keep = plan, context, python, keep
        native = plan.trajectory.native
        self.native = native
        self._session: RunnerSession | None = None
        self._degradations: list[str] = []

    @property
    def degradations(self) -> list[str]:
        """What the companion could not rebuild as recorded (a container environment run locally, ...)."""
        return list(self._degradations)

    def run(self, call: ToolCall) -> FreshObservation:
        if self._session is None:
            self._session = open_session(self.python, self.plan, self.context, LOG_NAME)
            self._degradations = list(self._session.degradations)
        action: dict[str, Any] = dict(call.native["action"])
        reply = self._session.request({"op": "execute", "action": action},
                                      timeout_s=environment_timeout(self.native) + REPLY_MARGIN_S)
        if not reply.get("ok"):
            raise ReplayError(ErrorKind.EXECUTOR, f"re-running {call.call_id} failed in the mini-swe-agent "
                                                  f"companion: {reply.get('error')}")
        message = reply.get("message")
        if not isinstance(message, dict):
            raise ReplayError(ErrorKind.EXECUTOR, f"the companion returned no observation message for {call.call_id}")
        if reply.get("submitted"):
            raise ReplayError(ErrorKind.EXECUTOR, f"re-running {call.call_id} ({action['command'][:80]!r}) submitted "
                                                  "the task in the fresh workspace; the recording did not, so the "
                                                  "prefix cannot be rebuilt")
        output: dict[str, Any] = reply["output"] if isinstance(reply.get("output"), dict) else {}
        content = message.get("content")
        is_error = is_error_v2(message.get("extra")) if self.native.major >= 2 else is_error_v1(str(content))
        code = output.get("returncode")
        return FreshObservation(call.call_id, content, is_error=is_error,
                                return_code=code if isinstance(code, int) else None,
                                duration_ms=int(reply.get("duration_ms") or 0),
                                native={"message": message, "output": output})

    def close(self) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        if self.keep is not None and session.alive:
            self.keep(session)
        else:
            session.close()
