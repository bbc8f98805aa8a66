"""The real `forkpoint` console script, run as a process: help, inspect JSON shape, replay, exit codes."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forkpoint.testing.claude_sessions import simple_session

_PYTHON = (sys.version_info[0], sys.version_info[1])


def forkpoint(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "forkpoint.cli", *args],
        capture_output=True, text=True, cwd=cwd, timeout=60, check=False,
    )


@pytest.fixture()
def session(tmp_path: Path) -> Path:
    return simple_session(3).write(tmp_path / "session.jsonl")


def test_help_teaches_the_commands() -> None:
    top = forkpoint("--help")
    assert top.returncode == 0
    for word in ("inspect", "replay", "agents", "boundary"):
        assert word in top.stdout
    replay = forkpoint("replay", "--help")
    for flag in ("--after-step", "--prepare-only", "--replay-only", "--allow-stale-observations",
                 "--boundary-user-prompt", "--config", "--request", "--json", "--max-steps"):
        assert flag in replay.stdout


def test_inspect_json_shape(session: Path) -> None:
    done = forkpoint("inspect", str(session), "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert {"agent", "version", "session_id", "cwd", "batches", "incomplete_tail"} <= set(document)
    assert document["agent"] == "claude-code"  # detected without --agent
    assert document["incomplete_tail"] is False
    assert [b["ordinal"] for b in document["batches"]] == [1, 2, 3]
    call = document["batches"][0]["calls"][0]
    assert {"id", "name", "input", "observation_bytes", "stale"} <= set(call)
    assert call["name"] == "Bash" and call["input"] == {"command": "echo 1"}
    assert call["observation_bytes"] == 2 and call["stale"] is False


def test_inspect_table_names_the_valid_range(session: Path) -> None:
    done = forkpoint("inspect", str(session))
    assert done.returncode == 0
    assert "valid --after-step: 1..3" in done.stdout
    assert "echo 2" in done.stdout


def test_inspect_refuses_unreadable_input(tmp_path: Path) -> None:
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    done = forkpoint("inspect", str(junk), "--json")
    assert done.returncode == 2
    assert "pass --agent" in json.loads(done.stdout)["failure"]["message"]
    done = forkpoint("inspect", str(junk), "--agent", "claude-code")
    assert done.returncode == 10 and "invalid JSON at line 1" in done.stderr


def test_replay_prepare_only_prints_one_json_line(session: Path, tmp_path: Path) -> None:
    done = forkpoint(
        "replay", "--agent", "claude-code", "--trajectory", str(session), "--after-step", "1",
        "--prepare-only", "--output-dir", str(tmp_path / "out"), "--state-dir", str(tmp_path / "state"),
        "--run-id", "cli-run", "--json", cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["phase"] == "prepared" and result["run_id"] == "cli-run"
    assert (tmp_path / "out" / "cli-run" / "native" / "prefix" / "session-1.jsonl").is_file()


def test_replay_human_summary_and_exit_code(session: Path, tmp_path: Path) -> None:
    ok = forkpoint("replay", "--agent", "claude-code", "--trajectory", str(session), "--after-step", "2",
                   "--prepare-only", cwd=tmp_path)
    assert ok.returncode == 0
    assert "prepared claude-code run" in ok.stdout and "native_prefix" in ok.stdout
    assert (tmp_path / "forkpoint-out" / "runs").is_dir()
    bad = forkpoint("replay", "--agent", "claude-code", "--trajectory", str(session), "--after-step", "7",
                    "--prepare-only", cwd=tmp_path)
    assert bad.returncode == 10
    assert "requested after-step 7, trajectory has 3 complete batches" in bad.stderr


def test_branches_with_drop_snapshot_are_refused_before_any_tool_runs(session: Path, tmp_path: Path) -> None:
    """Branches continue from the boundary snapshot: dropping it was an internal KeyError after the tools ran."""
    (tmp_path / "ws").mkdir()
    done = forkpoint("replay", "--agent", "claude-code", "--trajectory", str(session), "--after-step", "1",
                     "--workspace", "ws", "--branches", "2", "--drop-snapshot", "--upstream", "stub", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "--drop-snapshot" in done.stderr and "cannot be combined with branches" in done.stderr
    assert not (tmp_path / "forkpoint-out").exists()  # refused before a run id, a run dir or a tool


def test_an_unverified_version_is_inspected_prepared_and_refused_on_request(tmp_path: Path) -> None:
    """Issue 28: inspect names the version's status and profile; the summary line says the run is degraded by it;
    --require-verified-version (flag and TOML key) restores exit 11 and writes nothing."""
    old = simple_session(2, version="2.0.27").write(tmp_path / "old.jsonl")
    described = json.loads(forkpoint("inspect", str(old), "--json").stdout)
    assert (described["recorded_version"], described["recorded_version_status"]) == ("2.0.27", "unverified")
    assert described["tool_semantics_version"] == "2.1.220" and described["version_notes"]
    table = forkpoint("inspect", str(old)).stdout
    assert "version  unverified: read as claude-code/session-jsonl" in table and "2.1.220" in table
    ok = forkpoint("replay", "--agent", "claude-code", "--trajectory", str(old), "--after-step", "2",
                   "--prepare-only", "--workspace", str(tmp_path / "absent"), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    # the measured 2.0.x tool profile re-runs the tools, and the summary names it (not the continuing 2.1.220)
    assert described["tool_profile"] == "claude-code 2.0.x (measured on 2.0.27)"
    assert ("quality degraded (unverified_version: 2.0.27, tools as claude-code 2.0.x (measured on 2.0.27))"
            in " ".join(ok.stdout.split()))
    strict = forkpoint("replay", "--agent", "claude-code", "--trajectory", str(old), "--after-step", "2",
                       "--prepare-only", "--require-verified-version", "--output-dir", str(tmp_path / "strict"),
                       cwd=tmp_path)
    assert strict.returncode == 11 and "2.0.27 is not a verified version" in strict.stderr
    workspace = tmp_path / "ws"
    workspace.mkdir()
    replayed = forkpoint("replay", "--agent", "claude-code", "--trajectory", str(old), "--after-step", "2",
                         "--replay-only", "--workspace", str(workspace), "--path-map", f"/work={workspace}",
                         "--run-id", "replayed", cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    exact = json.loads((tmp_path / "forkpoint-out" / "runs" / "replayed" / "replay-summary.json").read_text())
    assert f"({exact['exact_observations']} of 2 observations exact)" in " ".join(replayed.stdout.split())
    assert exact["recorded_version_status"] == "unverified"
    config = tmp_path / "strict.toml"
    config.write_text(f'[replay]\nagent = "claude-code"\ntrajectory = "{old}"\nafter_step = 1\nprepare_only = true\n'
                      f'require_verified_version = true\noutput_dir = "{tmp_path / "strict"}"\n')
    assert forkpoint("replay", "--config", str(config), cwd=tmp_path).returncode == 11
    assert not (tmp_path / "strict").exists()


def test_config_and_request_cannot_be_mixed_with_flags(session: Path, tmp_path: Path) -> None:
    config = tmp_path / "replay.toml"
    config.write_text(f'[replay]\nagent = "claude-code"\ntrajectory = "{session}"\nafter_step = 1\n'
                      f'prepare_only = true\noutput_dir = "out"\nstate_dir = "state"\n')
    mixed = forkpoint("replay", "--config", str(config), "--after-step", "2")
    assert mixed.returncode == 2 and "cannot be combined" in mixed.stderr
    both = forkpoint("replay", "--config", str(config), "--request", str(config))
    assert both.returncode == 2 and "mutually exclusive" in both.stderr
    ran = forkpoint("replay", "--config", str(config), "--json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["output_dir"].startswith(str(tmp_path / "out"))


def test_direct_mode_names_missing_flags() -> None:
    done = forkpoint("replay", "--agent", "claude-code")
    assert done.returncode == 2
    assert "missing --trajectory, --after-step" in done.stderr


def test_version_and_usage_errors() -> None:
    version = forkpoint("--version")
    assert version.returncode == 0 and version.stdout == "forkpoint 0.1.0\n"
    bare = forkpoint()  # no command: the help, as a usage error
    assert bare.returncode == 2 and "inspect" in bare.stdout and "replay" in bare.stdout
    group = forkpoint("agents")
    assert group.returncode == 2 and "install" in group.stdout and "list" in group.stdout
    for argv in (("bogus",), ("replay", "--bogus"), ("replay", "--after-step", "x"), ("inspect",),
                 ("replay", "--after", "1")):  # no abbreviated options
        done = forkpoint(*argv)
        assert done.returncode == 2 and "error:" in done.stderr, argv


def test_every_replay_option_is_documented() -> None:
    from forkpoint.cli.parser import _DIRECT_OPTIONS

    text = " ".join(forkpoint("replay", "--help").stdout.split())
    assert "forkpoint replay --config replay.toml" in text  # the examples survive, unwrapped
    for name in (*_DIRECT_OPTIONS, "config", "request"):
        flag = "--" + name.replace("_", "-")
        assert f" {flag} " in text, flag
    assert "[default: forkpoint-out/runs]" in text and "[replay] table" in text


def test_json_line_matches_result_file(session: Path, tmp_path: Path) -> None:
    done = forkpoint("replay", "--agent", "claude-code", "--trajectory", str(session), "--after-step", "2",
                     "--prepare-only", "--output-dir", "out", "--state-dir", "state", "--run-id", "same", "--json",
                     cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed == json.loads((tmp_path / "out" / "same" / "result.json").read_text())
    assert list(printed)[:4] == ["schema_version", "phase", "quality", "agent_status"]


_HEAVY = ("pydantic", "typer", "rich", "click", "aiohttp", "asyncio", "subprocess", "forkpoint.bridge")


def _imported(argv: list[str], cwd: Path | None = None) -> set[str]:
    """Top-level heavy modules (and forkpoint modules) loaded by one CLI run, in a fresh interpreter."""
    probe = (
        "import sys\nfrom forkpoint.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write('\\nMODULES ' + ' '.join(sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=cwd, timeout=60,
                          check=False)
    return set(done.stderr.rpartition("MODULES ")[2].split())


def test_cold_start_loads_only_what_the_command_needs(session: Path, tmp_path: Path) -> None:
    """Issue 8: `--help`/`--version` load no engine, and a prepare-only loads none of the heavy stacks."""
    for argv in (["--help"], ["--version"], ["replay", "--help"]):
        modules = _imported(argv)
        assert "forkpoint.cli" in modules
        assert not {m for m in modules if m.startswith(("forkpoint.", *_HEAVY)) and m != "forkpoint.cli"}, argv
    (tmp_path / "ws").mkdir()
    modules = _imported(["replay", "--agent", "claude-code", "--trajectory", str(session), "--after-step", "1",
                         "--prepare-only", "--workspace", "ws", "--json"], tmp_path)
    assert "forkpoint.run.engine" in modules and "forkpoint.adapters.claude_code" in modules
    assert not {m for m in modules if m.split(".")[0] in _HEAVY or m in _HEAVY}
    assert (tmp_path / "forkpoint-out" / "runs").is_dir()


#: Modules only a run that re-executes tools or continues the agent needs; a prepare-only of a session without
#: Read calls loads none of them (tool_media only classifies Read).
_REPLAY_ONLY = ("forkpoint.run.replay", "forkpoint.workspace", "forkpoint.process.supervise",
                "forkpoint.process.tree", "forkpoint.process.capture", "forkpoint.bridge",
                "forkpoint.run.compare", "forkpoint.branches.branching",
                "forkpoint.adapters.kit.continuation", "forkpoint.sandbox.",
                "forkpoint.adapters.claude_code.tool_", "forkpoint.adapters.claude_code.launch", "secrets")


def _bare_imported(argv: list[str], cwd: Path | None = None) -> set[str]:
    """Every module one CLI run loads in an interpreter without ``site`` (which would load typing & co. itself; a
    development one's site even loads tempfile and shutil); orjson's folder is on the path for a run that writes."""
    import orjson

    probe = ("import sys\nfrom forkpoint.cli import main\n"
             f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
             "sys.stderr.write('\\nMODULES ' + ' '.join(sys.modules))\n")
    path = os.pathsep.join((str(Path(__file__).resolve().parents[1] / "src"), str(Path(orjson.__file__).parents[1])))
    done = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, timeout=60,
                          check=False, env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"}, cwd=cwd)
    assert "MODULES " in done.stderr, done.stderr[-2000:]
    return set(done.stderr.rpartition("MODULES ")[2].split())


def test_help_and_version_load_only_the_cli_package_and_no_typing() -> None:
    """Issue 16: `--help` and `--version` load no forkpoint module beyond the cli package, not `typing` (2 ms of a
    30 ms start), not argparse, pathlib or shutil (the help is stored: ~7 ms), and `--version` nothing that `--help`
    does not."""
    from forkpoint.cli import stored_help

    shown = _bare_imported(["--help"])
    version = _bare_imported(["--version"])
    for modules in (shown, version, _bare_imported(["agents", "install", "-h"])):
        assert "forkpoint.cli" in modules
        assert {m for m in modules if m.startswith("forkpoint.")} == {"forkpoint.cli"}
        assert not {"typing", "dataclasses", "inspect"} & modules
        if os.path.isdir(os.path.dirname(stored_help([], _PYTHON))):  # else argparse prints help
            assert not {"argparse", "pathlib", "shutil", "re"} & modules
    assert version <= shown, version - shown


def test_the_stored_help_is_what_argparse_prints() -> None:
    """The help texts `--help` prints without argparse are argparse's own, for the root and every command (run
    scripts/regen_cli_help.py after changing an option); under a Python without stored texts argparse prints."""
    from forkpoint.cli import answer_without_argparse, stored_help
    from forkpoint.cli.parser import build_parser, every_help

    folder = Path(stored_help([], _PYTHON)).parent
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "80")
        if not folder.is_dir():
            assert answer_without_argparse(["replay", "--help"]) is None
            return
        texts = every_help(build_parser())
        assert {"", "replay", "continue", "agents install", "agents list"} <= set(texts)
        assert sorted(folder.glob("*.txt")) == sorted(Path(stored_help(c.split(), _PYTHON))
                                                      for c in texts)  # no stale file
        for command, text in texts.items():
            words = [*command.split(), "--help"]
            assert answer_without_argparse(words) == text == answer_without_argparse([*words[:-1], "-h"]), command
        for words in (["replay", "--json", "--help"], ["--help", "replay"], ["nope", "--help"], [], ["--version", "x"],
                      ["Replay", "--help"], ["..", "help", "--help"], ["3.11", "--help"]):
            assert answer_without_argparse(words) is None, words  # argparse decides those (a usage error, ...)


def test_a_tree_built_for_one_command_parses_its_lines_as_the_whole_tree() -> None:
    """main builds only the named command's options; every command line parses (and is refused) the same."""
    from forkpoint.cli.parser import build_parser

    lines = (["replay", "--agent", "codex", "--trajectory", "t", "--after-step", "2", "--env", "A", "--env", "B=1",
              "--branch-seed", "3", "--prepare-only", "--json"],
             ["continue", "run", "--branches", "2", "--model", "m"], ["inspect", "t", "--json"],
             ["batch", "jobs.jsonl", "--workers", "2"], ["agents", "install", "codex@1"], ["gc", "a", "b"],
             ["export", "r", "-o", "x"], ["report", "r"])
    for words in lines:
        whole, one = (vars(build_parser(command).parse_args(words)) for command in (None, words[0]))
        assert whole.pop("help_of").prog == one.pop("help_of").prog != "forkpoint"
        assert whole == one and whole["run"] is not None, words
    for words in (["replay", "--bogus"], ["inspect"], ["agents", "install"], ["replay", "--after-step", "x"]):
        refusals = []
        for command in (None, words[0]):
            with pytest.raises(SystemExit) as caught, contextlib.redirect_stderr(io.StringIO()) as said:
                build_parser(command).parse_args(words)
            refusals.append((caught.value.code, said.getvalue()))
        assert refusals[0] == refusals[1] and refusals[0][0] == 2, words


