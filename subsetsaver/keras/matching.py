"""Which checkpoint tensor each model weight and optimizer variable reads, and every difference.

Three ways to pair a model's weights with a checkpoint's:

* by object path (:func:`match_by_object_path`, ``match="auto"``): in an object-based checkpoint
  (tf.keras ``save_weights``, ``tf.train.Checkpoint``), a Keras model's weight reads the tensor at
  its own dependency path (``layer_with_weights-0/kernel``: the Nth layer that has weights, then
  the weight's attribute), as TensorFlow 2 restores; what has no such path is paired by name;

* by name (:func:`match_by_name`): a weight reads the tensor of its own name (``conv/kernel``),
  or of its tf_keras name where the checkpoint holds only that (``dw/depthwise_kernel``:
  :func:`with_legacy_names`), or the one ``remap`` rules (``{checkpoint scope or name: model scope or name}``, the
  planner's rules: :func:`subsetsaver.planning.checkpoint_names`) send it to;
* by order (:func:`match_by_order`): the Nth weight of ``model.weights`` reads the Nth
  weight of the checkpoint in its graph's creation order (:func:`checkpoint_order`).

Optimizer slots follow their weights (:func:`match_optimizer`): the slots of the checkpoint
variable a weight reads fill that weight's slots of the same kind; the iteration counter
reads the checkpoint's step. Every difference is a :class:`Finding`: a
:class:`subsetsaver.planning.Problem` and what else a reader needs to know.

Example::

    pairing = match_by_name(weights, view, chosen, {'conv_1/w': 'conv/kernel'})
    pairing.keys['conv/kernel'], pairing.findings
    # ('conv_1/w', [])
"""

from __future__ import annotations

import collections
import dataclasses
import os

from .. import catalog as catalog_module
from .. import storage
from ..errors import RemapRuleError
from ..planning import Problem, checkpoint_names, compare_contents, suggest_remap
from .checkpoint_side import slot_kind
from .legacy_names import legacy_key


@dataclasses.dataclass(frozen=True)
class Finding:
    """One difference: ``problem`` (its kind, names, shapes, dtypes) and ``note``, said after it."""

    problem: Problem
    note: str = ""

    @property
    def kind(self) -> str:
        return self.problem.kind


@dataclasses.dataclass(frozen=True)
class Pairing:
    """``keys``: model name -> checkpoint name (every paired variable, fitting or not);
    ``findings``; ``remap``/``resolves``: a suggested remap and how many missing names it
    finds; ``order_source``: where the checkpoint's order came from (match='order')."""

    keys: dict
    findings: list
    remap: dict | None = None
    resolves: int = 0
    order_source: str | None = None
    by_object_path: bool = False

    @property
    def bad(self) -> set:
        """Model names with a missing, shape or dtype finding."""
        return {f.problem.name for f in self.findings if f.kind != "unexpected"}


def match_by_name(weights, view, chosen, remap) -> Pairing:
    """Pair each of ``chosen`` (model weight names) with its checkpoint name under ``remap``."""
    names = list(weights.variables)
    _check_rules_used(names, remap, weights.label)
    keys = with_legacy_names(checkpoint_names(names, remap), weights, view)
    expected = [expected_spec(weights, view, name, keys[name]) for name in chosen]
    findings = [Finding(problem) for problem in compare_contents(expected, view.contents)]
    read = set(keys.values())
    unmatched = [name for name in view.weights if name not in read]
    suggestion, resolves = _suggestion(weights, view, chosen, remap, keys, findings, unmatched)
    findings += [_unexpected(view, name, "no model variable reads it") for name in unmatched]
    return Pairing(keys, findings, suggestion, resolves)


def match_by_object_path(model, weights, view, chosen, remap) -> Pairing:
    """Pair by the object graph's dependency paths where the checkpoint has them, then by name
    (``match="auto"``); a name-based checkpoint is paired by name alone."""
    by_path = {}
    for name in view.catalog.ordered_names:
        path = view.catalog.entry(name).object_path
        if path is not None and name in view.weights:
            by_path[path] = name
    paths = object_paths(model) if by_path else {}
    found = {}
    for name, variable in weights.variables.items():
        path = paths.get(id(variable))
        key = by_path.get(path)
        if key is None and path is not None and name in weights.tf_keras.names:
            key = by_path.get(legacy_key(path, weights.tf_keras.names[name]))
        if key is not None:
            found[name] = key
    if not found or (remap and any(name in found for name in chosen)):
        return match_by_name(weights, view, chosen, remap)  # remap rules speak of names
    rest = {name: weights.variables[name] for name in weights.variables if name not in found}
    keys = {**with_legacy_names(checkpoint_names(list(rest), remap), weights, view), **found}
    expected = [expected_spec(weights, view, name, keys[name]) for name in chosen]
    findings = [Finding(problem) for problem in compare_contents(expected, view.contents)]
    read = set(keys.values())
    findings += [_unexpected(view, name, "no model variable reads it") for name in view.weights if name not in read]
    return Pairing(keys, findings, by_object_path=True)


