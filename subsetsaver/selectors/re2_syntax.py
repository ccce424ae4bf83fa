r"""Python ``re`` patterns rewritten in RE2's syntax, with the same meaning for ``re.search``.

RE2 matches in time linear in the text, but it reads a dialect of its own: ``\w`` is ASCII there,
``\Z`` and ``(?x)`` do not exist, ``\10`` is an octal escape, ``[[:alpha:]]`` is a POSIX class.
So a pattern is never handed to RE2 as written. Python's own parser (``re._parser``, the one
``re.compile`` uses) reads it, and the parse tree is written out again in RE2's syntax: every
character escaped, every class spelled out, flags applied where they act. What RE2 cannot do at
all (backreferences, lookaround, atomic groups, possessive quantifiers, conditionals, more than
1000 repetitions) is refused by :func:`find_unsupported`, which reads the pattern's text for the
position (the parse tree has none).

Example::

    >>> to_re2(r'^conv_\d+/(?i:KERNEL)$')
    '\\Aconv_(?:[\\p{Nd}])+\\x{2f}(?:(?i:K)(?i:E)(?i:R)(?i:N)(?i:E)(?i:L))(?:\\x{a})?\\z'
    >>> find_unsupported(r'conv(?=_1)')
    ('lookahead', '(?=', 4)

Known differences, for names that no TensorFlow graph has: ``\b`` and ``\B`` see only ASCII
letters, digits and ``_`` as word characters; a ``$`` followed by more pattern matches only at
the very end (not before a final newline); with ``(?i)`` case folding is RE2's (Python's ``(?i)i``
also matches 'İ' and 'ı').
"""

from __future__ import annotations

import array
import functools
import re
import sys

# Python offers no public parse tree of a pattern, so this module (and no other) reads re's own parser;
# tests/test_regex.py fails by name if a Python release drops what is read here.
try:
    from re import _parser as sre  # Python 3.11+: the parser re.compile uses
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse as sre

__all__ = ["MAX_REPEAT", "find_unsupported", "parse", "to_re2"]

MAX_REPEAT = 1000
"""RE2's largest repetition count, counting repetitions inside repetitions."""

MAX_SIZE = 1 << 21
"""Longest RE2 text a pattern may become (characters); longer ones are refused as too large."""

_ASCII, _IGNORECASE, _MULTILINE, _DOTALL, _VERBOSE = (int(f) for f in (
    re.ASCII, re.IGNORECASE, re.MULTILINE, re.DOTALL, re.VERBOSE))
_TYPE_FLAGS = int(re.ASCII | re.UNICODE)
_WHITESPACE = " \t\n\r\v\f"  # what verbose mode skips (re._parser.WHITESPACE)
_OCTAL = "01234567"
_ATOMIC = getattr(sre, "ATOMIC_GROUP", None)  # Python 3.11+
_POSSESSIVE = getattr(sre, "POSSESSIVE_REPEAT", None)
_UNSUPPORTED_OPS = {sre.GROUPREF: "backreference", sre.GROUPREF_EXISTS: "conditional", sre.ASSERT: "lookaround",
                    sre.ASSERT_NOT: "lookaround", _ATOMIC: "atomic", _POSSESSIVE: "possessive"}
_QUANTIFIER = re.compile(r"[*+?]|\{([0-9]*)(?:(,)([0-9]*))?\}")
_TOP = 0x10FFFF
_ASCII_CATEGORIES = {"digit": [(0x30, 0x39)], "word": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
                     "space": [(0x09, 0x0D), (0x20, 0x20)]}
