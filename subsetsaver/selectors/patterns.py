r"""``regex()`` and ``name()`` patterns, matched by RE2 in time linear in the name's length.

Python's ``re`` backtracks: ``(\w+)+$`` tries every way to cut a run of word characters before it
gives up, 2**47 ways for a 48-character name. RE2 never backtracks, so no pattern from a config file
can hang the tool. A pattern keeps Python's meaning (:mod:`re2_syntax` rewrites it in RE2's
dialect); what RE2 cannot do is refused with ``UnsupportedRegexError``, naming the construct, where
it is and what to write instead. Globs are translated as ``fnmatch`` does, in linear time.

Example::

    regex_matcher(r'^conv_\d+/')('conv_12/w')
    # True
    glob_matcher('*/moving_*')('bn/moving_mean')
    # True
    regex_matcher(r'a(?!b)')
    # Traceback (most recent call last):
    # UnsupportedRegexError: regex() runs on RE2, which has no lookahead: '(?!' at position 1; ...
"""

from __future__ import annotations

import functools
import re

import re2

from ..errors import InvalidRegexError, SelectorSyntaxError, UnsupportedRegexError
from . import re2_syntax

__all__ = ["compile_regex", "glob_matcher", "glob_selector", "glob_to_regex", "regex_matcher", "regex_selector",
           "require_google_re2"]

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


def _options():
    options = re2.Options()
    options.log_errors = False  # RE2 logs every pattern it rejects to stderr otherwise
    options.never_capture = True
    return options


_OPTIONS = _options()


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


def _re2_compile(text, pattern):
    require_google_re2()
    try:
        compiled = re2.compile(text, _OPTIONS)
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
    """A function: name -> ``fnmatch.fnmatchcase(name, glob)``, run on RE2.

    Raises ``SelectorSyntaxError`` for a glob too large for RE2 (about 90,000 '?').
    """
    try:
        fullmatch = compile_regex(glob_to_regex(glob)).fullmatch
    except UnsupportedRegexError:  # a glob has nothing RE2 lacks: only its size can be too much
        raise SelectorSyntaxError(_TOO_LARGE_GLOB) from None
    return lambda name: fullmatch(_utf8(name)) is not None


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
    """A function: names -> those ``fnmatch.fnmatchcase(name, glob)`` accepts, as a list; a glob with
    no ``*``, ``?`` or ``[`` is an equality test."""
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


@functools.lru_cache(maxsize=512)
def glob_to_regex(glob: str) -> str:
    """The Python regex ``fnmatch.fnmatchcase`` matches ``glob`` with, written in linear time.

    ``fnmatch.translate`` looks for the ']' of every '[' from where it opens, so ``'[' * 20000``
    takes it a minute; here the next ']' after every position is known from one pass. ``*`` is
    ``.*`` (RE2 does not need fnmatch's atomic groups), and a class keeps fnmatch's rules: ``[!...]``
    negates, a ']' first is a member, empty ranges drop out.

    >>> glob_to_regex('*/moving_[!v]?')
    '(?s:.*/moving_[^v].)'
    """
    closing, following = [len(glob)] * (len(glob) + 1), len(glob)
    for position in range(len(glob) - 1, -1, -1):
        if glob[position] == "]":
            following = position
        closing[position] = following
    parts, position, size = [], 0, len(glob)
    while position < size:
        char = glob[position]
        position += 1
        if char == "*":
            if not parts or parts[-1] != ".*":
                parts.append(".*")
        elif char == "?":
            parts.append(".")
        elif char == "[":
            end = position + (position < size and glob[position] == "!")
            end += end < size and glob[end] == "]"
            end = closing[end] if end < size else size
            if end >= size:
                parts.append("\\[")
            else:
                parts.append(_glob_class(glob, position, end))
                position = end + 1
        else:
            parts.append(re.escape(char))
    return "(?s:" + "".join(parts) + ")"


def _glob_class(glob, start, end) -> str:
    """``glob[start:end]``, the inside of a bracket expression, as a regex class (fnmatch's rules)."""
    if "-" not in glob[start:end]:
        inside = glob[start:end].replace("\\", r"\\")
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
        inside = "-".join(chunk.replace("\\", r"\\").replace("-", r"\-") for chunk in chunks)
    inside = re.sub(r"([&~|])", r"\\\1", inside)
    if not inside:
        return r"[^\x00-\U0010ffff]"  # nothing: fnmatch writes (?!), which RE2 lacks
    if inside == "!":
        return "."
    if inside[0] == "!":
        return "[^" + inside[1:] + "]"
    return "[" + ("\\" if inside[0] in "^[" else "") + inside + "]"
