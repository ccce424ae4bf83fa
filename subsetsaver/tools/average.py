"""Averaging checkpoints: the mean of the selected float tensors, everything else from the last.

Averaging the last few checkpoints of a run smooths the weights. What must not be
averaged is found by role, not by name: the step and the optimizer state (slots, beta
powers, loss scale) come from the last checkpoint unless ``keep`` selects them, and so
does every tensor that is not a float. The output holds exactly the last checkpoint's
tensors. Before anything is written, every averaged tensor is checked in every input
(present, same shape, same dtype) and all disagreements are reported at once.

The mean is a running weighted mean in float64, ``m += (x - m) * w / W``, rounded once to
the tensor's dtype: N copies of one checkpoint average to it bit for bit, and two float32
checkpoints to numpy's ``(a + b) / 2``. Local TensorFlow checkpoints are averaged a 1 MiB piece of
each input at a time, straight into the output tensor; elsewhere memory holds the float64 mean of
one tensor (twice a float32 tensor) and one input tensor at a time.

Example::

    report = average(['run/model-8000', 'run/model-9000', 'run/model-10000'], 'avg/model')
    report.averaged[:2], report.copied
    # (('conv_1/b', 'conv_1/w'), ('global_step',))
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os

import numpy as np

from .. import catalog as catalog_module
from ..errors import CheckpointMismatchError
from ..formats import checkpoint_writer, npz, registry
from ..planning import Problem
from ..selectors import as_selector

DEFAULT_KEEP = "~slots() - global_step()"
_CHUNK = 1 << 16  # elements updated at a time: their float64 values stay in the processor's cache
_PIECE_BYTES = 1 << 20  # bytes of each input read at a time where the inputs stream
_BUFFERS = 3  # per input: one averaged in, one checksummed, one read
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
    shapes = {name: tuple(records[name].shape) for name in last.ordered_names}
    written = checkpoint_writer.write_checkpoint(
        output, _averaged_tensors(paths, weights, averaged, last.ordered_names, shapes), checkpoint_format=output_format,
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


def _averaged_tensors(paths, weights, averaged, names, shapes):
    """Yield ``(name, array)`` for every name of the last checkpoint (``shapes``: name -> its shape),
    the averaged ones as the mean: streamed piece by piece where every input streams the tensor, else
    one input's tensor at a time."""
    with contextlib.ExitStack() as stack:
        streams = [registry.format_of(path).streams(path) for path in paths]
        for opened in streams:
            if opened is not None:
                stack.enter_context(opened)
        if None in streams:
            yield from _whole_means(weights, averaged, names,
                                    [catalog_module.read_tensors(path, averaged) for path in paths[:-1]],
                                    catalog_module.read_tensors(paths[-1], names))
            return
        buffers = [[np.empty(_PIECE_BYTES, dtype=np.uint8) for _ in range(_BUFFERS)] for _ in streams]
        averaged = set(averaged)
        for name in names:
            if name not in averaged:
                yield name, streams[-1].read(name)
            elif math.prod(shapes[name]) and all(opened.streamable(name) for opened in streams):
                yield name, _streamed_mean(streams, name, weights, buffers, shapes[name])
            else:  # stored in parts, say: one input's tensor at a time
                yield from _whole_means(weights, [name], [name], [_read(opened, name) for opened in streams[:-1]],
                                        _read(streams[-1], name))


def _streamed_mean(streams, name, weights, buffers, shape):
    """The mean of tensor ``name`` (of ``shape``, not empty) of every input, computed a piece of each
    input at a time into the output: memory holds it and ``buffers``, not a float64 mean and an input.
    Each input's pieces are verified once the last is read
    (:meth:`~subsetsaver.formats.tf.bundle.BundleReader.pieces`), before the mean is handed out."""
    flat, start, scratch = None, 0, _Scratch()
    into = np.empty(_PIECE_BYTES // 2, np.float64)  # a piece's mean: 2-byte floats have the most elements
    for parts in zip(*(opened.pieces(name, side) for opened, side in zip(streams, buffers)), strict=True):
        if flat is None:  # in reused memory: fresh pages cost more than the mean
            flat = npz.reused_bytes(math.prod(shape) * parts[0].itemsize).view(parts[0].dtype)
        mean, seen = None, 0.0
        for weight, part in zip(weights, parts):
            mean, seen = _added(mean, seen, part, weight, scratch, into)
        flat[start:start + len(mean)] = mean
        start += len(mean)
    return flat.reshape(shape)


def _read(streams, name):
    """Yield ``(name, array)`` of tensor ``name`` of ``streams``, read whole when asked for."""
    yield name, streams.read(name)


def _whole_means(weights, averaged, names, earlier, last):
    """Yield ``(name, array)`` for every name of ``names``, the ``averaged`` ones as the mean; ``earlier``:
    per input but the last, an iterator of ``(name, array)`` of the averaged names; ``last``: the same of
    every name of the last input. Each input's tensor is read after the one before it has been added in."""
    averaged, scratch = set(averaged), _Scratch()
    for name in names:
        if name not in averaged:
            yield next(last)
            continue
        mean, seen = None, 0.0
        for weight, reader in zip(weights, earlier):
            _, value = next(reader)
            mean, seen = _added(mean, seen, value, weight, scratch)
            del value
        _, value = next(last)
        mean, seen = _added(mean, seen, value, weights[-1], scratch)
        rounded = np.empty(value.shape, value.dtype)
        del value
        flat = rounded.reshape(-1)
        for start in range(0, flat.size, _CHUNK):  # rounded in chunks: no second float64 copy
            flat[start:start + _CHUNK] = mean[start:start + _CHUNK]
        del mean, flat
        yield name, rounded
        del rounded  # not kept while the next tensor is averaged


def _added(mean, seen, value, weight, scratch, into=None):
    """The running mean (flat float64; the first one in ``into`` where given) and total weight after
    adding ``value`` with ``weight``, a chunk at a time through ``scratch`` (:class:`_Scratch`)."""
    flat = np.asarray(value).reshape(-1)
    if weight == 0:
        return mean, seen
    if mean is None:
        if into is None:
            return flat.astype(np.float64), weight
        np.copyto(into[:flat.size], flat)
        return into[:flat.size], weight
    seen += weight
    share = weight / seen
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, flat.size, _CHUNK):
            scratch.move(mean[start:start + _CHUNK], flat[start:start + _CHUNK], share)
    return mean, seen


class _Scratch:
    """Reused memory for moving a chunk of the mean towards a chunk of values, with no temporaries."""

    def __init__(self):
        self.values = np.empty(_CHUNK, np.float64)
        self.still, self.nans, self.mean_nans = (np.empty(_CHUNK, bool) for _ in range(3))

    def move(self, mean, values, share):
        """``mean += (values - mean) * share``, in place, except where the value equals the mean:
        there it stays as it is, infinities, NaNs and -0.0 included."""
        count = len(mean)
        moved, still, nans = self.values[:count], self.still[:count], self.nans[:count]
        np.copyto(moved, values)
        np.equal(moved, mean, out=still)
        np.isnan(moved, out=nans)
        np.logical_and(nans, np.isnan(mean, out=self.mean_nans[:count]), out=nans)
        np.logical_or(still, nans, out=still)
        np.logical_not(still, out=still)  # now: moves
        np.subtract(moved, mean, out=moved)
        np.multiply(moved, share, out=moved)
        np.add(mean, moved, out=mean, where=still)
