"""Redaction of exported text (pure): secrets by well-known shapes, secret-named assignments, the home path.

Each match becomes ``[REDACTED:<kind>]`` (the home path becomes ``~``) and is counted per kind; the secrets
themselves are never kept, not even in the report. Shapes are deliberately specific (prefix + length), so
ordinary text and hashes pass untouched.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass, field

_SECRET_NAME = (
    r"[A-Za-z_][A-Za-z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|PRIVATE)[A-Za-z0-9_]*"
)

#: (kind, pattern); a pattern with a group named ``value`` redacts only that group.
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("private_key", re.compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)", re.S)),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}")),
    ("openai_key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}")),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})")),
    ("aws_access_key_id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("secret_assignment", re.compile(  # NAME=value / NAME: value / export NAME="value" / "name": "value"
        rf"(?im)(?P<name>\b{_SECRET_NAME}\b[\"']?\s*[=:]\s*[\"']?)(?P<value>[^\s\"',;]{{4,}})")),
)


@dataclass
class Redactor:
    """Redacts text and keeps the counts per kind (``counts``) over everything it saw."""

    home: str | None = None
    counts: Counter[str] = field(default_factory=Counter)

    def text(self, value: str) -> str:
        for kind, pattern in PATTERNS:
            value = pattern.sub(functools.partial(self._replace, kind), value)
        if self.home and len(self.home) > 1 and self.home in value:
            value, count = re.subn(re.escape(self.home) + r"(?![A-Za-z0-9_.-])", "~", value)
            self.counts["home_path"] += count
        return value

    def _replace(self, kind: str, match: re.Match[str]) -> str:
        if match.groupdict().get("value") is None:
            self.counts[kind] += 1
            return f"[REDACTED:{kind}]"
        if match.group("value").startswith("[REDACTED:"):
            return match.group(0)
        self.counts[kind] += 1
        return f"{match.group('name')}[REDACTED:{kind}]"
