r"""Parse selector text, the same expressions the Python operators build.

Example::

    parse("trainable() | scope('conv_1/bn') - scope('opt')")
    # trainable() | scope('conv_1/bn') - scope('opt')
    parse(r"~(slots() | regex('\d+$'))") == ~(slots() | regex(r'\d+$'))
    # True

Precedence is Python's, lowest first: ``|``, ``^``, ``&``, binary ``-`` (all
left-associative), unary ``~``. Atoms are built-in calls such as
``scope('name')`` or parenthesized expressions. Arguments are quoted strings;
inside them ``\'``, ``\"`` and ``\\`` are escapes and any other backslash is
kept as written, so ``parse(repr(selector)) == selector`` for every selector.
Nothing is ever evaluated: the text is tokenized and parsed by hand.
"""

from __future__ import annotations

import difflib
import operator
import re

from ..errors import InvalidRegexError, SelectorSyntaxError, UnsupportedRegexError
from . import expressions as selectors

__all__ = ["parse", "MAX_DEPTH", "MAX_LENGTH"]

MAX_LENGTH = 100_000
"""Longest accepted text, in characters."""

MAX_DEPTH = 100
"""Deepest accepted nesting: of parentheses and '~' in the text, and of the built tree."""

_EXAMPLE = "a selector such as trainable() or scope('name')"
_BINARY = {"|": 1, "^": 2, "&": 3, "-": 4}  # binding strength, as in Python
_BUILD = {"|": operator.or_, "^": operator.xor, "&": operator.and_, "-": operator.sub}
_FLAT = {"|": selectors.Union, "^": selectors.SymmetricDifference, "&": selectors.Intersection}
_TOKEN = re.compile(
    r"""(?P<space>\s+)
      | (?P<word>\w+)
      | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
      | (?P<op>[|^&\-~(),])""",
    re.VERBOSE | re.DOTALL,
)
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_INSTEAD = {"or": "|", "and": "&", "not": "~", "+": "|", "!": "~"}  # Python habits, and their DSL spelling


class _Token:
    __slots__ = ("kind", "text", "column", "value")

    def __init__(self, kind, text, column, value=None):
        self.kind, self.text, self.column, self.value = kind, text, column, value

    def describe(self) -> str:
        if self.kind == "end":
            return "end of text"
        if self.kind == "string":
            return f"string {_clipped(self.value, 30)!r}"
        return repr(_clipped(self.text, 30))


