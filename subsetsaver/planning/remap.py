"""Remap rules: reading a checkpoint whose names differ from the graph's.

``remap`` takes ``init_from_checkpoint``'s assignment-map rules (``{checkpoint: graph}``,
scopes end in ``/``). :func:`checkpoint_names` applies them with checks (unused rules,
collisions); :func:`suggest_remap` proposes a scope rule that explains missing names, and
only one that following leaves fewer problems (shapes and dtypes checked);
:func:`nearest_names` finds the closest held name for each missing one.

Example::

    >>> checkpoint_names(['net/conv/w', 'head/b'], {'model/': 'net/'})
    {'net/conv/w': 'model/conv/w', 'head/b': 'head/b'}
"""

from __future__ import annotations

import difflib

from ..errors import RemapRuleError
from ..selectors import variable_name
from .reports import compare_spec

_DIFFLIB_BUDGET = 250_000  # name comparisons; past this, nearest-name hints are skipped
_CANDIDATES = 5  # scope rules checked against the whole plan, the most voted first


def checkpoint_names(names, remap=None) -> dict:
    """Variable name -> checkpoint name under ``remap`` (``{checkpoint: graph}`` rules).

    ``{'old/': 'new/'}`` reads every variable under ``new/`` from ``old/`` + the rest of
    its name; ``'/'`` stands for the root on either side; ``{'old/w': 'new/w'}`` maps one
    variable (the value may also be a ``tf.Variable``). A name rule beats a scope rule,
    and the longest matching scope wins; variables no rule covers keep their names.

    >>> checkpoint_names(['net/conv/w', 'head/b'], {'model/': 'net/'})
    {'net/conv/w': 'model/conv/w', 'head/b': 'head/b'}
    """
    names = list(names)
    if not remap:
        return {name: name for name in names}
    pairs, scopes = _rules(remap)
    exact = {}
    for source, target in pairs:
        if target in exact:
            raise ValueError(f"remap reads {target} from both {exact[target]} and {source}; keep one rule for it")
        exact[target] = source
    scopes.sort(key=lambda rule: len(rule[1]), reverse=True)
    used, result = set(), {}
    for name in names:
        if name in exact:
            result[name] = exact[name]
            used.add(("name", name))
            continue
        for checkpoint_scope, graph_scope, source, _target in scopes:
            if name.startswith(graph_scope):
                result[name] = checkpoint_scope + name[len(graph_scope):]
                used.add(("scope", source))
                break
        else:
            result[name] = name
    unused = [(source, target) for target, source in exact.items() if ("name", target) not in used]
    unused += [(source, target) for _, _, source, target in scopes if ("scope", source) not in used]
    _refuse_unused(unused, "matches no variable the plan saves; the right-hand side names variables (or scopes "
                           "ending in '/') of the graph")
    return _one_to_one(result, "checkpoint name ")


def renamed_names(names, remap=None) -> dict:
    """Old name -> new name under ``remap`` (``{old: new}`` rules, the same rules as :func:`checkpoint_names`
    read forwards: a name rule beats a scope rule, the longest matching scope wins, names no rule
    covers keep theirs). A rule that renames nothing, or two names sent to one, is a ValueError.

    >>> renamed_names(['model/conv/w', 'head/b'], {'model/': 'net/'})
    {'model/conv/w': 'net/conv/w', 'head/b': 'head/b'}
    """
    names = list(names)
    pairs, scopes = _rules(remap or {})
    exact = dict(pairs)
    scopes.sort(key=lambda rule: len(rule[0]), reverse=True)
    used, result = set(), {}
    for name in names:
        if name in exact:
            result[name] = exact[name]
            used.add(name)
            continue
        for old_scope, new_scope, source, _target in scopes:
            if name.startswith(old_scope):
                result[name] = new_scope + name[len(old_scope):]
                used.add(source)
                break
        else:
            result[name] = name
    unused = [(source, target) for source, target in exact.items() if source not in used]
    unused += [(source, target) for _, _, source, target in scopes if source not in used]
    _refuse_unused(unused, "matches no name; the left-hand side names tensors (or scopes ending in '/') of the "
                           "checkpoint")
    return _one_to_one(result, "")


def _rules(remap):
    """``([(source name, target name)], [(source scope, target scope, source rule, target rule)])`` of
    ``remap``; '/' stands for the root, a ``tf.Variable`` for its name."""
    exact, scopes = [], []
    for source, target in dict(remap).items():
        if not isinstance(source, str):
            raise TypeError(f"remap keys are checkpoint names or scopes (str), got {type(source).__name__}: {source!r}")
        target = target if isinstance(target, str) else variable_name(target)
        if source.endswith("/") != target.endswith("/"):
            raise RemapRuleError([(source, target)], "mixes a scope and a name; map a scope to a scope ('old/': "
                                                     "'new/') or a name to a name ('old/w': 'new/w')")
        if source.endswith("/"):
            scopes.append(("" if source == "/" else source, "" if target == "/" else target, source, target))
        else:
            exact.append((source, target))
    return exact, scopes


