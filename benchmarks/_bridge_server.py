"""Helper of bridge_overhead.py: run forkpoint's model bridge in its own process, as in a real run.

``python benchmarks/_bridge_server.py CASE_DIR UPSTREAM_URL`` builds the Claude gate from a recorded resume case
(tests/fixtures/claude_code/requests/<version>/<case>), starts ``Bridge(gate, AnthropicUpstream(UPSTREAM_URL))``,
prints its base URL and serves until stdin closes; then it prints the bridge summary as JSON. The upstream key has
the length of a real one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from forkpoint.adapters.claude_code.envelope import expected_prefix
from forkpoint.adapters.claude_code.gate import ClaudeGate
from forkpoint.bridge.protocols.anthropic import AnthropicUpstream
from forkpoint.bridge.server import Bridge

#: as long as a real Anthropic key (108 characters): the relay's redaction works per chunk on the key's length
UPSTREAM_KEY = "sk-ant-api03-" + "Bench0Key1Of2Realistic3Length4" * 3 + "Bench"


def main() -> None:
    case, upstream_url = Path(sys.argv[1]), sys.argv[2]
    meta = json.loads((case / "meta.json").read_text("utf-8"))
    records = [json.loads(line) for line in (case / "session.jsonl").read_text("utf-8").splitlines()]
    expected = expected_prefix(records, meta["nonce"], meta["version"])
    with Bridge(ClaudeGate(expected), AnthropicUpstream(upstream_url, UPSTREAM_KEY)) as bridge:
        print(bridge.base_url, flush=True)
        sys.stdin.read()
        summary = bridge.finish()
    print(json.dumps(summary.to_json()), flush=True)


if __name__ == "__main__":
    main()
