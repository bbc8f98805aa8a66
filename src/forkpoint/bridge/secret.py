"""The bridge's one redactor of its upstream key: every byte an upstream answer sends toward the agent passes it.

An upstream may echo the key it was sent (an error body such as ``invalid x-api-key: sk-...``, a proxy quoting
the Authorization header, a model repeating it); the agent would print it and write it into its session, and
forkpoint's records (next-action.json, logs/, native/continued/) would follow. ``UpstreamKey`` is what an upstream
holds: ``stream()`` for a relayed byte stream (a key split across chunks is still caught), ``text()`` for whole
strings (error messages, facts, header values), ``pieces()`` for the text a translated answer streams in deltas
(a key split across deltas is still caught: ``bridge.translate.sequencer``).
"""

from __future__ import annotations

import zlib
from typing import AnyStr, Generic

REDACTED_TEXT = "[redacted by forkpoint]"
REDACTED = REDACTED_TEXT.encode()
#: a shorter key ("x", "EMPTY": what local OpenAI-compatible servers are given) is no secret to hide, and
#: replacing it would corrupt the answer wherever those letters occur
MIN_REDACTED_SECRET = 8


class HeldStream(Generic[AnyStr]):
    """Replaces ``secret`` in a stream of ``str`` or ``bytes`` pieces, also across piece boundaries.

    Only a tail that could begin the secret is held back until the next piece, so a normal stream is passed on
    exactly as it arrives; ``flush`` gives the held tail at the stream's end."""

    def __init__(self, secret: AnyStr, replacement: AnyStr) -> None:
        self.secret: AnyStr = secret
        self.replacement: AnyStr = replacement
        self.pending: AnyStr = secret[:0]

    def feed(self, chunk: AnyStr) -> AnyStr:
        parts = (self.pending + chunk).split(self.secret)
        tail = parts[-1]  # what follows the last whole secret: only it can begin the next one
        held = self._held(tail)
        self.pending = tail[len(tail) - held:] if held else self.secret[:0]
        data: AnyStr = self.replacement.join(parts)
        return data[: len(data) - held]

    def _held(self, tail: AnyStr) -> int:
        """The length of the longest end of ``tail`` that begins the secret (shorter than it): only the places of
        the secret's first character are tried, not every length (a key is ~100 bytes, a stream many chunks)."""
        start = max(0, len(tail) - len(self.secret) + 1)
        first = self.secret[:1]
        while (start := tail.find(first, start)) != -1:
            if self.secret.startswith(tail[start:]):
                return len(tail) - start
            start += 1
        return 0

    def flush(self) -> AnyStr:
        data: AnyStr = self.pending
        self.pending = self.secret[:0]
        return data


#: the content-encodings the redactor can read (zlib: gzip, and deflate with its zlib header)
DECODABLE = frozenset({"gzip", "x-gzip", "deflate"})
IDENTITY = frozenset({"", "identity"})


class Redactor(HeldStream[bytes]):
    """The byte-stream form every relay uses: ``secret`` becomes ``REDACTED``. An answer compressed although the
    bridge asked for ``identity`` (``encoding``) is decompressed first: compressed, the key would pass unseen and
    the agent would inflate it (the relay then drops the Content-Encoding header)."""

    def __init__(self, secret: str, encoding: str = "identity") -> None:
        super().__init__(secret.encode(), REDACTED)
        self.encoding = encoding
        self._zlib = None if encoding in IDENTITY else zlib.decompressobj(wbits=47)  # 47: gzip or zlib header

    @property
    def decodes(self) -> bool:
        return self._zlib is not None

    def feed(self, chunk: bytes) -> bytes:
        """Raises ``ValueError`` for a compressed answer that does not decompress."""
        if self._zlib is not None:
            try:
                chunk = self._zlib.decompress(chunk)
            except zlib.error as error:
                raise ValueError(f"the upstream's {self.encoding} answer does not decompress: {error}") from None
        return super().feed(chunk)

    def flush(self) -> bytes:
        tail = super().feed(self._zlib.flush()) if self._zlib is not None else b""
        return tail + super().flush()


class UpstreamKey:
    """An upstream's key as the redactor sees it (``None`` or a key shorter than ``MIN_REDACTED_SECRET``: nothing
    to hide, everything passes unchanged)."""

    def __init__(self, key: str | None) -> None:
        self._key = key if key and len(key) >= MIN_REDACTED_SECRET else None

    def __repr__(self) -> str:  # never show the key
        return f"UpstreamKey({'set' if self._key else 'none'})"

    def __bool__(self) -> bool:
        return self._key is not None

    def stream(self, encoding: str = "identity") -> Redactor | None:
        """A redactor for one relayed byte stream in ``encoding`` (its Content-Encoding). Raises ``ValueError`` for
        an encoding it cannot read: such an answer is refused, never passed on unread."""
        encoding = encoding.strip().lower()
        if not self._key:
            return None
        if encoding not in IDENTITY | DECODABLE:
            raise ValueError(f"forkpoint bridge: the upstream answered in content-encoding {encoding!r} although "
                             "identity was asked; the answer cannot be checked for the upstream key: refused")
        return Redactor(self._key, encoding)

    def pieces(self) -> HeldStream[str] | None:
        """A redactor for one channel of streamed text (answer text, reasoning, one tool call's arguments)."""
        return HeldStream(self._key, REDACTED_TEXT) if self._key else None

    def text(self, value: str) -> str:
        return value.replace(self._key, REDACTED_TEXT) if self._key else value

    def data(self, value: bytes) -> bytes:
        return value.replace(self._key.encode(), REDACTED) if self._key else value
