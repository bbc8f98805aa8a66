"""Per-call cost of ``--sandbox bwrap`` (host root or an image root) vs ``local`` per adapter.

OpenCode re-runs calls through one long-lived tool host (``opencode run`` of the recorded version), Pi through one
``node runner.mjs tool`` per call, mini-swe-agent through one companion (its own ``LocalEnvironment.execute``: a
fresh ``subprocess.run(shell=True)`` per action). For each agent and sandbox, a fresh executor runs ``calls``
trivial bash calls (``echo N``), each timed: the first one includes the runtime's start (the tool host, companion or
relay) and is reported apart; the rest give the per-call time. ``local`` runs in a workspace at the recorded cwd,
``bwrap`` in a workspace elsewhere mounted at the recorded cwd, ``image`` the same with the image root (when given)
as the sandbox's root. Claude Code's Bash and Codex's exec_command run in-process (forkpoint's own executors): under
bwrap one sandbox serves all of an executor's commands (``forkpoint.sandbox.executor``); ``bwrap-per-command`` is the
previous way, one bwrap per command (``FORKPOINT_SANDBOX_EXECUTOR=per-command``), measured in the same rounds.
SWE-agent's emulated shell is forkpoint's too (one bwrap per replay); Gemini CLI and Copilot CLI start their CLI per
call, Qwen Code keeps one CLI process. OpenHands (V0) replays the whole prefix in one runner process at the first call
(``BatchReplayExecutor``), as does the OpenHands SDK: that whole replay is the first call, and each call's time is
taken from the runtime's own timestamps (V0: action to observation; SDK: one observation to the next). Rounds
rotate the order. Used by tool_overhead.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as c

from forkpoint import runtimes
from forkpoint.core.model import RunContext, ToolCall
from forkpoint.process import childenv
from forkpoint.sandbox import open_sandbox
from forkpoint.sandbox.executor import MODE_ENV

AGENTS = ("claude-code", "codex", "opencode", "pi", "mini-swe-agent", "swe-agent", "gemini-cli", "qwen-code",
          "copilot-cli", "openhands", "openhands-sdk")
IN_PROCESS = ("claude-code", "codex", "swe-agent")  # forkpoint's own executors: no runtime needed
SHARED_SANDBOX = ("claude-code", "codex")  # one bwrap per replay (also measured with one per command)
SMOKE_AGENTS = ("opencode", "pi")  # the smoke run stays small (tests/test_benchmarks_smoke.py)
OPENCODE_VERSION = "1.18.33"
VERSIONS = {"claude-code": "2.1.332", "codex": "0.171.0", "opencode": OPENCODE_VERSION, "pi": "0.83.0",
            "mini-swe-agent": "2.4.6", "swe-agent": "1.1.0", "gemini-cli": "0.61.0", "qwen-code": "0.24.4",
            "copilot-cli": "1.0.102", "openhands": "0.62.0",
            "openhands-sdk": "1.58.2"}
MINI_FIXTURE = c.FIXTURES / "mini_swe_agent" / "2.4.6" / "basic"
SWE_FIXTURE = c.FIXTURES / "swe_agent" / "1.1.0" / "shell_state"
OPENHANDS_FIXTURE = c.FIXTURES / "openhands" / "0.62.0" / "basic"
SDK_FIXTURE = c.FIXTURES / "openhands-sdk" / "1.58.2" / "basic"
#: one runner process replays the whole prefix at the first call: timed whole, per call from OpenHands' own clock
BATCH = ("openhands", "openhands-sdk")
LOST_OUTPUT: dict[str, list[int]] = {}  # agent -> [calls with their output, calls that came back without]
TARGET = 1.3


def _executor(agent: str, context: RunContext) -> Any:
    if agent == "claude-code":
        from forkpoint.adapters.claude_code.tools import ClaudeToolExecutor

        return ClaudeToolExecutor(context, VERSIONS[agent], "11111111-2222-3333-4444-555555555555",
                                  context.state_dir / "home" / ".claude")
    if agent == "codex":
        from forkpoint.adapters.codex.tools import CodexToolExecutor

        return CodexToolExecutor(context, VERSIONS[agent])
    if agent == "opencode":
        from forkpoint.adapters.opencode.tools import OpenCodeToolExecutor

        runtime = runtimes.find("opencode", OPENCODE_VERSION)
        assert runtime is not None
        return OpenCodeToolExecutor(context, runtime.entrypoint)
    if agent == "mini-swe-agent":
        from forkpoint.adapters.mini_swe_agent.parse import parse_trajectory
        from forkpoint.adapters.mini_swe_agent.tools import MiniToolExecutor
        from forkpoint.core.model import Mode, Plan

        runtime = runtimes.find(agent, VERSIONS[agent])
        assert runtime is not None
        plan = Plan(parse_trajectory(MINI_FIXTURE / "trajectory.traj.json"), 1, Mode.REPLAY_ONLY, "bench")
        return MiniToolExecutor(plan, context, runtime.entrypoint)
    if agent == "swe-agent":
        from forkpoint.adapters.swe_agent.tools import SweAgentToolExecutor

        return SweAgentToolExecutor(_swe_plan(), context)
    if agent in ("gemini-cli", "qwen-code", "copilot-cli"):
        runtime = runtimes.find(agent, VERSIONS[agent])
        assert runtime is not None
        if agent == "gemini-cli":
            from forkpoint.adapters.gemini_cli.tools import GeminiToolExecutor

            return GeminiToolExecutor(context, runtime.entrypoint)
        if agent == "qwen-code":
            from forkpoint.adapters.qwen_code.tools import QwenToolExecutor

            return QwenToolExecutor(context, runtime.entrypoint)
        from forkpoint.adapters.copilot_cli.tools import CopilotToolExecutor

        return CopilotToolExecutor(context, runtime.entrypoint)
    from forkpoint.adapters.pi.runtime import installed
    from forkpoint.adapters.pi.tools import PiToolExecutor

    return PiToolExecutor(context, installed())


def _swe_plan() -> Any:
    """A SWE-agent plan from a constructed 1.1.0 trajectory: its templates render every fresh observation."""
    from forkpoint.adapters.swe_agent.parse import parse_traj
    from forkpoint.core.model import Mode, Plan

    return Plan(parse_traj(next(SWE_FIXTURE.glob("*.traj"))), 1, Mode.REPLAY_ONLY, "bench")


def _call(agent: str, n: int) -> ToolCall:
    call_id = f"call_{n:05d}"
    if agent == "claude-code":
        return ToolCall(call_id, "Bash", {"command": f"echo {n}"}, None)
    if agent == "codex":
        return ToolCall(call_id, "exec_command", {"cmd": f"echo {n}"}, None)
    if agent == "opencode":
        return ToolCall(call_id, "bash", {"command": f"echo {n}", "description": "count"}, None,
                        native={"callID": call_id})
    if agent == "mini-swe-agent":
        return ToolCall(call_id, "bash", {"command": f"echo {n}"}, None, native={"action": {"command": f"echo {n}"}})
    if agent == "swe-agent":  # the recorded first call as the template (its native step), another action
        template = _swe_plan().calls[0]
        return ToolCall(call_id, template.name, {**template.arguments, "action": f"echo {n}"}, None,
                        native=template.native)
    if agent in ("gemini-cli", "qwen-code"):
        return ToolCall(call_id, "run_shell_command", {"command": f"echo {n}", "description": "count"}, None)
    if agent == "copilot-cli":
        return ToolCall(call_id, "bash", {"command": f"echo {n}", "description": "count"}, None)
    return ToolCall(call_id, "bash", {"command": f"echo {n}"}, None)


def _openhands_trajectory(path: Path, recorded: Path, calls: int) -> None:
    """The basic 0.62.0 recording's task and recall, then ``calls`` execute_bash actions ``echo out-N`` (its first
    command's action/observation pair with new ids), recorded at ``recorded``."""
    import json

    text = (OPENHANDS_FIXTURE / "trajectory.json").read_text("utf-8")
    cwd = json.loads((OPENHANDS_FIXTURE / "meta.json").read_text("utf-8"))["cwd"]
    events = json.loads(text.replace(cwd, str(recorded)))
    head = [event for event in events if event["id"] <= 4]
    action, observation = next((a, o) for a, o in itertools.pairwise(events) if a.get("action") == "run")
    for n in range(1, calls + 1):
        fresh_action, fresh_observation = json.loads(json.dumps([action, observation]))
        fresh_action["id"], fresh_observation["id"] = 4 + 2 * n - 1, 4 + 2 * n
        fresh_observation["cause"] = fresh_action["id"]
        fresh_action["args"]["command"] = fresh_observation["extras"]["command"] = f"echo out-{n}"
        fresh_action["message"] = f"Running command: echo out-{n}"
        fresh_observation["content"] = f"out-{n}\n"
        for event in (fresh_action, fresh_observation):
            metadata = event["tool_call_metadata"]
            metadata["tool_call_id"] = f"call_{n:05d}"
            response = metadata["model_response"]
            response["id"] = f"chatcmpl-bench-{n:05d}"
            for tool_call in response["choices"][0]["message"]["tool_calls"]:
                tool_call["id"] = f"call_{n:05d}"
                tool_call["function"]["arguments"] = json.dumps({"command": f"echo out-{n}", "security_risk": "LOW"})
        head += [fresh_action, fresh_observation]
    path.write_text(json.dumps(head), "utf-8")


