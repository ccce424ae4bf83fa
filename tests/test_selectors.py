"""Selectors without TensorFlow: evaluated against a small fake catalog."""

import re
import types

import pytest

from subsetsaver.errors import EmptySelectionError, InvalidRegexError, SelectorSyntaxError, UnsupportedRegexError
from subsetsaver.selectors import (
    averages,
    bn_stats,
    collection,
    everything,
    global_step,
    local,
    name,
    nothing,
    regex,
    scope,
    slots,
    trainable,
    variables,
)
from subsetsaver.selectors import expressions as selectors

SIZES = {  # creation order, bytes
    "global_step": 8,
    "conv_1/w": 3456,
    "conv_1/b": 128,
    "conv_1/bn/beta": 128,
    "conv_1/bn/moving_mean": 128,
    "conv_10/w": 2_097_152,
    "opt/conv_1/w/Adam": 3456,
    "metrics/count": 4,
}


class FakeCatalog:
    """What selectors call on a catalog, and nothing more."""

    def __init__(self):
        self.all_names = frozenset(SIZES)
        self.collections = {
            "trainable_variables": {"conv_1/w", "conv_1/b", "conv_1/bn/beta", "conv_10/w"},
            "local_variables": {"metrics/count"},
            "model_variables": {"conv_1/w", "conv_1/bn/moving_mean"},
        }
        self.roles = {
            "slot": {"opt/conv_1/w/Adam"},
            "bn_stat": {"conv_1/bn/moving_mean"},
            "average": set(),
            "global_step": {"global_step"},
        }

    def in_order(self, names):
        return [n for n in SIZES if n in names]

    def nbytes(self, names):
        return sum(SIZES[n] for n in names)

    def collection(self, key):
        return frozenset(self.collections.get(key, ()))

    def collection_note(self, key):
        return "model_variables is empty in many graphs" if key == "model_variables" else ""

    def role(self, role):
        return frozenset(self.roles[role])

    def role_note(self, role):
        return "found from Adam update ops" if role == "slot" else ""

    def variables(self, names):
        return [f"<variable {n}>" for n in names]


@pytest.fixture
def catalog(monkeypatch):
    """A fake catalog; the selectors take it as a catalog (``catalog.load`` returns it unchanged too)."""
    fake_module = types.SimpleNamespace(load=lambda source: source, Catalog=FakeCatalog)
    monkeypatch.setattr(selectors, "catalog_module", fake_module)
    return FakeCatalog()


def chosen(selector, catalog):
    return sorted(selector.evaluate(catalog))


# -- leaves -------------------------------------------------------------------------


def test_scope_matches_at_slash_boundaries(catalog):
    under_conv_1 = ["conv_1/b", "conv_1/bn/beta", "conv_1/bn/moving_mean", "conv_1/w"]
    assert chosen(scope("conv_1"), catalog) == under_conv_1
    assert "conv_10/w" not in scope("conv_1").evaluate(catalog)
    assert chosen(scope("/conv_1/"), catalog) == under_conv_1
    assert chosen(scope("conv_1/b"), catalog) == ["conv_1/b"]  # not conv_1/bn/...
    assert chosen(scope("conv_1/w"), catalog) == ["conv_1/w"]  # a full name is its own scope
    assert chosen(scope("conv"), catalog) == []
    assert chosen(scope(""), catalog) == sorted(SIZES)


def test_scope_strips_slashes_so_equal_paths_are_equal():
    assert scope("/conv_1/") == scope("conv_1")
    assert repr(scope("/conv_1/")) == "scope('conv_1')"


def test_name_is_a_glob_on_the_full_name(catalog):
    assert chosen(name("**/moving_*"), catalog) == ["conv_1/bn/moving_mean"]
    assert chosen(name("conv_1?/w"), catalog) == ["conv_10/w"]
    assert chosen(name("conv_1/**"), catalog) == ["conv_1/b", "conv_1/bn/beta", "conv_1/bn/moving_mean", "conv_1/w"]
    assert chosen(name("conv_1"), catalog) == []  # the whole name must match


def test_regex_searches_anywhere_in_the_name(catalog):
    assert chosen(regex(r"_1\d/"), catalog) == ["conv_10/w"]
    assert chosen(regex("^conv_1/"), catalog) == ["conv_1/b", "conv_1/bn/beta", "conv_1/bn/moving_mean", "conv_1/w"]
    assert chosen(regex("Adam$"), catalog) == ["opt/conv_1/w/Adam"]


def test_regex_rejects_a_bad_pattern_at_construction():
    with pytest.raises(InvalidRegexError) as error:
        regex("(")
    assert isinstance(error.value, re.error) and isinstance(error.value, SelectorSyntaxError)
    assert (str(error.value), error.value.pattern, error.value.pos) == (
        "missing ), unterminated subpattern at position 0", "(", 0)


