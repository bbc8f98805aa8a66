#!/usr/bin/env python3
"""Re-record the mini-swe-agent fixtures: the REAL `mini` CLI (1.17.5 and 2.4.6) driven by ScriptedModel.

For every version and scenario: a fresh workspace at /tmp/forkpoint-rec-mini/<version>/<scenario> (seeded with
the files below), ScriptedModel serving OpenAI Chat Completions on loopback (counter mode: the n-th model request
gets turn n, since 2.x keeps no assistant message for a format error), and
``<venv>/bin/python -m minisweagent.run.mini -c <config.yaml> -m openai/scripted -t <task> -y --exit-immediately -o
<traj>``. The config is the package's own mini.yaml with the model pointed at ScriptedModel. Written to
tests/fixtures/mini_swe_agent/<version>/<scenario>/: trajectory.traj.json (what mini wrote), script.json (the
turns), requests.jsonl (the messages litellm sent on each main request), meta.json, workspace-initial/.

Usage: python scripts/record_mini_swe_agent_fixtures.py [--version 2.4.6] [--scenario basic]
(needs `forkpoint agents install mini-swe-agent@1.17.5` and `@2.4.6`).

``--deterministic`` instead records 1.17.5/deterministic/deterministic.traj.json: the real CLI with the package's
own offline ``DeterministicModel`` (config ``model_class: deterministic``, the turns as ``outputs``), a model class
forkpoint can replay but never continue. Its file name keeps it out of the every-boundary continuation suites.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from forkpoint import runtimes
from forkpoint.testing.scripted_model import ScriptedModel, text, tool_use

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "mini_swe_agent"
RECORD_ROOT = Path("/tmp/forkpoint-rec-mini")
TASK = "Fix the add() bug in calc.py."
FILES = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "notes.txt": "alpha\nbeta\ngamma\n",
    "sub/inner.txt": "inside sub\n",
}
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat calc.py"


def v1(thought: str, *commands: str) -> dict[str, Any]:
    """A 1.x text turn: THOUGHT plus one ```bash block per command (0 or 2+ blocks = a format error)."""
    blocks = "".join(f"\n\n```bash\n{command}\n```" for command in commands)
    return {"content": [text(f"THOUGHT: {thought}{blocks}")]}


def v2(thought: str, *commands: str) -> dict[str, Any]:
    """A 2.x tool-call turn: text plus one bash tool call per command (none = a format error)."""
    return {"content": [text(thought), *(tool_use("bash", {"command": c}) for c in commands)]}


def text2(thought: str, *commands: str) -> dict[str, Any]:
    """A 2.x text-mode turn (``litellm_textbased``): one ```mswea_bash_command block per command."""
    blocks = "".join(f"\n\n```mswea_bash_command\n{command}\n```" for command in commands)
    return {"content": [text(f"{thought}{blocks}")]}


SCENARIOS: dict[str, dict[str, Any]] = {
    "basic": {
        "timeout": 10,
        "v1": [v1("Read the code.", "cat calc.py"), v1("Count lines.", "ls && wc -l calc.py notes.txt"),
               v1("A long listing.", "seq 1 3000"), v1("Fix it.", "sed -i 's/a - b/a + b/' calc.py && cat calc.py"),
               v1("Done.", SUBMIT)],
        "v2": [v2("Read the code.", "cat calc.py"), v2("Count lines.", "ls && wc -l calc.py notes.txt"),
               v2("A long listing.", "seq 1 3000"), v2("Fix it.", "sed -i 's/a - b/a + b/' calc.py && cat calc.py"),
               v2("Done.", SUBMIT)],
    },
    "failing": {
        "timeout": 2,
        "v1": [v1("Look for a missing file.", "ls does-not-exist"),
               v1("Exit code 3.", "echo out; echo err >&2; exit 3"),
               v1("Too slow.", "echo started; sleep 5; echo never"), v1("Fix it.", "sed -i 's/a - b/a + b/' calc.py"),
               v1("Done.", SUBMIT)],
        "v2": [v2("Look for a missing file.", "ls does-not-exist"),
               v2("Exit code 3.", "echo out; echo err >&2; exit 3"),
               v2("Too slow.", "echo started; sleep 5; echo never"), v2("Fix it.", "sed -i 's/a - b/a + b/' calc.py"),
               v2("Done.", SUBMIT)],
    },
    "format_error": {
        "timeout": 10,
        "v1": [v1("Read the code.", "cat calc.py"), v1("I forgot the command."),
               v1("Two at once.", "ls", "cat notes.txt"), v1("Fix it.", "sed -i 's/a - b/a + b/' calc.py"),
               v1("Done.", SUBMIT)],
        "v2": [v2("Read the code.", "cat calc.py"), v2("I forgot the tool call."),
               v2("Fix it.", "sed -i 's/a - b/a + b/' calc.py && cat calc.py"), v2("Done.", SUBMIT)],
    },
    "cd": {
        "timeout": 10,
        "v1": [v1("Go into sub.", "cd sub && pwd && cat inner.txt"), v1("Where am I now?", "pwd && ls"),
               v1("Fix it.", "sed -i 's/a - b/a + b/' calc.py"), v1("Done.", SUBMIT)],
        "v2": [v2("Go into sub.", "cd sub && pwd && cat inner.txt"), v2("Where am I now?", "pwd && ls"),
               v2("Fix it.", "sed -i 's/a - b/a + b/' calc.py"), v2("Done.", SUBMIT)],
    },
    "textbased": {  # 2.x text mode: mini_textbased.yaml + --model-class litellm_textbased, user-role observations
        "timeout": 10, "config": "mini_textbased.yaml", "model_class": "litellm_textbased",
        "v2": [text2("Read the code.", "cat calc.py"), text2("No command this time."),
               text2("Two in one turn.", "ls", "cat notes.txt"), text2("Fix it.", "sed -i 's/a - b/a + b/' calc.py"),
               text2("Done.", SUBMIT)],
    },
    "parallel": {
        "timeout": 10,
        "v2": [v2("Read both files at once.", "cat calc.py", "cat notes.txt"),
               v2("Three checks.", "ls sub", "ls does-not-exist", "wc -c calc.py"),
               v2("Fix it.", "sed -i 's/a - b/a + b/' calc.py"), v2("Done.", SUBMIT)],
    },
}


def venv_python(version: str) -> Path:
    runtime = runtimes.find("mini-swe-agent", version)
    if runtime is None:
        sys.exit(f"mini-swe-agent {version} is not installed: forkpoint agents install mini-swe-agent@{version}")
    return runtime.entrypoint


def builtin_config(python: Path, name: str = "mini.yaml") -> dict[str, Any]:
    """The package's own config file, read by the venv's yaml (so forkpoint needs no YAML parser)."""
    code = ("import json, yaml, minisweagent.config as c; "
            f"print(json.dumps(yaml.safe_load((c.builtin_config_dir / {name!r}).read_text())))")
    done = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, check=True,
                          env={**clean_env(Path("/tmp")), "MSWEA_SILENT_STARTUP": "1"})
    config: dict[str, Any] = json.loads(done.stdout)
    return config


def clean_env(home: Path) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "TZ": "UTC",
            "MSWEA_CONFIGURED": "true", "MSWEA_SILENT_STARTUP": "1", "MSWEA_GLOBAL_CONFIG_DIR": str(home / "mswea"),
            "MSWEA_COST_TRACKING": "ignore_errors", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1", "OPENAI_API_KEY": "scripted-dummy-key"}


def seed(workspace: Path) -> None:
    if workspace.exists():
        shutil.rmtree(workspace)
    for name, content in FILES.items():
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


def record(version: str, name: str) -> None:
    major = "v1" if version.startswith("1.") else "v2"
    scenario = SCENARIOS[name]
    turns = scenario.get(major)
    if turns is None:
        return
    python = venv_python(version)
    workspace = RECORD_ROOT / version / name
    home = RECORD_ROOT / "home" / version / name
    seed(workspace)
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    traj = home / "out.traj.json"
    log = home / "requests.jsonl"
    tools_required = major == "v2" and "model_class" not in scenario
    model = ScriptedModel(turns, seed=f"mini/{version}/{name}", step_mode="counter", tools_required=tools_required,
                          model="scripted", log_path=log)
    with model.serve() as url:
        config = builtin_config(python, scenario.get("config", "mini.yaml"))
        config.setdefault("environment", {}).update(cwd=str(workspace), timeout=scenario["timeout"])
        config.setdefault("model", {}).setdefault("model_kwargs", {})["api_base"] = f"{url}/v1"
        config["agent"]["step_limit"] = 20
        (home / "config.yaml").write_text(json.dumps(config, indent=2))
        argv = [str(python), "-m", "minisweagent.run.mini", "-c", str(home / "config.yaml"), "-m", "openai/scripted",
                "-t", TASK, "-y", "--exit-immediately", "-o", str(traj)]
        if "model_class" in scenario:
            argv += ["--model-class", scenario["model_class"]]
        done = subprocess.run(argv, cwd=workspace, env=clean_env(home), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0 or not traj.is_file():
        sys.exit(f"{version}/{name}: mini exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    out = FIXTURES / version / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copy(traj, out / "trajectory.traj.json")
    script = {"seed": f"mini/{version}/{name}", "tools_required": tools_required, "turns": turns}
    (out / "script.json").write_text(json.dumps(script, indent=2) + "\n")
    with (out / "requests.jsonl").open("w") as handle:
        for entry in map(json.loads, log.read_text().splitlines()):
            if entry.get("kind") == "main":
                handle.write(json.dumps({"step": entry["step"], "messages": entry["body"]["messages"]}) + "\n")
    seed(out / "workspace-initial")
    data = json.loads(traj.read_text())
    meta = {"agent": "mini-swe-agent", "version": version, "scenario": name, "cwd": str(workspace),
            "command": ["mini", *argv[3:]],
            "environment_timeout": scenario["timeout"], "exit_code": done.returncode,
            "exit_status": data["info"].get("exit_status"), "trajectory_format": data.get("trajectory_format"),
            "recorded_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")}
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"{version}/{name}: {data['info'].get('exit_status')}, {len(data['messages'])} messages -> {out}")


DETERMINISTIC = ["THOUGHT: Read the code.\n\n```bash\ncat calc.py\n```",
                 "THOUGHT: Fix it.\n\n```bash\nsed -i 's/a - b/a + b/' calc.py && cat calc.py\n```",
                 f"THOUGHT: Done.\n\n```bash\n{SUBMIT}\n```"]


def record_deterministic(version: str = "1.17.5") -> None:
    """The real `mini` with its DeterministicModel: no model server at all."""
    python = venv_python(version)
    workspace = RECORD_ROOT / version / "deterministic"
    home = RECORD_ROOT / "home" / version / "deterministic"
    seed(workspace)
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    traj = home / "out.traj.json"
    config = builtin_config(python)
    config.setdefault("environment", {}).update(cwd=str(workspace), timeout=10)
    config["model"] = {"model_class": "deterministic", "model_name": "deterministic", "outputs": DETERMINISTIC}
    config["agent"]["step_limit"] = 20
    (home / "config.yaml").write_text(json.dumps(config, indent=2))
    argv = [str(python), "-m", "minisweagent.run.mini", "-c", str(home / "config.yaml"), "-t", TASK, "-y",
            "--exit-immediately", "-o", str(traj)]
    done = subprocess.run(argv, cwd=workspace, env=clean_env(home), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=300, check=False)
    if done.returncode != 0 or not traj.is_file():
        sys.exit(f"{version}/deterministic: mini exited {done.returncode}\n{done.stdout[-3000:]}\n"
                 f"{done.stderr[-3000:]}")
    out = FIXTURES / version / "deterministic"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copy(traj, out / "deterministic.traj.json")
    seed(out / "workspace-initial")
    data = json.loads(traj.read_text())
    meta = {"agent": "mini-swe-agent", "version": version, "scenario": "deterministic", "cwd": str(workspace),
            "command": ["mini", *argv[3:]], "model_class": "minisweagent.models.test_models.DeterministicModel",
            "environment_timeout": 10, "exit_code": done.returncode, "exit_status": data["info"].get("exit_status"),
            "trajectory_format": data.get("trajectory_format"),
            "recorded_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")}
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"{version}/deterministic: {data['info'].get('exit_status')}, {len(data['messages'])} messages -> {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="append", choices=["1.17.5", "2.4.6"])
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--deterministic", action="store_true", help="record 1.17.5/deterministic only")
    args = parser.parse_args()
    os.environ.pop("VIRTUAL_ENV", None)
    if args.deterministic:
        record_deterministic()
        return
    for version in args.version or ["1.17.5", "2.4.6"]:
        for name in args.scenario or list(SCENARIOS):
            record(version, name)


if __name__ == "__main__":
    main()
