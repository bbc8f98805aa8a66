"""One self-contained HTML page for runs (pure): inline CSS and a little JS, no network, works from ``file://``.

Everything from a run is text: each value goes through :func:`html.escape` (quotes too), no value ever reaches an
attribute that the browser would execute or follow (the only links are ``#run-N`` anchors built here), and the JS
reads only ``data-`` attributes it filters and sorts on. Collapsing uses ``<details>``, so the page is readable with
JS off. Long texts are already bounded by observations.json (4,096 characters); live messages and tool inputs are
cut here at ``TEXT_BOUND`` with their full size shown.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from forkpoint.bridge.accounting import calls_text, tokens_text
from forkpoint.report.collect import RunView

TEXT_BOUND = 4096
INPUT_BOUND = 2048

CSS = """
:root{--fg:#1d2430;--muted:#667085;--line:#d9dee7;--bg:#f7f8fb;--ok:#1a7f37;
--bad:#b42318;--warn:#b54708;--add:#e6ffec;--del:#ffebe9;--hunk:#ddf4ff}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;
color:var(--fg);background:var(--bg)}header,section{max-width:1200px;margin:0 auto;
padding:12px 16px}h1{font-size:20px;margin:8px 0}h2{font-size:17px;margin:0 0 8px;
word-break:break-all}h3{font-size:14px;margin:14px 0 6px;color:var(--muted);
text-transform:uppercase;letter-spacing:.04em}section.run{background:#fff;
border:1px solid var(--line);border-radius:8px;margin:14px auto}.badge{display:inline-block;
padding:1px 8px;border-radius:10px;font-size:12px;margin:0 4px 4px 0;background:#eef1f6}
.badge.ok{background:#dafbe1;color:var(--ok)}.badge.bad{background:#ffebe9;
color:var(--bad)}.badge.warn{background:#fff4e5;color:var(--warn)}dl.facts{display:grid;
grid-template-columns:max-content 1fr;gap:2px 14px;margin:8px 0}dl.facts dt{color:var(--muted)}
dl.facts dd{margin:0;word-break:break-all}pre{white-space:pre-wrap;word-break:break-word;
background:#f6f8fa;border:1px solid var(--line);border-radius:6px;padding:8px;
margin:4px 0;font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;
max-height:420px;overflow:auto}details{margin:4px 0}summary{cursor:pointer}
.call{border-left:3px solid var(--line);padding-left:8px}.call.diverged{border-color:var(--bad)}
.call.normalised{border-color:var(--warn)}.call.stale{border-color:var(--muted)}
.sides{display:grid;grid-template-columns:1fr 1fr;gap:8px}@media (max-width:700px){.sides{grid-template-columns:1fr}
dl.facts{grid-template-columns:1fr}}.diff .add{background:var(--add);display:block}
.diff .del{background:var(--del);display:block}.diff .hunk{background:var(--hunk);
display:block}.normalised-note{color:var(--warn)}.diff.normalised{opacity:.55}
.boundary{margin:10px 0;padding:6px 10px;border:2px dashed var(--warn);
border-radius:6px;color:var(--warn);font-weight:600}.muted{color:var(--muted)}
table{border-collapse:collapse;width:100%;background:#fff}th,td{border-bottom:1px solid var(--line);
padding:4px 8px;text-align:left;font-size:13px}th button{font:inherit;background:none;
border:0;cursor:pointer;padding:0}.filters{display:flex;flex-wrap:wrap;
gap:8px;margin:8px 0}.scroll{overflow-x:auto}
"""

JS = """
(function(){
  var rows=[].slice.call(document.querySelectorAll('#index tbody tr'));
  var selects=[].slice.call(document.querySelectorAll('.filters select'));
  function apply(){rows.forEach(function(row){var show=selects.every(function(s){
    return !s.value||row.getAttribute('data-'+s.name)===s.value;});row.hidden=!show;});
    var shown=rows.filter(function(r){return !r.hidden;}).length;
    document.getElementById('shown').textContent=shown+' of '+rows.length+' runs shown';}
  selects.forEach(function(s){s.addEventListener('change',apply);});
  var sort=document.getElementById('sort-duration');
  if(sort){var descending=true;sort.addEventListener('click',function(){var body=rows.length?rows[0].parentNode:null;
    if(!body)return;rows.sort(function(a,b){var x=parseFloat(a.getAttribute('data-duration'))||0,
    y=parseFloat(b.getAttribute('data-duration'))||0;return descending?y-x:x-y;});descending=!descending;
    rows.forEach(function(r){body.appendChild(r);});});}
  if(rows.length)apply();
})();
"""


def e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def page(views: list[RunView], skipped: list[tuple[str, str]], *, generated: str, version: str) -> str:
    anchors = {id(view): f"run-{index}" for index, view in enumerate(views, start=1)}
    parts = [
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">",
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; img-src data:\">",
        f"<title>forkpoint report — {e(views[0].run_id) if len(views) == 1 else f'{len(views)} runs'}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<header><h1>forkpoint report</h1><p class=\"muted\">{len(views)} run(s) · generated {e(generated)} · "
        f"forkpoint {e(version)}</p></header>",
    ]
    if len(views) > 1 or skipped:
        parts.append(_index(views, anchors, skipped))
    parts.extend(_run(view, anchors[id(view)]) for view in views)
    parts.append(f"<script>{JS}</script></body></html>")
    return "".join(parts)


def _index(views: list[RunView], anchors: dict[int, str], skipped: list[tuple[str, str]]) -> str:
    def options(name: str, values: Iterable[str]) -> str:
        choices = "".join(f"<option value=\"{e(v)}\">{e(v)}</option>" for v in sorted(set(values)))
        return f"<label>{e(name)} <select name=\"{e(name)}\"><option value=\"\">all</option>{choices}</select></label>"

    statuses = Counter(str(v.result.agent_status) for v in views)
    rows = []
    for view in views:
        failure = _category(view)
        rows.append(
            f"<tr data-status=\"{e(view.result.agent_status)}\" data-agent=\"{e(_agent(view))}\" "
            f"data-category=\"{e(failure)}\" data-duration=\"{view.duration_s or 0:.3f}\">"
            f"<td><a href=\"#{anchors[id(view)]}\">{e(view.run_id)}</a></td><td>{e(_agent(view))}</td>"
            f"<td>{e(view.result.after_step)}</td><td>{e(view.result.phase)}</td>"
            f"<td>{e(view.result.quality)}{_version_mark(view)}</td><td>{e(view.observations_match)}</td>"
            f"<td>{e(view.result.agent_status)}</td><td>{e(failure)}</td><td>{_seconds(view.duration_s)}</td></tr>"
        )
    skipped_html = "".join(f"<li>{e(path)}: {e(reason)}</li>" for path, reason in skipped)
    return (
        "<section><h2>Runs</h2><p class=\"muted\">" + ", ".join(f"{e(k)} {n}" for k, n in sorted(statuses.items()))
        + "</p><div class=\"filters\">"
        + options("status", (str(v.result.agent_status) for v in views))
        + options("agent", (_agent(v) for v in views))
        + options("category", (_category(v) for v in views))
        + "<span id=\"shown\" class=\"muted\"></span></div><div class=\"scroll\"><table id=\"index\"><thead><tr>"
        "<th>run</th><th>agent</th><th>boundary</th><th>phase</th><th>quality</th><th>observations</th>"
        "<th>agent status</th><th>failure</th><th><button id=\"sort-duration\" type=\"button\">duration ⇅</button></th>"
        "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>"
        + (f"<h3>not shown</h3><ul>{skipped_html}</ul>" if skipped else "") + "</section>"
    )


def _version_mark(view: RunView) -> str:
    """`` (unverified_version)`` in the index when the recording's version was not verified."""
    return " (unverified_version)" if view.result.recorded_version_status == "unverified" else ""


def _agent(view: RunView) -> str:
    return str(view.result.agent.name) if view.result.agent else ""


def _category(view: RunView) -> str:
    failure = view.result.failure
    return str(failure.category or "") if failure else ""


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.1f} s"


