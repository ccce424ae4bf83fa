"""The layout engine: a map applied to a checkpoint's names first, then to its tensors as a stream.

:func:`plan_conversion` pairs every tensor of the source (names, shapes, dtypes only) with a
rule, works out each target's shape through the rule's transforms, and refuses, before
anything is read or written, a shape a transform cannot produce (the first such rule), a target
name the target layout cannot hold, and two rules writing one name. Tensors no rule maps are kept
in :attr:`ConversionPlan.unmapped` for the coverage check (:mod:`.coverage`), which judges them
with what the family's config implies. :meth:`ConversionPlan.stream` then yields the target
tensors one rule at a time: it holds the source tensors of one rule and what they become.

Example::

    plan = plan_conversion(load_map("gpt2-to-hf"), {"model/wte": ((50257, 768), "float32"), ...})
    plan.rows()[0]
    # ('model/wte', 'wte.weight', '', (50257, 768))
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import LayoutMapError
from .transforms import ShapeProblem, apply_all, concat_spec, output_spec, split_spec


@dataclasses.dataclass(frozen=True)
class Step:
    """One application of a rule: source names (as in the file) -> target names with their (shape, dtype)."""

    rule: object
    sources: tuple
    targets: tuple
    specs: tuple

    @property
    def transform_text(self) -> str:
        parts = [f"concat({self.rule.concat})"] if len(self.sources) > 1 else []
        parts += [transform.text for transform in self.rule.transforms]
        parts += [f"split({self.rule.split})"] if len(self.targets) > 1 else []
        return ", ".join(parts)


@dataclasses.dataclass(frozen=True)
class ConversionPlan:
    """What a map does to one checkpoint: the steps in order, the names dropped by role, and the source names
    no rule maps (``unmapped``), which the coverage check judges: always given, since an empty default would
    pass that check unasked."""

    layout: object
    steps: tuple
    dropped: tuple
    unmapped: tuple

    @property
    def specs(self) -> dict:
        """Target name -> (shape, dtype), in the order :meth:`stream` yields them."""
        return {target: spec for step in self.steps for target, spec in zip(step.targets, step.specs)}

    def source_name(self, target) -> str:
        """The source name ``target`` is read from; for a target no step writes, the name a rule would read
        it from (see :meth:`~.maps.Rule.source_for`), else ``target`` itself."""
        for step in self.steps:
            if target in step.targets:
                return " + ".join(step.sources)
        for rule in self.layout.rules:
            like = next((rule.capture(step.sources[0]) for step in self.steps if step.rule is rule), None)
            source = rule.source_for(target, like)
            if source is not None:
                return source
        return target

    @property
    def source_names(self) -> tuple:
        return tuple(name for step in self.steps for name in step.sources)

    def rows(self) -> list:
        """(source name, target name, transform, target shape) per target, for a dry run's table."""
        return [(" + ".join(step.sources), target, step.transform_text, shape)
                for step in self.steps for target, (shape, _) in zip(step.targets, step.specs)]

    def stream(self, tensors):
        """Yield (target name, array) from ``tensors``, an iterator of (name, array) in :attr:`source_names`
        order; checks each result against its planned shape and dtype."""
        for step in self.steps:
            arrays = []
            for expected in step.sources:
                name, array = next(tensors)
                if name != expected:
                    raise LayoutMapError(f"read '{name}' where '{expected}' was expected")
                arrays.append(array)
            yield from _run(step, arrays)


