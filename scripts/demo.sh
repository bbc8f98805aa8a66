#!/usr/bin/env bash
# The README's demo: install forkpoint and Claude Code 2.1.332 (from npm), then replay a real recorded
# Claude Code session shipped with the package up to batch 1 and continue the REAL claude binary from
# there. `--upstream stub` makes the bridge answer the validated model request itself: a zero-cost proof
# that the real agent accepted the rebuilt session and that its first request ended exactly at O'1.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e .
forkpoint agents install claude-code@2.1.332

example_dir="$(python3 -c 'from forkpoint.examples import folder; print(folder("claude-code"))')"
recorded_cwd="$(python3 -c 'from forkpoint.examples import meta; print(meta("claude-code")["recorded_cwd"])')"
demo_dir="$(mktemp -d -t forkpoint-demo-XXXXXX)"

echo "== forkpoint inspect"
forkpoint inspect "$example_dir/session.jsonl"

# Recorded tool inputs use absolute paths: the fresh workspace goes where the recording ran.
rm -rf "$recorded_cwd" && mkdir -p "$(dirname "$recorded_cwd")" && cp -r "$example_dir/workspace" "$recorded_cwd"

echo
echo "== forkpoint replay --after-step 1 --upstream stub  (re-run batch 1, continue the real claude)"
forkpoint replay --agent claude-code --trajectory "$example_dir/session.jsonl" --after-step 1 \
  --workspace "$recorded_cwd" --upstream stub \
  --output-dir "$demo_dir/runs" --state-dir "$demo_dir/state" --run-id demo

echo
echo "== what happened"
python3 - "$demo_dir/runs/demo" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
result = json.loads((out / "result.json").read_text())
bridge = result["metadata"]["model_bridge"]
print(f"phase={result['phase']} quality={result['quality']} agent_status={result['agent_status']}")
print(f"model requests validated by the gate: {bridge['validated']}, refused: {bridge['refused']}")
for row in json.loads((out / "observations.json").read_text())["observations"]:
    print(f"observation {row['name']} {row['id']}: exact={row['exact']}")
print(f"outputs: {out}")
PY
