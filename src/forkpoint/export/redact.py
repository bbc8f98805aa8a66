"""Redaction of exported text (pure): secrets by well-known shapes, secret-named assignments, the home path.

Each match becomes ``[REDACTED:<kind>]`` (the home path becomes ``~``) and is counted per kind; the secrets
themselves are never kept, not even in the report. Shapes are deliberately specific (prefix + length), so
ordinary text and hashes pass untouched.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

_SECRET_NAME = (
    r"[A-Za-z_][A-Za-z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|PRIVATE)[A-Za-z0-9_]*"
)

#: kind -> pattern, tried in this order at each position; ``secret_assignment`` redacts only its ``value`` group.
PATTERNS: dict[str, str] = {
    "private_key": r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)",
    "jwt": r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    "anthropic_key": r"\bsk-ant-[A-Za-z0-9_-]{20,}",
    "openai_key": r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
    "github_token": r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
    "aws_access_key_id": r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    "slack_token": r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
    # NAME=value / NAME: value / export NAME="value" / "name": "value"
    "secret_assignment": rf"(?P<name>(?i:\b{_SECRET_NAME}\b)[\"']?\s*[=:]\s*[\"']?)(?P<value>[^\s\"',;]{{4,}})",
}
#: one pass over the text: the alternation of every pattern, each in a group named after its kind
_ANY = re.compile("|".join(f"(?P<{kind}>{pattern})" for kind, pattern in PATTERNS.items()))


@dataclass
class Redactor:
    """Redacts text and keeps the counts per kind (``counts``) over everything it saw."""

    home: str | None = None
    counts: Counter[str] = field(default_factory=Counter)
    _since: Counter[str] = field(default_factory=Counter)

    def pending(self) -> int:
        """How many replacements since the last :meth:`take`."""
        return sum(self._since.values())

    def take(self) -> Counter[str]:
        """The replacements per kind since the last call (one row's), and start counting anew."""
        taken, self._since = self._since, Counter()
        return taken

    def text(self, value: str) -> str:
        value = _ANY.sub(self._replace, value)
        if self.home and len(self.home) > 1 and self.home in value:
            value, count = re.subn(re.escape(self.home) + r"(?![A-Za-z0-9_.-])", "~", value)
            self.counts["home_path"] += count
            self._since["home_path"] += count
        return value

    def _replace(self, match: re.Match[str]) -> str:
        kind = match.lastgroup or "secret"
        self.counts[kind] += 1
        self._since[kind] += 1
        if kind == "secret_assignment":
            return f"{match.group('name')}[REDACTED:{kind}]"
        return f"[REDACTED:{kind}]"
