"""Averaging checkpoints: the mean of the selected float tensors, everything else from the last.

Averaging the last few checkpoints of a run smooths the weights. What must not be
averaged is found by role, not by name: the step and the optimizer state (slots, beta
powers, loss scale) come from the last checkpoint unless ``keep`` selects them, and so
does every tensor that is not a float. The output holds exactly the last checkpoint's
tensors. Before anything is written, every averaged tensor is checked in every input
(present, same shape, same dtype) and all disagreements are reported at once.

The mean is a running weighted mean in float64, ``m += (x - m) * w / W``, rounded once to
the tensor's dtype: N copies of one checkpoint average to it bit for bit, and two float32
checkpoints to numpy's ``(a + b) / 2``. Memory holds the float64 mean of one tensor (twice
a float32 tensor) and one input tensor at a time.

Example::

    report = average(['run/model-8000', 'run/model-9000', 'run/model-10000'], 'avg/model')
    report.averaged[:2], report.copied
    # (('conv_1/b', 'conv_1/w'), ('global_step',))
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from .. import catalog as catalog_module
from ..errors import CheckpointMismatchError
from ..formats import checkpoint_writer, registry
from ..planning import Problem
from ..selectors import as_selector

DEFAULT_KEEP = "~slots() - global_step()"
_CHUNK = 1 << 20  # elements updated at a time
_FLOAT_KINDS = frozenset({"float16", "bfloat16", "float32", "float64"})


@dataclasses.dataclass(frozen=True)
class AverageReport:
    """What :func:`average` wrote: inputs, normalized ``weights``, the ``averaged`` names and the
    ``copied`` ones (from the last input), and the bytes of the written values."""

    inputs: tuple
    output: str
    weights: tuple
    averaged: tuple
    copied: tuple
    nbytes: int


def average(checkpoints, output, *, keep=None, weights=None, overwrite=False, to=None) -> AverageReport:
    """Write to ``output`` the weighted mean of the float tensors of ``checkpoints`` that ``keep``
    selects (None: ``~slots() - global_step()``, roles read from the last checkpoint); every other
    tensor is the last checkpoint's. ``output`` is a TensorFlow checkpoint unless ``to`` or its
    suffix names another format."""
    paths = [catalog_module.source_path(path) for path in checkpoints]
    if not paths:
        raise ValueError("average needs at least one checkpoint")
    weights = _normalized(weights, len(paths))
    catalogs = [catalog_module.file_catalog(path) for path in paths]
    last = catalogs[-1]
    selector = as_selector(DEFAULT_KEEP if keep is None else keep, "keep")
    chosen = set(selector.names(last))
    averaged = [name for name in last.ordered_names if name in chosen and last.record(name).dtype in _FLOAT_KINDS]
    copied = [name for name in last.ordered_names if name not in set(averaged)]
    _check_inputs(paths, catalogs, averaged)
    output = os.fspath(output)
    output_format = registry.for_output(output, to)
    records = last.records_by_name
    written = checkpoint_writer.write_checkpoint(
        output, _averaged_tensors(paths, weights, averaged, last.ordered_names), checkpoint_format=output_format,
        sources=paths, overwrite=overwrite,
        specs=[(name, records[name].shape, records[name].dtype) for name in last.ordered_names])
    return AverageReport(tuple(paths), output, tuple(weights), tuple(averaged), tuple(copied), written.nbytes)


def _normalized(weights, count) -> list:
    if weights is None:
        return [1.0 / count] * count
    weights = [float(w) for w in weights]
    if len(weights) != count:
        raise ValueError(f"{len(weights)} weights for {count} checkpoints; give one weight per checkpoint")
    if any(not math.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"weights must be finite, 0 or more, and not all 0; got {weights}")
    total = sum(weights)
    return [w / total for w in weights]


def _check_inputs(paths, catalogs, averaged) -> None:
    """Every averaged tensor in every input with the last one's shape and dtype; all problems at once."""
    last = catalogs[-1].records_by_name
    problems, lines = [], []
    for path, cat in zip(paths[:-1], catalogs[:-1]):
        records = cat.records_by_name
        for name in averaged:
            want, found = last[name], records.get(name)
            problem = None
            if found is None:
                problem = Problem("missing", name, name, tuple(want.shape), want.dtype)
            elif tuple(found.shape) != tuple(want.shape) or found.dtype != want.dtype:
                problem = Problem("shape" if tuple(found.shape) != tuple(want.shape) else "dtype", name, name,
                                  tuple(want.shape), want.dtype, tuple(found.shape), found.dtype)
            if problem is not None:
                problems.append(problem)
                lines.append(f"  {path}: {problem.describe()}")
    if problems:
        raise CheckpointMismatchError(
            f"cannot average: {len(problems)} tensor{'s' if len(problems) > 1 else ''} of the inputs disagree with "
            f"the last checkpoint, '{paths[-1]}':\n" + "\n".join(lines) + "\nleave them out with --keep, e.g. "
            f"--keep \"{DEFAULT_KEEP} - name('{problems[0].name}')\", or average checkpoints of one model",
            problems,
        )


def _averaged_tensors(paths, weights, averaged, names):
    """Yield ``(name, array)`` for every name of the last checkpoint, the averaged ones as the mean;
    each input's tensor is read after the one before it has been added in."""
    earlier = [catalog_module.read_tensors(path, averaged) for path in paths[:-1]]
    last = catalog_module.read_tensors(paths[-1], names)
    averaged = set(averaged)
    for name in names:
        if name not in averaged:
            yield next(last)
            continue
        mean, seen = None, 0.0
        for weight, reader in zip(weights, earlier):
            _, value = next(reader)
            mean, seen = _added(mean, seen, value, weight)
            del value
        _, value = next(last)
        mean, seen = _added(mean, seen, value, weights[-1])
        rounded = np.empty(value.shape, value.dtype)
        del value
        flat = rounded.reshape(-1)
        for start in range(0, flat.size, _CHUNK):  # rounded in chunks: no second float64 copy
            flat[start:start + _CHUNK] = mean[start:start + _CHUNK]
        del mean, flat
        yield name, rounded
        del rounded  # not kept while the next tensor is averaged


def _added(mean, seen, value, weight):
    """The running mean (flat float64) and total weight after adding ``value`` with ``weight``."""
    flat = np.asarray(value).reshape(-1)
    if weight == 0:
        return mean, seen
    if mean is None:
        return flat.astype(np.float64), weight
    seen += weight
    share = weight / seen
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, flat.size, _CHUNK):
            part = mean[start:start + _CHUNK]
            value_part = flat[start:start + _CHUNK].astype(np.float64)
            # where the value equals the mean, the mean stays as it is: infinities, NaNs and -0.0 included
            moves = ~((value_part == part) | (np.isnan(value_part) & np.isnan(part)))
            np.add(part, (value_part - part) * share, out=part, where=moves)
    return mean, seen
