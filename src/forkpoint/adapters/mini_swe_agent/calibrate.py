"""mini-swe-agent's calibration probe (forkpoint.adapters.calibrate): one recorded ``mini`` run and one resume.

The run is the re-record script's (scripts/record_mini_swe_agent_fixtures.py): the package's own ``mini.yaml``
with the model pointed at ScriptedModel, ``python -m minisweagent.run.mini ... -y --exit-immediately -o``. Its
turns cover mini's one tool (bash): parallel calls (2.x), a long output, a missing file, a non-zero exit, a
timeout, then the submit. mini has no resume flag: the resume is a forkpoint continuation
(kit.calibration.resume_check), the companion in the RELEASE's venv seeding the agent with the prefix rebuilt
with the candidate's profile; the candidate's gate judges litellm's first request.
"""

from __future__ import annotations

import json
import subprocess
from functools import partial
from pathlib import Path
from typing import Any

from forkpoint.adapters.calibration import Check, Outcome, compact_requests
from forkpoint.adapters.kit.calibration import match_candidates, parse_check, ran_ok, restore_files, run_release
from forkpoint.adapters.spec import AgentSpec
from forkpoint.core.errors import trajectory as trajectory_error

TASK = "Fix the add() bug in calc.py."
FILES = {"calc.py": "def add(a, b):\n    return a - b\n", "notes.txt": "alpha\nbeta\ngamma\n"}
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat calc.py"
SEED = "mini-swe-agent/calibrate"
MAX_TRAJECTORY_BYTES = 64 * 1024 * 1024
#: the commands, one model turn each; a tuple is one 2.x turn of parallel calls (1.x: one turn per command)
COMMANDS: list[tuple[str, ...]] = [("cat calc.py", "cat notes.txt"), ("seq 1 3000",), ("ls does-not-exist",),
                                   ("echo out; echo err >&2; exit 3",), ("echo started; sleep 5; echo never",),
                                   ("sed -i 's/a - b/a + b/' calc.py",), (SUBMIT,)]


def _turns(major: int) -> list[dict[str, Any]]:
    from forkpoint.testing.scripted_model import text, tool_use

    if major < 2:
        return [{"content": [text(f"THOUGHT: step.\n\n```bash\n{command}\n```")]} for turn in COMMANDS
                for command in turn]
    return [{"content": [text("Next step."), *(tool_use("bash", {"command": c}) for c in turn)]} for turn in COMMANDS]


def _env(home: Path) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "TZ": "UTC",
            "TMPDIR": str(home), "MSWEA_CONFIGURED": "true", "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_GLOBAL_CONFIG_DIR": str(home / "mswea"), "MSWEA_COST_TRACKING": "ignore_errors",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True", "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1",
            "OPENAI_API_KEY": "scripted-calibration-key"}


def _builtin_config(python: Path, home: Path) -> dict[str, Any]:
    """The package's own ``mini.yaml``, read by the venv's yaml (forkpoint needs no YAML parser)."""
    code = ("import json, yaml, minisweagent.config as c; "
            "print(json.dumps(yaml.safe_load((c.builtin_config_dir / 'mini.yaml').read_text())))")
    done = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, check=False,
                          env=_env(home), timeout=120)
    if done.returncode != 0:
        raise trajectory_error(f"the release's mini.yaml could not be read: {done.stderr[-300:]}")
    config: dict[str, Any] = json.loads(done.stdout)
    return config


def probe(spec: AgentSpec, entrypoint: Path, version: str, candidates: list[str], scratch: Path,
          outcome: Outcome) -> str | None:
    from forkpoint.core.fs import read_regular_file
    from forkpoint.core.releases import number
    from forkpoint.testing.scripted_model import ScriptedModel

    major = (number(version) or (0, 0, 0))[0]
    cwd, home = scratch / "workspace", scratch / "home"
    restore = partial(restore_files, cwd, FILES)
    restore()
    home.mkdir(parents=True)
    turns = _turns(major)
    calls = sum(len(turn) for turn in COMMANDS)
    model = ScriptedModel(turns, seed=SEED, step_mode="counter", tools_required=major >= 2, model="scripted")
    config = _builtin_config(entrypoint, home)
    traj = home / "probe.traj.json"
    with model.serve() as url:
        config.setdefault("environment", {}).update(cwd=str(cwd), timeout=2)
        config.setdefault("model", {}).setdefault("model_kwargs", {})["api_base"] = f"{url}/v1"
        config["agent"]["step_limit"] = 20
        (home / "config.yaml").write_text(json.dumps(config, indent=2), "utf-8")
        command = [str(entrypoint), "-m", "minisweagent.run.mini", "-c", str(home / "config.yaml"), "-m",
                   "openai/scripted", "-t", TASK, "-y", "--exit-immediately", "-o", str(traj)]
        code, stderr = run_release(command, _env(home), cwd, "probe session")
    if not ran_ok(outcome, code, stderr):
        return None
    read = read_regular_file(home, traj.name, max_bytes=MAX_TRAJECTORY_BYTES)
    if read.truncated:
        raise trajectory_error("the release wrote a trajectory larger than 64 MiB")
    data = read.data
    outcome.evidence.update({"trajectory.traj.json": data, "requests.jsonl": compact_requests(model.requests)})
    document = json.loads(data)
    status = document.get("info", {}).get("exit_status")
    ok = status == "Submitted"
    outcome.checks.append(Check("record", ok, f"exit 0, exit_status {status}, {len(document.get('messages') or [])} "
                                f"messages, {calls} scripted commands"))
    if not ok:
        outcome.reason = "the probe session did not complete as scripted"
        return None
    # the submit ends the run: its command gets no observation, so the parser counts it as no call
    if not parse_check(spec, traj, version, calls - 1, outcome):
        return None
    batches = len(turns) if major < 2 else len(COMMANDS)

    def as_candidate(candidate: str) -> bytes:
        rewritten = json.loads(data)
        rewritten.setdefault("info", {})["mini_version"] = candidate
        return (json.dumps(rewritten, indent=2) + "\n").encode("utf-8")

    return match_candidates(spec.name, candidates, as_candidate, batches - 1, restore, entrypoint,
                            version, scratch, outcome, name="probe.traj.json")
