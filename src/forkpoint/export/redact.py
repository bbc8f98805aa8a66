"""Redaction of exported text (pure): secrets by well-known shapes, secret-named assignments, credentials in URLs
and headers, the home path.

Each match becomes ``[REDACTED:<kind>]`` (the home path becomes ``~``) and is counted per kind; the secrets
themselves are never kept, not even in the report. Shapes are deliberately specific (prefix + length, or a name
that says "secret"), so ordinary text, hashes, UUIDs, git SHAs and base64 data pass untouched; where only part of a
match is the secret (an assignment's value, a URL's password, a header's credential) only that part is replaced,
so the line still reads. What is and is not caught, measured on a corpus: docs/export.md and
tests/export/secret_corpus.py.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

#: A secret name is found by its secret word (the match starts there: the rest of the name is kept anyway, and
#: a regex that starts at a keyword is far cheaper than one trying every word of the text as a name). Words that
#: make a name secret wherever they occur (``DB_PASSWORD``, ``clientSecret``, bare ``TOKEN``); ``tokens`` and
#: ``tokenizer`` are counts and models, not credentials.
_SECRET_WORD = r"[pPsScCtT](?i:assw(?:or)?d|assphrase|ecret|redentials?|oken(?!s\b|s_|i[sz]e)|rivate[_-]?key)"
#: ``key`` only as the last word of a longer name (``API_KEY``, ``apiKey``, ``api-key``, ``APIKEY``), never alone
#: (``key``, ``monkey``, ``task-key``) nor in the names of database and data-structure keys (``primary_key``)
_NOT_SECRET_KEY = "".join(f"(?<!{word}_key)(?<!{word.upper()}_KEY)" for word in (
    "primary", "foreign", "sort", "partition", "cache", "hash", "range", "idempotency", "dedup", "dedupe", "lookup",
    "group", "row", "public", "unique", "composite", "index", "map", "dict", "object", "registry"))
_KEY_WORD = (rf"(?:_[kK][eE][yY]{_NOT_SECRET_KEY}|Key(?<=[a-z0-9]Key)|KEY(?<=[A-Z0-9_]KEY)"
             r"|[aAsS](?<![A-Za-z0-9][aAsS])(?i:pi|ccess|ecret|uth)[_-]?(?i:key))")
#: a name ending so holds something about the secret, not the secret (``apiKeySource``, ``TOKEN_FILE``)
_NOT_SECRET_END = "".join(f"(?<!(?i:{word}))" for word in ("source", "helper", "file", "path", "name", "type",
                                                            "count", "limit"))
#: each alternative begins with a literal or a few letters: the regex engine skips ahead to them
_NAME = rf"(?:{_SECRET_WORD}|{_KEY_WORD})[A-Za-z0-9_.-]*{_NOT_SECRET_END}"
#: a value: double-quoted (escapes and spaces kept inside), single-quoted, or bare up to a blank, a quote or a
#: bracket (a ``;`` or ``,`` inside is part of it, one at the end is not), at least 4 characters. Not a secret:
#: ``$VAR`` / ``${VAR}`` references, code (``get_password()``, ``os.environ[...]``, ``config.token``), type names
#: and empty literals (``str``, ``null``, ``true``)
_CHARS = r"[^\s\"'`()\[\]{}<>,;]"  # a bare value's characters between its inner , and ;


def _value(prefix: str) -> str:
    """The value pattern, its groups named ``<prefix>_dq`` / ``_sq`` / ``_bare`` (the part replaced)."""
    dq = rf'"(?!\$\{{?[A-Za-z_]\w*\}}?")(?P<{prefix}_dq>(?:[^"\\\n]|\\.)+)"'
    sq = rf"'(?!\$\{{?[A-Za-z_]\w*\}}?')(?P<{prefix}_sq>[^'\n]+)'"
    bare = (rf"(?P<{prefix}_bare>(?!\$\{{|\$[A-Za-z_])(?=[^\s\"'`()\[\]{{}}<>]{{4}})"
            r"(?!(?i:null|none|true|false|undefined|string|required|optional|bool|int)\b)"
            r"(?![A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?![^\s\"'`,;]))"
            rf"(?>{_CHARS}+(?:[,;]+{_CHARS}+)*)(?![(\[]))")
    return f"(?:{dq}|{sq}|{bare})"


#: kind -> pattern, tried in this order at each position. A pattern with groups named ``<kind>_...`` replaces only
#: those groups (the secret part); one without replaces the whole match.
PATTERNS: dict[str, str] = {
    "private_key": r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
                   r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    "jwt": r"eyJ(?<!\weyJ)[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    "anthropic_key": r"sk-ant-(?<!\wsk-ant-)[A-Za-z0-9_-]{20,}",
    "openai_key": r"sk-(?<!\wsk-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
    "stripe_key": r"[rs]k_(?<!\w[rs]k_)(?:live|test)_[A-Za-z0-9]{16,}",
    "github_token": r"g(?<!\wg)(?:h[pousr]_[A-Za-z0-9]{36,}|ithub_pat_[A-Za-z0-9_]{22,})",
    "gitlab_token": r"glpat-(?<!\wglpat-)[A-Za-z0-9_-]{20,}",
    "huggingface_token": r"hf_(?<!\whf_)[A-Za-z0-9]{30,}",
    "npm_token": r"npm_(?<!\wnpm_)[A-Za-z0-9]{36}\b",
    "google_api_key": r"AIza(?<!\wAIza)[0-9A-Za-z_-]{35}",
    "sendgrid_key": r"SG\.(?<!\wSG\.)[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}",
    "aws_access_key_id": r"A(?:KIA|SIA)(?<!\wA[KS]IA)[0-9A-Z]{16}\b",
    "slack_token": r"xox(?<!\wxox)[abposr]-[A-Za-z0-9-]{10,}",
    "slack_webhook": r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]{10,}",
    # scheme://user:PASSWORD@host (postgres, mysql, redis, amqp, mongodb+srv, https ...): the password only
    "url_credentials": r"://(?<=[A-Za-z0-9]://)[^\s:/@\"'<>]+:(?P<url_credentials_pw>[^\s@/\"'<>]+)@",
    # Authorization: Bearer|Basic|Token X / a bare "Bearer X": the credential only (one with a digit, or long)
    "auth_header": r"[BT](?<!\w[BT])(?:earer|asic|oken)[ \t]+(?P<auth_header_value>"
                   r"(?=[A-Za-z0-9._~+/-]*[0-9]|[A-Za-z0-9._~+/-]{24})[A-Za-z0-9._~+/-]{8,}=*)",
    # --password=X / --api-key X / --token X on a command line
    "secret_flag": r"--(?<![\w-]--)(?:[a-z0-9]+-)*(?:password|passwd|passphrase|secret|token|api-?key|access-key|"
                   rf"secret-key|auth-token)(?:=|[ \t]+(?!-)){_value('secret_flag')}",
    # NAME=value / NAME: value / export NAME="value" / "name": "value" / name = 'value'
    "secret_assignment": rf"{_NAME}[\"']?[ \t]*(?::=|=>|[=:])[ \t]*{_value('secret_assignment')}",
    # a bare AWS secret access key: 40 of base64's letters with upper, lower and a digit, standing alone (a git SHA
    # is hex, a base64 blob is longer)
    "aws_secret_key": r"(?<![A-Za-z0-9/+])(?=[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=]))(?=[A-Za-z0-9/+]{0,39}[A-Z])"
                      r"(?=[A-Za-z0-9/+]{0,39}[a-z])(?=[A-Za-z0-9/+]{0,39}[0-9])[A-Za-z0-9/+]{40}",
}
#: one regex per kind: each can skip ahead to its first literal (one alternation of all of them could not, and
#: was several times slower); their matches are merged as one alternation would take them (leftmost, then the
#: earlier kind), overlapping later matches dropped
_COMPILED = [(kind, re.compile(pattern)) for kind, pattern in PATTERNS.items()]
#: what at least one pattern needs (its literal, its secret word, the 40-character run of an AWS secret key): one
#: search over a string that holds none of them (most of a transcript's strings) replaces twenty
_TRIGGER = re.compile(r"-----BEGIN |eyJ|sk-|_live_|_test_|gh[pousr]_|github_pat_|glpat-|hf_|npm_|AIza|SG\.|A[KS]IA|xox"
                      r"|://|Bearer|Basic|--|(?i:passw|passphrase|secret|credential|token|private|key)"
                      r"|[A-Za-z0-9/+]{40}")
#: no pattern matches fewer characters (``aKey="x"``)
_SHORTEST = 8
#: kind -> its secret groups (the parts replaced); a kind without any is replaced whole
_PARTS: dict[str, tuple[str, ...]] = {
    kind: tuple(name for name in compiled.groupindex if name.startswith(f"{kind}_")) for kind, compiled in _COMPILED
}


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
        found = [(match.start(), order, match) for order, (_, compiled) in enumerate(_COMPILED)
                 for match in compiled.finditer(value)] if len(value) >= _SHORTEST and _TRIGGER.search(value) else []
        if found:
            found.sort(key=lambda item: item[:2])
            out: list[str] = []
            end = 0
            for start, order, match in found:
                if start < end:
                    continue  # inside what an earlier match replaced
                out += (value[end:start], self._replace(_COMPILED[order][0], match))
                end = match.end()
            value = "".join(out) + value[end:]
        if self.home and len(self.home) > 1 and self.home in value:
            value, count = re.subn(re.escape(self.home) + r"(?![A-Za-z0-9_.-])", "~", value)
            self.counts["home_path"] += count
            self._since["home_path"] += count
        return value

    def _replace(self, kind: str, match: re.Match[str]) -> str:
        self.counts[kind] += 1
        self._since[kind] += 1
        marker = f"[REDACTED:{kind}]"
        part = next((name for name in _PARTS[kind] if match.start(name) != -1), None)
        if part is None:
            return marker
        return match.string[match.start():match.start(part)] + marker + match.string[match.end(part):match.end()]
