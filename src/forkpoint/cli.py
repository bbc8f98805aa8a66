"""The `forkpoint` command line: thin — parse arguments, call the engine, print, exit with its code.

Plain argparse, and every heavy module (engine, adapters, runtimes, orjson, rich) is imported inside the command
that needs it: `--version` and `--help` load nothing else, a replay loads only what it runs (issue 8: cold start).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from forkpoint import __version__

if TYPE_CHECKING:
    from forkpoint.errors import ReplayError

DESCRIPTION = (
    "Replay a coding agent's recorded run up to a boundary and continue the real agent from there.\n\n"
    "A boundary is 'after N complete tool batches' (a batch = every tool call of one assistant "
    "response plus all their results). Start with `forkpoint inspect TRAJECTORY` to see the batches."
)

_DIRECT_OPTIONS = (
    "agent", "trajectory", "after_step", "workspace", "state_dir", "output_dir", "run_id", "max_steps",
    "prepare_only", "replay_only", "allow_stale_observations", "boundary_user_prompt", "upstream",
    "upstream_url", "agent_entrypoint", "sandbox", "path_map", "workspace_from", "env",
)

#: (option, metavar or None for a flag, type, help) of `forkpoint replay`, in the order --help lists them.
_REPLAY_OPTIONS: tuple[tuple[str, str | None, Callable[[str], Any], str], ...] = (
    ("--agent", "NAME", str, "Agent name: claude-code, codex, opencode, pi, mini-swe-agent, swe-agent, openhands."),
    ("--trajectory", "PATH", Path, "The native trajectory file."),
    ("--after-step", "N", int, "Boundary: replay the first N complete tool batches."),
    ("--workspace", "DIR", Path, "Fresh workspace the tools re-run in [default: .]."),
    ("--state-dir", "DIR", Path, "State root (journal, agent homes) [default: forkpoint-out/state]."),
    ("--output-dir", "DIR", Path, "Output root; each run gets <root>/<run-id> [default: forkpoint-out/runs]."),
    ("--run-id", "ID", str, "Run id ([A-Za-z0-9_-]+) [default: replay-<random>]."),
    ("--max-steps", "N", int, "TOTAL step budget including the replayed prefix."),
    ("--prepare-only", None, bool, "Write the native prefix with the historical observations; run nothing."),
    ("--replay-only", None, bool, "Re-run the prefix's tools and write the native prefix; do not start the agent."),
    ("--allow-stale-observations", None, bool, "Reuse recorded observations that cannot be refreshed "
     "(sub-agents, web, todo...); the result is marked degraded."),
    ("--boundary-user-prompt", "TEXT", str,
     "Append exactly one user message after the last fresh observation (never stored in outputs)."),
    ("--upstream", "NAME", str,
     "Where validated model requests go: 'anthropic' (claude-code; ANTHROPIC_API_KEY), "
     "'openai-responses' (codex; OPENAI_API_KEY), 'openai-chat' (opencode, pi, mini-swe-agent, openhands; "
     "OPENAI_API_KEY) — keys come from forkpoint's own environment and are never "
     "passed to the agent — or 'stub' (the bridge answers itself: a zero-cost check that the real agent "
     "accepted the rebuilt session) [default: the agent's own protocol]."),
    ("--upstream-url", "URL", str, "Base URL of the upstream [default: $ANTHROPIC_BASE_URL / $OPENAI_BASE_URL, "
     "else the provider's public API]."),
    ("--agent-entrypoint", "PATH", Path, "An explicit agent executable (absolute path); its --version must be a "
     "verified version [default: the installed runtime of the recorded version]."),
    ("--sandbox", "NAME", str,
     "Where tools and the agent run: 'local' (no isolation; the workspace must be at the recorded cwd, "
     "or use --path-map) or 'bwrap' (bubblewrap: the workspace mounted at the recorded cwd, the rest of the "
     "file system read-only, private /tmp, your HOME hidden, no network during tool replay) [default: local]."),
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
20 workspace_error; 30 executor_error; 31 ambiguous_execution (a tool call may have run: use a fresh workspace);
40 continuation_error / model_* (model_* are retryable); 50 internal_error."""


