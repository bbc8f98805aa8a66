"""ReplayRequest: one strict record built from CLI flags, a TOML ``[replay]`` table or a JSON request.

All validation messages live here so the three sources refuse bad input with the same words. Field types are
checked strictly (no coercion: ``"2"`` is not an integer, ``true`` is not a number) from the dataclass's own
annotations, with pydantic's wording; a plain dataclass keeps pydantic out of the CLI's start-up.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import types
import typing
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpoint.adapters import AGENT_NAMES, unknown_agent_message
from forkpoint.adapters.spec import AgentSpec
from forkpoint.core.errors import configuration
from forkpoint.core.fs import DEFAULT_MAX_INPUT_BYTES
from forkpoint.core.model import ContinueSettings, LaunchTarget, Mode, Plan
from forkpoint.core.protocols import UPSTREAMS as KNOWN_UPSTREAMS
from forkpoint.core.protocols import UpstreamChoice, outgoing_protocol
from forkpoint.sandbox import DEFAULT_SANDBOX, SANDBOXES, unknown_sandbox_message

if TYPE_CHECKING:
    from collections.abc import Callable

    from forkpoint.bridge.translate.sampling import SamplingPins
    from forkpoint.run.scoring import ScoreSpec

REQUEST_SCHEMA = "forkpoint.request/v1"
DEFAULT_OUTPUT_ROOT = Path("forkpoint-out/runs")
DEFAULT_STATE_ROOT = Path("forkpoint-out/state")
#: Where the bridge may send validated requests (which of them an agent can use, its spec says).
UPSTREAMS = tuple(KNOWN_UPSTREAMS)
_RUN_ID = re.compile(r"[A-Za-z0-9_-]+")
_MAX_INPUT_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class ReplayRequest:
    """What to replay, where, and how far. Paths are kept as given; the engine resolves them."""

    agent: str
    trajectory: Path
    after_step: int | str  # N, or "all": every complete batch (the whole recording; resolved when it is parsed)
    workspace: Path = Path(".")
    state_dir: Path = DEFAULT_STATE_ROOT
    output_dir: Path = DEFAULT_OUTPUT_ROOT
    run_id: str | None = None
    max_steps: int | None = None
    mode: Mode = Mode.REPLAY_AND_CONTINUE
    allow_stale_observations: bool = False
    #: the exact-pin rule: refuse (exit 11) a recording whose version is not a verified one (adapters/versions.py)
    require_verified_version: bool = False
    boundary_user_prompt: str | None = None
    upstream: str | None = None  # None: the real upstream of the agent's own protocol
    upstream_url: str | None = None
    agent_entrypoint: Path | None = None
    sandbox: str = DEFAULT_SANDBOX  # local | bwrap (forkpoint.sandbox)
    path_map: list[str] = field(default_factory=list)  # OLD=NEW absolute prefixes (local sandbox)
    rootfs: str | None = None  # a root file system folder for the bwrap sandbox (sandbox.rootfs)
    image: str | None = None  # an OCI / docker-save image unpacked into one (sandbox.image)
    workspace_from: str | None = None  # DIR | TARBALL | GIT_URL@REV: create the workspace first
    on_divergence: str = "warn"  # warn | stop | ignore (forkpoint.run.divergence)
    branches: int = 1  # K continuations from one replayed boundary (forkpoint.branches.branching)
    branch_prompts: list[str] = field(default_factory=list)  # one for all branches, or one per branch
    parallel: int | None = None  # concurrent branches (bwrap only) [default: the cores]
    keep_snapshot: bool | None = None  # keep the boundary snapshot; None: for replay-only and branched runs
    max_trajectory_bytes: int = DEFAULT_MAX_INPUT_BYTES  # the one size bound of every trajectory parser
    # per supervised command, a pids cgroup each; = forkpoint.process.limits.DEFAULT_MAX_PROCESSES (not imported here:
    # a prepare-only run loads no process machinery)
    max_processes: int = 512
    opencode_export: Path | None = None  # `opencode export` JSON completing an OpenCode run event log
    env: list[str] = field(default_factory=list)  # NAME (the host's value) or NAME=VALUE, passed to children
    reuse_observations: list[str] = field(default_factory=list)  # tool-name globs whose observations are reused
    mcp_config: Path | None = None  # the user's MCP servers (Claude Code's .mcp.json format): MCP calls re-run
    mcp_timeout: float = 60.0  # seconds an MCP server may take to start, and to answer one call
    # model choice and sampling pins (issue 17): set by the bridge on each request after the gate validated it
    model: str | None = None  # the model the continuation asks for [the recorded one]
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    max_output_tokens: int | None = None
    disable_thinking: bool = False
    reasoning_effort: str | None = None  # minimal | low | medium | high | none (Responses and Chat only)
    upstream_retries: int = 3  # retries of an upstream failure before the first byte reaches the agent
    upstream_idle_timeout: float = 300.0  # seconds without a byte from the upstream: the answer is cut
    answer_timeout: float = 1800.0  # seconds one model answer may take, end to end
    continuation_timeout: float = 4 * 3600.0  # seconds the whole continuation (the agent's run) may take
    branch_models: list[str] = field(default_factory=list)  # one for all branches, or one per branch
    branch_seeds: list[int] = field(default_factory=list)
    branch_temperatures: list[float] = field(default_factory=list)
    agent_version: str | None = None  # continue with this verified version (a cross-version pair proven e2e)
    record_tool_schemas: bool = False  # save the first validated request's tool definitions (tool-schemas.json)
    capture_tokens: bool = False  # ask the upstream for token ids and logprobs (tokens.jsonl; bridge.token_capture)
    # the reward (forkpoint.run.scoring, docs/rl.md): a verifier run in the final workspace of the run / each branch
    score: str | None = None  # the command, run by /bin/sh -c
    score_timeout: float = 600.0  # = scoring.DEFAULT_SCORE_TIMEOUT_S
    score_format: str = "last-line"  # last-line | json
    original_reward: float | None = None  # the recording's own reward (a scored --after-step all replay)

    def resolved_run_id(self) -> str:
        return self.run_id or f"replay-{uuid.uuid4().hex}"

    def keeps_snapshot(self) -> bool:
        """Whether the boundary snapshot is kept: as asked, else for replay-only and branched runs."""
        if self.keep_snapshot is not None:
            return self.keep_snapshot
        return self.mode is Mode.REPLAY_ONLY or self.branches > 1 or bool(self.branch_prompts)

    def companion_file(self) -> Path | None:
        """A file that completes the trajectory (the adapter's ``parse_completed`` reads both)."""
        return self.opencode_export


# Keys accepted in a TOML [replay] table / JSON request besides the model fields.
_MODE_KEYS = ("prepare_only", "replay_only")
_FIELD_KEYS = tuple(item.name for item in dataclasses.fields(ReplayRequest) if item.name != "mode")


def mode_from_flags(prepare_only: bool, replay_only: bool) -> Mode:
    if prepare_only and replay_only:
        raise configuration("prepare_only and replay_only are mutually exclusive")
    if prepare_only:
        return Mode.PREPARE_ONLY
    if replay_only:
        return Mode.REPLAY_ONLY
    return Mode.REPLAY_AND_CONTINUE


def build_request(values: dict[str, Any], *, source: str) -> ReplayRequest:
    """Validate a flat mapping (snake_case keys, plus prepare_only/replay_only) into a request."""
    unknown = sorted(set(values) - set(_FIELD_KEYS) - set(_MODE_KEYS))
    if unknown:
        raise configuration(f"{source}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(_allowed())}")
    for required in ("agent", "trajectory", "after_step"):
        if values.get(required) is None:
            raise configuration(f"{source}: missing required key {required!r}")
    fields = {k: v for k, v in values.items() if k in _FIELD_KEYS and v is not None}
    for flag in _MODE_KEYS:
        if values.get(flag) is not None and not isinstance(values[flag], bool):
            raise configuration(f"{source}: {flag} must be true or false")
    fields["mode"] = mode_from_flags(bool(values.get("prepare_only")), bool(values.get("replay_only")))
    for key in ("trajectory", "workspace", "state_dir", "output_dir", "agent_entrypoint", "opencode_export",
                "mcp_config"):
        if key in fields:
            if not isinstance(fields[key], str | Path) or str(fields[key]) == "":
                raise configuration(f"{source}: {key} must be a non-empty path string")
            fields[key] = Path(fields[key])
    errors = [error for name, expected in _field_types().items() if name in fields  # in declaration order
              for error in _type_errors(name, fields[name], expected)]
    if isinstance(fields.get("after_step"), str) and fields["after_step"] != "all":
        errors.insert(0, 'after_step: input should be a valid integer or "all"')
    if errors:
        raise configuration(f"{source}: {'; '.join(errors)}")
    # a TOML/JSON 0 is the number 0.0
    for key in ("temperature", "top_p", "score_timeout", "original_reward", "mcp_timeout", *TIMEOUT_KEYS):
        if key in fields:
            fields[key] = float(fields[key])
    if "branch_temperatures" in fields:
        fields["branch_temperatures"] = [float(value) for value in fields["branch_temperatures"]]
    request = ReplayRequest(**fields)
    validate_request(request)
    return request


def validate_request(request: ReplayRequest) -> None:
    """Checks that need no parsing; filesystem checks come first in the engine (workspace, trajectory)."""
    if request.agent not in AGENT_NAMES:
        raise configuration(unknown_agent_message(request.agent))
    if isinstance(request.after_step, str):
        if request.after_step != "all":
            raise configuration(f"after_step must be a positive complete batch ordinal or \"all\", not "
                                f"{request.after_step[:40]!r}")
    elif request.after_step < 1:
        raise configuration("after_step must be a positive complete batch ordinal (1 or more)")
    if request.max_steps is not None and request.max_steps < 1:
        raise configuration("max_steps must be positive")
    if request.max_trajectory_bytes < 1:
        raise configuration("max_trajectory_bytes must be positive")
    if request.max_processes < 1:
        raise configuration("max_processes must be positive")
    prompt = request.boundary_user_prompt
    if prompt is not None and prompt != "" and prompt.strip() == "":
        raise configuration("boundary_user_prompt must contain a non-whitespace character")
    if request.branches < 1 or (request.parallel is not None and request.parallel < 1):
        raise configuration("branches and parallel must be at least 1")
    if request.branch_prompts and len(request.branch_prompts) not in (1, request.branches):
        raise configuration(f"give one branch prompt for all branches or one per branch ({request.branches}), "
                            f"not {len(request.branch_prompts)}")
    if (request.branches > 1 or request.branch_prompts) and request.mode is not Mode.REPLAY_AND_CONTINUE:
        raise configuration("branches continue the agent: they cannot be combined with prepare_only / replay_only")
    if (request.branches > 1 or request.branch_prompts) and request.keep_snapshot is False:
        raise configuration("branches continue from the boundary snapshot: drop_snapshot (--drop-snapshot) cannot be "
                            "combined with branches (--branches / --branch-prompt)")
    if request.branch_prompts and request.boundary_user_prompt:
        raise configuration("boundary_user_prompt and branch_prompts are exclusive (branch prompts replace it)")
    if request.on_divergence not in ("warn", "stop", "ignore"):
        raise configuration(f"on_divergence must be warn, stop or ignore, not {request.on_divergence!r}")
    if request.run_id is not None and not _RUN_ID.fullmatch(request.run_id):
        raise configuration("run_id may contain only letters, digits, '-' and '_'")
    if request.upstream is not None and request.upstream not in UPSTREAMS:
        raise configuration(f"unknown upstream {request.upstream!r}; expected one of: {', '.join(UPSTREAMS)}")
    if request.upstream_url is not None and not request.upstream_url.startswith(("http://", "https://")):
        raise configuration("upstream_url must be an http:// or https:// URL")
    if request.agent_entrypoint is not None and not request.agent_entrypoint.is_absolute():
        raise configuration("agent_entrypoint must be an absolute path")
    if request.opencode_export is not None and request.agent != "opencode":
        raise configuration("opencode_export (--opencode-export) completes an OpenCode event log; agent is "
                            f"{request.agent}")
    if request.sandbox not in SANDBOXES:
        raise configuration(unknown_sandbox_message(request.sandbox))
    _validate_model_choice(request)
    _validate_score(request)
    if request.env:
        from forkpoint.process.childenv import check_specs

        check_specs(request.env)
    if request.rootfs is not None and request.image is not None:
        raise configuration("give either rootfs (--rootfs) or image (--image), not both")
    if (request.rootfs is not None or request.image is not None) and request.sandbox != "bwrap":
        raise configuration("rootfs / image (--rootfs / --image) give --sandbox bwrap its root file system; "
                            f"the sandbox is {request.sandbox}")
    if not 0 < request.mcp_timeout <= 3600:
        raise configuration("mcp_timeout (--mcp-timeout) must be between 0 and 3600 seconds")
    if request.mcp_config is not None:
        from forkpoint.process.mcp import load_config

        servers = load_config(request.mcp_config)  # a broken file is refused before anything runs
        remote = sorted(name for name, server in servers.items() if server.url is not None)
        if remote and request.sandbox == "bwrap" and request.mode is Mode.REPLAY_AND_CONTINUE \
                and request.agent == "claude-code":
            raise configuration(
                f"mcp_config (--mcp-config): the continued claude is given the servers, but under --sandbox bwrap its "
                f"network is the model bridge only, so HTTP server(s) {', '.join(remote)} cannot be reached; use "
                "stdio servers, --sandbox local, or --replay-only")
        import importlib.util

        if importlib.util.find_spec("mcp") is None:
            raise configuration("mcp_config (--mcp-config) needs the MCP SDK: pip install 'forkpoint[mcp]'")
    for glob in request.reuse_observations:
        if not isinstance(glob, str) or not glob or "\0" in glob:
            raise configuration(f"reuse_observations (--reuse-observations): {glob!r} is not a tool-name glob")
    if request.path_map:
        from forkpoint.sandbox.base import PathMap

        PathMap.parse(request.path_map)
        if request.sandbox != "local":
            raise configuration("path_map (--path-map) is for --sandbox local; --sandbox bwrap mounts the "
                                "workspace at the recorded path, so recorded paths need no rewriting")


def _validate_score(request: ReplayRequest) -> None:
    import math

    from forkpoint.run.scoring import SCORE_FORMATS

    if request.score is not None and not request.score.strip():
        raise configuration("score (--score) is an empty command")
    if request.score_format not in SCORE_FORMATS:
        raise configuration(f"score_format must be one of {', '.join(SCORE_FORMATS)}, not {request.score_format!r}")
    if not (math.isfinite(request.score_timeout) and 0 < request.score_timeout <= MAX_TIMEOUT_S):
        raise configuration(f"score_timeout must be more than 0 and at most {MAX_TIMEOUT_S:g} seconds")
    if request.original_reward is not None and not math.isfinite(request.original_reward):
        raise configuration("original_reward must be a finite number")
    if request.mode is Mode.PREPARE_ONLY and request.score is not None:
        raise configuration("score (--score) runs a verifier in the replayed workspace; --prepare-only runs nothing")


def boundary(request: ReplayRequest, complete_batches: int) -> int:
    """The request's boundary once the trajectory is parsed (``all``: its last complete batch)."""
    return complete_batches if request.after_step == "all" else int(request.after_step)


def score_spec(request: ReplayRequest) -> ScoreSpec | None:
    """The verifier the request asks for, or None."""
    from forkpoint.run.scoring import ScoreSpec

    if request.score is None:
        return None
    return ScoreSpec(request.score, request.score_timeout, request.score_format)


REASONING_EFFORTS = ("minimal", "low", "medium", "high", "none")
#: the deadlines of a continuation (seconds), and their bound
TIMEOUT_KEYS = ("upstream_idle_timeout", "answer_timeout", "continuation_timeout")
MAX_TIMEOUT_S = 7 * 24 * 3600.0
#: the per-branch lists and the single option each one varies
BRANCH_LISTS = {"branch_models": "model", "branch_seeds": "seed", "branch_temperatures": "temperature"}


def _validate_model_choice(request: ReplayRequest) -> None:
    """``--model`` and the sampling pins: ranges, and whether the protocol that leaves the bridge can carry each
    pin (e.g. no seed on Anthropic Messages): refused before anything runs, never silently dropped."""
    if request.upstream_retries < 0:
        raise configuration("upstream_retries must be 0 or more")
    for key in TIMEOUT_KEYS:
        value = getattr(request, key)
        if not 0 < value <= MAX_TIMEOUT_S:
            raise configuration(f"{key} must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:g} "
                                f"(7 days), not {value!r}")
    if request.reasoning_effort is not None and request.reasoning_effort not in REASONING_EFFORTS:
        raise configuration(f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}, "
                            f"not {request.reasoning_effort!r}")
    for key in BRANCH_LISTS:
        given: list[Any] = branch_list(request, key)
        if given and len(given) not in (1, request.branches):
            raise configuration(f"give one {key} value for all branches or one per branch ({request.branches}), "
                                f"not {len(given)}")
        if given and request.branches < 2:
            raise configuration(f"{key} varies the branches of --branches K (K of 2 or more); for one "
                                f"continuation use {BRANCH_LISTS[key]}")
    if not pins_given(request):
        return  # nothing to check (and the bridge stays unimported: a prepare-only loads no bridge)
    from forkpoint.adapters import agent_spec

    protocol = outgoing_protocol(agent_spec(request.agent).protocol, request.upstream)
    for pins in all_pins(request):
        check_pins(pins, protocol)


