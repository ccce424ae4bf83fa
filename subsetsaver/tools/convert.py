"""Converting between TensorFlow checkpoints and portable ``.npz`` files, without a graph.

Example::

    >>> checkpoint_to_npz('train/model-9000', 'model.npz', keep='~slots()').kept[:2]
    ('conv_1/b', 'conv_1/w')
    >>> npz_to_checkpoint('model.npz', 'ckpt/model').output
    'ckpt/model'
"""

from __future__ import annotations

import dataclasses
import os

from .. import catalog as catalog_module
from ..catalog import npz_catalog
from ..errors import CheckpointNotFoundError, CorruptCheckpointError, UnsupportedDtypeError
from ..formats import npz
from ..formats.npz import entry_spec
from ..planning.restore_ops import read_back
from ..selectors import as_selector


@dataclasses.dataclass(frozen=True)
class ConvertReport:
    """What a conversion wrote: ``source``, ``output``, the ``kept`` and ``dropped`` names, data bytes."""

    source: str
    output: str
    kept: tuple
    dropped: tuple
    nbytes: int


def checkpoint_to_npz(checkpoint, output, keep=None) -> ConvertReport:
    """Copy the tensors ``keep`` selects (None: all) of a TensorFlow checkpoint into a portable file.

    ``keep`` is evaluated on the checkpoint's names (roles guessed from names, as ``slim`` does).

    >>> checkpoint_to_npz('train/model-9000', 'model.npz', keep='~slots()').kept[:2]
    ('conv_1/b', 'conv_1/w')
    """
    selector = as_selector(keep, "keep")
    prefix = catalog_module.checkpoint_prefix(checkpoint)
    cat = catalog_module.checkpoint_catalog(prefix)
    kept = selector.names(cat)
    records = cat.records_by_name
    unsupported = [n for n in kept if records[n].dtype not in npz.STORED_AS]
    if unsupported:
        raise UnsupportedDtypeError(
            f"portable checkpoints hold numeric tensors only; '{prefix}' has {', '.join(unsupported)} "
            f"({records[unsupported[0]].dtype}): leave them out, e.g. --keep \"{selector!r} - name('{unsupported[0]}')\""
        )
    reader = catalog_module.open_checkpoint(prefix)
    arrays = {}
    for name in kept:
        try:
            arrays[name] = reader.get_tensor(name)
        except ValueError as error:  # e.g. the mangled per-part slots of a partitioned variable
            raise CorruptCheckpointError(
                f"cannot read '{name}' from '{prefix}' as one array ({str(error).splitlines()[0]}); leave it out "
                f"(--keep \"{selector!r} - name('{name}')\") or save from the graph with ss.save_npz"
            ) from error
    npz.write(os.fspath(output), arrays, selector=repr(selector),
             metadata={"source": "checkpoint", "checkpoint": os.path.basename(prefix)})
    return ConvertReport(prefix, os.fspath(output), tuple(kept),
                         tuple(n for n in cat.ordered_names if n not in set(kept)),
                         sum(a.nbytes for a in arrays.values()))


def npz_to_checkpoint(path, prefix, keep=None) -> ConvertReport:
    """Write the arrays of a portable file (``keep``: a selector on them, None: all) as a
    TensorFlow checkpoint at ``prefix`` that ``tf.compat.v1.train.Saver`` restores.

    One ``SaveV2`` in a scratch graph, fed in one ``session.run``; the written
    checkpoint is read back (``RestoreV2``) and compared bit for bit before returning.

    >>> npz_to_checkpoint('model.npz', 'ckpt/model').output
    'ckpt/model'
    """
    import numpy as np
    import tensorflow as tf

    path, prefix = os.fspath(path), os.fspath(prefix)
    directory = os.path.dirname(prefix)
    if directory and not tf.io.gfile.isdir(directory):
        raise CheckpointNotFoundError(f"cannot write '{prefix}': directory '{directory}' does not exist; create it first")
    with npz.Archive(path) as archive:
        names = list(archive.manifest.names)
        if keep is not None:
            names = as_selector(keep, "keep").names(npz_catalog(path))
        entries = {e.name: e for e in archive.manifest.arrays}
        arrays = archive.load(names)
    specs = []
    for name in names:
        shape, _dtype, region = entry_spec(entries[name])
        if region is None:
            specs.append("")
        else:
            offset, box = region
            specs.append(" ".join(str(d) for d in shape) + " " + ":".join(f"{o},{s}" for o, s in zip(offset, box)))
    values = read_back(prefix, {name: arrays[name] for name in names}, specs)
    for name, value in zip(names, values):
        original = arrays[name]
        if value.shape != original.shape or not np.array_equal(_bytes(value), _bytes(original)):
            raise CorruptCheckpointError(f"'{prefix}': tensor '{name}' read back differs from '{path}'; disk full?")
    return ConvertReport(path, prefix, tuple(names), tuple(n for n in entries if n not in set(names)),
                         sum(a.nbytes for a in arrays.values()))


def _bytes(array):
    """The array's bytes as a flat uint8 view (bit-exact comparisons, NaNs included)."""
    import numpy as np

    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)
