"""What the scripts/record_*_fixtures.py recorders share: the fresh scenario dirs, the initial files, the script a
fixture's ScriptedModel is rebuilt from and the compact request log. One copy, so every recorder writes them alike.

A recorder is run as ``python scripts/record_<agent>_fixtures.py``, which puts scripts/ first on sys.path: it
imports this module by its plain name.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from forkpoint import runtimes
from forkpoint.process import sanitized_env
from forkpoint.runtimes import Runtime

Json = dict[str, Any]


def read_jsonl(path: Path) -> list[Json]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def write_files(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)


def fresh_scenario(cwd: Path, home: Path, fixture: Path, files: dict[str, str | bytes]) -> None:
    """The scenario's cwd, HOME and fixture dir recreated empty; its files written to the cwd and to the fixture's
    workspace-initial/."""
    for path in (cwd, home, fixture):
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
    write_files(cwd, files)
    write_files(fixture / "workspace-initial", files)


def write_script(fixture: Path, seed: str, turns: list[Any]) -> None:
    """The fixture's script.json: what a test rebuilds the scenario's ScriptedModel from."""
    (fixture / "script.json").write_text(json.dumps({"seed": seed, "turns": [{"content": t} for t in turns]},
                                                    indent=2) + "\n")


def summarise_chat_request(entry: Json) -> Json:
    """A Chat Completions request log entry with its tools replaced by their hash and names (OpenHands V0 and SDK)."""
    body = entry.get("body") if isinstance(entry.get("body"), dict) else None
    if body is None:
        return entry
    tools = body.get("tools")
    summary = {k: v for k, v in body.items() if k != "tools"}
    if isinstance(tools, list):
        summary["tools_sha256"] = hashlib.sha256(json.dumps(tools, sort_keys=True).encode()).hexdigest()
        summary["tool_names"] = [t.get("function", {}).get("name") for t in tools if isinstance(t, dict)]
    return {**entry, "body": summary}


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def fresh_copied_scenario(cwd: Path, out: Path, files: dict[str, str], *others: Path) -> None:
    """A scenario's cwd (and ``others``: its HOME) recreated empty, its files written to the cwd and the fixture dir
    ``out`` recreated with a copy of them as workspace-initial/ (the agent CLI and OpenHands recorders)."""
    for folder in (cwd, *others):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    for rel, body in files.items():
        (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
        (cwd / rel).write_text(body)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(cwd, out / "workspace-initial")


def run_python_runner(argv: list[str], request: Json, scratch: Path, name: str, timeout: float,
                      env: dict[str, str], detail: Callable[[Json], str] = lambda result: "") -> Json:
    """One record run of forkpoint's companion runner (OpenHands V0 and SDK) on the runtime's Python: ``request``
    written to scratch/request.json, ``argv`` + that path run with credentials stripped, HOME in ``scratch`` and
    litellm's local cost map (``env`` on top); its scratch/result.json, or an exit naming the runner's error."""
    (scratch / "request.json").write_text(json.dumps(request))
    full_env = sanitized_env(os.environ, strip_credentials=True)
    full_env.update({"HOME": str(scratch / "home"), "SCRIPTED_API_KEY": "dummy", "TZ": "UTC",
                     "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LOG_LEVEL": "WARNING", **env})
    done = subprocess.run([*argv, str(scratch / "request.json")], env=full_env, capture_output=True, text=True,
                          timeout=timeout, cwd=scratch, check=False)
    result: Json = json.loads((scratch / "result.json").read_text())
    if done.returncode != 0 or result.get("error"):
        sys.stderr.write(done.stderr[-4000:] + detail(result))
        raise SystemExit(f"{name}: runner failed: {result.get('error')}")
    return result


def write_cli_meta(out: Path, agent: str, version: str, cwd: Path, model: str, scenario: dict[str, Any]) -> None:
    """An agent CLI fixture's meta.json and script.json (the scripted turns and the prompt)."""
    (out / "meta.json").write_text(json.dumps({"agent": agent, "version": version, "cwd": str(cwd),
                                               "model": model, "prompt": scenario["prompt"]}, indent=1))
    (out / "script.json").write_text(json.dumps({"turns": scenario["turns"], "prompt": scenario["prompt"]}, indent=1))


def installed(agent: str, version: str) -> Runtime:
    """The cached runtime of ``agent@version``; exits saying how to install it when there is none."""
    runtime = runtimes.find(agent, version)
    if runtime is None:
        raise SystemExit(f"{agent} {version} is not installed: `forkpoint agents install {agent}@{version}`")
    return runtime


def write_requests(path: Path, requests: Iterable[Json], compact: Callable[[Json], Json]) -> None:
    """The request log a fixture keeps (requests.jsonl): each request the model server received, ``compact``-ed."""
    with path.open("w") as handle:
        for entry in requests:
            handle.write(json.dumps(compact(entry), ensure_ascii=False) + "\n")
