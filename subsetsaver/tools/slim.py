"""Slimming: a new checkpoint with only the tensors you keep, written tensor by tensor.

Fine-tuned checkpoints carry optimizer state (Adam's two moments are twice the
weights). ``slim`` copies the kept tensors into a new checkpoint holding one at a time:
each is read, checked against its checksum and written straight away
(:mod:`subsetsaver.formats.tf_bundle`, no TensorFlow), then every written tensor is read
back and checked against the checksum of the source's bytes before ``slim`` returns. The files appear under their final names
only when complete. A manifest (``OUT.subset.json``) records what was kept, and the
``checkpoint`` state file of OUT's directory names OUT as the latest, so
``restore_or_initialize(sess, directory)`` and ``latest_checkpoint`` find it.

An object-based checkpoint (``tf.train.Checkpoint``, Keras ``save_weights``) is refused: a
subset of its tensors would no longer match its object graph. ``convert(..., to='name',
keep=...)`` writes the kept tensors as a name-based checkpoint instead, named as a TF1 graph
names them.

Example::

    >>> report = slim('train/model-9000', '~slots()', 'serve/model')
    >>> report.output_bytes / report.source_bytes
    0.33
"""

from __future__ import annotations

import dataclasses
import glob
import os

from .. import catalog as catalog_module
from ..errors import CheckpointMismatchError
from ..formats import tf_bundle, tf_state
from ..formats.subset_manifest import manifest_content, write_manifest
from ..selectors import as_selector
from .checkpoint_output import verify_written


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


def slim(checkpoint, keep, output, *, graph=None, overwrite=False) -> SlimReport:
    """Write ``output`` (a checkpoint prefix) holding only the tensors ``keep`` selects.

    ``keep``: a selector or its text, evaluated on the checkpoint's names (roles guessed
    from names) or, with ``graph`` (a tf.Graph or ``.meta`` file), on the graph, whose
    structure tells slots and statistics apart exactly. Memory holds one tensor at a time
    (two while verifying).
    """
    selector = as_selector(keep, "keep")
    source = catalog_module.checkpoint_prefix(checkpoint)
    if catalog_module.checkpoint_kind(source) == "object":
        raise ValueError(
            f"'{source}' is a TensorFlow object-based checkpoint (tf.train.Checkpoint or Keras save_weights), and a "
            "subset of it would no longer match its object graph; write the kept tensors as a name-based checkpoint "
            f"instead: subsetsaver convert {source} OUT --to name --keep \"{selector!r}\"")
    source_catalog = catalog_module.checkpoint_catalog(source)
    chosen_from = source_catalog if graph is None else catalog_module.load(graph)
    kept = selector.names(chosen_from)
    lacking = [name for name in kept if name not in source_catalog.all_names]
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
    parent = os.path.dirname(output)
    if parent:
        os.makedirs(parent, exist_ok=True)
    written = {}
    with tf_bundle.BundleReader(source) as reader:
        with tf_bundle.BundleWriter(output) as writer:
            for name in kept:
                value = reader.read(name)
                writer.add(name, value)
                written[name] = (value.shape, value.dtype)
                del value  # one tensor in memory at a time
        specs = {name: reader.spec(name) for name in kept}
    verify_written(output, written)
    records = source_catalog.records_by_name
    write_manifest(
        output,
        manifest_content(
            selector=repr(selector),
            variables=[
                {"name": n, "checkpoint_name": n, "shape": list(specs[n].shape), "dtype": specs[n].dtype,
                 "bytes": records[n].nbytes, "parts": 1}
                for n in kept
            ],
            initialized=[],
            slimmed_from=source,
            dropped=list(dropped),
        ),
    )
    tf_state.name_latest(output)
    return SlimReport(
        source=source,
        output=output,
        selector=repr(selector),
        kept=tuple(kept),
        dropped=dropped,
        source_bytes=checkpoint_file_bytes(source),
        output_bytes=checkpoint_file_bytes(output),
        data_files=len(glob.glob(glob.escape(output) + ".data-*")),
        verified=True,
    )


def checkpoint_file_bytes(prefix) -> int:
    """Bytes of a checkpoint's ``.index`` and ``.data-*`` files on disk."""
    files = glob.glob(glob.escape(prefix) + ".data-*") + [f"{prefix}.index"]
    return sum(os.path.getsize(path) for path in files if os.path.exists(path))


def _check_output(source, output, overwrite):
    if os.path.abspath(output) == os.path.abspath(source):
        raise ValueError(f"output '{output}' is the source checkpoint; write the slim checkpoint to a new prefix")
    if os.path.isdir(output):
        raise IsADirectoryError(f"output '{output}' is a directory; name a checkpoint prefix such as '{output}/model'")
    existing = sorted(glob.glob(glob.escape(output) + ".data-*")) + [p for p in (f"{output}.index",)
                                                                     if os.path.exists(p)]
    if existing and not overwrite:
        raise FileExistsError(f"checkpoint '{output}' already exists ({existing[0]}); pass overwrite=True (--force)")