def pins_given(request: ReplayRequest) -> bool:
    """Whether the request chooses a model or pins any sampling parameter (for the run or per branch)."""
    return (request.model, request.temperature, request.top_p, request.seed, request.max_output_tokens,
            request.reasoning_effort) != (None,) * 6 or request.disable_thinking or any(
                branch_list(request, key) for key in BRANCH_LISTS)


def branch_list(request: ReplayRequest, key: str) -> list[Any]:
    """One of the per-branch lists by its key (``BRANCH_LISTS``)."""
    lists: dict[str, list[Any]] = {"branch_models": request.branch_models, "branch_seeds": request.branch_seeds,
                                   "branch_temperatures": request.branch_temperatures}
    return lists[key]


def all_pins(request: ReplayRequest) -> list[SamplingPins]:
    """The run's pins, and each branch's variant of them (each is checked before anything runs)."""
    from forkpoint.bridge.translate.sampling import SamplingPins

    try:
        base = SamplingPins(model=request.model, temperature=request.temperature, top_p=request.top_p,
                            seed=request.seed, max_output_tokens=request.max_output_tokens,
                            disable_thinking=request.disable_thinking, reasoning_effort=request.reasoning_effort)
        variants = [dataclasses.replace(base, model=model) for model in request.branch_models]
        variants += [dataclasses.replace(base, seed=seed) for seed in request.branch_seeds]
        variants += [dataclasses.replace(base, temperature=value) for value in request.branch_temperatures]
    except ValueError as exc:
        raise configuration(str(exc).replace("--", "").replace("-", "_")) from None
    return [base, *variants]


