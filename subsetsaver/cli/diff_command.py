"""``diff``: two checkpoints compared tensor by tensor, with totals per scope and per role.

Example::

    $ subsetsaver diff pretrained/model finetuned/ --keep "scope('backbone')"
"""

import math
import sys

import click

from .. import tools
from .options import parse_remap
from .output import echo_json, echo_table, shape_text

_STATUS_TEXT = {"equal": "equal", "close": "close", "changed": "changed", "only_a": "only in A",
                "only_b": "only in B", "shape": "shape differs", "dtype": "dtype differs"}


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
    is held by one side only, or has another shape or dtype. For A and B, gs:// and s3:// URLs work as well as local paths (pip install 'subsetsaver[gcs]' or '[s3]').

    \b
      subsetsaver diff pretrained/model finetuned/ --keep "scope('backbone')"
      subsetsaver diff train/model-100 train/model-200 --keep "bn_stats()" --atol 1e-6
    """
    report = tools.diff.diff(a, b, keep=keep, remap=parse_remap(remap), atol=atol, rtol=rtol)
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
