"""What the agent folders share: the continuation shell, the command runner, the companion Python runner's
host side, ids and JSON helpers."""