def check_pins(pins: SamplingPins, protocol: str) -> None:
    """A configuration error when the protocol leaving the bridge has no field for a pin."""
    from forkpoint.bridge.translate.sampling import UnsupportedPin, apply_pins

    try:
        apply_pins(protocol, {}, pins)
    except UnsupportedPin as exc:
        raise configuration(f"{exc} (the requests leaving the bridge speak {protocol})") from None


def load_toml(path: Path) -> ReplayRequest:
    import tomllib  # only for a --config file

    document = _parse_input(path, "replay config", tomllib.loads, tomllib.TOMLDecodeError)
    extra_tables = sorted(set(document) - {"replay", "score"})
    if extra_tables:
        raise configuration(f"replay config {path}: unknown table(s) or key(s) {', '.join(extra_tables)}; "
                            "only a [replay] and a [score] table are allowed")
    table = document.get("replay")
    if not isinstance(table, dict):
        raise configuration(f"replay config {path}: missing [replay] table")
    values = dict(table)
    values.update(score_table(document.get("score"), f"replay config {path}", values))
    return build_request(_relative_to(values, path.parent), source=f"replay config {path}")


#: a TOML [score] table's keys -> the request's
SCORE_TABLE_KEYS = {"command": "score", "timeout": "score_timeout", "format": "score_format",
                    "original_reward": "original_reward"}


