r"""``regex()`` and ``name()`` patterns, matched by RE2 in time linear in the name's length.

Python's ``re`` backtracks: ``(\w+)+$`` tries every way to cut a run of word characters before it
gives up, 2**47 ways for a 48-character name. RE2 never backtracks, so no pattern from a config file
can hang the tool. A pattern keeps Python's meaning (:mod:`re2_syntax` rewrites it in RE2's
dialect); what RE2 cannot do is refused with ``UnsupportedRegexError``, naming the construct, where
it is and what to write instead.

Globs follow the '/'-segments of a name: ``*`` and ``?`` stay within one, ``**`` crosses them
(:func:`glob_to_regex`). One engine serves ``name()`` and the layout maps, whose globs also
capture what each wildcard matched (:func:`glob_captures`, :func:`fill_glob`).

Example::

    regex_matcher(r'^conv_\d+/')('conv_12/w')
    # True
    glob_matcher('**/moving_*')('conv_1/bn/moving_mean')
    # True
    regex_matcher(r'a(?!b)')
    # Traceback (most recent call last):
    # UnsupportedRegexError: regex() runs on RE2, which has no lookahead: '(?!' at position 1; ...
"""

from __future__ import annotations

import functools
import re

import re2

from ..errors import InvalidRegexError, SelectorSyntaxError, UnsupportedRegexError, clipped
from . import re2_syntax

__all__ = ["compile_regex", "fill_glob", "glob_captures", "glob_matcher", "glob_selector", "glob_to_regex",
           "glob_wildcard_count", "regex_matcher", "regex_selector", "require_google_re2"]

_PLAIN = "write '{}' instead: RE2 never backtracks, so it cannot hang without one"
_FIXES = {  # kind -> (what RE2 has none of, how to do without)
    "backreference": ("backreferences", r"spell out what the group can match instead, e.g. '(a|b)\1' as 'aa|bb'"),
    "lookahead": ("lookahead", "require each part with '&' instead, e.g. regex('^(?=.*a).*b') as "
                  "regex('a') & regex('b')"),
    "negative lookahead": ("lookahead", "match a plain pattern and subtract instead, e.g. regex('a') - regex('ab')"),
    "lookbehind": ("lookbehind", "match what it looks at as part of the pattern instead, e.g. regex('(?<=conv_)1') "
                   "as regex('conv_1')"),
    "negative lookbehind": ("lookbehind", "match a plain pattern and subtract instead, e.g. regex('b') - "
                            "regex('ab')"),
    "atomic": ("atomic groups", _PLAIN.format("(?:")),
    "conditional": ("conditional groups", "write the cases as alternatives instead, e.g. '(a)?(?(1)b|c)' as '(ab|c)'"),
}
_TOO_LARGE = "{0}() runs on RE2, which cannot compile a {1} this large (its program would pass 8 MiB); {2}"
_TOO_LARGE_REGEX = _TOO_LARGE.format("regex", "pattern", "use smaller counts, or split it into several regex() terms "
                                     "joined with '|'")
_TOO_LARGE_GLOB = _TOO_LARGE.format("name", "glob", "split it into several name() terms joined with '|'")


def _options(never_capture=True):
    options = re2.Options()
    options.log_errors = False  # RE2 logs every pattern it rejects to stderr otherwise
    options.never_capture = never_capture
    return options


_OPTIONS = _options()
_CAPTURING_OPTIONS = _options(never_capture=False)  # for glob_captures only: groups cost time


@functools.lru_cache(maxsize=1)
def require_google_re2():
    """Check that ``import re2`` is google-re2, which refuses what it cannot run; some other
    bindings of the same name quietly run such patterns on Python's backtracking ``re``."""
    try:
        compiled = re2.compile(r"(a)\1", _OPTIONS)
    except re2.error:
        return
    raise ImportError(f"subsetsaver needs the google-re2 package (pip install google-re2): the 're2' module at "
                      f"{getattr(re2, '__file__', '?')} accepted a backreference ({type(compiled).__name__}), so it "
                      "would match some patterns with Python's backtracking re")


def compile_regex(pattern: str):
    """``pattern`` (Python's syntax) compiled by RE2, to ``search`` or ``fullmatch`` UTF-8 names.

    Raises ``InvalidRegexError`` for what Python's ``re`` rejects, ``UnsupportedRegexError`` for
    what RE2 cannot run; both are ``SelectorSyntaxError`` and ``re.error``.
    """
    return _compile(pattern)[0]


