"""End to end: ``forkpoint agents calibrate`` on REAL unshipped releases of every npm agent (issue 28, item 4).

Claude Code 2.1.331 (not verified) is installed into the runtime cache and calibrated once per test session into
a private calibration store; ScriptedModel is the model (the only stand-in). A recording the release makes is
then replayed with ``recorded_version_status: calibrated`` (quality not degraded) and continued by a verified
binary; a calibration that cannot match fails with its report and changes nothing.

Two releases per npm agent (Claude Code 2.1.331/2.1.318, Codex 0.169.1/0.40.0, OpenCode 1.18.32/1.2.6, Pi
0.84.0/0.82.0, Qwen Code 0.24.3/0.24.2, Gemini CLI 0.60.0/0.51.0, Copilot CLI 1.0.92/1.0.82), each calibrated ONCE
per run (``calibrated``) and inspected by every test that needs it; Gemini CLI 0.51.0 (its resume), Qwen Code 0.24.2
(a shell call's text) and Copilot CLI 1.0.82 (its resume) must FAIL, each naming its difference, and write no
profile. scripts/test.sh installs these releases (cached), so the tests' time is the calibrations'."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.adapters import calibration
from forkpoint.adapters.calibrate import calibrate
from forkpoint.adapters.calibration import Outcome
from forkpoint.adapters.claude_code.calibrate import _env, _session_file
from forkpoint.adapters.kit.calibration import restore_files
from forkpoint.adapters.kit.calibration import run_release as _run
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request
from forkpoint.testing import ScriptedModel
from forkpoint.testing.scripted_model import text, tool_use

pytestmark = pytest.mark.e2e

RELEASE = "2.1.331"  # a real release between the verified 2.1.220 and 2.1.332, shipped by no forkpoint release


@pytest.fixture(scope="module")  # its env change ends with this module
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This module's calibration store (``FORKPOINT_CALIBRATIONS``), with RELEASE calibrated once."""
    if runtimes.find("claude-code", RELEASE) is None and shutil.which("npm") is None:
        pytest.skip(f"claude-code {RELEASE} is not installed and npm is missing")
    previous = os.environ.get("FORKPOINT_CALIBRATIONS")
    folder = tmp_path_factory.mktemp("calibrations")
    os.environ["FORKPOINT_CALIBRATIONS"] = str(folder)
    try:
        outcome = calibrate(f"claude-code@{RELEASE}")
        assert outcome.ok, outcome.report()
        yield folder
    finally:
        if previous is None:
            os.environ.pop("FORKPOINT_CALIBRATIONS", None)
        else:
            os.environ["FORKPOINT_CALIBRATIONS"] = previous


@pytest.fixture(scope="module")
def calibrated(store: Path) -> Callable[[str], Outcome]:
    """Each ``AGENT@RELEASE`` calibrated ONCE per run into this module's store, its outcome shared by every test
    that inspects it (a calibration costs 5-50 s of the release's start-ups: CI's budget)."""
    done: dict[str, Outcome] = {}

    def get(target: str) -> Outcome:
        if target not in done:
            agent, release = target.split("@")
            if runtimes.find(agent, release) is None and shutil.which("npm") is None:
                pytest.skip(f"{agent} {release} is not installed and npm is missing")
            done[target] = calibrate(target)
        return done[target]

    return get


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forkpoint.cli", *args], capture_output=True, text=True,
                          timeout=600, check=False)