def _sdk_conversation(path: Path, recorded: Path, calls: int) -> None:
    """forkpoint's bundle of the basic 1.58.2 conversation's system prompt and task, then ``calls`` terminal actions
    ``echo out-N`` (its first terminal action/observation pair with new ids), recorded at ``recorded``."""
    import json

    from forkpoint.adapters.openhands_sdk.spec import BUNDLE

    cwd = json.loads((SDK_FIXTURE / "meta.json").read_text("utf-8"))["cwd"]
    folder = SDK_FIXTURE / "conversation"
    base_state = json.loads((folder / "base_state.json").read_text("utf-8").replace(cwd, str(recorded)))
    events = [json.loads(f.read_text("utf-8").replace(cwd, str(recorded)))
              for f in sorted((folder / "events").glob("event-*.json"))]
    head = events[:2]
    action, observation = next((a, o) for a, o in itertools.pairwise(events) if a.get("tool_name") == "terminal")
    parent = head[-1]["id"]
    for n in range(1, calls + 1):
        fresh_action, fresh_observation = json.loads(json.dumps([action, observation]))
        call_id, command = f"call_{n:05d}", f"echo out-{n}"
        fresh_action.update(id=f"00000000-0000-4000-8000-{2 * n:012d}", parent_id=parent, tool_call_id=call_id,
                            llm_response_id=f"chatcmpl-bench-{n:05d}",
                            summary=f"terminal: {json.dumps({'command': command})}")
        fresh_action["action"]["command"] = command
        fresh_action["tool_call"].update(id=call_id, arguments=json.dumps({"command": command,
                                                                         "security_risk": "LOW"}))
        fresh_observation.update(id=f"00000000-0000-4000-8000-{2 * n + 1:012d}", parent_id=fresh_action["id"],
                                 action_id=fresh_action["id"], tool_call_id=call_id)
        fresh_observation["observation"]["command"] = command
        fresh_observation["observation"]["content"][0]["text"] = f"out-{n}"
        parent = fresh_observation["id"]
        head += [fresh_action, fresh_observation]
    path.write_text(json.dumps({"schema": BUNDLE, "base_state": base_state, "events": head}), "utf-8")


