"""``rewrite`` (rename, drop, cast), ``diff`` (compare two checkpoints) and ``average`` (mean of checkpoints)."""

import math
import sys

import click

from ..planning import INITS, parse_rows_option
from ..selectors import format_bytes
from ..tools import average, diff, rewrite
from .options import parse_remap
from .output import echo_json, echo_table, shape_text

_STATUS_TEXT = {"equal": "equal", "close": "close", "changed": "changed", "only_a": "only in A",
                "only_b": "only in B", "shape": "shape differs", "dtype": "dtype differs"}


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
@click.option("--init", type=click.Choice([i for i in INITS if i != "variable"]), default="mean", show_default=True,
              help="What fills the new rows of --rows vocabularies (slots get zeros).")
@click.option("--seed", type=int, help="Seed of --init normal.")
@click.option("--dry-run", is_flag=True, help="Print the old -> new table and write nothing.")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def rewrite_command(checkpoint, output, keep, remap, cast, row_rules, init, seed, dry_run, force, as_json):
    """Write OUT with the tensors of CHECKPOINT renamed, dropped and cast (streamed, every tensor
    verified); OUT becomes the latest checkpoint of its directory.

    \b
      subsetsaver rewrite old/model-9000 -o new/model --remap model/=net/ --dry-run
      subsetsaver rewrite train/model-9000 -o serve/model --keep "~slots()" --cast "trainable()=bfloat16"
      subsetsaver rewrite train/model-9000 -o grown/model --rows body/emb=old_vocab.txt:new_vocab.txt --init mean
    """
    rows = dict(parse_rows_option(text, init=init, seed=seed) for text in row_rules)
    report = rewrite.rewrite(checkpoint, output, keep=keep, remap=parse_remap(remap), rows=rows,
                             cast=rewrite.parse_cast(cast), dry_run=dry_run, overwrite=force)
    axes = dict(report.row_axes)
    row_counts = [{"name": name, "axis": axes[name], "kept": c.kept, "added": c.added, "dropped": c.dropped}
                  for name, c in report.row_counts]
    if as_json:
        echo_json({"source": report.source, "output": report.output, "written": report.written,
                   "tensors": [{"old": r.old, "new": r.new, "shape": list(r.shape), "dtype": r.dtype,
                                "new_dtype": r.new_dtype} for r in report.rows],
                   "dropped": list(report.dropped), "bytes": report.nbytes, **({"rows": row_counts} if rows else {})})
        return
    echo_table(["old", "new", "shape", "dtype"],
               [[r.old, r.new if r.new != r.old else "=", shape_text(r.shape),
                 r.dtype if r.dtype == r.new_dtype else f"{r.dtype} -> {r.new_dtype}"] for r in report.rows])
    counts = (f"{len(report.rows)} tensors ({len(report.renamed)} renamed, {len(report.cast)} cast, "
              f"{len(report.dropped)} dropped), {format_bytes(report.nbytes)}")
    for moved in row_counts:
        click.echo(f"rows of {moved['name']} (axis {moved['axis']}): {moved['kept']:,} kept, {moved['added']:,} added, "
                   f"{moved['dropped']:,} dropped")
    if report.written:
        click.echo(f"\nwrote checkpoint {report.output}: {counts}; every tensor verified")
    else:
        click.echo(f"\ndry run: {report.output} would hold {counts}; nothing written")


@click.command("diff")
@click.argument("a")
@click.argument("b")
@click.option("--keep", metavar="EXPR", help="Compare only the tensors this selector chooses on either side.")
@click.option("--remap", multiple=True, metavar="OLD=NEW",
              help="Rename A's scope or name before pairing with B's, e.g. model/=net/ (repeatable).")