def _badge(text: Any, tone: str = "") -> str:
    return f"<span class=\"badge {tone}\">{e(text)}</span>"


def _run(view: RunView, anchor: str) -> str:
    result, metadata = view.result, view.metadata
    agent, failure = result.agent, result.failure
    name, version, profile = (agent.name, agent.version, agent.profile) if agent else (None, None, None)
    match = view.observations_match
    reasons = ", ".join(str(r) for r in result.quality_reasons or [])
    badges = (_badge(result.phase) + _badge(f"quality {result.quality}" + (f" ({reasons})" if reasons else ""),
                                            "ok" if result.quality == "verified" else "warn")
              + _badge(f"observations {match}", {"exact": "ok", "diverged": "bad"}.get(match, ""))
              + _badge(f"agent {result.agent_status}", "ok" if result.agent_status == "completed" else ""))
    if failure:
        badges += _badge(failure.category, "bad")
    facts = [
        ("agent", f"{name} {version}"),
        ("recorded version", f"{result.recorded_version or 'unknown'}: "
                             f"{result.recorded_version_status or 'not resolved'}"),
        ("continuing version", metadata.get("continuing_agent_version") or metadata.get("continuing_version")
         or (version if result.phase == "continued" else "—")),
        ("profile", profile),
        ("tool semantics", (agent.tool_profile or agent.tool_semantics_version if agent else None) or "—"),
        ("quality reasons", reasons or "—"),
        ("boundary", f"after batch {result.after_step} of {metadata.get('complete_batches', '?')} complete"),
        ("mode", metadata.get("mode")),
        ("upstream", metadata.get("upstream") or view.upstream or "—"),
        ("model", metadata.get("upstream_model") or metadata.get("requested_model") or "—"),
        ("duration", _seconds(view.duration_s) or "—"),
        ("tool calls re-run", result.replayed_tool_calls),
        ("continued steps", result.continued_steps),
        ("tokens", _tokens(metadata.get("model_usage"))),
        ("source sha256", metadata.get("source_sha256")),
    ]
    if failure:
        facts.append(("failure", f"{failure.category}: {failure.message}"))
    body = [f"<section class=\"run\" id=\"{anchor}\"><h2>{e(view.run_id)}</h2><div>{badges}</div><dl class=\"facts\">"]
    body += [f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in facts]
    body.append("</dl><h3>Timeline</h3>")
    body += [_batch(view, batch) for batch in view.batches]
    body.append(f"<div class=\"boundary\">boundary — after batch {e(result.after_step)}</div>")
    body.append(_bridge(metadata.get("model_bridge"), view.branches))
    prompt = metadata.get("boundary_user_prompt") or {}
    if view.branches:
        body.append(_branches(view.branches, view.branch_live))
    body.append(_live(view.live, prompt if prompt.get("injected") else None))
    body.append(_next_action(view.next_action))
    body.append("</section>")
    return "".join(body)


