"""End to end with the REAL opencode binaries: replay + continue recorded sessions through the Chat Completions bridge.

ScriptedModel plays the model upstream (the only stand-in). Every recorded session (``export.json``) is replayed at
every boundary in a workspace restored to the recording's initial state at the recorded path: the tools are re-run
by the real binary, the session is rebuilt in a private SQLite store and continued with ``opencode run --session``.
The gate must pass, the first forwarded request must equal the request the same binary sent after batch N while
recording (the system prompt compared date-masked), and the real opencode must execute the scripted next action.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.adapters.opencode.envelope import masked_system_sha256, project_request_message
from forkpoint.adapters.opencode.parse import parse_opencode
from forkpoint.core.hashing import canonical_sha256
from forkpoint.core.model import Observation
from forkpoint.core.results import ReplayResult
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import e2e_boundaries, replay_recording
from forkpoint.testing.scripted_model import text, tool_use

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parents[1] / "fixtures" / "opencode"
VERSIONS = ("1.17.11", "1.18.33")
NONCE_MARK = "__forkpoint_nonce_"


#: long recordings: only their LAST boundary (the whole session exported after the continuation, > 64 KiB)
LAST_ONLY = frozenset({"long_session"})
PIPE_CAPACITY = 65536
EVERY_BOUNDARY = os.environ.get("FORKPOINT_E2E_EVERY_BOUNDARY") == "1"
#: recordings of a plain `opencode run` log: continued (at their last boundary, from the log with its export) by
#: test_run_event_log_replays_and_continues_with_its_export, so the boundary matrix leaves them out (CI time)
EVENT_LOG_ONLY = frozenset({"run_log"})
#: the recordings continued at their first, middle and last boundary on the newest version (CI time: each case
#: starts opencode three times, ~11 s). Not bash_basic: its first boundary (one bash call) took the path of
#: apply_patch-1 and parallel-1 again, and bash_basic is continued at boundary 1 on this version anyway (the step
#: budget, the idle watchdog and tests/reliability/test_hostile_upstreams.py)
SAMPLED_WIDE = frozenset({"apply_patch", "parallel"})
#: continued only with FORKPOINT_E2E_EVERY_BOUNDARY=1 (CI time): its tool parts are ordinary completed/error parts
#: in the rebuilt session, whose prefix test_gate checks offline at every boundary
EVERY_BOUNDARY_ONLY = frozenset({"skill"})
#: a final answer over 64 KiB (1.17.11 exited without flushing a pipe: its last `text` event was cut)
LONG_ANSWER = "".join(f"line {n:05d} of a long final answer\n" for n in range(4000))  # 132 KB
#: the recording whose last-boundary continuation ends with LONG_ANSWER instead of its recorded final text (CI time:
#: no continuation of its own); on 1.18.33 test_continuation_uses_a_tool_the_script_names ends with it
LONG_FINAL = ("1.17.11", "bash_basic")


def _cases() -> list[tuple[str, str, int]]:
    cases = []
    for version in VERSIONS:
        for export in sorted((FIXTURES / version).glob("*/export.json")):
            if export.parent.name in EVERY_BOUNDARY_ONLY | EVENT_LOG_ONLY and not EVERY_BOUNDARY:
                continue
            count = parse_opencode(export).complete_count
            first = count if export.parent.name in LAST_ONLY else 1
            # first, middle and last of the SAMPLED_WIDE recordings on the newest version; the last boundary of
            # every other (its prefix holds every observation the earlier ones hold; the envelope differs per
            # version, not per boundary). FORKPOINT_E2E_EVERY_BOUNDARY=1 runs every boundary of both versions.
            wide = EVERY_BOUNDARY or (version == VERSIONS[-1] and export.parent.name in SAMPLED_WIDE)
            chosen = e2e_boundaries(range(first, count + 1)) if wide else [count]
            cases += [(version, export.parent.name, after) for after in chosen]
    return cases


def replayed_whole() -> set[tuple[str, str]]:
    """(version, scenario) of the recordings this module re-runs WHOLE in the default suite: continued at their last
    boundary, or from their event log (run_log), every re-run call's content and error flag compared with the
    recorded one (observations.json, the first request) and its status and bash exit code too (``same_tool_states``).
    tests/adapters/opencode/test_fixture_fidelity.py leaves these to this module (CI time: one OpenCode start each)."""
    whole = {(version, scenario) for version, scenario, after in _cases()
             if after == parse_opencode(FIXTURES / version / scenario / "export.json").complete_count}
    return whole | {(version, scenario) for version in VERSIONS for scenario in EVENT_LOG_ONLY}


def same_tool_states(continued: Path, export: Path, after: int) -> None:
    """The fidelity claim's last part: every call of the first ``after`` batches has, in the continued session (which
    holds the FRESH tool states), the recorded status and, for bash, the recorded exit code."""
    fresh = [call for batch in parse_opencode(continued).batches[:after] for call in batch.calls]
    recorded = [call for batch in parse_opencode(export).batches[:after] for call in batch.calls]
    assert [call.call_id for call in fresh] == [call.call_id for call in recorded]
    for new, old in zip(fresh, recorded, strict=True):
        assert new.native["state"]["status"] == old.native["state"]["status"], old.call_id
        if old.name == "bash":
            exit_code = new.native["state"].get("metadata", {}).get("exit")
            assert exit_code == old.native["state"]["metadata"]["exit"], (old.call_id, exit_code)


def require_runtime(version: str) -> None:
    if runtimes.find("opencode", version) is None:
        pytest.skip(f"opencode {version} is not installed (forkpoint agents install opencode@{version})")


def run(fixture: Path, tmp_path: Path, after: int, trajectory: Path | None = None, **overrides: Any) -> ReplayResult:
    return replay_recording(fixture, tmp_path, agent="opencode", trajectory=trajectory or "export.json", after=after,
                            **overrides)


def recorded_main_requests(fixture: Path) -> list[dict[str, Any]]:
    lines = (fixture / "requests.jsonl").read_text().splitlines()
    return [entry for entry in map(json.loads, lines) if entry.get("kind") == "main"]


@pytest.mark.parametrize(("version", "scenario", "after"), _cases(), ids=lambda v: str(v))
def test_replay_and_continue_every_boundary(
    version: str, scenario: str, after: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_runtime(version)
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    monkeypatch.setenv("SHELL", "/bin/bash")  # forkpoint's own; the recordings had none (OpenCode ran /usr/bin/bash)
    fixture = FIXTURES / version / scenario
    trajectory = parse_opencode(fixture / "export.json")
    stale = any(call.stale for batch in trajectory.batches[:after] for call in batch.calls)
    model = ScriptedModel.from_file(fixture / "script.json")
    long_final = (version, scenario) == LONG_FINAL and after == trajectory.complete_count
    if long_final:  # a final answer over 64 KiB in place of the recorded one
        script = json.loads((fixture / "script.json").read_text())
        model = ScriptedModel([*script["turns"][:after], {"content": [text(LONG_ANSWER)]}], seed=script["seed"])
    with model.serve() as url:
        result = run(fixture, tmp_path, after, upstream="openai-chat", upstream_url=f"{url}/v1",
                     allow_stale_observations=stale)
    assert result.failure is None, result.failure
    quality = "degraded" if stale else "verified"
    assert (result.phase, result.quality, result.agent_status) == ("continued", quality, "completed")
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] >= 1 and bridge["refused"] == 0 and bridge["forwarded"] == bridge["validated"]
    out = Path(result.output_dir or "")
    observations = json.loads((out / "observations.json").read_text())["observations"]
    assert observations and all(row["exact"] or row["stale_reused"] for row in observations), observations

    main = [entry for entry in model.requests if entry.get("kind") == "main"]
    original = recorded_main_requests(fixture)[after]["body"]
    first = main[0]["body"]
    # the first forwarded request IS the request the same binary sent right after batch N while recording
    assert canonical_sha256([project_request_message(m) for m in first["messages"][1:]]) == canonical_sha256(
        [project_request_message(m) for m in original["messages"][1:]])
    assert masked_system_sha256(first["messages"][0]["content"]) == original["messages"][0]["system_sha256"]
    assert [t["function"]["name"] for t in first["tools"]] == original["tool_names"]
    assert first["messages"][-1]["role"] == "tool"
    assert NONCE_MARK not in json.dumps(main)

    next_action = json.loads((out / "next-action.json").read_text())
    assert next_action["replayed"] is not None
    assert next_action["metrics"]["same_tool_calls"] is True, next_action
    continued = out / "native" / "continued" / f"{parse_opencode(fixture / 'export.json').session_id}.json"
    assert NONCE_MARK not in continued.read_text()
    assert parse_opencode(continued).batches[:after] == parse_opencode(fixture / "export.json").batches[:after]
    same_tool_states(continued, fixture / "export.json", after)
    if long_final:  # 1.17.11 exited without flushing a pipe: its last `text` event was cut; stdout is a file now
        events = [json.loads(line) for line in (out / "native" / "continued" / "events.jsonl").read_text().splitlines()]
        assert [e["type"] for e in events][-2:] == ["text", "step_finish"] and events[-2]["part"]["text"] == LONG_ANSWER
        assert result.metadata["opencode_step_budget"]["completed_steps"] == 1
    if scenario in LAST_ONLY:  # `opencode export` through a pipe was cut at 65,536 bytes (issue 22.3)
        assert continued.stat().st_size > PIPE_CAPACITY and parse_opencode(continued).complete_count == after


@pytest.mark.parametrize("version", VERSIONS)
def test_run_event_log_replays_and_continues_with_its_export(
    version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain `opencode run --format=json` log (no reasoning, no prompt, no version) + `--opencode-export`."""
    require_runtime(version)
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    monkeypatch.setenv("SHELL", "/bin/bash")
    fixture = FIXTURES / version / "run_log"
    export = fixture / "export.json"
    replayed = run(fixture, tmp_path, 1, trajectory=fixture / "events.jsonl", opencode_export=str(export),
                   replay_only=True)
    assert replayed.failure is None, replayed.failure
    assert (replayed.phase, replayed.quality) == ("replayed", "verified")
    out = Path(replayed.output_dir or "")
    rows = json.loads((out / "observations.json").read_text())["observations"]
    assert [row["name"] for row in rows] == ["bash", "read"] and all(row["exact"] for row in rows), rows
    assert "/usr/bin/bash: line 1: nosuchcmd_forkpoint" in (parse_opencode(export).batches[0].calls[0]
                                                              .historical or Observation("")).content
    prefix = next((out / "native" / "prefix").glob("ses_*.json"))
    cut, recorded = parse_opencode(prefix).native.messages, parse_opencode(export).native.messages[:2]
    assert [m.info for m in cut] == [m.info for m in recorded]  # the prompt and message details of the export
    assert [[p["type"] for p in m.parts] for m in cut] == [[p["type"] for p in m.parts] for m in recorded]
    assert [p for p in cut[1].parts if p["type"] == "reasoning"] == [  # not in the log, kept from the export
        p for p in recorded[1].parts if p["type"] == "reasoning"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source"]["path"] == str(fixture / "events.jsonl")

    model = ScriptedModel.from_file(fixture / "script.json")
    after = parse_opencode(export).complete_count
    with model.serve() as url:
        continued = run(fixture, tmp_path, after, trajectory=fixture / "events.jsonl", opencode_export=str(export),
                        upstream="openai-chat", upstream_url=f"{url}/v1")
    assert continued.failure is None, continued.failure
    assert (continued.phase, continued.quality, continued.agent_status) == ("continued", "verified", "completed")
    assert continued.metadata["opencode_shell"] == "/usr/bin/bash"  # the recording's, not forkpoint's /bin/bash
    main = [entry for entry in model.requests if entry.get("kind") == "main"]
    original = recorded_main_requests(fixture)[after]["body"]
    assert canonical_sha256([project_request_message(m) for m in main[0]["body"]["messages"][1:]]) == \
        canonical_sha256([project_request_message(m) for m in original["messages"][1:]])
    assert main[0]["body"]["messages"][-1]["role"] == "tool" and NONCE_MARK not in json.dumps(main)
    rows = json.loads((Path(continued.output_dir or "") / "observations.json").read_text())["observations"]
    assert len(rows) == sum(len(b.calls) for b in parse_opencode(export).batches)  # no call replayed twice
    assert all(row["exact"] for row in rows), rows
    same_tool_states(next((Path(continued.output_dir or "") / "native" / "continued").glob("ses_*.json")), export,
                     after)
    next_action = json.loads((Path(continued.output_dir or "") / "next-action.json").read_text())
    assert next_action["metrics"]["same_tool_calls"] is True, next_action


def test_stale_calls_need_the_degraded_opt_in(tmp_path: Path) -> None:
    fixture = FIXTURES / "1.17.11" / "stale_tools"
    result = run(fixture, tmp_path, 1, replay_only=True)
    assert result.failure is not None and result.exit_code == 10
    assert "todowrite" in result.failure.message and "--allow-stale-observations" in result.failure.message


def test_event_log_is_refused_for_replay_with_the_export_hint(tmp_path: Path) -> None:
    fixture = FIXTURES / "1.17.11" / "bash_basic"
    result = run(fixture, tmp_path, 1, trajectory=fixture / "events.jsonl", replay_only=True)
    assert result.failure is not None and result.exit_code == 11
    assert "opencode export ses_" in result.failure.message
    assert "--opencode-export" in result.failure.message and "version" in result.failure.message
    assert not (tmp_path / "out" / "run-1").exists()


def _looping_model(fixture: Path, **kwargs: Any) -> ScriptedModel:
    script = json.loads((fixture / "script.json").read_text())
    turns = script["turns"][:-1]  # every tool turn; the last one (a bash call) repeats forever
    return ScriptedModel(turns, seed=script["seed"], loop_last=True, **kwargs)


@pytest.mark.parametrize("version", VERSIONS)
def test_never_stopping_model_is_stopped_at_the_step_budget(
    version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a boundary prompt too (one OpenCode continuation per version instead of two, CI time): the prompt ends
    the first request, is kept in the continued session and nowhere in forkpoint's own files, and is no step."""
    require_runtime(version)
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    fixture = FIXTURES / version / "bash_basic"
    prompt = "Check the listing once more before reading."
    model = _looping_model(fixture)
    with model.serve() as url:
        result = run(fixture, tmp_path, 1, upstream="openai-chat", upstream_url=f"{url}/v1", max_steps=4,
                     boundary_user_prompt=prompt)
    assert result.failure is None, result.failure
    assert result.agent_status == "max_steps"
    budget = result.metadata["opencode_step_budget"]
    assert budget["budget"] == 3 and budget["completed_steps"] == 3 and budget["sigint_sent"] is True
    main = [e for e in model.requests if e.get("kind") == "main"]
    assert len(main) <= 3
    assert main[0]["body"]["messages"][-1]["role"] == "user" and prompt in json.dumps(main[0]["body"]["messages"][-1])
    assert result.metadata["boundary_user_prompt"]["injected"] is True
    out = Path(result.output_dir or "")
    session = next((out / "native" / "continued").glob("ses_*.json"))
    assert prompt in session.read_text()
    for name in ("result.json", "replay-summary.json", "replay-events.jsonl"):
        assert prompt not in (out / name).read_text()
    continued = parse_opencode(session)
    assert continued.complete_count == 1 + 3  # nothing the agent did is lost (the DB is the record)


def test_silent_model_is_ended_by_the_idle_watchdog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_runtime("1.18.33")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    monkeypatch.setenv("FORKPOINT_OPENCODE_IDLE_TIMEOUT_S", "8")
    fixture = FIXTURES / "1.18.33" / "bash_basic"
    script = json.loads((fixture / "script.json").read_text())
    turns = [*script["turns"][:1], {"content": [text("...")], "stall": True}]
    model = ScriptedModel(turns, seed=script["seed"])
    with model.serve() as url:
        result = run(fixture, tmp_path, 1, upstream="openai-chat", upstream_url=f"{url}/v1")
    assert result.failure is not None and result.failure.category == "continuation_error"
    assert "idle watchdog" in result.failure.message


def test_tampered_session_is_refused_with_nothing_forwarded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The imported session is altered behind forkpoint's back: the gate sees a different prefix and refuses."""
    from forkpoint.adapters.opencode import launch
    from forkpoint.adapters.opencode.database import database_path

    require_runtime("1.17.11")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    real_helper = launch.helper

    def tampering_helper(entrypoint: Path, args: list[str], context: Any, env: dict[str, str], what: str,
                         **options: Any) -> bytes:
        out = real_helper(entrypoint, args, context, env, what, **options)
        if what == "import":
            db = database_path(context.home)
            with sqlite3.connect(db) as connection:
                for part_id, data in connection.execute("SELECT id, data FROM part").fetchall():
                    part = json.loads(data)
                    if part.get("type") == "tool":
                        part["state"]["output"] = "TAMPERED OUTPUT\n"
                        connection.execute("UPDATE part SET data = ? WHERE id = ?", (json.dumps(part), part_id))
        return out

    monkeypatch.setattr(launch, "helper", tampering_helper)
    fixture = FIXTURES / "1.17.11" / "bash_basic"
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = run(fixture, tmp_path, 1, upstream="openai-chat", upstream_url=f"{url}/v1")
    assert result.failure is not None and result.failure.category == "continuation_error"
    assert "refused" in result.failure.message and "differs" in result.failure.message
    assert [e for e in model.requests if e.get("kind") == "main"] == []  # nothing was forwarded


def test_wrong_binary_version_is_refused(tmp_path: Path) -> None:
    require_runtime("1.18.33")
    other = runtimes.find("opencode", "1.18.33")
    assert other is not None
    result = run(FIXTURES / "1.17.11" / "bash_basic", tmp_path, 1, upstream="stub",
                 agent_entrypoint=str(other.entrypoint))
    assert result.failure is not None and (result.failure.category, result.exit_code) == ("unsupported_version", 11)
    assert not (tmp_path / "out" / "run-1").exists()


def test_unknown_tool_is_refused(tmp_path: Path) -> None:
    fixture = FIXTURES / "1.17.11" / "bash_basic"
    export = json.loads((fixture / "export.json").read_text())
    for message in export["messages"]:
        for part in message["parts"]:
            if part.get("type") == "tool":
                part["tool"] = "teleport"
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps(export))
    result = run(fixture, tmp_path, 1, trajectory=unknown, replay_only=True)
    assert result.failure is not None and result.exit_code == 11 and "teleport" in result.failure.message


def test_continuation_uses_a_tool_the_script_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A continuation whose next action is a parallel batch: the real opencode runs both calls after the cut."""
    require_runtime("1.18.33")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    fixture = FIXTURES / "1.18.33" / "files"
    script = json.loads((fixture / "script.json").read_text())
    workspace = json.loads((fixture / "meta.json").read_text())["cwd"]
    turns = [*script["turns"][:1], {"content": [tool_use("bash", {"command": "echo a", "description": "a"}),
                                                tool_use("read", {"filePath": f"{workspace}/notes.txt"})]},
             {"content": [text(LONG_ANSWER)]}]
    model = ScriptedModel(turns, seed=script["seed"])
    with model.serve() as url:
        result = run(fixture, tmp_path, 1, upstream="openai-chat", upstream_url=f"{url}/v1")
    assert result.failure is None, result.failure
    events_path = Path(result.output_dir or "") / "native" / "continued" / "events.jsonl"
    events = [json.loads(line) for line in events_path.read_text().splitlines()]  # the final event > 64 KiB, whole
    assert [e["type"] for e in events][-2:] == ["text", "step_finish"] and events[-2]["part"]["text"] == LONG_ANSWER
    session = next((Path(result.output_dir or "") / "native" / "continued").glob("ses_*.json"))
    continued = parse_opencode(session)
    assert [c.name for c in continued.batches[1].calls] == ["bash", "read"]
    assert continued.batches[1].calls[0].historical is not None
    assert continued.batches[1].calls[0].historical.content == "a\n"


def test_idle_kill_mid_tool_keeps_the_interrupted_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool that outlives the idle limit: OpenCode is terminated mid-tool; the DB record is still exported."""
    require_runtime("1.17.11")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    monkeypatch.setenv("FORKPOINT_OPENCODE_IDLE_TIMEOUT_S", "6")
    fixture = FIXTURES / "1.17.11" / "bash_basic"
    script = json.loads((fixture / "script.json").read_text())
    turns = [*script["turns"][:1], {"content": [tool_use("bash", {"command": "sleep 60", "description": "wait"})]}]
    model = ScriptedModel(turns, seed=script["seed"])
    with model.serve() as url:
        result = run(fixture, tmp_path, 1, upstream="openai-chat", upstream_url=f"{url}/v1")
    assert result.failure is not None and "idle watchdog" in result.failure.message
    continued = next((tmp_path / "out" / "run-1" / "native" / "continued").glob("ses_*.json"))
    parts = [p for m in json.loads(continued.read_text())["messages"] for p in m["parts"] if p["type"] == "tool"]
    assert parts[-1]["state"]["status"] == "running" and parts[-1]["state"]["input"]["command"] == "sleep 60"
    assert NONCE_MARK not in continued.read_text()


@pytest.mark.parametrize("version", VERSIONS)
def test_prepare_only_and_replay_only_write_the_native_prefix(version: str, tmp_path: Path) -> None:
    require_runtime(version)
    fixture = FIXTURES / version / "files"
    prepared = run(fixture, tmp_path, 2, prepare_only=True, run_id="prepared")
    replayed = run(fixture, tmp_path, 2, replay_only=True, run_id="replayed")
    for result, phase in ((prepared, "prepared"), (replayed, "replayed")):
        assert result.failure is None and result.phase == phase and result.agent_status == "not_started"
        prefix = next((Path(result.output_dir or "") / "native" / "prefix").glob("ses_*.json"))
        cut = parse_opencode(prefix)
        original = parse_opencode(fixture / "export.json")
        assert cut.version == version and cut.session_id == original.session_id
        assert cut.batches == original.batches[:2] and cut.complete_count == 2
    observations = json.loads((Path(replayed.output_dir or "") / "observations.json").read_text())["observations"]
    assert [row["name"] for row in observations] == ["read", "edit"] and all(row["exact"] for row in observations)
