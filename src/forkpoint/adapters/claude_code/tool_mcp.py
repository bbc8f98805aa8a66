"""An MCP tool's result as Claude Code shows it (measured on 2.1.220 and 2.1.332 with a real stdio server written
with the ``mcp`` SDK, ``claude -p --mcp-config``): the call itself runs on the user's server (``process.mcp``).

- a result with ``structuredContent``: the content is ``JSON.stringify(structuredContent)`` (compact, key order
  kept), and ``toolUseResult`` the same string;
- otherwise the content is the result's content blocks (``{"type": "text", "text": ...}``), ``toolUseResult`` the
  same list;
- ``isError``: the content is the text of its blocks, ``is_error``, and ``toolUseResult`` ``"Error: <text>"``. When the
  tool's schema was deferred (2.1.332 ``-p`` runs defer MCP tools behind ToolSearch) Claude appends ``SCHEMA_HINT``
  with the tool's ``inputSchema`` (``JSON.stringify``) and its name: whether it was deferred is a fact of the
  original session, so the hint is added when the recorded result has it, with the schema the server lists now.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from forkpoint.adapters.claude_code.tool_profile import ToolOutcome

if TYPE_CHECKING:
    from forkpoint.process.mcp import McpResult


SCHEMA_HINT = ("\n\nThis tool's input schema was not in your prompt when you called it. The input schema is: {schema}\n"
               "If your input does not match this schema, correct it and call the tool again. If it matches, the error "
               "above has another cause. If the corrected call fails the same way, call ToolSearch with query "
               '"select:{name}" to load the tool, then call it again.')
_HINT_START = SCHEMA_HINT.split("{schema}")[0]


def mcp_outcome(result: McpResult, name: str, recorded: str | None,
                schema: Callable[[], dict[str, Any] | None]) -> ToolOutcome:
    """``name``: Claude's tool name; ``recorded``: the recorded result text; ``schema``: the tool's inputSchema."""
    texts = [str(block.get("text", "")) for block in result.content if block.get("type") == "text"]
    if result.is_error:
        text = "\n".join(texts)
        content = text
        listed = schema() if recorded is not None and _HINT_START in recorded else None
        if listed is not None:  # Claude's {type: "object", ...inputSchema}: "type" first, the rest in its order
            ordered = {"type": "object", **listed}
            rendered = json.dumps(ordered, ensure_ascii=False, separators=(",", ":"))
            content = text + SCHEMA_HINT.format(schema=rendered, name=name)
        return ToolOutcome(content, True, f"Error: {text}")
    if result.structured is not None:
        rendered = json.dumps(result.structured, ensure_ascii=False, separators=(",", ":"))
        return ToolOutcome(rendered, False, rendered)
    blocks: list[dict[str, Any]] = [{"type": "text", "text": str(block.get("text", ""))}
                                    if block.get("type") == "text" else block for block in result.content]
    return ToolOutcome(blocks, False, blocks)
