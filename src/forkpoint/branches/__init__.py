"""Replay once, branch K: snapshots, branch records, `forkpoint continue` and `forkpoint gc`."""
