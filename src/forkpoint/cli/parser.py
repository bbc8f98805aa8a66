"""The argparse tree of `forkpoint`: every command, option and help text (loaded unless forkpoint.cli answers
`--help`/`--version` from the stored help texts).

Plain argparse, and every heavy module (engine, adapters, runtimes, orjson, rich) is imported inside the command
that needs it: a replay loads only what it runs (issue 8: cold start).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from forkpoint import __version__
from forkpoint.cli import help_width

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

DESCRIPTION = (
    "Replay a coding agent's recorded run up to a boundary and continue the real agent from there.\n\n"
    "A boundary is 'after N complete tool batches' (a batch = every tool call of one assistant "
    "response plus all their results). Start with `forkpoint inspect TRAJECTORY` to see the batches."
)

# -- model choice and sampling pins (issue 17), shared by `replay` and `continue` --------------------------------------

#: (option, metavar or None for a flag, type, help): set by the bridge on every request AFTER the gate validated it.
MODEL_OPTIONS: tuple[tuple[str, str | None, Callable[[str], Any], str], ...] = (
    ("--model", "NAME", str, "The model the continuation asks for [default: the recorded one]. The agent still "
     "sends the recorded model (the bridge proves the first request against the recording); the bridge then "
     "sets the model field to NAME on every validated request (docs/upstreams.md, 'Model choice')."),
    ("--temperature", "F", float, "Sampling temperature in [0, 2], set on every request."),
    ("--top-p", "F", float, "Nucleus sampling top_p in [0, 1]."),
    ("--seed", "N", int, "Sampling seed (Chat Completions agents: {seed_agents}; the Anthropic and Responses APIs "
     "have none: refused)."),
    ("--max-output-tokens", "N", int, "Output token cap (Anthropic max_tokens, Responses max_output_tokens, Chat "
     "max_tokens / max_completion_tokens)."),
    ("--disable-thinking", None, bool, "Turn reasoning off: Anthropic thinking {type: disabled}, Chat "
     "chat_template_kwargs.enable_thinking=false (vLLM/SGLang); codex: use --reasoning-effort instead."),
    ("--reasoning-effort", "LEVEL", str, "minimal, low, medium, high or none: Responses reasoning.effort (codex) or "
     "Chat reasoning_effort; refused for claude-code (use --disable-thinking)."),
    ("--upstream-retries", "N", int, "Retries (exponential backoff with jitter, Retry-After honoured) of an upstream "
     "408/429/5xx or connection error before the first byte reaches the agent; each attempt is in the bridge log; "
     "0: none [default: 3]."),
    ("--upstream-idle-timeout", "S", float, "Cut an upstream answer (or the wait for its headers) after S seconds "
     "without a byte: a model_timeout failure, retryable (exit 40) [default: 300]."),
    ("--answer-timeout", "S", float, "Cut one model answer that has not ended after S seconds (an upstream that "
     "drips keep-alives forever): model_timeout, retryable [default: 1800]."),
    ("--continuation-timeout", "S", float, "Stop the continued agent after S seconds in all: model_timeout "
     "(retryable) when it was waiting on the model, else continuation_error [default: 14400 = 4 h]."),
    ("--branch-model", "NAME", str, "With --branches: the model of each branch, once for all or once per branch "
     "(repeatable)."),
    ("--branch-seed", "N", int, "With --branches: the seed of each branch (repeatable, like --branch-model)."),
    ("--branch-temperature", "F", float, "With --branches: the temperature of each branch (repeatable)."),
)
#: the request keys of MODEL_OPTIONS (--branch-X gives the list branch_Xs)
MODEL_DESTS = tuple(option[2:].replace("-", "_") for option, *_ in MODEL_OPTIONS)
BRANCH_LIST_KEYS = {"branch_model": "branch_models", "branch_seed": "branch_seeds",
                    "branch_temperature": "branch_temperatures"}


def after_step_value(text: str) -> int | str:
    """``--after-step``: a number, or ``all``."""
    if text == "all":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'all', not {text!r}") from None


def original_reward_value(text: str) -> float | Path:
    """``--original-reward``: a finite number, else a run dir whose reward is read when the command runs."""
    import math

    try:
        value = float(text)
    except ValueError:
        return Path(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number or a run dir, not {text!r}")
    return value


#: (option, metavar, type, help) of the verifier (docs/rl.md), for replay and continue
SCORE_OPTIONS: tuple[tuple[str, str | None, Callable[[str], Any], str], ...] = (
    ("--score", "CMD", str, "Score the final workspace (of the run, or of each branch) with CMD, run by /bin/sh -c "
     "in the run's sandbox with the child-env allowlist: the reward is its last stdout line when that is a finite "
     "number, else its exit status (0 -> 1.0, other -> 0.0); a verifier that hangs, floods or cannot start is a "
     "recorded score failure, never a failed run (docs/rl.md)."),
    ("--score-timeout", "S", float, "Kill the verifier (and all it started) after S seconds: a score failure "
     "[default: 600]."),
    ("--score-format", "FORMAT", str, "last-line (a number, else the exit status) or json (the last line is "
     "{\"reward\": float, ...}; other keys kept) [default: last-line]."),
    ("--original-reward", "X|RUN_DIR", original_reward_value, "The recording's own reward: a number, or the run dir "
     "of a scored `--after-step all --replay-only --score CMD` run (its score.reward is read); each group then "
     "counts the branches whose reward equals it."),
)
SCORE_DESTS = tuple(option[2:].replace("-", "_") for option, *_ in SCORE_OPTIONS)


#: the options given once per value, each value appended to a list
_REPEATABLE = ("--path-map", "--branch-prompt", "--env", "--reuse-observations",
               *("--" + dest.replace("_", "-") for dest in BRANCH_LIST_KEYS))


def add_options(parser: argparse.ArgumentParser,
                options: tuple[tuple[str, str | None, Callable[[str], Any], str], ...]) -> None:
    """Each (option, metavar or None for a flag, type, help) of a table such as MODEL_OPTIONS as an argument."""
    for option, metavar, kind, text in options:
        dest = "as_json" if option == "--json" else option[2:].replace("-", "_")
        if metavar is None:
            parser.add_argument(option, dest=dest, action="store_true", help=text)
        else:
            parser.add_argument(option, dest=dest, metavar=metavar, type=kind,
                                action="append" if option in _REPEATABLE else "store", help=text)


_DIRECT_OPTIONS = (
    "agent", "trajectory", "after_step", "workspace", "state_dir", "output_dir", "run_id", "max_steps",
    "prepare_only", "replay_only", "allow_stale_observations", "require_verified_version", "boundary_user_prompt",
    "upstream",
    "upstream_url", "agent_entrypoint", "sandbox", "path_map", "rootfs", "image", "workspace_from", "on_divergence",
    "branches",
    "branch_prompt", "parallel", "keep_snapshot", "drop_snapshot", "max_trajectory_bytes", "max_processes",
    "opencode_export", "env", "reuse_observations", "mcp_config", "mcp_timeout",
    *MODEL_DESTS,
    "agent_version", "record_tool_schemas", "capture_tokens", *SCORE_DESTS,
)

#: (option, metavar or None for a flag, type, help) of `forkpoint replay`, in the order --help lists them.
_REPLAY_OPTIONS: tuple[tuple[str, str | None, Callable[[str], Any], str], ...] = (
    ("--agent", "NAME", str, "Agent name: {agents}."),
    ("--trajectory", "PATH", Path, "The native trajectory file."),
    ("--after-step", "N", after_step_value, "Boundary: replay the first N complete tool batches; 'all': every "
     "complete batch (the whole recording, e.g. to score the original with --replay-only --score)."),
    ("--workspace", "DIR", Path, "Fresh workspace the tools re-run in [default: .]."),
    ("--state-dir", "DIR", Path, "State root (journal, agent homes) [default: forkpoint-out/state]."),
    ("--output-dir", "DIR", Path, "Output root; each run gets <root>/<run-id> [default: forkpoint-out/runs]."),
    ("--run-id", "ID", str, "Run id ([A-Za-z0-9_-]+) [default: replay-<random>]."),
    ("--max-steps", "N", int, "TOTAL step budget including the replayed prefix."),
    ("--max-trajectory-bytes", "N", int, "Refuse a trajectory larger than N bytes (trajectories are untrusted "
     "input) [default: 268435456 = 256 MiB]."),
    ("--max-processes", "N", int, "At most N processes (threads included) per replayed command or verifier, each "
     "in a pids cgroup of its own; without one, RLIMIT_NPROC when not root, else result metadata says "
     "process_limit: unavailable and why (docs/sandboxes.md) [default: 512]."),
    ("--prepare-only", None, bool, "Write the native prefix with the historical observations; run nothing."),
    ("--replay-only", None, bool, "Re-run the prefix's tools and write the native prefix; do not start the agent."),
    ("--allow-stale-observations", None, bool, "Reuse recorded observations that cannot be refreshed "
     "(web, todo, MCP, a sub-agent whose transcript is missing...); the result is marked degraded."),
    ("--reuse-observations", "GLOB", str, "Reuse the recorded observations of the tools whose names match GLOB "
     "(fnmatch, e.g. 'mcp__docs__*') without --allow-stale-observations: for tools you know are read-only; each "
     "such call is recorded as reused_by_request in observations.json and the quality reasons. Repeatable."),
    ("--mcp-config", "FILE", Path, "Your MCP servers, in Claude Code's own format ({\"mcpServers\": {NAME: {command, "
     "args, env} or {type: http, url, headers}}}): the recorded calls of the servers it names are re-run against "
     "them and compared (a stdio server runs with the child-environment allowlist plus its env, in a process group "
     "killed when the replay ends); the continued claude is given the same servers (--mcp-config, "
     "--strict-mcp-config; under --sandbox bwrap stdio servers only)."),
    ("--mcp-timeout", "S", float, "Seconds an MCP server may take to start, and to answer one call; past it its "
     "processes are killed and the run fails [default: 60]."),
    ("--require-verified-version", None, bool, "Refuse (exit 11) a recording whose agent version is not a "
     "verified one; without it, any version forkpoint can read is prepared and replayed with the tool semantics "
     "of the nearest verified version, and the result is marked degraded (unverified_version)."),
    ("--boundary-user-prompt", "TEXT", str,
     "Append exactly one user message after the last fresh observation (never stored in outputs)."),
    ("--upstream", "NAME", str,
     "Where validated model requests go: {upstreams} — keys come from forkpoint's own environment and are never "
     "passed to the agent — or 'stub' (the bridge answers itself: a zero-cost check that the real agent "
     "accepted the rebuilt session) [default: the agent's own protocol]."),
    ("--upstream-url", "URL", str, "Base URL of the upstream [default: $ANTHROPIC_BASE_URL / $OPENAI_BASE_URL, "
     "else the provider's public API]."),
    ("--agent-entrypoint", "PATH", Path, "An explicit agent executable (absolute path); its --version must be a "
     "verified version [default: the installed runtime of the recorded version]."),
    ("--agent-version", "V", str, "The verified version of the same agent that continues the recording (the gate "
     "uses its envelope profile); only pairs proven end to end are accepted (`forkpoint agents list` shows them), "
     "others exit 11 [default: the recorded version when it is verified, else the newest verified version proven "
     "to continue the nearest verified version's recordings]."),
    ("--record-tool-schemas", None, bool, "Save the tool definitions (never messages) of the first validated "
     "model request to tool-schemas.json in the run's (or branch's) output dir, as OpenAI function schemas; "
     "`forkpoint export` fills its tools column from it."),
    ("--capture-tokens", None, bool, "Ask an OpenAI-compatible Chat Completions upstream (vLLM, SGLang) for the "
     "token ids and logprobs of every model request and record them, with the sampling parameters, in "
     "tokens.jsonl in the run's (or branch's) output dir (never a body or a prompt text); an upstream that "
     "cannot return them is said once in result metadata token_capture (docs/rl.md)."),
    ("--sandbox", "NAME", str,
     "Where tools and the agent run: 'local' (no isolation; the workspace must be at the recorded cwd, "
     "or use --path-map) or 'bwrap' (bubblewrap: the workspace mounted at the recorded cwd, the rest of the "
     "file system read-only, private /tmp, your HOME hidden, no network during tool replay) [default: local]."),
    ("--rootfs", "DIR", str,
     "With --sandbox bwrap: this folder is the sandbox's root file system (the recording's environment) instead "
     "of the host's; the workspace is mounted at the recorded cwd and the agent runtime bound in."),
    ("--image", "FILE", str,
     "With --sandbox bwrap: an OCI image (layout folder or tarball) or a docker/podman save tarball, unpacked "
     "safely and cached by digest ($FORKPOINT_IMAGE_CACHE, default ~/.cache/forkpoint/images), used as --rootfs."),
    ("--path-map", "OLD=NEW", str,
     "With --sandbox local: rewrite the recorded path prefix OLD to NEW in tool inputs for execution "
     "(and NEW back to OLD in outputs); the native session keeps the original text. Repeatable."),
    ("--env", "NAME[=VALUE]", str,
     "Pass one more environment variable to replayed commands and the continued agent: NAME takes forkpoint's "
     "own value, NAME=VALUE the given one (children otherwise get only an allowlist: PATH, locale, TERM, TZ, "
     "...; see docs/security.md). Result metadata lists the names, never the values. Repeatable."),
    ("--workspace-from", "SOURCE", str,
     "DIR, TARBALL or GIT_URL@REV: create the (absent or empty) --workspace first: copy a directory, "
     "extract a tar archive, or clone a git repository at a revision."),
    ("--on-divergence", "POLICY", str,
     "When a fresh observation differs from the recorded one (after the adapter's normalisation of volatile "
     "fields): 'warn' prints a line per diverging call and goes on, 'stop' ends the run after the replay, before "
     "the continuation (exit 32), 'ignore' only records it; always in metadata.divergence [default: warn]."),
    ("--branches", "K", int, "Re-run the prefix once, then continue K times from identical copies of the boundary "
     "(branches/<i>/ per branch, branches.json with their agreement) [default: 1]."),
    ("--branch-prompt", "TEXT", str, "The boundary prompt of the branches: once for all, or once per branch "
     "(repeatable; never stored, only its length and SHA-256)."),
    ("--parallel", "P", int, "Branches running at once under --sandbox bwrap (local: one at a time, the recorded "
     "path is one workspace) [default: the cores]."),
    ("--keep-snapshot", None, bool, "Keep the boundary snapshot (for `forkpoint continue`) also after a single "
     "continuation."),
    ("--drop-snapshot", None, bool, "Keep no boundary snapshot (replay-only and branched runs keep one by default)."),
    ("--opencode-export", "FILE", Path, "With an OpenCode `run --format=json` event log as --trajectory: the "
     "session's `opencode export` JSON, which gives what the log lacks (the prompt, the version)."),
    ("--config", "FILE", Path, "A TOML file with a [replay] table (same keys, snake_case)."),
    ("--request", "FILE", Path, 'A JSON request with schema_version "forkpoint.request/v1".'),
    ("--json", None, bool, "Print the result as one JSON line."),
)


#: Shown after `forkpoint replay --help`'s options; the exit codes are ErrorKind's (a test keeps them equal).
REPLAY_EPILOG = """examples:

  # the native prefix with the historical observations, nothing run (a training prefix)
  forkpoint replay --agent claude-code --trajectory session.jsonl --after-step 2 --prepare-only
  # re-run batches 1..2 in a fresh workspace (mounted at the recorded cwd) and write the fresh session
  forkpoint replay --agent codex --trajectory rollout.jsonl --after-step 2 --replay-only --workspace ws/ \\
      --sandbox bwrap
  # ... and continue the real agent, its model traffic validated by the bridge and sent to Anthropic
  ANTHROPIC_API_KEY=... forkpoint replay --agent claude-code --trajectory session.jsonl --after-step 2 \\
      --workspace ws/ --sandbox bwrap --max-steps 30 --boundary-user-prompt "Run the tests first."
  # a zero-cost check that the real agent accepts the rebuilt session (the bridge answers itself)
  forkpoint replay --agent pi --trajectory events.jsonl --after-step 1 --upstream stub
  # the workspace created from a git revision, tools isolated by bubblewrap
  forkpoint replay --config replay.toml --workspace-from https://example.org/repo.git@abc123 --sandbox bwrap

