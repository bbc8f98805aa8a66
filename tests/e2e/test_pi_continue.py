"""End to end with the REAL Pi 0.83.0 and 1.6.0 (npm package on its Node 22 runtime): replay + continue through
the SDK.

ScriptedModel plays the model upstream (the only stand-in). Every recorded fixture (event stream and session file)
is replayed at every boundary in a workspace restored to the recording's initial state at the recorded path; the
gate must pass, the fresh observations must equal the historical ones, the first forwarded request must be the
request the same Pi sent after batch N while recording (continue(): nothing added; prompt(): exactly one user
message), and the real Pi must execute the scripted next action.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.adapters.pi import launch
from forkpoint.adapters.pi.parse import parse_pi
from forkpoint.core.results import ReplayResult
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import e2e_boundaries, replay_recording

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parents[1] / "fixtures" / "pi" / "0.83.0"
SCENARIOS = ("single_bash", "parallel", "file_tools", "error_result", "unknown_tool", "unknown_tools", "optional_tools",
             "long_session")
PROMPT = "Before going on, say what you found so far."
EVERY_BOUNDARY = os.environ.get("FORKPOINT_E2E_EVERY_BOUNDARY") == "1"


def _cases(formats: tuple[str, ...], *, every: str = "events.jsonl", first_too: bool = False) -> list[
        tuple[str, str, int]]:
    """First, middle and last boundary of the ``every`` format; the last of the others (the same prefixes through
    another parser: its last boundary parses and rebuilds every batch the earlier ones hold, and the continuation
    after boundary 1 is the ``every`` format's; sampled, so CI time goes to boundaries that can find different
    bugs); ``first_too``: their first and last. FORKPOINT_E2E_EVERY_BOUNDARY=1: every boundary of every format."""
    cases = []
    for s in SCENARIOS:
        for f in formats:
            count = parse_pi(FIXTURES / s / f).complete_count
            chosen = e2e_boundaries(range(1, count + 1)) if f == every or EVERY_BOUNDARY else sorted(
                {1, count} if first_too else {count})
            cases += [(s, f, n) for n in chosen]
    return cases


@pytest.fixture(autouse=True)
def _runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    if runtimes.find("pi", "0.83.0") is None:
        pytest.skip("pi 0.83.0 is not installed (forkpoint agents install pi@0.83.0)")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")


def run(fixture: Path, tmp_path: Path, after: int, name: str | Path = "events.jsonl", **overrides: Any) -> ReplayResult:
    return replay_recording(fixture, tmp_path, agent="pi", trajectory=name, after=after, **overrides)


def recorded_request(fixture: Path, after: int) -> dict[str, Any]:
    requests = [json.loads(line) for line in (fixture / "requests.jsonl").read_text().splitlines()]
    body: dict[str, Any] = next(r["body"] for r in requests if r["step"] == after)
    return body


def _comparable(body: dict[str, Any]) -> dict[str, Any]:
    """A request without the system prompt and tools (the fixtures keep them as hashes)."""
    return {**{k: v for k, v in body.items() if k != "tools"}, "messages": body["messages"][1:]}


def _hash(value: Any) -> str:
    """The fixtures' hash of the system prompt and tools (scripts/record_pi_fixtures.py)."""
    return "sha256:" + hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _tools_and_system(body: dict[str, Any], *, hashed: bool) -> tuple[Any, Any]:
    """The tools and system prompt of a request: the same enabled tool set gives the same pair."""
    tools, system = body.get("tools"), body["messages"][0]["content"]
    return (tools, system) if hashed else (_hash(tools), _hash(system))


def _scripted(fixture: Path) -> ScriptedModel:
    return ScriptedModel.from_file(fixture / "script.json", model="scripted-model")


def _check_verified(result: ReplayResult, status: str = "completed", *, forwarded: bool = True) -> Path:
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", status)
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] >= 1 and bridge["refused"] == 0
    assert bridge["forwarded"] == (bridge["validated"] if forwarded else 0)
    out = Path(result.output_dir or "")
    observations = json.loads((out / "observations.json").read_text())["observations"]
    assert observations and all(row["exact"] for row in observations), observations
    for path in out.rglob("*"):
        if path.is_file():
            assert "__forkpoint_nonce_" not in path.read_text(errors="replace"), path
    return out


