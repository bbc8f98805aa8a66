"""The bodies of `forkpoint inspect / replay / continue / gc / agents / export / report` (loaded when run)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpoint.cli.output import DIM, GREEN, RED, YELLOW, fail, print_json, say
from forkpoint.cli.parser import _DIRECT_OPTIONS, BRANCH_LIST_KEYS, MODEL_DESTS, SCORE_DESTS

if TYPE_CHECKING:  # the CLI starts without importing the result types
    from forkpoint.core.results import ReplayResult


def inspect(args: argparse.Namespace) -> None:
    from forkpoint import api
    from forkpoint.core.errors import ReplayError
    from forkpoint.run.inspection import render_table

    try:
        description = api.inspect(args.trajectory, agent=args.agent, max_bytes=args.max_trajectory_bytes)
    except ReplayError as error:
        fail(error, args.as_json)
    _show(description, args.as_json, render_table)


def exact_text(result: ReplayResult) -> str:
    """`` (N of M observations exact)`` after a replay."""
    compared = result.metadata.get("compared_observations")
    return f" ({result.metadata.get('exact_observations')} of {compared} observations exact)" if compared else ""


def version_text(result: ReplayResult) -> str:
    """The recorded version and its status, with whose tool semantics re-ran it when it is not verified."""
    agent = result.agent
    if agent is None or result.recorded_version_status is None:
        return ""
    shown = result.recorded_version or "unknown"
    if result.recorded_version_status == "unverified":
        return f" (unverified_version: {shown}, tools as {agent.tool_profile or agent.tool_semantics_version})"
    if result.recorded_version_status == "calibrated":
        tools = f", tools as {agent.tool_profile}" if agent.tool_profile else ""
        return f", version {shown} calibrated (as {agent.tool_semantics_version}{tools})"
    return f", version {shown} {result.recorded_version_status}"


def _original_reward(value: float | Path | None) -> float | None:
    """``--original-reward``: the number given, or the reward of the scored run dir given."""
    if not isinstance(value, Path):
        return value
    from forkpoint.run.verify import original_reward_of

    return original_reward_of(value)


def replay(args: argparse.Namespace) -> None:
    from forkpoint import api
    from forkpoint.core.errors import ReplayError, configuration
    from forkpoint.run import request as requests

    direct = {name: vars(args)[name] for name in _DIRECT_OPTIONS}
    try:
        direct["original_reward"] = _original_reward(direct["original_reward"])
    except ReplayError as error:
        fail(error, args.as_json)
    for flag in ("prepare_only", "replay_only", "allow_stale_observations", "require_verified_version",
                 "keep_snapshot", "drop_snapshot",
                 "disable_thinking", "record_tool_schemas", "capture_tokens"):
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
            if direct["keep_snapshot"] and direct["drop_snapshot"]:
                raise configuration("--keep-snapshot and --drop-snapshot are exclusive")
            values = {k: v for k, v in direct.items() if v is not None and k not in ("drop_snapshot", "branch_prompt")}
            if direct["drop_snapshot"]:
                values["keep_snapshot"] = False
            if direct["branch_prompt"]:
                values["branch_prompts"] = direct["branch_prompt"]
            for option, key in BRANCH_LIST_KEYS.items():
                if option in values:
                    values[key] = values.pop(option)
            replay_request = requests.build_request(values, source="command line")
    except ReplayError as error:
        fail(error, args.as_json)

    progress = None if args.as_json else (lambda message: say(f"  {message}", err=True, style=DIM))
    warn = lambda message: say(f"forkpoint: {message}", err=True, style=YELLOW)  # noqa: E731
    result = api.replay(replay_request, progress=progress, warn=warn)
    if args.as_json:
        print_json(result.to_json())
    else:
        _render_result(result)
    raise SystemExit(result.exit_code)


def continue_(args: argparse.Namespace) -> None:
    from forkpoint.branches.resume import ContinueOptions, continue_run_dir
    from forkpoint.core.errors import ReplayError

    model_choice = {BRANCH_LIST_KEYS.get(dest, dest): vars(args)[dest] for dest in MODEL_DESTS
                    if vars(args)[dest] not in (None, False)}
    try:
        args.original_reward = _original_reward(args.original_reward)
    except ReplayError as error:
        fail(error, args.as_json)
    options = ContinueOptions(branches=args.branches, branch_prompts=tuple(args.branch_prompts),
                              parallel=args.parallel, upstream=args.upstream, upstream_url=args.upstream_url,
                              max_steps=args.max_steps, agent_entrypoint=args.agent_entrypoint,
                              model_choice=model_choice,
                              agent_version=args.agent_version, record_tool_schemas=args.record_tool_schemas,
                              capture_tokens=args.capture_tokens,
                              workspace=args.workspace, max_processes=args.max_processes,
                              score={dest: vars(args)[dest] for dest in SCORE_DESTS if vars(args)[dest] is not None})
    progress = (lambda message: None) if args.as_json else (lambda message: say(f"  {message}", err=True, style=DIM))
    try:
        document = continue_run_dir(args.run_dir, options, progress)
    except ReplayError as error:
        fail(error, args.as_json)
    _show(document, args.as_json, _render_branches)
    failed = [row for row in document["branches"] if row.get("status") != "finished"]
    raise SystemExit(1 if failed else 0)


def gc(args: argparse.Namespace) -> None:
    from forkpoint.branches.resume import collect_snapshots
    from forkpoint.core.errors import ReplayError

    total = 0
    for run_dir in args.run_dirs:
        try:
            freed = collect_snapshots(run_dir, dry_run=args.dry_run)
        except ReplayError as error:
            fail(error, False)
        total += freed["bytes"]
        for path in freed["removed"]:
            say(f"  {'would remove' if args.dry_run else 'removed'} {path}")
    say(f"forkpoint: {'would free' if args.dry_run else 'freed'} {total / 1e6:.1f} MB", style=GREEN)


def _show(document: Any, as_json: bool, render: Callable[[Any], None]) -> None:
    """A command's document: one JSON line with --json, else its rendering for people."""
    if as_json:
        print_json(document)
    else:
        render(document)