outputs: <output-dir>/<run-id>/result.json (phase, quality, agent_status, failure), manifest.json,
observations.json (fresh vs historical, per call), native/ (the rebuilt session), next-action.json,
replay-events.jsonl; `--json` prints result.json as one line.

exit codes: 0 done; 2 configuration_error; 10 trajectory_error; 11 unsupported_agent / unsupported_version;
11 unsupported_tool (a call in the prefix cannot be re-run); 20 workspace_error; 21 output_error (the output or
state dir could not be written, e.g. disk full); 30 executor_error; 31 ambiguous_execution (a tool call may have run:
use a fresh workspace); 32 divergence (--on-divergence stop); 40 continuation_error / model_* (model_* are
retryable); 50 internal_error."""


#: Shown after `forkpoint continue --help`'s options (docs/branching.md says the same at length).
CONTINUE_EPILOG = """examples:

  forkpoint continue forkpoint-out/runs/RUN --branches 2 --branch-seed 1 --branch-seed 2   # 2 new branches
  forkpoint continue forkpoint-out/runs/RUN --branch-prompt "Take branch C."   # re-run what a killed run left

re-run branches: the planned branches a killed run never started run first (with or without --branches), as they
were planned: each with the --branch-model / --branch-seed / --branch-temperature recorded for it in branches.json,
under the run-level --model / --temperature / --seed / ... it was planned with (no need to give them again; a
different value is refused). Its --branch-prompt is not stored (only its SHA-256 and length): give the same text
again, once per such prompt in any order (several branches may share one); a missing or different prompt, a prompt
no re-run branch had, or a --branch-* value that differs from a branch's recorded one is refused (exit 2, nothing
runs). A branch that started its agent and has no recorded outcome is reported ambiguous and never run again. With
--branches K the prompt and --branch-* values are the new branches' (a planned branch still takes its prompt from
them by hash: finish such branches first, without --branches).

