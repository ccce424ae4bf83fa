"""Converting checkpoint files between formats, without a graph and without TensorFlow.

Formats: ``name`` (a TensorFlow name-based checkpoint, what ``tf.compat.v1.train.Saver``
writes and restores), ``npz`` (subsetsaver's portable file) and ``safetensors`` (for
PyTorch, JAX and the rest); a TensorFlow 2 object-based checkpoint (``tf.train.Checkpoint``,
Keras ``save_weights``) is read too, by the full names its object graph records. ``keep``
selects what is converted (roles guessed from names, read from a subsetsaver safetensors
file's metadata, or from an object-based checkpoint's object graph); ``remap`` renames
(``{old: new}``, scopes end in ``/``). Tensors are read one at a time; a TensorFlow
checkpoint is written as they come, every tensor is read back against the checksum of the
source's bytes, and the ``checkpoint`` state file of its directory then names it.

An object-based checkpoint converted ``to='name'`` is written the way a TF1 graph names the
same state, so ``tf.compat.v1.train.Saver().restore`` takes it: each variable under its
recorded full name; each slot under its variable's name and the suffix the TF1 optimizer
gives it (:data:`TF1_SLOT_SUFFIXES`: Adam's m is ``VARIABLE/Adam``, v ``VARIABLE/Adam_1``;
a slot of an optimizer TF1 does not have is ``VARIABLE/SLOT``); the optimizer's iteration
counter as ``global_step`` (int64); and for Adam ``beta1_power`` and ``beta2_power``, the
float32 values TF1's AdamOptimizer holds after as many steps (``beta ** (iterations + 1)``,
the betas from the checkpoint's hyperparameter variables or Keras's defaults).

Example::

    convert('train/model-9000', 'model.safetensors', keep='trainable() | bn_stats()').kept[:2]
    # ('conv_1/b', 'conv_1/bn/beta')
    convert('model.safetensors', 'serve/model', to='name').output
    # 'serve/model'
    dict(convert('keras/weights', 'tf1/model', to='name').renamed)['Adam/dense/kernel/m']
    # 'dense/kernel/Adam'
"""

from __future__ import annotations

import dataclasses
import os
import re

import numpy as np

from .. import catalog as catalog_module
from ..errors import CheckpointMismatchError, Fix, InvalidNameError, InvalidOutputError, UnsupportedDtypeError, clipped
from ..formats import checkpoint_writer, format_protocol, npz, registry, subset_manifest
from ..planning import renamed_names
from ..selectors import as_selector

# TF1 optimizer -> the suffix it gives each slot (VARIABLE/SUFFIX), by the slot's name in the object
# graph: a legacy Keras or tf.compat.v1 optimizer's slot name, or a Keras 3 / tf_keras list's name.
TF1_SLOT_SUFFIXES = {
    "Adam": {"m": "Adam", "v": "Adam_1", "momentums": "Adam", "velocities": "Adam_1"},
    "Momentum": {"momentum": "Momentum", "momentums": "Momentum"},
    "Adagrad": {"accumulator": "Adagrad", "accumulators": "Adagrad"},
    "RMSProp": {"rms": "RMSProp", "velocities": "RMSProp", "momentum": "RMSProp_1", "momentums": "RMSProp_1"},
}
_CENTERED_RMSPROP = {"rms": "RMSProp", "velocities": "RMSProp", "mg": "RMSProp_1", "average_gradients": "RMSProp_1",
                     "momentum": "RMSProp_2", "momentums": "RMSProp_2"}  # with the mean gradient, as TF1 orders them
# An optimizer keeping its slots in lists says its kind only by its name (Keras 3 'adam/...', tf_keras 'Adam/m/...').
_LIST_OPTIMIZERS = {"adam": "Adam", "sgd": "Momentum", "adagrad": "Adagrad", "rmsprop": "RMSProp"}
ADAM_DEFAULTS = {"beta_1": 0.9, "beta_2": 0.999}  # Keras's, when the checkpoint holds no beta variables
GLOBAL_STEP = "global_step"
_INTEGER_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})


@dataclasses.dataclass(frozen=True)
class ConvertReport:
    """What a conversion wrote: ``source``, ``output``, the ``kept`` and ``dropped`` names, data bytes,
    and the formats read and written; ``renamed``: ``(kept name, written name)`` of each tensor written
    under another name; ``derived``: names of tensors computed rather than copied (TF1's beta powers)."""

    source: str
    output: str
    kept: tuple
    dropped: tuple
    nbytes: int
    source_format: str = "name"
    output_format: str = "npz"
    renamed: tuple = ()
    derived: tuple = ()
    source_kind: str = "name"  # 'name', 'object' (a TensorFlow object-based checkpoint), 'npz', 'safetensors'