@functools.lru_cache(maxsize=512)
def _compile(pattern):
    """(RE2 pattern, whether ``re.search(pattern, '')`` matches)."""
    try:
        tree = re2_syntax.parse(pattern)
        unsupported = re2_syntax.find_unsupported(pattern, bool(tree.state.flags & re.VERBOSE))
    except re.error as error:
        raise InvalidRegexError(str(error), pattern, error.pos) from None
    except RecursionError:
        raise InvalidRegexError("maximum recursion depth exceeded", pattern) from None
    except OverflowError as error:  # a count past 4294967295
        raise InvalidRegexError(str(error), pattern) from None
    if unsupported is not None:
        raise _unsupported(pattern, *unsupported)
    try:
        text = re2_syntax.to_re2(pattern, tree)
        empty = text if "\\B" not in pattern else re2_syntax.to_re2(pattern, tree, empty_text=True)
    except RecursionError:
        raise InvalidRegexError("maximum recursion depth exceeded", pattern) from None
    except OverflowError:  # past re2_syntax.MAX_SIZE: RE2 would refuse it too, after a long parse
        raise UnsupportedRegexError(_TOO_LARGE_REGEX, pattern, 0) from None
    except LookupError as missing:  # an operation find_unsupported did not place: named, without a position
        raise UnsupportedRegexError(f"regex() runs on RE2, which has no {missing.args[0]}", pattern, 0) from None
    compiled = _re2_compile(text, pattern)
    return compiled, (compiled if empty is text else _re2_compile(empty, pattern)).search(b"") is not None


def _re2_compile(text, pattern, options=_OPTIONS):
    require_google_re2()
    try:
        compiled = re2.compile(text, options)
    except re2.error as error:
        reason = error.args[0].decode("utf-8", "replace") if isinstance(error.args[0], bytes) else str(error)
        if "too large" in reason:
            raise UnsupportedRegexError(_TOO_LARGE_REGEX, pattern, 0) from None
        raise UnsupportedRegexError(f"regex() runs on RE2, which rejects this pattern ({reason})", pattern, 0) from None
    if isinstance(compiled, re.Pattern):  # a binding that fell back on Python's re after all
        raise ImportError("the 're2' module returned a Python re.Pattern; subsetsaver needs google-re2")
    return compiled


def _unsupported(pattern, kind, construct, position, count=None) -> UnsupportedRegexError:
    shown = construct if len(construct) <= 40 else construct[:37] + "..."
    where = f"'{shown}' at position {position}"
    if "\n" in pattern:
        line = pattern.count("\n", 0, position) + 1
        where += f" (line {line}, column {position - pattern.rfind(chr(10), 0, position)})"
    if kind == "possessive":
        message = f"regex() runs on RE2, which has no possessive quantifiers: {where}; {_PLAIN.format(shown[:-1])}"
    elif kind == "count" and count > max(int(number) for number in re.findall("[0-9]+", construct)):
        message = (f"regex() runs on RE2, which repeats at most {re2_syntax.MAX_REPEAT} times, counting repetitions "
                   f"inside repetitions: {where} repeats {count} times; write smaller counts, or '*' or '+' for any "
                   "number")
    elif kind == "count":
        message = (f"regex() runs on RE2, which repeats at most {re2_syntax.MAX_REPEAT} times: {where}; write a "
                   "smaller count, or '*' or '+' for any number")
    else:
        missing, fix = _FIXES[kind]
        message = f"regex() runs on RE2, which has no {missing}: {where}; {fix}"
    return UnsupportedRegexError(message, pattern, position)


def regex_matcher(pattern: str):
    """A function: name -> whether ``re.search(pattern, name)`` finds a match, run on RE2."""
    compiled, matches_empty = _compile(pattern)
    search = compiled.search
    return lambda name: search(_utf8(name)) is not None if name else matches_empty


def glob_matcher(glob: str):
    """A function: name -> whether ``glob`` matches the whole name (see :func:`glob_to_regex`), run on RE2.

    Raises ``SelectorSyntaxError`` for a glob too large for RE2 (about 58,000 '?').

    >>> glob_matcher('*/moving_*')('conv_1/bn/moving_mean'), glob_matcher('**/moving_*')('conv_1/bn/moving_mean')
    (False, True)
    """
    fullmatch = _compiled_glob(glob, False).fullmatch
    return lambda name: fullmatch(_utf8(name)) is not None


def glob_captures(glob: str):
    """A function: name -> the texts the wildcards of ``glob`` matched, in order, or None when the
    glob does not match the whole name. Each wildcard takes the shortest text that lets the rest
    match; a ``**/`` takes whole segments, each with its '/'; ``[...]`` classes capture nothing.
    Linear time on RE2, as :func:`glob_matcher`.

    >>> glob_captures('layer_*/attention/**/kernel')('layer_3/attention/self/query/kernel')
    ('3', 'self/query/')
    >>> glob_captures('**/x')('x'), glob_captures('**/x')('a/b/x'), glob_captures('*/x')('a/b/x')
    (('',), ('a/b/',), None)
    """
    fullmatch = _compiled_glob(glob, True).fullmatch

    def captures(name):
        found = fullmatch(_utf8(name))
        return None if found is None else tuple(text.decode("utf-8", "surrogatepass") for text in found.groups())

    return captures


