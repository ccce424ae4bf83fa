"""``select``: the variables an expression chooses in a graph or a checkpoint, with their totals.

Example::

    $ subsetsaver select --graph model.meta "trainable() | bn_stats()" --explain
"""

import click

from .. import selectors
from ..selectors import format_bytes
from .output import (
    RECORD_ALIGN,
    RECORD_HEADERS,
    echo_json,
    echo_table,
    load_source,
    meta_graph_path,
    record_json,
    record_row,
)


@click.command("select")
@click.argument("expression")
@click.option("--graph", "graph", callback=meta_graph_path, metavar="MODEL.meta", help="MetaGraph file (written by Saver.save).")
@click.option("--checkpoint", metavar="CKPT", help="Checkpoint prefix or directory (names, shapes, dtypes only).")
@click.option("--explain", is_flag=True, help="Print the expression tree with counts and bytes.")
@click.option("--allow-empty", is_flag=True, help="An EXPRESSION that chooses nothing lists nothing (exit 0).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def select_command(expression, graph, checkpoint, explain, allow_empty, as_json):
    """List the variables an EXPRESSION chooses, with shapes, dtypes, bytes and totals. For CKPT and
    MODEL.meta, gs:// and s3:// URLs work as well as local paths (pip install 'subsetsaver[gcs]' or '[s3]')."""
    selector = selectors.parse(expression)
    cat = load_source(graph, checkpoint)
    names = selector.names(cat, allow_empty=allow_empty)
    by_name = cat.records_by_name
    records = [by_name[n] for n in names]
    total = sum(r.nbytes for r in records)
    if as_json:
        echo_json(
            {
                "selector": repr(selector),
                "variables": [record_json(r) for r in records],
                "total": {"variables": len(records), "bytes": total},
                "of": {"variables": len(cat), "bytes": cat.nbytes(cat.all_names)},
                **({"explain": selector.explain(cat).splitlines()} if explain else {}),
            }
        )
        return
    if explain:
        click.echo(selector.explain(cat))
        click.echo("")
    echo_table(RECORD_HEADERS, [record_row(r) for r in records], RECORD_ALIGN)
    click.echo(
        f"\n{len(records)} of {len(cat)} variables, {format_bytes(total)} of {format_bytes(cat.nbytes(cat.all_names))}"
    )