def _batch_run(agent: str, context: RunContext, recorded: Path, calls: int) -> tuple[float, list[float]]:
    """(the whole replay s, each call's s on the runtime's clock: OpenHands V0, its action's timestamp to its
    observation's; the SDK, which replays the recorded ActionEvents, one observation's timestamp to the next)."""
    import json
    from datetime import datetime

    from forkpoint.core.model import Mode, Plan

    path = context.state_dir.parent / "trajectory.json"
    context.state_dir.mkdir(parents=True, exist_ok=True)
    executor: Any
    if agent == "openhands":
        from forkpoint.adapters.openhands import OpenHandsAdapter
        from forkpoint.adapters.openhands.parse import parse_events

        _openhands_trajectory(path, recorded, calls)
        trajectory: Any = parse_events(path)
        plan = Plan(trajectory, len(trajectory.batches), Mode.REPLAY_ONLY, "bench")
        executor = OpenHandsAdapter().executor(plan, context)
    else:
        from forkpoint.adapters.openhands_sdk import OpenHandsSdkAdapter
        from forkpoint.adapters.openhands_sdk.parse import parse_conversation

        _sdk_conversation(path, recorded, calls)
        trajectory = dataclasses.replace(parse_conversation(path), version=VERSIONS[agent])  # no version in a bundle
        plan = Plan(trajectory, len(trajectory.batches), Mode.REPLAY_ONLY, "bench")
        executor = OpenHandsSdkAdapter().executor(plan, context)
    started = time.perf_counter()
    try:
        for n, call in enumerate(plan.calls, 1):
            fresh = executor.run(call)
            text = fresh.content if isinstance(fresh.content, str) else str(fresh.content)
            if fresh.is_error or fresh.return_code != 0 or "out-" in text.replace(f"out-{n}", ""):
                raise RuntimeError(f"{agent}: echo out-{n} gave {fresh.content!r}")
            LOST_OUTPUT.setdefault(agent, [0, 0])[f"out-{n}" not in text] += 1
    finally:
        executor.close()
    whole = time.perf_counter() - started
    if agent == "openhands-sdk":
        from forkpoint.adapters.openhands_sdk.launch import work_dir as sdk_work_dir

        produced = json.loads((sdk_work_dir(context) / "replay-out.json").read_text("utf-8"))
        stamps = [datetime.fromisoformat(entry["event"]["timestamp"]) for entry in produced]
        return whole, [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(stamps)]
    from forkpoint.adapters.openhands.launch import work_dir

    events = json.loads((work_dir(context) / "replayed-trajectory.json").read_text("utf-8"))
    stamps = {event["id"]: datetime.fromisoformat(event["timestamp"]) for event in events}
    per_call = [(stamps[event["id"]] - stamps[event["cause"]]).total_seconds() for event in events
                if event.get("observation") == "run" and event.get("cause") in stamps]
    if len(per_call) != calls:
        raise RuntimeError(f"{agent}: {len(per_call)} timed observations of {calls} calls")
    return whole, per_call


