"""The `forkpoint` command line: thin — parse arguments, call the engine, print, exit with its code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from forkpoint import __version__
from forkpoint.errors import ReplayError, configuration

app = typer.Typer(
    name="forkpoint",
    help=(
        "Replay a coding agent's recorded run up to a boundary and continue the real agent from there.\n\n"
        "A boundary is 'after N complete tool batches' (a batch = every tool call of one assistant "
        "response plus all their results). Start with `forkpoint inspect TRAJECTORY` to see the batches."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
agents_app = typer.Typer(help="Install and list verified agent runtimes (real CLIs from npm / PyPI).",
                         no_args_is_help=True)
app.add_typer(agents_app, name="agents")


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"forkpoint {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version_callback, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """forkpoint: replay coding-agent runs from a boundary."""


def _print_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value).decode() + "\n")


def _fail(error: ReplayError, as_json: bool) -> None:
    if as_json:
        _print_json({"failure": {"category": error.kind.category, "message": error.message,
                                 "retryable": error.kind.retryable}})
    else:
        typer.secho(f"forkpoint: {error.kind.category}: {error.message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(error.kind.exit_code)


@app.command()
def inspect(
    trajectory: Annotated[Path, typer.Argument(help="A native trajectory file (e.g. a Claude Code session .jsonl).")],
    agent: Annotated[
        str | None, typer.Option("--agent", help="Agent that wrote it; detected from the file when omitted.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")] = False,
) -> None:
    """Show the complete tool batches of a trajectory and the valid --after-step range."""
    from forkpoint.inspection import describe, render_table

    try:
        description = describe(trajectory, agent)
    except ReplayError as error:
        _fail(error, as_json)
        return
    if as_json:
        _print_json(description)
    else:
        render_table(description)


_DIRECT_OPTIONS = (
    "agent", "trajectory", "after_step", "workspace", "state_dir", "output_dir", "run_id", "max_steps",
    "prepare_only", "replay_only", "allow_stale_observations", "boundary_user_prompt", "upstream",
    "upstream_url", "agent_entrypoint", "sandbox", "path_map", "workspace_from",
)


@app.command()
def replay(
    agent: Annotated[str | None, typer.Option(help="Agent name: claude-code, codex, opencode, pi, "
                                              "mini-swe-agent, swe-agent, openhands.")] = None,
    trajectory: Annotated[Path | None, typer.Option(help="The native trajectory file.")] = None,
    after_step: Annotated[int | None, typer.Option(help="Boundary: replay the first N complete tool batches.")] = None,
    workspace: Annotated[Path | None, typer.Option(help="Fresh workspace the tools re-run in [default: .].")] = None,
    state_dir: Annotated[Path | None, typer.Option(help="State root (journal, agent homes) "
                                                   "[default: forkpoint-out/state].")] = None,
    output_dir: Annotated[Path | None, typer.Option(help="Output root; each run gets <root>/<run-id> "
                                                    "[default: forkpoint-out/runs].")] = None,
    run_id: Annotated[str | None, typer.Option(help="Run id ([A-Za-z0-9_-]+) [default: replay-<random>].")] = None,
    max_steps: Annotated[int | None, typer.Option(help="TOTAL step budget including the replayed prefix.")] = None,
    prepare_only: Annotated[bool, typer.Option("--prepare-only", help="Write the native prefix with the "
                                               "historical observations; run nothing.")] = False,
    replay_only: Annotated[bool, typer.Option("--replay-only", help="Re-run the prefix's tools and write "
                                              "the native prefix; do not start the agent.")] = False,
    allow_stale_observations: Annotated[bool, typer.Option(
        "--allow-stale-observations", help="Reuse recorded observations that cannot be refreshed "
        "(sub-agents, web, todo...); the result is marked degraded.")] = False,
    boundary_user_prompt: Annotated[str | None, typer.Option(
        help="Append exactly one user message after the last fresh observation (never stored in outputs).")] = None,
    upstream: Annotated[str | None, typer.Option(
        help="Where validated model requests go: 'anthropic' (claude-code; ANTHROPIC_API_KEY), "
        "'openai-responses' (codex; OPENAI_API_KEY), 'openai-chat' (opencode, pi, mini-swe-agent, openhands; "
        "OPENAI_API_KEY) — keys come from forkpoint's own environment and are never "
        "passed to the agent — or 'stub' (the bridge answers itself: a zero-cost check that the real agent "
        "accepted the rebuilt session) [default: the agent's own protocol].")] = None,
    upstream_url: Annotated[str | None, typer.Option(
        help="Base URL of the upstream [default: $ANTHROPIC_BASE_URL / $OPENAI_BASE_URL, else the "
        "provider's public API].")] = None,
    agent_entrypoint: Annotated[Path | None, typer.Option(
        help="An explicit agent executable (absolute path); its --version must be a verified version "
        "[default: the installed runtime of the recorded version].")] = None,
    sandbox: Annotated[str | None, typer.Option(
        help="Where tools and the agent run: 'local' (no isolation; the workspace must be at the recorded cwd, "
        "or use --path-map) or 'bwrap' (bubblewrap: the workspace mounted at the recorded cwd, the rest of the "
        "file system read-only, private /tmp, your HOME hidden, no network during tool replay) "
        "[default: local].")] = None,
    path_map: Annotated[list[str] | None, typer.Option(
        "--path-map", metavar="OLD=NEW",
        help="With --sandbox local: rewrite the recorded path prefix OLD to NEW in tool inputs for execution "
        "(and NEW back to OLD in outputs); the native session keeps the original text. Repeatable.")] = None,
    workspace_from: Annotated[str | None, typer.Option(
        metavar="SOURCE",
        help="DIR, TARBALL or GIT_URL@REV: create the (absent or empty) --workspace first: copy a directory, "
        "extract a tar archive, or clone a git repository at a revision.")] = None,
    config: Annotated[Path | None, typer.Option(
        help="A TOML file with a [replay] table (same keys, snake_case).")] = None,
    request: Annotated[Path | None, typer.Option(
        help='A JSON request with schema_version "forkpoint.request/v1".')] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as one JSON line.")] = False,
) -> None:
    """Replay a trajectory up to --after-step and (by default) continue the real agent from there.

    Examples:

      forkpoint replay --agent claude-code --trajectory session.jsonl --after-step 2 --prepare-only

      forkpoint replay --config replay.toml
    """
    from forkpoint import engine
    from forkpoint import request as requests

    direct = {
        "agent": agent, "trajectory": trajectory, "after_step": after_step, "workspace": workspace,
        "state_dir": state_dir, "output_dir": output_dir, "run_id": run_id, "max_steps": max_steps,
        "prepare_only": prepare_only or None, "replay_only": replay_only or None,
        "allow_stale_observations": allow_stale_observations or None,
        "boundary_user_prompt": boundary_user_prompt, "upstream": upstream, "upstream_url": upstream_url,
        "agent_entrypoint": agent_entrypoint, "sandbox": sandbox, "path_map": path_map or None,
        "workspace_from": workspace_from,
    }
    given = [name for name in _DIRECT_OPTIONS if direct[name] is not None]
    try:
        if config is not None and request is not None:
            raise configuration("--config and --request are mutually exclusive")
        if (config is not None or request is not None) and given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise configuration(f"--config/--request cannot be combined with direct options ({flags})")
        if config is not None:
            replay_request = requests.load_toml(config)
        elif request is not None:
            replay_request = requests.load_json_request(request)
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
        _fail(error, as_json)
        return

    progress = None if as_json else (lambda message: typer.secho(f"  {message}", err=True, dim=True))
    result = engine.execute(replay_request, progress=progress)
    if as_json:
        _print_json(result.model_dump(mode="json"))
    else:
        _render_result(result)
    raise typer.Exit(result.exit_code)


def _render_result(result: Any) -> None:
    if result.failure is not None:
        typer.secho(f"forkpoint: {result.failure.category}: {result.failure.message}", err=True,
                    fg=typer.colors.RED)
        if result.phase is not None:
            typer.echo(f"  result: {result.output_dir}/result.json", err=True)
        return
    typer.secho(
        f"forkpoint: {result.phase} {result.agent.name} run {result.run_id} "
        f"(after batch {result.after_step}, {result.replayed_tool_calls} tool calls re-run, "
        f"quality {result.quality}, agent {result.agent_status})",
        fg=typer.colors.GREEN,
    )
    for artifact in result.artifacts:
        typer.echo(f"  {artifact.role}: {artifact.path}")


@agents_app.command("install")
def agents_install(
    spec: Annotated[str, typer.Argument(help="AGENT@VERSION, e.g. claude-code@2.1.220.")],
) -> None:
    """Install a verified agent version from its registry into forkpoint's runtime cache."""
    from forkpoint import runtimes

    name, _, version = spec.partition("@")
    try:
        if not version:
            raise configuration(f"expected AGENT@VERSION, got {spec!r}")
        typer.secho(f"installing {name}@{version} ...", err=True, dim=True)
        runtime = runtimes.install(name, version)
    except ReplayError as error:
        _fail(error, False)
        return
    typer.echo(f"{runtime.agent}@{runtime.version}: {runtime.entrypoint}")


@agents_app.command("list")
def agents_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List installed runtimes and the verified versions of each agent."""
    from forkpoint import runtimes

    installed = runtimes.list_installed()
    if as_json:
        _print_json([{"agent": r.agent, "version": r.version, "entrypoint": str(r.entrypoint)} for r in installed])
        return
    for agent_name, versions in runtimes.VERIFIED.items():
        have = {r.version for r in installed if r.agent == agent_name}
        marks = ", ".join(f"{v}{' (installed)' if v in have else ''}" for v in versions)
        typer.echo(f"{agent_name}: {marks}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
