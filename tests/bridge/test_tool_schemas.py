"""--record-tool-schemas: tool definitions of each protocol in OpenAI function form; the observer writes once."""

from __future__ import annotations

import json
from pathlib import Path

from forkpoint.bridge.tool_schemas import ToolSchemaRecorder, openai_tools, tool_schemas_document

SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}


def test_anthropic_input_schema_becomes_parameters() -> None:
    body = {"messages": [{"role": "user", "content": "SECRET"}],
            "tools": [{"name": "Bash", "description": "Run", "input_schema": SCHEMA},
                      {"type": "web_search_20250305", "name": "web_search"}]}
    tools, notes = openai_tools(body, "anthropic-messages")
    assert tools == [{"type": "function", "function": {"name": "Bash", "description": "Run", "parameters": SCHEMA}}]
    assert any("web_search" in note for note in notes)
    assert "SECRET" not in json.dumps(tool_schemas_document(body, "anthropic-messages"))


def test_responses_function_and_freeform_custom_tool() -> None:
    body = {"input": [], "tools": [
        {"type": "function", "name": "exec_command", "description": "Run", "parameters": SCHEMA, "strict": False},
        {"type": "custom", "name": "apply_patch", "description": "Patch",
         "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}}]}
    tools, notes = openai_tools(body, "openai-responses")
    assert tools[0] == {"type": "function", "function": {"name": "exec_command", "description": "Run",
                                                         "parameters": SCHEMA}}
    patch = tools[1]["function"]
    assert patch["name"] == "apply_patch" and "start: x" in patch["description"]
    (only,) = patch["parameters"]["properties"].values()
    assert only == {"type": "string"}
    assert any("apply_patch" in note and "one string parameter" in note for note in notes)


def test_chat_tools_are_kept_as_functions() -> None:
    body = {"messages": [], "tools": [{"type": "function", "function": {"name": "bash", "parameters": SCHEMA,
                                                                        "strict": True}}]}
    tools, notes = openai_tools(body, "openai-chat")
    assert tools == [{"type": "function", "function": {"name": "bash", "parameters": SCHEMA}}] and notes == ()
    assert openai_tools({"messages": []}, "openai-chat") == ([], ())


def test_the_recorder_writes_the_first_body_only(tmp_path: Path) -> None:
    path = tmp_path / "out" / "tool-schemas.json"
    recorder = ToolSchemaRecorder(path, "openai-chat")
    first = {"tools": [{"type": "function", "function": {"name": "first", "parameters": SCHEMA}}]}
    recorder(first)
    recorder({"tools": [{"type": "function", "function": {"name": "second", "parameters": SCHEMA}}]})
    document = json.loads(path.read_text())
    assert [tool["function"]["name"] for tool in document["tools"]] == ["first"]
    assert document["source_protocol"] == "openai-chat"
    assert document["captured_from"] == "first validated request"


def test_a_malformed_tool_list_is_noted_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "tool-schemas.json"
    ToolSchemaRecorder(path, "anthropic-messages")({"tools": [{"name": "Bash", "input_schema": "not an object"}]})
    document = json.loads(path.read_text())
    assert document["tools"] is None and document["notes"][0].startswith("not converted")