def test_the_release_is_calibrated_against_the_nearest_profile_and_listed(store: Path) -> None:
    profile = json.loads((store / "claude-code" / f"{RELEASE}.json").read_text())
    assert (profile["status"], profile["maps_to"]) == ("calibrated", "2.1.332")
    checks = {(c["check"], c["against"]): c["ok"] for c in profile["checked"]}
    assert checks[("parse", None)] and checks[("tool_observations", "2.1.332")]
    assert checks[("resume_envelope", "2.1.332")]
    probe = store / "claude-code" / f"{RELEASE}.probe"  # the release's own native session and requests
    assert f'"version":"{RELEASE}"' in (probe / "session.jsonl").read_text()
    requests = [json.loads(line) for line in (probe / "requests.jsonl").read_text().splitlines()]
    assert sum(1 for r in requests if r["kind"] == "main") == 7
    assert "sha256" in requests[-1]["body"]["system"] and (probe / "resume-requests.jsonl").is_file()
    record = next(c for c in profile["checked"] if c["check"] == "record")
    assert "8 tool calls, large output persisted to tool-results/" in record["detail"]
    assert "| tool_observations | 2.1.332 | ok | 8 of 8 observations exact |" in \
        (store / "claude-code" / f"{RELEASE}.report.md").read_text()
    listing = _cli("agents", "list")
    assert listing.returncode == 0, listing.stderr
    assert f"  {RELEASE}: calibrated (as 2.1.332)" in listing.stdout.splitlines()
    rows = json.loads(_cli("agents", "list", "--json").stdout)
    row = next(r for r in rows if (r["agent"], r["version"]) == ("claude-code", RELEASE))
    assert (row["status"], row["detail"]) == ("calibrated", "as 2.1.332")


def _record(tmp_path: Path) -> tuple[Path, Path, list[list[dict[str, object]]]]:
    """A real session of the calibrated release: one Bash call, then an answer."""
    runtime = runtimes.find("claude-code", RELEASE)
    assert runtime is not None
    cwd, home = tmp_path / "ws", tmp_path / "home"
    cwd.mkdir()
    (cwd / "notes.txt").write_text("calibrated\n")
    turns = [[tool_use("Bash", {"command": "cat notes.txt", "description": "Show notes"})], [text("It says so.")]]
    with ScriptedModel(turns, seed="calibrated-recording").serve() as url:
        code, stderr = _run([str(runtime.entrypoint), "-p", "Show the notes.", "--output-format", "stream-json",
                             "--verbose", "--dangerously-skip-permissions"], _env(home, url), cwd, "recording")
    assert code == 0, stderr
    return _session_file(home, cwd), cwd, turns


def test_a_recording_of_the_release_replays_and_continues_as_calibrated(
        store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session, cwd, turns = _record(tmp_path)
    assert f'"version":"{RELEASE}"' in session.read_text()
    values = {"agent": "claude-code", "trajectory": str(session), "after_step": 1, "workspace": str(cwd),
              "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out")}
    replayed = execute(build_request({**values, "run_id": "replay", "replay_only": True}, source="test"))
    assert replayed.failure is None, replayed.failure
    assert (replayed.recorded_version, replayed.recorded_version_status) == (RELEASE, "calibrated")
    assert replayed.quality == "verified" and replayed.quality_reasons == []
    assert replayed.agent is not None and replayed.agent.tool_semantics_version == "2.1.332"
    assert replayed.metadata["exact_observations"] == replayed.metadata["compared_observations"] == 1
    if runtimes.find("claude-code", "2.1.332") is None:
        pytest.skip("claude-code 2.1.332 is not installed (the continuing binary)")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "scripted-upstream-key")
    model = ScriptedModel(turns, seed="calibrated-recording")
    with model.serve() as url:
        continued = execute(build_request({**values, "run_id": "continue", "upstream": "anthropic",
                                           "upstream_url": url}, source="test"))
    assert continued.failure is None, continued.failure
    assert (continued.phase, continued.quality, continued.agent_status) == ("continued", "verified", "completed")
    assert continued.recorded_version_status == "calibrated"
    assert continued.metadata["continuing_agent_version"] == "2.1.332"
    assert continued.metadata["model_bridge"]["validated"] >= 1 and continued.metadata["model_bridge"]["refused"] == 0


