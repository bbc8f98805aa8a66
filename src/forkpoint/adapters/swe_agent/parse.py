"""Parse a SWE-agent 1.1.0 ``.traj`` into the neutral Trajectory (pure apart from reading the file).

Format (``DefaultAgent.get_trajectory_data``; see docs/adapters/swe-agent.md): one JSON object
``{trajectory, history, info, replay_config, environment}``. ``replay_config`` is a JSON string (an object is
accepted too). SWE-agent runs exactly ONE action per step: step i is ``trajectory[i]`` (the raw ``observation``
the command printed, ``state`` from the bundles' state command) and, in ``history``, the i-th non-demonstration
``assistant`` item followed by the ``user``/``tool`` observation item the model saw (the raw output rendered with
``next_step_template``).

Requeried attempts (``forward_with_handling``'s ``handle_error_with_retry``: a format error, a blocked action, a
bash syntax error, a bundle tool that printed the retry token such as a lint-failed ``edit``) are appended to
``trajectory`` but never to ``history``: the model saw them only inside the next query (its output and the
rendered error template as the last two messages, ``message_type`` ``assistant``/``user``). So step i is the i-th
ACCEPTED trajectory entry, matched to the i-th history assistant item; requeried entries are no calls (never
re-run) and stay in the prefix as recorded.

A batch is one step with one call named after the tool (``tool_calls[0].function.name``, else ``bash``) whose
arguments are ``{"action": <the shell line SWE-agent ran>}``. Its historical observation is the history
message's content, exactly what the model saw.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from forkpoint.adapters.kit.jsondoc import as_object, load_json_document
from forkpoint.adapters.swe_agent.bundles import BundleSetup, bundle_setup, classify_bundle_call, ends_the_run
from forkpoint.adapters.swe_agent.templates import ObservationTemplates, TemplateError
from forkpoint.core.errors import trajectory, unsupported_version
from forkpoint.core.fs import DEFAULT_MAX_INPUT_BYTES
from forkpoint.core.model import ActionSignature, Batch, CallPolicy, JsonObject, Observation, ToolCall, Trajectory

AGENT = "swe-agent"
DEFAULT_EXECUTION_TIMEOUT_S = 30.0
#: commands that come from SWE-agent's tool bundles (tools/<bundle>/bin), not from the shell
BUNDLE_COMMANDS = frozenset({
    "str_replace_editor", "submit", "create", "open", "goto", "scroll_up", "scroll_down", "edit", "insert",
    "search_file", "search_dir", "find_file", "filemap", "view_image", "review_on_submit", "_state",
    "_state_anthropic", "_state_diff_state", "forfeit", "exit_forfeit",
})
TERMINAL_COMMANDS = frozenset({"submit", "exit", "exit_forfeit", "forfeit"})
#: state keys forkpoint recomputes itself (``_state_anthropic``: the shell's cwd)
REPLAYABLE_STATE = frozenset({"working_dir"})


@dataclass(frozen=True)
class Step:
    """One step's native pieces: where it sits in ``trajectory`` / ``history``."""

    index: int  # 0-based step index (= the model's turn in history)
    assistant_at: int  # index in history
    observation_at: int | None  # index in history of the observation item, None when missing
    action: str
    trajectory_at: int  # index in ``trajectory`` (after the requeried attempts before it)
    requeried: tuple[int, ...] = ()  # trajectory indices of the attempts requeried before this step


@dataclass(frozen=True)
class SweAgentNative:
    data: JsonObject  # the whole parsed document (replay_config left as recorded)
    replay_config: JsonObject  # decoded
    steps: tuple[Step, ...]
    templates: ObservationTemplates | None
    template_problem: str | None
    execution_timeout_s: float
    env_variables: dict[str, str]
    format_values: dict[str, Any]  # template names SWE-agent's _get_format_dict provides besides the state
    bundles: BundleSetup
    problem_statement: str | None  # the text SWE-agent exported as PROBLEM_STATEMENT (text problem statements)

    @property
    def bundle_commands(self) -> frozenset[str]:
        return self.bundles.commands

    @property
    def registry_variables(self) -> dict[str, Any]:
        return self.bundles.registry_variables


