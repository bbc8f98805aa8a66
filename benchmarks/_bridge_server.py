"""Helper of bridge_overhead.py: run forkpoint's model bridge in its own process, as in a real run.

``python benchmarks/_bridge_server.py CASE_DIR UPSTREAM_URL [--agent claude-code|codex|gemini-cli] [--upstream U]``
builds the agent's gate from a recorded resume case (tests/fixtures/<agent>/requests/<version>/<case>; Gemini CLI:
the ``tools`` fixture and its recorded resume, ``gemini_case``) and starts ``Bridge(gate, upstream)`` with the
agent's pass-through upstream (``native``: Anthropic Messages for Claude Code, Responses for Codex, the Gemini API
for Gemini CLI) or the translating Chat Completions upstream (``openai-chat``); it prints its base URL and
serves until stdin closes, then prints the bridge summary as JSON. The upstream key has the length of a real one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from forkpoint.adapters.claude_code.envelope import expected_prefix
from forkpoint.adapters.claude_code.gate import ClaudeGate
from forkpoint.adapters.codex.envelope import expected_prefix as codex_expected_prefix
from forkpoint.adapters.codex.gate import CodexGate
from forkpoint.bridge.gate import Gate
from forkpoint.bridge.protocols.anthropic import AnthropicUpstream
from forkpoint.bridge.protocols.gemini import GeminiUpstream
from forkpoint.bridge.protocols.openai_responses import OpenAIResponsesUpstream
from forkpoint.bridge.protocols.translating import TranslatingChatUpstream
from forkpoint.bridge.server import Bridge
from forkpoint.bridge.upstream import Upstream

#: as long as a real Anthropic key (108 characters): the relay's redaction works per chunk on the key's length
UPSTREAM_KEY = "sk-ant-api03-" + "Bench0Key1Of2Realistic3Length4" * 3 + "Bench"


PROTOCOLS = {"claude-code": "anthropic-messages", "codex": "openai-responses", "gemini-cli": "google-generate-content"}


def gate_of(agent: str, case: Path) -> Gate:
    if agent == "gemini-cli":
        from _gemini_case import gemini_gate

        return gemini_gate(case)
    meta = json.loads((case / "meta.json").read_text("utf-8"))
    if agent == "codex":
        lines = [json.loads(line) for line in (case / "rollout.jsonl").read_text("utf-8").splitlines()]
        items = [line["payload"] for line in lines if line["type"] == "response_item"]
        return CodexGate(codex_expected_prefix(items, meta["nonce"], meta["version"]))
    records = [json.loads(line) for line in (case / "session.jsonl").read_text("utf-8").splitlines()]
    return ClaudeGate(expected_prefix(records, meta["nonce"], meta["version"]))


def upstream_of(agent: str, upstream: str, url: str) -> Upstream:
    if upstream == "openai-chat":
        return TranslatingChatUpstream(PROTOCOLS[agent], url + "/v1", UPSTREAM_KEY)
    if agent == "gemini-cli":
        return GeminiUpstream(url, UPSTREAM_KEY)
    if agent == "codex":
        return OpenAIResponsesUpstream(url + "/v1", UPSTREAM_KEY)
    return AnthropicUpstream(url, UPSTREAM_KEY)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("case", type=Path)
    parser.add_argument("upstream_url")
    parser.add_argument("--agent", choices=tuple(PROTOCOLS), default="claude-code")
    parser.add_argument("--upstream", choices=("native", "openai-chat"), default="native")
    args = parser.parse_args()
    with Bridge(gate_of(args.agent, args.case), upstream_of(args.agent, args.upstream, args.upstream_url)) as bridge:
        print(bridge.base_url, flush=True)
        sys.stdin.read()  # serve until the benchmark closes our stdin
        summary = bridge.finish()
    print(json.dumps(summary.to_json()), flush=True)


if __name__ == "__main__":
    main()
