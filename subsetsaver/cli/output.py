"""Shared output for the commands: aligned tables, JSON, and loading a source from options."""

import json
import os

import click

from .. import catalog, storage
from ..errors import Fix, OutputExistsError
from ..selectors import format_bytes


def echo_json(value):
    click.echo(json.dumps(value, indent=2, sort_keys=False))


def echo_table(headers, rows, align=None):
    """Print rows under headers, columns padded; ``align`` is a string of 'l'/'r' per column."""
    rows = [[str(cell) for cell in row] for row in rows]
    align = align or "l" * len(headers)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(cells, widths, align)).rstrip()

    click.echo(line(headers))
    click.echo(line(["-" * w for w in widths]))
    for row in rows:
        click.echo(line(row))


def shape_text(shape):
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def record_json(record):
    return {
        "name": record.name,
        "shape": list(record.shape),
        "dtype": record.dtype,
        "bytes": record.nbytes,
        "trainable": record.trainable,
        "roles": sorted(record.roles),
        "collections": sorted(record.collections),
        "slot_of": record.slot_of,
    }


def object_json(record):
    """The fields of a tensor of an object-based checkpoint: its object path and checkpoint key."""
    return {"object_path": record.object_path, "checkpoint_key": record.checkpoint_key}


def record_row(record):
    return [record.name, shape_text(record.shape), record.dtype, record.nbytes, format_bytes(record.nbytes),
            ",".join(sorted(record.roles))]


RECORD_HEADERS = ["name", "shape", "dtype", "bytes", "size", "roles"]
RECORD_ALIGN = "lllrrl"


def load_source(graph, checkpoint):
    """The catalog named by ``--graph`` (preferred: it has structure) or ``--checkpoint``."""

    if graph is None and checkpoint is None:
        raise click.UsageError("name a source: --graph model.meta or --checkpoint CKPT")
    return catalog.load(graph if graph is not None else checkpoint)


_HOW_TO_WRITE_ONE = ("write one from the graph that trains it with "
                     "tf.compat.v1.train.export_meta_graph('{prefix}.meta') and pass that")


def meta_graph_path(ctx, param, path):
    """Click callback for ``--graph``: a MetaGraph file, or a usage error that says what to pass instead."""
    if path is None or path.endswith(".meta") and not os.path.isdir(path):
        return path
    if storage.is_directory(path):
        metas = [storage.join(path, name) for name in storage.list_directory(path) if name.endswith(".meta")]
        hint = f"; pass --graph {metas[-1]}" if metas else (
            f", and it holds no .meta file; {_HOW_TO_WRITE_ONE.format(prefix=storage.join(path, 'model'))}")
        raise click.BadParameter(f"'{path}' is a directory, not a MetaGraph file{hint} "
                                 f"(or --checkpoint {path} for names, shapes and dtypes only)", ctx, param)
    prefix = path[:-len(".index")] if path.endswith(".index") else path
    if os.path.exists(prefix + ".index"):
        hint = f"pass --graph {prefix}.meta" if os.path.exists(prefix + ".meta") else (
            f"there is no {prefix}.meta (saved with write_meta_graph=False); {_HOW_TO_WRITE_ONE.format(prefix=prefix)}")
        raise click.BadParameter(f"'{path}' is a checkpoint, not a MetaGraph file; {hint} "
                                 f"(or --checkpoint {prefix} for names, shapes and dtypes only)", ctx, param)
    raise click.BadParameter(f"'{path}' is not a MetaGraph file (they end in .meta); pass the .meta file that "
                             "Saver.save wrote", ctx, param)


def prepare_output(path, *, force, beside=None):
    """Refuse to replace the file at ``path`` (a drawing, or the file written ``beside`` the one named)
    without ``--force``, and create its missing directories. (Checkpoints are checked by the library's one writer.)"""
    if storage.exists(path) and not force:
        written_with = f" (the tree's DOT source, written beside '{beside}')" if beside else ""
        raise OutputExistsError(f"'{path}' already exists{written_with}", path=path,
                                fixes=[Fix("overwrite", True, "to replace it")])
    storage.make_directories(storage.parent(path))