class _Formatter(argparse.HelpFormatter):
    """Wraps each paragraph of a description on its own; indented paragraphs (examples) stay as written; lists
    the commands of a group without argparse's extra `COMMAND` heading line."""

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


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree; each command's handler is its parser's ``run`` default."""
    root = argparse.ArgumentParser(prog="forkpoint", description=DESCRIPTION, formatter_class=_Formatter,
                                   allow_abbrev=False)
    root.set_defaults(run=None, help_of=root)
    root.add_argument("--version", action="version", version=f"forkpoint {__version__}", help="Show the version.")
    commands = root.add_subparsers(title="commands", metavar="COMMAND")

    inspect = _command(commands, "inspect", "Show the complete tool batches of a trajectory and the valid "
                       "--after-step range.", _inspect)
    inspect.add_argument("trajectory", type=Path, metavar="TRAJECTORY",
                         help="A native trajectory file (e.g. a Claude Code session .jsonl).")
    inspect.add_argument("--agent", metavar="NAME", help="Agent that wrote it; detected from the file when omitted.")
    inspect.add_argument("--json", dest="as_json", action="store_true", help="Print one JSON object instead of a "
                         "table.")

    replay = _command(commands, "replay", "Replay a trajectory up to --after-step and (by default) continue the "
                      "real agent from there.", _replay, epilog=REPLAY_EPILOG)
    for option, metavar, kind, text in _REPLAY_OPTIONS:
        dest = "as_json" if option == "--json" else option[2:].replace("-", "_")
        if metavar is None:
            replay.add_argument(option, dest=dest, action="store_true", help=text)
        else:
            action = "append" if option in ("--path-map", "--env") else "store"
            replay.add_argument(option, dest=dest, metavar=metavar, type=kind, action=action, help=text)

    agents = _command(commands, "agents", "Install and list verified agent runtimes (real CLIs from npm / PyPI).",
                      None)
    agents_commands = agents.add_subparsers(title="commands", metavar="COMMAND")
    install = _command(agents_commands, "install", "Install a verified agent version from its registry into "
                       "forkpoint's runtime cache.", _agents_install)
    install.add_argument("spec", metavar="SPEC", help="AGENT@VERSION, e.g. claude-code@2.1.220.")
    listing = _command(agents_commands, "list", "List installed runtimes and the verified versions of each agent.",
                       _agents_list)
    listing.add_argument("--json", dest="as_json", action="store_true", help="Print JSON.")
    return root


def _command(
    commands: Any, name: str, summary: str, run: Callable[[argparse.Namespace], None] | None, **extra: Any
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=summary, description=summary, formatter_class=_Formatter, allow_abbrev=False, **extra
    )
    parser.set_defaults(run=run, help_of=parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script; exits with the command's code (2 for a usage error)."""
    args = build_parser().parse_args(argv)
    if args.run is None:  # a command group without its command: teach it, as a usage error
        args.help_of.print_help()
        raise SystemExit(2)
    try:
        args.run(args)
    except KeyboardInterrupt:  # as click (the CLI's former base) did: one word and exit code 1, no traceback
        _say("Aborted!", err=True)
        raise SystemExit(1) from None
    except BrokenPipeError:  # the reader of stdout went away (`| head`): nothing more to say to it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None


# -- commands ------------------------------------------------------------------------------------------------------


def _inspect(args: argparse.Namespace) -> None:
    from forkpoint.errors import ReplayError
    from forkpoint.inspection import describe, render_table

    try:
        description = describe(args.trajectory, args.agent)
    except ReplayError as error:
        _fail(error, args.as_json)
    if args.as_json:
        _print_json(description)
    else:
        render_table(description)