def _render_branches(document: dict[str, Any]) -> None:
    """The branches table: status, steps, first action, agreement with the original, files changed, tokens."""
    from forkpoint.bridge.accounting import tokens_text

    group = document.get("group")
    say("  branch  status     agent       steps  same as original  files changed  "
        f"{'tokens':<24}  {'reward  adv    grpo   ' if group else ''}first action")
    for row in document["branches"]:
        action = row.get("first_action") or {}
        tools = ", ".join(str(t.get("name")) for t in action.get("tools") or []) or " ".join(
            str(action.get("text") or "").split())[:40]
        changed = row.get("files_changed") or {}
        count = sum(len(changed.get(k) or []) for k in ("added", "removed", "modified"))
        say(f"  {row['branch']:>6}  {row.get('status', ''):<9}  {row.get('agent_status') or '':<10}  "
             f"{row.get('continued_steps') or 0:>5}  {row.get('same_as_original')!s:<16}  {count:>13}  "
             f"{tokens_text(row.get('model_usage')) or '-':<24}  {reward_cells(row) if group else ''}{tools}")
    if group:
        say(f"  {group_text(group)}")
    agreement = document.get("agreement") or {}
    if agreement.get("branches"):
        say(f"  agreement: same next action as the original {agreement['same_next_action_as_original']:.0%}, "
             f"completed {agreement['completed']:.0%}, largest group with the same first tool calls "
             f"{agreement['largest_group_same_first_tools']:.0%} ({agreement['distinct_first_tool_calls']} distinct)")


def _number(value: Any, width: int) -> str:
    return f"{value:<{width}.3g}" if isinstance(value, int | float) else f"{'-':<{width}}"


