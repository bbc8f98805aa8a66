"""The sandbox keys from every request source: flags (--sandbox, repeatable --path-map, --workspace-from), TOML,
JSON; and their validation messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.run.request import REQUEST_SCHEMA, build_request, load_json_request, load_toml
from forkpoint.testing.claude_sessions import simple_session

BASE = {"agent": "claude-code", "trajectory": "t.jsonl", "after_step": 1}


def test_defaults() -> None:
    request = build_request(dict(BASE), source="test")
    assert (request.sandbox, request.path_map, request.workspace_from) == ("local", [], None)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sandbox": "docker"}, "unknown sandbox 'docker'; expected one of: local, bwrap"),
        ({"path_map": ["nope"]}, "path_map entry 'nope' must look like OLD=NEW"),
        ({"path_map": ["/a=b"]}, "both paths must be absolute"),
        ({"path_map": "/a=/b"}, "path_map: input should be a valid list"),
        ({"sandbox": "bwrap", "path_map": ["/a=/b"]}, "path_map (--path-map) is for --sandbox local"),
    ],
)
def test_validation(change: dict[str, object], message: str) -> None:
    with pytest.raises(ReplayError) as caught:
        build_request({**BASE, **change}, source="test")
    assert caught.value.kind is ErrorKind.CONFIGURATION and message in caught.value.message


def test_toml_and_json_keys(tmp_path: Path) -> None:
    (tmp_path / "seed").mkdir()
    toml = tmp_path / "replay.toml"
    toml.write_text('[replay]\nagent = "claude-code"\ntrajectory = "t.jsonl"\nafter_step = 1\nsandbox = "bwrap"\n'
                    'workspace_from = "seed"\n')
    request = load_toml(toml)
    assert request.sandbox == "bwrap" and request.workspace_from == str(tmp_path / "seed")  # relative to the file
    document = {"schema_version": REQUEST_SCHEMA, **BASE, "path_map": ["/rec=/real", "/rec2=/real2"],
                "workspace_from": "https://example.invalid/repo.git@v1"}
    (tmp_path / "request.json").write_text(json.dumps(document))
    request = load_json_request(tmp_path / "request.json")
    assert request.path_map == ["/rec=/real", "/rec2=/real2"]
    assert request.workspace_from == "https://example.invalid/repo.git@v1"  # not a local path: kept as given


def test_cli_flags_reach_the_engine(tmp_path: Path) -> None:
    builder = simple_session(2)
    for record in builder.records:
        record["cwd"] = "/rec/project"
    trajectory = builder.write(tmp_path / "session.jsonl")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    common = [sys.executable, "-m", "forkpoint.cli", "replay", "--agent", "claude-code", "--trajectory",
              str(trajectory), "--after-step", "1", "--workspace", str(workspace), "--replay-only", "--json",
              "--state-dir", str(tmp_path / "state"), "--output-dir", str(tmp_path / "out")]
    refused = subprocess.run(common, capture_output=True, text=True, check=False)
    assert refused.returncode == 20 and "--path-map /rec/project=" in refused.stdout
    done = subprocess.run([*common, "--path-map", f"/rec/project={workspace}", "--path-map", "/other=/x",
                           "--sandbox", "local"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    metadata = json.loads(done.stdout)["metadata"]
    assert metadata["sandbox"]["path_map"] == [{"recorded": "/rec/project", "real": str(workspace)},
                                               {"recorded": "/other", "real": "/x"}]
    assert len(metadata["workspace_inventory_sha256"]) == 64