def convert(source, output, keep=None, to=None, remap=None, *, overwrite=False) -> ConvertReport:
    """Write the tensors of ``source`` that ``keep`` selects (None: all) to ``output`` in the format
    ``to`` (a registered format's name, such as 'name', 'npz', 'safetensors'; None: from ``output``'s
    suffix), renamed by ``remap``; an existing ``output`` is replaced only with ``overwrite``."""
    selector = as_selector(keep, "keep")
    output_format = registry.for_output(output, to)
    source_format = registry.format_of(source)
    source, output = source_format.resolve(os.fspath(source)), os.fspath(output)
    if output_format is source_format:
        others = [known for known in registry.FORMATS if known.writable and known is not source_format]
        suffixes = [f"'{suffix}'" for known in others for suffix in known.suffixes]
        endings = ", ".join(suffixes[:-1]) + f" or {suffixes[-1]}" if len(suffixes) > 1 else suffixes[0]
        raise InvalidOutputError(
            f"output '{output}' would be a {output_format.noun} like its source; name one ending in {endings} "
            "(to keep part of a checkpoint, use `subsetsaver slim`)", path=output,
            fixes=[Fix("to", others[0].name, "to write another format")])
    if not output_format.writable:
        raise InvalidOutputError(f"{output_format.description} checkpoints are written from a model: "
                                 "convert --to object --model MODULE:FUNCTION", path=output)
    checkpoint_writer.check_output(output, output_format, sources=[source], overwrite=overwrite)
    cat = catalog_module.file_catalog(source)
    kept = selector.names(cat)
    catalog_module.warn_missed_optimizer_state(cat, selector, kept, source, stacklevel=2)
    kept_set = set(kept)
    dropped = tuple(n for n in cat.ordered_names if n not in kept_set)
    if output_format.dtypes is not None:
        unsupported = [n for n in kept if cat.record(n).dtype not in output_format.dtypes]
        if unsupported:
            raise UnsupportedDtypeError(
                f"{output_format.noun}s hold numeric tensors only; '{source}' has "
                f"{', '.join(unsupported[:5])} ({cat.record(unsupported[0]).dtype}): leave them out, e.g. --keep "
                f"\"{selector!r} - name('{unsupported[0]}')\"")
    if output_format.takes_tf1_names and cat.object_graph is not None:
        names, derived = tf1_names(cat, kept, remap), tf1_optimizer_values(source, cat, kept)
        steps = _iteration_counters(cat, kept)  # not whatever else a file names global_step
        _check_steps(cat, steps, source)
        for _, counter in catalog_module.read_tensors(source, sorted(steps)):
            _as_global_step(counter, source)  # refused before anything is written
    else:
        names, derived, steps = renamed_names(kept, remap), {}, set()
    _refuse_clashes(names, derived, source)
    regions = source_format.regions(source) if output_format.holds_parts else {}
    records = cat.records_by_name
    specs = [(names[name], regions[name][0] if name in regions else records[name].shape,
              "int64" if name in steps else records[name].dtype) for name in kept]
    specs += [(name, array.shape, array.dtype.name) for name, array in derived.items()]
    metadata = output_format.recorded(_provenance(selector, cat, names, source, source_format))
    written = checkpoint_writer.write_checkpoint(
        output, _converted(source, kept, names, steps, regions, derived), checkpoint_format=output_format,
        specs=specs, sources=[source], overwrite=overwrite, metadata=metadata)
    renamed = tuple((name, names[name]) for name in kept if names[name] != name)
    return ConvertReport(source, output, tuple(kept), dropped, written.nbytes, source_format.name, output_format.name,
                         renamed, tuple(derived), cat.checkpoint_kind)


def _converted(source, kept, names, steps, regions, derived):
    """Yield what is written: each kept tensor under its new name (a step as int64, a part of a
    partitioned variable with its region), then the derived tensors; one in memory at a time."""
    for name, array in catalog_module.read_tensors(source, kept):
        if name in steps:
            array = _as_global_step(array, source)  # an integer scalar, checked before: the value is kept
        yield (names[name], array, regions[name]) if name in regions else (names[name], array)
        del array
    yield from derived.items()


def _iteration_counters(cat, kept) -> set:
    """The kept names holding an optimizer's iteration counter: they alone become TF1's int64 ``global_step``."""
    counters = {optimizer.iterations for optimizer in cat.object_graph.optimizers if optimizer.iterations}
    return {name for name in kept if cat.checkpoint_key(name) in counters}


