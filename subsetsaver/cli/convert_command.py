"""``convert``: a checkpoint file in another format: TensorFlow (name-based), .npz or .safetensors;
a TensorFlow 2 object-based checkpoint into any of them (``--to name``: named as a TF1 graph names it)."""

import click

from .. import catalog
from ..selectors import format_bytes
from ..tools import convert
from .options import parse_remap
from .output import echo_json, prepare_output

_KINDS = {"name": "checkpoint", "npz": "portable file", "safetensors": "safetensors file"}


@click.command("convert")
@click.argument("source")
@click.argument("output")
@click.option("--keep", metavar="EXPR", help="Selector of the tensors to convert (default: all), e.g. \"~slots()\".")
@click.option("--to", "to", type=click.Choice(convert.FORMATS),
              help="Format of OUTPUT (default: from its extension; a path without .npz or .safetensors is "
                   "a TensorFlow checkpoint prefix, 'name').")
@click.option("--remap", "remap", multiple=True, metavar="OLD=NEW",
              help="Write tensor or scope OLD as NEW, e.g. model/=net/ (repeatable).")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a summary line.")
def convert_command(source, output, keep, to, remap, force, as_json):
    """Convert SOURCE to OUTPUT: a TensorFlow checkpoint (prefix or directory), an .npz or a
    .safetensors file into another of them, without TensorFlow. A TensorFlow 2 object-based
    checkpoint (tf.train.Checkpoint, Keras save_weights) converted --to name is written as a TF1
    graph names its variables: full names, TF1 slot names, global_step, Adam's beta powers.

    \b
      subsetsaver convert train/model-9000 model.safetensors --keep "trainable() | bn_stats()"
      subsetsaver convert train/model-9000 model.npz --keep "~slots()"
      subsetsaver convert model.npz serve/model
      subsetsaver convert keras/weights tf1/model --to name --keep "~slots()"
    """
    to = to or catalog.file_format(output)
    source_format = catalog.file_format(source)
    if to == source_format and (to != "name" or catalog.checkpoint_kind(source) != "object"):
        raise click.UsageError(f"OUTPUT '{output}' is a {_KINDS[to]} like SOURCE; name one ending in "
                               + ("'.npz' or '.safetensors'" if to == "name" else "another extension, or a prefix")
                               + (", or pass --to (to keep part of a checkpoint, use `subsetsaver slim`)"
                                  if to == "name" else ", or pass --to"))
    prepare_output(output, force=force, checkpoint=to == "name")
    report = convert.convert(source, output, keep=keep, to=to, remap=parse_remap(remap))
    kind = _KINDS[report.output_format]
    if as_json:
        echo_json({"source": report.source, "output": report.output, "kind": kind, "format": report.output_format,
                   "source_format": report.source_format, "source_kind": report.source_kind,
                   "kept": list(report.kept),
                   "dropped": list(report.dropped), "bytes": report.nbytes, "renamed": dict(report.renamed),
                   "derived": list(report.derived)})
        return
    total = len(report.kept) + len(report.dropped)
    click.echo(f"wrote {kind} {report.output}: {len(report.kept)} of {total} tensors, {format_bytes(report.nbytes)} "
               f"(from {report.source})")
    if report.renamed:
        shown = ", ".join(f"{old} -> {new}" for old, new in report.renamed[:3])
        more = f" and {len(report.renamed) - 3} more" if len(report.renamed) > 3 else ""
        click.echo(f"renamed {len(report.renamed)}: {shown}{more}")
    if report.derived:
        click.echo(f"computed: {', '.join(report.derived)}")
    if report.dropped:
        click.echo(f"left out: {', '.join(report.dropped)}")
    elif keep is not None:
        click.echo(f"warning: --keep \"{keep}\" leaves out no tensor of {report.source}", err=True)
