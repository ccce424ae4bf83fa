r"""Refusing ``regex()`` patterns that can make Python's ``re`` backtrack exponentially.

Python's re is a backtracking matcher: `(\w+)+$` tries every way of cutting a run of word
characters into pieces before it gives up, 2**47 ways for a 48-character name. The pattern is
read by a small scanner of our own (positions for the message; sre's parse tree has none and
rewrites alternations), then every choice inside a repetition of many rounds is checked: stop
or repeat once more, take this alternative or that one. A choice that the next character decides
can be undone in one step; one that it does not decide multiplies the ways to match.

Example::

    >>> refuse_backtracking(r'^(\w+/)*kernel$')   # None: each '/' ends a run of \w
    >>> refuse_backtracking(r'(\w+)+$')          # BacktrackingRegexError, naming the loop and a fix
"""

from __future__ import annotations

import functools
import re

from ..errors import BacktrackingRegexError


def refuse_backtracking(pattern: str, flags: int = 0) -> None:
    r"""Raise BacktrackingRegexError if ``pattern`` (valid for ``re``) can backtrack exponentially.

    The rule: inside a repetition of many rounds (``*``, ``+``, ``{n,}``, or 5 rounds and more
    counting the repetitions around it: ``{1,5}``, ``{1,3}`` inside ``{1,3}``), every choice must be
    decided by the next character. A repetition inside it may stop or go on, so what it
    repeats must not start with a character that may come next (``(\w+/)*`` is fine: '/' ends
    each run of ``\w``; ``(\w+)+``, ``(\w+_)*`` and ``(.*)*x`` are not); the alternatives of an
    alternation inside it must start with different characters (``(kernel|bias)+`` is fine,
    ``(a|aa)*`` is not). Atomic groups ``(?>...)``, possessive repetitions (``*+``, ``++``, ``?+``,
    ``{m,n}+``) and lookarounds commit to their first match: safe inside a repetition, and
    checked on their own.

    Not caught: many repetitions side by side, outside any loop (``\w*\w*\w*\w*x``: polynomial,
    steep for long names), and character classes compared on a sample of characters (ASCII,
    the characters a class names, a few others), so exotic Unicode overlaps can slip through.
    Refused although safe: choices that a later character decides (``(ab|ac)*``: write
    ``(a[bc])*``).

    >>> refuse_backtracking(r'^(\w+/)*kernel$')      # None: each '/' ends a run of \w
    >>> refuse_backtracking(r'(\w+)+$')
    Traceback (most recent call last):
    BacktrackingRegexError: pattern '(\w+)+$' can backtrack exponentially: inside the repetition ...
    """
    problem = _backtracking_problem(pattern, flags)
    if problem is not None:
        raise BacktrackingRegexError(*problem)


@functools.lru_cache(maxsize=256)
def _backtracking_problem(pattern, flags):
    """(message, pattern, position) of the first undecided choice, or None; cached: patterns repeat."""
    try:
        _ChoiceChecker(pattern).walk_alternatives(_RegexScanner(pattern, flags).alternatives(), ())
    except BacktrackingRegexError as error:
        return error.msg, error.pattern, error.pos
    return None


class _CharClass:
    """One single-character item of a pattern (``a``, ``\\w``, ``[^/]``, ``.``), as a membership test."""

    __slots__ = ("matches", "candidates")

    def __init__(self, text, flags):
        self.matches = re.compile(text, flags & ~_VERBOSE).fullmatch
        self.candidates = _mentioned_characters(text, flags)


class _AnyCharacter:
    """What a back-reference can start with: anything."""

    candidates = ()

    @staticmethod
    def matches(char):
        return True


_ANY_CHARACTER = _AnyCharacter()
_NAME_CHARACTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_/.-"
# Characters tried when looking for one that two classes share, besides those the classes name;
# those of variable names first, so that a message shows a familiar one.
_PROBES = tuple(dict.fromkeys(_NAME_CHARACTERS + "".join(map(chr, range(128))) + (
    "\x85\xa0\xe9\xdf\u0130\u0131\u017f\u212a\u03a3\u03c2\u0663\u4e2d\u2028\u3000\ufeff\U0001d7d8\U0001f600")))


@functools.lru_cache(maxsize=1024)
def _char_class(text, flags):
    return _CharClass(text, flags)