def _branches(document: dict[str, Any], live: dict[str, list[dict[str, Any]]] | None = None) -> str:
    """One column per branch from the shared boundary — its live turns and reward side by side — the group's
    figures (docs/rl.md) and the agreement figures."""
    rows = [row for row in document.get("branches") or [] if isinstance(row, dict)]
    if not rows:
        return ""

    def reward(row: dict[str, Any]) -> str:
        score = row.get("score")
        if not isinstance(score, dict):
            return "not scored"
        if score.get("failure"):
            return f"score failure: {score['failure']}"
        return f"{score.get('reward')} (exit {score.get('exit')}, {score.get('duration_s')} s)"

    def advantage(row: dict[str, Any]) -> str:
        group = row.get("group")
        if not isinstance(group, dict) or group.get("advantage") is None:
            return "—"
        grpo = group.get("advantage_grpo")
        shown = f"{group['advantage']:+.3g}" if isinstance(group["advantage"], int | float) else "?"
        return shown + (f" (GRPO {grpo:+.3g})" if isinstance(grpo, int | float) else "")

    def turns(row: dict[str, Any]) -> str:
        messages = (live or {}).get(str(row.get("branch"))) or []
        lines = []
        for message in messages:
            calls = "; ".join(f"→ {c['function']['name']} {_one_line(c['function']['arguments'], 200)}"
                              for c in message.get("tool_calls") or [])
            content = _one_line(str(message.get("content") or ""), 300)
            lines.append(f"{message.get('role')}: {' '.join(part for part in (content, calls) if part)}")
        return _bounded("\n".join(lines), TEXT_BOUND) if lines else "no live turns"

    def first_action(row: dict[str, Any]) -> str:
        action = row.get("first_action") or {}
        tools = [f"{t.get('name')} {json.dumps(t.get('arguments'), ensure_ascii=False)}"
                 for t in action.get("tools") or [] if isinstance(t, dict)]
        return _bounded("\n".join(tools) or str(action.get("text") or ""), 600)

    def changed(row: dict[str, Any]) -> str:
        files = row.get("files_changed") or {}
        return "\n".join(f"{sign} {path}" for sign, key in (("+", "added"), ("-", "removed"), ("~", "modified"))
                         for path in files.get(key) or []) or "none"

    lines = (("reward", reward), ("advantage", advantage), ("live turns", turns),
             ("status", lambda r: r.get("status")), ("agent", lambda r: r.get("agent_status")),
             ("steps", lambda r: r.get("continued_steps")), ("prompt", lambda r: f"{r.get('prompt_length')} chars"
                                                              if r.get("prompt_length") else "—"),
             ("same as original N+1", lambda r: r.get("same_as_original")), ("first action", first_action),
             ("files changed", changed),
             ("model requests", lambda r: "validated {validated}, refused {refused}".format(**r["model_bridge"])
              if isinstance(r.get("model_bridge"), dict) else "—"),
             ("tokens", lambda r: tokens_text(r.get("model_usage")) or "—"),
             ("failure", lambda r: (r.get("failure") or {}).get("category") or "—"))
    head = "".join(f"<th>branch {e(row.get('branch'))}</th>" for row in rows)
    cells = "".join(f"<tr><th>{e(name)}</th>" + "".join(f"<td><pre>{e(get(row))}</pre></td>" for row in rows)
                    + "</tr>" for name, get in lines)
    agreement = document.get("agreement") or {}
    figures = ", ".join(f"{e(k.replace('_', ' '))} {e(round(v, 3) if isinstance(v, float) else v)}"
                        for k, v in agreement.items())
    group = document.get("group")
    if isinstance(group, dict):
        passes = ", ".join(f"pass@{k} {v:.2f}" for k, v in (group.get("pass_at_k") or {}).items()
                           if isinstance(v, int | float))
        original = (f", original reward {group['original_reward']}, equal in {group.get('equal_to_original')}"
                    if group.get("original_reward") is not None else "")
        figures = (f"group {group.get('id')}: n {group.get('n')}, mean {group.get('mean')}, std {group.get('std')}"
                   f"{', ' + passes if passes else ''}{original}; {figures}")
    failed = [row for row in rows if row.get("status") in ("failed", "ambiguous")]
    if failed:  # a partial (or wholly failed) branched run says so before its figures
        categories = Counter(str((row.get("failure") or {}).get("category") or row.get("status")) for row in failed)
        summary = ", ".join(f"{name} x{count}" for name, count in sorted(categories.items()))
        figures = (f"{'all ' + str(len(rows)) if len(failed) == len(rows) else f'{len(failed)} of {len(rows)}'} "
                   f"branches failed ({summary}); {figures}")
    return (f"<h3>Branches</h3><p class=\"muted\">{e(figures)}</p><div class=\"scroll\"><table class=\"branches\">"
            f"<thead><tr><th></th>{head}</tr></thead><tbody>{cells}</tbody></table></div>")


