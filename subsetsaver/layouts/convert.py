"""``convert(checkpoint, out_dir, map=NAME)``: a model family's checkpoint into another library's layout,
without TensorFlow.

The source is read with the project's own readers (a TensorFlow checkpoint prefix or
directory, or a Hugging Face directory or ``.safetensors`` file); its family config is found
beside it (or given). Everything is checked first (the map, every tensor's rule and shape, the
config's keys and math, and the coverage: every tensor the config implies is there, nothing else,
in the shape and dtype the config implies); only then are tensors streamed through the map into
``out_dir``: ``model.safetensors`` and ``config.json`` for a Hugging Face layout, a checkpoint prefix
named as the family's releases name it (``bert_model.ckpt``; named latest) and the family's config
for a TensorFlow one.

Example::

    report = convert("uncased_L-12_H-768_A-12/bert_model.ckpt", "bert-hf", map="bert-to-hf")
    report.files
    # ('bert-hf/model.safetensors', 'bert-hf/config.json')
"""

from __future__ import annotations

import dataclasses
import os

from .. import catalog as catalog_module
from .. import storage
from ..catalog import choose_weights, classes_note
from ..errors import Fix, LayoutMapError, WeightsChoiceError
from ..formats import safetensors
from ..selectors import parse
from .configs import config_bytes, find_config, map_config, nested, read_config
from .coverage import check_coverage, check_family
from .electra_config import check_electra_run, read_electra_config
from .engine import plan_conversion
from .maps import load_map
from .members import pick_member
from .output import (
    TensorStream,
    huggingface_weights,
    largest_first,
    nbytes,
    shard_limit,
    write_huggingface_weights,
    write_tf_checkpoint,
)
from .readings import read_values
from .transforms import Transform

TF_PREFIX = "model.ckpt"
"""A TensorFlow target's prefix when its map names none (``"target": {"prefix": "bert_model.ckpt"}``)."""
MAX_LABELS_BYTES = 16 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class LayoutReport:
    """What :func:`convert` did (or, with ``dry_run``, would do).

    ``rows``: (source name, target name, transform, shape) per target tensor; ``dropped``: source names
    left out by the map's ``drop``; ``files``: what was written (empty for a dry run); ``expected``: how
    many target tensors the config implies (all found: a conversion with any missing or extra is
    refused); ``heads``: the optional heads found; ``architecture``: the class that holds them all;
    ``variant``: which model of the checkpoint was converted (None for a map without variants);
    ``config``: the config file used, or, for a family whose config may come from its tensors, what it
    was derived from; ``weights``: 'ema' (each source tensor read from its moving average, ``read_from``)
    or 'raw'; ``classes``: the classifier's (checkpoint, written) class counts where the map declares one,
    and ``background_class`` ('dropped' or 'kept'); ``member``: the family member the checkpoint was found
    to be (a map with ``"members"``, such as EfficientNet's ``b0``); ``notes``: those in words, one line each,
    and what was read off the checkpoint into the config and how. ``config`` is None when the map reads
    everything off the checkpoint.
    """

    map: str
    source: str
    out_dir: str
    config: str
    rows: tuple
    dropped: tuple
    files: tuple
    nbytes: int
    dry_run: bool
    expected: int = 0
    heads: tuple = ()
    architecture: str | None = None
    member: str | None = None
    variant: str | None = None
    weights: str = "raw"
    read_from: dict = dataclasses.field(default_factory=dict)
    classes: tuple | None = None
    background_class: str | None = None
    notes: tuple = ()