def with_legacy_names(keys, weights, view) -> dict:
    """``keys`` (model name -> checkpoint name), each weight the checkpoint lacks under that name read under
    its tf_keras name instead where the checkpoint holds that (:mod:`.legacy_names`)."""
    found = dict(keys)
    for name, leaf in weights.tf_keras.names.items():
        key = keys.get(name)
        if key is not None and key not in view.contents and legacy_key(key, leaf) in view.contents:
            found[name] = legacy_key(key, leaf)
    return found


def expected_spec(weights, view, name, key) -> tuple:
    """``(name, key, shape, dtype)`` that checkpoint tensor ``key`` must have for weight ``name``: the weight's
    own, or tf_keras's wider dtype for a weight Keras 3 keeps narrower, where the checkpoint holds that."""
    shape, dtype = weights.spec(name)
    found = view.contents.get(key)
    if found is not None and weights.tf_keras.dtypes.get(name) == found[1]:
        dtype = found[1]
    return name, key, shape, dtype


def object_paths(model) -> dict:
    """``id(variable)`` -> its dependency path as tf.keras writes it (``layer_with_weights-1/gamma``)
    for the layers of a Keras model that have weights; empty for anything else."""
    layers = getattr(model, "layers", None)
    if not isinstance(layers, list):
        return {}
    paths = {}
    for index, layer in enumerate(layer for layer in layers if layer.weights):
        for variable in layer.weights:
            attribute = getattr(variable, "name", "").split("/")[-1].split(":")[0]
            paths.setdefault(id(variable), f"layer_with_weights-{index}/{attribute}")
    return paths


def _suggestion(weights, view, chosen, remap, keys, findings, unmatched):
    """A scope rule that finds missing weights under another scope, checked against every name,
    shape and dtype (the planner's :func:`suggest_remap`); with ``remap``, a rule to add to it
    for the missing weights no rule covers, kept only when the two together leave fewer problems."""
    missing = [f.problem.name for f in findings if f.kind == "missing" and keys[f.problem.name] == f.problem.name]
    if not missing:
        return None, 0
    contents = {name: view.contents[name] for name in view.weights}
    expected = {name: weights.spec(name) for name in (chosen if not remap else missing)}
    rule, resolves = suggest_remap(missing, unmatched, expected=expected, contents=contents)
    if rule is None or not remap:
        return rule, resolves
    try:
        combined = checkpoint_names(list(weights.variables), {**remap, **rule})
    except ValueError:
        return None, 0
    before = len([f for f in findings if f.kind != "unexpected"])
    after = len(compare_contents([(name, combined[name], *weights.spec(name)) for name in chosen], view.contents))
    return (rule, resolves) if after < before else (None, 0)


def match_by_order(weights, view, chosen, order) -> Pairing:
    """Pair the model's weights with the checkpoint's weights in creation order (see
    :func:`checkpoint_order` for ``order``); shapes and dtypes checked for ``chosen``."""
    sequence, source = checkpoint_order(view, order)
    names = list(weights.variables)
    position = {name: index for index, name in enumerate(names)}
    keys = dict(zip(names, sequence))
    expected = [(name, keys[name], *weights.spec(name)) for name in chosen if name in keys]
    findings = [Finding(problem) for problem in compare_contents(expected, view.contents)]
    for name in chosen:
        if name not in keys:
            shape, dtype = weights.spec(name)
            findings.append(Finding(Problem("missing", name, name, shape, dtype),
                                    f"weight {position[name] + 1} of {len(names)}; the checkpoint's order "
                                    f"has {len(sequence)}"))
    findings.sort(key=lambda f: position[f.problem.name])
    findings += [_unexpected(view, name, f"weight {index + 1} of the checkpoint's {len(sequence)}; the model "
                                         f"has {len(names)}")
                 for index, name in enumerate(sequence) if index >= len(names)]
    return Pairing(keys, findings, order_source=source)


