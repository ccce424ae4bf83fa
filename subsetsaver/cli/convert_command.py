"""``convert``: a TensorFlow checkpoint to a portable ``.npz`` file, or a portable file back to a checkpoint."""

import click

from ..selectors import format_bytes
from ..tools import convert
from .output import echo_json, prepare_output


@click.command("convert")
@click.argument("source")
@click.argument("output")
@click.option("--keep", metavar="EXPR", help="Selector of the tensors to convert (default: all), e.g. \"~slots()\".")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a summary line.")
def convert_command(source, output, keep, force, as_json):
    """Convert SOURCE to OUTPUT: a checkpoint (prefix or directory) to OUT.npz, or IN.npz to a
    checkpoint prefix that tf.compat.v1.train.Saver restores.

    \b
      subsetsaver convert train/model-9000 model.npz --keep "~slots()"
      subsetsaver convert model.npz serve/model
    """
    if source.endswith(".npz"):
        if output.endswith(".npz"):
            raise click.UsageError("both SOURCE and OUTPUT are .npz files; one side must be a checkpoint prefix")
        prepare_output(output, force=force, checkpoint=True)
        report = convert.npz_to_checkpoint(source, output, keep=keep)
        kind = "checkpoint"
    else:
        if not output.endswith(".npz"):
            raise click.UsageError(f"OUTPUT '{output}' must end in .npz when SOURCE is a checkpoint")
        prepare_output(output, force=force)
        report = convert.checkpoint_to_npz(source, output, keep=keep)
        kind = "portable file"
    if as_json:
        echo_json({"source": report.source, "output": report.output, "kind": kind, "kept": list(report.kept),
                   "dropped": list(report.dropped), "bytes": report.nbytes})
        return
    total = len(report.kept) + len(report.dropped)
    click.echo(f"wrote {kind} {report.output}: {len(report.kept)} of {total} tensors, {format_bytes(report.nbytes)} "
               f"(from {report.source})")
    if report.dropped:
        click.echo(f"left out: {', '.join(report.dropped)}")
    elif keep is not None:
        click.echo(f"warning: --keep \"{keep}\" leaves out no tensor of {report.source}", err=True)
