"""``convert``: a checkpoint file in another format: TensorFlow (name-based), .npz or .safetensors;
a TensorFlow 2 object-based checkpoint into any of them (``--to name``: named as a TF1 graph names it);
a TF1 checkpoint into a TF2 object-based one (``--to object``), through the Keras 3 model that
``--model MODULE:FUNCTION`` builds (TensorFlow is imported only then)."""

import click

from .. import catalog, keras, layouts, tools
from ..selectors import format_bytes
from .options import FORMAT_NAME, KnownName, format_noun, parse_remap
from .output import echo_json


@click.command("convert")
@click.argument("source")
@click.argument("output")
@click.option("--keep", metavar="EXPR", help="Selector of the tensors to convert (default: all), e.g. \"~slots()\"; "
              "with --to object, of the model's weights to load.")
@click.option("--to", "to", type=FORMAT_NAME, metavar="FORMAT",
              help="Format of OUTPUT: name, npz, safetensors, object or any registered format (default: from its "
                   "extension; a path without .npz or .safetensors is a TensorFlow checkpoint prefix, 'name'); "
                   "'object': a TF2 object-based checkpoint of --model.")
@click.option("--model", "model", metavar="MODULE:FUNCTION",
              help="With --to object or --to keras: a function of no arguments (in a module, or a path/to/file.py) "
                   "that returns the built Keras 3 model (or tf.Module, --to object) to load SOURCE into, or (model, "
                   "optimizer); with --to keras also a name such as keras.applications.EfficientNetB0.")
@click.option("--match", "match", type=KnownName("way to match", "ways", lambda: keras.MATCHES), metavar="HOW",
              help="With --to object or --to keras: pair the model's weights with SOURCE's by the object graph's paths where "
                   "SOURCE has them, then by name ('auto', the default), by name alone (with --remap OLD=NEW from "
                   "the checkpoint's names to the model's) or by creation order.")
@click.option("--on-mismatch", type=click.Choice(["error", "initialize"]),
              help="With --to object: what the model's weights that SOURCE lacks (or holds in another shape or "
                   "dtype) do: stop with every problem listed (default), or keep their built values.")
@click.option("--no-optimizer", is_flag=True,
              help="With --to object: load and write the model's weights alone, leaving out the optimizer that "
                   "--model returns (and the checkpoint's optimizer slots).")
@click.option("--remap", "remap", multiple=True, metavar="OLD=NEW",
              help="Write tensor or scope OLD as NEW, e.g. model/=net/ (repeatable).")
@click.option("--map", "layout_map", metavar="NAME",
              help="Write OUTPUT (a directory) in another library's layout by a layout map: a shipped map's name "
                   "such as bert-to-hf or hf-to-bert (a name that is not one lists them all), or a map file's path.")
@click.option("--config", "config", metavar="FILE",
              help="With --map: the model family's config, when it is not beside SOURCE (bert_config.json, "
                   "albert_config.json, GPT-2's hparams.json, an ELECTRA run's --hparams JSON; Hugging Face's "
                   "config.json).")
@click.option("--variant", "variant", metavar="NAME",
              help="With --map: which model of a checkpoint that holds several (electra-to-hf, hf-to-electra: "
                   "discriminator, the default, or generator; hf-to-electra also generator-untied-embeddings, "
                   "for a generator trained with its own embeddings).")
@click.option("--max-shard-size", "max_shard_size", metavar="SIZE",
              help="With --map to Hugging Face's layout: shard the weights past SIZE (1GB, 500MB, 2GiB) as "
                   "save_pretrained does, with model.safetensors.index.json (default: 50GB, as save_pretrained).")
@click.option("--labels", "labels", metavar="FILE",
              help="With --map: a classifier's labels, one a line, written as id2label and label2id.")
