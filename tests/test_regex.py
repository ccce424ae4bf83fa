"""regex() and name() on RE2: what the binding does, what is refused and how, what a pattern means,
and that patterns Python's re hangs on finish.

The patterns that backtrack run in a child process with a generous budget (a hang is a failure,
a slow machine is not). Run ``SUBSETSAVER_FUZZ_EXAMPLES=5000`` for a longer fuzzing run.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import types
import warnings

import pytest
import re2
from glob_cases import reference_captures
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from regex_cases import loop_patterns

import subsetsaver as ss
from subsetsaver.errors import InvalidRegexError, SelectorSyntaxError, UnsupportedRegexError
from subsetsaver.selectors import patterns, re2_syntax

FUZZ = settings(
    max_examples=int(os.environ.get("SUBSETSAVER_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
QUIET = re2.Options()
QUIET.log_errors = False


def chosen(selector, names):
    return sorted(selector.evaluate(types.SimpleNamespace(all_names=frozenset(names))))


# -- the binding, pinned: what the code relies on ------------------------------------------------


@pytest.mark.parametrize("pattern", [r"(a)\1", "a(?=b)", "a(?!b)", "(?<=a)b", "(?<!a)b", "(?>a)", "a*+",
                                     "(a)?(?(1)b|c)", "(?x) a", r"a\Z", "a{1001}", "(?:a{100}){11}"])
def test_re2_refuses_what_it_cannot_run_and_never_falls_back_on_re(pattern):
    re.compile(pattern)  # all fine for Python
    with pytest.raises(re2.error) as error:
        re2.compile(pattern, QUIET)
    assert not isinstance(error.value, re.error) and isinstance(error.value.args[0], bytes)


def test_re2_logs_to_stderr_unless_told_not_to(capfd):
    with pytest.raises(re2.error):
        re2.compile("a(?=b)")
    assert "invalid perl operator: (?=" in capfd.readouterr().err
    with pytest.raises(re2.error):
        re2.compile("a(?!b)", QUIET)
    with pytest.raises(UnsupportedRegexError):
        ss.regex(r"\w{1000}")  # valid, but RE2 itself finds it too large
    assert capfd.readouterr().err == ""


def test_re2_reads_another_dialect_than_python():
    """Why a pattern is rewritten before RE2 sees it: the same text means something else there."""
    assert re2.compile(r"\w", QUIET).search("é") is None and re.search(r"\w", "é")  # ASCII \w
    assert re2.compile(r"\s", QUIET).search("\x0b") is None and re.search(r"\s", "\x0b")
    assert re2.compile(r"\10", QUIET).search("\x08")  # octal; in Python a backreference
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # a possible nested set, to Python
        assert re2.compile("[[:alpha:]]", QUIET).search("q") and not re.search("[[:alpha:]]", "q")
    assert re2.compile("^a{,3}$", QUIET).search("aa") is None and re.search("^a{,3}$", "aa")  # RE2: literal
    assert re2.compile("a$", QUIET).search("a\n") is None and re.search("a$", "a\n")
    assert re2.compile(r"\B", QUIET).search("") and not re.search(r"\B", "")
    assert re2.compile(r"\bé", QUIET).search("xé") and not re.search(r"\bé", "xé")  # what stays different
    assert re2.compile("(?i)k", QUIET).search("\u212a") and re.search("(?i)k", "\u212a")


def test_re2_searches_str_and_utf8_bytes_alike():
    compiled = re2.compile(r"\x{e9}", QUIET)
    assert compiled.search("caf\u00e9").span() == (3, 4)  # str: positions in characters
    assert compiled.search("caf\u00e9".encode()).span() == (3, 5)  # bytes: in bytes
    with pytest.raises(UnicodeEncodeError):
        compiled.search("\ud800")  # str must encode to UTF-8; names are passed as bytes for that reason


def test_a_binding_that_falls_back_on_re_is_refused(monkeypatch):
    fallback = types.SimpleNamespace(compile=lambda pattern, options=None: re.compile(pattern), error=re2.error,
                                     __file__="/elsewhere/re2.py")
    monkeypatch.setattr(patterns, "re2", fallback)
    patterns.require_google_re2.cache_clear()
    try:
        with pytest.raises(ImportError) as error:
            patterns.compile_regex("a fresh pattern, so not cached")
    finally:
        patterns.require_google_re2.cache_clear()
    assert str(error.value) == (
        "subsetsaver needs the google-re2 package (pip install google-re2): the 're2' module at /elsewhere/re2.py "
        "accepted a backreference (Pattern), so it would match some patterns with Python's backtracking re")


# -- refused: each construct RE2 lacks, with its exact message -------------------------------------

RE2 = "regex() runs on RE2, which "
PLAIN = "instead: RE2 never backtracks, so it cannot hang without one"
REFUSED = [  # pattern, position, message
    (r"(a)\1", 3, RE2 + r"has no backreferences: '\1' at position 3; spell out what the group can match instead, "
     r"e.g. '(a|b)\1' as 'aa|bb'"),
    (r"(?P<x>a)_(?P=x)", 9, RE2 + r"has no backreferences: '(?P=x)' at position 9; spell out what the group can "
     r"match instead, e.g. '(a|b)\1' as 'aa|bb'"),
    ("(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)(l)\\12", 36, RE2 + r"has no backreferences: '\12' at position 36; spell out "
     r"what the group can match instead, e.g. '(a|b)\1' as 'aa|bb'"),
    ("conv(?=_1)", 4, RE2 + "has no lookahead: '(?=' at position 4; require each part with '&' instead, e.g. "
     "regex('^(?=.*a).*b') as regex('a') & regex('b')"),
    ("a(?!b)", 1, RE2 + "has no lookahead: '(?!' at position 1; match a plain pattern and subtract instead, e.g. "
     "regex('a') - regex('ab')"),
    ("(?<=conv_)1", 0, RE2 + "has no lookbehind: '(?<=' at position 0; match what it looks at as part of the "
     "pattern instead, e.g. regex('(?<=conv_)1') as regex('conv_1')"),
    ("x(?<!a)b", 1, RE2 + "has no lookbehind: '(?<!' at position 1; match a plain pattern and subtract instead, "
     "e.g. regex('b') - regex('ab')"),
    ("(?<=a+)b", 0, RE2 + "has no lookbehind: '(?<=' at position 0; match what it looks at as part of the pattern "
     "instead, e.g. regex('(?<=conv_)1') as regex('conv_1')"),  # not even fixed-width: refused all the same
    ("(?>a|ab)c", 0, RE2 + "has no atomic groups: '(?>' at position 0; write '(?:' " + PLAIN),
    (r"\w*+x", 2, RE2 + "has no possessive quantifiers: '*+' at position 2; write '*' " + PLAIN),
    ("a++", 1, RE2 + "has no possessive quantifiers: '++' at position 1; write '+' " + PLAIN),
    ("a?+", 1, RE2 + "has no possessive quantifiers: '?+' at position 1; write '?' " + PLAIN),
    ("(ab){1,2}+", 4, RE2 + "has no possessive quantifiers: '{1,2}+' at position 4; write '{1,2}' " + PLAIN),
    ("(a)?(?(1)b|c)", 4, RE2 + "has no conditional groups: '(?(1)' at position 4; write the cases as alternatives "
     "instead, e.g. '(a)?(?(1)b|c)' as '(ab|c)'"),
    ("a{1001}", 1, RE2 + "repeats at most 1000 times: '{1001}' at position 1; write a smaller count, or '*' or '+' "
     "for any number"),
    ("x{0,5000}", 1, RE2 + "repeats at most 1000 times: '{0,5000}' at position 1; write a smaller count, or '*' or "
     "'+' for any number"),
    ("(?:a{10}b){101}", 10, RE2 + "repeats at most 1000 times, counting repetitions inside repetitions: '{101}' at "
     "position 10 repeats 1010 times; write smaller counts, or '*' or '+' for any number"),
    ("(?x) a  # a comment (?=\n  (?!b)", 26, RE2 + "has no lookahead: '(?!' at position 26 (line 2, column 3); match "
     "a plain pattern and subtract instead, e.g. regex('a') - regex('ab')"),
    (r"\w{1000}", 0, RE2 + "cannot compile a pattern this large (its program would pass 8 MiB); use smaller counts, "
     "or split it into several regex() terms joined with '|'"),
]


@pytest.mark.parametrize("pattern, position, message", REFUSED, ids=[p for p, _, _ in REFUSED])
def test_what_re2_cannot_run_is_refused_with_the_construct_its_position_and_a_fix(pattern, position, message):
    with pytest.raises(UnsupportedRegexError) as error:
        ss.regex(pattern)
    assert str(error.value) == message
    assert isinstance(error.value, SelectorSyntaxError) and isinstance(error.value, re.error)
    assert (error.value.pattern, error.value.pos, error.value.reason) == (pattern, position, message)
    assert (error.value.lineno, error.value.colno) == (pattern.count("\n", 0, position) + 1,
                                                      position - pattern.rfind("\n", 0, position))


@pytest.mark.parametrize("pattern, position, message", REFUSED[:3], ids=[p for p, _, _ in REFUSED[:3]])
def test_parse_reports_a_refused_pattern_at_its_argument(pattern, position, message):
    text = "trainable() | regex('" + pattern.replace("\\", "\\\\") + "')"
    with pytest.raises(SelectorSyntaxError) as error:
        ss.parse(text)
    assert (error.value.reason, error.value.column) == (f"unsupported regular expression: {message}", 20)
    assert str(error.value) == f"unsupported regular expression: {message}\n  {text}\n{' ' * 22}^"


def test_the_first_construct_in_reading_order_is_named():
    with pytest.raises(UnsupportedRegexError) as error:
        ss.regex(r"[(?=]\(?=(?#(?=)x(?<=y)(a)\1")  # in a class, escaped, in a comment: not a lookahead
    assert (error.value.pos, error.value.msg.split(":")[0]) == (17, RE2 + "has no lookbehind")


def test_a_pattern_python_rejects_keeps_pythons_message():
    for pattern in ["(", "[a", "*", "a{2,1}", r"\p{L}", "(?<name>a)"]:
        with pytest.raises(re.error) as python:
            re.compile(pattern)
        with pytest.raises(InvalidRegexError) as error:
            ss.regex(pattern)
        assert str(error.value) == str(python.value) and error.value.pos == python.value.pos
        assert isinstance(error.value, SelectorSyntaxError) and error.value.pattern == pattern
    for pattern, message in [("a{4294967296}", "the repetition number is too large"),
                             ("(" * 5000 + ")" * 5000, "maximum recursion depth exceeded")]:
        with pytest.raises(InvalidRegexError) as error:
            ss.regex(pattern)
        assert (str(error.value), error.value.pos) == (message, None)


# -- what a pattern means: Python's, on RE2 ------------------------------------------------------------

MEANING = [  # pattern, names, the ones Python's re.search finds a match in
    (r"^\w+$", ["größe", "日本", "abc", "a-b"], ["abc", "größe", "日本"]),  # Unicode \w and \d, as in Python
    (r"^\w+\d$", ["größe1", "straße", "x٣", "a_"], ["größe1", "x٣"]),
    (r"^\s", ["\x0bx", "\x1cx", "\u3000x", "x"], ["\x0bx", "\x1cx", "\u3000x"]),
    (r"[^\W\d_]+$", ["abc", "ab1", "日本", "a_"], ["abc", "日本"]),  # letters only
    (r"^[\W\d]+$", ["1-2", "a1", "éé", "--"], ["1-2", "--"]),
    (r"kernel\Z", ["w/kernel", "kernel/x", "kernel\n"], ["w/kernel"]),
    ("kernel$", ["w/kernel", "kernel/x", "kernel\n"], ["kernel\n", "w/kernel"]),  # '$' before a final newline
    (r"(?m)^b$", ["a\nb", "a\nbc", "b\n"], ["a\nb", "b\n"]),
    ("(?s)a.b", ["a\nb", "axb", "ab"], ["a\nb", "axb"]),
    ("a.b", ["a\nb", "axb"], ["axb"]),
    ("(?x) conv _ [0-9]+  # the number\n / w", ["conv_12/w", "conv 1/w"], ["conv_12/w"]),
    ("(?i)kernel", ["KERNEL", "Kernel", "\u212aernel"], ["KERNEL", "Kernel", "\u212aernel"]),
    ("(?ai)kernel", ["KERNEL", "\u212aernel"], ["KERNEL"]),  # ASCII case folding only
    (r"(?a)\w+$", ["abc", "é"], ["abc"]),
    ("(?i:A)b", ["ab", "Ab", "AB"], ["Ab", "ab"]),
    (r"(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)\101", ["abcdefghijA", "abcdefghij"], ["abcdefghijA"]),  # \101 is 'A'
    ("[[:alpha:]]", ["q]", ":]", "a]", "[", "]"], [":]", "a]"]),  # a class of '[', ':', 'a', 'l', 'p', 'h', a ']'
    ("a{,2}b", ["b", "aab", "a{,2}b"], ["a{,2}b", "aab", "b"]),
    (r"\N{GREEK SMALL LETTER BETA}", ["β", "b"], ["β"]),
    (r"[\u00e0-\u00ff]", ["à", "a"], ["à"]),
    (r"\B", ["", "ab", "a"], ["ab"]),
    ("", ["", "a"], ["", "a"]),
    ("[]a]", ["]", "a", "b"], ["]", "a"]),
    ("[](?=)]x", ["(x", "=x", "x"], ["(x", "=x"]),  # ']' first is a member: no lookahead in there
    ("[^](?<!)]x", ["(x", "ax", "x"], ["ax"]),
    (r"[\](?=]x", ["]x", "=x", "x"], ["=x", "]x"]),
    ("x{}", ["x{}", "x"], ["x{}"]),
    (r"(?:(?:a{10}){100})", ["a" * 1000, "a" * 999], ["a" * 1000]),  # 1000 rounds in all: RE2's limit
]


@pytest.mark.parametrize("pattern, names, expected", MEANING, ids=[p for p, _, _ in MEANING])
def test_a_pattern_means_what_it_means_to_python(pattern, names, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # '[[' is a possible nested set, to Python
        assert sorted(n for n in names if re.search(pattern, n)) == sorted(expected)  # the table itself is right
        assert chosen(ss.regex(pattern), names) == sorted(expected)


def test_names_with_lone_surrogates_are_matched_not_crashed_on():
    assert chosen(ss.regex("a.b"), ["a\ud800b", "ab"]) == ["a\ud800b"]
    assert chosen(ss.name("a?b"), ["a\ud800b", "ab"]) == ["a\ud800b"]


PIECES = ["a", "b", "A", "_", "/", "\n", "é", "中", "1", "٣", " ", r"\w", r"\W", r"\d", r"\D", r"\s", r"\S", ".", "^",
          "$", r"\A", r"\Z", "[", "]", "^", "-", "(", ")", "(?:", "|", "*", "+", "?", "{2}", "{1,3}", "{,2}", "{2,}", "*?",
          "(?i)", "(?s)", "(?m)", "(?a)", "(?x)", "#", "(?i:", "(?-i:", r"\x41", r"\u00e9", r"\N{DIGIT ONE}", r"\0",
          r"\101", "[^", "[a-z]", r"[\w-]", r"[^\W\d]", r"[\W\d]", "\\\\", r"\.", r"\-", r"\]", r"\[", r"\t", r"\n",
          "{", "}", r"\b", r"\B", "K", "k", "ſ", "s", "[[:alpha:]]", r"\1", "(?=", "(?<!", "*+"]
NAME_CHARACTERS = list("aAbB_/\n é中1٣kKſsS\t-[]{}.:") + ["\u212a", "\x0b", "\x1c", "\x85"]


def differs_knowingly(pattern, name) -> bool:
    """The differences the docs admit: ``\\b`` and non-ASCII words, '$' before more pattern and a final newline."""
    return (("\\b" in pattern or "\\B" in pattern) and not name.isascii()) or ("$" in pattern and name.endswith("\n"))


@FUZZ
@given(st.lists(st.sampled_from(PIECES), max_size=7).map("".join),
       st.lists(st.text(alphabet=st.sampled_from(NAME_CHARACTERS), max_size=10), min_size=1, max_size=6))
def test_any_pattern_finds_what_re_search_finds_or_is_refused(pattern, names):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            python = re.compile(pattern)
        except (re.error, OverflowError, RecursionError):
            python = None
        try:
            selector = ss.regex(pattern)
        except InvalidRegexError:
            assert python is None, pattern
            return
        except UnsupportedRegexError:
            return
    assert python is not None, pattern
    found = chosen(selector, names)
    assert [n for n in found if not differs_knowingly(pattern, n)] == \
        sorted(n for n in set(names) if python.search(n) and not differs_knowingly(pattern, n))


# -- linear time: patterns Python's re hangs on, over long names ---------------------------------------

HANGING = [r"\w*\w*\w*\w*x", r"(?:\w+){4}!", ".*.*.*.*.*=", "(a+)+$", r"(\w+)+$", r"(\w+_)*kernel$", "(a|aa)*b",
           "(.*)*x", r"(\w+){1,20}$", r"((\w+){1,3}){1,3}$", "(a*)*b", "(a|a)*c", "(a?){25}a{25}", r"(\d+)*\.",
           r"^(\w+\s?)*$", "(x+x+)+y", "(.*a){12}", "([a-z]+)*=", r"(\w|\d)+!", r"^(([a-z])+.)+[A-Z]([a-z])+$"]


def before_final_newline(name):
    """What Python's '$' sees the end of: the name, or the name less a newline that ends it."""
    return name[:-1] if name.endswith("\n") else name