def _as_global_step(array, source):
    """The counter ``array`` as int64, unless that would change its value (a uint64 above int64's range)."""
    step = array.astype(np.int64)
    if array.shape != () or step != array:
        raise CheckpointMismatchError(f"checkpoint '{source}': its iteration counter holds "
                                      f"{clipped(np.array2string(array, threshold=8))} ({array.dtype}, shape "
                                      f"{list(array.shape)[:8]}), which TF1's int64 global_step cannot hold")
    return step


def _check_steps(cat, steps, source):
    """The optimizer's iteration counter becomes TF1's ``global_step`` (an int64 scalar): it must be an
    integer scalar, or the value would change."""
    for name in steps:
        record = cat.record(name)
        if tuple(record.shape) != () or record.dtype not in _INTEGER_DTYPES:
            raise CheckpointMismatchError(
                f"checkpoint '{source}' names {record.dtype} {list(record.shape)} tensor '{name}' its optimizer's "
                "iteration counter, which is an integer scalar; it cannot be written as TF1's global_step: leave it "
                f"out with --keep \"everything() - name('{name}')\"")


def checkpoint_to_npz(checkpoint, output, keep=None) -> ConvertReport:
    """A TensorFlow checkpoint's tensors (``keep``: a selector, None: all) in a portable file."""
    return convert(checkpoint, output, keep, to="npz")


def npz_to_checkpoint(path, prefix, keep=None) -> ConvertReport:
    """A portable file's arrays as a TensorFlow checkpoint at ``prefix`` that a Saver restores."""
    return convert(path, prefix, keep, to="name")


def tf1_names(cat, kept, remap=None) -> dict:
    """Catalog name -> the name a TF1 graph gives the same variable, for ``kept`` names of the catalog
    ``cat`` of an object-based checkpoint: the recorded full name (renamed by ``remap``), a slot the
    TF1 optimizer's slot name under its variable's name, the first optimizer's iteration counter
    ``global_step``.

    tf1_names(cat, ['dense/kernel', 'Adam/dense/kernel/m', 'Adam/iter'])
    # {'dense/kernel': 'dense/kernel', 'Adam/dense/kernel/m': 'dense/kernel/Adam', 'Adam/iter': 'global_step'}
    """
    graph = cat.object_graph
    names_of = {cat.checkpoint_key(name): name for name in cat.ordered_names}
    counter = next((optimizer.iterations for optimizer in graph.optimizers if optimizer.iterations), None)
    suffixes = {}
    for optimizer in graph.optimizers:
        suffixes.update(_slot_suffixes(graph, optimizer))
    slots, plain = {}, []
    for name in kept:
        key = cat.checkpoint_key(name)
        owner = graph.tensors[key].slot_of if key in suffixes else None
        if owner in names_of:
            slots[name] = (names_of[owner], suffixes[key])
        elif key != counter:
            plain.append(name)
    renamed = renamed_names(list(dict.fromkeys(plain + [owner for owner, _ in slots.values()])), remap)
    result = {}
    for name in kept:
        if name in slots:
            owner, suffix = slots[name]
            result[name] = f"{renamed[owner]}/{suffix}"
        else:
            result[name] = renamed.get(name, GLOBAL_STEP)
    return result


def tf1_optimizer_values(source, cat, kept) -> dict:
    """The tensors a TF1 optimizer holds that an object-based checkpoint does not: for each Adam whose
    slots are kept, ``beta1_power`` and ``beta2_power`` (``beta_1`` multiplied in ``iterations`` times, in
    float32, as TF1's AdamOptimizer accumulates them: the value it holds after that many steps), named as
    TF1 names them (``beta1_power_1`` for a second Adam)."""
    graph, kept_keys = cat.object_graph, {cat.checkpoint_key(name) for name in kept}
    names_of = {cat.checkpoint_key(name): name for name in cat.ordered_names}
    values, number = {}, 0
    for optimizer in graph.optimizers:
        if _family(graph, optimizer) != "Adam" or not kept_keys & set(optimizer.slots):
            continue
        if {"beta1_power", "beta2_power"} & set(optimizer.hyperparameters):
            continue  # a tf.compat.v1 AdamOptimizer saved by tf.train.Checkpoint: it holds them itself
        wanted = {names_of[key]: label for label, key in optimizer.hyperparameters.items() if label in ADAM_DEFAULTS}
        if optimizer.iterations:
            wanted[names_of[optimizer.iterations]] = "iterations"
        found = {wanted[name]: value for name, value in catalog_module.read_tensors(source, list(wanted))}
        steps = _number(found, "iterations", 0, source)
        suffix = f"_{number}" if number else ""
        for power, beta in (("beta1_power", "beta_1"), ("beta2_power", "beta_2")):
            values[power + suffix] = accumulated_power(_number(found, beta, ADAM_DEFAULTS[beta], source), steps)
        number += 1
    return values


