"""``inspect``: what a checkpoint holds, tensor by tensor, with totals per scope and the optimizer state.

Example::

    $ subsetsaver inspect ckpt/model-1000 --json
"""

import collections

import click

from .. import catalog, selectors
from ..formats import subset_manifest
from ..selectors import format_bytes
from .output import RECORD_ALIGN, RECORD_HEADERS, echo_json, echo_table, object_json, record_json, record_row


@click.command("inspect")
@click.argument("checkpoint")
@click.option("--keep", metavar="EXPR", help="Only the tensors this selector chooses.")
@click.option("--values", "values_of", metavar="NAME", help="Print the values of tensor NAME (summarised).")
@click.option("--stats", is_flag=True, help="Min, max, mean and std of every numeric tensor (reads the values).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def inspect_command(checkpoint, keep, values_of, stats, as_json):
    """List the tensors of CHECKPOINT (a TensorFlow checkpoint, name- or object-based, .npz or .safetensors
    file) with bytes, totals per top-level scope, optimizer state and the subset manifest; an object-based
    checkpoint's tensors by their recorded full names, with their object paths. For CHECKPOINT,
    gs:// and s3:// URLs work as well as local paths (pip install 'subsetsaver[gcs]' or '[s3]')."""
    source = catalog.source_path(checkpoint)
    cat = catalog.file_catalog(source)
    object_based = cat.checkpoint_kind == "object"
    _say_which_checkpoint(checkpoint, source)
    if values_of is not None:
        _echo_values(source, cat, values_of, as_json)
        return
    names = set(selectors.parse(keep).names(cat)) if keep is not None else cat.all_names
    records = [r for r in cat.records if r.name in names]
    scopes = collections.OrderedDict()
    for record in records:
        top = record.name.split("/", 1)[0] if "/" in record.name else "(root)"
        count, nbytes = scopes.get(top, (0, 0))
        scopes[top] = (count + 1, nbytes + record.nbytes)
    optimizer = [r for r in records if r.name in cat.role("slot")]  # what slots() selects: hyperparameters too
    total = sum(r.nbytes for r in records)
    manifest = subset_manifest.read_manifest(source)
    statistics = _statistics(source, records) if stats else None
    if as_json:
        echo_json(
            {
                "checkpoint": source,
                "format": cat.checkpoint_kind,
                "kind": cat.checkpoint_kind,
                "tensors": [dict(record_json(r), **(object_json(r) if object_based else {}),
                                 **({"stats": statistics[r.name]} if statistics else {}))
                            for r in records],
                "scopes": [{"scope": s, "tensors": c, "bytes": b} for s, (c, b) in scopes.items()],
                "optimizer_state": {"tensors": len(optimizer), "bytes": sum(r.nbytes for r in optimizer)},
                "total": {"tensors": len(records), "bytes": total},
                "manifest": manifest,
            }
        )
        return
    click.echo(f"checkpoint {source} ({_KIND_NAMES.get(cat.checkpoint_kind, cat.checkpoint_kind)}): {len(records)} tensors, "
               f"{format_bytes(total)}")
    headers, align = RECORD_HEADERS + (["object path"] if object_based else []), RECORD_ALIGN + ("l" if object_based
                                                                                                 else "")
    rows = [record_row(r) + ([r.object_path or "-"] if object_based else []) for r in records]
    if statistics:
        echo_table(headers + ["min", "max", "mean", "std"],
                   [row + _stat_cells(statistics[r.name]) for row, r in zip(rows, records)], align + "rrrr")
    else:
        echo_table(headers, rows, align)
    click.echo("")
    echo_table(["scope", "tensors", "bytes", "size"],
               [[s, c, b, format_bytes(b)] for s, (c, b) in scopes.items()], "lrrr")
    if manifest is not None:
        click.echo(f"\nsubset manifest: written by a plan with selector {manifest.get('selector')}; "
                   f"{len(manifest.get('variables', []))} saved, {len(manifest.get('initialized', []))} initialized "
                   "on restore")
    if optimizer and object_based:
        opt_bytes = sum(r.nbytes for r in optimizer)
        click.echo(
            f"\noptimizer state (from the object graph): {len(optimizer)} tensors, {format_bytes(opt_bytes)} "
            f"({100 * opt_bytes / max(total, 1):.0f}% of the checkpoint); "
            "`subsetsaver convert CKPT OUT --to name --keep \"~slots()\"` writes a name-based checkpoint without it"
        )
    elif optimizer:
        opt_bytes = sum(r.nbytes for r in optimizer)
        click.echo(
            f"\nlooks like optimizer state (by name): {len(optimizer)} tensors, {format_bytes(opt_bytes)} "
            f"({100 * opt_bytes / max(total, 1):.0f}% of the checkpoint); "
            "`subsetsaver slim CKPT --keep \"~slots()\" -o OUT` drops it"
        )


_KIND_NAMES = {"name": "TensorFlow checkpoint", "object": "TensorFlow object-based checkpoint", "npz": "portable .npz",
               "safetensors": "safetensors", "keras": "Keras 3 .weights.h5"}


def _echo_values(source, cat, name, as_json):
    import numpy as np

    if name not in cat.all_names:
        close = closest_text(name, cat.ordered_names)
        raise click.BadParameter(f"'{source}' has no tensor '{name}'{close}", param_hint="--values")
    ((_, value),) = catalog.read_tensors(source, [name])
    if as_json:
        echo_json({"name": name, "shape": list(np.shape(value)), "dtype": str(value.dtype),
                   "values": np.asarray(value).tolist() if np.size(value) <= 1000 else None})
        return
    click.echo(f"{name} {list(np.shape(value))} {value.dtype}")
    click.echo(np.array2string(np.asarray(value), threshold=200, edgeitems=3))


def _statistics(source, records) -> dict:
    """name -> {'min', 'max', 'mean', 'std'} (None for strings and empty tensors), one tensor in memory at a time."""
    import numpy as np

    found = {}
    names = [r.name for r in records]
    for name, value in catalog.read_tensors(source, names):
        array = np.asarray(value)
        if array.size == 0 or array.dtype.kind not in "biuf":
            found[name] = None
            continue
        numbers = array.astype(np.float64)
        found[name] = {"min": float(numbers.min()), "max": float(numbers.max()), "mean": float(numbers.mean()),
                       "std": float(numbers.std())}
    return found


def _stat_cells(values) -> list:
    if values is None:
        return ["-", "-", "-", "-"]
    return [f"{values[key]:.4g}" for key in ("min", "max", "mean", "std")]


def closest_text(name, names) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(names), n=3)
    return f"; closest: {', '.join(close)}" if close else ""


def _say_which_checkpoint(given, source):
    """A MetaGraph file holds a graph and no values: say that its checkpoint is what was inspected."""
    if str(given).endswith(".meta") and str(source) != str(given):
        click.echo(f"note: '{given}' is a MetaGraph file (a graph, no values); inspecting the checkpoint '{source}' "
                   f"saved with it. For the graph's variables and roles: subsetsaver select --graph {given} "
                   "'everything()'", err=True)
