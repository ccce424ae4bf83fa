"""``slim``: a copy of a checkpoint with only the tensors a selector keeps.

Example::

    $ subsetsaver slim train/model-9000 --keep "~slots()" -o serve/model
"""

import click

from .. import planning, tools
from ..selectors import format_bytes
from .output import echo_json, meta_graph_path


@click.command("slim")
@click.argument("checkpoint")
@click.option("--keep", "expression", required=True, metavar="EXPR", help="Selector of the tensors to keep.")
@click.option("--graph", "graph", callback=meta_graph_path, metavar="MODEL.meta", help="Evaluate EXPR on this graph (exact roles).")
@click.option("-o", "--output", required=True, metavar="OUT", help="Prefix of the new checkpoint.")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def slim_command(checkpoint, expression, graph, output, force, as_json):
    """Write OUT with only the tensors of CHECKPOINT that EXPR keeps (streamed, verified bit-exact).
    For CHECKPOINT and OUT, gs:// and s3:// URLs work as well as local paths (pip install 'subsetsaver[gcs]' or '[s3]')."""
    report = tools.slim.slim(checkpoint, expression, output, graph=graph, overwrite=force)
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
        f"({planning.smaller_text(report.source_bytes, report.output_bytes)}); every kept tensor verified bit-exact"
    )
