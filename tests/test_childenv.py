"""forkpoint.childenv: the allowlist of a child's environment, and ``--env`` entries."""

from __future__ import annotations

import pytest

from forkpoint import childenv
from forkpoint.errors import ReplayError
from forkpoint.process import sanitized_env

HOSTILE = {
    "AWS_ACCESS_KEY_ID": "a", "SSH_PRIVATE_KEY": "s", "DB_PASSWORD": "p", "DATABASE_URL": "postgres://u:pw@h/db",
    "HTTPS_PROXY": "http://user:pass@proxy:3128", "http_proxy": "http://user:pass@proxy:3128", "FOO_CANARY": "f",
    "PYTHONPATH": "/pp", "LD_PRELOAD": "/evil.so", "GIT_ASKPASS": "/x", "SSH_AUTH_SOCK": "/run/agent.sock",
}
KEPT = {"PATH": "/bin", "HOME": "/home/x", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "xterm", "TZ": "UTC",
        "SHELL": "/bin/bash", "SSL_CERT_FILE": "/etc/ssl/cert.pem", "CARGO_HOME": "/opt/cargo"}


def test_only_allowlisted_names_reach_a_child() -> None:
    assert sanitized_env({**HOSTILE, **KEPT}, strip_credentials=True) == KEPT


def test_passed_entries_are_added_for_the_run_only() -> None:
    passed = childenv.resolve(["FOO_CANARY", "BAR=1", "NOT_SET_ANYWHERE"], HOSTILE)
    assert passed.values == {"FOO_CANARY": "f", "BAR": "1"}
    assert passed.metadata() == {"passed": ["BAR", "FOO_CANARY"], "missing": ["NOT_SET_ANYWHERE"]}
    with childenv.passing(passed.values):
        assert sanitized_env(HOSTILE, strip_credentials=True) == {"FOO_CANARY": "f", "BAR": "1"}
    assert sanitized_env(HOSTILE, strip_credentials=True) == {}


def test_a_given_value_wins_over_the_host_and_names_never_repeat() -> None:
    passed = childenv.resolve(["FOO_CANARY=given", "FOO_CANARY", "X", "X"], HOSTILE)
    assert passed.values == {"FOO_CANARY": "given"} and passed.missing == ("X",)


@pytest.mark.parametrize("spec", ["", "=v", "1ABC", "A-B", "A B=1", "../x", "A=\0"])
def test_malformed_entries_are_refused(spec: str) -> None:
    with pytest.raises(ReplayError):
        childenv.check_specs([spec])


def test_without_strip_only_python_redirects_go() -> None:
    kept = sanitized_env({**HOSTILE, **KEPT}, strip_credentials=False)
    assert "PYTHONPATH" not in kept and kept["DB_PASSWORD"] == "p"
