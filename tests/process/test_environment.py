"""The environment of a supervised child: credentials and Python redirections dropped."""

from __future__ import annotations

from forkpoint.process import sanitized_env


def test_sanitized_env_drops_python_and_credentials() -> None:
    base = {
        "PATH": "/bin",
        "HOME": "/home/x",
        "PYTHONHOME": "/py",
        "PYTHONPATH": "/pp",
        "VIRTUAL_ENV": "/venv",
        "ANTHROPIC_API_KEY": "k",
        "openai_api_key": "k",
        "GITHUB_TOKEN": "t",
        "AWS_SECRET_ACCESS_KEY": "s",
        "HTTP_AUTHORIZATION": "a",
        "DB_PASSWORD": "p",
        "CLAUDE_CODE_USE_BEDROCK": "1",
        "CLAUDE_CODE_USE_VERTEX": "1",
        "CLAUDE_CODE_USE_FOUNDRY": "1",
        "TERM": "xterm",
    }
    assert sanitized_env(base, strip_credentials=True) == {"PATH": "/bin", "HOME": "/home/x", "TERM": "xterm"}
    kept = sanitized_env(base, strip_credentials=False)
    assert "PYTHONHOME" not in kept and "PYTHONPATH" not in kept and "VIRTUAL_ENV" not in kept
    assert kept["ANTHROPIC_API_KEY"] == "k" and kept["CLAUDE_CODE_USE_BEDROCK"] == "1"