def test_regex_rejects_what_re2_cannot_run_at_construction():
    with pytest.raises(UnsupportedRegexError) as error:
        regex(r"^conv_1/(?!bn/)")
    assert str(error.value) == (
        "regex() runs on RE2, which has no lookahead: '(?!' at position 8; match a plain pattern and subtract "
        "instead, e.g. regex('a') - regex('ab')")
    assert isinstance(error.value, re.error) and isinstance(error.value, SelectorSyntaxError)


def test_the_fix_the_refusal_proposes_chooses_the_same(catalog):
    names = [n for n in SIZES if re.search(r"^conv_1/(?!bn/)", n)]
    assert chosen(regex("^conv_1/") - regex("^conv_1/bn/"), catalog) == sorted(names) == ["conv_1/b", "conv_1/w"]


def test_regex_and_name_keep_pythons_meaning_on_re2():
    names = ["größe/w", "straße_1/w", "a-b/w", "x/kernel\n", "x/kernel"]
    catalog = types.SimpleNamespace(all_names=frozenset(names))
    for pattern, expected in [(r"^\w+/w$", ["größe/w", "straße_1/w"]),  # \w is Unicode, as in Python
                              (r"kernel$", ["x/kernel", "x/kernel\n"]),  # '$' also before a final newline
                              (r"kernel\Z", ["x/kernel"])]:
        assert chosen(regex(pattern), catalog) == sorted(n for n in names if re.search(pattern, n)) == expected
    assert chosen(name("*e_[0-9]/?"), catalog) == ["straße_1/w"]


def test_collections_and_roles(catalog):
    assert chosen(everything(), catalog) == sorted(SIZES)
    assert chosen(nothing(), catalog) == []
    assert chosen(trainable(), catalog) == ["conv_1/b", "conv_1/bn/beta", "conv_1/w", "conv_10/w"]
    assert chosen(local(), catalog) == ["metrics/count"]
    assert chosen(collection("model_variables"), catalog) == ["conv_1/bn/moving_mean", "conv_1/w"]
    assert chosen(collection("no_such_collection"), catalog) == []
    assert chosen(slots(), catalog) == ["opt/conv_1/w/Adam"]
    assert chosen(bn_stats(), catalog) == ["conv_1/bn/moving_mean"]
    assert chosen(averages(), catalog) == []
    assert chosen(global_step(), catalog) == ["global_step"]


def test_variables_keeps_names_once_in_order_and_ignores_unknown_ones(catalog):
    class FakeVariable:
        name = "conv_1/b:0"

    class FakePartition:
        name = "big/part_0:0"
        _save_slice_info = types.SimpleNamespace(full_name="big")

    selector = variables(["conv_1/w", FakeVariable(), "conv_1/w", "missing/x"])
    assert selector.names_ == ("conv_1/w", "conv_1/b", "missing/x")
    assert repr(selector) == "variables('conv_1/w', 'conv_1/b', 'missing/x')"
    assert chosen(selector, catalog) == ["conv_1/b", "conv_1/w"]
    assert variables("conv_1/w") == variables(["conv_1/w"])
    assert selectors.variable_name(FakePartition()) == "big"
    with pytest.raises(TypeError) as error:
        selectors.variable_name(3)
    assert str(error.value) == "expected a tf.Variable or a name, got int"


def test_string_builtins_reject_other_types():
    with pytest.raises(TypeError) as error:
        scope(3)
    assert str(error.value) == "scope() takes a string, got int: 3"


# -- operators ----------------------------------------------------------------------


def test_every_operator_computes_its_set(catalog):
    conv_1, trained = scope("conv_1"), trainable()
    assert chosen(conv_1 | slots(), catalog) == chosen(conv_1, catalog) + ["opt/conv_1/w/Adam"]
    assert chosen(conv_1 & trained, catalog) == ["conv_1/b", "conv_1/bn/beta", "conv_1/w"]
    assert chosen(trained - conv_1, catalog) == ["conv_10/w"]
    assert chosen(conv_1 ^ trained, catalog) == ["conv_1/bn/moving_mean", "conv_10/w"]
    assert chosen(conv_1 ^ trained ^ bn_stats(), catalog) == ["conv_10/w"]
    assert chosen(~trained, catalog) == ["conv_1/bn/moving_mean", "global_step", "metrics/count", "opt/conv_1/w/Adam"]
    assert chosen(~~trained, catalog) == chosen(trained, catalog)


def test_operators_reject_non_selectors():
    with pytest.raises(TypeError) as error:
        trainable() | "scope('a')"
    assert str(error.value) == "expected a selector, got str: \"scope('a')\""


def test_associative_operators_flatten():
    a, b, c = trainable(), scope("x"), slots()
    for op, cls, symbol in [
        (lambda x, y: x | y, selectors.Union, "|"),
        (lambda x, y: x & y, selectors.Intersection, "&"),
        (lambda x, y: x ^ y, selectors.SymmetricDifference, "^"),
    ]:
        left, right = op(op(a, b), c), op(a, op(b, c))
        assert left == right == cls((a, b, c))
        assert repr(left) == f"trainable() {symbol} scope('x') {symbol} slots()"
    assert (a - b) - c != a - (b - c)  # '-' is not associative and never flattens