def test_a_calibration_that_does_not_match_fails_with_its_report_and_changes_nothing(store: Path) -> None:
    """Against 2.1.220 the release's resume envelope differs (no closure text): the run fails, says why, and the
    profile written by the successful calibration is left byte for byte."""
    profile = store / "claude-code" / f"{RELEASE}.json"
    before = profile.read_bytes()
    session_before = (store / "claude-code" / f"{RELEASE}.probe" / "session.jsonl").read_bytes()
    result = _cli("agents", "calibrate", f"claude-code@{RELEASE}", "--against", "2.1.220")
    assert result.returncode == 11, result.stdout + result.stderr
    assert "| resume_envelope | 2.1.220 | DIFFERS | the gate refuses it" in result.stdout
    assert "Continue from where you left off." in result.stdout
    assert profile.read_bytes() == before
    assert (store / "claude-code" / f"{RELEASE}.probe" / "session.jsonl").read_bytes() == session_before
    assert (store / "claude-code" / f"{RELEASE}.failed-probe" / "session.jsonl").is_file()
    failed = json.loads((store / "claude-code" / f"{RELEASE}.failed.json").read_text())
    assert failed["status"] == "failed" and "tried 2.1.220" in failed["reason"]
    listing = _cli("agents", "list").stdout
    assert f"  {RELEASE}: calibrated (as 2.1.332; the last re-run failed:" in listing


def test_a_broken_install_fails_before_any_profile(store: Path, tmp_path: Path) -> None:
    broken = tmp_path / "claude"
    broken.write_text("#!/bin/sh\necho 'claude: corrupted install' >&2\nexit 3\n")
    broken.chmod(0o755)
    outcome: Outcome = calibrate("claude-code@2.1.330", install=lambda agent, version: broken)
    assert not outcome.ok and outcome.reason == "the probe session did not complete as scripted"
    assert "corrupted install" in outcome.report()
    assert not calibration.profile_path("claude-code", "2.1.330").exists()
    assert "  2.1.330: failed (the probe session did not complete as scripted)" in _cli("agents", "list").stdout


CODEX_RELEASE = "0.169.1"  # between the verified 0.149.0 and 0.171.0


def test_a_codex_release_is_calibrated_and_a_mismatching_profile_fails(store: Path) -> None:
    """Codex 0.169.1 maps to 0.171.0 (exec_command, apply_patch, a large output, an error, exec resume); checked
    only against 0.149.0 its resume envelope differs and the run fails without touching the profile."""
    if runtimes.find("codex", CODEX_RELEASE) is None and shutil.which("npm") is None:
        pytest.skip(f"codex {CODEX_RELEASE} is not installed and npm is missing")
    outcome = calibrate(f"codex@{CODEX_RELEASE}")
    assert (outcome.ok, outcome.maps_to) == (True, "0.171.0"), outcome.report()
    assert {(c.check, c.against, c.ok) for c in outcome.checks} >= {
        ("tool_observations", "0.171.0", True), ("resume_envelope", "0.171.0", True)}
    profile = store / "codex" / f"{CODEX_RELEASE}.json"
    before = profile.read_bytes()
    failed = calibrate(f"codex@{CODEX_RELEASE}", against="0.149.0")
    assert not failed.ok and "| resume_envelope | 0.149.0 | DIFFERS | the gate refuses it" in failed.report()
    assert profile.read_bytes() == before
    assert f"  {CODEX_RELEASE}: calibrated (as 0.171.0; the last re-run failed:" in _cli("agents", "list").stdout


def _own_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent: str, release: str, needs: str) -> Path:
    own_uv = runtimes.cache_root() / ".tools" / "uv" / "bin" / "uv"  # forkpoint's own uv (runtimes.python)
    if runtimes.find(agent, release) is None and shutil.which(needs) is None \
            and not (needs == "uv" and own_uv.is_file()):
        pytest.skip(f"{agent} {release} is not installed and {needs} is missing")
    monkeypatch.setenv("FORKPOINT_CALIBRATIONS", str(tmp_path / "calibrations"))
    return tmp_path / "calibrations"


def test_a_pi_release_is_calibrated_through_a_continuation_by_its_own_sdk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pi 0.84.0 (not shipped): its session reads (it names no Pi version), its read/write/edit/bash calls re-run
    exactly with 0.83.0's tools, and the 0.84.0 SDK resuming a session rebuilt with 0.83.0's profile passes that
    profile's gate."""
    store = _own_store(tmp_path, monkeypatch, "pi", "0.84.0", "npm")
    outcome = calibrate("pi@0.84.0")
    assert (outcome.ok, outcome.maps_to, outcome.family) == (True, "0.83.0", "pi/session-v3-jsonl"), outcome.report()
    checks = {(c.check, c.against): (c.ok, c.detail) for c in outcome.checks}
    assert checks[("tool_observations", "0.83.0")] == (True, "9 of 9 observations exact")
    assert checks[("resume_envelope", "0.83.0")][0]
    assert "version (not recorded), 9 calls" in checks[("parse", None)][1]
    assert json.loads((store / "pi" / "0.84.0.json").read_text())["maps_to"] == "0.83.0"
    assert b'"toolCallId":"call_cal_4"' in (store / "pi" / "0.84.0.probe" / "session.jsonl").read_bytes()