def glob_wildcard_count(glob: str) -> int:
    """How many wildcards (``*``, ``**``, ``**/``, ``?``) ``glob`` has: the length of its captures.

    >>> glob_wildcard_count('layer_*/[kq]?/**/kernel')
    3
    """
    return sum(wildcard for _, wildcard, _ in _glob_parts(glob))


def fill_glob(glob: str, captures) -> str:
    """``glob`` with each wildcard replaced by its capture, in order; the rest (classes too) as written.
    ``fill_glob(glob, glob_captures(glob)(name)) == name`` for every name a glob without classes matches.

    >>> fill_glob('layer_*/**/kernel', ('3', 'self/query/'))
    'layer_3/self/query/kernel'
    """
    wildcards = glob_wildcard_count(glob)
    if len(captures) != wildcards:
        raise SelectorSyntaxError(f"the glob '{clipped(glob)}' has {wildcards} wildcard(s), but {len(captures)} "
                                  "capture(s) were given to fill it")
    values = iter(captures)
    return "".join(next(values) if wildcard else written for written, wildcard, _ in _glob_parts(glob))


@functools.lru_cache(maxsize=512)
def _compiled_glob(glob, capture):
    try:
        return _re2_compile(glob_to_regex(glob, capture), glob, _CAPTURING_OPTIONS if capture else _OPTIONS)
    except UnsupportedRegexError:  # a glob has nothing RE2 lacks: only its size can be too much
        raise SelectorSyntaxError(_TOO_LARGE_GLOB) from None


def regex_selector(pattern: str):
    """A function: names -> those where ``re.search(pattern, name)`` finds a match, as a list.

    A pattern with no special character is a substring test (``regex('/Adam')``), and one that is
    ``^`` and such a literal a prefix test: what ``re.search`` means for them, without running RE2
    once per name. Every other pattern runs on RE2, as :func:`regex_matcher`.
    """
    compiled, _matches_empty = _compile(pattern)  # refuses what the regex syntax or RE2 refuses, literal or not
    if _is_literal(pattern):
        return lambda names: [name for name in names if pattern in name]
    if pattern.startswith("^") and _is_literal(pattern[1:]):
        prefix = pattern[1:]
        return lambda names: [name for name in names if name.startswith(prefix)]
    matches = regex_matcher(pattern)
    return lambda names: [name for name in names if matches(name)]


def glob_selector(glob: str):
    """A function: names -> those ``glob`` matches whole (see :func:`glob_to_regex`), as a list; a glob
    with no ``*``, ``?`` or ``[`` is an equality test."""
    matches = glob_matcher(glob)  # refuses a glob too large for RE2, literal or not
    if not any(char in glob for char in "*?["):
        return lambda names: [glob] if glob in names else []
    return lambda names: [name for name in names if matches(name)]


_SPECIAL = frozenset(".^$*+?{}[]\\|()")


def _is_literal(pattern) -> bool:
    """Whether ``pattern`` matches exactly its own text: no character means more than itself."""
    return not _SPECIAL.intersection(pattern)


def _utf8(name) -> bytes:
    return name.encode("utf-8", "surrogatepass")  # a lone surrogate stays a character; RE2 reads UTF-8


def glob_to_regex(glob: str, capture: bool = False) -> str:
    """The RE2 pattern that matches a name whole where ``glob`` does, written in time linear in the glob.

    Globs follow paths, as a shell with globstar does: ``*`` is any run of characters within one
    '/'-segment, ``?`` one character other than '/', and ``**`` (two stars or more) any run, '/'
    included. A ``**/`` that starts a segment is zero or more whole segments, so ``**/x`` matches
    ``x`` and ``a/b/x``. A class keeps ``fnmatch``'s rules (``[!...]`` negates, a ']' first is a
    member, empty ranges drop out) but never matches '/'. ``fnmatch.translate`` looks for the ']' of
    every '[' from where it opens, so ``'[' * 20000`` takes it a minute; here the next ']' after every
    position is known from one pass. ``capture``: each wildcard in a group of its own.

    >>> glob_to_regex('*/moving_[!v]?')
    '(?s:[^/]*?/moving_[^v/][^/])'
    >>> glob_to_regex('**/b*', capture=True)
    '(?s:((?:[^/]*/)*?)b([^/]*?))'
    """
    return "(?s:" + "".join(f"({pattern})" if capture and wildcard else pattern
                            for _, wildcard, pattern in _glob_parts(glob)) + ")"


