"""``plan``: a dry run of a subset save and restore: what is saved, what is initialized, sizes, the check.

Example::

    $ subsetsaver plan --graph model.meta --save "trainable() | bn_stats()" --checkpoint ckpt/
"""

import sys

import click

from .. import planning
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
    For CKPT and MODEL.meta, gs:// and s3:// URLs work as well as local paths (pip install 'subsetsaver[gcs]' or '[s3]').

    Exits 1 when CKPT is missing variables or has other shapes or dtypes (unless
    --on-mismatch initialize, which initializes them instead).
    """
    the_plan = planning.plan_preview(expression, graph, remap=parse_remap(remap), on_mismatch=on_mismatch)  # no TensorFlow
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