def test_help_wraps_at_the_terminal_width_up_to_80_columns() -> None:
    """A narrow terminal gets argparse's help at its width; a wider one (and a pipe) the 80-column text."""
    from forkpoint.cli.parser import build_parser, every_help

    def shown(columns: str) -> str:
        done = subprocess.run([sys.executable, "-m", "forkpoint.cli", "export", "--help"], capture_output=True,
                              text=True, timeout=60, check=True, env={**os.environ, "COLUMNS": columns})
        return done.stdout

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "80")
        stored = every_help(build_parser())["export"]
        patch.setenv("COLUMNS", "50")
        narrow = every_help(build_parser())["export"]
    assert shown("200") == shown("80") == stored
    assert shown("50") == narrow != stored
    assert len(narrow.splitlines()) > len(stored.splitlines())  # wrapped at 48 columns, not 78


def test_prepare_only_loads_no_replay_only_module(session: Path, tmp_path: Path) -> None:
    """Issue 16: a prepare-only re-runs nothing, so the executors, process supervision, sandboxes beyond the
    registry, the bridge, and the nonce's `secrets` stay unloaded."""
    assert '"Read"' not in session.read_text()  # else tool_media (Read's classifier) loads, rightly
    (tmp_path / "ws").mkdir()
    modules = _imported(["replay", "--agent", "claude-code", "--trajectory", str(session), "--after-step", "1",
                         "--prepare-only", "--workspace", "ws", "--json"], tmp_path)
    assert "forkpoint.run.engine" in modules and "forkpoint.run.journal" in modules
    assert not {m for m in modules if m.startswith(_REPLAY_ONLY)}, sorted(modules)