def parse_traj(path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Trajectory[SweAgentNative]:
    data, sha256 = load_json_document(path, "SWE-agent trajectory", max_bytes)
    if not isinstance(data, dict):
        raise trajectory("a SWE-agent .traj must be a JSON object")
    if "attempts" in data:
        raise unsupported_version("SWE-agent RetryAgent trajectories (several attempts) cannot be replayed "
                                  "deterministically; replay one attempt's own .traj instead")
    for key in ("trajectory", "history"):
        if key not in data:
            raise trajectory(f"the SWE-agent trajectory has no {key!r}")
    warnings: list[str] = []
    if "replay_config" not in data:  # SWE-agent before 1.0 recorded none: its structure is still readable
        warnings.append("no replay_config (SWE-agent before 1.0): read with the default agent, templates and tools; "
                        "the recorded cwd and instance are unknown")
    elif data["replay_config"] is None:
        raise trajectory("the SWE-agent trajectory's replay_config is null (SWE-agent writes null when the agent ran "
                         "without `sweagent run`/`run-batch` setting it, e.g. from the Python API): without the "
                         "recorded configuration (repository, templates, tools) forkpoint cannot replay it")
    steps_raw, history = data["trajectory"], data["history"]
    if not isinstance(steps_raw, list) or not all(isinstance(s, dict) for s in steps_raw):
        raise trajectory("SWE-agent 'trajectory' must be a list of step objects")
    if not isinstance(history, list) or not all(isinstance(h, dict) for h in history):
        raise trajectory("SWE-agent 'history' must be a list of message objects")
    config = _replay_config(data["replay_config"]) if "replay_config" in data else {}
    info = as_object(data.get("info"))
    version = info.get("swe_agent_version") if isinstance(info.get("swe_agent_version"), str) else None
    if steps_raw and "query" not in steps_raw[0] and "messages" in steps_raw[0]:
        version = version or "<1.1.0 (steps record 'messages', not 'query')>"

    agent = as_object(config.get("agent"))
    if agent.get("type", "default") != "default":
        raise unsupported_version(f"SWE-agent agent type {agent.get('type')!r} is not supported (only 'default': "
                                  "retry and shell agents cannot be replayed deterministically)")
    tools = as_object(agent.get("tools"))
    env_variables = {str(k): str(v) for k, v in (tools.get("env_variables") or {}).items()} if isinstance(
        tools.get("env_variables"), dict) else {}
    timeout = tools.get("execution_timeout", DEFAULT_EXECUTION_TIMEOUT_S)
    timeout_s = float(timeout) if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0 \
        else DEFAULT_EXECUTION_TIMEOUT_S
    cwd = recorded_cwd(config)
    format_values = _format_values(config, env_variables, cwd)
    setup = bundle_setup(tools)
    templates, problem = _templates(agent, set(format_values) | setup.state_keys)

    steps = _steps(steps_raw, history)
    requeried = [f"trajectory[{t}]" for step in steps for t in step.requeried]
    if requeried:
        warnings.append(f"{len(requeried)} requeried attempt(s) ({', '.join(requeried[:5])}"
                        f"{', ...' if len(requeried) > 5 else ''}) never reached history: they are no calls (not "
                        "re-run) and stay in the prefix's trajectory as recorded")
    batches, next_actions, refusals = _batches(steps, steps_raw, history, problem, setup, info)
    statement = format_values.get("problem_statement")
    native = SweAgentNative(data, config, tuple(steps), templates, problem, timeout_s, env_variables, format_values,
                            setup, statement if isinstance(statement, str) else None)
    return Trajectory.recorded(AGENT, version, path, sha256, session_id=_instance_id(config) or path.stem, cwd=cwd,
                               batches=batches, next_actions=next_actions, boundary_refusals=refusals, native=native,
                               warnings=warnings)


def _replay_config(value: Any) -> JsonObject:
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError as error:
            raise trajectory(f"SWE-agent replay_config is not valid encoded JSON: {error}") from None
    if not isinstance(value, dict):
        raise trajectory("SWE-agent replay_config is not an object (or a JSON string holding one)")
    return value


def recorded_cwd(config: JsonObject) -> str | None:
    """Where SWE-agent's shell worked: ``/<repo_name>`` (``SWEEnv._reset_repository`` cds there)."""
    env = as_object(config.get("env"))
    repo = env.get("repo") if isinstance(env.get("repo"), dict) else None
    if repo is None:
        return None
    name = repo.get("repo_name")
    if not isinstance(name, str) or not name:
        path = repo.get("path")
        if repo.get("type") == "local" and isinstance(path, str) and path:
            name = os.path.basename(os.path.normpath(path))
        else:
            url = repo.get("github_url")
            if isinstance(url, str) and url:
                parts = url.rstrip("/").removesuffix(".git").split("/")[-2:]
                name = "__".join(parts)
    if not isinstance(name, str) or not name:
        return None
    return os.path.normpath("/" + name)


def _instance_id(config: JsonObject) -> str | None:
    problem = config.get("problem_statement")
    value = problem.get("id") if isinstance(problem, dict) else None
    return value if isinstance(value, str) and value else None


def _format_values(config: JsonObject, env_variables: dict[str, str], cwd: str | None) -> dict[str, Any]:
    """What ``DefaultAgent._get_format_dict`` offers every template, as far as the recording tells."""
    values: dict[str, Any] = dict(env_variables)
    if cwd is not None:
        values["repo"] = cwd.lstrip("/")
    problem = config.get("problem_statement")
    if isinstance(problem, dict) and problem.get("type", "text") == "text" and isinstance(problem.get("text"), str):
        values["problem_statement"] = problem["text"]
    return values


def _templates(agent: JsonObject, available: set[str]) -> tuple[ObservationTemplates | None, str | None]:
    raw = as_object(agent.get("templates"))
    try:
        templates = ObservationTemplates.from_config(raw)
        templates.check(available)
    except TemplateError as error:
        return None, f"its observation template cannot be rendered by forkpoint: {error}"
    return templates, None


def _is_demo(item: JsonObject) -> bool:
    return bool(item.get("is_demo")) or item.get("message_type") == "demonstration"


def _steps(steps_raw: list[JsonObject], history: list[JsonObject]) -> list[Step]:
    assistants = [i for i, item in enumerate(history) if item.get("role") == "assistant" and not _is_demo(item)]
    flagged = {t for t in range(len(steps_raw) - 1) if _requeried_by(steps_raw[t], steps_raw[t + 1])}
    steps: list[Step] = []
    cursor = 0  # the next trajectory entry not yet placed
    for index, at in enumerate(assistants):
        candidates = [t for t in range(cursor, len(steps_raw)) if t not in flagged]
        if not candidates:
            break
        # the accepted entry is the one the history item repeats; entries before it were requeried
        matched = next((t for t in candidates if _same_turn(steps_raw[t], history[at])), candidates[0])
        action = steps_raw[matched].get("action")
        if not isinstance(action, str):
            raise trajectory(f"SWE-agent step {index + 1} has no action string (trajectory[{matched}])")
        following = assistants[index + 1] if index + 1 < len(assistants) else len(history)
        observation_at = next((j for j in range(at + 1, following)
                               if history[j].get("role") in ("user", "tool") and not _is_demo(history[j])), None)
        steps.append(Step(index, at, observation_at, action, matched, tuple(range(cursor, matched))))
        cursor = matched + 1
    return steps


def _requeried_by(entry: JsonObject, following: JsonObject) -> bool:
    """``get_model_requery_history``: the next query ends with this entry's output and the error template, as
    ``message_type`` ``assistant`` and ``user`` (history items are ``action``/``observation``)."""
    query = following.get("query")
    if not isinstance(query, list) or len(query) < 2 or not all(isinstance(m, dict) for m in query[-2:]):
        return False
    said, error = query[-2], query[-1]
    if (said.get("role"), said.get("message_type"), error.get("role"), error.get("message_type")) != (
            "assistant", "assistant", "user", "user"):
        return False
    response = entry.get("response")
    return not isinstance(response, str) or content_text(said.get("content")) == response


def _same_turn(entry: JsonObject, assistant: JsonObject) -> bool:
    """The trajectory entry ``add_step_to_trajectory`` wrote for the turn ``add_step_to_history`` kept."""
    for entry_key, item_key in (("action", "action"), ("response", "content"), ("thought", "thought")):
        recorded, kept = entry.get(entry_key), assistant.get(item_key)
        if isinstance(recorded, str) and item_key in assistant and content_text(kept) != recorded:
            return False
    return True


def _batches(
    steps: list[Step], steps_raw: list[JsonObject], history: list[JsonObject], template_problem: str | None,
    setup: BundleSetup, info: JsonObject,
) -> tuple[list[Batch], list[ActionSignature | None], dict[int, str]]:
    batches: list[Batch] = []
    refusals: dict[int, str] = {}
    complete = True
    terminal_at: int | None = None
    for step in steps:
        assistant = history[step.assistant_at]
        raw = steps_raw[step.trajectory_at]
        observation = raw.get("observation")
        item = history[step.observation_at] if step.observation_at is not None else None
        complete = complete and item is not None and isinstance(observation, str)
        historical = Observation(item.get("content")) if item is not None else None
        name = _tool_name(assistant)
        call_id = _call_id(assistant, step.index)
        command = first_word(step.action)
        terminal = ends_the_run(command, step.trajectory_at, len(steps_raw) - 1, observation, info)
        policy, reason = classify(name, step.action, raw.get("state"), template_problem, setup=setup,
                                  terminal=terminal, observation=observation)
        call = ToolCall(call_id, name, {"action": step.action}, historical, policy, reason, native=step.trajectory_at)
        batches.append(Batch(step.index + 1, (call,), f"trajectory[{step.trajectory_at}]", complete, native=step))
        if terminal_at is None and terminal:
            terminal_at = step.index + 1
        if terminal_at is not None:
            ended = first_word(steps[terminal_at - 1].action) or "no action"
            refusals[step.index + 1] = (f"step {terminal_at} ({ended}) ends the SWE-agent run; a replay prefix cannot "
                                        "contain it")
    next_actions: list[ActionSignature | None] = []
    assistants = [i for i, item in enumerate(history) if item.get("role") == "assistant" and not _is_demo(item)]
    for n in range(len(batches) + 1):
        next_actions.append(signature(history[assistants[n]]) if n < len(assistants) else None)
    return batches, next_actions, refusals


def first_word(action: str) -> str:
    """The command name as the shell would see it; only the first token is lexed (a long heredoc is not)."""
    stripped = action.strip()
    if not stripped:
        return ""
    lexer = shlex.shlex(stripped.splitlines()[0], posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        word = lexer.get_token()
    except ValueError:  # an unbalanced quote inside the first word
        return stripped.split()[0]
    return word or ""


def classify(name: str, action: str, state: Any, template_problem: str | None, *, setup: BundleSetup | None = None,
             terminal: bool | None = None, observation: Any = None) -> tuple[CallPolicy, str | None]:
    """Shell actions and the re-implemented default bundle tools (bundle_tools.py) re-run; other bundle tools need
    SWE-agent's own scripts (not installable here). ``terminal`` None: any terminal command counts as the end."""
    if template_problem is not None:
        return CallPolicy.REFUSED, template_problem
    command = first_word(action)
    if terminal or (command in TERMINAL_COMMANDS and terminal is None):
        return CallPolicy.REFUSED, f"{command or 'this step'!r} ends the SWE-agent run"
    known = setup.state_keys if setup is not None else REPLAYABLE_STATE
    bundled = classify_bundle_call(setup, name, command, action, observation) if setup is not None else None
    if bundled is not None:
        policy, reason = bundled
        extra = sorted(set(state) - known) if isinstance(state, dict) else []
        if extra:
            return CallPolicy.REFUSED, (f"its state ({', '.join(extra)}) comes from a SWE-agent bundle state "
                                        "command forkpoint cannot run")
        return policy, reason
    if command in TERMINAL_COMMANDS:
        return CallPolicy.REFUSED, (f"{command!r} did not end this run (a review stage), but forkpoint re-implements "
                                    "it only for the review_on_submit_m bundle")
    if name != "bash" or command in BUNDLE_COMMANDS:
        tool = name if name != "bash" else command
        return CallPolicy.REFUSED, (f"{tool!r} is a SWE-agent tool-bundle command; its script ships with SWE-agent "
                                    "(not installable from PyPI), so forkpoint cannot re-run it")
    extra = sorted(set(state) - known) if isinstance(state, dict) else []
    if extra:
        return CallPolicy.REFUSED, (f"its state ({', '.join(extra)}) comes from a SWE-agent bundle state command "
                                    "forkpoint cannot run")
    return CallPolicy.FRESH, None


def _tool_name(assistant: JsonObject) -> str:
    calls = assistant.get("tool_calls")
    if isinstance(calls, list) and len(calls) == 1 and isinstance(calls[0], dict):
        function = calls[0].get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return str(function["name"])
    return "bash"


def _call_id(assistant: JsonObject, index: int) -> str:
    calls = assistant.get("tool_calls")
    if isinstance(calls, list) and len(calls) == 1 and isinstance(calls[0], dict):
        value = calls[0].get("id")
        if isinstance(value, str) and value:
            return value
    return f"swe-agent-step-{index + 1}"


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def signature(assistant: JsonObject) -> ActionSignature:
    thought = assistant.get("thought")
    text = thought if isinstance(thought, str) else content_text(assistant.get("content"))
    blocks = assistant.get("thinking_blocks")
    reasoning = "\n".join(str(b.get("thinking", "")) for b in blocks if isinstance(b, dict)) \
        if isinstance(blocks, list) else ""
    action = assistant.get("action")
    tools = ((_tool_name(assistant), {"action": action}),) if isinstance(action, str) and action.strip() else ()
    return ActionSignature(text=text, reasoning=reasoning, tools=tools)
