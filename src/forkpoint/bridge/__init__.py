"""The local model bridge: gate (pure), upstreams and the loopback server."""
