"""Shared output for the commands: aligned tables, JSON, and loading a source from options."""

import json

import click

from .. import catalog
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
