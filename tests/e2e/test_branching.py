"""Replay once, branch K (real agents, ScriptedModel answering each branch by its prompt): the prefix's calls run
once, each branch runs its own scripted next action in its own copy of the boundary, branches.json reports the
differences; `forkpoint continue` adds branches without re-running a tool; a tampered snapshot is refused; a killed
branch is reported ambiguous while the others are kept or run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.core.results import ReplayResult
from forkpoint.run.journal import read_events
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import replay_recording, restored_workspace
from forkpoint.testing.scripted_model import text, tool_use

pytestmark = pytest.mark.e2e
FIXTURES = Path(__file__).parents[1] / "fixtures"
PROMPTS = ("Take branch ALPHA.", "Take branch BRAVO.", "Take branch CHARLIE.")


@pytest.fixture()
def keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "scripted-upstream-key")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    yield


def _need(agent: str, version: str) -> None:
    if runtimes.find(agent, version) is None:
        pytest.skip(f"{agent} {version} is not installed (forkpoint agents install {agent}@{version})")


def _keyed(base: list[Any], after: int, tool: str, arg: str, command: str) -> dict[str, Sequence[Any]]:
    """Per prompt: the recorded turns up to the boundary, then this branch's own action."""
    scripts: dict[str, Sequence[Any]] = {}
    for prompt, name in zip(PROMPTS, ("alpha", "bravo", "charlie"), strict=True):
        action = [text("nothing to do")] if name == "charlie" else [
            tool_use(tool, {arg: command.format(name=name)})]
        scripts[prompt] = [*base[:after], action, [text(f"{name} done")]]
    return scripts


def _check_branches(out: Path, state: Path, workspace_of: Any, calls: int) -> None:
    document = json.loads((out / "branches.json").read_text())
    rows = {row["branch"]: row for row in document["branches"]}
    assert sorted(rows) == [1, 2, 3] and all(row["status"] == "finished" for row in rows.values()), rows
    for index, name in ((1, "alpha"), (2, "bravo")):
        assert rows[index]["files_changed"]["added"] == ["branch.txt"], rows[index]
        assert workspace_of(index).joinpath("branch.txt").read_text().strip() == name
    assert rows[3]["files_changed"] == {"added": [], "removed": [], "modified": []}
    tools = [json.dumps(rows[i]["first_action"]["tools"]) for i in (1, 2, 3)]
    assert len(set(tools)) == 3  # three different first actions
    assert document["agreement"]["distinct_first_tool_calls"] == 3
    assert len({row["prompt_sha256"] for row in rows.values()}) == 3
    run_events = read_events(state / "journal.jsonl")
    assert sum(1 for e in run_events if e.get("event") == "tool_finished") == calls  # the prefix ran once
    for index in (1, 2, 3):
        events = read_events(state / "branches" / str(index) / "journal.jsonl")
        assert not any(e.get("event") == "tool_started" for e in events)  # no prefix call in a branch
        assert [e["event"] for e in events if e["event"].startswith(("continuation", "run_"))] == [
            "continuation_started", "run_finished"]
    text_out = (out / "branches.json").read_text() + "".join(
        p.read_text() for p in out.rglob("*.json"))
    assert not any(prompt in text_out for prompt in PROMPTS)  # prompts never stored