@pytest.mark.parametrize(("scenario", "name", "after"), _cases(("events.jsonl", "session.jsonl")),
                         ids=lambda v: str(v))
def test_continue_at_every_boundary(scenario: str, name: str, after: int, tmp_path: Path) -> None:
    _continue_verified(FIXTURES / scenario, name, after, tmp_path)


#: Pi 1.6.0 (its own fixtures, recorded by the real 1.6.0): the boundaries that cover every tool and both inputs
PI_1X = FIXTURES.parent / "1.6.0"
#: (error_result's tools replay exactly in tests/adapters/pi/test_fixture_fidelity.py; the compaction tests below
#: continue 1.6.0 session files)
PI_1X_CASES = [("parallel", "events.jsonl", 1), ("optional_tools", "events.jsonl", 4)]


@pytest.mark.parametrize(("scenario", "name", "after"), PI_1X_CASES, ids=lambda v: str(v))
def test_pi_1_6_0_replays_and_continues(scenario: str, name: str, after: int, tmp_path: Path) -> None:
    """A 1.x recording (system message first, its tool loadout recorded) is read as 1.6.0, its tools re-run with
    1.6.0's own (write's text, bash's flagged error) and the real 1.6.0 continues it: the first request is the
    one 1.6.0 sent while recording, with the recorded system prompt and tools."""
    if runtimes.find("pi", "1.6.0") is None:
        pytest.skip("pi 1.6.0 is not installed (forkpoint agents install pi@1.6.0)")
    result = _continue_verified(PI_1X / scenario, name, after, tmp_path)
    assert result.metadata["continuing_agent_version"] == "1.6.0"
    assert result.metadata["session_upgrade"] is None


def _continue_verified(fixture: Path, name: str, after: int, tmp_path: Path) -> ReplayResult:
    model = _scripted(fixture)
    with model.serve() as url:
        result = run(fixture, tmp_path, after, name, upstream="openai-chat", upstream_url=f"{url}/v1")
    out = _check_verified(result)
    bridge = result.metadata["model_bridge"]
    reported = model.reported_usage()  # model_usage: the sums of what ScriptedModel's answers reported
    assert {key: result.metadata["model_usage"][key] for key in reported} == reported
    assert reported["calls"] == bridge["forwarded"] == reported["calls_with_usage"]  # Pi asks for include_usage
    assert reported["input_tokens"] == 100 * reported["calls"]
    assert result.metadata["pi_resume_transport"]["method"] == "agent.continue"
    main = [entry for entry in model.requests if entry.get("kind") == "main"]
    # continue(): the first request is byte-for-byte the request Pi sent after batch N while recording
    assert _comparable(main[0]["body"]) == _comparable(recorded_request(fixture, after))
    # with the recorded enabled tool set: the same tools and system prompt as while recording
    assert _tools_and_system(main[0]["body"], hashed=False) == _tools_and_system(recorded_request(fixture, after),
                                                                                 hashed=True)
    next_action = json.loads((out / "next-action.json").read_text())
    assert next_action["replayed"] is not None and next_action["metrics"]["same_tool_calls"] is True, next_action
    continued = parse_pi(next((out / "native" / "continued").glob("*_*.jsonl")))
    total = len(json.loads((fixture / "script.json").read_text())["turns"])
    assert result.continued_steps == total - after == len(main)
    assert continued.native.messages[-1]["role"] == "assistant"
    return result


@pytest.mark.parametrize(("scenario", "name", "after"), _cases(("events.jsonl",), every="none", first_too=True),
                         ids=lambda v: str(v))
def test_boundary_prompt_at_the_first_and_last_boundary(scenario: str, name: str, after: int, tmp_path: Path) -> None:
    fixture = FIXTURES / scenario
    model = _scripted(fixture)
    with model.serve() as url:
        result = run(fixture, tmp_path, after, name, upstream="openai-chat", upstream_url=f"{url}/v1",
                     boundary_user_prompt=PROMPT)
    out = _check_verified(result)
    assert result.metadata["boundary_user_prompt"]["injected"] is True
    main = [entry for entry in model.requests if entry.get("kind") == "main"]
    first = _comparable(main[0]["body"])
    recorded = _comparable(recorded_request(fixture, after))
    # prompt(): exactly one user message after O'N, carrying the boundary prompt
    assert first["messages"][:-1] == recorded["messages"]
    assert first["messages"][-1] == {"role": "user", "content": [{"type": "text", "text": PROMPT}]}
    continued = next((out / "native" / "continued").glob("*_*.jsonl")).read_text()
    assert continued.count(PROMPT) == 1
    for name_ in ("result.json", "replay-summary.json", "replay-events.jsonl", "manifest.json"):
        assert PROMPT not in (out / name_).read_text()


