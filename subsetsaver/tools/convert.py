"""Converting checkpoint files between formats, without a graph and without TensorFlow.

Formats: ``name`` (a TensorFlow name-based checkpoint, what ``tf.compat.v1.train.Saver``
writes and restores), ``npz`` (subsetsaver's portable file) and ``safetensors`` (for
PyTorch, JAX and the rest). ``keep`` selects what is converted (roles guessed from names,
or read from a subsetsaver safetensors file's metadata). Tensors are read one at a time;
a TensorFlow checkpoint is written as they come, every tensor is read back against the
checksum of the source's bytes, and the ``checkpoint`` state file of its directory then
names it.

Example::

    >>> convert('train/model-9000', 'model.safetensors', keep='trainable() | bn_stats()').kept[:2]
    ('conv_1/b', 'conv_1/bn/beta')
    >>> convert('model.safetensors', 'serve/model', to='name').output
    'serve/model'
"""

from __future__ import annotations

import dataclasses
import json
import os

from .. import catalog as catalog_module
from ..errors import UnsupportedDtypeError
from ..formats import npz, safetensors_file, subset_manifest, tf_bundle, tf_state
from ..formats.npz import entry_spec
from ..selectors import as_selector
from .slim import verify_written

FORMATS = ("name", "npz", "safetensors")
_HOLDERS = {"npz": "portable checkpoints", "safetensors": "safetensors files"}


@dataclasses.dataclass(frozen=True)
class ConvertReport:
    """What a conversion wrote: ``source``, ``output``, the ``kept`` and ``dropped`` names, data bytes,
    and the formats read and written."""

    source: str
    output: str
    kept: tuple
    dropped: tuple
    nbytes: int
    source_format: str = "name"
    output_format: str = "npz"


def convert(source, output, keep=None, to=None) -> ConvertReport:
    """Write the tensors of ``source`` that ``keep`` selects (None: all) to ``output`` in the format
    ``to`` ('name', 'npz', 'safetensors'; None: from ``output``'s extension)."""
    selector = as_selector(keep, "keep")
    to = to or catalog_module.file_format(output)
    if to not in FORMATS:
        raise ValueError(f"unknown format {to!r}; the formats are {', '.join(FORMATS)}")
    source_format = catalog_module.file_format(source)
    if source_format == "name":
        source = catalog_module.checkpoint_prefix(source)
    source, output = os.fspath(source), os.fspath(output)
    if to == source_format:
        raise ValueError(f"'{source}' is already a {to} checkpoint; to select tensors of it, use `subsetsaver slim`"
                         if to == "name" else f"'{source}' and '{output}' are both {to} files; convert to another format")
    cat = catalog_module.file_catalog(source)
    kept = selector.names(cat)
    kept_set = set(kept)
    dropped = tuple(n for n in cat.ordered_names if n not in kept_set)
    if to != "name":
        unsupported = [n for n in kept if cat.record(n).dtype not in npz.STORED_AS]
        if unsupported:
            raise UnsupportedDtypeError(
                f"{_HOLDERS[to]} hold numeric tensors only; '{source}' has {', '.join(unsupported)} "
                f"({cat.record(unsupported[0]).dtype}): leave them out, e.g. --keep \"{selector!r} - "
                f"name('{unsupported[0]}')\"")
    if to == "name":
        nbytes = _write_checkpoint(source, source_format, kept, output)
    else:
        arrays = dict(catalog_module.read_tensors(source, kept))
        nbytes = sum(array.nbytes for array in arrays.values())
        if to == "npz":
            npz.write(output, arrays, selector=repr(selector),
                      metadata={"source": source_format, "checkpoint": os.path.basename(source)})
        else:
            safetensors_file.write(output, arrays, _metadata(selector, cat, kept, source))
    return ConvertReport(source, output, tuple(kept), dropped, nbytes, source_format, to)


def checkpoint_to_npz(checkpoint, output, keep=None) -> ConvertReport:
    """A TensorFlow checkpoint's tensors (``keep``: a selector, None: all) in a portable file."""
    return convert(checkpoint, output, keep, to="npz")


def npz_to_checkpoint(path, prefix, keep=None) -> ConvertReport:
    """A portable file's arrays as a TensorFlow checkpoint at ``prefix`` that a Saver restores."""
    return convert(path, prefix, keep, to="name")


def _write_checkpoint(source, source_format, names, prefix) -> int:
    """Stream ``names`` of ``source`` into the TensorFlow checkpoint ``prefix``, read it back, name it latest."""
    regions = {}  # npz arrays that are one part of a partitioned variable: name -> (full shape, offset)
    if source_format == "npz":
        for entry in npz.read_manifest(source).arrays:
            shape, _dtype, region = entry_spec(entry)
            if region is not None:
                regions[entry.name] = (tuple(shape), tuple(region[0]))
    nbytes, written = 0, {}
    with tf_bundle.BundleWriter(prefix) as writer:
        for name, array in catalog_module.read_tensors(source, names):
            if name in regions:
                writer.add_slice(name, *regions[name], array)
            else:
                writer.add(name, array)
                written[name] = (array.shape, array.dtype)
            nbytes += array.nbytes
            del array  # one tensor in memory at a time
    verify_written(prefix, written, parts=regions.keys() & set(names))
    directory = os.path.dirname(prefix) or "."
    state = tf_state.read_state(directory)
    tf_state.write_state(directory, prefix, () if state is None else state.kept)
    return nbytes


def _metadata(selector, cat, kept, source) -> dict:
    """The string metadata of a safetensors file: the selection, roles by name, where it came from."""
    records = cat.records_by_name
    metadata = {
        "format": "subsetsaver.safetensors",
        "selector": repr(selector),
        "source": os.path.basename(source.rstrip("/")),
        "roles": json.dumps({name: sorted(records[name].roles - {"partitioned"}) for name in kept}),
    }
    manifest = subset_manifest.read_manifest(source) if catalog_module.file_format(source) == "name" else None
    if manifest is not None:
        metadata["subset_manifest"] = json.dumps(manifest)
    return metadata