def test_a_mini_swe_agent_release_is_calibrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mini-swe-agent 2.3.1 (a PyPI release, installed on the Python of its line) maps to 2.4.6: parallel bash
    calls, a long output, errors and a timeout re-run exactly, and the companion in its venv continues the rebuilt
    prefix through 2.4.6's gate (its loop counts no consecutive format errors, unlike 2.4's). A calibration that
    must fail is tested above (Claude Code, Codex) and below (Gemini CLI, Copilot CLI)."""
    store = _own_store(tmp_path, monkeypatch, "mini-swe-agent", "2.3.1", "uv")
    outcome = calibrate("mini-swe-agent@2.3.1")
    assert (outcome.ok, outcome.maps_to, outcome.family) == (True, "2.4.6", "mini-swe-agent-1.1"), outcome.report()
    assert ("tool_observations", "2.4.6", True, "7 of 7 observations exact") in {
        (c.check, c.against, c.ok, c.detail) for c in outcome.checks}
    assert (store / "mini-swe-agent" / "2.3.1.json").is_file()
    assert "  2.3.1: calibrated (as 2.4.6)" in _cli("agents", "list").stdout.splitlines()


@pytest.mark.skipif(os.environ.get("FORKPOINT_SLOW_CALIBRATIONS") != "1",
                    reason="a second mini-swe-agent line (~20 s): FORKPOINT_SLOW_CALIBRATIONS=1")
def test_a_mini_swe_agent_1_15_release_is_calibrated_in_its_whole_message_form(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """1.15.0 sends each stored message whole (the ``extra`` key 1.17.5 drops): the gate judges a request by the
    SENDING release's wire form, so 1.15.0 maps to 1.17.5 (it failed with "unexpected 'extra'" before). Outside
    CI's budget: that form is checked on 1.15.0's real requests by tests/adapters/mini_swe_agent/test_gate.py."""
    store = _own_store(tmp_path, monkeypatch, "mini-swe-agent", "1.15.0", "uv")
    old = calibrate("mini-swe-agent@1.15.0")
    assert (old.ok, old.maps_to) == (True, "1.17.5"), old.report()
    assert ("tool_observations", "1.17.5", True, "7 of 7 observations exact") in {
        (c.check, c.against, c.ok, c.detail) for c in old.checks}
    assert json.loads((store / "mini-swe-agent" / "1.15.0.json").read_text())["maps_to"] == "1.17.5"
    assert "  1.15.0: calibrated (as 1.17.5)" in _cli("agents", "list").stdout.splitlines()


def test_codex_040_is_calibrated_with_its_shell_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Codex 0.40.0 has no exec_command: the probe drives its argv ``shell`` tool (one call a turn, a large output,
    an error), every observation re-runs exactly with the 0.40 shell profile, and its ``exec resume`` request
    passes 0.149.0's gate: it maps to 0.149.0."""
    store = _own_store(tmp_path, monkeypatch, "codex", "0.40.0", "npm")
    outcome = calibrate("codex@0.40.0")
    assert (outcome.ok, outcome.maps_to) == (True, "0.149.0"), outcome.report()
    assert {(c.check, c.against, c.ok) for c in outcome.checks} >= {
        ("tool_observations", "0.149.0", True), ("resume_envelope", "0.149.0", True)}
    assert (store / "codex" / "0.40.0.json").is_file()