def test_claude_three_branches_under_bwrap(tmp_path: Path, keys: None) -> None:
    _need("claude-code", "2.1.332")
    fixture = FIXTURES / "claude_code" / "2.1.332" / "file_tools"
    base = json.loads((fixture / "script.json").read_text())["turns"]
    model = ScriptedModel(base, keyed=_keyed(base, 2, "Bash", "command", "echo {name} > branch.txt"))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    subprocess.run(["cp", "-a", f"{fixture}/workspace-initial/.", str(workspace)], check=True)
    with model.serve() as url:
        result = replay_recording(fixture, tmp_path, agent="claude-code", trajectory="session.jsonl", after=2,
                                  workspace=str(workspace), sandbox="bwrap", upstream="anthropic", upstream_url=url,
                                  branches=3, branch_prompts=list(PROMPTS), parallel=3)
    assert result.failure is None, result.failure
    assert result.phase == "continued" and result.metadata["branches"]["count"] == 3
    out, state = Path(result.output_dir or ""), Path(result.state_dir or "")
    _check_branches(out, state, lambda i: state / "branches" / str(i) / "workspace", calls=2)
    assert not (workspace / "branch.txt").exists()  # branches worked in their own copies
    from forkpoint.export import export
    from forkpoint.export.rows import ExportOptions

    export([out], "messages-jsonl", tmp_path / "rows.jsonl", ExportOptions())  # one training row per branch
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [row["branch"] for row in rows] == [1, 2, 3]
    for row in rows:
        live = [m for m in row["messages"] if m["segment"] == "live"]
        assert row["messages"][row["prefix_message_count"]]["segment"] == "boundary_prompt"
        assert live and live[0]["trainable"] and row["bridge_verdict"] == "validated"
    assert rows[0]["messages"][row["prefix_message_count"]]["content"] == PROMPTS[0]
    export([out], "atif", tmp_path / "atif", ExportOptions())
    assert sorted(p.name for p in (tmp_path / "atif").iterdir()) == [
        f"{out.name}.b1.json", f"{out.name}.b2.json", f"{out.name}.b3.json", f"{out.name}.prefix.json"]


def test_codex_three_branches_under_bwrap(tmp_path: Path, keys: None) -> None:
    _need("codex", "0.171.0")
    fixture = FIXTURES / "codex" / "0.171.0" / "exec_basic"
    base = json.loads((fixture / "script.json").read_text())["turns"]
    model = ScriptedModel(base, keyed=_keyed(base, 1, "exec_command", "cmd", "echo {name} > branch.txt"))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    subprocess.run(["cp", "-a", f"{fixture}/workspace-initial/.", str(workspace)], check=True)
    with model.serve() as url:
        result = replay_recording(fixture, tmp_path, agent="codex", trajectory="rollout.jsonl", after=1,
                                  workspace=str(workspace), sandbox="bwrap", upstream="openai-responses",
                                  upstream_url=url + "/v1", branches=3, branch_prompts=list(PROMPTS))
    assert result.failure is None, result.failure
    out, state = Path(result.output_dir or ""), Path(result.state_dir or "")
    _check_branches(out, state, lambda i: state / "branches" / str(i) / "workspace", calls=1)


def _pi_branches(tmp_path: Path, **request: Any) -> tuple[ScriptedModel, ReplayResult]:
    """Pi's single_bash recording replayed to batch 1, then branched as ``request`` says; each branch prompt of
    PROMPTS gets its own scripted action."""
    _need("pi", "0.83.0")
    fixture = FIXTURES / "pi" / "0.83.0" / "single_bash"
    base = json.loads((fixture / "script.json").read_text())["turns"]
    model = ScriptedModel(base, keyed=_keyed(base, 1, "bash", "command", "echo {name} > branch.txt"),
                          model="scripted-model")
    with model.serve() as url:
        result = replay_recording(fixture, tmp_path, agent="pi", trajectory="session.jsonl", after=1,
                                  upstream="openai-chat", upstream_url=url + "/v1", **request)
    assert result.failure is None, result.failure
    return model, result


