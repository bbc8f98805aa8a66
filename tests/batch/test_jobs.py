"""Job lines (pure parsing, defaults, bad lines) and identities (collisions merge, near-collisions stay apart)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from forkpoint.batch.expand import expand
from forkpoint.batch.jobs import BadJob, Job, JobLine, identity, read_lines
from forkpoint.testing.images import entry, layer, oci_tarball

FIXTURE = Path(__file__).parents[1] / "fixtures" / "claude_code" / "2.1.332" / "file_tools" / "session.jsonl"


def _write(tmp_path: Path, lines: list[object]) -> Path:
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def test_bad_lines_are_reported_with_their_number_and_the_rest_is_kept(tmp_path: Path) -> None:
    jobs = _write(tmp_path, [
        {"trajectory": str(FIXTURE), "after_step": 1},
        "{not json",
        {"trajectory": str(FIXTURE), "after_step": 0},
        {"trajectory": str(FIXTURE), "after_step": 1, "mode": "continue"},
        {"trajectory": str(FIXTURE), "after_step": 1, "colour": "red"},
        "",
        {"trajectory": str(FIXTURE), "after_step": 1, "max_steps": "3"},
        {"trajectory": str(tmp_path / "missing.jsonl"), "after_step": 1},
        {"trajectory": str(FIXTURE), "after_step": 99},
        {"trajectory": str(FIXTURE), "after_step": 1, "branches": 3},
        {"trajectory": str(FIXTURE), "after_step": 1, "mode": "continue", "workspace_from": "/", "branches": 3,
         "branch_prompts": ["a", 2]},
    ])
    items = list(expand(read_lines(jobs, {})))
    good = [item for item in items if isinstance(item, Job)]
    bad = {item.line: item.reason for item in items if isinstance(item, BadJob)}
    assert [job.line for job in good] == [1]
    assert sorted(bad) == [2, 3, 4, 5, 7, 8, 9, 10, 11]
    assert "mode must be continue" in bad[10] and "branch_prompts must be a list of strings" in bad[11]
    assert "not valid JSON" in bad[2] and "positive integer" in bad[3] and "needs workspace_from" in bad[4]
    assert "unknown key(s) colour" in bad[5] and "max_steps has the wrong type" in bad[7]
    assert "does not exist" in bad[8] and "beyond the" in bad[9]


def test_all_expands_to_every_boundary_and_defaults_apply(tmp_path: Path) -> None:
    toml = tmp_path / "jobs.toml"
    toml.write_text(f'[defaults]\nmode = "prepare-only"\non_divergence = "stop"\n\n'
                    f'[[job]]\ntrajectory = "{FIXTURE}"\nafter_step = "all"\n')
    jobs = [item for item in expand(read_lines(toml, {})) if isinstance(item, Job)]
    assert [job.after_step for job in jobs] == list(range(1, len(jobs) + 1)) and len(jobs) >= 2
    assert all(job.agent == "claude-code" and job.options == {"on_divergence": "stop"} for job in jobs)
    assert len({job.identity for job in jobs}) == len(jobs)


def test_identity_merges_equal_jobs_and_separates_near_ones() -> None:
    line = JobLine(1, FIXTURE, None, 1, "prepare-only", {})
    same = JobLine(7, FIXTURE, "claude-code", [1], "prepare-only", {"timeout_s": 5})
    base = identity(line, "claude-code", 1, "a" * 64, None)
    assert identity(same, "claude-code", 1, "a" * 64, None) == base  # line number, timeout: not what it does
    others = {
        identity(line, "claude-code", 2, "a" * 64, None),  # other boundary
        identity(line, "claude-code", 1, "b" * 64, None),  # other trajectory bytes
        identity(JobLine(1, FIXTURE, None, 1, "replay-only", {}), "claude-code", 1, "a" * 64, "dir:x"),
        identity(JobLine(1, FIXTURE, None, 1, "prepare-only", {"boundary_user_prompt": "p"}), "claude-code", 1,
                 "a" * 64, None),
        identity(JobLine(1, FIXTURE, None, 1, "prepare-only", {"boundary_user_prompt": "q"}), "claude-code", 1,
                 "a" * 64, None),
        identity(JobLine(1, FIXTURE, None, 1, "replay-only", {}), "claude-code", 1, "a" * 64, "dir:y"),
        identity(JobLine(1, FIXTURE, None, 1, "continue", {"branches": 2}), "claude-code", 1, "a" * 64, "dir:y"),
        identity(JobLine(1, FIXTURE, None, 1, "continue", {"branches": 2, "branch_prompts": ["p", "q"]}),
                 "claude-code", 1, "a" * 64, "dir:y"),
    }
    assert base not in others and len(others) == 8


def test_the_continuation_deadlines_are_job_keys(tmp_path: Path) -> None:
    """``upstream_idle_timeout``, ``answer_timeout`` and ``continuation_timeout`` (seconds) pass to the job's request;
    a string is a bad line."""
    toml = tmp_path / "jobs.toml"
    toml.write_text(f'[defaults]\nanswer_timeout = 120\n\n[[job]]\ntrajectory = "{FIXTURE}"\nafter_step = 1\n'
                    f'upstream_idle_timeout = 30.5\ncontinuation_timeout = 3600\n\n'
                    f'[[job]]\ntrajectory = "{FIXTURE}"\nafter_step = 1\nanswer_timeout = "soon"\n')
    items = list(expand(read_lines(toml, {})))
    [job] = [item for item in items if isinstance(item, Job)]
    assert job.options == {"answer_timeout": 120, "upstream_idle_timeout": 30.5, "continuation_timeout": 3600}
    [bad] = [item for item in items if isinstance(item, BadJob)]
    assert "answer_timeout has the wrong type" in bad.reason


def _image(path: Path, content: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return oci_tarball(path, [layer([entry("etc/marker", data=content)])])


def test_rootfs_and_image_are_job_keys_relative_to_the_jobs_file(tmp_path: Path) -> None:
    """A batch can give its bwrap jobs the recordings' image (docs/sandboxes.md); the path reaches the run."""
    _image(tmp_path / "images" / "sweb.tar", b"one\n")
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(json.dumps({"trajectory": str(FIXTURE), "after_step": 1, "sandbox": "bwrap",
                                "image": "images/sweb.tar"}) + "\n"
                    + json.dumps({"trajectory": str(FIXTURE), "after_step": 1, "rootfs": 7}) + "\n")
    items = list(expand(read_lines(jobs, {})))
    [job] = [item for item in items if isinstance(item, Job)]
    assert job.options == {"sandbox": "bwrap", "image": str(tmp_path / "images" / "sweb.tar")}
    [bad] = [item for item in items if isinstance(item, BadJob)]
    assert "rootfs has the wrong type" in bad.reason


