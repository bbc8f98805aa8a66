"""The continuation shell's triage, end to end: a real bridge (stub upstream), a real child process as the agent.

The "agent" is ``python3 -c`` posting Chat Completions requests to the bridge URL it is given; the hooks are the
smallest real implementation of ``AgentHooks``. Only the model is a stand-in (the bridge's own stub upstream).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.kit.continuation import (
    AgentHooks,
    Collected,
    GateSpec,
    Job,
    LaunchSpec,
    Outcome,
    Pinning,
    Ran,
    continue_with,
    make_upstream,
    rebuild_home,
)
from forkpoint.bridge.gate import Gate, Verdict
from forkpoint.bridge.server import BridgeSummary
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import (
    Continuation,
    ContinueSettings,
    LaunchTarget,
    Mode,
    NativePrefix,
    Plan,
    RunContext,
    Trajectory,
)

PREFIX = [{"role": "user", "content": "fix the bug"}]

#: argv: bridge URL, requests to send, message of the first one, seconds to sleep, exit code, text to print
AGENT = r"""
import json, sys, time, urllib.error, urllib.request
url, count, first, sleep_s, code, said = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), \
    int(sys.argv[5]), sys.argv[6]
statuses = []
for index in range(count):
    content = first if index == 0 else "later"
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": content}]}).encode()
    request = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            statuses.append(response.status)
    except urllib.error.HTTPError as error:
        statuses.append(error.code)
