"""Slimming: a new checkpoint with only the tensors you keep, written tensor by tensor.

Fine-tuned checkpoints carry optimizer state (Adam's two moments are twice the
weights). ``slim`` copies the kept tensors into a new checkpoint holding one at a time:
each is read, checked against its checksum and written straight away
(:mod:`subsetsaver.formats.tf.bundle`, no TensorFlow), then every written tensor is read
back and checked against the checksum of the source's bytes before ``slim`` returns. The files appear under their final names
only when complete. A manifest (``OUT.subset.json``) records what was kept, and the
``checkpoint`` state file of OUT's directory names OUT as the latest, so
``restore_or_initialize(sess, directory)`` and ``latest_checkpoint`` find it.

An object-based checkpoint (``tf.train.Checkpoint``, Keras ``save_weights``) is refused: a
subset of its tensors would no longer match its object graph. ``convert(..., to='name',
keep=...)`` writes the kept tensors as a name-based checkpoint instead, named as a TF1 graph
names them.

Example::

    report = slim('train/model-9000', '~slots()', 'serve/model')
    report.output_bytes / report.source_bytes
    # 0.33
"""

from __future__ import annotations

import dataclasses
import os

from .. import catalog as catalog_module
from ..errors import CheckpointMismatchError, InvalidOutputError
from ..formats import checkpoint_writer, registry, subset_manifest
from ..formats.tf import bundle
from ..selectors import as_selector


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
        raise InvalidOutputError(
            f"'{source}' is a TensorFlow object-based checkpoint (tf.train.Checkpoint or Keras save_weights), and a "
            "subset of it would no longer match its object graph; write the kept tensors as a name-based checkpoint "
            f"instead: subsetsaver convert {source} OUT --to name --keep \"{selector!r}\"", path=source)
    source_catalog = catalog_module.checkpoint_catalog(source)
    chosen_from = source_catalog if graph is None else catalog_module.load(graph)
    kept = selector.names(chosen_from)
    catalog_module.warn_missed_optimizer_state(chosen_from, selector, kept, source, stacklevel=2)
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
    records = source_catalog.records_by_name
    checkpoint_writer.write_checkpoint(
        output, catalog_module.read_tensors(source, kept), checkpoint_format=registry.NAME, sources=[source],
        overwrite=overwrite, specs=[(n, records[n].shape, records[n].dtype) for n in kept],
        manifest=subset_manifest.manifest_content(
            selector=repr(selector),
            variables=[
                {"name": n, "checkpoint_name": n, "shape": list(records[n].shape), "dtype": records[n].dtype,
                 "bytes": records[n].nbytes, "parts": 1}
                for n in kept
            ],
            initialized=[],
            slimmed_from=source,
            dropped=list(dropped),
        ))
    return SlimReport(
        source=source,
        output=output,
        selector=repr(selector),
        kept=tuple(kept),
        dropped=dropped,
        source_bytes=bundle.checkpoint_bytes(source),
        output_bytes=bundle.checkpoint_bytes(output),
        data_files=len(bundle.data_files(output)),
        verified=True,
    )