def reward_cells(row: dict[str, Any]) -> str:
    """A branch's reward (or why it has none), advantage and GRPO advantage, as table cells."""
    score, group = row.get("score") or {}, row.get("group") or {}
    reward = _number(score.get("reward"), 6) if score.get("failure") is None else f"{'fail':<6}"
    return f"{reward}  {_number(group.get('advantage'), 5)}  {_number(group.get('advantage_grpo'), 5)}  "


def group_text(group: dict[str, Any]) -> str:
    """One line per group: n, mean/std, pass@k, the original's reward (docs/rl.md)."""
    passes = ", ".join(f"pass@{k} {value:.2f}" for k, value in (group.get("pass_at_k") or {}).items()
                       if isinstance(value, int | float))
    text = (f"group {group.get('id')}: n {group.get('n')}, mean {_number(group.get('mean'), 0)}, "
            f"std {_number(group.get('std'), 0)}{', ' + passes if passes else ''}")
    if group.get("unscored"):
        text += f", {group['unscored']} score failure(s)"
    if isinstance(group.get("original_reward"), int | float):
        text += (f", original reward {group['original_reward']:g} "
                 f"(equal in {group.get('equal_to_original')} of {group.get('n')})")
    return text


def _render_result(result: Any) -> None:
    if result.failure is not None:
        say(f"forkpoint: {result.failure.category}: {result.failure.message}", err=True, style=RED)
        if result.phase is not None and Path(str(result.output_dir), "result.json").is_file():  # a full disk: none
            say(f"  result: {result.output_dir}/result.json", err=True)
        return
    calls = ""
    if usage := result.metadata.get("model_usage"):  # none in a prepare-only: the bridge's modules stay unloaded
        from forkpoint.bridge.accounting import calls_text

        calls = calls_text(usage)
    say(
        f"forkpoint: {result.phase} {result.agent.name} run {result.run_id} "
        f"(after batch {result.after_step}, {result.replayed_tool_calls} tool calls re-run{exact_text(result)}, "
        f"quality {result.quality}{version_text(result)}, agent {result.agent_status}{calls})",
        style=GREEN,
    )
    if branches := result.metadata.get("branches"):  # none in a prepare-only: the branching modules stay unloaded
        from forkpoint.branches.branching import partial_text

        if note := partial_text(branches):
            say(f"  {note}", err=True, style=YELLOW)
    if result.score is not None:
        score = result.score
        verdict = (f"reward {score['reward']:g}" if score.get("reward") is not None
                   else f"score failure: {score.get('failure')}")
        say(f"  score: {verdict} (exit {score.get('exit')}, {score.get('duration_s')} s)")
    for artifact in result.artifacts:
        say(f"  {artifact.role}: {artifact.path}")
        if artifact.role == "branches":
            import json

            _render_branches(json.loads(Path(artifact.path).read_text("utf-8")))


def agents_install(args: argparse.Namespace) -> None:
    from forkpoint import runtimes
    from forkpoint.core.errors import ReplayError, configuration

    name, _, version = args.spec.partition("@")
    try:
        if not version:
            raise configuration(f"expected AGENT@VERSION, got {args.spec!r}")
        say(f"installing {name}@{version} ...", err=True, style=DIM)
        runtime = runtimes.install(name, version)
    except ReplayError as error:
        fail(error, False)
    say(f"{runtime.agent}@{runtime.version}: {runtime.entrypoint}")
    from forkpoint.adapters import agent_spec

    for tool in agent_spec(name).host_tools:
        try:
            say(f"{tool}: {runtimes.install_tool(tool) / tool}")
        except ReplayError as error:  # the agent is usable; the calls that need the tool are refused with why
            say(f"warning: {error.message}", err=True, style=DIM)


