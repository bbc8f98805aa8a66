"""forkpoint.process.childenv: the allowlist of a child's environment, and ``--env`` entries."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from forkpoint.core.errors import ReplayError
from forkpoint.process import childenv, sanitized_env

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


def test_children_of_a_run_get_its_own_temp_dir_and_nothing_in_it_outlives_the_run(tmp_path: Path) -> None:
    temp = tmp_path / "state" / "tmp"
    temp.parent.mkdir()
    temp.mkdir()  # left by a run that was killed: replaced
    (temp / "stale").write_text("x")
    with childenv.passing({"BAR": "1"}, temp_dir=temp):
        env = sanitized_env({**KEPT, "TMPDIR": "/tmp"}, strip_credentials=True)
        assert env["TMPDIR"] == str(temp) and env["BAR"] == "1" and os.listdir(temp) == []
        script = ('d=$(mktemp -d) && touch "$d/f" "$TMPDIR/.bun-addon.so" && mkdir "$TMPDIR/locked" && '
                  'touch "$TMPDIR/locked/f" && chmod 0 "$TMPDIR/locked" && ln -s / "$TMPDIR/root-link" && echo "$d"')
        made = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=True).stdout
        assert made.startswith(f"{temp}/")
    assert not temp.exists() and temp.parent.is_dir()
    assert sanitized_env({**KEPT, "TMPDIR": "/tmp"}, strip_credentials=True)["TMPDIR"] == "/tmp"


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