# Python's Unicode \s (str.isspace), spelled out: RE2's \s is ASCII and leaves out \v.
_UNICODE_SPACE = [(0x09, 0x0D), (0x1C, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
                  (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000)]
# Python's Unicode \d is category Nd and \w is str.isalnum() or '_', that is categories L* and N*:
# the same as these RE2 properties, but for characters Python's Unicode tables do not assign yet.
_UNICODE_PROPERTIES = {"digit": r"\p{Nd}", "word": r"\p{L}\p{N}_"}
_CATEGORIES = {sre.CATEGORY_DIGIT: ("digit", False), sre.CATEGORY_NOT_DIGIT: ("digit", True),
               sre.CATEGORY_WORD: ("word", False), sre.CATEGORY_NOT_WORD: ("word", True),
               sre.CATEGORY_SPACE: ("space", False), sre.CATEGORY_NOT_SPACE: ("space", True)}
_NEVER = r"[^\x{0}-\x{10ffff}]"


def parse(pattern: str):
    """Python's parse tree of ``pattern``; raises ``re.error``, ``OverflowError`` or ``RecursionError``.

    Only the parser runs, not ``re.compile``: compiling a case-insensitive class such as
    ``[\u0100-\uffff]`` visits every character in it, so 10,000 of them take a minute.
    """
    return sre.parse(pattern)


# -- where RE2 cannot follow: read from the pattern's text, for positions ----------------------


def find_unsupported(pattern: str, verbose: bool = False):
    """(kind, construct, position) of the first construct RE2 lacks in a valid ``pattern``, or None.

    Kinds: 'backreference', 'lookahead', 'negative lookahead', 'lookbehind', 'negative lookbehind',
    'atomic', 'possessive', 'conditional', 'count' (a count over ``MAX_REPEAT``; the construct is the
    quantifier, and the product of the counts it repeats, as RE2 multiplies them, follows it:
    ``('count', '{100}', 7, 10000)``). ``verbose``: the pattern's global flags include ``(?x)``.
    """
    text, position = pattern, 0
    groups = [[verbose, 1]]  # per open group: verbose inside, largest product of counts inside
    last = None  # largest product of counts inside the item a quantifier would repeat
    while position < len(text):
        char, start = text[position], position
        if groups[-1][0] and char in _WHITESPACE:
            position += 1
            continue
        if groups[-1][0] and char == "#":
            while position < len(text) and text[position] != "\n":
                position += 2 if text[position] == "\\" else 1
            continue
        if char == "\\":
            position, backreference = _escape_end(text, position)
            if backreference:
                return "backreference", text[start:position], start
            last = 1
        elif char == "[":
            position, last = _class_end(text, position), 1
        elif char == "(":
            kind, position, inner_verbose = _group_start(text, position, groups[-1][0])
            if kind in ("backreference", "lookahead", "negative lookahead", "lookbehind", "negative lookbehind",
                        "atomic", "conditional"):
                return kind, text[start:position], start
            if kind == "group":  # else a comment or the global flags: a quantifier after it repeats what came before
                groups.append([inner_verbose, 1])
                last = None
        elif char == ")":
            last = groups.pop()[1]
            position += 1
        elif char == "|":
            position, last = position + 1, None
        elif char in "*+?{" and last is not None and (quantifier := _QUANTIFIER.match(text, position)) \
                and quantifier.group() != "{}":
            position = quantifier.end()
            if text.startswith("+", position):
                return "possessive", text[start:position + 1], start
            position += text.startswith("?", position)
            weight = _weight(quantifier)
            if weight > MAX_REPEAT or last * weight > MAX_REPEAT:
                return "count", text[start:quantifier.end()], start, max(weight, last * weight)
            groups[-1][1] = max(groups[-1][1], last * weight)
            last = None  # a quantifier after a quantifier is Python's error or its lazy '?'
        else:
            position += 1
            last = None if char in "^$" else 1
        if last is not None:
            groups[-1][1] = max(groups[-1][1], last)
    return None


def _escape_end(text, start):
    """(end of the escape at ``start``, whether it is a backreference): Python's octal-or-group rule."""
    if start + 1 >= len(text):
        return start + 1, False
    digit = text[start + 1]
    if digit not in "123456789":
        return start + 2, False
    end = start + 2
    if end < len(text) and text[end].isdigit() and text[end].isascii():
        end += 1
        if text[start + 1] in _OCTAL and text[start + 2] in _OCTAL and end < len(text) and text[end] in _OCTAL:
            return end + 1, False  # three octal digits: a character
    return end, True


def _class_end(text, start) -> int:
    """The position after the ']' that closes the class at ``start`` (a ']' first is a member)."""
    position = start + 1
    position += text.startswith("^", position)
    position += 2 if text.startswith("\\", position) else 1  # the first member, even ']'
    while position < len(text) and text[position] != "]":
        position += 2 if text[position] == "\\" else 1
    return position + 1


def _group_start(text, start, verbose):
    """(kind, end of the opening, verbose inside) for the '(' at ``start``."""
    if not text.startswith("(?", start):
        return "group", start + 1, verbose
    rest = text[start + 2:start + 4]
    for opening, kind in (("P=", "backreference"), ("<=", "lookbehind"), ("<!", "negative lookbehind"),
                          ("=", "lookahead"), ("!", "negative lookahead"), (">", "atomic"), ("(", "conditional"),
                          ("#", "comment")):
        if rest.startswith(opening):
            if kind in ("backreference", "conditional", "comment"):
                end = start + 2 + len(opening)
                while end < len(text) and text[end] != ")":
                    end += 2 if text[end] == "\\" and kind == "comment" else 1
                return kind, end + 1, verbose
            return kind, start + 2 + len(opening), verbose
    if rest.startswith("P<"):
        return "group", text.index(">", start) + 1, verbose
    if rest.startswith(":"):
        return "group", start + 3, verbose
    end = start + 2  # flags: (?aiLmsux) for the whole pattern, or (?aiLmsux-imsx:...) for a group
    while text[end] not in ":)":
        end += 1
    added, _, removed = text[start + 2:end].partition("-")
    if text[end] == ")":
        return "comment", end + 1, verbose  # global flags: read from the parse tree
    return "group", end + 1, (verbose or "x" in added) and "x" not in removed


def _weight(quantifier) -> int:
    """How RE2 counts a quantifier: the upper count, or the lower one when unbounded; 1 for *, + and ?."""
    if quantifier.group() in "*+?":
        return 1
    low, comma, high = quantifier.group(1), quantifier.group(2), quantifier.group(3)
    count = int(high) if comma and high else int(low or 0) if comma or low else 0
    return count or 1


# -- the parse tree written out in RE2's syntax ------------------------------------------------------


def to_re2(pattern: str, tree=None, empty_text=False) -> str:
    r"""``pattern`` (valid for Python, with no construct :func:`find_unsupported` reports) in RE2's syntax.

    ``empty_text``: for searching the empty string only, where Python's ``\B`` never matches (RE2's
    does). Raises ``OverflowError`` past ``MAX_SIZE`` characters, and ``LookupError`` naming an
    operation RE2 lacks should one slip past :func:`find_unsupported`.
    """
    tree = parse(pattern) if tree is None else tree
    writer = _Writer(empty_text)
    writer.sequence(tree, int(tree.state.flags), tail=True)
    return "".join(writer.parts)


class _Writer:
    def __init__(self, empty_text):
        self.parts, self.size, self.empty_text = [], 0, empty_text

    def add(self, text):
        self.size += len(text)
        if self.size > MAX_SIZE:
            raise OverflowError(f"more than {MAX_SIZE} characters in RE2's syntax")
        self.parts.append(text)

    def sequence(self, items, flags, tail):
        """A list of (op, argument); ``tail``: nothing after it can match a character."""
        items = list(items)
        for index, item in enumerate(items):
            self.item(item, flags, tail and index == len(items) - 1)

    def item(self, item, flags, tail):
        op, argument = item
        if op is sre.LITERAL:
            self.add(_literal(argument, flags))
        elif op is sre.NOT_LITERAL:
            self.add(_class([(sre.NEGATE, None), (sre.LITERAL, argument)], flags))
        elif op is sre.ANY:
            self.add("(?s:.)" if flags & _DOTALL else ".")
        elif op is sre.IN:
            self.add(_class(argument, flags))
        elif op is sre.AT:
            self.add(_NEVER if self.empty_text and argument is sre.AT_NON_BOUNDARY else _anchor(argument, flags, tail))
        elif op is sre.BRANCH:
            self.add("(?:")
            for index, alternative in enumerate(argument[1]):
                self.add("|" if index else "")
                self.sequence(alternative, flags, tail)
            self.add(")")
        elif op is sre.SUBPATTERN:
            _, added, removed, body = argument
            if added & _TYPE_FLAGS:
                flags &= ~_TYPE_FLAGS
            self.add("(?:")
            self.sequence(body, (flags | added) & ~removed, tail)
            self.add(")")
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            low, high, body = argument
            self.add("(?:")
            self.sequence(body, flags, tail and high == 1)
            self.add(")" + _quantifier(low, high) + ("?" if op is sre.MIN_REPEAT else ""))
        else:
            raise LookupError(_UNSUPPORTED_OPS.get(op, str(op)))


def _quantifier(low, high) -> str:
    if high == sre.MAXREPEAT:
        return {0: "*", 1: "+"}.get(low, f"{{{low},}}")
    if (low, high) == (0, 1):
        return "?"
    return f"{{{low}}}" if low == high else f"{{{low},{high}}}"


def _anchor(at, flags, tail) -> str:
    if at is sre.AT_BEGINNING:
        return "(?m:^)" if flags & _MULTILINE else r"\A"
    if at is sre.AT_END:
        if flags & _MULTILINE:
            return "(?m:$)"
        return r"(?:\x{a})?\z" if tail else r"\z"  # Python's '$' also matches before a final newline
    return {sre.AT_BEGINNING_STRING: r"\A", sre.AT_END_STRING: r"\z", sre.AT_BOUNDARY: r"\b",
            sre.AT_NON_BOUNDARY: r"\B"}[at]


def _char(code) -> str:
    char = chr(code)
    return char if char.isascii() and (char.isalnum() or char == "_") else f"\\x{{{code:x}}}"


def _literal(code, flags) -> str:
    char = chr(code)
    if not flags & _IGNORECASE or char.lower() == char.upper():
        return _char(code)
    if flags & _ASCII:  # ASCII-only case folding: RE2's (?i) would also fold 'k' with the Kelvin sign
        return f"[{_char(code)}{_char(ord(char.swapcase()))}]" if char.isascii() else _char(code)
    return f"(?i:{_char(code)})"


def _class(items, flags) -> str:
    """A class of Python's parse tree, as one RE2 class (or an alternation of classes)."""
    negated = items[0][0] is sre.NEGATE
    ranges, properties, negated_properties = [], [], []
    for op, argument in items[negated:]:
        if op is sre.LITERAL:
            ranges.append((argument, argument))
        elif op is sre.RANGE:
            ranges.append(tuple(argument))
        else:
            name, negative = _CATEGORIES[argument]
            if flags & _ASCII or name == "space":
                table = (_ASCII_CATEGORIES if flags & _ASCII else {"space": _UNICODE_SPACE})[name]
                ranges.extend(_complement(table) if negative else table)
            else:
                (negated_properties if negative else properties).append(name)
    fold = bool(flags & _IGNORECASE) and bool(ranges)
    if fold and flags & _ASCII:
        ranges, fold = _ascii_folded(ranges), False
    positive = _ranges_text(ranges) + "".join(_UNICODE_PROPERTIES[name] for name in properties)
    if not negated_properties:
        text = f"[{'^' if negated else ''}{positive}]"
    elif not negated:  # a union with the complement of a property: an alternation
        text = "(?:" + "|".join(([f"[{positive}]"] if positive else [])
                                + [f"[^{_UNICODE_PROPERTIES[name]}]" for name in negated_properties]) + ")"
    else:  # the complement of such a union is an intersection: spelled out from Python's own tables
        members = _complement(_union(ranges + [r for name in properties for r in _python_table(name)]))
        for name in negated_properties:
            members = _intersection(members, _python_table(name))
        text = f"[{_ranges_text(members)}]" if members else _NEVER
    return f"(?i:{text})" if fold else text


def _ranges_text(ranges) -> str:
    return "".join(_char(low) if low == high else f"{_char(low)}-{_char(high)}" for low, high in _union(ranges))


def _union(ranges) -> list:
    merged = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def _complement(ranges) -> list:
    result, start = [], 0
    for low, high in _union(ranges):
        if low > start:
            result.append((start, low - 1))
        start = high + 1
    return result + ([(start, _TOP)] if start <= _TOP else [])


def _intersection(first, second) -> list:
    return _complement(_union(_complement(first) + _complement(second)))


def _ascii_folded(ranges) -> list:
    """``ranges`` with the other case of every ASCII letter in them, as Python's ``(?ai)`` folds."""
    extra = []
    for low, high in ranges:
        for start, end, shift in ((0x41, 0x5A, 0x20), (0x61, 0x7A, -0x20)):
            if low <= end and high >= start:
                extra.append((max(low, start) + shift, min(high, end) + shift))
    return _union(ranges + extra)


def _python_table(name) -> tuple:
    r"""The ranges Python's Unicode ``\d`` or ``\w`` matches, read from ``re`` itself."""
    return _python_tables()[name]


@functools.lru_cache(maxsize=1)
def _python_tables() -> dict:
    """Both tables, found once (about 0.15 s) by running ``re`` over every character."""
    codes = array.array("I", range(_TOP + 1))
    if codes.itemsize == 4:
        every = codes.tobytes().decode(f"utf-32-{sys.byteorder[0]}e", "surrogatepass")
    else:  # pragma: no cover - no common platform
        every = "".join(map(chr, range(_TOP + 1)))
    return {name: tuple((match.start(), match.end() - 1) for match in re.finditer(regex, every))
            for name, regex in (("digit", r"\d+"), ("word", r"\w+"))}