def _tokens(usage: Any) -> str:
    """``model_usage`` in a line: calls, tokens, the upstream's median latency."""
    if not isinstance(usage, dict) or not usage.get("calls"):
        return "—"
    medians = (("upstream_ms_p50", "upstream p50"), ("ttfb_ms_p50", "first byte p50"))
    latency = ", ".join(f"{label} {usage[key]:.0f} ms" for key, label in medians
                        if isinstance(usage.get(key), int | float))
    return calls_text(usage).lstrip(", ") + (f" ({latency})" if latency else "")


def _batch(view: RunView, batch: dict[str, Any]) -> str:
    calls = [c for c in batch.get("tool_calls") or [] if isinstance(c, dict)]
    return (f"<div class=\"batch\"><strong>Batch {e(batch.get('ordinal'))}</strong> "
            f"<span class=\"muted\">{len(calls)} call(s)</span>" + "".join(_call(view, c) for c in calls) + "</div>")


def _call(view: RunView, call: dict[str, Any]) -> str:
    call_id = str(call.get("call_id", ""))
    row = view.observations.get(call_id, {})
    arguments = call.get("input", call.get("arguments"))
    shown = json.dumps(arguments, ensure_ascii=False, indent=1) if arguments is not None else ""
    if row.get("stale_reused"):
        state, tone = "stale (recorded observation reused)", "stale"
    elif row.get("normalised"):
        state, tone = "exact after normalisation", "normalised"
    elif row.get("exact"):
        state, tone = "exact", ""
    elif row:
        state, tone = "diverged", "diverged"
    else:
        state, tone = "not replayed", ""
    duration = view.call_ms.get(call_id)
    summary = (f"{e(call.get('name'))} <span class=\"muted\">{e(_one_line(shown, 100))}</span> "
               + _badge(state, {"diverged": "bad", "normalised": "warn"}.get(tone, "ok" if state == "exact" else ""))
               + (f" <span class=\"muted\">{duration:.0f} ms</span>" if duration is not None else ""))
    parts = [f"<details class=\"call {tone}\"><summary>{summary}</summary>",
             f"<div class=\"muted\">id {e(call_id)}</div><pre>{e(_bounded(shown, INPUT_BOUND))}</pre>"]
    if row:
        parts.append("<div class=\"sides\">" + _side("historical", row, "historical") + _side("fresh", row, "fresh")
                     + "</div>")
        parts.append(_diff(row))
    parts.append("</details>")
    return "".join(parts)