def convert(checkpoint, out_dir, map, config=None, *, variant=None, labels=None, max_shard_size=None,  # noqa: A002
            dry_run=False, overwrite=False, weights=None, drop_background_class=False) -> LayoutReport:
    """Convert ``checkpoint`` into ``out_dir`` by the layout map ``map`` (a shipped name such as
    ``bert-to-hf``, or a map file's path); ``config``: the family's config file when it is not beside
    the checkpoint; ``variant``: which model of a checkpoint that holds several (``electra-to-hf``:
    ``"discriminator"``, the default, or ``"generator"``); ``labels``: a file of a classifier's labels, one a line (``id2label`` in the
    target config); ``max_shard_size``: past it (``"1GB"``, or bytes) a Hugging Face output is sharded as
    ``save_pretrained`` shards it (default: its ``"50GB"``). ``weights``: None (the default: each tensor's
    ``ExponentialMovingAverage`` shadow when every one mapped has one, else the raw values), 'ema' or 'raw'
    (:func:`~subsetsaver.catalog.choose_weights`); shadows are never mapped themselves.
    ``drop_background_class``: leave out class 0 of the classifier the map declares (its ``"classifier"``:
    tf-slim's 1001 ImageNet classes, the background first). Raises :class:`~subsetsaver.errors.LayoutMapError`
    (:class:`~subsetsaver.errors.WeightsChoiceError` for the two above) before writing anything when the map,
    the checkpoint or the config does not fit.

    convert("gpt2/model.ckpt", "gpt2-hf", map="gpt2-to-hf").rows[0]
    # ('model/h0/attn/c_attn/b', 'h.0.attn.c_attn.bias', '', (2304,))
    """
    layout = load_map(map, variant)
    max_shard_bytes = _shard_bytes(max_shard_size)
    source = _source_path(layout, checkpoint)
    catalog = catalog_module.file_catalog(source)
    specs = {name: (tuple(catalog.entry(name).shape), catalog.entry(name).dtype) for name in catalog.ordered_names}
    if layout.source.get("config_reader") == "electra":
        check_electra_run(specs, layout.variant)
    dropped = parse(layout.drop).names(catalog, allow_empty=True) if layout.drop else []
    shadows = [name for name in catalog.ordered_names if name in catalog.role("average") and name not in dropped]
    read_names = [entry["tensor"] for entry in layout.config_from_tensors.values()]
    convertible = {name: spec for name, spec in specs.items() if name not in read_names}
    plan = plan_conversion(layout, convertible, [*dropped, *shadows])  # a moving average is read in place of its variable
    choice = choose_weights(catalog, list(plan.source_names), weights, source)
    plan, classifier = _classifier(layout, plan, drop_background_class, source)
    check_family(layout, plan.source_names, plan.unmapped, specs)
    if layout.source.get("config_reader") == "electra":
        config_path, source_config, source_name = _electra_config(layout, checkpoint, config, specs)
    else:
        config_path = _config_path(layout, checkpoint, config)
        source_config = read_config(config_path) if config_path else {}
        source_name = f"config '{config_path}'"
    target_config = map_config(layout.config, layout.math, source_config, source_name=source_name)
    read_notes = ()
    if read_names:
        absent = [name for name in read_names if name not in specs]
        if absent:
            raise LayoutMapError(f"this {layout.family} checkpoint lacks '{absent[0]}', which the target config's "
                                 f"{', '.join(layout.config_from_tensors)} are read from",
                                 fix="convert a whole checkpoint of the family")
        values, read_notes = read_values(layout, dict(catalog_module.read_tensors(source, read_names)))
        target_config.update(values)
    member, sizes = None, {}
    if layout.members:
        member, target_config, sizes = pick_member(layout, plan, target_config)
    coverage = _checked_coverage(layout, plan, target_config, sizes)
    target_config.update(coverage.config_additions)
    if coverage.architecture:
        target_config["architectures"] = [coverage.architecture]
    if labels is not None:
        target_config.update(_label_config(labels, target_config, layout.target.get("library")))
    out_dir = os.fspath(out_dir)
    rows = tuple(plan.rows())
    size = sum(nbytes(shape, dtype) for shape, dtype in plan.specs.values())
    notes = tuple(note for note in (choice.describe(len(plan.source_names)), classifier.get("note")) if note) \
        + read_notes
    described = dict(map=layout.name, source=source, out_dir=out_dir, config=config_path, rows=rows,
                     dropped=tuple(name for name in plan.dropped if name not in shadows), nbytes=size, expected=len(coverage.expected), heads=coverage.heads,
                     architecture=coverage.architecture, member=member, variant=layout.variant, weights=choice.used,
                     read_from=dict(choice.read_from), classes=classifier.get("classes"),
                     background_class=classifier.get("background_class"), notes=notes)
    if layout.target.get("nested_keys"):
        target_config = nested(target_config)
    if dry_run:
        return LayoutReport(**described, files=(), dry_run=True)
    config_file = storage.join(out_dir, layout.target["config"])
    prefix = storage.join(out_dir, layout.target.get("prefix", TF_PREFIX))
    _prepare(out_dir, [huggingface_weights(out_dir) if layout.target_layout == "safetensors" else prefix + ".index",
                       config_file], overwrite)
    cut_at = shard_limit(max_shard_bytes) if layout.target_layout == "safetensors" else None  # one file: no cut
    written = largest_first(plan, cut_at)
    stream = TensorStream(written.specs, written.stream(_read(source, written.source_names, choice)))
    if layout.target_layout == "safetensors":
        weights = write_huggingface_weights(out_dir, stream, layout.target.get("metadata"),
                                            max_shard_bytes=max_shard_bytes, overwrite=overwrite)
    else:
        weights = (write_tf_checkpoint(prefix, stream, overwrite=overwrite),)
    storage.write_bytes(config_file, config_bytes(target_config, layout.target["config"]))
    return LayoutReport(**described, files=(*weights, config_file), dry_run=False)