@click.option("--weights", "weights", type=click.Choice(["ema", "raw"]),
              help="With --to keras --model or --map: convert each weight's moving average "
                   "(tf.train.ExponentialMovingAverage's shadow, as tf-slim's eval_image_classifier restores) or its "
                   "raw value (default: the averages when every weight has one, the raw values when none has); with "
                   "--to object (training state) raw unless --weights ema.")
@click.option("--drop-background-class", "drop_background_class", is_flag=True,
              help="With --to keras --model, --to object --model or --map: leave out class 0 of a classifier with one class more than "
                   "the target's (tf-slim's 1001 ImageNet classes, the background first, into 1000).")
@click.option("--dry-run", is_flag=True, help="With --map: print source name, target name, transform and shape, "
              "and the coverage (tensors the config implies, found, missing, extra); write nothing.")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a summary line.")
def convert_command(source, output, keep, to, model, match, on_mismatch, no_optimizer, remap, layout_map, config,
                    variant, max_shard_size, labels, weights, drop_background_class, dry_run, force, as_json):
    """Convert SOURCE to OUTPUT: a TensorFlow checkpoint (prefix or directory), an .npz or a
    .safetensors file into another of them, without TensorFlow. A TensorFlow 2 object-based
    checkpoint (tf.train.Checkpoint, Keras save_weights) converted --to name is written as a TF1
    graph names its variables: full names, TF1 slot names, global_step, Adam's beta powers.
    --to object loads SOURCE (TF1 or tf.keras) into the Keras 3 model that --model builds and
    writes it with tf.train.Checkpoint (with TensorFlow), read back and checked bit-exact.
    --to keras --model writes Keras 3's own OUTPUT.weights.h5 of that model (any backend, no TensorFlow).
    For SOURCE and OUTPUT, gs:// and s3:// URLs work as well as local paths (pip install 'subsetsaver[gcs]' or '[s3]').

    \b
      subsetsaver convert train/model-9000 model.safetensors --keep "trainable() | bn_stats()"
      subsetsaver convert train/model-9000 model.npz --keep "~slots()"
      subsetsaver convert model.npz serve/model
      subsetsaver convert keras/weights tf1/model --to name --keep "~slots()"
      subsetsaver convert train/model-9000 tf2/ckpt --to object --model models.py:build --remap conv_1/=conv/
      subsetsaver convert train/model-9000 net.weights.h5 --to keras --model keras.applications.EfficientNetB0
      subsetsaver convert uncased_L-12_H-768_A-12/bert_model.ckpt bert-hf --map bert-to-hf
    """
    if layout_map is not None:
        for flag, given in (("--keep", keep), ("--to", to), ("--model", model), ("--match", match),
                            ("--on-mismatch", on_mismatch), ("--remap", remap or None)):
            if given is not None:
                raise click.UsageError(f"{flag} does not go with --map: the map says what is kept and renamed")
        _with_map(source, output, layout_map, config=config, variant=variant, labels=labels,
                  max_shard_size=max_shard_size, dry_run=dry_run, force=force, as_json=as_json, weights=weights,
                  drop_background_class=drop_background_class)
        return
    for flag, given in (("--config", config), ("--variant", variant), ("--labels", labels),
                        ("--max-shard-size", max_shard_size),
                        ("--dry-run", dry_run or None)):
        if given is not None:
            raise click.UsageError(f"{flag} is for --map NAME (a layout map)")
    if not (to in ("keras", "object") and model is not None):
        for flag, given in (("--weights", weights), ("--drop-background-class", drop_background_class or None)):
            if given is not None:
                raise click.UsageError(f"{flag} is for --to keras --model, --to object --model or --map (conversions "
                                       "that map a model's weights)")
    if to == "object":
        if model is None:
            raise click.UsageError("--to object needs --model MODULE:FUNCTION: a function that returns the Keras 3 "
                                   "model (or tf.Module, or (model, optimizer)) to write")
        _to_object(source, output, model, keep=keep, remap=parse_remap(remap), match=match or "auto",
                   on_mismatch=on_mismatch or "error", force=force, as_json=as_json, optimizer=not no_optimizer,
                   weights=weights or "raw", drop_background_class=drop_background_class)
        return
    if to == "keras" and model is not None:
        for flag, given in (("--keep", keep), ("--on-mismatch", on_mismatch), ("--no-optimizer", no_optimizer or None)):
            if given is not None:
                raise click.UsageError(f"{flag} does not go with --to keras --model: every weight of the model is filled")
        _to_keras(source, output, model, remap=parse_remap(remap), match=match or "auto", force=force, as_json=as_json,
                  weights=weights, drop_background_class=drop_background_class)
        return
    for flag, given in (("--model", model), ("--match", match), ("--on-mismatch", on_mismatch),
                        ("--no-optimizer", no_optimizer or None)):
        if given is not None:
            raise click.UsageError(f"{flag} is for --to object or --to keras (a Keras 3 model's checkpoint or "
                                   ".weights.h5)")
    report = tools.convert.convert(source, output, keep=keep, to=to, remap=parse_remap(remap), overwrite=force)
    kind = format_noun(report.output_format)
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