exit codes: 0 every branch finished; 1 a branch did not (branches.json says why); 2 configuration_error; 10 the
trajectory changed; 20 the snapshot or the native prefix changed or is gone; others as in `forkpoint replay
--help`. More: docs/branching.md.

workspace: continue empties the workspace and restores the snapshot into it only when the run dir, its state dir
and the replay's workspace are still the very directories the replay made (device and inode, recorded in the
snapshot); for a run dir copied, moved or received from elsewhere, name the workspace with --workspace DIR."""


class _Formatter(argparse.HelpFormatter):
    """Wraps each paragraph of a description on its own; indented paragraphs (examples) stay as written; lists
    the commands of a group without argparse's extra `COMMAND` heading line; wraps at forkpoint.cli.help_width()
    (at most 80 columns)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, help_width() if width is None else width)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        """Fills the help's {agents}, {upstreams}, {seed_agents} from the agent registry, only when argparse prints
        help (scripts/regen_cli_help.py stores those texts, so `forkpoint --help` reads no spec)."""
        text = super()._get_help_string(action)
        return derived_help(text) if text else text

    def _format_action(self, action: argparse.Action) -> str:
        if isinstance(action, argparse._SubParsersAction):
            return "".join(self._format_action(command) for command in action._get_subactions())
        return super()._format_action(action)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        return "\n\n".join(
            textwrap.indent(paragraph, indent) if paragraph.startswith(" ")
            else textwrap.fill(" ".join(paragraph.split()), width, initial_indent=indent, subsequent_indent=indent)
            for paragraph in text.split("\n\n")
        )


