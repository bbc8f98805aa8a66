#!/usr/bin/env bash
# The README's demo: install forkpoint, inspect a real Claude Code session shipped with the package,
# and prepare its native prefix after batch 1 (prepare-only: nothing runs, the workspace is untouched).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e .

example="$(python3 -c 'from forkpoint.examples import path; print(path("claude-code"))')"
demo_dir="$(mktemp -d -t forkpoint-demo-XXXXXX)"

echo "== forkpoint inspect $example"
forkpoint inspect "$example"

echo
echo "== forkpoint replay --prepare-only --after-step 1"
forkpoint replay --agent claude-code --trajectory "$example" --after-step 1 --prepare-only \
  --workspace "$demo_dir" --output-dir "$demo_dir/runs" --state-dir "$demo_dir/state" --run-id demo

echo
echo "== the prepared native prefix (types of its lines)"
python3 - "$demo_dir/runs/demo/native/prefix" <<'PY'
import json, pathlib, sys
for path in pathlib.Path(sys.argv[1]).glob("*.jsonl"):
    print(path)
    for line in path.read_text().splitlines():
        record = json.loads(line)
        content = record.get("message", {}).get("content")
        if record["type"] == "attachment":
            kind = record["attachment"].get("type")
        else:
            kind = content[0].get("type") if isinstance(content, list) and content else "prompt"
        print(f"  {record['type']:<10} {kind}")
PY
echo "outputs: $demo_dir/runs/demo"
