"""Remap rules: reading a checkpoint whose names differ from the graph's.

``remap`` takes ``init_from_checkpoint``'s assignment-map rules (``{checkpoint: graph}``,
scopes end in ``/``). :func:`checkpoint_names` applies them with checks (unused rules,
collisions); :func:`suggest_remap` proposes a scope rule that explains missing names;
:func:`nearest_names` finds the closest held name for each missing one.

Example::

    >>> checkpoint_names(['net/conv/w', 'head/b'], {'model/': 'net/'})
    {'net/conv/w': 'model/conv/w', 'head/b': 'head/b'}
"""

from __future__ import annotations

import difflib

from ..selectors import variable_name

_DIFFLIB_BUDGET = 250_000  # name comparisons; past this, nearest-name hints are skipped


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
    exact, scopes = {}, []
    for source, target in dict(remap).items():
        if not isinstance(source, str):
            raise TypeError(f"remap keys are checkpoint names or scopes (str), got {type(source).__name__}: {source!r}")
        target = target if isinstance(target, str) else variable_name(target)
        if source.endswith("/") != target.endswith("/"):
            raise ValueError(
                f"remap rule {source!r}: {target!r} mixes a scope and a name; "
                "map a scope to a scope ('old/': 'new/') or a name to a name ('old/w': 'new/w')"
            )
        if source.endswith("/"):
            scopes.append(("" if source == "/" else source, "" if target == "/" else target, source, target))
        else:
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
    unused = [f"{source!r}: {target!r}" for target, source in exact.items() if ("name", target) not in used]
    unused += [f"{source!r}: {target!r}" for _, _, source, target in scopes if ("scope", source) not in used]
    if unused:
        raise ValueError(
            f"remap rule {', '.join(unused)} matches no variable the plan saves; "
            "the right-hand side names variables (or scopes ending in '/') of the graph"
        )
    taken = {}
    for name, key in result.items():
        if key in taken:
            raise ValueError(f"remap sends both {taken[key]} and {name} to checkpoint name {key}")
        taken[key] = name
    return result


def suggest_remap(missing, available):
    """The scope remap that explains most ``missing`` names by ``available`` ones, or (None, 0).

    >>> suggest_remap(['net/a/w', 'net/b'], ['model/a/w', 'model/b'])
    ({'model/': 'net/'}, 2)
    """
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
                    votes[(source, graph_scope)] = votes.get((source, graph_scope), 0) + 1
                break
    if not votes:
        return None, 0
    (source, target), _ = max(votes.items(), key=lambda item: (item[1], -len(item[0][0]) - len(item[0][1])))
    rule = {(source + "/") if source else "/": (target + "/") if target else "/"}
    covered = [name for name in missing if name.startswith(target + "/" if target else "")]
    available = set(available)
    resolves = sum(1 for key in checkpoint_names(covered, rule).values() if key in available)
    return (rule, resolves) if resolves else (None, 0)


def nearest_names(missing, candidates, remap) -> dict:
    """Missing checkpoint name -> the closest name the checkpoint holds (or absent).

    A suggested remap answers directly; difflib (quadratic) only runs on small problems.
    """
    nearest = {}
    if remap:
        available = set(candidates)
        target = next(iter(remap.values()))
        covered = [name for name in missing if target == "/" or name.startswith(target)]
        nearest = {name: key for name, key in checkpoint_names(covered, remap).items() if key in available}
    rest = [name for name in missing if name not in nearest]
    if len(rest) * len(candidates) <= _DIFFLIB_BUDGET:
        for name in rest:
            close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
            if close:
                nearest[name] = close[0]
    return nearest