def score_table(table: Any, source: str, values: dict[str, Any]) -> dict[str, Any]:
    """A ``[score]`` table (command, timeout, format, original_reward) as request keys; refused when it repeats a
    key the ``[replay]`` table already gives (``score``, ``score_timeout``...)."""
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise configuration(f"{source}: [score] must be a table")
    unknown = sorted(set(table) - set(SCORE_TABLE_KEYS))
    if unknown:
        raise configuration(f"{source}: unknown key(s) in [score]: {', '.join(unknown)}; allowed: "
                            f"{', '.join(SCORE_TABLE_KEYS)}")
    mapped = {SCORE_TABLE_KEYS[key]: value for key, value in table.items()}
    twice = sorted(key for key in mapped if key in values)
    if twice:
        raise configuration(f"{source}: {', '.join(twice)} given in both [replay] and [score]")
    return mapped


def load_json_request(path: Path) -> ReplayRequest:
    document = _parse_input(path, "request", json.loads, json.JSONDecodeError)
    if not isinstance(document, dict):
        raise configuration(f"request {path}: must be a JSON object")
    schema = document.pop("schema_version", None)
    if schema != REQUEST_SCHEMA:
        raise configuration(f'request {path}: schema_version must be "{REQUEST_SCHEMA}"')
    return build_request(_relative_to(document, path.parent), source=f"request {path}")


