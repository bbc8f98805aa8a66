"""forkpoint's public API: the curated names, typed errors, and docs/python-api.md's example run as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import forkpoint
from forkpoint.testing.claude_sessions import simple_session

DOC = Path(__file__).parents[1] / "docs" / "python-api.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_all_lists_exactly_what_resolves() -> None:
    for name in forkpoint.__all__:
        assert getattr(forkpoint, name) is not None, name
    assert set(forkpoint.__all__) == set(forkpoint._HOMES) | {"__version__"}
    with pytest.raises(AttributeError):
        forkpoint.engine  # noqa: B018 - internals are not re-exported


def test_importing_forkpoint_loads_none_of_the_api() -> None:
    code = "import sys, forkpoint; print(sorted(m for m in sys.modules if m.startswith('forkpoint')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['forkpoint']"


def test_request_validates_like_the_cli_and_errors_are_typed(tmp_path: Path) -> None:
    with pytest.raises(forkpoint.ReplayError) as info:
        forkpoint.request(agent="claude-code", trajectory="t.jsonl", after_step=0)
    assert info.value.kind is forkpoint.ErrorKind.CONFIGURATION and info.value.kind.exit_code == 2
    made = forkpoint.request({"agent": "claude-code", "after_step": 2}, trajectory=tmp_path / "t.jsonl",
                             prepare_only=True)
    assert made.mode is forkpoint.Mode.PREPARE_ONLY and made.trajectory == tmp_path / "t.jsonl"


def test_prepare_only_through_the_api_and_the_run_read_back(tmp_path: Path) -> None:
    session = simple_session(2).write(tmp_path / "s.jsonl")
    described = forkpoint.inspect(session)
    assert described["agent"] == "claude-code" and described["batches"]
    result = forkpoint.replay({"agent": "claude-code", "trajectory": session, "after_step": 1,
                               "prepare_only": True, "output_dir": tmp_path / "runs",
                               "state_dir": tmp_path / "state", "run_id": "api"})
    assert result.failure is None and result.phase == "prepared"
    run = forkpoint.load_run(tmp_path / "runs" / "api")
    assert run.result.to_json() == json.loads((tmp_path / "runs" / "api" / "result.json").read_text())
    assert run.manifest is not None and run.branches is None
    assert run.manifest.document["schema_version"] == "forkpoint.plan/v1"
    assert (run.manifest.agent, run.manifest.after_step, run.manifest.source_path) == ("claude-code", 1, session)
    prefix = run.artifact("native_prefix")
    assert prefix is not None and prefix.is_file()


def test_a_failed_replay_is_a_result_not_an_exception(tmp_path: Path) -> None:
    result = forkpoint.replay(forkpoint.request(agent="claude-code", trajectory=tmp_path / "absent.jsonl",
                                                after_step=1, prepare_only=True, output_dir=tmp_path / "runs",
                                                state_dir=tmp_path / "state"))
    assert result.failure is not None and result.exit_code == 2


def test_load_run_refuses_what_is_not_a_run_dir(tmp_path: Path) -> None:
    with pytest.raises(forkpoint.ReplayError, match=r"has no result\.json"):
        forkpoint.load_run(tmp_path)
    (tmp_path / "result.json").write_text('{"artifacts": [{"role": 1}]}')
    with pytest.raises(forkpoint.ReplayError, match=r"result\.json is not what forkpoint wrote"):
        forkpoint.load_run(tmp_path)


@pytest.mark.parametrize(("name", "content", "says"), [
    ("manifest.json", {"agent": "claude-code", "source": {}, "boundary": {}}, r"manifest\.json is not what forkpoint"),
    ("manifest.json", {"agent": {"name": "pi"}, "source": {"path": "/s", "sha256": "0"},
                       "boundary": {"after_step": "two"}}, r"manifest\.json is not what forkpoint wrote .*after_step"),
    ("branches.json", {"state_dir": ["/s"], "branches": []}, r"branches\.json is not what forkpoint wrote"),
    ("branches.json", [1], r"branches\.json is not a JSON object"),
    ("observations.json", "fifo", r"observations\.json is unreadable: not a regular file"),
], ids=["agent-a-string", "after-step-a-word", "state-dir-a-list", "branches-a-list", "observations-a-fifo"])
def test_load_run_reads_typed_documents_and_names_a_wrong_one(tmp_path: Path, name: str, content: Any,
                                                              says: str) -> None:
    """A run dir is a folder a person may edit: the wrong shape is a configuration error naming the file (it was
    handed back as a dict, to fail later), and a FIFO is refused without blocking."""
    (tmp_path / "result.json").write_text("{}")
    if content == "fifo":
        os.mkfifo(tmp_path / name)
    else:
        (tmp_path / name).write_text(json.dumps(content))
    with pytest.raises(forkpoint.ReplayError, match=says) as refused:
        forkpoint.load_run(tmp_path)
    assert refused.value.kind is forkpoint.ErrorKind.CONFIGURATION


def test_the_error_example_runs_as_written() -> None:
    done = subprocess.run([sys.executable, "-c", "import forkpoint\n" + _blocks()[1]], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("configuration_error 2 after_step must be")


@pytest.mark.e2e
def test_the_python_api_page_runs_as_written(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _blocks()[0]], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "claude-code" in done.stdout and "phase: replayed" in done.stdout
    assert done.stdout.count("finished") == 2
