"""Run forkpoint's companion runner (runner.py) on the OpenHands runtime's Python: the only OpenHands I/O shell.

The runner is a file shipped inside forkpoint; it is started as ``<venv python> runner.py <request.json>`` through
the run's sandbox (forkpoint's supervised process layer: deadline, output caps, no surviving descendants) with
an isolated HOME, credentials stripped, litellm's local cost map (no download) and the request/result files in
the run's state dir. See runner.py for the JSON protocol.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forkpoint.errors import ErrorKind, ReplayError
from forkpoint.fs import read_file_strict, refused_as
from forkpoint.model import RunContext
from forkpoint.process import ProcessResult, sanitized_env
from forkpoint.results import write_atomic
from forkpoint.sandbox import home_environment, local_sandbox, runtime_paths

RUNNER = Path(__file__).with_name("runner.py")
SCHEMA = "forkpoint.openhands-runner/v1"
BRIDGE_KEY_ENV = "FORKPOINT_BRIDGE_KEY"
#: where the replay-only runner's LLM points: nothing listens there, so a model call could only fail
DEAD_LLM_URL = "http://127.0.0.1:9/v1"
_TAIL = 4000
_MAX_RESULT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class RunnerOutcome:
    result: dict[str, Any]
    process: ProcessResult
    log: Path

    def tail(self) -> str:
        data = self.process.stdout[-_TAIL:] + b"\n" + self.process.stderr[-_TAIL:]
        return data.decode("utf-8", "replace")


def work_dir(context: RunContext) -> Path:
    path = context.state_dir / "openhands"
    path.mkdir(parents=True, exist_ok=True)
    return path


def environment(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = sanitized_env(os.environ, strip_credentials=True)
    for name in list(env):
        if name.startswith(("OPENAI_", "LLM_", "LITELLM_", "SANDBOX_", "OPENHANDS_")):
            del env[name]
    home_environment(env, home)
    no_proxy = ",".join(dict.fromkeys([*filter(None, env.get("NO_PROXY", "").split(",")), "127.0.0.1", "localhost"]))
    env.update({"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LOG_LEVEL": "WARNING", "NO_PROXY": no_proxy,
                "no_proxy": no_proxy, "PYTHONDONTWRITEBYTECODE": "1"})
    env.update(extra or {})
    return env


def run_runner(python: Path, context: RunContext, name: str, request: dict[str, Any], *, timeout_s: float,
               env_extra: dict[str, str] | None = None) -> RunnerOutcome:
    """Write ``<state>/openhands/<name>-request.json``, run the runner, read its result (typed errors only)."""
    work = work_dir(context)
    result_path = work / f"{name}-result.json"
    result_path.unlink(missing_ok=True)
    request = {"schema": SCHEMA, **request, "result": str(result_path)}
    request_path = work / f"{name}-request.json"
    write_atomic(request_path, json.dumps(request, indent=2).encode())
    context.logs.mkdir(parents=True, exist_ok=True)
    log = context.logs / f"openhands-{name}.log"
    context.home.mkdir(parents=True, exist_ok=True)
    sandbox = context.sandbox or local_sandbox(context.workspace)
    process = sandbox.run(
        [str(python), "-I", str(RUNNER), str(request_path)],
        cwd=str(work), env=environment(context.home, env_extra), timeout_s=timeout_s, network=True,
        writable=(context.home, work), readable=(*runtime_paths(python), RUNNER.parent),
        grace_s=5.0, max_output_bytes=4 * 1024 * 1024, log_path=log, die_with_parent=True,
    )
    kind = ErrorKind.CONTINUATION if name == "continue" else ErrorKind.EXECUTOR
    try:  # the runner's folder is writable by the agent: read strictly (no link, FIFO or device followed)
        with refused_as(kind, f"read the OpenHands runner result {result_path}"):
            result = json.loads(read_file_strict(work, result_path.name, max_bytes=_MAX_RESULT_BYTES))
    except (OSError, ValueError):
        result = {}
    outcome = RunnerOutcome(result if isinstance(result, dict) else {}, process, log)
    if process.timed_out:
        raise ReplayError(ErrorKind.CONTINUATION if name == "continue" else ErrorKind.EXECUTOR,
                          f"the OpenHands runner ({name}) did not finish within {timeout_s:.0f} s; see {log}")
    if not outcome.result:
        raise ReplayError(ErrorKind.CONTINUATION if name == "continue" else ErrorKind.EXECUTOR,
                          f"the OpenHands runner ({name}) exited {process.returncode} without a result: "
                          f"{outcome.tail()[-600:].strip()}; see {log}")
    return outcome