def accumulated_power(beta, steps) -> np.float32:
    """The beta power TF1's ``AdamOptimizer`` holds after ``steps`` steps: ``beta`` as float32, multiplied
    by ``beta`` once a step in float32, values below float32's smallest normal flushed to zero (TensorFlow's
    CPU kernels do). ``beta ** (steps + 1)`` in double precision is one float32 ulp off at some steps.

    >>> print(accumulated_power(0.999, 2))
    0.9970031
    """
    beta = np.float32(beta)
    value, tiny = beta, np.finfo(np.float32).tiny
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        for _ in range(max(0, int(steps))):
            following = value * beta
            if abs(following) < tiny:
                following = np.float32(0.0)
            if following == value or following != following:
                break  # a fixed point (beta 1, or 0 reached) or NaN: it stays there
            value = following
    return np.float32(value)


def _number(found, label, default, source):
    """The real number in ``found[label]`` (``default`` when absent); CheckpointMismatchError for anything else."""
    if label not in found:
        return np.float64(default)
    value = np.asarray(found[label])
    if value.shape != () or value.dtype.kind not in "iuf":
        raise CheckpointMismatchError(f"checkpoint '{source}': the optimizer's {label} is a {value.dtype} tensor of "
                                      f"shape {list(value.shape)[:8]}, not a number")
    return np.float64(value)


def _slot_suffixes(graph, optimizer) -> dict:
    """Slot key -> the suffix TF1 gives it: the optimizer's (``Adam_1``), or the slot's own name."""
    family = _family(graph, optimizer)
    slot_names = {graph.tensors[key].slot_name for key in optimizer.slots}
    table = TF1_SLOT_SUFFIXES.get(family, {})
    if family == "RMSProp" and slot_names & {"mg", "average_gradients"}:
        table = _CENTERED_RMSPROP
    return {key: table.get(graph.tensors[key].slot_name, graph.tensors[key].slot_name) for key in optimizer.slots}


def _family(graph, optimizer):
    """Which TF1 optimizer keeps the same slots: from the slot names recorded beside the slots (legacy
    Keras, tf.compat.v1), or from the optimizer's name that starts its slots' full names (Keras 3, tf_keras)."""
    slot_names = {graph.tensors[key].slot_name for key in optimizer.slots}
    if optimizer.layout == "slot_variables":
        if "rms" in slot_names:
            return "RMSProp"
        if "m" in slot_names and slot_names <= {"m", "v", "vhat"}:
            return "Adam"
        return {frozenset({"momentum"}): "Momentum", frozenset({"accumulator"}): "Adagrad"}.get(frozenset(slot_names))
    prefixes = {graph.tensors[key].full_name.split("/", 1)[0] for key in optimizer.slots}
    if len(prefixes) != 1:
        return None
    return _LIST_OPTIMIZERS.get(re.sub(r"_\d+$", "", prefixes.pop()).lower())


def _refuse_clashes(names, derived, source):
    holders = {}
    for name, new in names.items():
        holders.setdefault(new, []).append(name)
    for new in derived:
        holders.setdefault(new, []).append(f"the computed {new}")
    for new, olds in holders.items():
        problem = npz.name_problem(new)
        if problem is not None:  # a name another format allows, or an object graph's crafted full name
            written = repr(clipped(new)) if olds[0] == new else f"{clipped(olds[0])!r} as {clipped(new)!r}"
            raise InvalidNameError(f"converting '{source}' would write {written}, which no checkpoint variable is "
                                   f"named ({problem}); leave it out (--keep), or rename it (--remap OLD=NEW)")
        if len(olds) > 1:
            raise InvalidNameError(f"converting '{source}' would write both {clipped(olds[0])} and {clipped(olds[1])} "
                                   f"as '{clipped(new)}'; leave one out (--keep), or rename it (--remap OLD=NEW)")


def _provenance(selector, cat, names, source, source_format) -> format_protocol.Provenance:
    """Where the converted tensors came from, for the output format to record what it records."""
    records = cat.records_by_name
    roles = {new: sorted(records[name].roles - {"partitioned"}) for name, new in names.items()}
    manifest = (lambda: subset_manifest.read_manifest(source)) if cat.checkpoint_kind == "name" else None
    return format_protocol.Provenance(repr(selector), source, source_format.name, roles, manifest)

