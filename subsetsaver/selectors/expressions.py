"""Selectors: small immutable values that describe a set of variables.

A selector never touches TensorFlow. It is evaluated against a catalog (see
``catalog.py``), which knows every variable's name, collections and roles.

Example::

    sel = trainable() | scope('conv_1/bn') - scope('opt')
    sel
    # trainable() | scope('conv_1/bn') - scope('opt')
    sel.resolve(graph)          # -> [tf.Variable, ...] in creation order
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from typing import Iterable

from .. import catalog as catalog_module
from .. import tf_internals
from ..errors import EmptySelectionError, Fix
from .patterns import compile_regex, glob_matcher, glob_selector, regex_selector
from .sizes import format_bytes

# Binding strength, the same as Python's operators, so text and code mean the same.
_UNION, _XOR, _AND, _SUB, _UNARY, _ATOM = range(1, 7)


class Selector:
    """Base of every selector: set operators, evaluation, text form."""

    precedence = _ATOM

    # -- operators only build new values ----------------------------------------
    def __or__(self, other):
        return Union.of(self, _as_selector(other))

    def __and__(self, other):
        return Intersection.of(self, _as_selector(other))

    def __sub__(self, other):
        return Difference(self, _as_selector(other))

    def __xor__(self, other):
        return SymmetricDifference.of(self, _as_selector(other))

    def __invert__(self):
        return Complement(self)

    # -- evaluation ---------------------------------------------------------------
    def evaluate(self, catalog) -> frozenset:
        """The set of variable names this selector picks from ``catalog``."""
        raise NotImplementedError

    def children(self) -> tuple:
        return ()

    def leaves(self):
        """Every leaf term, depth first, left to right."""
        kids = self.children()
        if not kids:
            yield self
        for kid in kids:
            yield from kid.leaves()

    def names(self, source=None, *, allow_empty=False) -> list:
        """Chosen variable names in creation order.

        ``source`` is anything ``catalog.load`` accepts: a ``tf.Graph`` (None means
        the default graph), a ``.meta`` file, a checkpoint, or a catalog.

        trainable().names(graph)
        # ['conv_1/w', 'conv_1/b', ...]
        """
        catalog = source if isinstance(source, catalog_module.Catalog) else catalog_module.load(source)
        chosen = catalog.in_order(self.evaluate(catalog))
        if not chosen and not allow_empty and not _asks_for_nothing(self):
            raise EmptySelectionError(_empty_message(self, catalog), fixes=[ALLOW_EMPTY])
        return chosen

    def resolve(self, graph=None, *, allow_empty=False) -> list:
        """The chosen ``tf.Variable`` objects of ``graph``, in creation order.

        A partitioned variable contributes all of its parts. Raises
        ``EmptySelectionError`` when nothing matches, unless ``allow_empty``.
        """
        catalog = catalog_module.load(graph)
        return catalog.variables(self.names(catalog, allow_empty=allow_empty))

    def explain(self, graph=None) -> str:
        """The expression tree with the variable count and bytes at every node.

        print((trainable() - scope('opt')).explain(graph))
        # trainable() - scope('opt')    8 variables   3.2 MB
        # ├── trainable()              8 variables   3.2 MB
        # └── scope('opt')             9 variables   6.4 MB
        """
        catalog = catalog_module.load(graph)
        rows = []
        self._explain_rows(catalog, "", "", rows)
        width = max(len(label) for label, _ in rows)
        return "\n".join(f"{label.ljust(width)}  {stats}" for label, stats in rows)

    def _explain_rows(self, catalog, prefix, child_prefix, rows):
        chosen = self.evaluate(catalog)
        count = len(chosen)
        stats = f"{count:>6} variable{'s' if count != 1 else ' '}  {format_bytes(catalog.nbytes(chosen)):>10}"
        note = self._source_note(catalog)
        if note:
            stats += f"  ({note})"
        rows.append((prefix + _text(self), stats))
        kids = self.children()
        for position, kid in enumerate(kids):
            last = position == len(kids) - 1
            kid._explain_rows(
                catalog,
                child_prefix + ("└── " if last else "├── "),
                child_prefix + ("    " if last else "│   "),
                rows,
            )

    def _source_note(self, catalog):
        return ""

    # -- text ---------------------------------------------------------------------
    def __repr__(self):
        return _text(self)

    def __bool__(self):
        raise TypeError(
            "a selector has no truth value; use `a | b`, `a & b` or `~a` instead of `or`, `and`, `not`"
        )


def _text(selector) -> str:
    return selector.to_text()


def _wrapped(selector, minimum) -> str:
    text = _text(selector)
    return f"({text})" if selector.precedence < minimum else text


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _as_selector(value):
    if isinstance(value, Selector):
        return value
    raise TypeError(f"expected a selector, got {type(value).__name__}: {value!r}")


# ---------------------------------------------------------------------------------
# Leaf terms
# ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, repr=False)
class _Leaf(Selector):
    """A named built-in with zero or more string arguments."""

    keyword = ""

    def arguments(self) -> tuple:
        return tuple(getattr(self, field.name) for field in dataclasses.fields(self))

    def to_text(self) -> str:
        args = self.arguments()
        if len(args) == 1 and isinstance(args[0], tuple):
            args = args[0]
        return f"{self.keyword}({', '.join(_quote(a) for a in args)})"


@dataclasses.dataclass(frozen=True, repr=False)
class Everything(_Leaf):
    keyword = "everything"

    def evaluate(self, catalog):
        return catalog.all_names


@dataclasses.dataclass(frozen=True, repr=False)
class Nothing(_Leaf):
    keyword = "nothing"

    def evaluate(self, catalog):
        return frozenset()


@dataclasses.dataclass(frozen=True, repr=False)
class Collection(_Leaf):
    key: str
    keyword = "collection"

    def evaluate(self, catalog):
        return catalog.collection(self.key)

    def _source_note(self, catalog):
        return catalog.collection_note(self.key)


@dataclasses.dataclass(frozen=True, repr=False)
class Trainable(_Leaf):
    keyword = "trainable"

    def evaluate(self, catalog):
        return catalog.collection("trainable_variables")

    def _source_note(self, catalog):
        return catalog.collection_note("trainable_variables")


@dataclasses.dataclass(frozen=True, repr=False)
class Local(_Leaf):
    keyword = "local"

    def evaluate(self, catalog):
        return catalog.collection("local_variables")


@dataclasses.dataclass(frozen=True, repr=False)
class Scope(_Leaf):
    """Variables at or under ``path``, matched at '/' boundaries."""

    path: str
    keyword = "scope"

    def __post_init__(self):
        object.__setattr__(self, "path", self.path.strip("/"))

    def evaluate(self, catalog):
        if not self.path:
            return catalog.all_names
        under, path = self.path + "/", self.path

        def select(names):
            found = [name for name in names if name.startswith(under)]
            return found + [path] if path in names else found

        return _matching(catalog, self, select)


@dataclasses.dataclass(frozen=True, repr=False)
class Name(_Leaf):
    """Glob on the full variable name, segment by segment (``*`` stays within a '/'-segment, ``**``
    crosses them; see :func:`patterns.glob_to_regex`): ``name('**/moving_*')``."""

    pattern: str
    keyword = "name"

    def __post_init__(self):
        glob_matcher(self.pattern)  # a glob too large for RE2 fails here, not when resolved

    def evaluate(self, catalog):
        # in time linear in the glob and the name
        return _matching(catalog, self, glob_selector(self.pattern))


@dataclasses.dataclass(frozen=True, repr=False)
class Regex(_Leaf):
    """``re.search`` on the full variable name, run on RE2: linear in the name's length, never a hang.

    A pattern fails at construction: ``InvalidRegexError`` if Python's ``re`` rejects it,
    ``UnsupportedRegexError`` if it needs what RE2 lacks (backreferences, lookaround, ...; see
    :mod:`patterns`). Both are ``SelectorSyntaxError`` and ``re.error``.
    """

    pattern: str
    keyword = "regex"

    def __post_init__(self):
        compile_regex(self.pattern)

    def evaluate(self, catalog):
        return _matching(catalog, self, regex_selector(self.pattern))


# Role -> its selector's name, from the catalog's one table of roles.
_ROLE_SELECTORS = {role.name: role.selector for role in catalog_module.ROLE_TABLE if role.selector}


@dataclasses.dataclass(frozen=True, repr=False)
class RoleSelector(_Leaf):
    """The variables of one role of :data:`subsetsaver.catalog.ROLE_TABLE`: ``slots()``, ``bn_stats()``, ..."""

    role: str

    @property
    def keyword(self) -> str:
        return _ROLE_SELECTORS[self.role]

    def arguments(self) -> tuple:
        return ()

    def evaluate(self, catalog):
        return catalog.role(self.role)

    def _source_note(self, catalog):
        return catalog.role_note(self.role)


@dataclasses.dataclass(frozen=True, repr=False)
class Variables(_Leaf):
    """An explicit list of variables, kept by name."""

    names_: tuple
    keyword = "variables"

    def evaluate(self, catalog):
        return frozenset(n for n in self.names_ if n in catalog.all_names)


# ---------------------------------------------------------------------------------
# Combinators
# ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, repr=False)
class _Flat(Selector):
    """An associative operator over two or more terms: ``a | b | c`` is one node."""

    terms: tuple
    symbol = ""

    @classmethod
    def of(cls, *terms):
        flat = []
        for term in terms:
            flat.extend(term.terms if type(term) is cls else (term,))
        return cls(tuple(flat))

    def children(self):
        return self.terms

    def to_text(self):
        return f" {self.symbol} ".join(_wrapped(t, self.precedence + 1) for t in self.terms)


@dataclasses.dataclass(frozen=True, repr=False)
class Union(_Flat):
    symbol, precedence = "|", _UNION

    def evaluate(self, catalog):
        return frozenset().union(*(t.evaluate(catalog) for t in self.terms))


@dataclasses.dataclass(frozen=True, repr=False)
class SymmetricDifference(_Flat):
    symbol, precedence = "^", _XOR

    def evaluate(self, catalog):
        result = frozenset()
        for term in self.terms:
            result ^= term.evaluate(catalog)
        return result


@dataclasses.dataclass(frozen=True, repr=False)
class Intersection(_Flat):
    symbol, precedence = "&", _AND

    def evaluate(self, catalog):
        return frozenset.intersection(*(t.evaluate(catalog) for t in self.terms))


@dataclasses.dataclass(frozen=True, repr=False)
class Difference(Selector):
    left: Selector
    right: Selector
    precedence = _SUB

    def children(self):
        return (self.left, self.right)

    def evaluate(self, catalog):
        return self.left.evaluate(catalog) - self.right.evaluate(catalog)

    def to_text(self):
        return f"{_wrapped(self.left, _SUB)} - {_wrapped(self.right, _SUB + 1)}"


@dataclasses.dataclass(frozen=True, repr=False)
class Complement(Selector):
    term: Selector
    precedence = _UNARY

    def children(self):
        return (self.term,)

    def evaluate(self, catalog):
        return catalog.all_names - self.term.evaluate(catalog)

    def to_text(self):
        return "~" + _wrapped(self.term, _UNARY)


# ---------------------------------------------------------------------------------
# Public constructors (the DSL's built-ins)
# ---------------------------------------------------------------------------------


def everything() -> Selector:
    """Every variable of the graph, global and local."""
    return Everything()


def nothing() -> Selector:
    """No variable; resolving it is never an error."""
    return Nothing()


def trainable() -> Selector:
    """The TRAINABLE_VARIABLES collection."""
    return Trainable()


def local() -> Selector:
    """The LOCAL_VARIABLES collection."""
    return Local()


def collection(key: str) -> Selector:
    """Any graph collection: ``collection('model_variables')``."""
    return Collection(_string("collection", key))


def scope(path: str) -> Selector:
    """Variables under ``path`` at '/' boundaries: ``scope('conv_1')`` never matches ``conv_10/w``."""
    return Scope(_string("scope", path))


def name(glob: str) -> Selector:
    """Glob on the full name, ``*`` within one '/'-segment and ``**`` across: ``name('**/moving_*')``."""
    return Name(_string("name", glob))


def regex(pattern: str) -> Selector:
    """``re.search`` on the full name: ``regex('^conv_[12]/')``, run on RE2 (linear time); refuses what
    RE2 lacks, such as the lookahead in ``a(?!b)`` (write ``regex('a') - regex('ab')``)."""
    return Regex(_string("regex", pattern))


def slots() -> Selector:
    """Optimizer state: slot variables and the optimizer's own variables (its hyperparameters too),
    found from its update ops."""
    return RoleSelector("slot")


def bn_stats() -> Selector:
    """Batch-norm statistics (moving mean/variance, moving averages of batch moments)."""
    return RoleSelector("bn_stat")


def averages() -> Selector:
    """ExponentialMovingAverage shadow variables."""
    return RoleSelector("average")


def global_step() -> Selector:
    """The global step variable."""
    return RoleSelector("global_step")


def variables(vars_or_names: Iterable) -> Selector:
    """An explicit list of ``tf.Variable`` objects or variable names.

    variables([w, b])
    # variables('fc/w', 'fc/b')
    """
    if isinstance(vars_or_names, str):
        vars_or_names = [vars_or_names]
    names = []
    for item in vars_or_names:
        names.append(item if isinstance(item, str) else variable_name(item))
    if not names:
        raise ValueError("variables() needs at least one variable; use nothing() for an empty selection")
    return Variables(tuple(dict.fromkeys(names)))


def variable_name(variable) -> str:
    """The name subsetsaver uses for a variable: its op name, no ':0'; partitions use the full name."""
    slice_info = tf_internals.slice_info(variable)
    if slice_info is not None:
        return slice_info.full_name
    text = getattr(variable, "name", None)
    if not isinstance(text, str):
        raise TypeError(f"expected a tf.Variable or a name, got {type(variable).__name__}")
    return text[:-2] if text.endswith(":0") else text


def _string(keyword, value):
    if not isinstance(value, str):
        raise TypeError(f"{keyword}() takes a string, got {type(value).__name__}: {value!r}")
    return value


BUILTINS = {
    "everything": (everything, 0),
    "nothing": (nothing, 0),
    "trainable": (trainable, 0),
    "local": (local, 0),
    "collection": (collection, 1),
    "scope": (scope, 1),
    "name": (name, 1),
    "regex": (regex, 1),
    **{keyword: (functools.partial(RoleSelector, role), 0) for role, keyword in _ROLE_SELECTORS.items()},
    "variables": (lambda *names: variables(names), None),
}
"""Built-in name -> (constructor, number of string arguments; None means one or more)."""


# ---------------------------------------------------------------------------------
# Helpers shared with the rest of the library
# ---------------------------------------------------------------------------------


def _matching(catalog, leaf, select) -> frozenset:
    """The names of ``catalog`` that ``select(names)`` picks: once per catalog and leaf when the catalog
    caches (:meth:`subsetsaver.catalog.Catalog.names_matching`), else over every name."""
    cached = getattr(catalog, "names_matching", None)
    if cached is not None:
        return cached(leaf, select)
    return frozenset(select(catalog.all_names))


def _asks_for_nothing(selector) -> bool:
    return all(isinstance(leaf, Nothing) for leaf in selector.leaves())


ALLOW_EMPTY = Fix("allow_empty", True, "(or use nothing()) if an empty selection is intended")


def _empty_message(selector, catalog) -> str:
    empty_terms = [leaf for leaf in selector.leaves() if not leaf.evaluate(catalog)]
    lines = [f"selector {selector!r} matches no variable."]
    for leaf in dict.fromkeys(empty_terms):
        hint = closest_names(leaf, catalog)
        lines.append(f"  {leaf!r} matches nothing" + (f"; closest names: {', '.join(hint)}" if hint else ""))
    if not empty_terms:
        lines.append("  every term matches something, but the operators leave nothing (check '-' and '&')")
    return "\n".join(lines)


def closest_names(leaf, catalog) -> list:
    wanted = getattr(leaf, "path", None) or getattr(leaf, "pattern", None)
    if isinstance(leaf, Variables):
        wanted = leaf.names_[0] if leaf.names_ else None
    if not wanted:
        return []
    candidates = set(catalog.all_names)
    for full in catalog.all_names:
        parts = full.split("/")
        candidates.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return difflib.get_close_matches(wanted, sorted(candidates), n=3, cutoff=0.6)
