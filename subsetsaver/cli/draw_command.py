"""``draw``: the variable sets as a picture, or the scope tree of a plan.

Example::

    $ subsetsaver draw --graph model.meta --save "trainable() | bn_stats()" \\
          --set trainable=trainable() --set conv_1/bn="scope('conv_1/bn')" -o sets.png
    $ subsetsaver draw --graph model.meta --save "trainable() | bn_stats()" --tree -o plan.svg
"""

import os
import types
import warnings

import click

from .. import planning, selectors
from ..errors import SubsetSaverWarning
from .output import load_source, meta_graph_path, prepare_output

DEFAULT_SETS = (("trainable", "trainable()"), ("bn_stats", "bn_stats()"), ("slots", "slots()"))


@click.command("draw")
@click.option("--graph", "graph", callback=meta_graph_path, metavar="MODEL.meta", help="MetaGraph file (written by Saver.save).")
@click.option("--checkpoint", metavar="CKPT", help="Checkpoint prefix or directory (names, shapes, dtypes only).")
@click.option("--save", "save", metavar="EXPR", help="What the Saver writes: shaded in the sets, coloured in the tree.")
@click.option("--set", "set_options", metavar="LABEL=EXPR", multiple=True,
              help="A set to draw (repeat; default: trainable, bn_stats, slots). More than 3 give an UpSet chart.")
@click.option("--tree", is_flag=True, help="Draw the plan's scope tree (graphviz) instead of the sets.")
@click.option("-o", "--output", "output", required=True, metavar="FILE",
              help="Picture to write: .png, .svg, .pdf (and .dot/.gv for --tree).")
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
def draw_command(graph, checkpoint, save, set_options, tree, output, force):
    """Draw the variable sets (area follows bytes) or, with --tree, the scope tree by fate. For CKPT
    and MODEL.meta, gs:// and s3:// URLs work as well as local paths (pip install 'subsetsaver[gcs]' or '[s3]')."""
    # the drawing code, and what it draws with, load only to draw
    from ..draw import dot_source_path, draw_plan, draw_sets

    prepare_output(output, force=force)
    extension = os.path.splitext(output)[1].lower()
    if extension in (".dot", ".gv"):
        tree = True
    if tree and dot_source_path(output) != output:
        prepare_output(dot_source_path(output), force=force, beside=output)
    if tree and set_options:
        raise click.UsageError("--set draws the sets diagram; --tree (or a .dot file) draws the scope tree: pick one")
    cat = load_source(graph, checkpoint)
    saved = selectors.parse(save) if save is not None else None

    if tree:
        if saved is None:
            raise click.UsageError("--tree needs --save EXPR: the tree is coloured by what the plan saves")
        plan, findings = _plan(saved, cat)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SubsetSaverWarning)
            written = draw_plan(plan, output, findings=findings)
        for warning in caught:
            if issubclass(warning.category, SubsetSaverWarning):
                click.echo(f"warning: {str(warning.message).splitlines()[0]}", err=True)
            else:
                warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
        click.echo(f"wrote {written}" + ("" if written == output else f" (not {output})"))
        return

    sets = {}
    for option in set_options or [f"{label}={expression}" for label, expression in DEFAULT_SETS]:
        label, separator, expression = option.partition("=")
        if not separator or not label.strip() or not expression.strip():
            raise click.BadParameter(f"expected LABEL=EXPR, got '{option}'", param_hint="--set")
        sets[label.strip()] = selectors.parse(expression)
    written = draw_sets(sets, output, saved=saved, graph=cat)
    click.echo(f"wrote {written}")


def _plan(saved, cat):
    """(plan, findings): the plan of a graph (its preview: no TensorFlow needed), which draw_plan
    audits; for a checkpoint (no graph to plan or audit) a stand-in with the same names and no findings."""
    if cat.traceable:
        return planning.plan_preview(saved, cat), None
    saved_names = tuple(saved.names(cat))
    chosen = set(saved_names)
    stand_in = types.SimpleNamespace(saved_names=saved_names, catalog=cat,
                                     rest_names=tuple(n for n in cat.ordered_names if n not in chosen))
    return stand_in, []