def test_an_image_is_one_job_by_its_manifest_digest_not_its_path(tmp_path: Path) -> None:
    """Two paths to the same image bytes are one job; new bytes at the same path are another; a missing or
    malformed image is a bad line with the run's reason."""
    first = _image(tmp_path / "a" / "img.tar", b"one\n")
    copy = tmp_path / "b" / "same.tar"
    copy.parent.mkdir()
    shutil.copyfile(first, copy)
    (tmp_path / "junk.tar").write_bytes(b"not an image")

    def identities() -> list[str | BadJob]:
        jobs = _write(tmp_path, [{"trajectory": str(FIXTURE), "after_step": 1, "sandbox": "bwrap", "image": str(path)}
                                 for path in (first, copy, tmp_path / "missing.tar", tmp_path / "junk.tar")])
        return [item.identity if isinstance(item, Job) else item for item in expand(read_lines(jobs, {}))]

    one, same, missing, junk = identities()
    assert isinstance(one, str) and one == same
    assert isinstance(missing, BadJob) and "missing.tar" in missing.reason
    assert isinstance(junk, BadJob) and "junk.tar" in junk.reason
    _image(first, b"two\n")  # the same path, other content
    changed, still_same, _, _ = identities()
    assert changed != one and still_same == one


def test_capture_tokens_is_a_job_key_that_reaches_the_request(tmp_path: Path) -> None:
    """``capture_tokens`` (docs/rl.md) passes to the job's request as the replay flag; a string is a bad line."""
    from forkpoint.run.request import build_request

    jobs = _write(tmp_path, [{"trajectory": str(FIXTURE), "after_step": 1, "capture_tokens": True},
                             {"trajectory": str(FIXTURE), "after_step": 1, "capture_tokens": "yes"}])
    items = list(expand(read_lines(jobs, {})))
    [job] = [item for item in items if isinstance(item, Job)]
    assert job.options == {"capture_tokens": True}
    request = build_request({"agent": "claude-code", "trajectory": str(FIXTURE), "after_step": 1, **job.options},
                            source="test")
    assert request.capture_tokens is True
    [bad] = [item for item in items if isinstance(item, BadJob)]
    assert "capture_tokens has the wrong type" in bad.reason


def test_require_sandbox_applies_to_jobs_that_run_commands(tmp_path: Path) -> None:
    jobs = _write(tmp_path, [{"trajectory": str(FIXTURE), "after_step": 1, "mode": "replay-only",
                              "workspace_from": str(tmp_path)},
                             {"trajectory": str(FIXTURE), "after_step": 1, "mode": "replay-only", "sandbox": "bwrap",
                              "workspace_from": str(tmp_path)},
                             {"trajectory": str(FIXTURE), "after_step": 1}])
    items = list(read_lines(jobs, {}, require_sandbox="bwrap"))
    assert isinstance(items[0], BadJob) and "requires --sandbox bwrap" in items[0].reason
    assert [type(item).__name__ for item in items[1:]] == ["JobLine", "JobLine"]
    assert isinstance(next(iter(read_lines(jobs, {"sandbox": "bwrap"}, require_sandbox="bwrap"))), JobLine)
