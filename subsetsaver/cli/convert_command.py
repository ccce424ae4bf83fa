"""``convert``: a checkpoint file in another format: TensorFlow (name-based), .npz or .safetensors."""

import click

from .. import catalog
from ..selectors import format_bytes
from ..tools import convert
from .output import echo_json, prepare_output

_KINDS = {"name": "checkpoint", "npz": "portable file", "safetensors": "safetensors file"}


@click.command("convert")
@click.argument("source")
@click.argument("output")
@click.option("--keep", metavar="EXPR", help="Selector of the tensors to convert (default: all), e.g. \"~slots()\".")
@click.option("--to", "to", type=click.Choice(convert.FORMATS),
              help="Format of OUTPUT (default: from its extension; a path without .npz or .safetensors is "
                   "a TensorFlow checkpoint prefix, 'name').")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a summary line.")
def convert_command(source, output, keep, to, force, as_json):
    """Convert SOURCE to OUTPUT: a TensorFlow checkpoint (prefix or directory), an .npz or a
    .safetensors file into another of them, without TensorFlow.

    \b
      subsetsaver convert train/model-9000 model.safetensors --keep "trainable() | bn_stats()"
      subsetsaver convert train/model-9000 model.npz --keep "~slots()"
      subsetsaver convert model.npz serve/model
    """
    to = to or catalog.file_format(output)
    source_format = catalog.file_format(source)
    if to == source_format:
        raise click.UsageError(f"OUTPUT '{output}' is a {_KINDS[to]} like SOURCE; name one ending in "
                               + ("'.npz' or '.safetensors'" if to == "name" else "another extension, or a prefix")
                               + (", or pass --to (to keep part of a checkpoint, use `subsetsaver slim`)"
                                  if to == "name" else ", or pass --to"))
    prepare_output(output, force=force, checkpoint=to == "name")
    report = convert.convert(source, output, keep=keep, to=to)
    kind = _KINDS[report.output_format]
    if as_json:
        echo_json({"source": report.source, "output": report.output, "kind": kind, "format": report.output_format,
                   "source_format": report.source_format, "kept": list(report.kept),
                   "dropped": list(report.dropped), "bytes": report.nbytes})
        return
    total = len(report.kept) + len(report.dropped)
    click.echo(f"wrote {kind} {report.output}: {len(report.kept)} of {total} tensors, {format_bytes(report.nbytes)} "
               f"(from {report.source})")
    if report.dropped:
        click.echo(f"left out: {', '.join(report.dropped)}")
    elif keep is not None:
        click.echo(f"warning: --keep \"{keep}\" leaves out no tensor of {report.source}", err=True)
