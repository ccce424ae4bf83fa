"""``rewrite``: a copy of a checkpoint with tensors renamed, dropped, cast or their rows moved.

Example::

    $ subsetsaver rewrite old/model-9000 -o new/model --remap model/=net/ --dry-run
"""

import click

from .. import planning, tools
from ..selectors import format_bytes
from .options import KnownName, parse_remap
from .output import echo_json, echo_table, shape_text


@click.command("rewrite")
@click.argument("checkpoint")
@click.option("-o", "--output", required=True, metavar="OUT", help="Prefix of the new checkpoint.")
@click.option("--keep", metavar="EXPR", help="Selector of the tensors to keep (default: all).")
@click.option("--remap", multiple=True, metavar="OLD=NEW",
              help="Rename a scope or a name, e.g. model/=net/ (repeatable; scopes end in '/').")
@click.option("--cast", multiple=True, metavar="EXPR=DTYPE",
              help="Cast the tensors EXPR selects to float16, bfloat16, float32 or float64 (repeatable).")
@click.option("--rows", "row_rules", multiple=True, metavar="NAME=OLD:NEW",
              help="Move the rows of NAME (and its slots) from vocabulary file OLD to NEW, or keep the old rows "
                   "a file lists with NAME=keep:FILE (repeatable).")
@click.option("--init", type=KnownName("way to fill rows", "ways", lambda: set(planning.INITS) - {"variable"}),
              default="mean", show_default=True,
              help="What fills the new rows of --rows vocabularies: mean, zeros or normal (slots get zeros).")
@click.option("--seed", type=int, help="Seed of --init normal.")
@click.option("--dry-run", is_flag=True, help="Print the old -> new table and write nothing.")
@click.option("-v", "--verbose", is_flag=True, help="Print the old -> new table of what is written too.")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def rewrite_command(checkpoint, output, keep, remap, cast, row_rules, init, seed, dry_run, verbose, force, as_json):
    """Write OUT with the tensors of CHECKPOINT renamed, dropped and cast (streamed, every tensor
    verified); OUT becomes the latest checkpoint of its directory. The old -> new table is printed
    with --dry-run or -v. For CHECKPOINT and OUT, gs:// and s3:// URLs work as well as local paths (pip install 'subsetsaver[gcs]' or '[s3]').

    \b
      subsetsaver rewrite old/model-9000 -o new/model --remap model/=net/ --dry-run
      subsetsaver rewrite train/model-9000 -o serve/model --keep "~slots()" --cast "trainable()=bfloat16"
      subsetsaver rewrite train/model-9000 -o grown/model --rows body/emb=old_vocab.txt:new_vocab.txt --init mean
    """
    rows = dict(planning.parse_rows_option(text, init=init, seed=seed) for text in row_rules)
    report = tools.rewrite.rewrite(checkpoint, output, keep=keep, remap=parse_remap(remap), rows=rows,
                                   cast=tools.rewrite.parse_cast(cast), dry_run=dry_run, overwrite=force)
    axes = dict(report.row_axes)
    row_counts = [{"name": name, "axis": axes[name], "kept": c.kept, "added": c.added, "dropped": c.dropped}
                  for name, c in report.row_counts]
    if as_json:
        echo_json({"source": report.source, "output": report.output, "written": report.written,
                   "tensors": [{"old": r.old, "new": r.new, "shape": list(r.shape), "dtype": r.dtype,
                                "new_dtype": r.new_dtype} for r in report.rows],
                   "dropped": list(report.dropped), "bytes": report.nbytes, **({"rows": row_counts} if rows else {})})
        return
    if dry_run or verbose:
        echo_table(["old", "new", "shape", "dtype"],
                   [[r.old, r.new if r.new != r.old else "=", shape_text(r.shape),
                     r.dtype if r.dtype == r.new_dtype else f"{r.dtype} -> {r.new_dtype}"] for r in report.rows])
    counts = (f"{len(report.rows)} tensors ({len(report.renamed)} renamed, {len(report.cast)} cast, "
              f"{len(report.dropped)} dropped), {format_bytes(report.nbytes)}")
    for moved in row_counts:
        click.echo(f"rows of {moved['name']} (axis {moved['axis']}): {moved['kept']:,} kept, {moved['added']:,} added, "
                   f"{moved['dropped']:,} dropped")
    if dry_run or verbose or row_counts:
        click.echo("")
    if report.written:
        click.echo(f"wrote checkpoint {report.output}: {counts}; every tensor verified")
    else:
        click.echo(f"dry run: {report.output} would hold {counts}; nothing written")