def test_prepare_only_loads_no_temp_folder_nor_accounting_module(session: Path, tmp_path: Path) -> None:
    """Issue 16: a prepare-only printed for people (not --json) runs no child, so its TMPDIR goes with one rmdir
    and its result file needs no tempfile (nor tempfile's shutil and random), and calls no model, so the summary
    line needs no accounting (nor its statistics, fractions and decimal): ~7 ms of a ~80 ms start."""
    (tmp_path / "ws").mkdir()
    modules = _bare_imported(["replay", "--agent", "claude-code", "--trajectory", str(session), "--after-step", "1",
                              "--prepare-only", "--workspace", "ws", "--output-dir", "out", "--state-dir", "state",
                              "--run-id", "r"], tmp_path)
    assert json.loads((tmp_path / "out" / "r" / "result.json").read_text())["phase"] == "prepared"
    assert "forkpoint.run.engine" in modules and "orjson" in modules
    assert not {"tempfile", "shutil", "random", "statistics", "forkpoint.bridge.accounting"} & modules
    assert (tmp_path / "state" / "r").is_dir() and not (tmp_path / "state" / "r" / "tmp").exists()  # TMPDIR, gone


def test_the_exit_codes_in_replay_help_are_the_error_kinds() -> None:
    """`forkpoint replay --help` lists every category with its exit code, as forkpoint.core.errors defines them."""
    import re

    from forkpoint.cli.parser import REPLAY_EPILOG
    from forkpoint.core.errors import ErrorKind

    listed = REPLAY_EPILOG.split("exit codes:", 1)[1]
    for kind in ErrorKind:
        name = kind.category if not kind.category.startswith("model_") else "model_*"
        match = re.search(rf"(\d+) (?:[a-z_]+ / )?{re.escape(name)}", listed)  # also "40 a / b"
        assert match is not None, f"{kind.category} is not in replay --help"
        assert int(match.group(1)) == kind.exit_code, kind.category


