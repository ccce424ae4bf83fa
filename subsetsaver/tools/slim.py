"""Slimming: a new checkpoint with only the tensors you keep, written tensor by tensor.

Fine-tuned checkpoints carry optimizer state (Adam's two moments are twice the
weights). ``slim`` copies the kept tensors into a new checkpoint without ever holding
the whole model: tensors are read one at a time with the ``CheckpointReader`` and
written in shards of at most ``memory_budget`` bytes (default: the largest kept tensor,
at least 64 MB) with ``SaveV2``; the shards are merged into one checkpoint with
``MergeV2Checkpoints``. The result is re-read and compared bit for bit before
``slim`` returns. A manifest (``OUT.subset.json``) records what was kept.

The object graph of a ``tf.train.Checkpoint`` (``_CHECKPOINTABLE_OBJECT_GRAPH``) is not
copied: restore a slimmed checkpoint by name (a ``Saver`` or a subsetsaver plan).

Example::

    >>> report = slim('train/model-9000', '~slots()', 'serve/model')
    >>> report.output_bytes / report.source_bytes
    0.33
"""

from __future__ import annotations

import dataclasses
import os
import uuid

from .. import catalog as catalog_module
from ..errors import CheckpointMismatchError, CorruptCheckpointError
from ..formats.subset_manifest import manifest_content, write_manifest
from ..selectors import parse

MIN_MEMORY_BUDGET = 64 * 2**20


@dataclasses.dataclass(frozen=True)
class SlimReport:
    """What :func:`slim` wrote: prefixes, kept and dropped names, file bytes before and after."""

    source: str
    output: str
    selector: str
    kept: tuple
    dropped: tuple
    source_bytes: int
    output_bytes: int
    data_files: int
    verified: bool

    @property
    def ratio(self) -> float:
        """How many times smaller the output's files are than the source's."""
        return self.source_bytes / self.output_bytes if self.output_bytes else float("inf")


def slim(checkpoint, keep, output, *, graph=None, memory_budget=None, overwrite=False) -> SlimReport:
    """Write ``output`` (a checkpoint prefix) holding only the tensors ``keep`` selects.

    ``keep``: a selector or its text, evaluated on the checkpoint's names (roles guessed
    from names) or, with ``graph`` (a tf.Graph or ``.meta`` file), on the graph, whose
    structure tells slots and statistics apart exactly. ``memory_budget``: the most
    bytes of tensor values held at once (more shards when smaller).
    """
    import tensorflow as tf

    selector = parse(keep) if isinstance(keep, str) else keep
    source = catalog_module.checkpoint_prefix(checkpoint)
    reader = catalog_module.open_checkpoint(source)
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    source_catalog = catalog_module.checkpoint_catalog(source)
    chosen_from = source_catalog if graph is None else catalog_module.load(graph)
    kept = selector.names(chosen_from)
    lacking = [name for name in kept if name not in shapes]
    if lacking:
        raise CheckpointMismatchError(
            f"the graph's selection {selector!r} names {len(lacking)} variable{'s' if len(lacking) > 1 else ''} "
            f"that checkpoint '{source}' lacks: {', '.join(lacking)}; pass the graph the checkpoint was written from",
            lacking,
        )
    kept = sorted(kept)
    kept_set = set(kept)
    dropped = tuple(n for n in sorted(source_catalog.all_names) if n not in kept_set)

    output = os.fspath(output)
    _check_output(source, output, overwrite)
    sizes = {name: catalog_module.value_bytes(tuple(shapes[name]), dtypes[name]) for name in kept}
    budget = memory_budget or max(max(sizes.values(), default=0), MIN_MEMORY_BUDGET)
    shards = _pack(kept, sizes, budget)

    parent = os.path.dirname(output)
    if parent:
        tf.io.gfile.makedirs(parent)
    workspace = os.path.join(parent or ".", f".{os.path.basename(output)}.slim-{uuid.uuid4().hex[:8]}")
    try:
        _write_shards(reader, dtypes, shards, workspace, output)
    except tf.errors.OpError as error:
        message = (getattr(error, "message", "") or str(error)).strip().splitlines()[0]
        raise CorruptCheckpointError(f"cannot slim '{source}' into '{output}': {message}") from error
    finally:
        if tf.io.gfile.exists(workspace):
            tf.io.gfile.rmtree(workspace)
    _verify(reader, output, kept)

    write_manifest(
        output,
        manifest_content(
            selector=repr(selector),
            variables=[
                {"name": n, "checkpoint_name": n, "shape": list(shapes[n]), "dtype": dtypes[n].name,
                 "bytes": sizes[n], "parts": 1}
                for n in kept
            ],
            initialized=[],
            slimmed_from=source,
            dropped=list(dropped),
        ),
    )
    return SlimReport(
        source=source,
        output=output,
        selector=repr(selector),
        kept=tuple(kept),
        dropped=dropped,
        source_bytes=checkpoint_file_bytes(source),
        output_bytes=checkpoint_file_bytes(output),
        data_files=len(shards),
        verified=True,
    )


