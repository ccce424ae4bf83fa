"""``average``: the mean of the float tensors of several checkpoints, the rest from the last.

Example::

    $ subsetsaver average run/model-8000 run/model-9000 run/model-10000 -o avg/model
"""

import click

from .. import tools
from ..selectors import format_bytes
from .output import echo_json


@click.command("average")
@click.argument("checkpoints", nargs=-1, required=True)
@click.option("-o", "--output", required=True, metavar="OUT", help="Prefix of the new checkpoint.")
@click.option("--keep", metavar="EXPR",
              help="Selector of the tensors to average (default: every float tensor but the optimizer slots and the "
                   "step); the rest come from the last checkpoint.")
@click.option("--weights", metavar="W,W,...", help="One weight per checkpoint, comma-separated (default: equal).")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a summary.")
def average_command(checkpoints, output, keep, weights, force, as_json):
    """Write OUT with the mean of the float tensors of CHECKPOINTS that EXPR selects; the step,
    the optimizer state and every other tensor come from the last checkpoint. For CHECKPOINTS and
    OUT, gs:// and s3:// URLs work as well as local paths (pip install 'subsetsaver[gcs]' or '[s3]').

    \b
      subsetsaver average run/model-8000 run/model-9000 run/model-10000 -o avg/model
      subsetsaver average a/ b/ -o avg/model --weights 1,3
    """
    report = tools.average.average(checkpoints, output, keep=keep, weights=_weights(weights), overwrite=force)
    if as_json:
        echo_json({"inputs": list(report.inputs), "output": report.output, "weights": list(report.weights),
                   "averaged": list(report.averaged), "copied": list(report.copied), "bytes": report.nbytes})
        return
    weights_text = ", ".join(f"{w:.4g}" for w in report.weights)
    click.echo(f"averaged {len(report.averaged)} tensors over {len(report.inputs)} checkpoints (weights {weights_text})")
    if report.copied:
        click.echo(f"from the last checkpoint {report.inputs[-1]}: {', '.join(report.copied)}")
    click.echo(f"wrote checkpoint {report.output}: {len(report.averaged) + len(report.copied)} tensors, "
               f"{format_bytes(report.nbytes)}; every tensor verified")


def _weights(text):
    if text is None:
        return None
    try:
        return [float(part) for part in text.split(",")]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of numbers, e.g. 1,1,2",
                                 param_hint="--weights") from None