def test_a_qwen_code_release_is_calibrated_through_a_continuation_and_listed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Qwen Code 0.24.3 (not shipped; the cheapest of the npm CLIs to probe, ~25 s): its session names 0.24.3 and
    reads with every call, its write/shell/read/glob/edit/grep calls and a failing read re-run exactly with 0.24.4's
    tools, and the 0.24.3 CLI resuming a session rebuilt with 0.24.4's profile passes that profile's gate."""
    store = _own_store(tmp_path, monkeypatch, "qwen-code", "0.24.3", "npm")
    outcome = calibrate("qwen-code@0.24.3")
    assert (outcome.ok, outcome.maps_to, outcome.family) == (True, "0.24.4", "qwen-code/chat-recording-jsonl"), \
        outcome.report()
    checks = {(c.check, c.against): (c.ok, c.detail) for c in outcome.checks}
    assert checks[("tool_observations", "0.24.4")] == (True, "7 of 7 observations exact")
    assert checks[("resume_envelope", "0.24.4")][0]
    assert "version 0.24.3, 7 calls" in checks[("parse", None)][1]
    assert json.loads((store / "qwen-code" / "0.24.3.json").read_text())["maps_to"] == "0.24.4"
    assert b'"version":"0.24.3"' in (store / "qwen-code" / "0.24.3.probe" / "session.jsonl").read_bytes()
    assert "  0.24.3: calibrated (as 0.24.4)" in _cli("agents", "list").stdout.splitlines()


@pytest.mark.parametrize(("release", "shell"), [("0.40.0", True), ("0.145.0", False)])
def test_the_codex_probe_scripts_the_tool_the_release_offers(release: str, shell: bool, tmp_path: Path) -> None:
    """The probe asks the release which tool it offers (its first request's tools): 0.145.0 offers exec_command
    and answers ``unsupported call: shell``, 0.40.0 its argv ``shell`` (the change is 0.96.0:
    ``tools.SHELL_JSON_BEFORE``, bisected with this listing)."""
    from forkpoint.adapters.codex.calibrate import FILES, _offers_shell
    from forkpoint.adapters.kit.calibration import restore_files

    if runtimes.find("codex", release) is None and shutil.which("npm") is None:
        pytest.skip(f"codex {release} is not installed and npm is missing")
    entrypoint = runtimes.install_release("codex", release).entrypoint
    workspace = tmp_path / "workspace"
    restore_files(workspace, FILES)
    assert _offers_shell(entrypoint, workspace, tmp_path / "home") is shell


def _listed(agent: str) -> list[str]:
    """``agents list``'s lines under ``agent``'s heading (the statuses of its installed runtimes)."""
    lines = _cli("agents", "list").stdout.splitlines()
    start = lines.index(next(line for line in lines if line.startswith(f"{agent}: ")))
    return list(itertools.takewhile(lambda line: line.startswith("  "), lines[start + 1:]))


@pytest.mark.parametrize(("release", "maps_to", "tools"), [
    ("1.18.32", "1.18.33", None), ("1.2.6", "1.17.11", "opencode 1.2 (measured on 1.2.6)")])
def test_opencode_releases_of_both_lines_are_calibrated_and_listed(
        release: str, maps_to: str, tools: str | None, store: Path, calibrated: Callable[[str], Outcome]) -> None:
    """OpenCode 1.18.32 maps to 1.18.33; 1.2.6, a line whose tool texts differ (``tool_profile.LINES``), maps to
    1.17.11 with its calls re-run by its own binary: ten calls (parallel bash/read/write, edit/glob/grep, a cut
    read, a missing file, a failing edit, a long output) re-run exactly, and the release resuming its own export
    rebuilt with the candidate's profile passes that profile's gate."""
    outcome = calibrated(f"opencode@{release}")
    assert (outcome.ok, outcome.maps_to, outcome.tool_profile) == (True, maps_to, tools), outcome.report()
    checks = {(c.check, c.against): (c.ok, c.detail) for c in outcome.checks}
    assert checks[("tool_observations", maps_to)] == (True, "10 of 10 observations exact")
    assert checks[("resume_envelope", maps_to)][0]
    assert f"version {release}, 10 calls" in checks[("parse", None)][1]
    profile = json.loads((store / "opencode" / f"{release}.json").read_text())
    assert (profile["status"], profile["maps_to"]) == ("calibrated", maps_to)
    export = json.loads((store / "opencode" / f"{release}.probe" / "export.json").read_text())
    assert export["info"]["version"] == release  # the release's own recording, kept beside the profile
    shown = f"  {release}: calibrated (as {maps_to}" + (f", tools as {tools})" if tools else ")")
    assert shown in _listed("opencode")


def test_a_recording_of_an_opencode_release_replays_as_calibrated(
        store: Path, calibrated: Callable[[str], Outcome], tmp_path: Path) -> None:
    """The export 1.18.32 wrote during its calibration, replayed up to its first batch (parallel bash, read,
    write): read as ``calibrated`` with 1.18.33's tool semantics, quality not degraded, every observation
    exact."""
    from forkpoint.adapters.opencode.calibrate import FILES

    assert calibrated("opencode@1.18.32").ok
    recording = store / "opencode" / "1.18.32.probe" / "export.json"
    export = json.loads(recording.read_text())
    workspace = restore_files(Path(export["info"]["directory"]), FILES)  # the probe's cwd, gone with its scratch
    try:
        replayed = execute(build_request({
            "agent": "opencode", "trajectory": str(recording), "after_step": 1, "workspace": str(workspace),
            "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"), "run_id": "replay",
            "replay_only": True}, source="test"))
    finally:
        shutil.rmtree(workspace.parent)
    assert replayed.failure is None, replayed.failure
    assert (replayed.recorded_version, replayed.recorded_version_status) == ("1.18.32", "calibrated")
    assert replayed.quality == "verified" and replayed.quality_reasons == []
    assert replayed.agent is not None and replayed.agent.tool_semantics_version == "1.18.33"
    assert replayed.metadata["exact_observations"] == replayed.metadata["compared_observations"] == 3


def test_a_gemini_cli_release_is_calibrated_and_an_older_one_fails_naming_its_resume(
        store: Path, calibrated: Callable[[str], Outcome]) -> None:
    """Gemini CLI 0.60.0 maps to 0.61.0 (eight calls re-run exactly, its resume passes 0.61.0's gate). 0.51.0's
    tools are exact too, but its resume neither merges consecutive contents of one role nor adds the interrupted
    model content 0.61.0 sends: the calibration FAILS naming the resume envelope, and writes no profile."""
    outcome = calibrated("gemini-cli@0.60.0")
    assert (outcome.ok, outcome.maps_to, outcome.family) == (True, "0.61.0", "gemini-cli/chat-recording-jsonl"), \
        outcome.report()
    assert ("tool_observations", "0.61.0", True, "8 of 8 observations exact") in {
        (c.check, c.against, c.ok, c.detail) for c in outcome.checks}
    assert json.loads((store / "gemini-cli" / "0.60.0.json").read_text())["maps_to"] == "0.61.0"
    failed = calibrated("gemini-cli@0.51.0")
    assert not failed.ok and failed.reason == (
        "no verified version's tool semantics and resume envelope both match (tried 0.61.0)")
    report = (store / "gemini-cli" / "0.51.0.report.md").read_text()
    assert "| tool_observations | 0.61.0 | ok | 8 of 8 observations exact |" in report
    assert "| resume_envelope | 0.61.0 | DIFFERS | the gate refuses it: " in report
    assert "the contents before the resume nonce are not Gemini CLI's resume envelope" in report
    assert not (store / "gemini-cli" / "0.51.0.json").exists()
    assert json.loads((store / "gemini-cli" / "0.51.0.failed.json").read_text())["status"] == "failed"
    listed = _listed("gemini-cli")
    assert "  0.60.0: calibrated (as 0.61.0)" in listed
    assert any(line.startswith("  0.51.0: failed (no verified version's tool semantics") for line in listed)


def test_a_copilot_cli_release_without_the_continuation_options_is_calibrated_and_an_older_one_fails(
        store: Path, calibrated: Callable[[str], Outcome]) -> None:
    """Copilot CLI 1.0.92 has no ``--disable-client-telemetry`` (the verified 1.0.102's continuation passes it): the
    calibration runs it without the options ``COPILOT_OFFLINE`` makes redundant, read from its own ``--help``, and it
    maps to 1.0.102 (twelve calls exact, its resume passes the gate). 1.0.82's tools are exact too, but its resume
    puts a ``<system_reminder>`` beside the nonce: the calibration FAILS naming the resume envelope, no profile."""
    outcome = calibrated("copilot-cli@1.0.92")
    assert (outcome.ok, outcome.maps_to) == (True, "1.0.102"), outcome.report()
    assert ("tool_observations", "1.0.102", True, "12 of 12 observations exact") in {
        (c.check, c.against, c.ok, c.detail) for c in outcome.checks}
    assert json.loads((store / "copilot-cli" / "1.0.92.json").read_text())["maps_to"] == "1.0.102"
    failed = calibrated("copilot-cli@1.0.82")
    assert not failed.ok and failed.reason == (
        "no verified version's tool semantics and resume envelope both match (tried 1.0.102)"), failed.report()
    report = (store / "copilot-cli" / "1.0.82.report.md").read_text()
    assert "| tool_observations | 1.0.102 | ok | 12 of 12 observations exact |" in report
    assert "| resume_envelope | 1.0.102 | DIFFERS | the gate refuses it: " in report
    assert not (store / "copilot-cli" / "1.0.82.json").exists()
    listed = _listed("copilot-cli")
    assert "  1.0.92: calibrated (as 1.0.102)" in listed
    assert any(line.startswith("  1.0.82: failed (no verified version's tool semantics") for line in listed)


@pytest.mark.parametrize(("agent", "release", "maps_to", "calls"), [
    ("claude-code", "2.1.318", "2.1.332", 8), ("pi", "0.82.0", "0.83.0", 9)])
def test_a_second_release_of_each_agent_is_calibrated_and_listed(
        agent: str, release: str, maps_to: str, calls: int, store: Path,
        calibrated: Callable[[str], Outcome]) -> None:
    """A second unshipped release of the agents above with one (Claude Code 2.1.331, Pi 0.84.0): every probe call
    re-runs exactly with the verified version's tools and the release's resume passes its gate."""
    outcome = calibrated(f"{agent}@{release}")
    assert (outcome.ok, outcome.maps_to) == (True, maps_to), outcome.report()
    assert ("tool_observations", maps_to, True, f"{calls} of {calls} observations exact") in {
        (c.check, c.against, c.ok, c.detail) for c in outcome.checks}
    assert ("resume_envelope", maps_to, True) in {(c.check, c.against, c.ok) for c in outcome.checks}
    assert json.loads((store / agent / f"{release}.json").read_text())["maps_to"] == maps_to
    assert f"  {release}: calibrated (as {maps_to})" in _listed(agent)


def test_a_qwen_code_release_whose_shell_runs_on_a_terminal_fails_naming_the_call(
        store: Path, calibrated: Callable[[str], Outcome]) -> None:
    """Qwen Code 0.24.2 (the release before 0.24.3) runs ``run_shell_command`` on a terminal: its recorded ``ls``
    lists the files in columns, 0.24.4's tools one a line. The calibration FAILS naming that call and both texts,
    its resume still validated, and writes no profile."""
    failed = calibrated("qwen-code@0.24.2")
    assert not failed.ok and failed.reason == (
        "no verified version's tool semantics and resume envelope both match (tried 0.24.4)"), failed.report()
    checks = {(c.check, c.against): (c.ok, c.detail) for c in failed.checks}
    assert checks[("resume_envelope", "0.24.4")][0]
    ok, detail = checks[("tool_observations", "0.24.4")]
    assert not ok and detail.startswith("6 of 7 observations exact; differ: run_shell_command ")
    assert re.search(r"recorded '.*Output: greet\.py  notes\.txt  src.*fresh '.*Output: greet\.py\\+nnotes\.txt\\+nsrc",
                     detail), detail  # columns, then one name a line (the texts are shown as reprs)
    assert "| tool_observations | 0.24.4 | DIFFERS | 6 of 7 observations exact; differ: run_shell_command" in \
        (store / "qwen-code" / "0.24.2.report.md").read_text()
    assert not (store / "qwen-code" / "0.24.2.json").exists()
    assert (store / "qwen-code" / "0.24.2.failed-probe" / "session.jsonl").is_file()
    assert any(line.startswith("  0.24.2: failed (no verified version's") for line in _listed("qwen-code"))