def _parse_input(path: Path, what: str, parse: Callable[[str], Any], malformed: type[ValueError]) -> Any:
    """``path``'s UTF-8 text parsed (a bounded read); every way it can be unreadable is a configuration error."""
    raw = _read_input(path, what)
    try:
        return parse(raw.decode("utf-8"))
    except (UnicodeDecodeError, malformed) as exc:
        raise configuration(f"parse {what} {path}: {exc}") from None
    except RecursionError:
        raise configuration(f"parse {what} {path}: nested too deeply") from None


def _relative_to(values: dict[str, Any], base: Path) -> dict[str, Any]:
    """Relative paths inside a config file are relative to that file, not to the caller's cwd."""
    for key in ("trajectory", "workspace", "state_dir", "output_dir", "workspace_from", "opencode_export"):
        value = values.get(key)
        if isinstance(value, str) and value and not Path(value).is_absolute():
            if key == "workspace_from":
                url = value.rpartition("@")[0]
                if not ((base / value).exists() or (url and (base / url).exists())):
                    continue  # a remote GIT_URL@REV (or nothing next to the file: refused later as given)
            values[key] = str(base / value)
    return values


def _read_input(path: Path, what: str) -> bytes:
    try:
        if not path.is_file():
            raise configuration(f"{what} {path} does not exist or is not a regular file")
        with path.open("rb") as handle:
            data = handle.read(_MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise configuration(f"read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > _MAX_INPUT_BYTES:
        raise configuration(f"{what} {path} is larger than {_MAX_INPUT_BYTES} bytes")
    return data


def _allowed() -> list[str]:
    return sorted((*_FIELD_KEYS, *_MODE_KEYS))


@functools.cache
def _field_types() -> dict[str, Any]:
    return typing.get_type_hints(ReplayRequest)


def _type_errors(location: str, value: Any, expected: Any) -> list[str]:
    """Strict type check of one field value (pydantic's strict-mode rules and words); [] when it fits."""
    if isinstance(expected, types.UnionType):  # X | None: None, or a valid X (the first member's words if not)
        if value is None and type(None) in expected.__args__:
            return []
        errors = [_type_errors(location, value, arg) for arg in expected.__args__ if arg is not type(None)]
        return [] if [] in errors else errors[0]
    if isinstance(expected, types.GenericAlias):  # list[X]
        if not isinstance(value, list):
            return [f"{location}: input should be a valid list"]
        (item,) = expected.__args__
        return [error for index, element in enumerate(value)
                for error in _type_errors(f"{location}.{index}", element, item)]
    if expected is bool:
        return [] if isinstance(value, bool) else [f"{location}: input should be a valid boolean"]
    if expected is int:
        fits = isinstance(value, int) and not isinstance(value, bool)
        return [] if fits else [f"{location}: input should be a valid integer"]
    if expected is float:
        fits = isinstance(value, int | float) and not isinstance(value, bool)
        return [] if fits else [f"{location}: input should be a valid number"]
    if expected is str:
        return [] if isinstance(value, str) else [f"{location}: input should be a valid string"]
    return [] if isinstance(value, expected) else [f"{location}: input should be an instance of {expected.__name__}"]


def chosen_upstream(request: ReplayRequest, spec: AgentSpec) -> UpstreamChoice:
    """The request's upstream, else the agent's own wire protocol; it must be one the agent speaks."""
    upstream = spec.upstream(request.upstream)
    if upstream is None:
        supported = ", ".join(u.name for u in spec.upstreams)
        raise configuration(f"{spec.name} cannot use --upstream {request.upstream}; supported: {supported}")
    return upstream


def continue_settings(request: ReplayRequest, spec: AgentSpec, launch: LaunchTarget | None,
                      plan: Plan) -> ContinueSettings:
    """Where and how the continued agent's model traffic goes (keys from forkpoint's own environment)."""
    assert launch is not None
    remaining = request.max_steps - plan.prefix_model_turns if request.max_steps is not None else None
    upstream = chosen_upstream(request, spec)
    url_name, key_name = upstream.url_env, upstream.key_env
    return ContinueSettings(
        target=launch,
        upstream=upstream.name,
        upstream_url=request.upstream_url or (os.environ.get(url_name) if url_name else None) or None,
        upstream_key=os.environ.get(key_name) if key_name else None,
        boundary_prompt=request.boundary_user_prompt or None,
        remaining_steps=remaining,
        model=request.model,
        sampling=dataclasses.replace(all_pins(request)[0], model=None) if pins_given(request) else None,
        upstream_retries=request.upstream_retries,
        record_tool_schemas=request.record_tool_schemas,
        capture_tokens=request.capture_tokens,
        mcp_config=request.mcp_config,
        timeout_s=request.continuation_timeout,
        upstream_idle_timeout_s=request.upstream_idle_timeout,
        answer_timeout_s=request.answer_timeout,
    )
