"""Codex's built-in refusal of ``rm -f`` style commands, re-created (measured on 0.149.0 / 0.171.0).

Even with ``--dangerously-bypass-approvals-and-sandbox`` Codex refuses, before running anything, a command whose
shell script contains an ``rm`` invocation with a force flag. Probing the real binaries (42 shapes, identical in
both versions) gave these rules, which ``is_rm_force`` implements:

- The script is parsed as bash; a syntax error (``rm -rf x (``) means no refusal.
- Every simple command counts, wherever it is: in ``&&``/``||``/``;``/``|``/``&`` lists, subshells, ``{ }``
  groups, ``if``/``for``/``while`` bodies, function bodies, ``$( )`` and backquotes, after ``!`` and
  ``VAR=value`` prefixes, with redirections and heredocs (a heredoc's body is text, not commands).
- The command name must be literal (``rm``, ``"rm"``, ``/bin/rm``: the base name is compared); ``\\rm`` and
  ``$RM`` are not recognised. ``sudo rm`` and ``env rm`` / ``/usr/bin/env rm`` are unwrapped; ``command``,
  ``nice``, ``timeout``, ``exec``, ``time``, ``xargs``, ``find -exec`` and ``sudo -u x`` are not.
- A force flag is a literal argument before ``--`` that is ``--force`` or a short-option group containing
  ``f`` (``-f``, ``-rf``, ``-fr``, ``-Rf``, ``-rfv``, ``'-f'``), anywhere among the arguments (``rm x -f``).
  ``rm -- -f`` and ``rm -f$(echo)`` are not refused.
- ``sh -c '…'`` / ``bash -c "…"`` / ``zsh -lc …`` with a literal script are checked recursively.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

#: The refusal reason Codex appends to the rendered command.
RM_FORCE_REASON = "rm -f style commands are not permitted. Use a safer approach"

Word = str | None  # the literal value of a word, None when it contains expansions
_SHELLS = frozenset({"bash", "sh", "zsh"})
_PREFIX_RESERVED = frozenset(
    {"!", "{", "}", "then", "else", "elif", "if", "do", "while", "until", "fi", "done", "esac"}
)
_HEADER_RESERVED = frozenset({"for", "case", "select", "[[", "in"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_META = set("|&;()<> \t\n")
_BRACE_EXPANSION = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")
_REDIRECT_OPS = frozenset({"<", ">", ">>", ">|", "<>", "&>", "&>>", ">&", "<&", "<<", "<<-", "<<<"})


class _SyntaxError(Exception):
    pass


@dataclass
class _Token:
    kind: str  # "word" | "op" | "newline"
    text: str = ""
    value: Word = None
    commands: list[list[Word]] = field(default_factory=list)  # commands found inside $( ) / backquotes


class _Lexer:
    """A bash tokenizer good enough to find simple commands; nested substitutions are parsed recursively."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.i = 0
        self.heredocs: list[tuple[str, bool]] = []

    def tokens(self, closer: str | None = None) -> list[_Token]:
        out: list[_Token] = []
        src = self.src
        while self.i < len(src):
            char = src[self.i]
            if closer is not None and char == closer and self._depth_zero(out, closer):
                self.i += 1
                return out
            if char in " \t":
                self.i += 1
            elif char == "\\" and src.startswith("\\\n", self.i):
                self.i += 2
            elif char == "\n":
                self.i += 1
                out.append(_Token("newline", "\n"))
                self._skip_heredocs()
            elif char == "#":  # at a word boundary: a comment
                while self.i < len(src) and src[self.i] != "\n":
                    self.i += 1
            elif char in "<>" and src.startswith("(", self.i + 1):
                out.append(self._process_substitution())
            elif char in "|&;()<>":
                out.append(self._operator(out))
            else:
                out.append(self._word())
        if closer is not None:
            raise _SyntaxError(f"missing {closer!r}")
        return out

    @staticmethod
    def _depth_zero(out: list[_Token], closer: str) -> bool:
        if closer != ")":
            return True
        opened = sum(1 for t in out if t.kind == "op" and t.text == "(")
        closed = sum(1 for t in out if t.kind == "op" and t.text == ")")
        return opened <= closed

    def _process_substitution(self) -> _Token:
        inner = _Lexer(self.src)
        inner.i = self.i + 2
        tokens = inner.tokens(closer=")")
        text = self.src[self.i : inner.i]
        self.i = inner.i
        return _Token("word", text, None, _split_commands(tokens))

    def _operator(self, out: list[_Token]) -> _Token:
        src = self.src
        for op in (";;&", ";;", ";&", "&&", "||", "|&", "&>>", "&>", ">>", ">|", ">&", "<&", "<<<", "<<-", "<<", "<>"):
            if src.startswith(op, self.i):
                self.i += len(op)
                if op in ("<<", "<<-"):
                    self._register_heredoc(op == "<<-")
                return _Token("op", op)
        char = src[self.i]
        self.i += 1
        if char == "(" and src.startswith("(", self.i):
            self._skip_arithmetic()
            return _Token("op", "((")
        return _Token("op", char)

    def _skip_arithmetic(self) -> None:
        depth = 2
        self.i += 1
        while self.i < len(self.src) and depth:
            depth += {"(": 1, ")": -1}.get(self.src[self.i], 0)
            self.i += 1
        if depth:
            raise _SyntaxError("unterminated arithmetic")

    def _register_heredoc(self, strip_tabs: bool) -> None:
        src = self.src
        while self.i < len(src) and src[self.i] in " \t":
            self.i += 1
        word = self._word()
        delimiter = word.text.replace("'", "").replace('"', "").replace("\\", "")
        self.heredocs.append((delimiter, strip_tabs))

    def _skip_heredocs(self) -> None:
        src = self.src
        for delimiter, strip_tabs in self.heredocs:
            while True:
                if self.i >= len(src):
                    break  # bash only warns about an unterminated heredoc
                end = src.find("\n", self.i)
                line = src[self.i : end if end >= 0 else len(src)]
                self.i = end + 1 if end >= 0 else len(src)
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
        self.heredocs = []

    def _word(self) -> _Token:
        src = self.src
        start = self.i
        literal: list[str] = []
        unquoted: list[str] = []  # the word's unquoted characters (quoted parts as a separator)
        is_literal = True
        commands: list[list[Word]] = []
        while self.i < len(src) and src[self.i] not in _META:
            char = src[self.i]
            if char == "\\":
                literal.append(src[self.i : self.i + 2])
                self.i += 2
            elif char == "'":
                end = src.find("'", self.i + 1)
                if end < 0:
                    raise _SyntaxError("unterminated quote")
                literal.append(src[self.i + 1 : end])
                self.i = end + 1
            elif char == '"':
                text, plain = self._double_quoted(commands)
                literal.append(text)
                is_literal = is_literal and plain
            elif char == "$" and src.startswith("$'", self.i):
                end = src.find("'", self.i + 2)
                if end < 0:
                    raise _SyntaxError("unterminated quote")
                self.i = end + 1
                is_literal = False
            elif char == "$" or char == "`":
                self._expansion(commands)
                is_literal = False
            else:
                literal.append(char)
                unquoted.append(char)
                self.i += 1
                continue
            unquoted.append("\0")
        if self.i == start:
            raise _SyntaxError(f"unexpected {src[self.i]!r}")
        text = src[start : self.i]
        if _BRACE_EXPANSION.search("".join(unquoted)):
            is_literal = False  # `{a,b}` / `{1..3}` expand: not one literal word
        return _Token("word", text, "".join(literal) if is_literal else None, commands)

    def _double_quoted(self, commands: list[list[Word]]) -> tuple[str, bool]:
        src = self.src
        self.i += 1
        start = self.i
        plain = True
        while True:
            if self.i >= len(src):
                raise _SyntaxError("unterminated quote")
            char = src[self.i]
            if char == '"':
                text = src[start : self.i]
                self.i += 1
                return text, plain
            if char == "\\":
                self.i += 2
            elif char in "$`":
                self._expansion(commands)
                plain = False
            else:
                self.i += 1

    def _expansion(self, commands: list[list[Word]]) -> None:
        src = self.src
        if src[self.i] == "`":
            end = self.i + 1
            while end < len(src) and src[end] != "`":
                end += 2 if src[end] == "\\" else 1
            if end >= len(src):
                raise _SyntaxError("unterminated backquote")
            commands.extend(_commands(src[self.i + 1 : end]))
            self.i = end + 1
            return
        if src.startswith("$((", self.i):
            self.i += 1
            self._skip_arithmetic()
            return
        if src.startswith("$(", self.i):
            inner = _Lexer(src)
            inner.i = self.i + 2
            tokens = inner.tokens(closer=")")
            commands.extend(_split_commands(tokens))
            self.i = inner.i
            return
        if src.startswith("${", self.i):
            end = src.find("}", self.i)
            if end < 0:
                raise _SyntaxError("unterminated parameter expansion")
            self.i = end + 1
            return
        self.i += 1
        while self.i < len(src) and (src[self.i].isalnum() or src[self.i] == "_"):
            self.i += 1
        if self.i < len(src) and src[self.i] in "@*#?-$!0123456789" and src[self.i - 1] == "$":
            self.i += 1


