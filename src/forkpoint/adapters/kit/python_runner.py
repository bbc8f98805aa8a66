"""A companion runner shipped inside forkpoint and run on an agent runtime's own Python (OpenHands V0 and the
OpenHands V1 SDK): one home for how it is started, sandboxed and read back, so both adapters' I/O shells agree.

The runner file is started as ``<venv python> -I <runner.py> <request.json>`` through the run's sandbox
(forkpoint's supervised process layer: deadline, output caps, no surviving descendants) with an isolated HOME,
credentials stripped, litellm's local cost map (no download) and its request/result files in the run's state dir.
Only the host side is shared here: each runner.py stays a standalone file run in the agent's venv.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from forkpoint.adapters.kit import continuation as shell
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import read_file_strict, refused_as
from forkpoint.core.model import FreshObservation, JsonObject, Plan, RunContext, ToolCall
from forkpoint.core.results import write_atomic
from forkpoint.process import ProcessResult, sanitized_env
from forkpoint.sandbox import home_environment, interpreter_paths, local_sandbox

if TYPE_CHECKING:
    from forkpoint.bridge.protocols.openai_chat import ChatProfile

_TAIL = 4000
#: the variable the runner reads the bridge key from (named in its request, never written to a file)
BRIDGE_KEY_ENV = "FORKPOINT_BRIDGE_KEY"
#: where a replay runner's LLM points: nothing listens there, so a model call could only fail
DEAD_LLM_URL = "http://127.0.0.1:9/v1"
#: the live steps a continuation may take when the run names no budget
DEFAULT_LIVE_STEPS = 100
#: the boundary prompt reaches the runner only through its environment (never a file forkpoint writes)
PROMPT_ENV = "FORKPOINT_BOUNDARY_PROMPT"


@dataclass(frozen=True)
class RunnerOutcome:
    result: dict[str, Any]
    process: ProcessResult
    log: Path

    def tail(self) -> str:
        data = self.process.stdout[-_TAIL:] + b"\n" + self.process.stderr[-_TAIL:]
        return data.decode("utf-8", "replace")


@dataclass(frozen=True)
class PythonRunner:
    """What differs between the agents' runners: the file, its request schema, the names in paths and messages,
    the environment it must not inherit or must get, and the runtime's quirks."""

    path: Path  # the runner.py shipped next to the adapter
    schema: str  # the request's ``schema``
    label: str  # the agent's name in messages ("OpenHands")
    folder: str  # its folder in the run's state dir and its logs' prefix ("openhands")
    strip_prefixes: tuple[str, ...]  # environment variables the runner must not inherit
    fixed_env: Mapping[str, str]  # environment every run gets
    max_result_bytes: int
    #: a variable naming a scratch folder of the runner's own (the SDK's TMUX_TMPDIR): the sandbox's private /tmp
    #: under a sandbox with its own namespaces, a folder removed after the run under local
    scratch_env: str | None = None
    scratch_prefix: str = "fp-runner-"
    #: a result carrying ``error`` is a failed run (not something the hooks judge)
    error_fails: bool = False

    def work_dir(self, context: RunContext) -> Path:
        path = context.state_dir / self.folder
        path.mkdir(parents=True, exist_ok=True)
        return path

    def environment(self, home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = sanitized_env(os.environ, strip_credentials=True)
        for name in list(env):
            if name.startswith(self.strip_prefixes):
                del env[name]
        home_environment(env, home)
        shell.loopback_no_proxy(env)
        env.update(self.fixed_env)
        env.update(extra or {})
        return env

    def run(self, python: Path, context: RunContext, name: str, request: dict[str, Any], *, timeout_s: float,
            env_extra: dict[str, str] | None = None, bridge_port: int | None = None) -> RunnerOutcome:
        """Write ``<state>/<folder>/<name>-request.json``, run the runner, read its result (typed errors only).

        The runner runs in the run's sandbox, its folder and HOME writable, the venv and its interpreter readable.
        Replay has no network; a continuation reaches the bridge (``bridge_port``): the host's network under local,
        only the bridge's port relayed in under a sandbox with its own network namespace.
        """
        work = self.work_dir(context)
        result_path = work / f"{name}-result.json"
        result_path.unlink(missing_ok=True)
        request = {"schema": self.schema, **request, "result": str(result_path)}
        request_path = work / f"{name}-request.json"
        write_atomic(request_path, json.dumps(request, indent=2).encode())
        context.logs.mkdir(parents=True, exist_ok=True)
        log = context.logs / f"{self.folder}-{name}.log"
        context.home.mkdir(parents=True, exist_ok=True)
        sandbox = context.sandbox or local_sandbox(context.workspace)
        argv = [str(python), "-I", str(self.path), str(request_path)]
        options: dict[str, Any] = {
            "cwd": str(work), "env": self.environment(context.home, env_extra), "timeout_s": timeout_s,
            "writable": (context.home, work), "grace_s": 5.0, "max_output_bytes": 4 * 1024 * 1024,
            "log_path": log, "die_with_parent": True}
        readable = (*interpreter_paths(python), self.path.parent)
        with ExitStack() as stack:
            if self.scratch_env is not None:
                if sandbox.private_network:  # the sandbox's own /tmp (a tmpfs gone with its namespace)
                    options["env"][self.scratch_env] = "/tmp"
                else:  # local: a folder of its own, removed after the run
                    scratch = stack.enter_context(scratch_dir(self.scratch_prefix))
                    options["env"][self.scratch_env] = str(scratch)
                    options["writable"] = (*options["writable"], scratch)
            if bridge_port is not None and sandbox.private_network:
                from forkpoint.sandbox.forward import HostRelay

                relay = stack.enter_context(HostRelay(bridge_port, context.state_dir))
                process = sandbox.run(relay.wrap(sandbox.host_command(argv)), network=False,
                                      readable=(*readable, *relay.readable), **options)
            else:
                process = sandbox.run(argv, network=bridge_port is not None, readable=readable, **options)
        kind = ErrorKind.CONTINUATION if name == "continue" else ErrorKind.EXECUTOR
        what = f"the {self.label} runner"
        try:  # the runner's folder is writable by replayed commands: read strictly (no link, FIFO or device followed)
            with refused_as(kind, f"read {what} result {result_path}"):
                result = json.loads(read_file_strict(work, result_path.name, max_bytes=self.max_result_bytes))
        except (OSError, ValueError):
            result = {}
        outcome = RunnerOutcome(result if isinstance(result, dict) else {}, process, log)
        if process.timed_out:
            raise ReplayError(kind, f"{what} ({name}) did not finish within {timeout_s:.0f} s; see {log}")
        if not outcome.result:
            raise ReplayError(kind, f"{what} ({name}) exited {process.returncode} without a result: "
                                    f"{outcome.tail()[-600:].strip()}; see {log}")
        if self.error_fails and outcome.result.get("error"):
            raise ReplayError(kind, f"{what} ({name}) failed: {outcome.result['error']}; see {log}")
        return outcome


def continue_env(prompt: str | None) -> dict[str, str]:
    """What a continuing runner's environment carries beyond PythonRunner's: the bridge key and the boundary
    prompt (never written to a file)."""
    return {BRIDGE_KEY_ENV: shell.BRIDGE_KEY, **({PROMPT_ENV: prompt} if prompt else {})}


def chat_gate(job: shell.Job, profile: ChatProfile, expected_messages: Callable[[], list[JsonObject]],
              prefix_error: type[Exception]) -> shell.GateSpec:
    """The gate of a runner that continues through litellm's Chat Completions (OpenHands V0 and SDK): the first
    request must open with the rebuilt prefix's messages (and the boundary prompt); a prefix they cannot be built
    from (``prefix_error``) fails the continuation."""
    from forkpoint.bridge.protocols.openai_chat import ChatGate, ExpectedChat

    try:
        messages = expected_messages()
        if job.boundary_prompt is not None:
            messages.append({"role": "user", "text": job.boundary_prompt})
        expected = ExpectedChat.of(job.plan.profile, messages)
    except prefix_error as error:
        raise ReplayError(ErrorKind.CONTINUATION, f"cannot build the expected first request: {error}") from None
    return shell.GateSpec(ChatGate(profile, expected), expected.to_json())


@contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A private scratch folder, short (a socket path in it holds at most 107 bytes), removed afterwards."""
    base = tempfile.gettempdir()
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=base if len(base) <= 40 else "/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class BatchReplayExecutor(ABC):
    """A tool executor whose prefix calls all run in ONE runner process, started at the first call (``run`` of the
    later calls returns what that process produced): the runtime's start-up takes seconds and its tools keep state
    between calls. The subclass starts that process (``_replay``: call id -> the native fresh event) and turns one
    event into the call's fresh observation (``_observation``)."""

    label: ClassVar[str]  # the agent's name in messages

    def __init__(self, plan: Plan, context: RunContext, python: Path) -> None:
        self.plan = plan
        self.context = context
        self.python = python
        self.sandbox = context.sandbox or local_sandbox(context.workspace)
        self._fresh: dict[str, JsonObject] | None = None

    @abstractmethod
    def _replay(self) -> dict[str, JsonObject]: ...

    @abstractmethod
    def _observation(self, call: ToolCall, event: JsonObject) -> FreshObservation: ...

    def run(self, call: ToolCall) -> FreshObservation:
        if self._fresh is None:
            self._fresh = self._replay()
        event = self._fresh.get(call.call_id)
        if event is None:
            raise ReplayError(ErrorKind.EXECUTOR, f"the {self.label} replay did not run {call.call_id}")
        return self._observation(call, event)

    def close(self) -> None:
        return None


def runtime_python(agent: str, version: str, needs: str) -> Path:
    """The installed runtime's Python (replay needs the agent's own tools, not only continuation); ``needs`` says
    what for in the error ("replaying OpenHands actions needs OpenHands")."""
    from forkpoint import runtimes

    runtimes.check_verified(agent, version)
    runtime = runtimes.find(agent, version)
    if runtime is None:
        raise ReplayError(ErrorKind.CONFIGURATION, f"{needs} {version} itself: run `forkpoint agents install "
                                                   f"{agent}@{version}`")
    return runtime.entrypoint


def check_recorded_workspace(plan: Plan, workspace: str, *, what: str, why: str, refusal: str = "") -> None:
    """The agent's recorded paths are absolute and sent back to the model verbatim (no path rewriting): the
    workspace must be the recorded one and no call may name a path outside it. ``workspace`` is the workspace as
    the tools see it (under bwrap: mounted at the recorded cwd); ``what`` names the recording, ``why`` says which
    paths the agent records, ``refusal`` is appended to the refusal of an outside path."""
    recorded = plan.trajectory.cwd
    real = os.path.realpath(workspace)
    if recorded is None or os.path.realpath(recorded) != real:
        raise ReplayError(ErrorKind.WORKSPACE,
                          f"{what} was recorded in the workspace {recorded}, but the workspace is {workspace}; {why} "
                          f"that are sent back to the model verbatim, so replay it in a fresh workspace at {recorded}")
    root = os.path.normpath(recorded)
    for call in plan.calls:
        path = call.arguments.get("path")
        if isinstance(path, str) and os.path.isabs(path):
            normal = os.path.normpath(path)
            if normal != root and not normal.startswith(root.rstrip("/") + "/"):
                raise ReplayError(ErrorKind.WORKSPACE, f"call {call.call_id} names {path}, outside the recorded "
                                                       f"workspace {recorded}{refusal}")