def plan_conversion(layout, specs, dropped=()) -> ConversionPlan:
    """Pair ``specs`` (name -> (shape, dtype)) with ``layout``'s rules; ``dropped`` names are left out, and
    so are the sources of a ``fallback`` rule whose targets an earlier rule wrote.

    Raises :class:`~subsetsaver.errors.LayoutMapError` naming the first failing rule.
    """
    dropped = set(dropped)
    prefix, aliases = layout.optional_prefix, layout.source.get("aliases", {})
    by_short = {}
    for name in specs:
        if name not in dropped:
            by_short[_short_name(name, prefix, aliases)] = name
    claimed, steps, targets, shadowed = set(), [], {}, set()
    check_name = TARGET_NAMES[layout.target_layout]
    for rule in layout.rules:
        for short in by_short:
            if short in claimed:
                continue
            captures = rule.capture(short)
            if captures is None:
                continue
            sources = rule.sources(captures)
            absent = [source for source in sources if source not in by_short]
            if absent:
                raise LayoutMapError(f"{rule.text} matches '{short}' but the checkpoint has no '{absent[0]}'",
                                     rule=rule.text, fix="check that the map fits this checkpoint")
            claimed.update(sources)
            names = tuple(by_short[source] for source in sources)
            written = rule.target_names(captures)
            if rule.fallback and all(target in targets for target in written):
                shadowed.update(names)  # an earlier rule wrote these targets: this source is not needed
                continue
            step = Step(rule=rule, sources=names, targets=written,
                        specs=_target_specs(rule, [specs[name] for name in names], names))
            for target in step.targets:
                check_name(target, rule)
                if target in targets:
                    raise LayoutMapError(f"{rule.text} writes '{target}', which {targets[target]} writes too",
                                         rule=rule.text, fix="make the target names of the map unique")
                targets[target] = rule.text
            steps.append(step)
    unmapped = tuple(by_short[short] for short in by_short if short not in claimed)
    return ConversionPlan(layout=layout, steps=tuple(steps), dropped=tuple(sorted((dropped & set(specs)) | shadowed)),
                          unmapped=unmapped)


def _huggingface_name(target, rule):
    """A Hugging Face state-dict key: dot-separated, no '/' (a rule whose glob crossed a '/' shows here)."""
    if "/" in target or not target or "" in target.split("."):
        raise LayoutMapError(f"{rule.text} writes '{target[:160]}', which is not a Hugging Face tensor name "
                             "(dot-separated parts, no '/')", rule=rule.text,
                             fix="give the tensors it caught a rule of their own, or narrow its glob")


def _tensorflow_name(target, rule):
    """A TensorFlow variable name: '/'-separated scopes, no ':' and no empty scope."""
    if ":" in target or not target or "" in target.split("/"):
        raise LayoutMapError(f"{rule.text} writes '{target[:160]}', which is not a TensorFlow variable name "
                             "('/'-separated scopes, no ':')", rule=rule.text,
                             fix="give the tensors it caught a rule of their own, or narrow its glob")


TARGET_NAMES = {"safetensors": _huggingface_name, "tf": _tensorflow_name}
"""Target layout -> the check of a target name it can hold."""


def _short_name(name, prefix, aliases):
    """``name`` as the rules see it: without the optional prefix, an aliased ending replaced
    (``LayerNorm.gamma`` as ``LayerNorm.weight`` in older Hugging Face files)."""
    if prefix and name.startswith(prefix):
        name = name[len(prefix):]
    for old, new in aliases.items():
        if name.endswith(old):
            return name[:-len(old)] + new
    return name


def _target_specs(rule, source_specs, names):
    try:
        if len(source_specs) > 1:
            shape, dtype = concat_spec(source_specs, rule.concat)
        else:
            (shape, dtype), = source_specs
        shape, dtype = output_spec(rule.transforms, shape, dtype)
        if len(rule.targets) > 1:
            return (split_spec(shape, dtype, rule.split, len(rule.targets)),) * len(rule.targets)
        return ((tuple(shape), dtype),)
    except ShapeProblem as problem:
        raise LayoutMapError(f"{rule.text} cannot convert '{names[0]}' {list(source_specs[0][0])}: {problem}",
                             rule=rule.text, fix="the checkpoint is not of the shapes this map expects") from None


def _run(step, arrays):
    array = np.concatenate(arrays, axis=step.rule.concat) if len(arrays) > 1 else arrays[0]
    array = apply_all(step.rule.transforms, array)
    pieces = np.split(array, len(step.targets), axis=step.rule.split) if len(step.targets) > 1 else [array]
    for target, piece, (shape, dtype) in zip(step.targets, pieces, step.specs):
        piece = np.ascontiguousarray(piece)
        if tuple(piece.shape) != tuple(shape) or piece.dtype.name != dtype:
            raise LayoutMapError(f"{step.rule.text} made '{target}' {list(piece.shape)} {piece.dtype.name}, "
                                 f"not the planned {list(shape)} {dtype}", rule=step.rule.text)
        yield target, piece