@click.option("--atol", type=float, default=0.0, show_default=True, help="Absolute tolerance per element.")
@click.option("--rtol", type=float, default=0.0, show_default=True, help="Tolerance relative to |B| per element.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def diff_command(a, b, keep, remap, atol, rtol, as_json):
    """Compare checkpoints A and B (TensorFlow checkpoints, .npz or .safetensors files) tensor by
    tensor, with totals per scope and per role. Exits 1 when a tensor differs beyond the tolerances,
    is held by one side only, or has another shape or dtype.

    \b
      subsetsaver diff pretrained/model finetuned/ --keep "scope('backbone')"
      subsetsaver diff train/model-100 train/model-200 --keep "bn_stats()" --atol 1e-6
    """
    report = diff.diff(a, b, keep=keep, remap=parse_remap(remap), atol=atol, rtol=rtol)
    if as_json:
        echo_json({"a": report.a, "b": report.b, "atol": report.atol, "rtol": report.rtol,
                   "different": report.different, "counts": report.counts(),
                   "tensors": [_tensor_json(t) for t in report.tensors],
                   "scopes": [{"scope": s, "counts": c} for s, c in report.by_scope().items()],
                   "roles": [{"role": r, "counts": c} for r, c in report.by_role().items()]})
    else:
        _echo_diff(report)
    if report.different:
        sys.exit(1)


def _echo_diff(report):
    click.echo(f"A: {report.a}\nB: {report.b}\n")
    echo_table(["name", "status", "shape", "dtype", "max abs", "rel L2", "beyond"],
               [[t.name, _STATUS_TEXT[t.status], _pair(t.shape_a, t.shape_b, shape_text), _pair(t.dtype_a, t.dtype_b),
                 _number(t.max_abs), _number(t.rel_l2), _percent(t.changed_fraction)] for t in report.tensors],
               "lllllrrr"[:7])
    statuses = list(report.counts())
    for title, groups in (("scope", report.by_scope()), ("role", report.by_role())):
        click.echo("")
        echo_table([title, "tensors"] + [_STATUS_TEXT[s] for s in statuses],
                   [[key, sum(counts.values())] + [counts.get(s, 0) for s in statuses] for key, counts in groups.items()],
                   "l" + "r" * (len(statuses) + 1))
    summary = ", ".join(f"{count} {_STATUS_TEXT[status]}" for status, count in report.counts().items())
    tolerance = f"atol {report.atol:g}, rtol {report.rtol:g}"
    verdict = "different" if report.different else "no differences beyond the tolerances"
    click.echo(f"\n{len(report.tensors)} tensors: {summary} ({tolerance}): {verdict}")


def _tensor_json(tensor):
    return {"name": tensor.name, "a_name": tensor.a_name, "status": tensor.status,
            "shape_a": None if tensor.shape_a is None else list(tensor.shape_a),
            "shape_b": None if tensor.shape_b is None else list(tensor.shape_b),
            "dtype_a": tensor.dtype_a, "dtype_b": tensor.dtype_b, "bytes": tensor.nbytes, "roles": list(tensor.roles),
            "max_abs": _finite(tensor.max_abs), "rel_l2": _finite(tensor.rel_l2),
            "changed_fraction": tensor.changed_fraction}


def _finite(value):
    """JSON has no infinity: a difference against a NaN or an infinity is the string 'inf'."""
    return "inf" if value is not None and math.isinf(value) else value


def _pair(a, b, text=str):
    if a is None or b is None:
        return text(a if b is None else b)
    return text(a) if a == b else f"{text(a)} vs {text(b)}"


def _number(value):
    return "-" if value is None else f"{value:.3g}"


def _percent(fraction):
    return "-" if fraction is None else f"{100 * fraction:.1f}%"


@click.command("average")
@click.argument("checkpoints", nargs=-1, required=True)
@click.option("-o", "--output", required=True, metavar="OUT", help="Prefix of the new checkpoint.")
@click.option("--keep", metavar="EXPR", help=f"Selector of the tensors to average (default: {average.DEFAULT_KEEP}); "
                                             "the rest come from the last checkpoint.")
@click.option("--weights", metavar="W,W,...", help="One weight per checkpoint, comma-separated (default: equal).")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a summary.")
def average_command(checkpoints, output, keep, weights, force, as_json):
    """Write OUT with the mean of the float tensors of CHECKPOINTS that EXPR selects; the step,
    the optimizer state and every other tensor come from the last checkpoint.

    \b
      subsetsaver average run/model-8000 run/model-9000 run/model-10000 -o avg/model
      subsetsaver average a/ b/ -o avg/model --weights 1,3
    """
    report = average.average(checkpoints, output, keep=keep, weights=_weights(weights), overwrite=force)
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