def suggest_remap(missing, available, *, expected=None, contents=None):
    """The scope remap that explains most ``missing`` names by ``available`` ones, or (None, 0).

    The answer is checked before it is given: following it must leave fewer problems than
    now. With ``expected`` (every name the plan restores -> ``(shape, dtype)``) and
    ``contents`` (checkpoint name -> ``(shape, dtype)``), a name counts as found only when
    its shape and dtype match, and the names that match now must still match afterwards. A
    rule into the graph's root scope renames every variable, so it is suggested only when it
    explains most of the missing names. The number returned is how many missing names it finds.

    >>> suggest_remap(['net/a/w', 'net/b'], ['model/a/w', 'model/b'])
    ({'model/': 'net/'}, 2)
    >>> suggest_remap(['output_weights'], ['cls/seq_relationship/output_weights'],
    ...               expected={'output_weights': ((3, 16), 'float32'), 'bert/w': ((16, 16), 'float32')},
    ...               contents={'cls/seq_relationship/output_weights': ((2, 16), 'float32'),
    ...                         'bert/w': ((16, 16), 'float32')})
    (None, 0)
    """
    missing = list(missing)
    votes = _votes(missing, available)
    if not votes:
        return None, 0
    expected = dict.fromkeys(missing) if expected is None else dict(expected)
    contents = dict.fromkeys(available) if contents is None else contents
    before = _problems(expected, {name: name for name in expected}, contents)
    best = None
    ranked = sorted(votes.items(), key=lambda item: (-item[1], len(item[0][0]) + len(item[0][1])))
    for (source, target), _count in ranked[:_CANDIDATES]:
        rule = {(source + "/") if source else "/": (target + "/") if target else "/"}
        try:
            keys = checkpoint_names(expected, rule)
        except ValueError:  # the rule would send two variables to one checkpoint name
            continue
        resolves = sum(1 for name in missing if _fits(name, keys[name], expected, contents))
        if not resolves or (not target and 2 * resolves <= len(missing)):
            continue
        after = _problems(expected, keys, contents)
        if after < before and (best is None or after < best[0]):
            best = (after, rule, resolves)
    return (best[1], best[2]) if best else (None, 0)


def _votes(missing, available) -> dict:
    """(checkpoint scope, graph scope) -> how many missing names it would explain by name alone."""
    by_suffix = {}
    for name in available:
        parts = name.split("/")
        for cut in range(len(parts)):
            by_suffix.setdefault("/".join(parts[cut:]), set()).add("/".join(parts[:cut]))
    votes = {}
    for name in missing:
        parts = name.split("/")
        for cut in range(len(parts)):
            graph_scope = "/".join(parts[:cut])
            sources = by_suffix.get("/".join(parts[cut:]), set()) - {graph_scope}
            if sources:
                for source in sources:
                    # the same match, said by deeper scopes too: {'x/': '/'} or {'x/head/': 'head/'}
                    for depth in range(cut, len(parts)):
                        inner = "/".join(parts[cut:depth])
                        pair = ("/".join(filter(None, (source, inner))), "/".join(parts[:depth]))
                        votes[pair] = votes.get(pair, 0) + 1
                break
    return votes


def _fits(name, key, expected, contents) -> bool:
    """Whether checkpoint entry ``key`` can restore ``name``: present, and (when known) the same shape and dtype."""
    if key not in contents:
        return False
    spec, found = expected.get(name), contents[key]
    if spec is None or found is None:
        return True
    return compare_spec(name, key, spec[0], spec[1], found) is None


def _problems(expected, keys, contents) -> int:
    return sum(1 for name in expected if not _fits(name, keys[name], expected, contents))


def nearest_names(missing, candidates, remap) -> dict:
    """Missing checkpoint name -> the closest name the checkpoint holds (or absent).

    A suggested remap answers directly, then the same name under another scope; difflib
    (quadratic) only runs on small problems.
    """
    nearest = {}
    if remap:
        available = set(candidates)
        target = next(iter(remap.values()))
        covered = [name for name in missing if target == "/" or name.startswith(target)]
        nearest = {name: key for name, key in checkpoint_names(covered, remap).items() if key in available}
    rest = [name for name in missing if name not in nearest]
    if rest:  # the same name under another scope: 'output_bias' in 'cls/seq_relationship/output_bias'
        under_scope = {}
        for candidate in sorted(candidates, key=len, reverse=True):
            parts = candidate.split("/")
            for cut in range(1, len(parts)):
                under_scope["/".join(parts[cut:])] = candidate
        nearest.update((name, under_scope[name]) for name in rest if name in under_scope)
        rest = [name for name in rest if name not in nearest]
    if len(rest) * len(candidates) <= _DIFFLIB_BUDGET:
        for name in rest:
            close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
            if close:
                nearest[name] = close[0]
    return nearest


def _refuse_unused(unused, why):
    """RemapRuleError naming the remap rules in ``unused`` (``(old, new)`` pairs) and ``why`` they are wrong."""
    if unused:
        raise RemapRuleError(unused, why)


def _one_to_one(result, target_noun):
    """``result`` (name -> new name) when no two names get the same new name; else ValueError naming both."""
    taken = {}
    for name, new in result.items():
        if new in taken:
            raise ValueError(f"remap sends both {taken[new]} and {name} to {target_noun}{new}")
        taken[new] = name
    return result
