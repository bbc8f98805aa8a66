"""What the agent folders share: the continuation shell, the command runner, the companion Python runner's
host side, the Chat message projection, ids and JSON helpers."""