def test_repr_parenthesizes_only_where_needed():
    a, b, c = trainable(), scope("x"), slots()
    cases = {
        (a | b) - c: "(trainable() | scope('x')) - slots()",
        a | b - c: "trainable() | scope('x') - slots()",
        a - (b - c): "trainable() - (scope('x') - slots())",
        a - b - c: "trainable() - scope('x') - slots()",
        ~(a | b): "~(trainable() | scope('x'))",
        ~(a - b): "~(trainable() - scope('x'))",
        ~a - b: "~trainable() - scope('x')",
        a - ~b: "trainable() - ~scope('x')",
        ~~a: "~~trainable()",
        a & (b ^ c): "trainable() & (scope('x') ^ slots())",
        a & b ^ c: "trainable() & scope('x') ^ slots()",
        (a - b) & c: "trainable() - scope('x') & slots()",
        (a | b) & (b | c): "(trainable() | scope('x')) & (scope('x') | slots())",
    }
    for selector, text in cases.items():
        assert repr(selector) == text


def test_repr_quotes_strings_so_they_read_back():
    assert repr(name("it's")) == r"name('it\'s')"
    assert repr(regex(r"\d+")) == r"regex('\\d+')"
    assert repr(scope('say "hi"')) == "scope('say \"hi\"')"


def test_equality_and_hashing_are_structural():
    assert scope("a") == scope("a") and hash(scope("a")) == hash(scope("a"))
    assert scope("a") != name("a")
    assert everything() != nothing()
    assert trainable() | scope("a") != scope("a") | trainable()  # same set, different expression
    assert len({trainable() - scope("a"), trainable() - scope("a"), ~trainable()}) == 2
    with pytest.raises(AttributeError):
        scope("a").path = "b"


def test_a_selector_has_no_truth_value():
    message = "a selector has no truth value; use `a | b`, `a & b` or `~a` instead of `or`, `and`, `not`"
    for selector in (trainable(), trainable() | scope("a"), ~nothing()):
        with pytest.raises(TypeError) as error:
            bool(selector)
        assert str(error.value) == message
    with pytest.raises(TypeError):
        trainable() or scope("a")


def test_leaves_are_listed_left_to_right():
    selector = trainable() - scope("a") | ~slots()
    assert list(selector.leaves()) == [trainable(), scope("a"), slots()]


# -- names, resolve, explain --------------------------------------------------------


def test_names_come_in_creation_order(catalog):
    assert (trainable() | global_step()).names(catalog) == ["global_step", "conv_1/w", "conv_1/b", "conv_1/bn/beta", "conv_10/w"]
    assert scope("conv_1/bn").resolve(catalog) == ["<variable conv_1/bn/beta>", "<variable conv_1/bn/moving_mean>"]


def test_an_empty_selection_is_an_error_that_suggests_names(catalog):
    with pytest.raises(EmptySelectionError) as error:
        scope("conv1/bn").names(catalog)
    assert str(error.value) == (
        "selector scope('conv1/bn') matches no variable.\n"
        "  scope('conv1/bn') matches nothing; closest names: conv_1/bn, conv_1/b, conv_1/w\n"
        "Pass allow_empty=True (or use nothing()) if an empty selection is intended."
    )
    assert isinstance(error.value, LookupError)


def test_an_empty_result_of_non_empty_terms_blames_the_operators(catalog):
    with pytest.raises(EmptySelectionError) as error:
        (scope("conv_1") & scope("opt")).resolve(catalog)
    assert str(error.value) == (
        "selector scope('conv_1') & scope('opt') matches no variable.\n"
        "  every term matches something, but the operators leave nothing (check '-' and '&')\n"
        "Pass allow_empty=True (or use nothing()) if an empty selection is intended."
    )


def test_an_empty_selection_is_fine_when_asked_for(catalog):
    assert scope("conv1/bn").names(catalog, allow_empty=True) == []
    assert averages().resolve(catalog, allow_empty=True) == []
    assert nothing().names(catalog) == []
    assert (nothing() | nothing()).names(catalog) == []


def test_explain_shows_counts_sizes_and_notes(catalog):
    selector = trainable() - scope("conv_1/bn") | slots()
    assert selector.explain(catalog) == (
        "trainable() - scope('conv_1/bn') | slots()       4 variables      2.0 MB\n"
        "├── trainable() - scope('conv_1/bn')             3 variables      2.0 MB\n"
        "│   ├── trainable()                              4 variables      2.0 MB\n"
        "│   └── scope('conv_1/bn')                       2 variables       256 B\n"
        "└── slots()                                      1 variable       3.4 KB  (found from Adam update ops)"
    )
    assert collection("model_variables").explain(catalog) == (
        "collection('model_variables')       2 variables      3.5 KB  (model_variables is empty in many graphs)"
    )


@pytest.mark.parametrize(
    "count, text",
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KB"), (13_100_491, "12.5 MB"), (3 * 1024**4, "3072.0 GB")],
)
def test_format_bytes(count, text):
    assert selectors.format_bytes(count) == text
