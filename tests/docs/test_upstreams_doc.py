"""docs/upstreams.md says what the code does: the agent × upstream table is the registered AgentSpecs' ``upstreams``
(and the bridge's translating upstreams), and every loss a translator reports has its row in the loss tables.

A failure here means the code changed and the page did not (or the reverse): update the page, then this test's
expectations if a loss was added.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from forkpoint.adapters import all_specs
from forkpoint.adapters.spec import AgentSpec
from forkpoint.bridge.protocols import translations
from forkpoint.bridge.translate import anthropic_chat, gemini_chat, responses_chat
from forkpoint.core.protocols import PROTOCOLS, STUB, UPSTREAMS

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "upstreams.md"
TRANSLATE = ROOT / "src" / "forkpoint" / "bridge" / "translate"
PROTOCOL_NAMES = {"anthropic-messages": "Anthropic Messages", "openai-responses": "OpenAI Responses",
                  "openai-chat": "Chat Completions", "google-generate-content": "Gemini API"}
#: (agent protocol, upstream) -> the translator modules the table names
TRANSLATORS = {("anthropic-messages", "openai-chat"): "`anthropic_chat` + `anthropic_answer`",
               ("openai-responses", "openai-chat"): "`responses_chat` + `responses_answer`",
               ("google-generate-content", "openai-chat"): "`gemini_chat` + `gemini_answer`"}

#: the loss tables (### headings of "What each translation loses") each translate module reports into
DIRECTIONS = {
    "anthropic_chat.py": ("Claude Code (Anthropic Messages) → Chat",),
    "anthropic_answer.py": ("Chat answer → Claude Code (Anthropic SSE)",),
    "responses_chat.py": ("Codex (Responses) → Chat",),
    "responses_answer.py": ("Chat answer → Codex (Responses SSE)",),
    "gemini_chat.py": ("Gemini CLI (Gemini API) → Chat",),
    "gemini_answer.py": ("Chat answer → Gemini CLI (Gemini SSE)",),
    "common.py": ("Claude Code (Anthropic Messages) → Chat", "Codex (Responses) → Chat",
                  "Gemini CLI (Gemini API) → Chat"),
    "sequencer.py": ("Chat answer → Claude Code (Anthropic SSE)", "Chat answer → Codex (Responses SSE)",
                     "Chat answer → Gemini CLI (Gemini SSE)"),
}
#: every loss message a translator reports (``{}`` for an interpolated part) -> what its row in each of the
#: module's loss tables says
LOSSES = {
    "anthropic_answer.py": {
        "finish_reason {} read as end_turn": "an unknown finish reason reads as `end_turn`",
        "tool call {} arguments were not valid JSON: kept as a string": "arguments that are not valid JSON",
    },
    "anthropic_chat.py": {
        "tool_choice dropped (no tools left to choose)": "the whole `tool_choice` when no tools are left",
        "Claude Code's billing header system block dropped": "x-anthropic-billing-header",
        "cache_control dropped": "`cache_control`",
        "text citations dropped": "`citations`",
        "{} block field {} dropped": "any block's unknown field",
        "thinking signature dropped": "`signature`",
        "redacted_thinking block dropped": "| `redacted_thinking` | — | dropped |",
        "user content before a tool_result moved after the tool messages":
            "user content placed before a `tool_result` moves after the tool messages",
        "tool_result image moved to a user message": "images in results move to a user message",
        "tool_reference read as text (Chat has no tool search)": "| `tool_reference` (in a tool result) | text |",
        "document replaced by a placeholder (upstream takes no files)": "else a placeholder",
        "server tool {} ({}) dropped": "server tools",
        "deferred tool {} dropped (Chat has no tool search)": "deferred tools",
        "tool field {} dropped": "other tool fields",
        "tool_choice field {} dropped": "other `tool_choice` fields",
    },
    "common.py": {
        "request field {} dropped": "any unknown field",
        "image replaced by a placeholder (upstream takes no images)": "placeholder when the upstream takes no images",
        "leading system messages joined into one": "the leading ones joined into one",
        "system message after the conversation began sent as a user message":
            "later ones sent as user messages in `<system>` tags",
    },
    "gemini_chat.py": {
        "thoughtSignature dropped": "`thoughtSignature`",
        "{} part field {} dropped": "any part's unknown field",
        "functionCall field {} dropped": "other `functionCall` fields",
        "functionResponse field {} dropped": "other `functionResponse` fields",
        "repeated identical functionResponse dropped (Chat answers a call once)":
            "a repeated identical functionResponse",
        "user content before a functionResponse moved after the tool messages":
            "user content placed before a `functionResponse` moves after the tool messages",
        "thought flag of a user part dropped": "the `thought` flag of a user part",
        "fileData replaced by a placeholder (the Chat server cannot fetch Google files)": "`fileData`",
        "inline {} data replaced by a placeholder": "`inlineData` other media",
        "built-in tool {} dropped": "built-in tools",
        "function declaration field {} dropped": "other declaration fields",
        "toolConfig field {} dropped": "other `toolConfig` fields",
        "function calling mode VALIDATED sent as required": "VALIDATED sent as required",
        "allowedFunctionNames beyond one dropped (Chat names one function or any)": "allowedFunctionNames beyond one",
        "tool_choice dropped (no tools left to choose)": "the whole `tool_choice` when no tools are left",
        "generationConfig field {} dropped": "any other `generationConfig` field",
    },
    "gemini_answer.py": {
        "finish_reason {} read as STOP": "an unknown finish reason reads as STOP",
        "tool call {} arguments were not a JSON object: sent as an arguments text":
            "are sent as an arguments text",
    },
    "responses_answer.py": {
        "custom tool call {}: arguments were not {{}: string}, passed raw": "are passed raw",
        "finish_reason {} read as completed": "an unknown finish reason reads as `completed`",
    },
    "responses_chat.py": {
        "item metadata passthrough dropped": "`internal_chat_message_metadata_passthrough`",
        "reasoning encrypted_content dropped": "`encrypted_content`",
        "tool output image moved to a user message": "images in tool outputs move to a user message",
        "web_search_call item dropped": "| `web_search_call` | — | dropped |",
        "output_text annotations dropped": "`annotations`",
        "input_file replaced by a placeholder": "`input_file` → placeholder",
        "custom tool {}: its format is described, not enforced": "the grammar is described, not enforced",
        "hosted tool {} ({}) dropped": "hosted tools",
        "tool_choice {} dropped (auto)": "becomes auto",
        "reasoning.{} dropped": "any other `reasoning.*`",
        "text.{} dropped": "`text.*` field",
    },
    "sequencer.py": {
        "tool call {} arguments were not valid JSON": "arguments that are not valid JSON are listed",
    },
}


def section(text: str, heading: str) -> str:
    """The body of the Markdown section under ``heading``, its subsections included."""
    match = re.search(rf"^(#+) {re.escape(heading)}\n", text, re.M)
    assert match, f"docs/upstreams.md has no section {heading!r}"
    level = len(match.group(1))
    end = re.compile(rf"^#{{1,{level}}} ", re.M).search(text, match.end())
    return text[match.end():end.start() if end else len(text)]


def table_rows() -> dict[str, dict[str, str]]:
    """agent -> upstream -> cell, from the table between the upstreams-table markers."""
    text = DOC.read_text("utf-8")
    block = text.split("<!-- upstreams-table:start -->", 1)[1].split("<!-- upstreams-table:end -->", 1)[0]
    lines = [line.strip() for line in block.strip().splitlines()]
    header = [cell.strip().strip("`") for cell in lines[0].strip("|").split("|")]
    assert header[:2] == ["agent", "native protocol"], header
    rows = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = dict(zip(header[1:], cells[1:], strict=True))
    return rows


def expected_cell(spec: AgentSpec, upstream: str) -> str:
    declared = [u.name for u in spec.upstreams]
    if upstream not in declared:
        return "—"
    if upstream == STUB:
        cell = "stub"
    elif PROTOCOLS[spec.protocol].upstream == upstream:
        cell = "native"
    else:
        cell = f"translated ({TRANSLATORS[(spec.protocol, upstream)]})"
    return f"{cell} (default)" if upstream == spec.default_upstream.name else cell


def test_the_agent_upstream_table_is_the_specs() -> None:
    rows = table_rows()
    specs = {spec.name: spec for spec in all_specs()}
    assert list(rows) == list(specs), "one row per registered agent, in the registry's order"
    for name, spec in specs.items():
        assert list(rows[name])[1:] == list(UPSTREAMS), f"{name}: one column per upstream forkpoint knows"
        assert rows[name]["native protocol"] == PROTOCOL_NAMES[spec.protocol], name
        for upstream in UPSTREAMS:
            assert rows[name][upstream] == expected_cell(spec, upstream), (name, upstream)


def test_every_translated_cell_has_a_translating_upstream_in_the_bridge() -> None:
    """A spec may offer a foreign upstream only where the bridge has its translator (and the reverse)."""
    offered = {(spec.protocol, u.name) for spec in all_specs() for u in spec.upstreams
               if u.name not in (STUB, PROTOCOLS[spec.protocol].upstream)}
    assert offered == set(translations()) == set(TRANSLATORS)


def reported_losses(path: Path) -> set[str]:
    """The messages of every ``losses.add(...)`` / ``losses.append(...)`` call in a module (f-string parts as
    ``{}``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("add", "append") and node.args):
            continue
        owner = node.func.value
        owner_name = owner.attr if isinstance(owner, ast.Attribute) else owner.id if isinstance(owner, ast.Name) else ""
        if owner_name != "losses":
            continue
        message = node.args[0]
        if isinstance(message, ast.Constant) and isinstance(message.value, str):
            found.add(message.value)
        elif isinstance(message, ast.JoinedStr):
            found.add("".join(str(part.value) if isinstance(part, ast.Constant) else "{}" for part in message.values))
        else:
            raise AssertionError(f"{path.name}: a loss reported as {ast.dump(message)} (a literal message expected)")
    return found