def agents_calibrate(args: argparse.Namespace) -> None:
    from forkpoint.adapters import calibration
    from forkpoint.adapters.calibrate import calibrate
    from forkpoint.core.errors import ReplayError, unsupported_version

    try:
        outcome = calibrate(args.spec, against=args.against, progress=lambda line: say(line, err=True, style=DIM))
    except ReplayError as error:
        fail(error, args.as_json)
    report = calibration.report_path(outcome.agent, outcome.version)
    if args.as_json:
        print_json({"agent": outcome.agent, "version": outcome.version, "status": "calibrated" if outcome.ok
                    else "failed", "maps_to": outcome.maps_to, "reason": outcome.reason, "report": str(report),
                    "checked": [c.to_json() for c in outcome.checks]})
    else:
        say(outcome.report())
        say(f"report: {report}")
    if not outcome.ok:
        fail(unsupported_version(f"calibration of {outcome.agent} {outcome.version} failed: {outcome.reason}"),
             args.as_json)


def agents_list(args: argparse.Namespace) -> None:
    from forkpoint import runtimes
    from forkpoint.adapters import agent_spec, all_specs, calibration

    installed = runtimes.list_installed()
    if args.as_json:
        statuses = {(spec.name, version): (status, detail) for spec in all_specs() if spec.runtime is not None
                    for version, status, detail in calibration.listed(spec)}
        print_json([{"agent": r.agent, "version": r.version, "entrypoint": str(r.entrypoint),
                     "status": "verified" if r.version in agent_spec(r.agent).versions
                     else statuses.get((r.agent, r.version), ("unverified", ""))[0],
                     "detail": statuses.get((r.agent, r.version), (None, None))[1]} for r in installed])
        return
    for spec in all_specs():
        if spec.runtime is None:  # not installable by forkpoint (an explicit --agent-entrypoint only)
            continue
        have = {r.version for r in installed if r.agent == spec.name}
        marks = ", ".join(f"{v}{' (installed)' if v in have else ''}" for v in spec.versions)
        say(f"{spec.name}: {marks}")
        for version, status, detail in calibration.listed(spec):
            say(f"  {version}: {status} ({detail})")


def export(args: argparse.Namespace) -> None:
    from forkpoint.core.errors import configuration
    from forkpoint.export import export
    from forkpoint.export.rows import ExportOptions

    def progress(report: Any) -> None:
        if not args.as_json and report.rows % 100 == 0:
            say(f"  {report.rows} rows, {len(report.skipped)} skipped", err=True, style=DIM)

    try:
        report = export(args.runs, args.fmt, args.out, ExportOptions(args.train_on, args.redact), progress)
    except FileExistsError as error:
        fail(configuration(str(error)), args.as_json)
    except ModuleNotFoundError as error:
        fail(configuration(f"{error.name} is not installed: pip install 'forkpoint[export]'"), args.as_json)
    if args.as_json:
        print_json(report.to_json())
        return
    unit = "pairs" if report.format == "dpo" else "rows"
    say(f"forkpoint: exported {report.rows} {unit} to {report.out} ({report.format}), "
         f"{len(report.skipped)} skipped; report: {report.out}.report.json", style=GREEN)
    if report.dpo_skipped is not None:
        say("  groups without a pair: " + ", ".join(f"{why} {count}" for why, count in report.dpo_skipped.items()))
    for skipped in report.skipped:
        say(f"  skipped {skipped['path']}: {skipped['reason']}", err=True)
    if report.redaction_totals:
        counts = ", ".join(f"{kind} {count}" for kind, count in sorted(report.redaction_totals.items()))
        say(f"  redacted: {counts}")


def report(args: argparse.Namespace) -> None:
    from forkpoint.core.errors import configuration
    from forkpoint.report import write_report

    out = args.out or args.runs[0] / "report.html"
    try:
        info = write_report(args.runs, out)
    except FileNotFoundError as error:
        fail(configuration(str(error)), False)
    say(f"forkpoint: report of {info.runs} run(s): {info.out} ({info.size_bytes:,} bytes)", style=GREEN)
    for path, reason in info.skipped:
        say(f"  not shown: {path}: {reason}", err=True)
    if args.open_browser:
        import webbrowser

        webbrowser.open(info.out.resolve().as_uri())