def test_pi_branches_one_after_another_in_the_local_workspace(tmp_path: Path, keys: None) -> None:
    finals: dict[int, str] = {}
    model, result = _pi_branches(tmp_path, branches=3, branch_prompts=list(PROMPTS))
    workspace = Path(result.metadata["sandbox"]["workspace"])
    assert not (workspace / "branch.txt").exists()  # left at the boundary after the branches
    out, state = Path(result.output_dir or ""), Path(result.state_dir or "")
    rows = {r["branch"]: r for r in json.loads((out / "branches.json").read_text())["branches"]}
    for index, name in ((1, "alpha"), (2, "bravo")):
        assert rows[index]["files_changed"]["added"] == ["branch.txt"], rows[index]
        finals[index] = name
    assert rows[3]["files_changed"]["added"] == []
    # every branch and the run record the process limit its commands ran under (a pids cgroup each here)
    assert all(rows[i]["process_limit"]["max_processes"] == 512 for i in (1, 2, 3))
    assert result.metadata["process_limit"]["max_processes"] == 512
    assert result.metadata["process_limit"]["commands"] >= 4  # the replayed call and the three continuations
    assert sum(1 for e in read_events(state / "journal.jsonl") if e.get("event") == "tool_finished") == 1
    # tokens per branch in branches.json, summed in the run's model_usage: together what ScriptedModel reported
    usage = [rows[i]["model_usage"] for i in (1, 2, 3)]
    assert all(u["calls"] == rows[i]["model_bridge"]["forwarded"] >= 1 for i, u in enumerate(usage, 1))
    assert all(u["input_tokens"] == 100 * u["calls"] == 100 * u["calls_with_usage"] for u in usage)
    reported = model.reported_usage()
    assert {key: result.metadata["model_usage"][key] for key in reported} == reported
    assert {key: sum(u[key] for u in usage) for key in reported} == reported