def _to_object(source, output, model, *, keep, remap, match, on_mismatch, force, as_json, optimizer=True,
               weights="raw", drop_background_class=False):
    report = keras.convert_checkpoint(source, output, model, keep=keep, remap=remap, match=match,
                                      on_mismatch=on_mismatch, overwrite=force, optimizer=optimizer, weights=weights,
                                      drop_background_class=drop_background_class)
    load = report.load
    left = [*load.initialized, *load.optimizer_initialized]
    if as_json:
        echo_json({"source": report.source, "output": report.output, "kind": format_noun("object"),
                   "format": "object", "source_format": catalog.file_format(report.source),
                   "source_kind": catalog.checkpoint_kind(report.source), "model": report.builder,
                   "tensors": report.tensors, "bytes": report.nbytes, "match": load.match,
                   "restored": dict(load.restored), "optimizer_restored": dict(load.optimizer_restored),
                   "iterations": load.iterations, "initialized": list(load.initialized),
                   "optimizer_initialized": list(load.optimizer_initialized), "unused": list(load.unused),
                   "verified": list(report.verified), "weights": load.weights, "read_from": dict(load.read_from),
                   "classes": None if load.classes is None else list(load.classes),
                   "background_class": load.background_class, "notes": list(report.notes)})
        return
    click.echo(f"wrote {format_noun('object')} {report.output}: {report.tensors} tensors, {format_bytes(report.nbytes)} "
               f"(from {report.source}, through {report.builder})")
    weights = len(load.restored) + len(load.initialized)
    loaded = f"loaded {len(load.restored)} of {weights} weights"
    if load.optimizer_restored or load.optimizer_initialized:
        optimizer = len(load.optimizer_restored) + len(load.optimizer_initialized)
        loaded += f" and {len(load.optimizer_restored)} of {optimizer} optimizer variables"
    if load.iterations is not None:
        loaded += f" (iterations {load.iterations})"
    click.echo(f"{loaded}; all {len(report.verified)} read back bit-exact")
    for note in report.notes:
        click.echo(note)
    if left:
        click.echo(f"left as built: {', '.join(left)}")
    if load.unused:
        click.echo(f"not read: {', '.join(load.unused)}")