def test_step_budget_stops_the_agent_and_reports_max_steps(tmp_path: Path) -> None:
    fixture = FIXTURES / "file_tools"
    model = _scripted(fixture)
    with model.serve() as url:
        result = run(fixture, tmp_path, 1, upstream="openai-chat", upstream_url=f"{url}/v1", max_steps=3)
    _check_verified(result, status="max_steps")
    assert result.continued_steps == 2 and result.metadata["model_bridge"]["over_budget"] == 0
    assert len([e for e in model.requests if e.get("kind") == "main"]) == 2


def test_stub_upstream(tmp_path: Path) -> None:
    result = run(FIXTURES / "single_bash", tmp_path, 2, upstream="stub")
    _check_verified(result, forwarded=False)
    assert result.continued_steps == 1


def test_tampered_session_is_refused_with_nothing_forwarded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The session Pi reads differs from the one forkpoint proved (one observation changed): fail closed."""
    real: Callable[..., Any] = getattr(launch, "expected_prefix")  # noqa: B009

    def proved_elsewhere(messages: list[dict[str, Any]], nonce: str | None, model: str | None,
                         tools: Any = None, version: str = "0.83.0") -> Any:
        changed = json.loads(json.dumps(messages))
        changed[-1]["content"] = [{"type": "text", "text": "what forkpoint proved"}]
        return real(changed, nonce, model, tools, version)

    monkeypatch.setattr(launch, "expected_prefix", proved_elsewhere)
    fixture = FIXTURES / "single_bash"
    model = _scripted(fixture)
    with model.serve() as url:
        result = run(fixture, tmp_path, 1, upstream="openai-chat", upstream_url=f"{url}/v1")
    assert result.failure is not None and result.failure.category == "continuation_error"
    assert "observation of call_sb_1 differs" in result.failure.message
    assert model.requests == []  # nothing reached the model
    bridge_log = [json.loads(line) for line in (tmp_path / "state" / "run-1" / "bridge-log.jsonl").read_text()
                  .splitlines()]
    assert bridge_log and all(not record["forwarded"] for record in bridge_log)


def test_optional_tools_continue_with_the_recorded_tool_set(tmp_path: Path) -> None:
    fixture = FIXTURES / "optional_tools"
    model = _scripted(fixture)
    with model.serve() as url:
        result = run(fixture, tmp_path, 2, upstream="openai-chat", upstream_url=f"{url}/v1")
    _check_verified(result)
    enabled = ["read", "bash", "edit", "write", "grep", "find", "ls"]
    assert result.metadata["pi_tools"]["enabled"] == enabled
    main = [entry for entry in model.requests if entry.get("kind") == "main"]
    assert [t["function"]["name"] for t in main[0]["body"]["tools"]] == enabled


def test_a_tool_pi_ran_but_cannot_be_rerun_refuses_only_boundaries_after_it(tmp_path: Path) -> None:
    """An extension tool in batch 2 (Pi ran it; no built-in): boundary 1 continues, boundary 2 is refused as
    unsupported_tool before anything is allocated."""
    fixture = FIXTURES / "single_bash"
    events = (fixture / "events.jsonl").read_text().replace('"call_sb_2","name":"bash"', '"call_sb_2","name":"ext"')
    events = events.replace('"toolCallId":"call_sb_2","toolName":"bash"', '"toolCallId":"call_sb_2","toolName":"ext"')
    source = tmp_path / "extension.jsonl"
    source.write_text(events)
    assert [c.policy.value for b in parse_pi(source).batches for c in b.calls] == ["fresh", "refused"]
    first = run(fixture, tmp_path / "one", 1, source, upstream="stub")
    _check_verified(first, forwarded=False)
    second = run(fixture, tmp_path / "two", 2, source, upstream="stub")
    assert second.failure is not None and (second.failure.category, second.exit_code) == ("unsupported_tool", 11)
    assert "ext(call_sb_2) in batch 2" in second.failure.message
    assert not (tmp_path / "two" / "out").exists()


def test_wrong_version_entrypoint_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "pi"
    fake.write_text("#!/bin/sh\necho 0.82.0\n")
    fake.chmod(0o755)
    result = run(FIXTURES / "single_bash", tmp_path, 1, upstream="stub", agent_entrypoint=str(fake))
    assert result.failure is not None and result.failure.category == "unsupported_version"
    assert result.exit_code == 11 and "0.82.0" in result.failure.message
    assert not (tmp_path / "out").exists()


def test_replay_only_and_prepare_only(tmp_path: Path) -> None:
    fixture = FIXTURES / "error_result"
    replayed = run(fixture, tmp_path, 2, "session.jsonl", replay_only=True, run_id="replay")
    assert replayed.failure is None and (replayed.phase, replayed.agent_status) == ("replayed", "not_started")
    assert replayed.replayed_tool_calls == 3 and replayed.quality == "verified"
    prepared = run(fixture, tmp_path, 2, "session.jsonl", prepare_only=True, run_id="prepare")
    assert prepared.failure is None and prepared.phase == "prepared" and prepared.replayed_tool_calls == 0
    rebuilt = next((Path(replayed.output_dir or "") / "native" / "prefix").glob("*.jsonl")).read_text()
    historical = next((Path(prepared.output_dir or "") / "native" / "prefix").glob("*.jsonl")).read_text()
    assert rebuilt == historical  # every fresh observation (errors included) equals the recorded one


def test_model_and_sampling_pins_reach_the_upstream(tmp_path: Path) -> None:
    """Issue 17: Pi still asks for the recorded model (the gate proves the first request), the bridge sends
    --model and the pins upstream; the result metadata says so."""
    fixture = FIXTURES / "single_bash"
    model = _scripted(fixture)
    with model.serve() as url:
        result = run(fixture, tmp_path, 1, upstream="openai-chat", upstream_url=f"{url}/v1", model="other-model",
                     temperature=0.0, seed=7)
    _check_verified(result)
    main = [entry for entry in model.requests if entry.get("kind") == "main"]
    assert main and all((e["body"]["model"], e["body"]["temperature"], e["body"]["seed"]) == ("other-model", 0.0, 7)
                        for e in main)
    assert recorded_request(fixture, 1)["model"] != "other-model"
    assert (result.metadata["requested_model"], result.metadata["upstream_model"]) == ("other-model", "other-model")
    assert result.metadata["sampling"]["pins"] == {"model": "other-model", "temperature": 0.0, "seed": 7}


def test_record_tool_schemas_saves_pis_tool_definitions_for_the_export(tmp_path: Path) -> None:
    """Issue 20: the first validated Chat request's tools (definitions only) in tool-schemas.json; the export's
    tools column is filled from it; without the flag no file is written."""
    from forkpoint.export import export
    from forkpoint.export.rows import ExportOptions

    fixture = FIXTURES / "single_bash"
    model = _scripted(fixture)
    with model.serve() as url:
        result = run(fixture, tmp_path / "with", 1, upstream="openai-chat", upstream_url=f"{url}/v1",
                     record_tool_schemas=True)
    out = _check_verified(result)
    assert result.metadata["tool_schemas_recorded"] is True
    schemas = json.loads((out / "tool-schemas.json").read_text())
    tools: list[dict[str, Any]] = next(e for e in model.requests if e.get("kind") == "main")["body"]["tools"]
    sent: list[dict[str, Any]] = [
        {"type": "function", "function": {key: tool["function"][key] for key in ("name", "description", "parameters")}}
        for tool in tools]
    assert schemas["tools"] == sent and {"bash", "read"} <= {tool["function"]["name"] for tool in sent}
    assert "messages" not in json.dumps(schemas) and schemas["source_protocol"] == "openai-chat"
    export([out], "messages-jsonl", tmp_path / "rows.jsonl", ExportOptions())
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert rows and all(json.loads(row["tools"]) == sent and row["tools_source"] == "recorded" for row in rows)
    with _scripted(fixture).serve() as url:
        plain = run(fixture, tmp_path / "without", 1, upstream="openai-chat", upstream_url=f"{url}/v1")
    assert plain.metadata["tool_schemas_recorded"] is False
    assert not (_check_verified(plain) / "tool-schemas.json").exists()


def test_a_slow_version_probe_does_not_fail_the_continuation(tmp_path: Path) -> None:
    """The real Pi behind an entrypoint whose ``--version`` answers after 11 s, as on a loaded 2-core host (the
    old fixed 10 s deadline failed such runs as configuration errors): the run continues and is verified."""
    real = runtimes.find("pi", "0.83.0")
    assert real is not None
    root = tmp_path / "slow-pi"  # the layout of an install: Pi's launch finds its Node next to the entrypoint
    (root / "forkpoint-bin").mkdir(parents=True)
    (root / "node_modules").symlink_to(real.root / "node_modules")
    slow = root / "forkpoint-bin" / "pi"
    slow.write_text(f'#!/bin/sh\n[ "$1" = --version ] && sleep 11\nexec {real.entrypoint} "$@"\n')
    slow.chmod(0o755)
    result = run(FIXTURES / "single_bash", tmp_path, 2, upstream="stub", agent_entrypoint=str(slow))
    _check_verified(result, forwarded=False)


def _main_requests(fixture: Path) -> list[dict[str, Any]]:
    """The recorded requests that carried tools (the compaction summaries' helper requests carry none)."""
    rows = [json.loads(line)["body"] for line in (fixture / "requests.jsonl").read_text().splitlines()]
    return [body for body in rows if body.get("tools")]


# the script's turn after batch N has the index of the recorded request after it; boundary 1 (the plain history
# before any compaction: (1, 1)) passes too, run by hand
@pytest.mark.parametrize(("after", "recorded"), [(3, 4)])
def test_a_compacted_1_6_0_session_continues_after_a_compaction(after: int, recorded: int, tmp_path: Path) -> None:
    """Recorded by the real 1.6.0: compactions right after batch 2 and right after batch 3 (second run). Boundary 3
    is rebuilt with both compactions, and the real 1.6.0's first request is the one it sent while recording (the
    latest summary as a user message, then the kept batch): the gate proves it."""
    if runtimes.find("pi", "1.6.0") is None:
        pytest.skip("pi 1.6.0 is not installed (forkpoint agents install pi@1.6.0)")
    fixture = PI_1X / "compaction"
    script = json.loads((fixture / "script.json").read_text())  # both runs' turns, in order
    model = ScriptedModel(script["turns"][recorded:], seed=script["seed"], model="scripted-model", step_mode="counter")
    with model.serve() as url:
        result = run(fixture, tmp_path, after, "session.jsonl", upstream="openai-chat", upstream_url=f"{url}/v1")
    out = _check_verified(result)
    main = [entry for entry in model.requests if entry.get("kind") == "main"]
    assert _comparable(main[0]["body"])["messages"] == _comparable(_main_requests(fixture)[recorded])["messages"]
    prefix = next((out / "native" / "prefix").glob("*.jsonl")).read_text()
    assert prefix.count('"type":"compaction"') == (after == 3) * 2


def test_a_compaction_whose_summarised_observation_changed_is_refused(tmp_path: Path) -> None:
    """The recorded read of a.txt (which Pi's compactions summarised) says something else than the replayed one:
    the summary no longer describes the replayed world, so boundary 3 is refused as a divergence (exit 32); the
    event stream, which holds no compaction entry, refuses boundary 3 outright."""
    if runtimes.find("pi", "1.6.0") is None:
        pytest.skip("pi 1.6.0 is not installed (forkpoint agents install pi@1.6.0)")
    fixture = PI_1X / "compaction"
    changed = tmp_path / "changed.jsonl"
    changed.write_text((fixture / "session.jsonl").read_text().replace('"text":"apple\\ncherry\\n"',
                                                                       '"text":"apple\\n"'))
    assert changed.read_text() != (fixture / "session.jsonl").read_text()
    result = run(fixture, tmp_path / "one", 3, changed, upstream="stub")
    assert result.failure is not None and (result.failure.category, result.exit_code) == ("divergence", 32)
    assert "read(call_cmp_1)" in result.failure.message and "compaction at line" in result.failure.message
    events = run(fixture, tmp_path / "two", 3, "events.jsonl", upstream="stub")
    assert events.failure is not None and (events.failure.category, events.exit_code) == ("unsupported_tool", 11)
    assert "event stream does not hold" in events.failure.message
