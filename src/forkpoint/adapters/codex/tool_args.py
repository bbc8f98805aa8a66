"""Codex's argument parsing errors, re-created: ``failed to parse function arguments: <serde_json error>``.

Codex deserializes a function call's JSON ``arguments`` into a Rust struct with serde. When that fails the model
gets ``failed to parse function arguments: missing field `cmd` at line 1 column 34`` and the like (measured on
0.149.0 / 0.171.0). The text names a position in the RAW argument string, so ``check`` scans the raw JSON with
positions (serde_json reports the line and the column of the last byte it consumed) and applies the same rules:
fields are checked in document order, unknown fields are ignored, ``Option`` fields accept ``null``, missing
required fields are reported at the closing ``}`` in declaration order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PREFIX = "failed to parse function arguments: "


# ----------------------------------------------------------------------------------------- schema


@dataclass(frozen=True)
class Scalar:
    kind: str  # "string" | "bool" | "u64" | "usize" | "i32" | "any"


@dataclass(frozen=True)
class Seq:
    item: Spec


@dataclass(frozen=True)
class Enum:
    name: str
    variants: tuple[str, ...]


@dataclass(frozen=True)
class Struct:
    name: str
    fields: tuple[tuple[str, Spec], ...]
    required: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Opt:
    inner: Spec


Spec = Scalar | Seq | Enum | Struct | Opt

STRING, BOOL, U64, USIZE, I32, ANY = (Scalar(k) for k in ("string", "bool", "u64", "usize", "i32", "any"))
_STRING_LIST = Opt(Seq(STRING))

#: the escalation request both shell tools end with, in this order (an approval the model may ask for)
_ESCALATION: tuple[tuple[str, Spec], ...] = (
    ("sandbox_permissions", Opt(ANY)), ("justification", Opt(STRING)), ("prefix_rule", _STRING_LIST))
EXEC_COMMAND = Struct(
    "ExecCommandArgs",
    (("cmd", STRING), ("workdir", Opt(STRING)), ("shell", Opt(STRING)), ("tty", BOOL), ("login", Opt(BOOL)),
     ("yield_time_ms", U64), ("max_output_tokens", Opt(USIZE)), *_ESCALATION),
    frozenset({"cmd"}),
)
SHELL_COMMAND = Struct(
    "ShellCommandToolCallParams",
    (("command", STRING), ("workdir", Opt(STRING)), ("login", Opt(BOOL)), ("timeout_ms", Opt(U64)), *_ESCALATION),
    frozenset({"command"}),
)
#: Codex 0.40's ``shell`` tool (an argv list, not a script)
SHELL_040 = Struct(
    "ShellToolCallParams",
    (("command", Seq(STRING)), ("workdir", Opt(STRING)), ("timeout_ms", Opt(U64)),
     ("with_escalated_permissions", Opt(BOOL)), ("justification", Opt(STRING))),
    frozenset({"command"}),
)
_PLAN_ITEM = Struct(
    "PlanItemArg",
    (("step", STRING), ("status", Enum("StepStatus", ("pending", "in_progress", "completed")))),
    frozenset({"step", "status"}),
)
UPDATE_PLAN = Struct(
    "UpdatePlanArgs", (("explanation", Opt(STRING)), ("plan", Seq(_PLAN_ITEM))), frozenset({"plan"})
)
APPLY_PATCH_FUNCTION = Struct("ApplyPatchToolArgs", (("input", STRING),), frozenset({"input"}))


# ----------------------------------------------------------------------------------------- positioned JSON


@dataclass
class Node:
    kind: str  # "object" | "array" | "string" | "number" | "true" | "false" | "null"
    start: int  # index of the value's first byte
    end: int  # index of the value's last byte
    value: Any = None
    items: list[Node] = field(default_factory=list)
    members: list[tuple[str, Node]] = field(default_factory=list)


class _Scanner:
    def __init__(self, raw: str) -> None:
        self.data = raw.encode("utf-8")
        self.pos = 0

    def ws(self) -> None:
        while self.pos < len(self.data) and self.data[self.pos] in b" \t\r\n":
            self.pos += 1

    def value(self) -> Node:
        self.ws()
        start = self.pos
        char = self.data[self.pos : self.pos + 1]
        if char == b"{":
            return self.obj()
        if char == b"[":
            return self.arr()
        if char == b'"':
            self.string()
            return Node("string", start, self.pos - 1, json.loads(self.data[start : self.pos].decode("utf-8")))
        for literal, parsed in ((b"true", True), (b"false", False), (b"null", None)):
            if self.data.startswith(literal, self.pos):
                self.pos += len(literal)
                return Node(literal.decode(), start, self.pos - 1, parsed)
        while self.pos < len(self.data) and self.data[self.pos] in b"+-0123456789.eE":
            self.pos += 1
        if start == self.pos:
            raise ValueError("not JSON")
        token = self.data[start : self.pos].decode()
        number: int | float = float(token) if any(c in token for c in ".eE") else int(token)
        return Node("number", start, self.pos - 1, number)

    def string(self) -> None:
        self.pos += 1
        while self.data[self.pos] != ord('"'):
            self.pos += 2 if self.data[self.pos] == ord("\\") else 1
        self.pos += 1

    def obj(self) -> Node:
        return self._container("object", ord("}"), lambda node: node.members.append(self._member()))

    def arr(self) -> Node:
        return self._container("array", ord("]"), lambda node: node.items.append(self.value()))

    def _container(self, kind: str, close: int, read_one: Callable[[Node], None]) -> Node:
        """An object or array from its opening to its closing byte (``end``), its entries read by ``read_one``."""
        node = Node(kind, self.pos, 0)
        self.pos += 1
        self.ws()
        if self.data[self.pos] != close:
            while True:
                self.ws()
                read_one(node)
                self.ws()
                if self.data[self.pos] != ord(","):
                    break
                self.pos += 1
        node.end = self.pos
        self.pos += 1
        return node

    def _member(self) -> tuple[str, Node]:
        key_start = self.pos
        self.string()
        key = json.loads(self.data[key_start : self.pos].decode("utf-8"))
        self.ws()
        self.pos += 1  # ':'
        return key, self.value()


# ----------------------------------------------------------------------------------------- validation


class _SerdeError(Exception):
    def __init__(self, message: str, end: int) -> None:
        super().__init__(message)
        self.message = message
        self.end = end


def _expected(spec: Spec) -> str:
    if isinstance(spec, Opt):
        return _expected(spec.inner)
    if isinstance(spec, Seq):
        return "a sequence"
    if isinstance(spec, Struct):
        return f"struct {spec.name}"
    if isinstance(spec, Enum):
        return "variant identifier"
    return {"string": "a string", "bool": "a boolean"}.get(spec.kind, spec.kind)


def _unexpected(node: Node) -> str:
    if node.kind == "string":
        from forkpoint.adapters.codex.tool_text import rust_debug

        return f"string {rust_debug(str(node.value))}"
    if node.kind in ("true", "false"):
        return f"boolean `{node.kind}`"
    if node.kind == "null":
        return "null"
    if node.kind == "array":
        return "sequence"
    if node.kind == "object":
        return "map"
    if isinstance(node.value, float):
        text = repr(node.value)
        return f"floating point `{text}`"
    return f"integer `{node.value}`"


_INT_RANGES = {"u64": (0, 2**64 - 1), "usize": (0, 2**64 - 1), "i32": (-(2**31), 2**31 - 1)}


def _check(node: Node, spec: Spec) -> None:
    """Raise _SerdeError like serde_json would for ``node`` against ``spec``."""
    if isinstance(spec, Opt):
        if node.kind == "null":
            return
        _check(node, spec.inner)
        return
    if isinstance(spec, Scalar):
        if spec.kind == "any":
            return
        if spec.kind == "string" and node.kind == "string":
            return
        if spec.kind == "bool" and node.kind in ("true", "false"):
            return
        if spec.kind in _INT_RANGES and node.kind == "number" and isinstance(node.value, int):
            low, high = _INT_RANGES[spec.kind]
            if low <= node.value <= high:
                return
            raise _SerdeError(f"invalid value: integer `{node.value}`, expected {spec.kind}", node.end)
        _type_error(node, spec)
    if isinstance(spec, Enum):
        if node.kind != "string":
            _type_error(node, spec)
        if node.value not in spec.variants:
            expected = ", ".join(f"`{v}`" for v in spec.variants)
            raise _SerdeError(f"unknown variant `{node.value}`, expected one of {expected}", node.end)
        return
    if isinstance(spec, Seq):
        if node.kind != "array":
            _type_error(node, spec)
        for item in node.items:
            _check(item, spec.item)
        return
    if isinstance(spec, Struct):
        if node.kind != "object":
            _type_error(node, spec)
        known = dict(spec.fields)
        seen: set[str] = set()
        for key, value in node.members:
            if key in known:
                _check(value, known[key])
                seen.add(key)
        for name, _ in spec.fields:
            if name in spec.required and name not in seen:
                raise _SerdeError(f"missing field `{name}`", node.end)


def _type_error(node: Node, spec: Spec) -> None:
    # serde detects a map or sequence by peeking: the last byte it consumed is the one before it.
    end = node.start - 1 if node.kind in ("array", "object") else node.end
    raise _SerdeError(f"invalid type: {_unexpected(node)}, expected {_expected(spec)}", end)


def _position(data: bytes, index: int) -> tuple[int, int]:
    line = data.count(b"\n", 0, index + 1) + 1
    last_newline = data.rfind(b"\n", 0, index + 1)
    return line, index - last_newline


def check(raw: str, spec: Struct) -> str | None:
    """Codex's error text when ``raw`` does not deserialize into ``spec``; None when it does."""
    scanner = _Scanner(raw)
    try:
        root = scanner.value()
    except (ValueError, IndexError):
        return None  # not JSON: the parser marks such calls stale, never re-run
    try:
        _check(root, spec)
    except _SerdeError as error:
        line, column = _position(scanner.data, error.end)
        return f"{PREFIX}{error.message} at line {line} column {column}"
    return None


def raw_arguments(arguments: dict[str, Any]) -> str:
    """The arguments as a model typically serialises them (used when the raw string is not available)."""
    return json.dumps(arguments, ensure_ascii=False)