def checkpoint_file_bytes(prefix) -> int:
    """Bytes of a checkpoint's ``.index`` and ``.data-*`` files on disk."""
    import tensorflow as tf

    files = tf.io.gfile.glob(f"{prefix}.data-*") + [f"{prefix}.index"]
    return sum(tf.io.gfile.stat(path).length for path in files if tf.io.gfile.exists(path))


def _check_output(source, output, overwrite):
    import tensorflow as tf

    if os.path.abspath(output) == os.path.abspath(source):
        raise ValueError(f"output '{output}' is the source checkpoint; write the slim checkpoint to a new prefix")
    if tf.io.gfile.isdir(output):
        raise IsADirectoryError(f"output '{output}' is a directory; name a checkpoint prefix such as '{output}/model'")
    existing = tf.io.gfile.glob(f"{output}.data-*") + [p for p in (f"{output}.index",) if tf.io.gfile.exists(p)]
    if existing and not overwrite:
        raise FileExistsError(f"checkpoint '{output}' already exists ({existing[0]}); pass overwrite=True (--force)")
    for path in existing:
        tf.io.gfile.remove(path)


def _pack(names, sizes, budget) -> list:
    """Consecutive names in shards of at most ``budget`` bytes (a bigger tensor gets its own)."""
    shards, current, total = [], [], 0
    for name in names:
        if current and total + sizes[name] > budget:
            shards.append(current)
            current, total = [], 0
        current.append(name)
        total += sizes[name]
    if current:
        shards.append(current)
    return shards


def _write_shards(reader, dtypes, shards, workspace, output):
    """SaveV2 one shard at a time (only its values in memory), then merge into ``output``."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        prefix_feed = tf.compat.v1.placeholder(tf.string, [], name="prefix")
        writers = []
        for names in shards:
            feeds = [tf.compat.v1.placeholder(dtypes[name], name=None) for name in names]
            save = tf.raw_ops.SaveV2(prefix=prefix_feed, tensor_names=names, shape_and_slices=[""] * len(names),
                                     tensors=feeds)
            writers.append((names, feeds, save))
        prefixes = [os.path.join(workspace, f"shard-{index:05d}") for index in range(len(shards))]
        merge = tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=prefixes, destination_prefix=output,
                                              delete_old_dirs=True)
    with tf.compat.v1.Session(graph=graph) as sess:
        for (names, feeds, save), shard_prefix in zip(writers, prefixes):
            values = {feed: reader.get_tensor(name) for feed, name in zip(feeds, names)}
            sess.run(save, {prefix_feed: shard_prefix, **values})
            del values
        sess.run(merge)


def _verify(reader, output, kept):
    """Re-read ``output`` and compare every tensor with the source, bit for bit, one at a time."""
    import numpy as np

    written = catalog_module.open_checkpoint(output)
    names = set(written.get_variable_to_shape_map())
    if names != set(kept):
        raise CorruptCheckpointError(
            f"slim checkpoint '{output}' holds {sorted(names ^ set(kept))[:5]} unexpectedly; it was not completed"
        )
    for name in kept:
        original, copy = reader.get_tensor(name), written.get_tensor(name)
        if original.dtype == object or copy.dtype == object:
            same = original.shape == copy.shape and original.tolist() == copy.tolist()
        else:
            same = (original.dtype == copy.dtype and original.shape == copy.shape
                    and np.array_equal(np.ascontiguousarray(original).reshape(-1).view(np.uint8),
                                       np.ascontiguousarray(copy).reshape(-1).view(np.uint8)))
        del original, copy  # hold one tensor (and its copy) at a time
        if not same:
            raise CorruptCheckpointError(f"slim checkpoint '{output}': tensor {name} differs from the source")
