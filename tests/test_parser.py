"""The selector text parser: precedence, strings, every error message, and fuzzing."""

import os
import re
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from subsetsaver.errors import SelectorSyntaxError
from subsetsaver.selectors import (
    Selector,
    name,
    nothing,
    parse,
    parser,
    regex,
    scope,
    slots,
    trainable,
    variables,
)
from subsetsaver.selectors import expressions as selectors

FUZZ = settings(
    max_examples=int(os.environ.get("SUBSETSAVER_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

A, B, C = trainable(), scope("x"), slots()


# -- what parses, and into what -----------------------------------------------------


def test_the_readme_example_equals_the_python_expression():
    text = "trainable() | scope('conv_1/bn') - scope('opt')"
    assert parse(text) == trainable() | (scope("conv_1/bn") - scope("opt"))
    assert repr(parse(text)) == text


PRECEDENCE = [
    # each pair of binary operators, both orders: the tighter one groups first
    ("trainable() | scope('x') ^ slots()", A | (B ^ C)),
    ("trainable() ^ scope('x') | slots()", (A ^ B) | C),
    ("trainable() | scope('x') & slots()", A | (B & C)),
    ("trainable() & scope('x') | slots()", (A & B) | C),
    ("trainable() | scope('x') - slots()", A | (B - C)),
    ("trainable() - scope('x') | slots()", (A - B) | C),
    ("trainable() ^ scope('x') & slots()", A ^ (B & C)),
    ("trainable() & scope('x') ^ slots()", (A & B) ^ C),
    ("trainable() ^ scope('x') - slots()", A ^ (B - C)),
    ("trainable() - scope('x') ^ slots()", (A - B) ^ C),
    ("trainable() & scope('x') - slots()", A & (B - C)),
    ("trainable() - scope('x') & slots()", (A - B) & C),
    # '-' is left-associative; parentheses override everything
    ("trainable() - scope('x') - slots()", (A - B) - C),
    ("trainable() - (scope('x') - slots())", A - (B - C)),
    ("(trainable() | scope('x')) & slots()", (A | B) & C),
    ("(trainable() | scope('x')) - slots()", (A | B) - C),
    ("((trainable()))", A),
    # '~' binds tighter than every binary operator and stacks
    ("~trainable() - scope('x')", (~A) - B),
    ("trainable() - ~scope('x')", A - (~B)),
    ("~(trainable() - scope('x'))", ~(A - B)),
    ("~trainable() | scope('x')", (~A) | B),
    ("~~trainable()", ~~A),
    ("~ ~ ~trainable()", ~~~A),
    ("~(~trainable())", ~~A),
    # flattening is the operators' own
    ("trainable() | (scope('x') | slots())", selectors.Union((A, B, C))),
    ("(trainable() & scope('x')) & slots()", selectors.Intersection((A, B, C))),
    ("trainable() ^ scope('x') ^ slots()", selectors.SymmetricDifference((A, B, C))),
]


@pytest.mark.parametrize("text, expected", PRECEDENCE)
def test_precedence_matches_python(text, expected):
    assert parse(text) == expected
    assert parse(repr(expected)) == expected


@pytest.mark.parametrize(
    "text, expected_repr",
    [
        ("(trainable())|(scope('x'))", "trainable() | scope('x')"),
        ("trainable() | (scope('x') | slots())", "trainable() | scope('x') | slots()"),
        ("((trainable() - scope('x')))", "trainable() - scope('x')"),
        ("(~trainable())", "~trainable()"),
    ],
)
def test_redundant_parentheses_disappear(text, expected_repr):
    assert repr(parse(text)) == expected_repr


def test_whitespace_is_allowed_between_any_tokens():
    text = " \t~ ( trainable ( ) |\n scope ( 'a' ) ) - variables ( 'b' , \"c\" ) \r\n"
    assert parse(text) == ~(trainable() | scope("a")) - variables(["b", "c"])


def test_every_builtin_parses():
    for keyword, (constructor, count) in selectors.BUILTINS.items():
        arguments = ["a/b", "c"][: 1 if count is None else count]
        text = f"{keyword}({', '.join(repr(a) for a in arguments)})"
        assert parse(text) == constructor(*arguments)


@pytest.mark.parametrize(
    "text, value",
    [
        (r"""name('it\'s')""", "it's"),
        (r'''name("it's")''', "it's"),
        (r'''name("say \"hi\"")''', 'say "hi"'),
        (r"""name('say "hi"')""", 'say "hi"'),
        (r"""name("\'")""", "'"),
        (r"""name('a\\b')""", "a\\b"),
        (r"""name('\d+')""", r"\d+"),  # other backslash sequences stay as written
        (r"""name('\\d+')""", r"\d+"),
        (r"""name('\n\t')""", r"\n\t"),
        (r"""name('\\\\')""", r"\\"),
        (r"""name('\\\'')""", "\\'"),
        ("name('two\nlines')", "two\nlines"),
        ("name('ünïcödé/β')", "ünïcödé/β"),
        ("name('')", ""),
    ],
)
def test_string_escapes(text, value):
    assert parse(text) == name(value)
    assert parse(repr(name(value))) == name(value)


def test_regex_keeps_backslashes():
    assert parse(r"regex('\d+')") == regex(r"\d+")
    assert parse(r"regex('\d+')").pattern == "\\d+"
    assert parse(r"regex('^conv_\d/\w+$')").pattern == r"^conv_\d/\w+$"


def test_variables_takes_several_names():
    assert parse("variables('a', 'b', 'a')") == variables(["a", "b"])


def test_python_code_is_never_run():
    with pytest.raises(SelectorSyntaxError) as error:
        parse("__import__('os').system('true')")
    assert error.value.reason.startswith("unknown selector '__import__'")


def test_deepest_allowed_nesting_parses():
    limit = parser.MAX_DEPTH
    assert parse("~" * (limit - 1) + "nothing()") is not None
    assert parse("(" * limit + "nothing()" + ")" * limit) == nothing()
    chain = parse(" - ".join(["nothing()"] * limit))
    assert repr(chain) == " - ".join(["nothing()"] * limit)


def test_long_flat_expressions_are_fine():
    text = " | ".join(f"scope('s{i}')" for i in range(2000))
    assert len(parse(text).terms) == 2000


# -- errors -------------------------------------------------------------------------


def error_for(text):
    with pytest.raises(SelectorSyntaxError) as info:
        parse(text)
    return info.value


def test_error_messages_show_the_text_and_a_caret():
    assert str(error_for("trainabel() | scope('a')")) == (
        "unknown selector 'trainabel' — did you mean 'trainable'?\n"
        "  trainabel() | scope('a')\n"
        "  ^"
    )
    assert str(error_for("trainable() | scope(conv_1)")) == (
        "expected a quoted string argument, got 'conv_1'\n"
        "  trainable() | scope(conv_1)\n"
        "                      ^"
    )
    assert str(error_for("(trainable() | local()")) == (
        "unexpected end of text: expected ')' to close the '(' at column 0\n"
        "  (trainable() | local()\n"
        "                        ^"
    )


KNOWN = "averages, bn_stats, collection, everything, global_step, local, name, nothing, regex, scope, slots, trainable, variables"

ERRORS = [
    # unknown built-ins
    ("trainabel()", "unknown selector 'trainabel' — did you mean 'trainable'?", 0),
    ("slots() | Trainable()", "unknown selector 'Trainable' — did you mean 'trainable'?", 10),
    ("variable('a')", "unknown selector 'variable' — did you mean 'variables'?", 0),
    ("foo()", f"unknown selector 'foo'; known selectors: {KNOWN}", 0),
    ("glob('*')", f"unknown selector 'glob'; known selectors: {KNOWN}", 0),
    ("not trainable()", "unknown selector 'not'; use '~' instead of 'not'", 0),
    # argument counts
    ("trainable('x')", "trainable() takes no arguments, got 1", 10),
    ("everything('a', 'b')", "everything() takes no arguments, got 2", 11),
    ("scope()", "scope() takes 1 argument, got 0", 6),
    ("scope('a', 'b')", "scope() takes 1 argument, got 2", 11),
    ("variables()", "variables() takes at least 1 argument, got 0", 10),
    # arguments that are not strings
    ("scope(3)", "expected a quoted string argument, got '3'", 6),
    ("scope(conv_1)", "expected a quoted string argument, got 'conv_1'", 6),
    ("scope(trainable())", "expected a quoted string argument, got 'trainable'", 6),
    ("scope('a',)", "expected a quoted string argument, got ')'", 10),
    ("variables('a',,'b')", "expected a quoted string argument, got ','", 14),
    ("trainable(3)", "expected ')', got '3'", 10),
    ("scope('a' 'b')", "expected ',' or ')' after an argument, got string 'b'", 10),
    ("scope('a' | x)", "expected ',' or ')' after an argument, got '|'", 10),
    ("scope(", "unexpected end of text: expected a quoted string argument", 6),
    ("nothing(", "unexpected end of text: expected ')'", 8),
    ("scope('a'", "unexpected end of text: expected ',' or ')' after an argument", 9),
    # strings
    ("scope('abc", "unterminated string: no closing ' before the end of text", 6),
    ('scope("abc', 'unterminated string: no closing " before the end of text', 6),
    (r"scope('abc\')", "unterminated string: no closing ' before the end of text", 6),
    # characters and tokens out of place
    ("trainable() + local()", "unexpected character '+'; use '|' instead of '+'", 12),
    ("!trainable()", "unexpected character '!'; use '~' instead of '!'", 0),
    ("scope('a')/b", "unexpected character '/'", 10),
    ("trainable() % local()", "unexpected character '%'", 12),
    ("trainable\x00()", "unexpected character '\\x00'", 9),
    ("trainable", "unexpected end of text: expected '(' after 'trainable'", 9),
    ("trainable | local()", "expected '(' after 'trainable', got '|'", 10),
    ("trainable() |", "unexpected end of text: expected a selector such as trainable() or scope('name')", 13),
    ("~", "unexpected end of text: expected a selector such as trainable() or scope('name')", 1),
    ("| trainable()", "expected a selector such as trainable() or scope('name'), got '|'", 0),
    ("trainable() | | local()", "expected a selector such as trainable() or scope('name'), got '|'", 14),
    ("()", "expected a selector such as trainable() or scope('name'), got ')'", 1),
    ("3 | local()", "expected a selector such as trainable() or scope('name'), got '3'", 0),
    ("'conv_1'", "expected a selector such as trainable() or scope('name'), got string 'conv_1'", 0),
    ("(trainable() local())", "expected ')' to close the '(' at column 0, got 'local'", 13),
    ("trainable())", "unexpected ')' after a complete selector", 11),
    ("trainable() local()", "unexpected 'local' after a complete selector", 12),
    ("trainable() or local()", "unexpected 'or' after a complete selector; use '|' instead of 'or'", 12),
    ("trainable() and local()", "unexpected 'and' after a complete selector; use '&' instead of 'and'", 12),
    ("scope('a') 'b'", "unexpected string 'b' after a complete selector", 11),
    (
        "scope('a') '" + "x" * 40 + "'",
        "unexpected string 'xxxxxxxxxxxxxxxxxxxxxxxxxxx...' after a complete selector",
        11,
    ),
    # empty text
    ("", "empty selector text: expected a selector such as trainable() or scope('name')", 0),
    (" \n\t", "empty selector text: expected a selector such as trainable() or scope('name')", 3),
]


SHOWN = {  # texts whose excerpt is not the text as it is: a control character, several lines
    "trainable\x00()": "unexpected character '\\x00'\n  trainable\\x00()\n           ^",
    " \n\t": "empty selector text: expected a selector such as trainable() or scope('name')\n"
             "  line 2:         \n"
             "                  ^",
}


@pytest.mark.parametrize("text, reason, column", ERRORS)
def test_error_message(text, reason, column):
    error = error_for(text)
    assert (error.reason, error.column, error.text) == (reason, column, text)
    expected = SHOWN.get(text, f"{reason}\n  {text}\n  {' ' * column}^" if text else reason)
    assert str(error) == expected
    assert isinstance(error, ValueError)


def test_the_first_problem_in_reading_order_is_reported():
    assert error_for("trainable('x') $").reason == "trainable() takes no arguments, got 1"
    assert error_for("trainabel$").reason.startswith("unknown selector 'trainabel'")


@pytest.mark.parametrize("pattern", ["(", "[a", "*", "a{99999999999}"])
def test_a_bad_regex_is_a_syntax_error_at_its_argument(pattern):
    with pytest.raises((re.error, OverflowError)) as compiled:
        re.compile(pattern)
    text = f"local() | regex('{pattern}')"
    error = error_for(text)
    assert error.reason == f"invalid regular expression: {compiled.value}"
    assert error.column == 16


def test_a_regex_re2_cannot_run_is_a_syntax_error_at_its_argument():
    error = error_for(r"local() | regex('(a)\\1')")
    assert str(error) == (
        r"unsupported regular expression: regex() runs on RE2, which has no backreferences: '\1' at position 3; "
        r"spell out what the group can match instead, e.g. '(a|b)\1' as 'aa|bb'" "\n"
        r"  local() | regex('(a)\\1')" "\n"
        "                  ^")


def test_a_regex_nested_too_deep_for_python_is_a_syntax_error():
    error = error_for("regex('" + "(" * 5000 + ")" * 5000 + "')")
    assert (error.reason, error.column) == ("invalid regular expression: maximum recursion depth exceeded", 6)


def test_too_much_nesting_is_a_syntax_error():
    limit = parser.MAX_DEPTH
    message = f"selector is nested too deeply (the limit is {limit} levels)"
    chain = " - ".join(["nothing()"] * (limit + 1))  # left-nested: one level per '-'
    for text, column in [
        ("~" * (limit + 1) + "nothing()", limit),
        ("(" * (limit + 1) + "nothing()" + ")" * (limit + 1), limit),
        (chain, chain.rindex("-")),
        ("~(" * 60 + "nothing()" + ")" * 60, 100),
        ("(" * 90_000, limit),
        ("nothing()" + " - nothing()" * 8000, 9 + 12 * (limit - 1) + 1),
    ]:
        error = error_for(text)
        assert (error.reason, error.column) == (message, column)


def test_too_long_text_is_a_syntax_error_without_echoing_it():
    text = " | ".join(["trainable()"] * 10_000)
    error = error_for(text)
    assert str(error) == f"selector text is too long: {len(text)} characters (the limit is 100000)"
    assert error.column == parser.MAX_LENGTH


def test_the_length_limit_comes_before_anything_else_is_read():
    for text in ["(" * 100_001, "regex('" + "(" * 100_000 + "')", "trainabel" * 20_000]:
        assert str(error_for(text)) == f"selector text is too long: {len(text)} characters (the limit is 100000)"
    assert error_for("(" * 100_000).reason == "selector is nested too deeply (the limit is 100 levels)"


# -- the caret: one line, display columns, cut to about 70 columns -------------------------------------

CARETS = [
    # a tab moves to the next multiple of 8: 'trainable() |' is 13 columns, the tab ends at 16, 'scope(' at 22
    ("trainable() |\tscope(conv)", "expected a quoted string argument, got 'conv'\n"
     "  trainable() |   scope(conv)\n"
     "                        ^"),
    # several lines: the one at fault, named
    ("trainable()\n| scope('a')\n| trainabel()", "unknown selector 'trainabel' — did you mean 'trainable'?\n"
     "  line 3: | trainabel()\n"
     "            ^"),
    ("trainabel()\r\n| local()", "unknown selector 'trainabel' — did you mean 'trainable'?\n"
     "  line 1: trainabel()\n"
     "          ^"),
    # wide characters take 2 columns: "scope('" 7, 层 2, '/' 1, 权 2, 重 2, "') | " 5: the caret at 19
    ("scope('层/权重') | 中()", f"unknown selector '中'; known selectors: {KNOWN}\n"
     "  scope('层/权重') | 中()\n"
     "                     ^"),
    # a combining accent takes none: "scope('" 7, 'cafe' 4, U+0301 0, "') " 3: the caret at 14
    ("scope('cafe\u0301') % local()", "unexpected character '%'\n"
     "  scope('cafe\u0301') % local()\n"
     "                ^"),
    # a control character shows as its escape, 4 columns wide: "scope('" 7, '\x1b' 4, "') " 3: the caret at 14
    ("scope('\x1b') + local()", "unexpected character '+'; use '|' instead of '+'\n"
     "  scope('\\x1b') + local()\n"
     "                ^"),
]


@pytest.mark.parametrize("text, message", CARETS, ids=["tab", "lines", "crlf", "wide", "combining", "control"])
def test_the_caret_stands_under_the_character_at_fault(text, message):
    assert str(error_for(text)) == message


def test_a_long_line_is_cut_around_the_caret():
    # the caret a third into about 70 columns, '...' where cut: 22 columns before it, 47 after
    text = "nothing() | " * 20 + "x()" + " | nothing()" * 20
    assert str(error_for(text)) == (
        f"unknown selector 'x'; known selectors: {KNOWN}\n"
        "  ...thing() | nothing() | x() | nothing() | nothing() | nothing() | nothin...\n"
        + " " * 27 + "^")
    # near the end, the columns left after the caret go before it: 59 before, 'trainabel()' after
    text = "scope('" + "a" * 200 + "') | trainabel()"
    assert str(error_for(text)) == (
        "unknown selector 'trainabel' — did you mean 'trainable'?\n"
        "  ..." + "a" * 54 + "') | trainabel()\n"
        + " " * 64 + "^")


def test_a_long_text_is_never_echoed_whole():
    word = "x" * 50_000
    error = error_for(word + "()")
    assert str(error) == (f"unknown selector '{'x' * 27}...'; known selectors: {KNOWN}\n"
                          f"  {'x' * 70}...\n"
                          "  ^")
    error = error_for("regex('" + "a" * 90_000 + "(?=b)')")
    assert len(str(error)) < 500 and error.column == 6 and error.text.endswith("(?=b)')")
    assert error.reason.startswith("unsupported regular expression: regex() runs on RE2, which has no lookahead: "
                                   "'(?=' at position 90000; ")


@pytest.mark.parametrize("value", [None, b"trainable()", 3, trainable()])
def test_non_text_is_a_type_error(value):
    with pytest.raises(TypeError) as error:
        parse(value)
    assert str(error.value) == f"parse() takes a str, got {type(value).__name__}"


# -- properties ---------------------------------------------------------------------

ARGUMENT = st.text(alphabet=st.one_of(st.characters(), st.sampled_from("'\"\\/ ")), max_size=16)


def _compiles(pattern):
    """Python compiles it and RE2 runs it: a pattern regex() takes."""
    try:
        re.compile(pattern)
        regex(pattern)
    except (re.error, OverflowError, RecursionError):  # UnsupportedRegexError is a re.error too
        return False
    return True


REGEX_ARGUMENT = st.one_of(
    ARGUMENT.map(re.escape),
    st.sampled_from([r"\d+", "^conv_[12]/", "(a|b)*$", r"\\", "'", '"', r"\'", r'\"', r"[\w.]+/(?:w|b)$"]),
    st.text(alphabet=string.ascii_letters + r"\'\"()[]|*+?.^$").filter(_compiles),
)


def _leaf(keyword):
    constructor, count = selectors.BUILTINS[keyword]
    if count is None:
        return st.lists(ARGUMENT, min_size=1, max_size=4).map(lambda names: constructor(*names))
    argument = REGEX_ARGUMENT if keyword == "regex" else ARGUMENT
    return st.tuples(*[argument] * count).map(lambda arguments: constructor(*arguments))


def _combine(children):
    pairs = st.tuples(children, children)
    return st.one_of(
        pairs.map(lambda p: p[0] | p[1]),
        pairs.map(lambda p: p[0] ^ p[1]),
        pairs.map(lambda p: p[0] & p[1]),
        pairs.map(lambda p: p[0] - p[1]),
        children.map(lambda c: ~c),
    )


SELECTORS = st.recursive(st.one_of([_leaf(keyword) for keyword in selectors.BUILTINS]), _combine, max_leaves=10)


DSL_CHARACTERS = "()|&^-~'\" ,\\abcdeghilmnoprstuvx_/*.$[]+{}\n0123"
TOKENS = [*selectors.BUILTINS, "trainable()", "scope('a/b')", "variables('a', \"b\")", "(", ")", "()", "|", "&", "^"]
TOKENS += ["-", "~", ",", " ", "'a/b'", '"c"', "'", '"', "\\", "x", "3"]


@st.composite
def mutated_selector_text(draw):
    """Valid text with a few small edits: reaches the errors deep inside an expression."""
    text = repr(draw(SELECTORS))
    for _ in range(draw(st.integers(1, 3))):
        start = draw(st.integers(0, len(text)))
        end = draw(st.integers(start, min(len(text), start + 3)))
        text = text[:start] + draw(st.sampled_from(["", *TOKENS])) + text[end:]
    return text


@FUZZ
@given(
    st.one_of(
        st.text(),
        st.text(alphabet=DSL_CHARACTERS),
        st.lists(st.sampled_from(TOKENS)).map("".join),
        mutated_selector_text(),
    )
)
def test_any_text_parses_or_raises_a_syntax_error(text):
    try:
        result = parse(text)
    except SelectorSyntaxError as error:
        assert 0 <= error.column <= len(text) and error.text == text and error.reason
    else:
        assert isinstance(result, Selector)
        assert parse(repr(result)) == result


@FUZZ
@given(SELECTORS)
def test_text_round_trips(selector):
    text = repr(selector)
    assert parse(text) == selector
    assert repr(parse(text)) == text


@FUZZ
@given(ARGUMENT)
def test_any_string_round_trips_through_quoting(value):
    assert parse(repr(name(value))).pattern == value
    assert parse(repr(scope(value))) == scope(value)