def _mentioned_characters(text, flags) -> tuple:
    """Characters a class names (literals, range ends and a few inside), with their other cases."""
    from re import _parser  # private, but the only reader of escapes such as \u4e00 and \N{...}

    found = []
    for op, value in _parser.parse(text, flags & ~_VERBOSE):
        items = value if op is _parser.IN else [(op, value)]
        for item_op, item_value in items:
            if item_op in (_parser.LITERAL, _parser.NOT_LITERAL):
                found.append(item_value)
            elif item_op is _parser.RANGE:
                low, high = item_value
                found.extend({low, min(low + 1, high), (low + high) // 2, max(high - 1, low), high})
    chars = [chr(code) for code in found]
    return tuple(dict.fromkeys(variant for char in chars for variant in (char, char.lower(), char.upper())
                               if len(variant) == 1))


def _common_character(unions, budget):
    """A character that two of ``unions`` (each a list of classes) match, with their indexes; or None.

    ``budget`` is charged the membership tests this may take, before it takes them.
    """
    unions = [list(dict.fromkeys(union)) for union in unions]
    candidates = dict.fromkeys(char for union in unions for item in union for char in item.candidates)
    candidates.update(dict.fromkeys(_PROBES))
    budget.charge(len(candidates) * sum(map(len, unions)))
    for char in candidates:
        holders = [position for position, union in enumerate(unions) if any(item.matches(char) for item in union)]
        if len(holders) >= 2:
            return char, holders
    return None


def _shown(pattern) -> str:
    return f"'{pattern}'" if len(pattern) <= 200 else f"'{pattern[:200]}...' ({len(pattern)} characters)"


# -- the pattern's structure -----------------------------------------------------------


class _Node:
    """One piece of a pattern, ``pattern[start:end]``. ``kind``: 'char' (``char_class``: its text and
    flags), 'empty' (an anchor), 'backref', 'group', 'atomic', 'conditional' and 'look' (a lookaround;
    ``children``: the alternatives, each a list of nodes; ``body_start``: after the opening), or
    'repeat' (``children``: [the item]; ``low``, ``high`` (None: unbounded), ``mode``: 'greedy',
    'lazy' or 'possessive'; ``quantifier_start``)."""

    __slots__ = ("kind", "start", "end", "char_class", "children", "low", "high", "mode", "quantifier_start",
                 "body_start")

    def __init__(self, kind, start, end, **fields):
        self.kind, self.start, self.end = kind, start, end
        self.char_class = self.children = self.low = self.high = self.mode = None
        self.quantifier_start = self.body_start = start
        for key, value in fields.items():
            setattr(self, key, value)


_QUANTIFIER = re.compile(r"[*+?]|\{(\d*)(?:(,)(\d*))?\}")
_ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|N\{[^}]*\}"
                     r"|0[0-7]{0,2}|[1-7][0-7]{2}|(?P<group>[1-9][0-9]?)|.)", re.DOTALL)
_CHECK_BUDGET = 2_000_000  # character tests, about a second
_MANY_ROUNDS = 5  # a repetition of this many rounds (all repetitions around it multiplied) or more is a loop
_VERBOSE = int(re.VERBOSE)  # plain ints: RegexFlag arithmetic is slow
_FLAG_LETTERS = {letter: int(flag) for letter, flag in {
    "a": re.ASCII, "i": re.IGNORECASE, "L": re.LOCALE, "m": re.MULTILINE, "s": re.DOTALL, "u": re.UNICODE,
    "x": re.VERBOSE}.items()}
_EXCLUDES = {"a": int(re.UNICODE), "u": int(re.ASCII)}
_VERBOSE_SPACE = " \t\n\r\v\f"


