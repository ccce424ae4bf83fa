"""Coverage: the target tensors a family's config implies, against the ones a map's rules produce.

A map's ``"targets"`` section names every tensor of the target model with its shape in terms of the
target config: fixed tensors, groups repeated by a config count (``{"repeat": {"layer":
"num_hidden_layers"}}`` fills ``{layer}`` with 0, 1, ...; ``{"block": [1, "stage2_blocks"]}`` with 1, 2, ... up
to that count), groups that apply only ``when`` config
values hold, and optional heads that are all or nothing (a head may infer config values from its
tensors, such as a classifier's ``num_labels``). :func:`check_coverage` compares that with what the
rules produce and refuses, with every problem in one :class:`~subsetsaver.errors.LayoutMapError`,
a checkpoint of another family, one that lacks tensors or holds extra ones, and tensors of the wrong
shape, rank or dtype. Nothing is written before it passes.

Example::

    coverage = check_coverage(layout, {"wte.weight": ((50257, 768), "float32"), ...},
                              {"vocab_size": 50257, "n_embd": 768, "n_layer": 12}, plan.source_name)
    coverage.heads, coverage.config_additions
    # ((), {})
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import math
import re

from ..errors import LayoutMapError
from .twins import no_twin_for

MAX_TARGETS = 1_000_000
"""Most target tensors a config may imply: a crafted config with 10**9 layers is refused, not expanded."""
_SHOWN = 3
_LONGEST_ITEM = 240
_LONGEST_MESSAGE = 1500
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::(0\d+|)d)?\}")
"""``{layer}`` is filled with 0, 1, ...; ``{layer:03d}`` with 000, 001, ..."""
_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)
_COMPARISONS = {ast.Eq: int.__eq__, ast.NotEq: int.__ne__, ast.Lt: int.__lt__, ast.LtE: int.__le__,
                ast.Gt: int.__gt__, ast.GtE: int.__ge__}


@dataclasses.dataclass(frozen=True)
class Coverage:
    """What a map produces for one checkpoint, checked: ``expected`` target name -> shape; ``heads``
    found; ``architecture`` (the class that holds every tensor, or None); ``config_additions`` (values
    the heads infer, written into the target config)."""

    expected: dict
    heads: tuple
    architecture: str | None
    config_additions: dict


def evaluate(expression, config, where="") -> int:
    """An integer from ``expression``: an int, or text over the config's integer keys with ``+ - * //``.

    >>> evaluate("3 * n_embd", {"n_embd": 8})
    24
    """
    if isinstance(expression, int) and not isinstance(expression, bool):
        return expression
    if not isinstance(expression, str) or len(expression) > 200:
        raise LayoutMapError(f"{where}: a size is an integer or an expression of config keys, not {expression!r:.80}")
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError):
        raise LayoutMapError(f"{where}: '{expression}' is not an expression of config keys") from None
    return _value(tree.body, config, expression, where)


def holds(condition, config, where="") -> bool:
    """Whether a group's ``when`` holds: ``{key: value, ...}`` (each config value equal), or a comparison of
    two expressions of config keys.

    >>> holds("embedding_size != hidden_size", {"embedding_size": 128, "hidden_size": 256})
    True
    """
    if isinstance(condition, dict):
        return all(config.get(key) == value for key, value in condition.items())
    try:
        tree = ast.parse(condition, mode="eval") if isinstance(condition, str) and len(condition) <= 200 else None
    except (SyntaxError, ValueError):
        tree = None
    body = tree.body if tree is not None else None
    if not (isinstance(body, ast.Compare) and len(body.ops) == 1 and type(body.ops[0]) in _COMPARISONS):
        raise LayoutMapError(f"{where}: \"when\" is {{key: value}} or a comparison such as \"embedding_size != "
                             f"hidden_size\", not {condition!r:.80}")
    left = _value(body.left, config, condition, where)
    return _COMPARISONS[type(body.ops[0])](left, _value(body.comparators[0], config, condition, where))


def _value(node, config, expression, where):
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        value = config.get(node.id)
        if type(value) is not int:
            found = "no such key" if node.id not in config else f"{value!r:.40}"
            raise LayoutMapError(f"{where}: '{expression}' needs the integer config key \"{node.id}\" ({found})",
                                 fix="give the family's own config file with --config")
        return value
    if isinstance(node, ast.BinOp) and isinstance(node.op, _OPERATORS):
        left, right = _value(node.left, config, expression, where), _value(node.right, config, expression, where)
        if isinstance(node.op, ast.FloorDiv):
            if right == 0:
                raise LayoutMapError(f"{where}: '{expression}' divides by zero with this config")
            return left // right
        return left + right if isinstance(node.op, ast.Add) else left - right if isinstance(node.op, ast.Sub) \
            else left * right
    raise LayoutMapError(f"{where}: '{expression}' may use integers, config keys, +, -, * and // only")


def expected_targets(targets, config, produced) -> tuple:
    """(target name -> (shape or None, phrase), heads found, architecture, inferred config) for ``config``;
    ``produced`` (target name -> (shape, dtype)) tells which heads are there and what they infer."""
    expected, read = {}, _group_readings(targets, config, produced)
    config = {**config, **read}
    unread = {key for key, size in read.items() if size is None}
    for number, group in enumerate(targets.get("groups", ()), start=1):
        _expand(group, config, expected, f"targets group {number}", unread=unread)
    heads, inferred, architecture = [], {key: size for key, size in read.items() if size is not None}, \
        targets.get("architecture")
    for head, declared in targets.get("heads", {}).items():
        if not any(name in produced for name in declared["tensors"]):
            continue
        heads.append(head)
        readings = {**declared.get("infer", {}), **declared.get("config", {})}
        if any(tensor not in produced for tensor, _ in readings.values()):
            expected.update((name, (None, f"the {head} head")) for name in declared["tensors"])
            continue
        context = {**config, **{key: produced[tensor][0][axis] if axis < len(produced[tensor][0]) else None
                                for key, (tensor, axis) in readings.items()}}
        inferred.update({key: context[key] for key in declared.get("config", {})})
        _expand(declared, context, expected, f"head '{head}'", head)
        architecture = declared.get("architecture", architecture)
    return expected, tuple(heads), architecture, inferred


def _group_readings(targets, config, produced) -> dict:
    """The sizes the groups read off their tensors (``"config": {"vocab_size": ["shared.weight", 0]}``),
    for the keys the config does not give; None for a tensor the checkpoint lacks."""
    read = {}
    for group in targets.get("groups", ()):
        for key, (tensor, axis) in group.get("config", {}).items():
            if key not in config:
                shape = produced[tensor][0] if tensor in produced else ()
                read[key] = shape[axis] if axis < len(shape) else None
    return read


def _expand(group, config, expected, where, head=None, unread=frozenset()):
    if "when" in group and not holds(group["when"], config, where):
        return
    bounds = {placeholder: [evaluate(bound, config, where) for bound in (count if isinstance(count, list) else [0, count])]
              for placeholder, count in group.get("repeat", {}).items()}
    ranges = {placeholder: range(first, stop) for placeholder, (first, stop) in bounds.items()}
    repeat = {placeholder: stop - first for placeholder, (first, stop) in bounds.items()}
    total = math.prod(repeat.values()) * len(group["tensors"])
    if any(count < 0 for count in repeat.values()) or total + len(expected) > MAX_TARGETS:
        raise LayoutMapError(f"{where}: the config's {_counts_text(repeat)} imply {total:,} tensors; at most "
                             f"{MAX_TARGETS:,} are converted", fix="check the config file")
    phrase = f"the {head} head" if head else f"the config's {_counts_text(repeat)}" if repeat else "the config"
    # a shape in a size read off a tensor the checkpoint lacks is unknown: the lack is the problem named
    shapes = {template: None if unread & _keys_in(shape) else tuple(evaluate(size, config, f"{where}, '{template}'")
                                                                  for size in shape)
              for template, shape in group["tensors"].items()}
    for values in itertools.product(*ranges.values()):
        filling = dict(zip(repeat, values))
        for template, shape in shapes.items():
            expected[_PLACEHOLDER.sub(lambda found, filling=filling: format(filling[found.group(1)],
                                                                             f"{found.group(2) or ''}d"), template)] \
                = (shape, phrase)


def _keys_in(shape) -> set:
    return {name for size in shape if isinstance(size, str) for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", size)}


def _counts_text(repeat) -> str:
    return " and ".join(f"{count:,} {placeholder}{'' if count == 1 else 's'}" for placeholder, count in repeat.items())


def check_coverage(layout, produced, config, source_name, unmapped=()) -> Coverage:
    """Compare ``produced`` (target name -> (shape, dtype), from the rules) with what ``config`` implies
    by ``layout``'s targets. ``source_name(target)`` names a target's source tensor (for a target no
    rule made, the name a rule would read it from); ``unmapped`` are source tensors no rule reads.
    Raises one :class:`LayoutMapError` listing every problem, or returns the :class:`Coverage`."""
    targets = layout.targets
    expected, heads, architecture, inferred = expected_targets(targets, config, produced)
    if len({targets["heads"][head].get("architecture") for head in heads} - {None}) > 1:
        raise LayoutMapError(f"this checkpoint holds the {' and '.join(heads)} heads, and no one "
                             f"{layout.family} class holds them all", fix="convert a copy without one of them")
    missing = [name for name in expected if name not in produced]
    extra = [name for name in produced if name not in expected]
    problems, fixes = [], []
    if missing:
        subjects = list(dict.fromkeys(expected[name][1] for name in missing))
        verb = "need" if len(subjects) > 1 or " and " in subjects[0] or subjects[0].endswith("s") else "needs"
        problems.append((f"lacks {_count(missing)} {' and '.join(subjects)} {verb}",
                         [source_name(name) for name in missing]))
    extra = [source_name(name) for name in extra] + list(unmapped)
    if extra:
        problems.append((f"holds {_count(extra)} the map and config do not describe", extra))
    shapes = [f"{source_name(name)} gives {name} {list(produced[name][0])} where the config implies "
              f"{list(expected[name][0])}" for name in produced if name in expected
              and expected[name][0] is not None and tuple(produced[name][0]) != expected[name][0]]
    if shapes:
        problems.append((f"has {_count(shapes)} of the wrong shape", shapes))
    if missing or shapes:
        fixes.append("convert a whole checkpoint of the family, or give the config that describes it with --config")
    if extra:
        fixes.append("drop the extra tensors in a copy of the map (its \"drop\"), or give them rules")
    dtypes = targets["dtypes"]
    wrong_dtypes = [f"{source_name(name)} is {produced[name][1]}" for name in produced if produced[name][1] not in dtypes]
    if wrong_dtypes:
        problems.append((f"has {_count(wrong_dtypes)} of a dtype the target does not take "
                         f"({', '.join(dtypes)} only)", wrong_dtypes))
        fixes.append("cast them to a float type first (subsetsaver rewrite --cast)")
    if problems:
        for shown in (_SHOWN, 1):  # the first few of each kind, or the first alone where that would pass 2 KB
            message = f"this {layout.family} checkpoint " + "; ".join(f"{text}: {_names(items, shown)}"
                                                                      for text, items in problems)
            if len(message) < _LONGEST_MESSAGE:
                break
        raise LayoutMapError(message, fix="; ".join(fixes))
    return Coverage(expected={name: shape for name, (shape, _) in expected.items()}, heads=heads,
                    architecture=architecture, config_additions=inferred)


def check_family(layout, read, unmapped, names=()):
    """Refuse a checkpoint most of whose tensors no rule reads (``read``: source names a rule read;
    ``unmapped``: those none did): it is of another family, whatever its config says. A family that the
    map's target library has no exact twin of (:mod:`.twins`; ``names``: every tensor name) is refused
    with the reason."""
    if len(read) < len(unmapped) or not read:
        twin = no_twin_for(names, layout.target.get("library"))
        if twin is not None:
            raise LayoutMapError(twin.message, fix=twin.fix)
        globs = [glob for rule in layout.rules for glob in rule.source_globs]
        raise LayoutMapError(f"this is not a {layout.family} checkpoint: it holds {_names(list(unmapped) or ['no tensor'])}"
                             f", where the map reads {_names(globs)}",
                             fix=f"use the map for this checkpoint's family; '{layout.name}' reads {layout.family}")


def _count(items) -> str:
    return f"{len(items):,} tensor{'' if len(items) == 1 else 's'}"


def _names(items, shown=_SHOWN) -> str:
    named = [item if len(item) <= _LONGEST_ITEM else item[:_LONGEST_ITEM - 3] + "..." for item in items[:shown]]
    more = f" and {len(items) - shown:,} more" if len(items) > shown else ""
    return ", ".join(named) + more