def parse(text: str) -> selectors.Selector:
    """The selector ``text`` describes; raises ``SelectorSyntaxError`` pointing at the problem."""
    if not isinstance(text, str):
        raise TypeError(f"parse() takes a str, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:  # the text is left out of the message on purpose
        raise SelectorSyntaxError(
            f"selector text is too long: {len(text)} characters (the limit is {MAX_LENGTH})", "", MAX_LENGTH
        )
    if not text.strip():
        raise SelectorSyntaxError(f"empty selector text: expected {_EXAMPLE}", text, len(text))
    return _Parser(text).parse()


def as_selector(value, what="sel") -> selectors.Selector:
    """``value`` as a selector: a selector as it is, a text parsed, None as ``everything()``.

    >>> as_selector("trainable()") == selectors.trainable()
    True
    """
    if value is None:
        return selectors.everything()
    if isinstance(value, str):
        return parse(value)
    if not isinstance(value, selectors.Selector):
        raise TypeError(f"{what} is a selector or its text, got {type(value).__name__}")
    return value


class _Parser:
    def __init__(self, text):
        self.text = text
        self.position = 0
        self.nesting = 0
        self.token = self._scan()

    # -- tokens ---------------------------------------------------------------------
    def _scan(self) -> _Token:
        """The next token; scanning is lazy so errors come in reading order."""
        text = self.text
        while True:
            start = self.position
            if start >= len(text):
                return _Token("end", "", len(text))
            match = _TOKEN.match(text, start)
            if match is None:
                if text[start] in "'\"":
                    raise self._error(f"unterminated string: no closing {text[start]} before the end of text", start)
                raise self._error(f"unexpected character {text[start]!r}{_hint(text[start])}", start)
            self.position = match.end()
            if match.lastgroup != "space":
                break
        token = _Token(match.lastgroup, match.group(), start)
        if token.kind == "string":
            token.value = _ESCAPE.sub(_unescape, token.text[1:-1])
        return token

    def _advance(self) -> _Token:
        token, self.token = self.token, self._scan()
        return token

    def _is(self, op) -> bool:
        return self.token.kind == "op" and self.token.text == op

    def _error(self, message, column) -> SelectorSyntaxError:
        return SelectorSyntaxError(message, self.text, column)

    def _expected(self, what) -> SelectorSyntaxError:
        if self.token.kind == "end":
            return self._error(f"unexpected end of text: expected {what}", self.token.column)
        return self._error(f"expected {what}, got {self.token.describe()}", self.token.column)

    def _check_depth(self, depth, column):
        if depth > MAX_DEPTH:
            raise self._error(f"selector is nested too deeply (the limit is {MAX_DEPTH} levels)", column)

    # -- grammar: every rule returns (selector, depth of its tree) --------------------
    def parse(self):
        selector, _ = self._expression(1)
        if self.token.kind != "end":
            token = self.token
            raise self._error(
                f"unexpected {token.describe()} after a complete selector{_hint(token.text)}", token.column
            )
        return selector

    def _expression(self, weakest):
        """Precedence climbing over the left-associative binary operators."""
        left, depth = self._unary()
        while self.token.kind == "op" and _BINARY.get(self.token.text, 0) >= weakest:
            op = self._advance()
            right, right_depth = self._expression(_BINARY[op.text] + 1)
            flat = _FLAT.get(op.text)  # '|', '^', '&' flatten: a same-kind operand adds no level
            depth = max(depth + (type(left) is not flat), right_depth + (type(right) is not flat))
            self._check_depth(depth, op.column)
            left = _BUILD[op.text](left, right)
        return left, depth

    def _unary(self):
        if not self._is("~"):
            return self._atom()
        tilde = self._advance()
        self.nesting += 1
        self._check_depth(self.nesting, tilde.column)
        term, depth = self._unary()
        self.nesting -= 1
        self._check_depth(depth + 1, tilde.column)
        return ~term, depth + 1

    def _atom(self):
        if self._is("("):
            opening = self._advance()
            self.nesting += 1
            self._check_depth(self.nesting, opening.column)
            result = self._expression(1)
            if not self._is(")"):
                raise self._expected(f"')' to close the '(' at column {opening.column}")
            self._advance()
            self.nesting -= 1
            return result
        if self.token.kind == "word" and self.token.text.isidentifier():
            return self._call(), 1
        raise self._expected(_EXAMPLE)

    def _call(self):
        word = self.token  # checked before scanning on, so errors come in reading order
        if word.text not in selectors.BUILTINS:
            known = sorted(selectors.BUILTINS)
            close = difflib.get_close_matches(word.text, known, n=1)
            hint = _hint(word.text) or (
                f" — did you mean {close[0]!r}?" if close else f"; known selectors: {', '.join(known)}"
            )
            raise self._error(f"unknown selector {_clipped(word.text, 30)!r}{hint}", word.column)
        self._advance()
        if not self._is("("):
            raise self._expected(f"'(' after {word.text!r}")
        self._advance()
        arguments = []
        while not (self._is(")") and not arguments):
            if self.token.kind != "string":
                takes_none = selectors.BUILTINS[word.text][1] == 0 and not arguments
                raise self._expected("')'" if takes_none else "a quoted string argument")
            arguments.append(self._advance())
            if self._is(")"):
                break
            if not self._is(","):
                raise self._expected("',' or ')' after an argument")
            self._advance()
        selector = self._build(word, arguments, self.token)
        self._advance()
        return selector

    def _build(self, word, arguments, closing):
        constructor, wanted = selectors.BUILTINS[word.text]
        got = len(arguments)
        if wanted is None and got == 0:
            raise self._error(f"{word.text}() takes at least 1 argument, got 0", closing.column)
        if wanted is not None and got != wanted:
            takes = "no arguments" if wanted == 0 else f"{wanted} argument{'s' if wanted != 1 else ''}"
            column = arguments[wanted].column if got > wanted else closing.column
            raise self._error(f"{word.text}() takes {takes}, got {got}", column)
        try:
            return constructor(*(argument.value for argument in arguments))
        except InvalidRegexError as error:  # only regex() and name() read their argument
            raise self._error(f"invalid regular expression: {_clipped(str(error))}", arguments[0].column) from None
        except UnsupportedRegexError as error:
            raise self._error(f"unsupported regular expression: {error}", arguments[0].column) from None
        except SelectorSyntaxError as error:  # a glob too large for RE2
            raise self._error(error.reason, arguments[0].column) from None


def _clipped(text, limit=200) -> str:
    """``text`` cut to ``limit`` characters: a message never echoes a whole 100 KB argument."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _hint(text) -> str:
    return f"; use '{_INSTEAD[text]}' instead of '{text}'" if text in _INSTEAD else ""


def _unescape(match) -> str:
    r"""Inverse of ``selectors._quote``: ``\'``, ``\"`` and ``\\`` escape; other backslashes stay."""
    char = match.group(1)
    return char if char in "'\"\\" else match.group(0)
