"""The probe runner: a release that hangs is killed with everything it started at the deadline."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from forkpoint.adapters import agent_spec
from forkpoint.adapters.calibration import Outcome
from forkpoint.adapters.kit.calibration import (
    RELEASE_DIFFERENCE,
    CliProbe,
    ProxySink,
    difference,
    ran_ok,
    refused_options,
    run_release,
    run_runner,
    runner_env,
    scripted_record_check,
)
from forkpoint.core.errors import ReplayError


def test_the_exit_code_and_the_stderr_head_and_tail_are_returned(tmp_path: Path) -> None:
    code, stderr = run_release(["/bin/sh", "-c", "echo start >&2; head -c 50000 /dev/zero | tr '\\0' x >&2; "
                                                 "echo end >&2; exit 3"], {"PATH": "/usr/bin:/bin"}, tmp_path, "probe")
    assert code == 3 and stderr.startswith(b"start\nxxx") and stderr.endswith(b"xend\n")
    assert len(stderr) <= 16384 + 5 and b"\n...\n" in stderr


#: Gemini CLI 0.35.3's real stderr on the probe's command: its refusal, then 4 KB of usage text
GEMINI_0353 = Path(__file__).parents[2] / "fixtures" / "gemini_cli" / "stderr" / "0.35.3-skip-trust.txt"


def test_a_release_refusing_an_option_fails_record_naming_the_option_before_its_usage_text(tmp_path: Path) -> None:
    # the release sweep's unnamed failure: the refusal came before the usage text, past the 2,000 bytes kept
    code, stderr = run_release(["/bin/sh", "-c", f"cat {GEMINI_0353} >&2; exit 1"], {"PATH": "/usr/bin:/bin"},
                               tmp_path, "probe session")
    outcome = Outcome("gemini-cli", "0.35.3")
    assert not ran_ok(outcome, code, stderr)
    (check,) = outcome.checks
    assert check.check == "record" and not check.ok
    assert check.detail.startswith(f"{RELEASE_DIFFERENCE}no option `--skip-trust` (forkpoint's command passes it): "
                                   "exit 1; ")


def test_the_refused_options_are_read_from_each_parsers_own_words() -> None:
    copilot = "Package extraction took 6548ms\nerror: unknown option '--disable-client-telemetry'\nTry 'copilot --help'"
    assert refused_options(copilot) == ["--disable-client-telemetry"]
    assert refused_options("x.js:15:Unknown arguments: skip-trust, skipTrust, session-file, sessionFile\nUsage: gemini"
                           ) == ["--skip-trust", "--session-file"]
    assert refused_options("Unknown argument: o\n") == ["--o"]
    assert refused_options("Error: connect ECONNREFUSED 127.0.0.1:9") == []
    outcome = Outcome("qwen-code", "0.0.1")
    assert not ran_ok(outcome, 1, b"Error: boom")
    assert outcome.checks[0].detail == "exit 1; stderr: Error: boom"  # nothing refused: nothing named
    diagnosed = Outcome("copilot-cli", "0.0.420")
    assert not ran_ok(diagnosed, 1, b"Error: boom", lambda text: "it asks for X" if "boom" in text else None)
    assert diagnosed.checks[0].detail == f"{RELEASE_DIFFERENCE}it asks for X: exit 1; stderr: Error: boom"


def test_the_proxy_sink_counts_a_request_sent_through_the_proxy_and_none_that_honours_no_proxy() -> None:
    import subprocess

    sink = ProxySink()
    try:
        env = sink.environment({"HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "x", "NO_PROXY": "127.0.0.1",
                                "PATH": "/usr/bin:/bin"})
        assert env["HTTPS_PROXY"] == env["https_proxy"] == sink.url and env["NO_PROXY"] == "127.0.0.1"
        # a client that sends everything through its proxy (as Qwen Code 0.15.6 does) reaches the sink
        subprocess.run(["curl", "-s", "-m", "5", "--noproxy", "", "-x", sink.url, "http://127.0.0.1:1/v1/chat"],
                       env=env, check=False)
        subprocess.run(["curl", "-s", "-m", "5", "--noproxy", "127.0.0.1", "http://127.0.0.1:1/"], env=env,
                       check=False)
    finally:
        sink.close()
    assert sink.hits == 1


def test_a_hanging_release_and_its_children_are_killed_at_the_deadline(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    with pytest.raises(ReplayError, match=r"did not finish within 0\.5 s"):
        run_release(["/bin/sh", "-c", f"sleep 300 & echo $! > {pid_file}; wait"], {"PATH": "/usr/bin:/bin"},
                    tmp_path, "probe", timeout=0.5)
    child = int(pid_file.read_text())
    # SIGKILL was sent to the whole group at the deadline; a killed process is still torn down asynchronously
    # (state R while it exits on a loaded machine), so wait for that, bounded, instead of reading one instant.
    deadline = time.monotonic() + 30
    while True:
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            state = "gone"
        if state in ("gone", "Z") or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert state in ("gone", "Z"), f"the release's child {child} survived ({state})"


def test_a_companion_runner_gets_its_request_and_its_result_or_its_own_error_is_read_back(tmp_path: Path) -> None:
    """The OpenHands probes' runner: request.json in, result.json out; a failed run names the runner's error last
    (the release's stderr ends in warnings), and a result behind a link is not followed."""
    # a stand-in release whose "runner" copies the request's task into its result and fails when told to
    script = ('import json, sys; r = json.load(open(sys.argv[1])); sys.stderr.write("warning\\n" * 50); '
              'json.dump({"echo": r["task"], "error": r.get("error")}, open("result.json", "w")); '
              'sys.exit(1 if r.get("error") else 0)')
    argv = [sys.executable, "-c", script]
    env = runner_env(tmp_path, PATH="/usr/bin:/bin")
    assert env["HOME"] == str(tmp_path) and env["PATH"] == "/usr/bin:/bin"
    outcome = Outcome("openhands", "0.0.0")
    assert run_runner(argv, {"task": "hi"}, env, tmp_path, "probe run", outcome) == {"echo": "hi", "error": None}
    assert outcome.checks == []
    assert run_runner(argv, {"task": "hi", "error": "boom"}, env, tmp_path, "probe run", outcome) is None
    assert outcome.checks[-1].detail.startswith("exit 1;") and outcome.checks[-1].detail.endswith("runner: boom")
    target = tmp_path / "elsewhere.json"
    target.write_text('{"echo": "planted"}')
    planted = [sys.executable, "-c", "import os; os.remove('result.json'); os.symlink('elsewhere.json', 'result.json')"]
    assert run_runner(planted, {}, env, tmp_path, "probe run", Outcome("openhands", "0.0.0")) == {}


def test_the_bridge_verdict_log_counts_when_a_failed_result_carries_no_bridge_summary(tmp_path: Path) -> None:
    """mini-swe-agent 2.2's agent asks for a new step limit once the check's budget is spent (EOFError): the run
    fails after the gate validated its first request, and that verdict is read from the run's own log."""
    from forkpoint.adapters.kit.calibration import _verdicts

    log = tmp_path / "state" / "calibrate" / "bridge-log.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text('{"verdict": "ok"}\n{"verdict": "local"}\nnot json\n{"verdict": "refused"}\n[1]\n')
    assert _verdicts(tmp_path / "state") == (1, 1)
    assert _verdicts(tmp_path / "nothing") == (0, 0)


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
#: each CLI probe's script is its re-record script's: the verified release's fixture of it must pass the record check
CLI_FIXTURES = {"gemini-cli": "gemini_cli/0.61.0/tools", "qwen-code": "qwen_code/0.24.4/tools",
                "copilot-cli": "copilot_cli/1.0.102/tools"}


def _cli(agent: str) -> CliProbe:
    from importlib import import_module

    cli: CliProbe = import_module(f"forkpoint.adapters.{agent.replace('-', '_')}.calibrate").CLI
    return cli


@pytest.mark.parametrize("agent", sorted(CLI_FIXTURES))
def test_a_cli_probes_expected_error_flags_are_what_its_verified_release_recorded(agent: str,
                                                                                  tmp_path: Path) -> None:
    """The probe's turns and its expected error flags line up call for call, and the verified release's recording of
    the same script (the fixture) passes the record check read through the agent's parser."""
    cli = _cli(agent)
    turns = cli.turns(tmp_path)
    assert [sum(b.get("type") == "tool_use" for b in turn) for turn in turns[:-1]] == list(map(len, cli.errors))
    assert all(b.get("type") != "tool_use" for b in turns[-1])
    outcome = Outcome(agent, "0.0.1")
    assert scripted_record_check(agent_spec(agent), FIXTURES / CLI_FIXTURES[agent] / "session.jsonl", cli.errors,
                                 outcome, "fixture"), outcome.report()


@pytest.mark.parametrize("agent", sorted(CLI_FIXTURES))
def test_a_recording_with_a_changed_error_flag_or_a_missing_call_fails_the_record_check(agent: str) -> None:
    """A release that flags a failing call as a success (or the reverse), or records fewer batches than scripted,
    fails the record check naming the call."""
    from forkpoint.adapters import get_adapter

    cli, session = _cli(agent), FIXTURES / CLI_FIXTURES[agent] / "session.jsonl"
    last = get_adapter(agent).parse(session).batches[len(cli.errors) - 1].calls[-1].call_id
    flipped = [*cli.errors[:-1], [*cli.errors[-1][:-1], not cli.errors[-1][-1]]]
    outcome = Outcome(agent, "0.0.1")
    assert not scripted_record_check(agent_spec(agent), session, flipped, outcome, "fixture")
    assert outcome.checks[-1].detail.endswith(f"a wrong error flag (or unscripted) for ['{last}']")
    assert outcome.reason == "the probe session did not complete as scripted"
    longer = Outcome(agent, "0.0.1")
    assert not scripted_record_check(agent_spec(agent), session, [*cli.errors, [False]], longer, "fixture")
    assert f"no result for ['batch {len(cli.errors) + 1} call 1']" in longer.checks[-1].detail
    shorter = Outcome(agent, "0.0.1")
    assert not scripted_record_check(agent_spec(agent), session, cli.errors[:-1], shorter, "fixture")
    assert f"(or unscripted) for ['{last}']" in shorter.checks[-1].detail


def test_a_differing_observation_is_shown_where_it_differs_not_by_its_equal_head() -> None:
    """Measured on Qwen Code 0.23.4: the shell output differs after 60 equal characters (ls in columns: a pty)."""
    head = '{"output":"Command: sleep 0.2; ls; cat notes.txt\\nDirectory: (root)\\nOutput: greet.py'
    row = {"historical_preview": {"text": head + '  notes.txt  src\\ntodo"}'},
           "fresh_preview": {"text": head + '\\nnotes.txt\\nsrc\\ntodo"}'}}
    shown = difference(row)
    assert "greet.py  notes.txt  src" in shown and "greet.py\\\\nnotes.txt\\\\nsrc" in shown
    assert shown.startswith("recorded '…") and "Command: sleep" not in shown