class _RegexScanner:
    """Reads a pattern that ``re`` accepts into ``_Node`` lists with positions."""

    def __init__(self, pattern, flags):
        self.text, self.position = pattern, 0
        self.flags = int(flags | re.compile(pattern, flags).flags)  # with the pattern's global (?x) and friends

    def alternatives(self, flags=None) -> list:
        """Sequences separated by '|', up to a ')' (not consumed) or the end."""
        flags = self.flags if flags is None else flags
        text, sequences, nodes = self.text, [], []
        while self.position < len(text):
            char, start = text[self.position], self.position
            if flags & _VERBOSE and char in _VERBOSE_SPACE:
                self.position += 1
            elif flags & _VERBOSE and char == "#":
                newline = text.find("\n", start)
                self.position = len(text) if newline < 0 else newline + 1
            elif char == "|":
                sequences.append(nodes)
                nodes = []
                self.position += 1
            elif char == ")":
                break
            elif char in "*+?{" and (quantifier := _QUANTIFIER.match(text, start)) and quantifier.group() != "{}":
                nodes[-1] = self._repeat(nodes[-1], quantifier)
            else:
                node = self._atom(flags)
                if node is not None:
                    nodes.append(node)
        sequences.append(nodes)
        return sequences

    def _repeat(self, item, quantifier):
        if quantifier.group() in "*+?":
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[quantifier.group()]
        else:  # {m}, {m,}, {,n}, {m,n}
            low, comma, upper = int(quantifier.group(1) or 0), quantifier.group(2), quantifier.group(3)
            high = low if not comma else int(upper) if upper else None
        self.position = quantifier.end()
        mode = "greedy"
        if self.position < len(self.text) and self.text[self.position] in "?+":
            mode = "lazy" if self.text[self.position] == "?" else "possessive"
            self.position += 1
        return _Node("repeat", item.start, self.position, children=[item], low=low, high=high, mode=mode,
                     quantifier_start=quantifier.start())

    def _atom(self, flags):
        text, start = self.text, self.position
        char = text[start]
        if char == "(":
            return self._group(flags)
        if char == "[":
            self.position = _class_end(text, start)
            return _Node("char", start, self.position, char_class=(text[start:self.position], flags))
        if char == "\\":
            escape = _ESCAPE.match(text, start)
            self.position = escape.end()
            if escape.group("group"):
                return _Node("backref", start, self.position)
            if escape.group() in ("\\A", "\\Z", "\\b", "\\B"):
                return _Node("empty", start, self.position)
            return _Node("char", start, self.position, char_class=(escape.group(), flags))
        self.position += 1
        if char in "^$":
            return _Node("empty", start, self.position)
        return _Node("char", start, self.position, char_class=("." if char == "." else re.escape(char), flags))

    def _group(self, flags):
        text, start = self.text, self.position
        kind, inner_flags = "group", flags
        if not text.startswith("(?", start):
            self.position = start + 1
        elif text.startswith(("(?P<", "(?:"), start):
            self.position = text.index(">", start) + 1 if text[start + 2] == "P" else start + 3
        elif text.startswith(("(?#", "(?P="), start):
            self.position = text.index(")", start) + 1
            return None if text[start + 2] == "#" else _Node("backref", start, self.position)
        elif text.startswith(("(?=", "(?!", "(?<=", "(?<!"), start):
            kind, self.position = "look", start + (3 if text[start + 2] in "=!" else 4)
        elif text.startswith("(?>", start):
            kind, self.position = "atomic", start + 3
        elif text.startswith("(?(", start):
            kind, self.position = "conditional", text.index(")", start) + 1
        else:  # flags: (?aiLmsux-imsx:...) scoped, or (?aiLmsux) for the whole pattern
            end = start + 2
            while text[end] not in ":)":
                end += 1
            added, _, removed = text[start + 2:end].partition("-")
            for letter in added:
                inner_flags = inner_flags & ~_EXCLUDES.get(letter, 0) | _FLAG_LETTERS[letter]
            for letter in removed:
                inner_flags &= ~_FLAG_LETTERS[letter]
            self.position = end + 1
            if text[end] == ")":
                return None  # global flags: already in self.flags
        body_start = self.position
        children = self.alternatives(inner_flags)
        self.position += 1  # the ')'
        return _Node(kind, start, self.position, children=children, body_start=body_start)


def _class_end(text, start) -> int:
    """The position after the ']' that closes the class opening at ``start``."""
    position = start + 1
    if text.startswith("^", position):
        position += 1
    if text.startswith("]", position):  # a ']' first is a literal
        position += 1
    while text[position] != "]":
        position += 2 if text[position] == "\\" else 1
    return position + 1


# -- the choices ------------------------------------------------------------------------