def _read(source, names, choice):
    """(name, array) for each of ``names``, each read from the tensor ``choice`` says (its moving average)."""
    keys = [choice.key(name) for name in names]
    for name, (_, array) in zip(names, catalog_module.read_tensors(source, keys)):
        yield name, array
        del array


def _classifier(layout, plan, drop, source):
    """``plan`` with class 0 of the map's classifier left out (``drop``), and what the report says of it."""
    found = {target: axis for target, axis in layout.classifier.items() if target in plan.specs}
    if not found or len(found) != len(layout.classifier):
        if drop:
            raise WeightsChoiceError(f"drop_background_class: map '{layout.name}' declares no classifier that "
                                     f"checkpoint '{source}' has (\"classifier\": target names and class axes)",
                                     fixes=[Fix("drop_background_class", False, "to convert without it")])
        return plan, {}
    classes = {plan.specs[target][0][axis] for target, axis in found.items()}
    if len(classes) != 1:
        raise LayoutMapError(f"map '{layout.name}': the classifier's tensors {', '.join(found)} have "
                             f"{' and '.join(map(str, sorted(classes)))} classes", fix="check the map's \"classifier\"")
    count = classes.pop()
    if not drop:
        return plan, {"classes": (count, count), "background_class": "kept",
                      "note": classes_note((count, count), "kept")}
    steps = []
    for step in plan.steps:
        axes = [found.get(target) for target in step.targets]
        if any(axis is not None for axis in axes):
            if len(step.targets) != 1:
                raise LayoutMapError(f"{step.rule.text} splits the classifier; class 0 cannot be dropped from it")
            rule = dataclasses.replace(step.rule, transforms=(*step.rule.transforms, Transform("drop_first", axes[0])))
            (shape, dtype), = step.specs
            specs = (Transform("drop_first", axes[0]).spec(shape, dtype),)
            step = dataclasses.replace(step, rule=rule, specs=specs)
        steps.append(step)
    return dataclasses.replace(plan, steps=tuple(steps)), {
        "classes": (count, count - 1), "background_class": "dropped",
        "note": classes_note((count, count - 1), "dropped")}


def _shard_bytes(max_shard_size):
    try:
        return None if max_shard_size is None else safetensors.parse_size(max_shard_size)
    except ValueError as error:
        raise LayoutMapError(f"--max-shard-size: {error}") from None


def _config_path(layout, checkpoint, given):
    name = layout.source.get("config")
    if name is None and given is None and layout.members:
        return None  # every config value is the member's, or read off the checkpoint
    path = find_config(checkpoint, name, given) if name or given else None
    if path is None:
        where = f"no {name} beside '{checkpoint}'" if name else f"map '{layout.name}' names no config file to look for"
        raise LayoutMapError(where, fix=f"give the {layout.family} config file with --config FILE (config= in Python)")
    return path