def _split_commands(tokens: list[_Token]) -> list[list[Word]]:
    """The simple commands (their words) in a token stream, nested substitutions included."""
    commands: list[list[Word]] = []
    current: list[_Token] = []
    pending_redirect = False
    for token in tokens:
        for word_token in [token] if token.kind == "word" else []:
            commands.extend(word_token.commands)
        if token.kind == "word" and pending_redirect:
            pending_redirect = False
            continue
        if token.kind == "op" and token.text in _REDIRECT_OPS:
            if current and current[-1].kind == "word" and re.fullmatch(r"\d+", current[-1].text or ""):
                current.pop()  # the fd number of `2>`
            pending_redirect = token.text not in ("<<", "<<-")  # a heredoc delimiter was consumed already
            continue
        if token.kind == "word":
            current.append(token)
            continue
        _finish(current, commands)
        current = []
    _finish(current, commands)
    return commands


def _finish(tokens: list[_Token], commands: list[list[Word]]) -> None:
    words = [t for t in tokens if t.kind == "word"]
    while words and (words[0].value in _PREFIX_RESERVED or words[0].value == "function"):
        words = words[2:] if words[0].value == "function" else words[1:]  # `function NAME` then its body
    if not words or words[0].value in _HEADER_RESERVED:
        return
    while words and words[0].value is not None and _ASSIGNMENT.match(words[0].text):
        words = words[1:]
    if words:
        commands.append([w.value for w in words])