def test_every_reported_loss_has_its_row_in_the_loss_tables() -> None:
    text = section(DOC.read_text("utf-8"), "What each translation loses")
    reporting = {path.name for path in TRANSLATE.glob("*.py") if reported_losses(path)}
    assert reporting == set(LOSSES), "a translate module reports losses: name its loss tables in DIRECTIONS/LOSSES"
    for module, expected in LOSSES.items():
        assert reported_losses(TRANSLATE / module) == set(expected), \
            f"{module}: its losses changed; give each new one its row in docs/upstreams.md and its entry here"
        for heading in DIRECTIONS[module]:
            table = section(text, heading)
            for message, row_text in expected.items():
                assert row_text in table, f"{heading!r} says nothing of {module}'s loss {message!r}"


def test_every_dropped_and_refused_request_field_is_named() -> None:
    text = section(DOC.read_text("utf-8"), "What each translation loses")
    for module, heading, names in (
            (anthropic_chat, "Claude Code (Anthropic Messages) → Chat", anthropic_chat.DROPPED_FIELDS),
            (responses_chat, "Codex (Responses) → Chat",
             responses_chat.DROPPED_FIELDS + responses_chat.REFUSED_FIELDS),
            (gemini_chat, "Gemini CLI (Gemini API) → Chat", gemini_chat.DROPPED_FIELDS)):
        table = section(text, heading)
        missing = [name for name in names if f"`{name}`" not in table]
        assert not missing, f"{module.__name__}: {missing} missing from {heading!r}"