print(json.dumps({"statuses": statuses, "said": said}), flush=True)
time.sleep(sleep_s)
sys.exit(code)
"""


class ExactPrefixGate(Gate):
    """Accepts a first request whose messages are exactly the prefix; later requests pass."""

    name = "test-chat"
    model_routes = frozenset({"/v1/chat/completions"})

    def first(self, body: Any) -> Verdict:
        if body.get("messages") != PREFIX:
            return Verdict(False, None, "the first request differs from the rebuilt prefix")
        return Verdict(True, body, None)

    def later(self, body: Any) -> Verdict:
        return Verdict(True, body, None)


class ScriptHooks(AgentHooks[None]):
    protocol = "openai-chat"
    label = "the test agent"
    native_cli = "python3 -c"

    def __init__(self, first: str = "fix the bug", count: int = 1, sleep_s: float = 0.0, code: int = 0,
                 said: str = "done") -> None:
        self.args = [first, str(count), str(sleep_s), str(code), said]

    def install(self, job: Job) -> None:
        return None

    def gate(self, job: Job, state: None) -> GateSpec:
        return GateSpec(ExactPrefixGate(), {"messages": len(PREFIX)})

    def launch(self, job: Job, state: None, bridge_url: str) -> LaunchSpec:
        first, count, sleep_s, code, said = self.args
        return LaunchSpec([sys.executable, "-c", AGENT, bridge_url, count, first, sleep_s, code, said], {},
                          str(job.context.workspace), job.context.logs / "agent.log")

    def outcome(self, job: Job, state: None, ran: Ran, summary: BridgeSummary) -> Outcome:
        assert ran.process is not None
        lines = ran.process.stdout.splitlines()
        reply = json.loads(lines[-1]) if lines else {}
        return Outcome("completed", metadata={"statuses": reply.get("statuses")})

    def collect(self, job: Job, state: None, ran: Ran, outcome: Outcome, summary: BridgeSummary) -> Collected:
        path = job.continued_dir / "session.json"
        path.write_text(json.dumps(outcome.metadata))
        return Collected(path, summary.validated, None)


def _continue(tmp_path: Path, hooks: ScriptHooks, *, remaining: int | None = None,
              timeout_s: float = 60.0) -> Continuation:
    workspace = tmp_path / "ws"
    workspace.mkdir(parents=True, exist_ok=True)
    prefix_path = tmp_path / "prefix.json"
    prefix_path.write_text(json.dumps(PREFIX))
    trajectory = Trajectory("test", "1", frozenset({"1"}), None, None, prefix_path, "0", (), (None,), native=None)
    plan = Plan(trajectory, 0, Mode.REPLAY_AND_CONTINUE, "test/1")
    settings = ContinueSettings(LaunchTarget(Path(sys.executable), "1"), "stub", None, remaining_steps=remaining,
                                timeout_s=timeout_s)
    context = RunContext(workspace, tmp_path / "state", tmp_path / "out")
    return continue_with(hooks, plan, NativePrefix(prefix_path, "test", None, "0"), context, settings)


def test_a_validated_request_and_a_clean_exit_complete(tmp_path: Path) -> None:
    result = _continue(tmp_path, ScriptHooks(count=2))
    assert result.agent_status == "completed" and result.continued_steps == 2
    assert result.metadata["statuses"] == [200, 200] and result.metadata["agent_exit_code"] == 0
    assert result.metadata["model_bridge"]["validated"] == 2 and result.metadata["native_cli"] == "python3 -c"
    assert json.loads((tmp_path / "state" / "expected-prefix.json").read_text()) == {"messages": 1}
    assert result.continued_path == tmp_path / "out" / "native" / "continued" / "session.json"


def test_a_refused_first_request_fails_the_run_before_the_exit_code(tmp_path: Path) -> None:
    with pytest.raises(ReplayError) as caught:
        _continue(tmp_path, ScriptHooks(first="something else", code=3))
    assert caught.value.kind is ErrorKind.CONTINUATION
    assert "refused" in caught.value.message and "differs from the rebuilt prefix" in caught.value.message
    assert not (tmp_path / "out" / "native" / "continued" / "session.json").exists()


def test_no_model_request_says_what_the_agent_printed(tmp_path: Path) -> None:
    with pytest.raises(ReplayError) as caught:
        _continue(tmp_path, ScriptHooks(count=0, code=2))
    assert "made no model request" in caught.value.message and "exited with 2" in caught.value.message
    assert "agent.log" in caught.value.message


def test_the_deadline_is_a_continuation_error(tmp_path: Path) -> None:
    with pytest.raises(ReplayError) as caught:
        _continue(tmp_path, ScriptHooks(sleep_s=30.0), timeout_s=2.0)
    assert caught.value.kind is ErrorKind.CONTINUATION
    assert "the test agent did not finish within 2 s" in caught.value.message


def test_a_nonzero_exit_is_classified_from_the_output(tmp_path: Path) -> None:
    with pytest.raises(ReplayError) as caught:
        _continue(tmp_path, ScriptHooks(code=1, said="upstream said: rate limit exceeded"))
    assert caught.value.kind is ErrorKind.MODEL_RATE_LIMIT
    assert "the test agent exited with 1" in caught.value.message

    with pytest.raises(ReplayError) as plain:
        _continue(tmp_path / "again", ScriptHooks(code=1, said="crash"))
    assert plain.value.kind is ErrorKind.CONTINUATION


def test_the_step_budget_at_the_bridge_is_max_steps_not_a_failure(tmp_path: Path) -> None:
    """The second request is past a budget of one: answered with an error, the agent exits 1, the run is fine."""
    result = _continue(tmp_path, ScriptHooks(count=2, code=1), remaining=1)
    assert result.agent_status == "max_steps" and result.continued_steps == 1
    assert result.metadata["statuses"] == [200, 400]
    assert result.metadata["model_bridge"]["over_budget"] == 1


def test_make_upstream_picks_by_protocol_and_refuses_what_it_cannot_translate() -> None:
    target = LaunchTarget(Path(sys.executable), "1")
    assert make_upstream("openai-chat", ContinueSettings(target, "stub", None)).name == "stub"
    real = make_upstream("anthropic-messages", ContinueSettings(target, "anthropic", None, upstream_key="k"))
    assert real.name == "anthropic"
    with pytest.raises(ReplayError) as missing:
        make_upstream("openai-responses", ContinueSettings(target, "openai-responses", None))
    assert missing.value.kind is ErrorKind.CONFIGURATION and "OPENAI_API_KEY" in missing.value.message
    with pytest.raises(ReplayError) as other:
        make_upstream("openai-chat", ContinueSettings(target, "anthropic", None, upstream_key="k"))
    assert other.value.kind is ErrorKind.CONFIGURATION
    translated = make_upstream("anthropic-messages", ContinueSettings(target, "openai-chat", None, upstream_key="k"))
    assert translated.name == "openai-chat"


@pytest.mark.parametrize(("protocol", "upstream"), [("anthropic-messages", "anthropic"),
                                                    ("openai-responses", "openai-responses"),
                                                    ("openai-chat", "openai-chat"),
                                                    ("anthropic-messages", "openai-chat"),
                                                    ("openai-responses", "openai-chat")])
def test_make_upstream_gives_every_real_upstream_the_runs_retry_policy(protocol: str, upstream: str) -> None:
    from forkpoint.bridge.translate.retry import RetryPolicy
    from forkpoint.bridge.upstream import HttpUpstream

    target = LaunchTarget(Path(sys.executable), "1")
    built = make_upstream(protocol, ContinueSettings(target, upstream, None, upstream_key="k", upstream_retries=5))
    assert isinstance(built, HttpUpstream) and built.retry == RetryPolicy(retries=5)


# -- model choice and sampling pins (issue 17) ------------------------------------------------------------------------


def test_pinning_sets_the_model_and_pins_after_validation_and_records_the_changes() -> None:
    from forkpoint.bridge.translate.sampling import SamplingPins

    settings = ContinueSettings(LaunchTarget(Path(sys.executable), "1"), "stub", None, model="other-model",
                                sampling=SamplingPins(temperature=0.0, seed=7))
    pinning = Pinning.of("openai-chat", settings)
    body = {"model": "recorded", "messages": PREFIX, "temperature": 1.0}
    facts: dict[str, Any] = {}
    sent = pinning(body, facts)
    assert body["model"] == "recorded"  # the validated body itself is not changed (the gate's copy)
    assert (sent["model"], sent["temperature"], sent["seed"], sent["messages"]) == ("other-model", 0.0, 7, PREFIX)
    assert facts["pins"] == [{"field": "model", "before": "recorded", "after": "other-model"},
                             {"field": "temperature", "before": 1.0, "after": 0.0},
                             {"field": "seed", "before": "<absent>", "after": 7}]
    pinning({"model": "recorded", "messages": []}, {})
    metadata = pinning.metadata()
    assert metadata == {"requested_model": "other-model", "upstream_model": "other-model", "upstream_retries": 3,
                        "sampling": {"pins": {"model": "other-model", "temperature": 0.0, "seed": 7},
                                     "changes": facts["pins"]}}


def test_without_a_model_choice_the_body_is_sent_as_validated() -> None:
    pinning = Pinning.of("anthropic-messages", ContinueSettings(LaunchTarget(Path(sys.executable), "1"), "stub",
                                                                None, upstream_retries=0))
    body = {"model": "claude-recorded", "messages": []}
    facts: dict[str, Any] = {}
    assert pinning(body, facts) is body and facts == {}
    assert pinning.metadata() == {"requested_model": None, "upstream_model": "claude-recorded", "sampling": None,
                                  "upstream_retries": 0}


def test_the_pins_reach_the_bridge_log_and_the_result_through_the_shell(tmp_path: Path) -> None:
    from forkpoint.bridge.translate.sampling import SamplingPins

    workspace = tmp_path / "ws"
    workspace.mkdir()
    prefix_path = tmp_path / "prefix.json"
    prefix_path.write_text(json.dumps(PREFIX))
    trajectory = Trajectory("test", "1", frozenset({"1"}), None, None, prefix_path, "0", (), (None,), native=None)
    plan = Plan(trajectory, 0, Mode.REPLAY_AND_CONTINUE, "test/1")
    settings = ContinueSettings(LaunchTarget(Path(sys.executable), "1"), "stub", None, model="other-model",
                                sampling=SamplingPins(seed=7))
    context = RunContext(workspace, tmp_path / "state", tmp_path / "out")
    done = continue_with(ScriptHooks(count=2), plan, NativePrefix(prefix_path, "test", None, "0"), context, settings)
    assert done.metadata["statuses"] == [200, 200]  # the gate still proved the first request (model "m")
    assert done.metadata["requested_model"] == done.metadata["upstream_model"] == "other-model"
    assert done.metadata["sampling"]["changes"][0] == {"field": "model", "before": "m", "after": "other-model"}
    records = [json.loads(line) for line in (tmp_path / "state" / "bridge-log.jsonl").read_text().splitlines()]
    pinned = [record["facts"]["pins"] for record in records if record.get("verdict") == "ok"]
    assert len(pinned) == 2 and all({"field": "seed", "before": "<absent>", "after": 7} in pins for pins in pinned)


# -- the continued agent's home (issue 27, item 3) ------------------------------------------------------------------

RESULTS = Path(".claude/projects/-w/s1/tool-results")


def test_rebuild_home_keeps_only_forkpoints_carried_files(tmp_path: Path) -> None:
    """Whatever a replayed command (or an earlier continuation) left in the agent's home goes; the regular files
    forkpoint saved in a carried folder stay; a link, FIFO or sub-folder planted in that folder is left behind."""
    home, outside = tmp_path / "state" / "agent-home", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host\n")
    (home / RESULTS / "sub").mkdir(parents=True)
    (home / RESULTS / "b12345678.txt").write_text("1\n2\n3\n")
    (home / RESULTS / "sub" / "x.txt").write_text("x")
    (home / RESULTS / "link.txt").symlink_to(outside / "secret.txt")
    os.mkfifo(home / RESULTS / "fifo.txt")
    (home / ".claude" / "settings.json").write_text('{"hooks": {}}')
    (home / ".codex").symlink_to(outside)
    rebuild_home(home, [RESULTS])
    kept = sorted(str(path.relative_to(home)) for path in home.rglob("*"))
    assert kept == [".claude", ".claude/projects", ".claude/projects/-w", ".claude/projects/-w/s1",
                    str(RESULTS), str(RESULTS / "b12345678.txt")]
    assert (home / RESULTS / "b12345678.txt").read_text() == "1\n2\n3\n"
    assert home.stat().st_mode & 0o777 == 0o700
    assert sorted(path.name for path in home.parent.iterdir()) == ["agent-home"]  # the old one is gone
    assert sorted(path.name for path in outside.iterdir()) == ["secret.txt"]


def test_rebuild_home_moves_a_link_in_the_homes_place_without_following_it(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    (tmp_path / "state").mkdir()
    home = tmp_path / "state" / "agent-home"
    home.symlink_to(outside)
    rebuild_home(home, [RESULTS])
    assert home.is_dir() and not home.is_symlink() and list(home.iterdir()) == []
    assert (outside / "keep.txt").read_text() == "mine"


def test_rebuild_home_refuses_a_link_on_the_way_to_a_carried_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside" / "tool-results"
    outside.mkdir(parents=True)
    (outside / "b1.txt").write_text("host")
    home = tmp_path / "state" / "agent-home"
    (home / RESULTS.parent).mkdir(parents=True)
    (home / RESULTS).symlink_to(outside)
    with pytest.raises(ReplayError) as refused:
        rebuild_home(home, [RESULTS])
    assert refused.value.kind is ErrorKind.CONTINUATION and "not followed" in refused.value.message
    assert sorted(path.name for path in outside.iterdir()) == ["b1.txt"]
    assert sorted(path.name for path in home.parent.iterdir()) == ["agent-home"]
