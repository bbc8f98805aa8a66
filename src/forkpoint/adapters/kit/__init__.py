"""What the agent folders share: the continuation shell, the command runner, ids and JSON helpers."""
