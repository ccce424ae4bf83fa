"""A family's members: which one a checkpoint is, read off its tensors.

A map with ``"members"`` (EfficientNet's ``b0`` ... ``b7``) gives each member's ``"config"`` (values written
into the target config: the architecture, its input size) and ``"sizes"`` (values its tensors' shapes are
stated in, such as the stages' block counts and widths, never written). A tf_keras checkpoint has no config
file beside it, so the member is the one whose implied tensors (see :mod:`.coverage`) are exactly the
checkpoint's, names and shapes. None fitting is refused with the problems of the nearest; two fitting
alike is refused as ambiguous.

    pick_member(layout, plan, {})
    # ('b0', {'architecture': 'tf_efficientnet_b0', ...}, {'s1_blocks': 1, ...})
"""

from __future__ import annotations

from ..errors import LayoutMapError
from .coverage import check_coverage, expected_targets


def pick_member(layout, plan, config) -> tuple:
    """(member name, ``config`` with its config values, its sizes) of the one member of ``layout`` that
    ``plan``'s tensors fit."""
    produced, scores = plan.specs, {}
    for member, values in layout.members.items():
        try:
            expected = expected_targets(layout.targets, _values(config, values), produced)[0]
        except LayoutMapError:
            continue
        missing = sum(name not in produced for name in expected)
        extra = sum(name not in expected for name in produced) + len(plan.unmapped)
        wrong = sum(name in produced and shape is not None and tuple(produced[name][0]) != shape
                    for name, (shape, _) in expected.items())
        scores[member] = missing + extra + wrong
    fits = [member for member, score in scores.items() if score == 0]
    if len(fits) == 1:
        member = layout.members[fits[0]]
        return fits[0], {**config, **member.get("config", {})}, member.get("sizes", {})
    if len(fits) > 1:
        raise LayoutMapError(f"this {layout.family} checkpoint fits the members {', '.join(fits)} alike",
                             fix="convert with a copy of the map that keeps one of them (its \"members\")")
    if not scores:
        raise LayoutMapError(f"no member of {layout.family} can be read with this config",
                             fix="give the family's own config file with --config")
    nearest = min(scores, key=scores.get)
    try:
        check_coverage(layout, produced, _values(config, layout.members[nearest]), plan.source_name, plan.unmapped)
    except LayoutMapError as error:
        text = str(error)[:-len(f"; {error.fix}")] if error.fix else str(error)
        raise LayoutMapError(f"no member of {layout.family} ({', '.join(layout.members)}) fits exactly; as the "
                             f"nearest, {nearest}, {text}", fix=error.fix) from None
    raise AssertionError("a member fits the coverage check that its score says it misses")  # pragma: no cover


def _values(config, member) -> dict:
    return {**config, **member.get("config", {}), **member.get("sizes", {})}