class _ChoiceChecker:
    """Walks the nodes; each choice inside a repetition of many rounds must be decided by the next character."""

    def __init__(self, pattern):
        self.pattern = pattern
        self._first = {}
        self.tests_left = _CHECK_BUDGET

    def charge(self, tests):
        """Character tests are counted, so that a pattern built to be slow to check is refused, not checked."""
        self.tests_left -= tests
        if self.tests_left < 0:
            raise BacktrackingRegexError(
                f"pattern {_shown(self.pattern)} is too complex to check for exponential backtracking (more than "
                f"{_CHECK_BUDGET:,} character tests); split it into several regex() terms joined with '|'",
                self.pattern, 0)

    def first(self, node):
        """(classes a match of ``node`` can start with, whether it can match the empty string)."""
        if id(node) not in self._first:
            if node.kind == "char":
                found = ([_char_class(*node.char_class)], False)
            elif node.kind in ("empty", "look"):
                found = ([], True)
            elif node.kind == "backref":
                found = ([_ANY_CHARACTER], True)
            elif node.kind == "repeat":
                classes, empty = self.first(node.children[0])
                found = (classes, empty or node.low == 0)
            else:  # group, atomic, conditional
                starts = [self.first_of(sequence, 0) for sequence in node.children]
                found = ([c for classes, _ in starts for c in classes],
                         any(empty for _, empty in starts) or (node.kind == "conditional" and len(starts) == 1))
            self._first[id(node)] = found
        return self._first[id(node)]

    def first_of(self, nodes, start):
        classes = []
        for node in nodes[start:]:
            found, empty = self.first(node)
            classes += found
            if not empty:
                return classes, False
        return classes, True

    def follow(self, frames, outermost, next_round=True):
        """Classes that can come next after the node ``frames`` ends at, up to ``outermost``'s next round
        (included unless ``next_round`` is false)."""
        classes = []
        for frame in reversed(frames):
            if frame[0] == "sequence":
                found, empty = self.first_of(frame[1], frame[2] + 1)
                classes += found
                if not empty:
                    return classes
            elif frame[0] == "repeat":  # another round, or on past it
                if frame[1] is outermost:
                    return classes + (self.first(frame[1].children[0])[0] if next_round else [])
                classes += self.first(frame[1].children[0])[0]
            else:  # an atomic group, a possessive repetition or a lookaround: what follows never undoes it
                return classes
        return classes

    # frames: ('sequence', nodes, index) | ('repeat', node) | ('barrier',), innermost last.
    # loops: (innermost, outermost) repetition of many rounds around the node since the last barrier,
    # and the product of the rounds of the repetitions around it (None: unbounded).
    def walk_alternatives(self, alternatives, frames, loops=(None, None, 1)):
        for nodes in alternatives:
            for index, node in enumerate(nodes):
                self.walk(node, frames + (("sequence", nodes, index),), loops)

    def walk(self, node, frames, loops):
        loop, outermost, rounds = loops
        if node.kind == "repeat":
            if loop is not None and node.mode != "possessive" and node.high != node.low:
                self.check_repeat(node, frames, loop, outermost)
            if node.mode == "possessive":
                self.walk_alternatives([node.children], frames + (("barrier",),))
                return
            rounds = None if rounds is None or node.high is None else rounds * node.high
            if (rounds is None or rounds >= _MANY_ROUNDS) and node.high != 1:
                loop, outermost = node, outermost or node
            self.walk_alternatives([node.children], frames + (("repeat", node),), (loop, outermost, rounds))
        elif node.kind in ("atomic", "look"):
            self.walk_alternatives(node.children, frames + (("barrier",),))
        elif node.kind in ("group", "conditional"):
            if loop is not None and node.kind == "group" and len(node.children) > 1:
                self.check_alternation(node, frames, loop, outermost)
            self.walk_alternatives(node.children, frames, loops)

    def check_repeat(self, node, frames, loop, outermost):
        repeated = self.first(node.children[0])[0]
        clash = _common_character([repeated, self.follow(frames, outermost)], self)
        if clash is None:
            return
        inner = self.pattern[node.start:node.end]
        within_round = _common_character([repeated, self.follow(frames, outermost, next_round=False)], self)
        if within_round:  # taking all it can would leave nothing for what follows in the same round
            char, fix = within_round[0], f"let '{inner}' not match {within_round[0]!r}"
        else:  # only the outer loop's next round competes: taking all it can keeps the meaning
            fixes = ([f"'{inner}+'"] if node.mode == "greedy" else []) + [f"'(?>{inner})'"]
            char, fix = clash[0], (f"make the inner repetition possessive or atomic ({' or '.join(fixes)}; Python 3.11 "
                                   "supports *+, ++, ?+ and (?>...))")
        self.refuse(loop, node, f"the repetition '{inner}' at position {node.start} and what follows it can both "
                    f"match {char!r}", fix)

    def check_alternation(self, node, frames, loop, outermost):
        starts = []
        for sequence in node.children:
            classes, empty = self.first_of(sequence, 0)
            starts.append(classes + (self.follow(frames, outermost) if empty else []))
        clash = _common_character(starts, self)
        if clash is None:
            return
        group = self.pattern[node.start:node.end]
        first, second = clash[1][:2]
        self.refuse(
            loop, node, f"alternatives {first + 1} and {second + 1} of '{group}' at position {node.start} can both "
            f"start with {clash[0]!r}", "let each alternative start with a different character, or make the "
            f"alternation atomic ('(?>{self.pattern[node.body_start:node.end - 1]})'; Python 3.11 supports (?>...))")

    def refuse(self, loop, node, problem, fix):
        text = self.pattern
        unrepeated = text[:loop.quantifier_start] + text[loop.end:]
        raise BacktrackingRegexError(
            f"pattern {_shown(text)} can backtrack exponentially: inside the repetition "
            f"'{text[loop.start:loop.end]}' at position {loop.start}, {problem}; {fix}, or remove the outer "
            f"quantifier ('{unrepeated}')", text, node.start)