def derived_help(text: str) -> str:
    """``text`` with the lists the agent specs declare: {agents} (the registry), {upstreams} (each real upstream,
    its agents and key), {seed_agents} (the Chat Completions agents, whose API has a seed)."""
    from forkpoint.adapters import AGENT_NAMES, all_specs, upstream_help

    seed_agents = ", ".join(spec.name for spec in all_specs() if spec.protocol == "openai-chat")
    lists = {"{agents}": ", ".join(AGENT_NAMES), "{upstreams}": upstream_help(), "{seed_agents}": seed_agents}
    for marker, value in lists.items():
        text = text.replace(marker, value)
    return text


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command tree; each command's handler is its parser's ``run`` default. Given the ``command`` a
    command line names, only that command gets its options: the others keep their name and summary (all argparse
    needs to route or refuse the line; building every option costs a run ~2 ms)."""
    root = argparse.ArgumentParser(prog="forkpoint", description=DESCRIPTION, formatter_class=_Formatter,
                                   allow_abbrev=False)
    root.set_defaults(run=None, help_of=root)
    root.add_argument("--version", action="version", version=f"forkpoint {__version__}", help="Show the version.")
    commands = root.add_subparsers(title="commands", metavar="COMMAND")

    inspect = _command(commands, "inspect", "Show the complete tool batches of a trajectory and the valid "
                       "--after-step range.", "commands:inspect")
    if command in (None, "inspect"):
        inspect.add_argument("trajectory", type=Path, metavar="TRAJECTORY",
                             help="A native trajectory file (e.g. a Claude Code session .jsonl).")
        inspect.add_argument("--agent", metavar="NAME",
                             help="Agent that wrote it; detected from the file when omitted.")
        inspect.add_argument("--json", dest="as_json", action="store_true", help="Print one JSON object instead of a "
                             "table.")
        inspect.add_argument("--max-trajectory-bytes", metavar="N", type=int, default=None,
                             help="Refuse a trajectory larger than N bytes [default: 268435456 = 256 MiB].")

    replay = _command(commands, "replay", "Replay a trajectory up to --after-step and (by default) continue the "
                      "real agent from there.", "commands:replay", epilog=REPLAY_EPILOG)
    if command in (None, "replay"):
        add_options(replay, _REPLAY_OPTIONS + MODEL_OPTIONS + SCORE_OPTIONS)

    resume = _command(commands, "continue", "Continue again from a replayed run's boundary snapshot without "
                      "re-running any tool: K more branches (--branches), or the planned branches a killed run "
                      "did not start (each with its recorded variant).", "commands:continue_",
                      epilog=CONTINUE_EPILOG)
    if command in (None, "continue"):
        resume.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                            help="The run's output dir (<output-dir>/<run-id>).")
        resume.add_argument("--branches", type=int, metavar="K", help="K new branches (ids after the existing ones).")
        resume.add_argument("--branch-prompt", dest="branch_prompts", action="append", default=[], metavar="TEXT",
                            help="The new branches' boundary prompt: once for all or once per branch (never "
                            "stored); without --branches, the recorded prompt of each planned branch to re-run, given "
                            "again.")
        resume.add_argument("--parallel", type=int, metavar="P", help="Branches at once (bwrap runs) [the cores].")
        resume.add_argument("--workspace", type=Path, metavar="DIR",
                            help="The workspace to restore the boundary snapshot into (emptied first; --sandbox local "
                            "runs). Needed when the run dir or its state dir is not the one the replay made (copied, "
                            "moved, shipped) or the recorded workspace was replaced [the replay's workspace, while it "
                            "is the same directory].")
        resume.add_argument("--upstream", metavar="NAME", help="As in replay [the agent's own protocol].")
        resume.add_argument("--upstream-url", metavar="URL", help="As in replay.")
        resume.add_argument("--max-steps", type=int, metavar="N", help="As in replay (the total budget).")
        resume.add_argument("--agent-entrypoint", type=Path, metavar="PATH", help="As in replay.")
        resume.add_argument("--agent-version", metavar="V", help="As in replay (a verified cross-version pair).")
        resume.add_argument("--record-tool-schemas", action="store_true", help="As in replay.")
        resume.add_argument("--capture-tokens", action="store_true", help="As in replay.")
        resume.add_argument("--max-processes", type=int, metavar="N", help="As in replay [512].")
        resume.add_argument("--json", dest="as_json", action="store_true", help="Print branches.json as one line.")
        add_options(resume, MODEL_OPTIONS + SCORE_OPTIONS)

    gc = _command(commands, "gc", "Free the disk a replayed run keeps for branching: its boundary snapshot and its "
                  "branches' workspace copies (`forkpoint continue` then refuses that run).", "commands:gc")
    if command in (None, "gc"):
        gc.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="Run dirs (<output-dir>/<run-id>).")
        gc.add_argument("--dry-run", action="store_true", help="Only say what would be removed.")

    exporter = _command(commands, "export", "Export runs (and batches of runs) as training data: chat messages "
                        "with segments, loss mask and provenance, as parquet, JSONL, ATIF or native files.",
                        "commands:export",
                        epilog=EXPORT_EPILOG)
    if command in (None, "export"):
        exporter.add_argument("runs", type=Path, nargs="+", metavar="RUN_OR_DIR",
                              help="A run dir (<output-dir>/<run-id>) or a dir holding runs (an output root, a batch).")
        exporter.add_argument("--format", dest="fmt", metavar="FORMAT", default="parquet",
                              choices=("parquet", "messages-jsonl", "atif", "native", "dpo", "tokens"),
                              help="parquet (Hugging Face-loadable), messages-jsonl, atif (ATIF v1.8, a directory), "
                              "native (the native sessions, a directory), dpo (JSONL of preference pairs: per reward "
                              "group the highest- vs the lowest-reward continuation, TRL's prompt/chosen/rejected; "
                              "docs/rl.md) or tokens (JSONL, one row per model request captured with --capture-tokens: "
                              "token ids, logprobs, loss mask, reward; docs/rl.md) [default: parquet].")
        exporter.add_argument("-o", "--out", type=Path, required=True, metavar="PATH",
                              help="The output file (a directory for atif/native); never overwritten. The report goes "
                              "beside it as PATH.report.json.")
        exporter.add_argument("--train-on", metavar="SEGMENT", default="live", choices=("live", "prefix", "all"),
                              help="Which assistant turns are trainable: live (the continuation), prefix or all "
                              "[default: live].")
        exporter.add_argument("--no-redact", dest="redact", action="store_false",
                              help="Keep secrets and the home path as they are (recorded in every row and the report).")
        exporter.add_argument("--json", dest="as_json", action="store_true", help="Print the report as one JSON line.")

    report = _command(commands, "report", "Write one self-contained HTML report (no network, works from file://) of "
                      "a run or of every run under a directory: timeline, historical vs fresh observations with "
                      "diffs, bridge verdicts, the continuation, the next action.", "commands:report")
    if command in (None, "report"):
        report.add_argument("runs", type=Path, nargs="+", metavar="RUN_OR_DIR",
                            help="A run dir (<output-dir>/<run-id>) or a dir holding runs (an output root, a batch).")
        report.add_argument("-o", "--out", type=Path, metavar="FILE",
                            help="The HTML file [default: report.html inside the first RUN_OR_DIR].")
        report.add_argument("--open", dest="open_browser", action="store_true",
                            help="Open the report in the default browser afterwards.")

    batch = _command(commands, "batch", "Run many replays from a jobs file (JSONL, or TOML with [defaults] and "
                     "[[job]]), resumably: a SQLite ledger in the batch dir records every job; rerun the same command "
                     "to finish what is left. `forkpoint batch status DIR` summarises a batch.", "batch:run",
                     epilog=BATCH_EPILOG)
    if command in (None, "batch"):
        batch.add_argument("jobs", metavar="JOBS|status", help="The jobs file, or the word status.")
        batch.add_argument("status_dir", nargs="?", type=Path, metavar="DIR", help="With status: the batch dir.")
        batch.add_argument("--out", type=Path, default=Path("forkpoint-batch"), metavar="DIR",
                           help="The batch dir: ledger.sqlite, runs/, state/ [default: forkpoint-batch].")
        batch.add_argument("--workers", type=int, metavar="N", help="Local worker processes [default: the cores].")
        batch.add_argument("--executor", choices=("local", "ray"), default="local",
                           help="local (a process pool) or ray (an existing Ray cluster; "
                           "pip install 'forkpoint[ray]').")
        batch.add_argument("--ray-address", metavar="ADDR", help="auto, ray://HOST:PORT, or local (start a head here) "
                           "[default: local].")
        batch.add_argument("--cpus-per-job", type=float, default=1.0, metavar="N", help="Ray: CPUs per job [1].")
        batch.add_argument("--memory-per-job", type=int, metavar="BYTES", help="Ray: memory per job.")
        batch.add_argument("--retries", type=int, default=3, metavar="N",
                           help="Retries of a job whose failure is retryable (model rate limit, 5xx, connection) [3].")
        for option, metavar, text in (
            ("--mode", "MODE", "Default mode: prepare-only, replay-only or continue [prepare-only]."),
            ("--agent", "NAME", "Default agent (detected from each trajectory otherwise)."),
            ("--sandbox", "NAME", "Default sandbox: local or bwrap."),
            ("--upstream", "NAME", "Default upstream (as in replay)."),
            ("--upstream-url", "URL", "Default upstream URL."),
            ("--on-divergence", "POLICY", "Default divergence policy: warn, stop or ignore."),
        ):
            batch.add_argument(option, dest=f"default_{option[2:].replace('-', '_')}", metavar=metavar, help=text)
        batch.add_argument("--max-steps", dest="default_max_steps", type=int, metavar="N",
                           help="Default step budget.")
        batch.add_argument("--require-sandbox", choices=("bwrap",), metavar="NAME",
                           help="Refuse (as a bad line) every job that runs commands outside this sandbox: "
                           "`--require-sandbox bwrap` for recordings from strangers (docs/sandboxes.md).")
        batch.add_argument("--json", dest="as_json", action="store_true", help="Print the summary as one JSON line.")

    agents = _command(commands, "agents", "Install and list verified agent runtimes (real CLIs from npm / PyPI).",
                      None)
    if command in (None, "agents"):
        agents_commands = agents.add_subparsers(title="commands", metavar="COMMAND")
        install = _command(agents_commands, "install", "Install a verified agent version from its registry into "
                           "forkpoint's runtime cache.", "commands:agents_install")
        install.add_argument("spec", metavar="SPEC", help="AGENT@VERSION, e.g. claude-code@2.1.220.")
        calibrate = _command(agents_commands, "calibrate", "Make an unshipped release usable: install it, record it "
                             "against a scripted model and check it against the nearest verified version (parser, "
                             "tool observations, resume envelope); on success replay and continue treat it as "
                             "calibrated.", "commands:agents_calibrate")
        calibrate.add_argument("spec", metavar="SPEC", help="AGENT@VERSION, e.g. claude-code@2.1.331.")
        calibrate.add_argument("--against", metavar="VERSION", help="Check only against this verified version "
                               "(default: every verified version of its format family, nearest first).")
        calibrate.add_argument("--json", dest="as_json", action="store_true", help="Print the outcome as JSON.")
        listing = _command(agents_commands, "list", "List installed runtimes, the verified versions of each agent "
                           "and the versions calibrated (or failed) in the user's cache.", "commands:agents_list")
        listing.add_argument("--json", dest="as_json", action="store_true", help="Print the installed runtimes as "
                             "JSON, each with its status: verified, calibrated, failed or unverified.")
    return root


def _command(commands: Any, name: str, summary: str, run: str | None, **extra: Any) -> argparse.ArgumentParser:
    """``run``: ``"module:function"`` in forkpoint.cli, imported only when the command runs (not for --help)."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=summary, description=summary, formatter_class=_Formatter, allow_abbrev=False, **extra
    )
    parser.set_defaults(run=run, help_of=parser)
    return parser


