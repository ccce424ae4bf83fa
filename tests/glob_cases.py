"""A reference glob matcher for the tests: slow and plain, so that it is obviously right.

It tries every way to match, wildcard by wildcard, shortest text first, and returns the first
way that works: what each wildcard took, or None. The glob rules are the selector language's:
``*`` is any run within one '/'-segment, ``?`` one character other than '/', two or more stars any
run, and a ``**/`` that starts a segment zero or more whole segments. A class ``[...]`` is what
``fnmatch`` makes of it, tried on one character at a time, never '/'.

Example::

    from glob_cases import reference_captures
    reference_captures("**/b_*", "a/b_1")   # ('a/', '1')
    reference_captures("*/b_*", "x/a/b_1")  # None
"""

import fnmatch
import functools


def reference_captures(glob, name):
    """The texts the wildcards of ``glob`` took to match all of ``name``, or None."""

    @functools.lru_cache(maxsize=None)
    def rest(at, position):  # glob[at:] against name[position:]: the captures, or None
        if at == len(glob):
            return () if position == len(name) else None
        char = glob[at]
        if char == "*":
            end = at
            while end < len(glob) and glob[end] == "*":
                end += 1
            if end - at == 1:
                stop = name.find("/", position)
                ends = range(position, (len(name) if stop < 0 else stop) + 1)
            elif (at == 0 or glob[at - 1] == "/") and glob.startswith("/", end):
                end += 1  # '**/': nothing, or up to and with any later '/'
                ends = [position] + [index + 1 for index in range(position, len(name)) if name[index] == "/"]
            else:
                ends = range(position, len(name) + 1)
            for stop in ends:
                found = rest(end, stop)
                if found is not None:
                    return (name[position:stop],) + found
            return None
        if position == len(name):
            return None
        if char == "?":
            found = rest(at + 1, position + 1) if name[position] != "/" else None
            return None if found is None else (name[position],) + found
        if char == "[":
            close = _class_end(glob, at)
            if close is not None:
                member = name[position] != "/" and fnmatch.fnmatchcase(name[position], glob[at:close + 1])
                return rest(close + 1, position + 1) if member else None
        return rest(at + 1, position + 1) if name[position] == char else None

    return rest(0, 0)


def _class_end(glob, at):
    """Where the ']' closing the '[' at ``at`` is (a '!' first negates, a ']' first is a member), or None."""
    start = at + 1 + glob.startswith("!", at + 1)
    start += glob.startswith("]", start)
    close = glob.find("]", start)
    return None if close < 0 else close