def _side(label: str, row: dict[str, Any], key: str) -> str:
    preview = row.get(f"{key}_preview") or {}
    size = row.get(f"{key}_bytes")
    cut = " (first 4,096 characters shown)" if preview.get("truncated") else ""
    error = " · error" if row.get(f"{key}_is_error") else ""
    return (f"<div><div class=\"muted\">{e(label)} · {e(size)} bytes{e(error)}{e(cut)}</div>"
            f"<pre>{e(preview.get('text', ''))}</pre></div>")


def _diff(row: dict[str, Any]) -> str:
    diff = row.get("diff")
    if not isinstance(diff, dict) or not diff.get("lines"):
        return ""
    lines = []
    for line in diff["lines"]:
        text = str(line)
        tone = ("hunk" if text.startswith("@@") else "add" if text.startswith("+") and not text.startswith("+++")
                else "del" if text.startswith("-") and not text.startswith("---") else "")
        lines.append(f"<span class=\"{tone}\">{e(text)}</span>" if tone else e(text) + "\n")
    normalised = bool(row.get("normalised"))
    why = ("only the split of a process session's output between calls differs (timing)"
           if row.get("normalised_reason") == "timing" else "only normalised (volatile) fields differ")
    note = f"<span class=\"normalised-note\"> — {why}</span>" if normalised else ""
    more = " (cut)" if diff.get("truncated") else ""
    return (f"<details class=\"diff{' normalised' if normalised else ''}\" open><summary>diff historical → fresh "
            f"({len(diff['lines'])} lines{more}){note}</summary><pre class=\"diff\">{''.join(lines)}</pre></details>")