def available(agent: str) -> bool:
    return agent in IN_PROCESS or runtimes.find(agent, VERSIONS[agent]) is not None


def _one_run(agent: str, sandbox: str, root: Path, calls: int, index: int,
             image: Path | None = None) -> tuple[float, list[float]]:
    """(first call s, the other calls' s) of one fresh executor."""
    base = root / f"{agent}-{sandbox}-{index}"
    recorded = root / f"recorded-{agent}"
    workspace = recorded if sandbox == "local" else base / "ws"
    shutil.rmtree(workspace, ignore_errors=True)
    workspace.mkdir(parents=True)
    base.mkdir(parents=True, exist_ok=True)
    backend = "local" if sandbox == "local" else "bwrap"
    context = RunContext(workspace, base / "state", base / "out", "thread-bench",
                         sandbox=open_sandbox(backend, workspace, str(recorded),
                                              image=str(image) if sandbox == "image" else None))
    if agent in BATCH:
        try:
            with childenv.passing({}, temp_dir=base / "tmp"):
                return _batch_run(agent, context, recorded, calls)
        finally:
            shutil.rmtree(base, ignore_errors=True)
            shutil.rmtree(workspace, ignore_errors=True)
    if sandbox == "bwrap-per-command":
        os.environ[MODE_ENV] = "per-command"
    try:
        executor = _executor(agent, context)
    finally:
        os.environ.pop(MODE_ENV, None)
    times: list[float] = []
    try:
        with childenv.passing({}, temp_dir=base / "tmp"):
            for n in range(1, calls + 1):
                started = time.perf_counter()
                fresh = executor.run(_call(agent, n))
                times.append(time.perf_counter() - started)
                text = fresh.content if isinstance(fresh.content, str) else str(fresh.content)
                if fresh.is_error or str(n) not in text:
                    raise RuntimeError(f"{agent} {sandbox}: echo {n} gave {fresh.content!r}")
    finally:
        executor.close()
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(workspace, ignore_errors=True)
    return times[0], times[1:]