def _checked_coverage(layout, plan, target_config, sizes=None):
    """:func:`check_coverage` (``sizes``: a member's, for the shapes only); for a map with variants a refusal
    also names the other variants, since a directory of the other model (a generator given to the
    discriminator's variant) is refused so."""
    try:
        return check_coverage(layout, plan.specs, {**target_config, **(sizes or {})}, plan.source_name,
                              plan.unmapped)
    except LayoutMapError as error:
        others = [name for name in layout.variants if name != layout.variant]
        if not others:
            raise
        message = str(error)[:-len(f"; {error.fix}")] if error.fix else str(error)
        subject = f"this {layout.family} checkpoint "
        message = message.replace(subject, f"{subject.rstrip()}, read as the {layout.variant}, ", 1) \
            if message.startswith(subject) else f"{message} (read as the {layout.variant})"
        raise LayoutMapError(message, fix="; ".join(
            [*([error.fix] if error.fix else []), f"or convert it as the {' or '.join(others)} "
             f"(--variant {' or --variant '.join(others)})"])) from None


def _electra_config(layout, checkpoint, given, specs):
    """(what the config came from, the variant model's config, its name in messages): ``given``, or the
    map's config file beside the checkpoint, else the checkpoint's shapes (see :mod:`.electra_config`)."""
    name = layout.source.get("config")
    path = find_config(checkpoint, name, given) if name or given else None
    data = read_config(path) if path is not None else None
    model_config, kind = read_electra_config(data, specs, layout.variant)
    return (path or kind), model_config, (f"{kind} '{path}'" if path is not None else kind)


def _label_config(path, target_config, library=None) -> dict:
    """``id2label`` and ``label2id`` from a file of labels, one a line, as many as the classifier has (timm's
    ``label_names`` for a timm target)."""
    count_key = "num_classes" if library == "timm" else "num_labels"
    if not target_config.get(count_key):
        raise LayoutMapError(f"--labels '{path}' names a classifier's labels, but this checkpoint has no "
                             "classifier head", fix="leave out --labels")
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_LABELS_BYTES + 1)
        text = data.decode("utf-8-sig")
    except OSError as error:
        raise LayoutMapError(f"cannot read labels '{path}': {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise LayoutMapError(f"labels '{path}' are not UTF-8 (byte {error.start})") from None
    labels = [line.strip() for line in text.splitlines() if line.strip()]
    if len(data) > MAX_LABELS_BYTES or len(labels) != target_config[count_key] or len(set(labels)) != len(labels):
        raise LayoutMapError(f"labels '{path}' hold {len(labels):,} labels ({len(set(labels)):,} different), where "
                             f"the classifier has {target_config[count_key]:,}",
                             fix="give one distinct label a line, in the classifier's order")
    if library == "timm":
        return {"label_names": labels}
    return {"id2label": {str(index): label for index, label in enumerate(labels)},
            "label2id": {label: index for index, label in enumerate(labels)}}


def _source_path(layout, checkpoint):
    checkpoint = os.fspath(checkpoint)
    if layout.source_layout == "safetensors":
        path = huggingface_weights(checkpoint) if storage.is_directory(checkpoint) else checkpoint
        if path is None or not path.endswith((safetensors.SUFFIX, safetensors.INDEX_NAME)) \
                or not storage.exists(path) or storage.is_directory(path):
            raise LayoutMapError(f"map '{layout.name}' reads a Hugging Face directory, .safetensors file or "
                                 f"shard index; '{checkpoint}' is none of them",
                                 fix=f"name a directory holding model.safetensors or {safetensors.INDEX_NAME}, "
                                 "or the file itself")
        return path
    if catalog_module.file_format(checkpoint) != "name":
        raise LayoutMapError(f"map '{layout.name}' reads a TensorFlow checkpoint; '{checkpoint}' is a "
                             f"{catalog_module.file_format(checkpoint)} file",
                             fix="name the checkpoint's prefix (model.ckpt for model.ckpt.index) or its directory")
    return catalog_module.checkpoint_prefix(checkpoint)


def _prepare(out_dir, files, overwrite):
    existing = [path for path in files if path is not None and storage.exists(path)]
    if existing and not overwrite:
        raise LayoutMapError(f"'{existing[0]}' exists", fix="choose an empty OUT_DIR, or pass --force "
                             "(overwrite=True in Python) to replace it")
    if storage.exists(out_dir) and not storage.is_directory(out_dir):
        raise LayoutMapError(f"OUT_DIR '{out_dir}' is a file", fix="name a directory (new or existing)")