def _check_balance(tokens: list[_Token]) -> None:
    """Reject what bash would reject as a syntax error (the shapes that matter: stray parentheses, open blocks)."""
    depth = 0
    blocks: list[str] = []
    pairs = {"if": "fi", "do": "done", "case": "esac", "{": "}"}
    at_start = True
    command_words: list[_Token] = []
    for token in tokens:
        if token.kind == "op" and token.text == "(":
            function_definition = len(command_words) == 1 and _is_function_name(command_words[0])
            if command_words and not function_definition:
                raise _SyntaxError("unexpected (")
            depth += 1
        elif token.kind == "op" and token.text == ")":
            if depth == 0 and "esac" not in blocks:
                raise _SyntaxError("unexpected )")
            depth = max(depth - 1, 0)
        elif token.kind == "word" and at_start and token.value in pairs:
            blocks.append(pairs[token.value])
        elif token.kind == "word" and at_start and token.value in ("fi", "done", "esac", "}"):
            if not blocks or blocks[-1] != token.value:
                raise _SyntaxError(f"unexpected {token.value}")
            blocks.pop()
        if token.kind == "word":
            function_name = bool(command_words) and command_words[-1].value == "function" and len(command_words) == 1
            at_start = token.value in _PREFIX_RESERVED or function_name  # `function NAME` is followed by its body
            command_words = [] if at_start else [*command_words, token]
        else:
            at_start = token.text not in _REDIRECT_OPS
            if at_start:
                command_words = []
    if depth or blocks:
        raise _SyntaxError("unterminated block")


def _is_function_name(token: _Token) -> bool:
    return token.value is not None and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.:-]*", token.value) is not None


def _commands(script: str) -> list[list[Word]]:
    tokens = _Lexer(script).tokens()
    _check_balance(tokens)
    return _split_commands(tokens)


def script_commands(script: str) -> list[list[Word]] | None:
    """Every simple command of a bash script (literal words, None for expanded ones); None on a syntax error."""
    try:
        return _commands(script)
    except (_SyntaxError, IndexError):
        return None


def _base(word: Word) -> str | None:
    return os.path.basename(word) if word is not None else None


def _unwrap(words: list[Word]) -> list[Word]:
    while words:
        name = _base(words[0])
        if name == "sudo":
            words = words[1:]
        elif name == "env":
            words = words[1:]
            while words and words[0] is not None and (_ASSIGNMENT.match(words[0]) or words[0].startswith("-")):
                words = words[1:]
        else:
            break
    return words


def _is_force_rm(words: list[Word]) -> bool:
    words = _unwrap(words)
    if not words:
        return False
    name = _base(words[0])
    if name == "rm":
        for arg in words[1:]:
            if arg is None:
                continue
            if arg == "--":
                return False
            if arg == "--force" or (arg.startswith("-") and not arg.startswith("--") and "f" in arg[1:]):
                return True
        return False
    if name in _SHELLS and len(words) == 3 and words[1] in ("-c", "-lc") and words[2] is not None:
        return _script_has_force_rm(words[2])
    return False


def _script_has_force_rm(script: str) -> bool:
    commands = script_commands(script)
    return commands is not None and any(_is_force_rm(command) for command in commands)


def is_rm_force(argv: list[str]) -> bool:
    """True when Codex refuses ``argv`` (the derived ``[shell, -lc|-c, script]``) as an ``rm -f`` style command."""
    return _is_force_rm(list(argv))