def _bridge(bridge: Any, branches: dict[str, Any] | None = None) -> str:
    rows = [row for row in (branches or {}).get("branches") or [] if isinstance(row, dict)]
    if not isinstance(bridge, dict) and rows:  # a branched run: one bridge per branch, each in its column
        bridges: list[dict[str, Any]] = [row["model_bridge"] for row in rows
                                         if isinstance(row.get("model_bridge"), dict)]
        validated = sum(1 for b in bridges if b.get("validated"))
        requests = sum(b["validated"] for b in bridges if type(b.get("validated")) is int)
        refused = sum(b["refused"] for b in bridges if type(b.get("refused")) is int)
        return ("<h3>Model bridge</h3><p>one bridge per branch: the gate validated the first request of "
                f"{validated} of {len(rows)} branches ({requests} validated requests, {refused} refused in all; "
                "per branch below)</p>")
    if not isinstance(bridge, dict):
        return "<h3>Model bridge</h3><p class=\"muted\">not started (no continuation)</p>"
    cells = "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in bridge.items())
    return f"<h3>Model bridge</h3><dl class=\"facts\">{cells}</dl>"


def _live(messages: list[dict[str, Any]], prompt: dict[str, Any] | None) -> str:
    """The live turns; the boundary prompt (the first live user message when one was injected) is shown by its
    length and SHA-256 only, as in every other forkpoint output."""
    if not messages:
        return "<h3>Continuation</h3><p class=\"muted\">no live turns</p>"
    items = []
    for index, message in enumerate(messages):
        if index == 0 and prompt is not None and message.get("role") == "user":
            items.append(f"<li><strong>boundary prompt</strong> <span class=\"muted\">{e(prompt.get('length'))} "
                         f"characters, sha256 {e(prompt.get('sha256'))} (text not shown)</span></li>")
            continue
        calls = "".join(
            f"<div>→ {e(c['function']['name'])} <span class=\"muted\">"
            f"{e(_bounded(c['function']['arguments'], INPUT_BOUND))}</span></div>"
            for c in message.get("tool_calls") or [])
        content = str(message.get("content") or "")
        items.append(f"<li><strong>{e(message.get('role'))}</strong>{calls}"
                     + (f"<pre>{e(_bounded(content, TEXT_BOUND))}</pre>" if content else "") + "</li>")
    return f"<h3>Continuation</h3><ol>{''.join(items)}</ol>"


def _next_action(document: dict[str, Any] | None) -> str:
    if not document:
        return ""
    metrics = document.get("metrics") or {}

    def side(label: str, action: Any) -> str:
        if not isinstance(action, dict):
            return f"<div><div class=\"muted\">{e(label)}</div><p class=\"muted\">none</p></div>"
        tools = "".join(f"<div>→ {e(t.get('name'))} {e(_bounded(json.dumps(t.get('arguments')), INPUT_BOUND))}</div>"
                        for t in action.get("tools") or [] if isinstance(t, dict))
        return (f"<div><div class=\"muted\">{e(label)}</div>{tools}"
                f"<pre>{e(_bounded(str(action.get('text') or ''), TEXT_BOUND))}</pre></div>")

    same = metrics.get("same_tool_calls")
    verdict = _badge("same tool calls" if same else "different tool calls", "ok" if same else "warn")
    return (f"<h3>Next action vs the original action N+1</h3>{verdict}<div class=\"sides\">"
            + side("original", document.get("original")) + side("continued", document.get("replayed")) + "</div>")


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _bounded(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… ({len(text):,} characters, first {limit:,} shown)"
