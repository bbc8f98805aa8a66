"""Gemini CLI's case for the translation rows of bridge_overhead.py (section 6b): the gate and the requests of a
resume of the ``tools`` fixture cut after batch 3 (tests/fixtures/gemini_cli/0.61.0/tools).

The recorded resume (``resume-after-3.json``, the real first request of ``gemini --session-file``) keeps the
contents, the tool names and the system instruction's hash; the system text and the tool schemas are not in the
fixture, so the bodies here carry a short system text and name-only declarations (a real request is larger: see
the honest limits in docs/benchmarks.md). The later request is the first one followed by the model's next call
(``read_file``) and its function response, as the CLI sends it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from forkpoint.adapters.gemini_cli import GeminiCliAdapter
from forkpoint.adapters.gemini_cli.gate import PROFILE, expected_prefix
from forkpoint.adapters.gemini_cli.parse import parse_gemini
from forkpoint.adapters.gemini_cli.session import prefix_messages
from forkpoint.bridge.protocols.gemini import GeminiGate
from forkpoint.core.model import JsonObject, Mode, Plan

MODEL = "gemini-2.5-pro"


def resumed(case: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((case / "resume-after-3.json").read_text("utf-8"))
    return value


def gemini_gate(case: Path) -> GeminiGate:
    recorded = resumed(case)
    parsed = parse_gemini(case / "session.jsonl")
    plan = Plan(parsed, recorded["after"], Mode.PREPARE_ONLY, GeminiCliAdapter().profile_for(parsed))
    return GeminiGate(PROFILE, expected_prefix(prefix_messages(plan, None), MODEL, recorded["nonce"]))


def first_request(case: Path) -> JsonObject:
    recorded = resumed(case)
    return {"contents": copy.deepcopy(recorded["contents"]),
            "systemInstruction": {"role": "user", "parts": [{"text": "You are Gemini CLI, an interactive agent."}]},
            "tools": [{"functionDeclarations": [
                {"name": name, "description": f"The {name} tool.",
                 "parametersJsonSchema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}
                for name in recorded["tool_names"]]}],
            "generationConfig": {"temperature": 1, "topP": 0.95, "thinkingConfig": {"includeThoughts": True}}}


def later_request(case: Path, output: str = "print('hello world')\n") -> JsonObject:
    body = first_request(case)
    body["contents"] += [
        {"role": "model", "parts": [{"functionCall": {"id": "read_file__call_bench", "name": "read_file",
                                                      "args": {"file_path": "greet.py"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"id": "read_file__call_bench", "name": "read_file",
                                                         "response": {"output": output}}}]}]
    return body