def _to_keras(source, output, model, *, remap, match, force, as_json, weights=None, drop_background_class=False):
    report = keras.convert_weights(source, output, model, remap=remap, match=match, overwrite=force, weights=weights,
                                   drop_background_class=drop_background_class)
    load = report.load
    if as_json:
        echo_json({"source": report.source, "output": report.output, "kind": format_noun("keras"),
                   "format": "keras", "model": report.builder, "tensors": report.tensors, "bytes": report.nbytes,
                   "match": load.match, "pairing": report.pairing, "restored": dict(load.restored),
                   "unused": list(load.unused), "verified": list(report.verified), "weights": load.weights,
                   "read_from": dict(load.read_from), "raw_statistics": list(load.raw_statistics),
                   "classes": None if load.classes is None else list(load.classes),
                   "background_class": load.background_class, "notes": list(report.notes)})
        return
    click.echo(f"wrote {format_noun('keras')} {report.output}: {report.tensors} tensors, "
               f"{format_bytes(report.nbytes)} (from {report.source}, through {report.builder}); all "
               f"{len(report.verified)} weights read back bit-exact")
    if report.pairing:
        click.echo(f"paired by the built-in pairing {report.pairing}")
    for note in report.notes:
        click.echo(note)
    if load.unused:
        click.echo(f"not read: {len(load.unused)} tensors ({', '.join(load.unused[:3])}"
                   + (" ...)" if len(load.unused) > 3 else ")"))


def _with_map(source, output, layout_map, *, config, variant, labels, max_shard_size, dry_run, force, as_json,
              weights=None, drop_background_class=False):
    report = layouts.convert(source, output, map=layout_map, config=config, variant=variant, labels=labels,
                             max_shard_size=max_shard_size, dry_run=dry_run, overwrite=force, weights=weights,
                             drop_background_class=drop_background_class)
    coverage = (f"coverage: {report.expected} tensors the config implies, {report.expected} found, 0 missing, "
                f"0 extra; heads: {', '.join(report.heads) or 'none'}"
                + (f"; loads as {report.architecture}" if report.architecture else "")
                + (f"; member {report.member}" if report.member else ""))
    by_map = f"map {report.map}" + (f" (variant {report.variant})" if report.variant else "")
    if as_json:
        echo_json({"source": report.source, "output": report.out_dir, "map": report.map, "variant": report.variant,
                   "config": report.config,
                   "dry_run": report.dry_run, "files": list(report.files), "bytes": report.nbytes,
                   "dropped": list(report.dropped), "architecture": report.architecture, "heads": list(report.heads),
                   "member": report.member,
                   "coverage": {"expected": report.expected, "found": report.expected, "missing": 0, "extra": 0},
                   "weights": report.weights, "read_from": dict(report.read_from),
                   "classes": None if report.classes is None else list(report.classes),
                   "background_class": report.background_class, "notes": list(report.notes),
                   "tensors": [{"source": source_name, "target": target, "transform": transform, "shape": list(shape)}
                               for source_name, target, transform, shape in report.rows]})
        return
    if dry_run:
        widths = [max([len(header)] + [len(str(row[column]) or "-") for row in report.rows])
                  for column, header in enumerate(("source", "target", "transform"))]
        click.echo(f"{'source':<{widths[0]}}  {'target':<{widths[1]}}  {'transform':<{widths[2]}}  shape")
        for source_name, target, transform, shape in report.rows:
            click.echo(f"{source_name:<{widths[0]}}  {target:<{widths[1]}}  {transform or '-':<{widths[2]}}  "
                       f"{list(shape)}")
        if report.variant:
            click.echo(f"variant {report.variant} of map {report.map}; config {report.config}")
        click.echo(coverage)
        for note in report.notes:
            click.echo(note)
        click.echo(f"{len(report.rows)} tensors, {format_bytes(report.nbytes)}; dropped {len(report.dropped)} "
                   "by the map's \"drop\"; nothing written (--dry-run)")
        return
    config_text = f"config {report.config}" if report.config else "config read off the checkpoint"
    click.echo(f"wrote {report.out_dir} by {by_map}: {len(report.rows)} tensors, {format_bytes(report.nbytes)} "
               f"({', '.join(report.files)}; from {report.source}, {config_text})")
    click.echo(coverage)
    for note in report.notes:
        click.echo(note)
    if report.dropped:
        click.echo(f"dropped {len(report.dropped)}: {', '.join(report.dropped[:5])}"
                   + (f" and {len(report.dropped) - 5} more" if len(report.dropped) > 5 else ""))