def measure(root: Path, calls: int, rounds: int, image: Path | None = None,
            agents: tuple[str, ...] = AGENTS) -> str:
    """The markdown table (and a note) for every installed agent of ``agents``; ``image``: also an image root."""
    rows = []
    skipped = [agent for agent in agents if not available(agent)]
    failed: list[str] = []
    for agent in (a for a in agents if a not in skipped):
        sandboxes: tuple[str, ...] = ("local", "bwrap", "image") if image is not None else ("local", "bwrap")
        if agent in SHARED_SANDBOX:
            sandboxes += ("bwrap-per-command",)
        first: dict[str, list[float]] = {name: [] for name in sandboxes}
        per_call: dict[str, list[float]] = {name: [] for name in sandboxes}
        for round_index in range(rounds):
            shift = round_index % len(sandboxes)
            for sandbox in sandboxes[shift:] + sandboxes[:shift]:
                if sandbox not in per_call:  # the image root failed this agent in an earlier round
                    continue
                try:
                    start, rest = _one_run(agent, sandbox, root, calls, round_index, image)
                except Exception as exc:  # an image root without what the runtime needs: say so, measure the rest
                    if sandbox != "image":
                        raise
                    failed.append(f"{agent} in the image root ({str(exc)[:160]})")
                    per_call.pop("image", None)
                    continue
                first[sandbox].append(start)
                per_call[sandbox].extend(rest)
        local = c.median(per_call["local"])
        for sandbox in (name for name in sandboxes if per_call.get(name)):
            value = c.median(per_call[sandbox])
            rows.append([agent, sandbox, c.ms(c.median(first[sandbox])), c.ms(value), c.ms(c.p95(per_call[sandbox])),
                         c.ratio(value, local), c.verdict(value <= TARGET * local) if sandbox != "local" else ""])
    table: Callable[..., str] = c.table
    body = table(["agent", "sandbox", "first call ms (runtime start)", "per call median ms", "per call p95 ms",
                  "/ local", "≤ 1.3× target"], rows)
    body += (f"\n\n{calls} `echo N` bash calls per executor ({calls - 1} timed per call, the first apart), {rounds} "
             "rounds rotating local / bwrap / image (/ bwrap-per-command); every output checked. Claude Code's Bash "
             "and Codex's exec_command (forkpoint's executors) keep one bwrap per replay (`bwrap`; "
             "`bwrap-per-command`: one per command, as before, in the same rounds). OpenCode keeps one tool host and "
             "mini-swe-agent one companion for all calls, so the sandbox costs them once (the first call: bwrap, the "
             "relay, the runtime's start) and each call only what its command costs inside; Pi starts its Node runner "
             "per call, so bwrap's namespace setup is paid on every call, as do Gemini CLI and Copilot CLI "
             "(one `gemini -p` / `copilot -p` per call); Qwen Code keeps one CLI process for all calls, SWE-agent's "
             "emulated shell (forkpoint's own) one bwrap per replay. OpenHands and the OpenHands SDK replay the whole "
             "prefix in one runner process at the first call: their first-call column is that whole replay, their "
             "per-call columns each call's time on the runtime's own clock (V0: action to observation timestamp; the "
             "SDK, which re-dispatches the recorded ActionEvents: one observation's timestamp to the next).")
    if skipped:
        body += f" Not installed, skipped: {', '.join(skipped)}."
    if failed:
        body += f" Not measured: {'; '.join(failed)}."
    for agent, (kept, lost) in ((a, counts) for a, counts in LOST_OUTPUT.items() if counts[1]):
        body += (f" {agent}: {lost} of {kept + lost} `echo` calls came back with exit code 0 but without their "
                 "output (OpenHands' own runtime: 0.62's CLI runtime drops the output of a command that exits "
                 "before its read loop's first select; a replay reports such an observation as not exact).")
    return body
