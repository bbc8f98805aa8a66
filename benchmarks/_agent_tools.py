"""Per-call cost of ``--sandbox bwrap`` vs ``local`` for the agents whose tools run in their own runtime.

OpenCode re-runs calls through one long-lived tool host (``opencode run`` of the recorded version), Pi through one
``node runner.mjs tool`` per call. For each agent and sandbox, a fresh executor runs ``calls`` trivial bash calls
(``echo N``), each timed: the first one includes the runtime's start (OpenCode's tool host, its relay under bwrap)
and is reported apart; the rest give the per-call time. ``local`` runs in a workspace at the recorded cwd, ``bwrap``
in a workspace elsewhere mounted at the recorded cwd. Rounds alternate the order (ABBA). Used by tool_overhead.py.
"""

from __future__ import annotations

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

AGENTS = ("opencode", "pi")
OPENCODE_VERSION = "1.18.33"
TARGET = 1.3


def _executor(agent: str, context: RunContext) -> Any:
    if agent == "opencode":
        from forkpoint.adapters.opencode.tools import OpenCodeToolExecutor

        runtime = runtimes.find("opencode", OPENCODE_VERSION)
        assert runtime is not None
        return OpenCodeToolExecutor(context, runtime.entrypoint)
    from forkpoint.adapters.pi.runtime import installed
    from forkpoint.adapters.pi.tools import PiToolExecutor

    return PiToolExecutor(context, installed())


def _call(agent: str, n: int) -> ToolCall:
    call_id = f"call_{n:05d}"
    if agent == "opencode":
        return ToolCall(call_id, "bash", {"command": f"echo {n}", "description": "count"}, None,
                        native={"callID": call_id})
    return ToolCall(call_id, "bash", {"command": f"echo {n}"}, None)


def available(agent: str) -> bool:
    return runtimes.find(agent, OPENCODE_VERSION if agent == "opencode" else "0.83.0") is not None


def _one_run(agent: str, sandbox: str, root: Path, calls: int, index: int) -> tuple[float, list[float]]:
    """(first call s, the other calls' s) of one fresh executor."""
    base = root / f"{agent}-{sandbox}-{index}"
    recorded = root / f"recorded-{agent}"
    workspace = recorded if sandbox == "local" else base / "ws"
    shutil.rmtree(workspace, ignore_errors=True)
    workspace.mkdir(parents=True)
    base.mkdir(parents=True, exist_ok=True)
    context = RunContext(workspace, base / "state", base / "out",
                         sandbox=open_sandbox(sandbox, workspace, str(recorded)))
    executor = _executor(agent, context)
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


def measure(root: Path, calls: int, rounds: int) -> str:
    """The markdown table (and a note) for every installed agent of ``AGENTS``."""
    rows = []
    skipped = [agent for agent in AGENTS if not available(agent)]
    for agent in (a for a in AGENTS if a not in skipped):
        first: dict[str, list[float]] = {"local": [], "bwrap": []}
        per_call: dict[str, list[float]] = {"local": [], "bwrap": []}
        for round_index in range(rounds):
            order = ("local", "bwrap") if round_index % 2 == 0 else ("bwrap", "local")
            for sandbox in order:
                start, rest = _one_run(agent, sandbox, root, calls, round_index)
                first[sandbox].append(start)
                per_call[sandbox].extend(rest)
        local = c.median(per_call["local"])
        for sandbox in ("local", "bwrap"):
            value = c.median(per_call[sandbox])
            rows.append([agent, sandbox, c.ms(c.median(first[sandbox])), c.ms(value), c.ms(c.p95(per_call[sandbox])),
                         c.ratio(value, local), c.verdict(value <= TARGET * local) if sandbox == "bwrap" else ""])
    table: Callable[..., str] = c.table
    body = table(["agent", "sandbox", "first call ms (runtime start)", "per call median ms", "per call p95 ms",
                  "/ local", "≤ 1.3× target"], rows)
    body += (f"\n\n{calls} `echo N` bash calls per executor ({calls - 1} timed per call, the first apart), {rounds} "
             "rounds alternating local/bwrap; every output checked. OpenCode keeps one tool host for all calls, so "
             "bwrap costs it once (the first call: bwrap, the relay, the binary's start); Pi starts its Node runner "
             "per call, so bwrap's namespace setup is paid on every call.")
    if skipped:
        body += f" Not installed, skipped: {', '.join(skipped)}."
    return body
