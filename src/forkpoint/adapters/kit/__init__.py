"""What the agent folders share: the continuation shell, the command runner, the npm CLIs' runtime pieces and
tool host, the companion Python runner's host side, the Chat message projection, ids and JSON helpers."""