def _replay(args: argparse.Namespace) -> None:
    from forkpoint import engine
    from forkpoint import request as requests
    from forkpoint.errors import ReplayError, configuration

    direct = {name: getattr(args, name) for name in _DIRECT_OPTIONS}
    for flag in ("prepare_only", "replay_only", "allow_stale_observations"):
        direct[flag] = direct[flag] or None  # an absent flag is "not given", like an absent option
    given = [name for name in _DIRECT_OPTIONS if direct[name] is not None]
    try:
        if args.config is not None and args.request is not None:
            raise configuration("--config and --request are mutually exclusive")
        if (args.config is not None or args.request is not None) and given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise configuration(f"--config/--request cannot be combined with direct options ({flags})")
        if args.config is not None:
            replay_request = requests.load_toml(args.config)
        elif args.request is not None:
            replay_request = requests.load_json_request(args.request)
        else:
            missing = [name for name in ("agent", "trajectory", "after_step") if direct[name] is None]
            if missing:
                raise configuration(
                    "missing " + ", ".join("--" + m.replace("_", "-") for m in missing)
                    + " (or pass --config FILE.toml / --request FILE.json)"
                )
            replay_request = requests.build_request(
                {k: v for k, v in direct.items() if v is not None}, source="command line"
            )
    except ReplayError as error:
        _fail(error, args.as_json)

    progress = None if args.as_json else (lambda message: _say(f"  {message}", err=True, style=_DIM))
    result = engine.execute(replay_request, progress=progress)
    if args.as_json:
        _print_json(result.to_json())
    else:
        _render_result(result)
    raise SystemExit(result.exit_code)


def _render_result(result: Any) -> None:
    if result.failure is not None:
        _say(f"forkpoint: {result.failure.category}: {result.failure.message}", err=True, style=_RED)
        if result.phase is not None:
            _say(f"  result: {result.output_dir}/result.json", err=True)
        return
    _say(
        f"forkpoint: {result.phase} {result.agent.name} run {result.run_id} "
        f"(after batch {result.after_step}, {result.replayed_tool_calls} tool calls re-run, "
        f"quality {result.quality}, agent {result.agent_status})",
        style=_GREEN,
    )
    for artifact in result.artifacts:
        _say(f"  {artifact.role}: {artifact.path}")


def _agents_install(args: argparse.Namespace) -> None:
    from forkpoint import runtimes
    from forkpoint.errors import ReplayError, configuration

    name, _, version = args.spec.partition("@")
    try:
        if not version:
            raise configuration(f"expected AGENT@VERSION, got {args.spec!r}")
        _say(f"installing {name}@{version} ...", err=True, style=_DIM)
        runtime = runtimes.install(name, version)
    except ReplayError as error:
        _fail(error, False)
    _say(f"{runtime.agent}@{runtime.version}: {runtime.entrypoint}")


def _agents_list(args: argparse.Namespace) -> None:
    from forkpoint import runtimes

    installed = runtimes.list_installed()
    if args.as_json:
        _print_json([{"agent": r.agent, "version": r.version, "entrypoint": str(r.entrypoint)} for r in installed])
        return
    for agent_name, versions in runtimes.VERIFIED.items():
        have = {r.version for r in installed if r.agent == agent_name}
        marks = ", ".join(f"{v}{' (installed)' if v in have else ''}" for v in versions)
        _say(f"{agent_name}: {marks}")


# -- output --------------------------------------------------------------------------------------------------------

_RED, _GREEN, _DIM = "31", "32", "2"


def _say(message: str, *, err: bool = False, style: str | None = None) -> None:
    """One line to stdout (or stderr), styled only on a terminal (never in captured or piped output)."""
    stream = sys.stderr if err else sys.stdout
    if style is not None and stream.isatty() and "NO_COLOR" not in os.environ:
        message = f"\x1b[{style}m{message}\x1b[0m"
    stream.write(message + "\n")
    stream.flush()


def _print_json(value: Any) -> None:
    import orjson

    sys.stdout.write(orjson.dumps(value).decode() + "\n")


def _fail(error: ReplayError, as_json: bool) -> NoReturn:
    if as_json:
        _print_json({"failure": {"category": error.kind.category, "message": error.message,
                                 "retryable": error.kind.retryable}})
    else:
        _say(f"forkpoint: {error.kind.category}: {error.message}", err=True, style=_RED)
    raise SystemExit(error.kind.exit_code)


if __name__ == "__main__":
    main()
