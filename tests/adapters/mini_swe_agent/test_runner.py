"""The companion protocol against the REAL venvs: native formatting, refusals, and cleanup of a stuck companion."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.adapters.mini_swe_agent import tools
from forkpoint.adapters.mini_swe_agent.parse import parse_trajectory
from forkpoint.adapters.mini_swe_agent.runner import SOCKET_PATH_MAX, RunnerSession, companion_env, socket_dir
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import Mode, Plan, RunContext

FIXTURES = Path(__file__).parents[2] / "fixtures" / "mini_swe_agent"


def _python(version: str) -> Path:
    runtime = runtimes.find("mini-swe-agent", version)
    if runtime is None:
        pytest.skip(f"mini-swe-agent {version} is not installed")
    return runtime.entrypoint


def _context(tmp_path: Path, version: str) -> tuple[Plan, RunContext]:
    fixture = FIXTURES / version / "failing"
    workspace = tmp_path / "ws"
    shutil.copytree(fixture / "workspace-initial", workspace)
    plan = Plan(parse_trajectory(fixture / "trajectory.traj.json"), 4, Mode.REPLAY_ONLY, "p")
    return plan, RunContext(workspace, tmp_path / "state", tmp_path / "out")


@pytest.mark.e2e
@pytest.mark.parametrize("version", ["1.17.5", "2.4.6"])
def test_execute_formats_natively_including_timeouts(version: str, tmp_path: Path) -> None:
    plan, context = _context(tmp_path, version)
    executor = tools.MiniToolExecutor(plan, context, _python(version))
    try:
        fresh = [executor.run(call) for call in plan.calls]
    finally:
        executor.close()
    for call, observation in zip(plan.calls, fresh, strict=True):
        assert call.historical is not None
        assert (observation.content, observation.is_error) == (call.historical.content, call.historical.is_error)
    timeout = fresh[2]
    if version.startswith("1."):  # the timeout template holds the partial output after the command
        output = str(timeout.content).split("</command>", 1)[1]
    else:  # mini.yaml's JSON observation, with the exception text
        parsed = json.loads(str(timeout.content))
        output = parsed["output"]
        assert parsed["returncode"] == -1 and "timed out" in parsed["exception_info"]
    assert timeout.is_error and "started" in output and "never" not in output  # killed after "started"
    assert fresh[0].return_code == 2 and fresh[3].return_code == 0
    assert "return a + b" in (context.workspace / "calc.py").read_text()


@pytest.mark.e2e
def test_protocol_refusals(tmp_path: Path) -> None:
    python = _python("2.4.6")
    home = tmp_path / "home"
    with RunnerSession(python, tmp_path, companion_env(os.environ, home), tmp_path / "companion.log") as runner:
        unknown = runner.request({"op": "teleport"}, timeout_s=30)
        assert unknown == {"ok": False, "error": "ValueError: unknown op 'teleport'"}
        wrong = runner.request({"op": "open", "source": str(FIXTURES / "2.4.6" / "basic" / "trajectory.traj.json"),
                                "workspace": str(tmp_path), "version": "1.17.5"}, timeout_s=60)
        assert not wrong["ok"] and "has mini-swe-agent 2.4.6, expected 1.17.5" in wrong["error"]
        data = json.loads((FIXTURES / "2.4.6" / "basic" / "trajectory.traj.json").read_text())
        data["info"]["config"]["environment_type"] = "minisweagent.environments.docker.DockerEnvironment"
        docker = tmp_path / "docker.traj.json"
        docker.write_text(json.dumps(data))
        opened = runner.request({"op": "open", "source": str(docker), "workspace": str(tmp_path),
                                 "version": "2.4.6"}, timeout_s=60)
        assert opened["ok"] and opened["degradations"] == [
            f"environment: DockerEnvironment recorded, replayed locally (LocalEnvironment at {tmp_path})"]
        data["info"]["config"]["environment_type"] = "somewhere.else.CloudEnvironment"
        docker.write_text(json.dumps(data))
        refused = runner.request({"op": "open", "source": str(docker), "workspace": str(tmp_path),
                                  "version": "2.4.6"}, timeout_s=60)
        assert not refused["ok"] and refused["refusal"] == "unsupported"
        assert "'somewhere.else.CloudEnvironment' is not supported" in refused["error"]


@pytest.mark.e2e
def test_a_stuck_companion_is_killed_with_everything_it_started(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    plan, context = _context(tmp_path, "2.4.6")
    monkeypatch.setattr(tools, "REPLY_MARGIN_S", 1.0 - tools.environment_timeout(plan.trajectory.native))
    marker = f"forkpoint-stuck-{os.getpid()}"
    call = plan.calls[0]
    stuck = type(call)(call.call_id, call.name, {"command": "x"}, call.historical,
                       native={"action": {"command": f"sh -c 'sleep 30; echo {marker}' & sleep 30"}})
    executor = tools.MiniToolExecutor(plan, context, _python("2.4.6"))
    with pytest.raises(ReplayError) as caught:
        executor.run(stuck)
    executor.close()
    assert caught.value.kind is ErrorKind.EXECUTOR and "did not answer" in caught.value.message
    leftovers = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).find(marker) >= 0]
    assert leftovers == []


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace")
    except OSError:
        return ""


#: a companion speaking the transport (hello with its pid, one reply per JSON line) without mini-swe-agent
_ECHO_COMPANION = """
import json, os, socket, sys
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect(sys.argv[1])
stream = conn.makefile("rw", encoding="utf-8")
stream.write(json.dumps({"pid": os.getpid(), "socket": sys.argv[1]}) + "\\n")
stream.flush()
for line in stream:
    stream.write(json.dumps({"ok": True}) + "\\n")
    stream.flush()
    if json.loads(line)["op"] == "close":
        break
"""


def test_the_socket_lives_in_the_state_dir_and_goes_with_the_session(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing in the system temp dir, not even while the companion runs (a killed forkpoint leaves nothing there)."""
    host_tmp = tmp_path / "host-tmp"
    host_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(host_tmp))
    script = tmp_path / "echo_companion.py"
    script.write_text(_ECHO_COMPANION)
    state = tmp_path / "state"
    with RunnerSession(Path(sys.executable), tmp_path, companion_env(os.environ, tmp_path / "home"),
                       tmp_path / "companion.log", script=script, socket_parent=state) as runner:
        assert runner.request({"op": "ping"}, timeout_s=30) == {"ok": True}
        folders = list(state.iterdir())
        assert len(folders) == 1 and folders[0].name.startswith("fp-mini-") and (folders[0] / "s").is_socket()
        assert list(host_tmp.iterdir()) == []
    assert list(state.iterdir()) == []


def test_socket_dir_falls_back_to_a_short_temp_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host_tmp = tmp_path / "t"
    host_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(host_tmp))
    deep = tmp_path / ("d" * max(1, SOCKET_PATH_MAX - len(str(tmp_path))))
    short = socket_dir(tmp_path / "state")
    fallback = socket_dir(deep)
    assert short.parent == tmp_path / "state" and len(str(short / "s")) <= SOCKET_PATH_MAX
    assert fallback.parent == host_tmp and not deep.exists()
    shutil.rmtree(fallback)
    shutil.rmtree(short)
