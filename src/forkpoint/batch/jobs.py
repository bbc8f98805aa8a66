"""Batch jobs (pure apart from reading the jobs file): parse JSONL / TOML, apply defaults, expand boundaries, and
give each concrete job its identity.

A job line names a trajectory, optionally its agent (detected otherwise), ``after_step`` (an int, a list, or
``"all"``), a ``mode`` (prepare-only, replay-only, continue), a workspace source for replay modes
(``workspace_from``: a directory, a tarball or ``GIT_URL@REV``), and any other `replay` option. A bad line is
reported with its number and reason; the rest of the batch runs.

Identity = SHA-256 of the canonical JSON of everything that changes what a job does: the trajectory's bytes
(its SHA-256), agent, after_step, mode, sandbox, upstream and its URL, step budget, boundary prompt (its
SHA-256), stale policy, divergence policy, the workspace source's digest, and the ``image``'s manifest digest (not
its path: two paths to one image are one job, new bytes at the same path another; a ``rootfs`` folder enters by its
path). Two lines with equal identity are one job; the same trajectory at another boundary is another job.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODES = ("prepare-only", "replay-only", "continue")
#: keys a job (or [defaults]) may set besides trajectory/agent/after_step/mode, with their JSON types
OPTION_TYPES: dict[str, type | tuple[type, ...]] = {
    "workspace_from": str, "sandbox": str, "upstream": str, "upstream_url": str, "max_steps": int,
    "boundary_user_prompt": str, "allow_stale_observations": bool, "reuse_observations": list,
    "mcp_timeout": (int, float),
    "require_verified_version": bool, "on_divergence": str, "timeout_s": (int, float),
    "branches": int, "branch_prompts": list, "max_processes": int,
    # the bwrap sandbox's root file system (docs/sandboxes.md): a folder, or an image unpacked and cached by digest
    "rootfs": str, "image": str,
    # model choice and sampling pins (issue 17; validated with the request's words when the job runs)
    "model": str, "temperature": (int, float), "top_p": (int, float), "seed": int, "max_output_tokens": int,
    "disable_thinking": bool, "reasoning_effort": str, "upstream_retries": int,
    # deadlines of the continuation (seconds; docs/upstreams.md)
    "upstream_idle_timeout": (int, float), "answer_timeout": (int, float), "continuation_timeout": (int, float),
    "branch_models": list, "branch_seeds": list, "branch_temperatures": list,
    "capture_tokens": bool,  # token ids and logprobs from the upstream (docs/rl.md)
    # the verifier (docs/rl.md): a command, or a table {command, timeout, format, original_reward}
    "score": (str, dict), "score_timeout": (int, float), "score_format": str, "original_reward": (int, float),
}
JOB_KEYS = frozenset({"trajectory", "agent", "after_step", "mode", *OPTION_TYPES})
DEFAULT_MODE = "prepare-only"


class BadJob(Exception):
    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"job {line}: {reason}")
        self.line = line
        self.reason = reason


@dataclass(frozen=True)
class JobLine:
    """One job line as written (defaults applied), before its boundaries are expanded."""

    line: int
    trajectory: Path
    agent: str | None
    after_step: int | list[int] | str
    mode: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Job:
    """One concrete job: one trajectory at one boundary, with its identity."""

    identity: str
    line: int
    trajectory: Path
    trajectory_sha256: str
    agent: str
    after_step: int
    mode: str
    recorded_cwd: str | None
    options: dict[str, Any]

    @property
    def run_id(self) -> str:
        return f"j-{self.identity[:20]}"

    def to_json(self) -> dict[str, Any]:
        return {"identity": self.identity, "line": self.line, "trajectory": str(self.trajectory),
                "trajectory_sha256": self.trajectory_sha256, "agent": self.agent, "after_step": self.after_step,
                "mode": self.mode, "recorded_cwd": self.recorded_cwd, "options": self.options}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Job:
        return cls(identity=value["identity"], line=value["line"], trajectory=Path(value["trajectory"]),
                   trajectory_sha256=value["trajectory_sha256"], agent=value["agent"],
                   after_step=value["after_step"], mode=value["mode"], recorded_cwd=value.get("recorded_cwd"),
                   options=dict(value.get("options") or {}))


def read_lines(path: Path, defaults: dict[str, Any], *, require_sandbox: str | None = None
               ) -> Iterator[JobLine | BadJob]:
    """The job lines of a JSONL or TOML (``[defaults]`` + ``[[job]]``) file, defaults applied, in file order.
    ``require_sandbox``: a job that runs commands (not prepare-only) in another sandbox is a bad line."""
    text = path.read_text("utf-8")
    base = path.parent
    if path.suffix == ".toml":
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            yield BadJob(0, f"not valid TOML: {error}")
            return
        table_defaults = document.get("defaults") or {}
        jobs = document.get("job") or []
        if not isinstance(table_defaults, dict) or not isinstance(jobs, list):
            yield BadJob(0, "[defaults] must be a table and [[job]] an array of tables")
            return
        merged_defaults = {**table_defaults, **defaults}
        for index, job in enumerate(jobs, start=1):
            yield _job_line(index, job, merged_defaults, base, require_sandbox)
        return
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as error:
            yield BadJob(number, f"not valid JSON: {error.msg}")
            continue
        yield _job_line(number, value, defaults, base, require_sandbox)


def _job_line(line: int, value: Any, defaults: dict[str, Any], base: Path,
              require_sandbox: str | None = None) -> JobLine | BadJob:
    if not isinstance(value, dict):
        return BadJob(line, "a job must be an object")
    merged = {**defaults, **value}
    unknown = sorted(set(merged) - JOB_KEYS)
    if unknown:
        return BadJob(line, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(JOB_KEYS))}")
    trajectory = merged.get("trajectory")
    if not isinstance(trajectory, str) or not trajectory:
        return BadJob(line, "trajectory (a path) is required")
    after = merged.get("after_step")
    if not (after == "all" or (isinstance(after, int) and not isinstance(after, bool) and after >= 1) or (
            isinstance(after, list) and after and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1
                                                      for n in after))):
        return BadJob(line, "after_step must be a positive integer, a non-empty list of them, or \"all\"")
    mode = merged.get("mode", DEFAULT_MODE)
    if mode not in MODES:
        return BadJob(line, f"mode must be one of {', '.join(MODES)}")
    agent = merged.get("agent")
    if agent is not None and not isinstance(agent, str):
        return BadJob(line, "agent must be a string")
    options = {key: merged[key] for key in OPTION_TYPES if merged.get(key) is not None}
    for key, value_ in options.items():
        expected = OPTION_TYPES[key]
        if not isinstance(value_, expected) or (isinstance(value_, bool) and expected is not bool):
            return BadJob(line, f"{key} has the wrong type")
    if "branch_prompts" in options and not all(isinstance(p, str) for p in options["branch_prompts"]):
        return BadJob(line, "branch_prompts must be a list of strings")
    if any(key in options for key in ("branches", "branch_prompts", "branch_models", "branch_seeds",
                                       "branch_temperatures")) and mode != "continue":
        return BadJob(line, "branches continue the agent: mode must be continue")
    sandbox = options.get("sandbox", "local")
    if require_sandbox is not None and mode != "prepare-only" and sandbox != require_sandbox:
        return BadJob(line, f"mode {mode} runs the recording's commands and the batch requires --sandbox "
                            f"{require_sandbox}; this job's sandbox is {sandbox}")
    if mode != "prepare-only" and "workspace_from" not in options:
        return BadJob(line, f"mode {mode} needs workspace_from (a directory, a tarball or GIT_URL@REV): each job "
                            "gets its own fresh workspace made from it")
    if "workspace_from" in options and not _is_remote(options["workspace_from"]):
        options["workspace_from"] = str((base / options["workspace_from"]).absolute())
    for key in ("rootfs", "image"):  # relative to the jobs file, like workspace_from
        if key in options:
            options[key] = str((base / options[key]).absolute())
    path = Path(trajectory)
    return JobLine(line, path if path.is_absolute() else (base / path).absolute(), agent, after, mode, options)


def _is_remote(spec: str) -> bool:
    return "://" in spec or ("@" in spec and ":" in spec.split("@", 1)[0])


def identity(line: JobLine, agent: str, after_step: int, trajectory_sha256: str, workspace_digest: str | None,
             image_digest: str | None = None) -> str:
    """The job's identity (see the module docstring); the prompt enters by its hash, never in clear, the image by
    its manifest digest (``image_digest``, given whenever the line names an image)."""
    options = dict(line.options)
    if "image" in options:
        if image_digest is None:
            raise ValueError("a job with an image needs its digest for its identity")
        options["image"] = image_digest
    prompt = options.pop("boundary_user_prompt", None)
    branch_prompts = options.pop("branch_prompts", None)
    if branch_prompts is not None:  # like the boundary prompt: by hash only
        options["branch_prompts_sha256"] = [hashlib.sha256(str(p).encode()).hexdigest() for p in branch_prompts]
    options.pop("workspace_from", None)
    options.pop("timeout_s", None)  # how long to wait is not what the job does
    key = {
        "trajectory_sha256": trajectory_sha256, "agent": agent, "after_step": after_step, "mode": line.mode,
        "options": options, "workspace": workspace_digest,
        "boundary_prompt_sha256": hashlib.sha256(prompt.encode()).hexdigest() if prompt is not None else None,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
