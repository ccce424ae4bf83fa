"""``plan`` (a dry run of a subset save/restore) and ``slim`` (drop tensors from a checkpoint)."""

import sys

import click

from ..planning import plan_preview, smaller_text
from ..selectors import format_bytes
from ..tools import slim
from .advice import remedies
from .options import parse_remap
from .output import (
    RECORD_ALIGN,
    RECORD_HEADERS,
    echo_json,
    echo_table,
    meta_graph_path,
    record_json,
    record_row,
)


def _problem_json(problem):
    return {
        "kind": problem.kind,
        "name": problem.name,
        "checkpoint_name": problem.checkpoint_name,
        "expected_shape": None if problem.expected_shape is None else list(problem.expected_shape),
        "expected_dtype": problem.expected_dtype,
        "found_shape": None if problem.found_shape is None else list(problem.found_shape),
        "found_dtype": problem.found_dtype,
        "nearest": problem.nearest,
    }


def _sizes_json(sizes):
    return {
        "saved_bytes": sizes.saved_bytes,
        "rest_bytes": sizes.rest_bytes,
        "total_bytes": sizes.total_bytes,
        "data_bytes": sizes.data_bytes,
        "data_bytes_exact": sizes.exact,
        "index_bytes": sizes.index_bytes,
        "data_files": sizes.data_files,
        "checkpoint_bytes": sizes.checkpoint_bytes,
        "full_checkpoint_bytes": sizes.full_checkpoint_bytes,
        "times_smaller": round(sizes.ratio, 3),
        "per_scope": [
            {"scope": s.scope, "saved": s.saved_variables, "saved_bytes": s.saved_bytes,
             "initialized": s.rest_variables, "initialized_bytes": s.rest_bytes}
            for s in sizes.per_scope
        ],
    }


@click.command("plan")
@click.option("--graph", "graph", callback=meta_graph_path, required=True, metavar="MODEL.meta", help="MetaGraph file (written by Saver.save).")
@click.option("--save", "expression", required=True, metavar="EXPR", help="Selector of the variables to save.")
@click.option("--checkpoint", metavar="CKPT", help="Checkpoint to check the plan against (prefix or directory).")
@click.option("--remap", "remap", multiple=True, metavar="OLD=NEW",
              help="Checkpoint scope or name = graph scope or name, e.g. model/=net/ (repeatable).")
@click.option("--on-mismatch", type=click.Choice(["error", "initialize"]), default="error", show_default=True,
              help="What a restore from CKPT does with missing, reshaped or retyped variables.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def plan_command(graph, expression, checkpoint, remap, on_mismatch, as_json):
    """Dry run: what EXPR saves, what is initialized, sizes, and the diff against CKPT.

    Exits 1 when CKPT is missing variables or has other shapes or dtypes (unless
    --on-mismatch initialize, which initializes them instead).
    """
    the_plan = plan_preview(expression, graph, remap=parse_remap(remap), on_mismatch=on_mismatch)  # no TensorFlow
    by_name = the_plan.catalog.records_by_name
    report = the_plan.check(checkpoint) if checkpoint else None
    if as_json:
        saved = [dict(record_json(by_name[n]), checkpoint_name=the_plan.checkpoint_names[n])
                 for n in the_plan.saved_names]
        echo_json({
            "selector": repr(the_plan.selector),
            "graph": graph,
            "saved": saved,
            "initialized": [record_json(by_name[n]) for n in the_plan.rest_names],
            "sizes": _sizes_json(the_plan.sizes),
            "check": None if report is None else {
                "checkpoint": report.checkpoint,
                "ok": report.ok,
                "problems": [_problem_json(p) for p in report.problems],
                "remap_suggestion": report.remap,
            },
        })
    else:
        click.echo(f"saved ({len(the_plan.saved_names)}):")
        echo_table(RECORD_HEADERS, [record_row(by_name[n]) for n in the_plan.saved_names], RECORD_ALIGN)
        click.echo(f"\ninitialized ({len(the_plan.rest_names)}):")
        echo_table(RECORD_HEADERS, [record_row(by_name[n]) for n in the_plan.rest_names], RECORD_ALIGN)
        click.echo("")
        click.echo(the_plan.summary())
        if report is not None:
            click.echo("")
            click.echo(report.text(remedies(report.fixes, click.get_current_context().command)))
    if report is not None and not report.ok and on_mismatch == "error":
        sys.exit(1)


@click.command("slim")
@click.argument("checkpoint")
@click.option("--keep", "expression", required=True, metavar="EXPR", help="Selector of the tensors to keep.")
@click.option("--graph", "graph", callback=meta_graph_path, metavar="MODEL.meta", help="Evaluate EXPR on this graph (exact roles).")
@click.option("-o", "--output", required=True, metavar="OUT", help="Prefix of the new checkpoint.")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def slim_command(checkpoint, expression, graph, output, force, as_json):
    """Write OUT with only the tensors of CHECKPOINT that EXPR keeps (streamed, verified bit-exact)."""
    report = slim.slim(checkpoint, expression, output, graph=graph, overwrite=force)
    if not report.dropped:
        click.echo(f"warning: --keep \"{report.selector}\" drops no tensor of {report.source}, so {report.output} "
                   "is a copy of it", err=True)
    if as_json:
        echo_json({
            "source": report.source,
            "output": report.output,
            "selector": report.selector,
            "kept": list(report.kept),
            "dropped": list(report.dropped),
            "source_bytes": report.source_bytes,
            "output_bytes": report.output_bytes,
            "times_smaller": round(report.ratio, 3),
            "data_files": report.data_files,
            "verified": report.verified,
        })
        return
    click.echo(f"kept {len(report.kept)} tensors, dropped {len(report.dropped)} ({report.selector})")
    click.echo(
        f"{report.source}: {format_bytes(report.source_bytes)} -> {report.output}: {format_bytes(report.output_bytes)} "
        f"({smaller_text(report.source_bytes, report.output_bytes)}); every kept tensor verified bit-exact"
    )