_STAR, _GLOBSTAR, _SEGMENTS, _ONE = "[^/]*?", ".*?", "(?:[^/]*/)*?", "[^/]"


@functools.lru_cache(maxsize=512)
def _glob_parts(glob) -> tuple:
    """``glob`` cut into (text as written, whether a wildcard, RE2 pattern) parts, in one pass."""
    closing, following = [len(glob)] * (len(glob) + 1), len(glob)
    for position in range(len(glob) - 1, -1, -1):
        if glob[position] == "]":
            following = position
        closing[position] = following
    parts, position, size = [], 0, len(glob)
    while position < size:
        char, start = glob[position], position
        position += 1
        if char == "*":
            while position < size and glob[position] == "*":
                position += 1
            if position - start == 1:
                parts.append((glob[start:position], True, _STAR))
            elif (start == 0 or glob[start - 1] == "/") and glob.startswith("/", position):
                position += 1
                parts.append((glob[start:position], True, _SEGMENTS))
            else:
                parts.append((glob[start:position], True, _GLOBSTAR))
        elif char == "?":
            parts.append((char, True, _ONE))
        elif char == "[":
            end = position + (position < size and glob[position] == "!")
            end += end < size and glob[end] == "]"
            end = closing[end] if end < size else size
            if end >= size:
                parts.append((char, False, re.escape(char)))
            else:
                parts.append((glob[start:end + 1], False, _glob_class(glob, position, end)))
                position = end + 1
        else:
            parts.append((char, False, _literal(char)))
    return tuple(parts)


def _literal(char) -> str:
    return re.escape(char) if char.isascii() and char.isprintable() else f"\\x{{{ord(char):x}}}"


_RANGE = None  # the hyphen of a range, among the members of a class
_SLASH = ord("/")


def _glob_class(glob, start, end) -> str:
    """``glob[start:end]``, the inside of a bracket expression, as an RE2 class that never matches '/'.

    The members are ``fnmatch``'s: the text cut into chunks at range hyphens, empty ranges (``z-a``)
    merged away, then read as Python's ``re`` reads the class ``fnmatch.translate`` writes of them.
    """
    if "-" not in glob[start:end]:
        chunks = [glob[start:end]]
    else:
        chunks, low = [], start
        search = start + 2 if glob[start] == "!" else start + 1
        while (hyphen := glob.find("-", search, end)) >= 0:
            chunks.append(glob[low:hyphen])
            low, search = hyphen + 1, hyphen + 3
        chunk = glob[low:end]
        if chunk:
            chunks.append(chunk)
        else:
            chunks[-1] += "-"
        for index in range(len(chunks) - 1, 0, -1):  # drop empty ranges such as z-a
            if chunks[index - 1][-1] > chunks[index][0]:
                chunks[index - 1] = chunks[index - 1][:-1] + chunks[index][1:]
                del chunks[index]
    members = list(chunks[0])
    for chunk in chunks[1:]:
        members += [_RANGE, *chunk]
    negated = members[:1] == ["!"]
    ranges = _class_ranges(members[negated:])
    if negated:
        return "[^" + "".join(_class_range(low, high) for low, high in ranges) + "/]"
    ranges = [piece for low, high in ranges for piece in _without_slash(low, high)]
    if not ranges:
        return r"[^\x{0}-\x{10ffff}]"  # nothing: fnmatch writes (?!), which RE2 lacks
    return "[" + "".join(_class_range(low, high) for low, high in ranges) + "]"


def _class_ranges(members) -> list:
    """(low, high) code points of a class's members, read as Python's ``re`` reads them: a member, a
    range hyphen and a member make a range; a range hyphen anywhere else is a '-'."""
    chars = ["-" if member is _RANGE else member for member in members]
    ranges, index = [], 0
    while index < len(members):
        if index + 2 < len(members) and members[index + 1] is _RANGE:
            ranges.append((ord(chars[index]), ord(chars[index + 2])))
            index += 3
        else:
            ranges.append((ord(chars[index]), ord(chars[index])))
            index += 1
    return ranges


def _without_slash(low, high) -> list:
    if not low <= _SLASH <= high:
        return [(low, high)]
    return [piece for piece in ((low, _SLASH - 1), (_SLASH + 1, high)) if piece[0] <= piece[1]]


def _class_range(low, high) -> str:
    return _literal(chr(low)) if low == high else f"{_literal(chr(low))}-{_literal(chr(high))}"