EXPORT_EPILOG = """examples:

  # every run under an output root, as one parquet file (datasets.load_dataset("parquet", data_files=...))
  forkpoint export forkpoint-out/runs -o prefixes.parquet
  # OpenAI-style messages as JSONL, training on the prefix's assistant turns as well
  forkpoint export forkpoint-out/runs/run-1 forkpoint-out/runs/run-2 --format messages-jsonl -o sft.jsonl \\
      --train-on all
  # ATIF v1.8: per run <run>.json (prefix steps is_copied_context) and <run>.prefix.json
  forkpoint export forkpoint-out/runs --format atif -o atif/

rows: messages (role, content, reasoning_content, tool_calls, tool_call_id, segment = task | prefix |
boundary_prompt | live, trainable), tools (JSON, when recorded), prefix_message_count and provenance (agent,
versions, profile, after_step, upstream, model, bridge verdict, observation counts, next-action match, quality,
agent_status, run id). Secrets of well-known shapes, secret-named assignments and the home path are redacted
unless --no-redact; the report counts them (never the values). Runs that cannot be exported are listed in the
report with the reason.

exit codes: 0 done (skipped runs are reported, not errors); 2 configuration_error (bad option, output exists,
an extra not installed)."""


BATCH_EPILOG = """jobs (JSONL, one object a line; or TOML: [defaults] then [[job]] tables):

  {"trajectory": "runs/a.jsonl", "after_step": "all", "mode": "prepare-only"}
  {"trajectory": "runs/b.jsonl", "agent": "codex", "after_step": [1, 3], "mode": "replay-only",
   "workspace_from": "seeds/b.tar.gz", "sandbox": "bwrap"}

keys: trajectory (required; relative paths are relative to the jobs file), agent, after_step (N, [N, ...] or
"all"), mode, workspace_from (required for replay-only / continue: every job gets its own fresh workspace made
from it), sandbox, upstream, upstream_url, max_steps, boundary_user_prompt, allow_stale_observations,
on_divergence, branches, branch_prompts, model, temperature, top_p, seed, max_output_tokens, disable_thinking,
reasoning_effort, upstream_retries, upstream_idle_timeout, answer_timeout, continuation_timeout, branch_models,
branch_seeds, branch_temperatures, capture_tokens, score (a verifier command, or {command, timeout, format,
original_reward}), score_timeout, score_format, original_reward (docs/rl.md; `batch status` shows the reward groups).
A bad line is reported with its number and the rest runs.

examples:

  forkpoint batch jobs.jsonl --out prefixes/ --workers 2
  forkpoint batch jobs.jsonl --out prefixes/                  # again: skips what is done, retries what may
  forkpoint batch status prefixes/ --json
  forkpoint batch jobs.jsonl --out /shared/b1 --executor ray --ray-address auto --cpus-per-job 1

exit codes: 0 every job done; 1 a job failed, is ambiguous or still running in a stopped driver's process, or a
line was bad (`forkpoint batch status`); 2 bad options; 21 the batch dir is in use by another driver (named), or
its ledger is refused (a link, not a regular file, corrupt, not a forkpoint ledger); 130 interrupted (rerun to
resume)."""


def every_help(parser: argparse.ArgumentParser, command: str = "") -> dict[str, str]:
    """``parser``'s help and that of every command under it, by command path ("" for the root, "agents install")."""
    texts = {command: parser.format_help()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                texts.update(every_help(sub, f"{command} {name}".strip()))
    return texts