def test_continue_adds_branches_without_rerunning_tools_and_refuses_a_tampered_snapshot(
    tmp_path: Path, keys: None
) -> None:
    _need("claude-code", "2.1.332")
    fixture = FIXTURES / "claude_code" / "2.1.332" / "file_tools"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    subprocess.run(["cp", "-a", f"{fixture}/workspace-initial/.", str(workspace)], check=True)
    replayed = replay_recording(fixture, tmp_path, agent="claude-code", trajectory="session.jsonl", after=2,
                                workspace=str(workspace), sandbox="bwrap", replay_only=True)
    assert replayed.failure is None and replayed.metadata["boundary_snapshot"]["files"] >= 1
    out, state = Path(replayed.output_dir or ""), Path(replayed.state_dir or "")
    command = [sys.executable, "-m", "forkpoint.cli", "continue", str(out), "--branches", "2", "--upstream", "stub",
               "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert [row["branch"] for row in document["branches"]] == [1, 2]
    assert all(row["status"] == "finished" and row["model_bridge"]["validated"] == 1 for row in document["branches"])
    assert sum(1 for e in read_events(state / "journal.jsonl") if e.get("event") == "tool_started") == 2
    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and [r["branch"] for r in json.loads(again.stdout)["branches"]] == [1, 2, 3, 4]
    (state / "snapshot" / "workspace" / "planted.txt").write_text("not the boundary")
    tampered = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert tampered.returncode == 20 and "changed since the replay" in tampered.stdout


def _main_bodies(model: ScriptedModel, key: str) -> list[dict[str, Any]]:
    """The bodies of the main requests that carry ``key`` (a branch's prompt), as the upstream received them."""
    return [r["body"] for r in model.requests if r.get("kind") == "main" and key in json.dumps(r.get("body"))]


def _slow_command() -> tuple[str, str]:
    """A command that runs for two minutes (Claude Code refuses a bare `sleep N`, so it is of another kind), and the
    token on its command line that tells this test's process from any other's."""
    token = f"slow-{uuid.uuid4().hex}"
    return f"python3 -c 'import time; time.sleep(120)' {token}", token


def _running(token: str) -> bool:
    """Whether a live process has ``token`` on its command line."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                    return True
            except OSError:
                continue
    return False


def _kill_once_branch_2_runs(command: list[str], env: dict[str, str], token: str) -> None:
    """Start the branched replay ``command`` and kill -9 it once branch 2's agent runs its slow command (``token``
    on its command line)."""
    driver = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not _running(token):
        assert driver.poll() is None, "the replay ended before branch 2 ran its slow command"
        assert time.monotonic() < deadline, "branch 2 never ran its slow command"
        time.sleep(0.1)
    driver.send_signal(signal.SIGKILL)
    driver.wait()


def _killed_branch_2_kept_apart(done: subprocess.CompletedProcess[str]) -> dict[int, dict[str, Any]]:
    """The rows of `continue --json` after branch 2 of 3 was killed: 1 and 3 finished, 2 ambiguous, exit 1."""
    document = json.loads(done.stdout)
    assert "branches" in document, (done.stdout, done.stderr)
    rows = {row["branch"]: row for row in document["branches"]}
    assert rows[1]["status"] == "finished" and rows[3]["status"] == "finished", rows
    assert rows[2]["status"] == "ambiguous" and "not run again" in rows[2]["failure"]["message"]
    assert done.returncode == 1
    return rows


def test_kill_9_during_branch_2_then_continue(tmp_path: Path, keys: None) -> None:
    _need("claude-code", "2.1.332")
    fixture = FIXTURES / "claude_code" / "2.1.332" / "single_bash"
    base = json.loads((fixture / "script.json").read_text())["turns"]
    slow, token = _slow_command()
    keyed: dict[str, Sequence[Any]] = {
        "BRANCH-KEY-ONE": [*base[:1], [tool_use("Bash", {"command": "echo one > one.txt"})], [text("ok")]],
        "BRANCH-KEY-TWO": [*base[:1], [tool_use("Bash", {"command": slow})], [text("ok")]],
        "BRANCH-KEY-THREE": [*base[:1], [tool_use("Bash", {"command": "echo three > three.txt"})], [text("ok")]]}
    model = ScriptedModel(base, keyed=keyed)
    with model.serve() as url, restored_workspace(fixture) as workspace:
        env = {**os.environ, "ANTHROPIC_API_KEY": "k"}
        command = [sys.executable, "-m", "forkpoint.cli", "replay", "--agent", "claude-code", "--trajectory",
                   str(fixture / "session.jsonl"), "--after-step", "1", "--workspace", str(workspace),
                   "--upstream", "anthropic", "--upstream-url", url, "--branches", "3",
                   "--branch-prompt", "BRANCH-KEY-ONE", "--branch-prompt", "BRANCH-KEY-TWO",
                   "--branch-prompt", "BRANCH-KEY-THREE", "--output-dir", str(tmp_path / "out"),
                   "--state-dir", str(tmp_path / "state"), "--run-id", "k"]
        _kill_once_branch_2_runs(command, env, token)
        done = subprocess.run([sys.executable, "-m", "forkpoint.cli", "continue", str(tmp_path / "out" / "k"),
                               "--upstream", "anthropic", "--upstream-url", url, "--json",
                               "--branch-prompt", "BRANCH-KEY-THREE"],  # branch 3's prompt, given again
                              env=env, capture_output=True, text=True, timeout=600)
    rows = _killed_branch_2_kept_apart(done)
    second = [r for r in model.requests if r.get("kind") == "main" and "BRANCH-KEY-TWO" in json.dumps(r.get("body"))]
    assert len({r["step"] for r in second}) == 1  # branch 2 was never started again
    assert rows[3]["files_changed"]["added"] == ["three.txt"]  # branch 3 ran with its own prompt


def test_pi_branch_seeds_and_models_reach_the_model_and_are_recorded(tmp_path: Path, keys: None) -> None:
    variants = {1: ("scripted-model", 11), 2: ("branch-two-model", 22)}
    model, result = _pi_branches(tmp_path, branches=2, branch_prompts=list(PROMPTS[:2]), branch_seeds=[11, 22],
                                 branch_models=["scripted-model", "branch-two-model"])
    out = Path(result.output_dir or "")
    rows = {r["branch"]: r for r in json.loads((out / "branches.json").read_text())["branches"]}
    for index, (name, seed) in variants.items():
        bodies = _main_bodies(model, PROMPTS[index - 1])
        assert bodies and {(b["model"], b["seed"]) for b in bodies} == {(name, seed)}, (index, bodies)
        assert rows[index]["status"] == "finished" and rows[index]["files_changed"]["added"] == ["branch.txt"]
        assert (rows[index]["model"], rows[index]["seed"], rows[index]["temperature"]) == (name, seed, None)
        recorded = json.loads((out / "branches" / str(index) / "result.json").read_text())
        assert (recorded["model"], recorded["seed"]) == (name, seed)
    assert sum(len(_main_bodies(model, p)) for p in PROMPTS[:2]) == len(
        [r for r in model.requests if r.get("kind") == "main"])  # every request belonged to one branch


def test_pi_kill_9_during_branch_2_then_continue_reruns_branch_3_with_its_recorded_seed(
    tmp_path: Path, keys: None
) -> None:
    """Branch 2 is killed while its agent runs a slow command: `continue` reports it ambiguous (never re-run) and
    runs branch 3, which never started, with the seed, prompt and run-level temperature it was planned with (the
    temperature not given again); flags that would change it are refused before anything runs."""
    _need("pi", "0.83.0")
    fixture = FIXTURES / "pi" / "0.83.0" / "single_bash"
    base = json.loads((fixture / "script.json").read_text())["turns"]
    prompts = ("BRANCH-KEY-ONE", "BRANCH-KEY-TWO", "BRANCH-KEY-THREE")
    slow, token = _slow_command()
    commands = ("echo one > one.txt", slow, "echo three > three.txt")
    keyed: dict[str, Sequence[Any]] = {key: [*base[:1], [tool_use("bash", {"command": command})], [text("ok")]]
                                       for key, command in zip(prompts, commands, strict=True)}
    model = ScriptedModel(base, keyed=keyed, model="scripted-model")
    run_dir = tmp_path / "out" / "k"
    with model.serve() as url, restored_workspace(fixture) as workspace:
        env = {**os.environ, "OPENAI_API_KEY": "k"}
        upstream = ["--upstream", "openai-chat", "--upstream-url", url + "/v1"]
        command = [sys.executable, "-m", "forkpoint.cli", "replay", "--agent", "pi", "--trajectory",
                   str(fixture / "session.jsonl"), "--after-step", "1", "--workspace", str(workspace), *upstream,
                   "--branches", "3", *[a for p in prompts for a in ("--branch-prompt", p)],
                   *[a for s in ("11", "22", "33") for a in ("--branch-seed", s)], "--temperature", "0.5",
                   "--output-dir", str(tmp_path / "out"), "--state-dir", str(tmp_path / "state"), "--run-id", "k"]
        _kill_once_branch_2_runs(command, env, token)

        def resume(*extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "forkpoint.cli", "continue", str(run_dir), *upstream,
                                   "--json", *extra], env=env, capture_output=True, text=True, timeout=600)

        missing = resume()
        changed = resume("--branch-prompt", prompts[2], "--branch-seed", "5")
        warmer = resume("--branch-prompt", prompts[2], "--temperature", "0.9")
        assert not _main_bodies(model, prompts[2])  # no refusal ran anything
        done = resume("--branch-prompt", prompts[2])
    assert missing.returncode == 2 and "branch 3 was planned with a --branch-prompt of 16 characters" in (
        missing.stdout), missing.stdout
    assert changed.returncode == 2 and "branch 3 was planned with seed 33" in changed.stdout, changed.stdout
    assert warmer.returncode == 2 and "branch 3 was planned with --temperature 0.5" in warmer.stdout, warmer.stdout
    rows = _killed_branch_2_kept_apart(done)
    assert [rows[i]["seed"] for i in (1, 2, 3)] == [11, 22, 33]
    third = _main_bodies(model, prompts[2])
    assert third and {b["seed"] for b in third} == {33}, third  # branch 3 ran with its recorded seed
    assert {b["temperature"] for b in third} == {0.5}  # and the run-level temperature it was planned under
    planned = json.loads((run_dir / "branches.json").read_text())["branches"]
    assert [row["run_pins"] for row in planned] == [{"temperature": 0.5}] * 3
    assert {b["seed"] for b in _main_bodies(model, prompts[0])} == {11}
    assert len({len(b["messages"]) for b in _main_bodies(model, prompts[1])}) == 1  # branch 2 never started again
    assert json.loads((run_dir / "branches" / "3" / "result.json").read_text())["seed"] == 33