EXPECTED = {  # the right answer without a backtracking regex, for the patterns Python's re hangs on
    r"\w*\w*\w*\w*x": lambda n: "x" in n,
    r"(?:\w+){4}!": lambda n: re.search(r"\w{4}!", n) is not None,  # linear for Python too
    ".*.*.*.*.*=": lambda n: "=" in n,
    "(a+)+$": lambda n: before_final_newline(n).endswith("a"),
    r"(\w+)+$": lambda n: re.search(r"\w$", n) is not None,
}


def slow_names(count, length=300):
    """Names built to make a backtracking matcher try every way to cut them, most ending in a mismatch."""
    units = ["a", "_", "/", "ab", "a_", "a/", "aab", "x", "conv_1/", "=", "a1"]
    ends = ["!", "\n", "=", "b", "", "x", "kernel", "A"]
    names = []
    for index in range(count):
        unit, end = units[index % len(units)], ends[index // len(units) % len(ends)]
        size = length + index // (len(units) * len(ends))
        names.append(f"{index:03d}" + (unit * size)[:size - len(end)] + end)
    return names


CHILD = textwrap.dedent("""
    import json, sys, types
    import subsetsaver as ss
    patterns, names = json.load(sys.stdin)
    catalog = types.SimpleNamespace(all_names=frozenset(names))
    for pattern in patterns:
        print(json.dumps([pattern, sorted(ss.regex(pattern).evaluate(catalog))]), flush=True)
    print(json.dumps("done"), flush=True)
""")


def run_child(script, payload, budget):
    """(lines printed, return code) of ``script`` fed ``payload``; killed, not failed, at the budget."""
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        out, err = child.communicate(json.dumps(payload), timeout=budget)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
    return [json.loads(line) for line in out.splitlines()], child.returncode, err


def test_fifty_patterns_python_hangs_on_finish_over_a_thousand_long_names():
    hanging = HANGING + loop_patterns(seed=7, count=50 - len(HANGING))
    names = slow_names(1000)
    assert len(hanging) == 50 and len(set(names)) == 1000 and min(map(len, names)) >= 300
    lines, code, err = run_child(CHILD, [hanging, names], budget=60)
    assert lines[-1:] == ["done"], (f"still matching after 60 s: {hanging[len(lines)]!r}" if code is None or code < 0
                                    else err[-2000:])
    found = dict(lines[:-1])
    for pattern, truth in EXPECTED.items():
        assert found[pattern] == sorted(n for n in names if truth(n)), pattern
    assert 0 < len(found["(a+)+$"]) < 1000 and 0 < len(found[r"(\w+)+$"]) < 1000


GLOB_CHILD = textwrap.dedent("""
    import json, sys, types
    import subsetsaver as ss
    globs, names = json.load(sys.stdin)
    catalog = types.SimpleNamespace(all_names=frozenset(names))
    print(json.dumps([sorted(ss.name(glob).evaluate(catalog)) for glob in globs]), flush=True)
    print(json.dumps(sorted(ss.parse(f"name('{globs[0]}')").evaluate(catalog))), flush=True)
""")


def test_globs_of_twenty_thousand_characters_finish_with_the_right_result():
    globs = ["[" * 20000, "a*" * 10000, "[ab]?" * 4000, "*[" * 10000]
    names = ["[" * 20000, "[" * 19999, "a" * 10000, "a" * 9999 + "b", "ab" * 4000, "ba" * 4000, "x[" * 10000, "x"]
    assert [len(glob) for glob in globs] == [20000] * 4
    lines, code, err = run_child(GLOB_CHILD, [globs, names], budget=60)
    assert len(lines) == 2, f"no result after 60 s (return code {code}): {err[-2000:]}"
    assert lines[0] == [["[" * 20000], ["a" * 10000], ["ab" * 4000, "ba" * 4000], ["[" * 19999, "[" * 20000, "x[" * 10000]]
    assert lines[1] == lines[0][0]
    small = ["[" * 100, "a*" * 50, "[ab]?" * 20, "*[" * 50]  # the same shapes, small enough for the reference
    short = ["[" * 100, "[" * 99, "a" * 50, "a" * 49 + "b", "ab" * 20, "ba" * 20, "x[" * 50, "x"]
    assert [chosen(ss.name(glob), short) for glob in small] == \
        [sorted(n for n in short if reference_captures(glob, n) is not None) for glob in small] == \
        [["[" * 100], ["a" * 50], ["ab" * 20, "ba" * 20], ["[" * 99, "[" * 100, "x[" * 50]]


CAPTURE_CHILD = textwrap.dedent("""
    import json, sys
    from subsetsaver.selectors import glob_captures
    globs, names = json.load(sys.stdin)
    print(json.dumps([glob_captures(glob)(name) for glob, name in zip(globs, names)]), flush=True)
""")


def test_a_capturing_glob_of_twenty_four_stars_answers():
    # Python's re with a '(.*?)' per star tries every way to cut the name: seconds at 8 stars, hours at 24.
    globs, names = ["*a" * 24, "*a" * 24, "*/" * 23 + "*"], ["a" * 60 + "b", "a" * 60, "a/" * 59 + "a"]
    lines, code, err = run_child(CAPTURE_CHILD, [globs, names], budget=60)
    assert lines == [[None, [""] * 23 + ["a" * 36], None]], f"no result after 60 s (return code {code}): {err[-2000:]}"


GLOB_ALPHABET = list("ab*?[]!-^\\/&~|.") + ["é"]
NAME_ALPHABET = list("ab[]!-^\\/&~|.\n") + ["é"]


@FUZZ
@given(st.text(alphabet=st.sampled_from(GLOB_ALPHABET), max_size=12),
       st.lists(st.text(alphabet=st.sampled_from(NAME_ALPHABET), max_size=8), max_size=6),
       st.sampled_from(["", "a", "/", "b/a", "]\n"]))
def test_a_glob_matches_as_the_reference_matcher_does(glob, names, filler):
    names = names + [glob.replace("*", filler).replace("?", filler[:1])]  # a name close to the glob
    assert chosen(ss.name(glob), names) == sorted(n for n in set(names) if reference_captures(glob, n) is not None)


@FUZZ
@given(st.lists(st.sampled_from(["a", "b", "/", "*", "**", "**/", "?", "[ab]", "[!a]"]), max_size=8),
       st.lists(st.sampled_from(["a", "b", "/", "ab", "\n"]), max_size=4))
def test_captures_are_the_reference_matchers_and_fill_the_glob_back(pieces, fillers):
    """Names built from the glob itself (each wildcard or class replaced by a few pieces), so most match."""
    glob, name = "".join(pieces), "".join("".join(fillers) if piece[0] in "*?[" else piece for piece in pieces)
    captures = patterns.glob_captures(glob)(name)
    assert captures == reference_captures(glob, name)
    if captures is not None:
        assert len(captures) == patterns.glob_wildcard_count(glob)
        if "[" not in glob:
            assert patterns.fill_glob(glob, captures) == name


NAMES = ["w", "conv_1/w", "conv_1/bn/moving_mean", "conv_1/bn/moving_mean/ExponentialMovingAverage", "a.b/c"]


@pytest.mark.parametrize("glob, expected", [
    ("*", ["w"]),  # '*' stays in its segment
    ("*/*", ["a.b/c", "conv_1/w"]),
    ("**", NAMES),
    ("conv_1/**", NAMES[1:4]),
    ("**/moving_*", ["conv_1/bn/moving_mean"]),
    ("**/w", ["conv_1/w", "w"]),  # '**/' at a segment's start: zero segments too
    ("conv_1/**/moving_mean", ["conv_1/bn/moving_mean"]),
    ("conv**", NAMES[1:4]),  # '**' elsewhere: any run
    ("***/w", ["conv_1/w", "w"]),  # three stars are '**'
    ("conv_1?w", []),  # '?' is not '/'
    ("a.b[/]c", []),  # nor is any class
    ("a.b[!x]c", []),
    ("a.b[.-0]c", []),  # '.' to '0' holds '/', but the class leaves it out
    ("a[.-0]b/c", ["a.b/c"]),
])
def test_a_glob_keeps_to_segments_and_double_stars_cross_them(glob, expected):
    assert chosen(ss.name(glob), NAMES) == sorted(expected)


def test_captures_take_the_shortest_text_from_the_left():
    captures = patterns.glob_captures
    assert captures("layer_*/attention/**/kernel")("layer_3/attention/self/query/kernel") == ("3", "self/query/")
    assert captures("*_*")("a_b_c") == ("a", "b_c")
    assert captures("**/x")("x") == ("",) and captures("**/x")("a/x/x") == ("a/x/",)
    assert captures("a**/b")("ax/y/b") == ("x/y",) and captures("a**/b")("ab") is None  # mid-segment: '**', then '/'
    assert captures("[ab]?*")("ab") == ("b", "")  # a class captures nothing
    assert captures("*")("a/b") is None and captures("é?")("éé") == ("é",)
    assert captures("a?*")("a\ud800\ud800") == ("\ud800", "\ud800")  # lone surrogates come back as they went in
    assert patterns.glob_wildcard_count("[*]*?**/x**") == 4


def test_fill_glob_puts_each_capture_back_and_refuses_the_wrong_count():
    assert patterns.fill_glob("[ab]/*/**/?", ("x", "p/q/", "z")) == "[ab]/x/p/q/z"
    with pytest.raises(SelectorSyntaxError) as error:
        patterns.fill_glob("a/*/b" + "c" * 300, ("x", "y"))
    assert str(error.value) == ("the glob 'a/*/b" + "c" * 155 + "... (145 more characters)' has 1 wildcard(s), but "
                                "2 capture(s) were given to fill it")


def test_a_glob_translates_in_linear_time_as_fnmatch_reads_its_classes():
    assert patterns.glob_to_regex("*/moving_[!v]?") == "(?s:[^/]*?/moving_[^v/][^/])"
    assert patterns.glob_to_regex("**/b**", capture=True) == "(?s:((?:[^/]*/)*?)b(.*?))"
    assert patterns.glob_to_regex("[z-a]x") == r"(?s:[^\x{0}-\x{10ffff}]x)"  # an empty range: nothing
    assert patterns.glob_to_regex("[!]") == r"(?s:\[!\])" and patterns.glob_to_regex("[!]]") == r"(?s:[^\]/])"
    assert patterns.glob_to_regex("[" * 3) == r"(?s:\[\[\[)"
    assert patterns.glob_to_regex("[+-0é]") == r"(?s:[\+-\.0\x{e9}])"  # '/' cut out of the range


def test_a_glob_too_large_for_re2_is_refused_when_built():
    with pytest.raises(SelectorSyntaxError) as error:
        ss.name("?" * 90000)
    assert str(error.value) == ("name() runs on RE2, which cannot compile a glob this large (its program would pass "
                                "8 MiB); split it into several name() terms joined with '|'")


def test_the_translation_is_re2_syntax_with_every_character_escaped():
    assert re2_syntax.to_re2(r"^conv_\d+/(?i:K)$") == r"\Aconv_(?:[\p{Nd}])+\x{2f}(?:(?i:K))(?:\x{a})?\z"
    assert re2_syntax.to_re2(r"(?m)^a$|\Z") == r"(?:(?m:^)a(?m:$)|\z)"
    assert re2_syntax.to_re2("$x") == r"\zx"  # not last: no room for a final newline


def test_the_private_regex_parser_still_has_everything_the_rewrite_reads():
    """Python has no public parse tree of a pattern, so re2_syntax reads ``re._parser`` (the parser re.compile
    uses), fenced in that one module. A Python that renames or drops what it reads fails here, by name."""
    source = pathlib.Path(re2_syntax.__file__).read_text(encoding="utf-8")
    read = sorted(set(re.findall(r"\bsre\.([A-Za-z_]+)", source)))
    missing = [name for name in read if not hasattr(re2_syntax.sre, name)]
    assert missing == [], f"re._parser of Python {sys.version.split()[0]} lacks {missing}: update selectors/re2_syntax.py"
    assert len(read) >= 25  # the scan found the reads (29 today): an empty list would pass vacuously
