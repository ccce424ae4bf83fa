"""Which values of a checkpoint's weights a conversion reads: their moving averages, or the raw values.

A model trained with ``tf.train.ExponentialMovingAverage`` (tf-slim's ``train_image_classifier`` with
``--moving_average_decay``, most of the TPU vision models) is evaluated with the averages: tf-slim's
``eval_image_classifier`` restores every model variable from its shadow (``w/ExponentialMovingAverage``).
The shadows are found by the catalog's roles (``average`` in :data:`~subsetsaver.catalog.ROLE_TABLE`, each
with the variable it averages), never by parsing names here.

:func:`choose_weights` decides, for the weights a conversion maps:

- ``weights=None`` (the default): the averages when every weight has one, the raw values when none has;
  a batch-norm statistic without a shadow is read raw either way (it is a moving average itself, and
  ``ExponentialMovingAverage.variables_to_restore()`` restores it so when the averages cover the
  trainable variables only). Shadows of some weights but not of others are refused: a mix of two models
  is no model. ``weights="raw"`` reads the raw values, ``weights="ema"`` demands a shadow of every weight.

:func:`classes_note` words what a conversion did with a classifier's background class (tf-slim's 1001
ImageNet classes, class 0 the background), for the reports of every conversion.

Example::

    choice = choose_weights(catalog, ['conv/w', 'conv/b'], None, 'train/model.ckpt-9')
    choice.used, choice.read_from['conv/w']
    # ('ema', 'conv/w/ExponentialMovingAverage')
"""

from __future__ import annotations

import dataclasses

from ..errors import Fix, WeightsChoiceError

WEIGHTS = ("ema", "raw")
"""What ``weights=`` (``--weights``) takes besides None (the default: the averages when every weight has one)."""
_SHOWN = 5


@dataclasses.dataclass(frozen=True)
class WeightsChoice:
    """``used``: 'ema' (read from the moving averages) or 'raw'; ``read_from``: weight -> the shadow it is read
    from (empty for 'raw'); ``raw_statistics``: batch-norm statistics read raw under 'ema' (they have no
    shadow); ``shadows``: every shadow the checkpoint holds of the weights (read or not)."""

    used: str
    read_from: dict
    raw_statistics: tuple = ()
    shadows: tuple = ()

    def key(self, name) -> str:
        """The checkpoint tensor weight ``name`` is read from."""
        return self.read_from.get(name, name)

    def describe(self, total) -> str:
        """One line for a report: which values of the ``total`` weights were converted ('' for the raw values of
        a checkpoint without moving averages: nothing to choose)."""
        if self.used == "raw":
            return f"weights: raw values; their {len(self.shadows)} moving averages left out" if self.shadows else ""
        statistics = (f"; {len(self.raw_statistics)} batch-norm statistics without one read raw"
                      if self.raw_statistics else "")
        return f"weights: moving averages (ExponentialMovingAverage) of {len(self.read_from)} of {total}{statistics}"


def shadows_of(catalog) -> dict:
    """Variable -> its moving-average shadow in ``catalog`` (by the ``average`` role); where one variable has
    several (``.../ExponentialMovingAverage`` and ``..._1``), the one ``ExponentialMovingAverage`` names by default."""
    found = {}
    for record in catalog.records:
        if "average" in record.roles and record.average_of:
            found.setdefault(record.average_of, []).append(record.name)
    return {name: sorted(shadows, key=lambda shadow: (not shadow.endswith("/ExponentialMovingAverage"), shadow))[0]
            for name, shadows in found.items()}


def choose_weights(catalog, names, weights, source) -> WeightsChoice:
    """Which tensor each of ``names`` (the weights a conversion maps, names of ``catalog``) is read from, for
    ``weights`` None, 'ema' or 'raw'; WeightsChoiceError (before anything is read) when that cannot be done.
    ``source`` names the checkpoint in messages."""
    if weights not in (None, *WEIGHTS):
        raise WeightsChoiceError(f"weights={weights!r} is not one of None, 'ema', 'raw'")
    shadows = shadows_of(catalog)
    statistics = catalog.role("bn_stat")
    averaged = {name: shadows[name] for name in names if name in shadows}
    if weights == "raw" or (weights is None and not averaged):
        return WeightsChoice("raw", {}, shadows=tuple(averaged.values()))
    lacking = [name for name in names if name not in averaged and name not in statistics]
    if not averaged:
        raise WeightsChoiceError(f"checkpoint '{source}' holds no moving averages (ExponentialMovingAverage) of its "
                                 f"{len(names)} weights", fixes=[Fix("weights", "raw", "to convert the raw values")])
    if lacking:
        shown = ", ".join(lacking[:_SHOWN]) + (f" and {len(lacking) - _SHOWN} more" if len(lacking) > _SHOWN else "")
        held = f"checkpoint '{source}' holds moving averages (ExponentialMovingAverage) of {len(averaged)} of its " \
               f"{len(names)} weights, not of {shown}"
        if weights == "ema":
            raise WeightsChoiceError(f"{held}: --weights ema needs one of each",
                                     fixes=[Fix("weights", "raw", "to convert the raw values")])
        raise WeightsChoiceError(f"{held}: averages of some weights and raw values of others would mix two models",
                                 fixes=[Fix("weights", "raw", "to convert the raw values")])
    raw_statistics = tuple(name for name in names if name not in averaged)
    return WeightsChoice("ema", averaged, raw_statistics, tuple(averaged.values()))


SLIM_IMAGENET_CLASSES = 1001
"""tf-slim's ImageNet classifiers: 1000 classes after a background class 0."""


def classes_note(classes, background_class) -> str:
    """The report's line on a classifier's ``classes`` (checkpoint's, written) and its ``background_class``."""
    if classes is None:
        return ""
    found, kept = classes
    if background_class == "dropped":
        return f"classes: {kept} of the checkpoint's {found} (class 0, the background, dropped)"
    if found == SLIM_IMAGENET_CLASSES:
        return f"classes: {found}, as the checkpoint holds them (class 0, tf-slim's background, kept)"
    return ""