def test_agents_list_and_install_follow_the_specs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`agents list` shows every installable agent's verified versions (from its spec), marking what is installed;
    `agents install` of an installed version returns it without running npm, and refuses an unverified one."""
    from forkpoint.adapters import all_specs
    from forkpoint.runtimes import MANIFEST_NAME, Runtime

    monkeypatch.setenv("FORKPOINT_RUNTIMES", str(tmp_path))
    entry = tmp_path / "codex" / "0.149.0" / "bin" / "codex"
    entry.parent.mkdir(parents=True)
    entry.write_text("#!/bin/sh\n")
    entry.chmod(0o755)
    runtime = Runtime("codex", "0.149.0", entry.parents[1], entry, "2026-01-01T00:00:00Z")
    (runtime.root / MANIFEST_NAME).write_text(json.dumps(runtime.manifest()))
    listed = forkpoint("agents", "list")
    assert listed.returncode == 0, listed.stderr
    expected = [f"{spec.name}: " + ", ".join(f"{v}{' (installed)' if (spec.name, v) == ('codex', '0.149.0') else ''}"
                                            for v in spec.versions)
                for spec in all_specs() if spec.runtime is not None]
    assert listed.stdout.splitlines() == expected
    assert "codex: 0.149.0 (installed), 0.171.0" in expected and not any(e.startswith("swe-agent") for e in expected)
    installed = forkpoint("agents", "install", "codex@0.149.0")
    assert installed.returncode == 0 and installed.stdout.strip() == f"codex@0.149.0: {entry}"
    refused = forkpoint("agents", "install", "codex@0.1.0")
    assert refused.returncode == 11 and "verified: 0.149.0, 0.171.0" in refused.stderr
    unknown = forkpoint("agents", "install", "swe-agent@1.1.0")
    assert unknown.returncode == 11 and "unknown agent 'swe-agent'" in unknown.stderr


def test_installing_pi_on_a_host_that_cannot_get_fd_warns_and_installs_pi(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Pi's find needs fd >= 9 (forkpoint.runtimes.fd, fetched with apt): without apt the install says why on
    stderr and still succeeds (the finds that need fd are refused at replay); no fd runtime appears."""
    from forkpoint.runtimes import MANIFEST_NAME, Runtime

    monkeypatch.setenv("FORKPOINT_RUNTIMES", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    entry = tmp_path / "pi" / "0.83.0" / "forkpoint-bin" / "pi"
    entry.parent.mkdir(parents=True)
    entry.write_text("#!/bin/sh\n")
    entry.chmod(0o755)
    runtime = Runtime("pi", "0.83.0", entry.parents[1], entry, "2026-01-01T00:00:00Z")
    (runtime.root / MANIFEST_NAME).write_text(json.dumps(runtime.manifest()))
    installed = forkpoint("agents", "install", "pi@0.83.0")
    assert installed.returncode == 0, installed.stderr
    assert installed.stdout.strip() == f"pi@0.83.0: {entry}"
    assert "warning: fd >= 9 (for Pi's find) cannot be installed: apt-get is not on PATH" in installed.stderr
    assert not (tmp_path / ".tools" / "fd").exists()


def test_model_options_parse_and_are_refused_before_anything_runs(session: Path, tmp_path: Path) -> None:
    from forkpoint.cli.parser import MODEL_DESTS, build_parser

    args = build_parser().parse_args(["continue", "run", "--model", "m", "--temperature", "0", "--seed", "7",
                                      "--branch-seed", "1", "--branch-seed", "2", "--disable-thinking"])
    assert (args.model, args.temperature, args.seed, args.branch_seed, args.disable_thinking) == (
        "m", 0.0, 7, [1, 2], True)
    text = " ".join(forkpoint("continue", "--help").stdout.split())
    for name in MODEL_DESTS:
        assert f" --{name.replace('_', '-')} " in text, name
    base = ("replay", "--agent", "claude-code", "--trajectory", str(session), "--after-step", "1",
            "--workspace", str(tmp_path), "--output-dir", str(tmp_path / "out"), "--state-dir", str(tmp_path / "st"))
    for extra, said in ((("--seed", "7"), "the Anthropic Messages API has no seed"),
                        (("--reasoning-effort", "low"), "--reasoning-effort is for the Responses and Chat APIs"),
                        (("--temperature", "5"), "temperature must be within [0, 2]"),
                        (("--branch-model", "a"), "branch_models varies the branches of --branches K")):
        done = forkpoint(*base, *extra)
        assert done.returncode == 2 and said in done.stderr, (extra, done.stderr)
    assert not (tmp_path / "out").exists() and not (tmp_path / "st").exists()  # nothing ran
