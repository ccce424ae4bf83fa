"""``inspect`` (what a checkpoint holds) and ``select`` (what an expression picks)."""

import collections

import click

from .. import catalog
from ..selectors import format_bytes, parse
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


@click.command("inspect")
@click.argument("checkpoint")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def inspect_command(checkpoint, as_json):
    """List a checkpoint's tensors with bytes, totals per top-level scope, and optimizer state."""
    cat = catalog.checkpoint_catalog(checkpoint)
    records = cat.records
    scopes = collections.OrderedDict()
    for record in records:
        top = record.name.split("/", 1)[0] if "/" in record.name else "(root)"
        count, nbytes = scopes.get(top, (0, 0))
        scopes[top] = (count + 1, nbytes + record.nbytes)
    optimizer = [r for r in records if "slot" in r.roles]
    total = sum(r.nbytes for r in records)
    if as_json:
        echo_json(
            {
                "checkpoint": catalog.checkpoint_prefix(checkpoint),
                "tensors": [record_json(r) for r in records],
                "scopes": [{"scope": s, "tensors": c, "bytes": b} for s, (c, b) in scopes.items()],
                "optimizer_state": {"tensors": len(optimizer), "bytes": sum(r.nbytes for r in optimizer)},
                "total": {"tensors": len(records), "bytes": total},
            }
        )
        return
    click.echo(f"checkpoint {catalog.checkpoint_prefix(checkpoint)}: {len(records)} tensors, {format_bytes(total)}")
    echo_table(RECORD_HEADERS, [record_row(r) for r in records], RECORD_ALIGN)
    click.echo("")
    echo_table(["scope", "tensors", "bytes", "size"],
               [[s, c, b, format_bytes(b)] for s, (c, b) in scopes.items()], "lrrr")
    if optimizer:
        opt_bytes = sum(r.nbytes for r in optimizer)
        click.echo(
            f"\nlooks like optimizer state (by name): {len(optimizer)} tensors, {format_bytes(opt_bytes)} "
            f"({100 * opt_bytes / max(total, 1):.0f}% of the checkpoint); "
            "`subsetsaver slim CKPT --keep \"~slots()\" -o OUT` drops it"
        )


@click.command("select")
@click.argument("expression")
@click.option("--graph", "graph", callback=meta_graph_path, metavar="MODEL.meta", help="MetaGraph file (written by Saver.save).")
@click.option("--checkpoint", metavar="CKPT", help="Checkpoint prefix or directory (names, shapes, dtypes only).")
@click.option("--explain", is_flag=True, help="Print the expression tree with counts and bytes.")
@click.option("--allow-empty", is_flag=True, help="An EXPRESSION that chooses nothing lists nothing (exit 0).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def select_command(expression, graph, checkpoint, explain, allow_empty, as_json):
    """List the variables an EXPRESSION chooses, with shapes, dtypes, bytes and totals."""
    selector = parse(expression)
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