def checkpoint_order(view, order) -> tuple:
    """The checkpoint's weights in creation order, and where that order came from.

    A TensorFlow bundle stores its names sorted; the creation order is the graph's. ``order``:
    None (the ``.meta`` file ``Saver.save`` writes beside the checkpoint, PREFIX.meta), a
    ``.meta`` path, a ``tf.Graph`` that builds the same variables, or the checkpoint names
    in the order to pair.
    """
    if isinstance(order, (list, tuple)):
        unknown = [name for name in order if name not in view.contents]
        if unknown:
            raise ValueError(f"order names {', '.join(map(repr, unknown))}, which checkpoint '{view.path}' "
                             "does not hold")
        repeated = sorted(name for name, count in collections.Counter(order).items() if count > 1)
        if repeated:
            raise ValueError(f"order names {', '.join(map(repr, repeated))} more than once")
        return list(order), "the order passed"
    if order is None:
        meta = view.path + ".meta"
        if catalog_module.file_format(view.path) != "name" or not storage.exists(meta):
            raise ValueError(
                f"match='order' needs the order in which the graph created the variables, which checkpoint "
                f"'{view.path}' does not record (it stores names sorted) and no '{meta}' is beside it; pass "
                "order= the graph's .meta file (tf.compat.v1.train.Saver.save writes PREFIX.meta unless "
                "write_meta_graph=False), a tf.Graph that builds the same variables, or the checkpoint names in "
                "creation order; or pair by name with remap="
            )
        order = meta
    if isinstance(order, (str, os.PathLike)) and not os.fspath(order).endswith(".meta"):
        raise ValueError(f"order={os.fspath(order)!r} is no .meta file; a checkpoint's own names are sorted, "
                         "not in creation order")
    source = f"'{os.fspath(order)}'" if isinstance(order, (str, os.PathLike)) else "the graph passed"
    graph_catalog = catalog_module.load(order)
    if graph_catalog.kind not in ("graph", "meta"):
        raise ValueError(f"order= is a .meta file, a tf.Graph or a list of names, not a {graph_catalog.kind} catalog")
    weights = set(view.weights)
    absent = [name for name in view.weights if name not in graph_catalog.all_names]
    if absent:
        shown = ", ".join(absent[:5]) + (f" and {len(absent) - 5} more" if len(absent) > 5 else "")
        raise ValueError(f"the graph of {source} has no variable {shown} of checkpoint '{view.path}'; pass the "
                         "graph that wrote the checkpoint")
    return [name for name in graph_catalog.ordered_names if name in weights], source


def match_optimizer(state, view, keys, optimizer) -> tuple:
    """Pair the optimizer's slots of the weights in ``keys`` (model name -> checkpoint name,
    the weights that load) with the checkpoint's slots, and its iteration counter with the
    checkpoint's step. Returns ``(optimizer path -> checkpoint name, findings)``."""
    pairs, expected, findings = {}, [], []
    for name, key in keys.items():
        wanted = state.slots_of(name)
        found = {}
        siblings = view.slots_of(key)
        for slot in siblings:
            kind, why = slot_kind(slot, key, optimizer, siblings)
            if kind is None:
                findings.append(_unexpected(view, slot, why))
            elif kind not in wanted:
                findings.append(_unexpected(view, slot, f"the {kind} of {key}; {state.label} keeps no {kind} "
                                                        f"for {name}"))
            elif kind in found:
                findings.append(_unexpected(view, slot, f"a second {kind} of {key}, after {found[kind]}"))
            else:
                found[kind] = slot
        for kind, path in wanted.items():
            if kind in found:
                pairs[path] = found[kind]
                expected.append((path, found[kind], *state.spec(path)))
            else:
                shape, dtype = state.spec(path)
                findings.append(Finding(Problem("missing", path, path, shape, dtype),
                                        f"the {kind} of {name}: the checkpoint holds no such slot of {key}"))
    problems = compare_contents(expected, view.contents)
    for problem in problems:
        del pairs[problem.name]
    findings = [Finding(problem) for problem in problems] + findings
    if state.iterations is not None:
        step, finding = _step(state, view)
        if finding is not None:
            findings.append(finding)
        else:
            pairs[state.iterations] = step
    return pairs, findings


def _step(state, view):
    """The checkpoint's step for the iteration counter, or the Finding that says why there is none."""
    path = state.iterations
    shape, dtype = state.spec(path)
    steps = list(view.steps)
    if len(steps) > 1 and "global_step" in steps:
        steps = ["global_step"]
    if len(steps) != 1:
        held = f"it holds {', '.join(steps)}" if steps else "it holds no step (global_step)"
        return None, Finding(Problem("missing", path, path, shape, dtype),
                             f"the iteration count, read from the checkpoint's step: {held}")
    found_shape, found_dtype = view.contents[steps[0]]
    if tuple(found_shape) != () or not found_dtype.startswith(("int", "uint")):
        return None, Finding(Problem("shape" if tuple(found_shape) != () else "dtype", path, steps[0], shape,
                                     dtype, tuple(found_shape), found_dtype),
                             "a step is an integer scalar")
    return steps[0], None


def _unexpected(view, name, note) -> Finding:
    shape, dtype = view.contents[name]
    return Finding(Problem("unexpected", None, name, found_shape=shape, found_dtype=dtype), note)


def _check_rules_used(names, remap, label):
    """A RemapRuleError for a remap rule whose model side names no model variable (a typo)."""
    for source, target in dict(remap or {}).items():
        if not isinstance(target, str):
            continue  # checkpoint_names says what is wrong with it
        scope = "" if target == "/" else target
        used = any(name.startswith(scope) for name in names) if target.endswith("/") else target in names
        if not used:
            example = next(iter(names), "dense/kernel")
            raise RemapRuleError([(source, target)], f"matches no variable of the {label}; the right-hand side "
                                                     f"names model variables (paths such as {example!r}) or their "
                                                     "scopes ending in '/'")
