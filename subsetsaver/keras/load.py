"""TensorFlow checkpoints into a Keras 3 model: TF1 name-based files (``conv_1/w``, ``conv_1/w/Adam``,
``global_step``) and tf.keras object-based ones, which Keras 3's own loaders refuse.

The checkpoint is read through the project's catalog, without TensorFlow's reader. Every
model weight is paired with a checkpoint tensor (by name with ``remap`` rules, or by
creation order), optimizer slots follow their weights, the iteration counter reads the
step; every missing, unexpected, reshaped and retyped tensor is found before any variable
changes. Every value is read and checked against its checksum, one at a time, before the
first is assigned; then read again and assigned bit-exact, never cast: memory holds about
one tensor, not the checkpoint.

Example::

    report = ss.keras.load_checkpoint(model, 'train/', optimizer,
                                      remap={'conv_1/w': 'conv/kernel', 'conv_1/b': 'conv/bias'})
    report.restored['conv/kernel'], report.iterations
    # ('conv_1/w', 3000)
"""

from __future__ import annotations

import dataclasses

from ..catalog import choose_weights, classes_note
from ..errors import Blank, CheckpointMismatchError, Fix, WeightsChoiceError
from ..planning import ON_MISMATCH, remap_in_words
from ..selectors import as_selector
from .checkpoint_side import checkpoint_view, drop_first_class
from .common import strategy_scope
from .matching import match_by_name, match_by_object_path, match_by_order, match_optimizer
from .variables import model_weights, optimizer_state

MATCHES = ("auto", "name", "order")


@dataclasses.dataclass(frozen=True)
class CheckpointLoadReport:
    """What :func:`load_checkpoint` did.

    ``checkpoint``: the prefix (or file) read. ``restored``: model variable -> the checkpoint
    tensor it now holds, in the model's order; ``initialized``: the model variables left as
    they were (not chosen by ``sel``, or unmatched under ``on_mismatch='initialize'``).
    ``optimizer_restored`` / ``optimizer_initialized``: the same for the optimizer's
    variables (its learning rate and other hyperparameters are always left as they were);
    ``iterations``: the iteration count set from the checkpoint's step, or None.
    ``weights``: which values were read ('raw', or 'ema': ``read_from`` says the moving average each
    checkpoint weight was read from, ``raw_statistics`` the batch-norm statistics without one, read raw);
    ``classes``: (the checkpoint's, the model's) class count of the classifier, and ``background_class``
    ('dropped' or 'kept'); ``weights_note`` and :attr:`classes_note`: those in words.
    ``mismatched``: the missing, shape and dtype :class:`~subsetsaver.planning.Problem` s that
    ``on_mismatch='initialize'`` let through. ``unexpected``: the checkpoint's weights (and,
    with an optimizer, slots of loaded weights) that nothing read; they stop no load.
    ``unused``: every tensor nothing read (``unexpected``, slots without an optimizer,
    ``beta1_power``, ...). ``match`` and ``order_source``:
    how weights were paired, and for ``match='order'`` where the checkpoint's order came from.
    """

    checkpoint: str
    match: str
    restored: dict
    initialized: tuple
    optimizer_restored: dict = dataclasses.field(default_factory=dict)
    optimizer_initialized: tuple = ()
    iterations: int | None = None
    mismatched: tuple = ()
    unexpected: tuple = ()
    unused: tuple = ()
    order_source: str | None = None
    weights: str = "raw"
    read_from: dict = dataclasses.field(default_factory=dict)
    raw_statistics: tuple = ()
    classes: tuple | None = None
    background_class: str | None = None
    view: object = dataclasses.field(default=None, repr=False, compare=False)
    weights_note: str = ""

    @property
    def classes_note(self) -> str:
        """One line on the classifier's classes, for a report: where class 0 was dropped, or kept of tf-slim's
        1001 ImageNet classes ('' otherwise: nothing to choose)."""
        return classes_note(self.classes, self.background_class)


def load_checkpoint(model, checkpoint, optimizer=None, sel=None, remap=None, match="auto", on_mismatch="error", *,
                    order=None, weights="raw", drop_background_class=False) -> CheckpointLoadReport:
    """Assign a TensorFlow checkpoint's values to ``model``'s weights (and ``optimizer``'s state).

    ``model``: a built Keras 3 model, or a ``tf.Module``. ``checkpoint``: a checkpoint prefix,
    a directory (its latest checkpoint), or a ``.npz``/``.safetensors`` file.
    ``optimizer``: a Keras 3 optimizer (built here over ``model.trainable_variables`` if it
    is not): the checkpoint's slots go into its variables (TF1 ``VAR/Adam`` -> momentum,
    ``VAR/Adam_1`` -> velocity, ``VAR/Momentum``, ``VAR/Adagrad``, ``VAR/RMSProp``...;
    tf.keras ``m``/``v``...) and ``optimizer.iterations`` is set to the step. ``sel``: a
    selector over the model's weights (None: all); the slots of the chosen weights follow.
    ``match``: 'auto' (the default: in an object-based checkpoint, each weight of a Keras model by
    its object graph path, ``layer_with_weights-0/kernel``, as TensorFlow 2 restores; the rest, and
    every weight of a name-based checkpoint, by name), 'name' (each weight by its path, ``conv/kernel``, or by ``remap`` rules
    ``{checkpoint name or scope: model name or scope}``) or 'order' (``model.weights`` paired
    with the checkpoint's weights in the graph's creation order, from ``order``: the
    ``.meta`` file beside the checkpoint by default, or a ``.meta`` path, a ``tf.Graph`` or
    a list of checkpoint names). ``on_mismatch``: 'error' (a variable the checkpoint lacks,
    or holds with another shape or dtype, raises one CheckpointMismatchError that lists
    every difference, unexpected tensors too, and nothing changes) or 'initialize' (those
    variables are left as they are and reported). Tensors the model does not read (a TF1
    head a Keras model replaces) are reported in ``unexpected`` and stop nothing. The values are
    read twice, one tensor in memory at a time: first each is read and checked against its
    checksum, then dropped, so a damaged tensor anywhere changes no variable; then each is read
    again (checked again, from the page cache) and assigned at once, bit-exact: a dtype is never
    cast. A file rewritten between the two passes can leave the load half done (the second
    read's checksum still refuses a damaged value, but the variables before it hold theirs).

    load_checkpoint(model, 'ckpt/', match='order').restored['bn/gamma']
    # 'conv_1/bn/gamma'
    """
    if match not in MATCHES:
        raise ValueError(f"match={match!r} is not one of {', '.join(repr(m) for m in MATCHES)}")
    if on_mismatch not in ON_MISMATCH:
        raise ValueError(f"on_mismatch={on_mismatch!r} is not one of {', '.join(repr(m) for m in ON_MISMATCH)}")
    if match == "order" and remap:
        raise ValueError("remap renames checkpoint names for match='name'; match='order' pairs by position")
    if match != "order" and order is not None:
        raise ValueError("order= is the checkpoint's creation order for match='order'")
    model_weights(model)  # a model of the wrong kind is refused before the checkpoint is read
    return load_view(model, checkpoint_view(checkpoint), optimizer, sel, remap, match, on_mismatch, order=order,
                     weights=weights, drop_background_class=drop_background_class)


def load_view(model, view, optimizer=None, sel=None, remap=None, match="auto", on_mismatch="error", *, order=None,
              weights="raw", drop_background_class=False) -> CheckpointLoadReport:
    """:func:`load_checkpoint` from a :class:`~.checkpoint_side.CheckpointView` (which may read some tensors
    from others, or through transforms: a built-in pairing's)."""
    weights_of_model = model_weights(model)
    with strategy_scope(model):
        if optimizer is not None and not getattr(optimizer, "built", True):
            optimizer.build(model.trainable_variables)
        chosen = [name for name in as_selector(sel).names(weights_of_model.catalog)
                  if name in weights_of_model.variables]
        pairing, match = _pair(model, weights_of_model, view, chosen, remap, match, order)
        read = list(dict.fromkeys(pairing.keys[name] for name in chosen if pairing.keys.get(name) in view.contents))
        choice = choose_weights(view.catalog, read, weights, view.path)
        classifier = _classifier(model, weights_of_model, view, pairing, drop_background_class, on_mismatch)
        if choice.read_from or classifier.transforms:
            view = view.reading(choice.read_from, classifier.transforms)
            if classifier.transforms:
                pairing, match = _pair(model, weights_of_model, view, chosen, remap, match, order)
        bad = pairing.bad
        loading = {name: pairing.keys[name] for name in chosen if name not in bad}
        state = optimizer_state(optimizer, weights_of_model) if optimizer is not None else None
        optimizer_pairs, optimizer_findings = (match_optimizer(state, view, loading, optimizer)
                                               if state is not None else ({}, []))
        findings = pairing.findings + optimizer_findings
        if any(f.problem.blocking for f in findings) and on_mismatch == "error":
            reason, fixes = _mismatch(weights_of_model, state, view, pairing, findings, match, remap)
            raise CheckpointMismatchError(reason, [f.problem for f in findings], fixes=fixes, path=view.path)
        step = optimizer_pairs.pop(state.iterations, None) if state is not None else None
        needed = list(dict.fromkeys([*loading.values(), *optimizer_pairs.values(), *([step] if step else [])]))
        targets = {key: [] for key in needed}
        for name, key in loading.items():
            targets[key].append(weights_of_model.variables[name])
        for path, key in optimizer_pairs.items():
            targets[key].append(state.variables[path])
        narrowed = {key: weights_of_model.spec(name)[1] for name, key in loading.items()
                    if view.contents[key][1] != weights_of_model.spec(name)[1]}  # tf_keras's wider dtypes
        _check_every_value(view, needed, narrowed)
        iterations = None
        for key, array in view.read(needed):  # read again (and checked again), assigned at once
            if key in narrowed:
                array = array.astype(narrowed[key])
            for variable in targets[key]:
                variable.assign(array)
            if key == step:
                iterations = int(array)
                state.variables[state.iterations].assign(iterations)
            del array
    report = _report(weights_of_model, state, view, pairing, loading, optimizer_pairs, step, iterations, findings,
                     match)
    return dataclasses.replace(report, weights=choice.used,
                               read_from={key: choice.read_from[key] for key in loading.values()
                                          if key in choice.read_from},
                               raw_statistics=tuple(key for key in choice.raw_statistics if key in read),
                               classes=classifier.classes, background_class=classifier.background_class,
                               view=view, weights_note=choice.describe(len(read)))


def _pair(model, weights, view, chosen, remap, match, order):
    """The pairing of ``chosen`` model weights with ``view``'s tensors, and the match it was made by."""
    if match == "auto":
        pairing = match_by_object_path(model, weights, view, chosen, remap)
        return pairing, "auto" if pairing.by_object_path else "name"  # what the report and messages say was done
    if match == "name":
        return match_by_name(weights, view, chosen, remap), match
    return match_by_order(weights, view, chosen, order), match


@dataclasses.dataclass(frozen=True)
class Classifier:
    """The classifier's class counts (checkpoint, model), what was done with a background class
    ('dropped', 'kept', or None when the model has no classifier that reads the checkpoint) and the
    transforms that drop it."""

    classes: tuple | None = None
    background_class: str | None = None
    transforms: dict = dataclasses.field(default_factory=dict)


def _classifier(model, weights, view, pairing, drop, on_mismatch) -> Classifier:
    """The model's classifier (the weights of its last layer that has weights: a kernel and a bias of as
    many classes) against the checkpoint tensors paired with it. One class more in the checkpoint is
    tf-slim's background class 0: dropped with ``drop``, else refused (the model would read the classes
    shifted by one; under ``on_mismatch='initialize'`` it is left as built); ``drop`` where there is none is
    refused too."""
    layers = [layer for layer in getattr(model, "layers", ()) if layer.weights]
    found = None
    if layers:
        names = [variable.path for variable in layers[-1].weights]
        shapes = [weights.spec(name)[0] for name in names if name in weights.variables]
        keys = [pairing.keys.get(name) for name in names]
        if len(names) == 2 and len(shapes) == 2 and len(shapes[1]) == 1 and shapes[0][-1] == shapes[1][0] \
                and all(key in view.contents for key in keys):
            found = names, keys, shapes[1][0], view.contents[keys[1]][0][-1] if view.contents[keys[1]][0] else None
    if found is None:
        if drop:
            raise WeightsChoiceError(f"drop_background_class: the {weights.label} has no classifier (a last layer "
                                     f"with a kernel and a bias) that reads checkpoint '{view.path}'",
                                     fixes=[Fix("drop_background_class", False, "to convert without it")])
        return Classifier()
    names, keys, model_classes, checkpoint_classes = found
    if checkpoint_classes == model_classes + 1:
        if not drop and on_mismatch == "initialize":
            return Classifier((checkpoint_classes, model_classes))
        if not drop:
            raise WeightsChoiceError(
                f"checkpoint '{view.path}' classifies into {checkpoint_classes} classes ('{keys[1]}'), the "
                f"{weights.label} into {model_classes} ('{names[1]}'): tf-slim's class 0 is the background",
                fixes=[Fix("drop_background_class", True, "to drop class 0 and keep the other "
                                                          f"{model_classes}")])
        return Classifier((checkpoint_classes, model_classes), "dropped", {key: drop_first_class() for key in keys})
    if drop:
        raise WeightsChoiceError(
            f"drop_background_class: checkpoint '{view.path}' classifies into {checkpoint_classes} classes "
            f"('{keys[1]}'), as the {weights.label} does ('{names[1]}'): there is no background class to drop",
            fixes=[Fix("drop_background_class", False, "to keep every class")])
    return Classifier((checkpoint_classes, model_classes), "kept")


def _check_every_value(view, names, narrowed) -> None:
    """Read each of ``names`` of checkpoint ``path`` (the reader checks it against its checksum) and drop
    it: the first pass of a load, so that a damaged tensor anywhere stops the load before any variable
    changes, with one tensor in memory at a time. A value to be read into a narrower dtype (``narrowed``:
    name -> dtype) must keep its value there.

    _check_every_value(checkpoint_view('train/model-3'), ['conv_1/w', 'global_step'], {})
    """
    for key, array in view.read(names):
        if key in narrowed and not (array.astype(narrowed[key]) == array).all():
            raise CheckpointMismatchError(f"checkpoint '{view.path}': '{key}' holds {array.dtype} values that the "
                                          f"model's {narrowed[key]} cannot hold; no variable was changed",
                                          path=view.path)
        del array  # held no longer than its check


def _report(weights, state, view, pairing, loading, optimizer_pairs, step, iterations, findings, match):
    read = {*loading.values(), *optimizer_pairs.values(), *([step] if step else [])}
    optimizer_restored = dict(optimizer_pairs)
    if step is not None:
        optimizer_restored[state.iterations] = step
    return CheckpointLoadReport(
        checkpoint=view.path,
        match=match,
        restored=loading,
        initialized=tuple(name for name in weights.variables if name not in loading),
        optimizer_restored=optimizer_restored,
        optimizer_initialized=() if state is None else tuple(p for p in state.variables if p not in optimizer_restored),
        iterations=iterations,
        mismatched=tuple(f.problem for f in findings if f.problem.blocking),
        unexpected=tuple(f.problem.checkpoint_name for f in findings if not f.problem.blocking),
        unused=tuple(name for name in view.catalog.ordered_names if name not in read),
        order_source=pairing.order_source,
    )


def _mismatch(weights, state, view, pairing, findings, match, remap) -> tuple:
    """(reason, fixes) of the CheckpointMismatchError a load raises: what differs, then the remedies as Fix values."""
    counts = []
    for kind, label in (("missing", "missing"), ("shape", "shape mismatch"), ("dtype", "dtype mismatch"),
                        ("unexpected", "unexpected")):
        count = sum(1 for f in findings if f.kind == kind)
        if count:
            counts.append(f"{count} {label}{'es' if count > 1 and kind in ('shape', 'dtype') else ''}")
    target = weights.label if state is None else f"{weights.label} and {state.label}"
    how = f"match={match!r}" + (f", checkpoint order from {pairing.order_source}" if pairing.order_source else "")
    lines = [f"checkpoint '{view.path}' does not match the {target} ({how}): {', '.join(counts)}"]
    ordered = [f for f in findings if f.kind != "unexpected"] + [f for f in findings if f.kind == "unexpected"]
    lines += ["  " + _line(finding) for finding in ordered]
    fixes = []
    if pairing.remap:
        missing = sum(1 for f in pairing.findings if f.kind == "missing")
        fixes.append(Fix("remap", {**(remap or {}), **pairing.remap},
                         f"{remap_in_words(pairing.remap)} (the checkpoint holds {pairing.resolves} of the "
                         f"{missing} missing variable{'s' if missing > 1 else ''} that way)"))
    if any(f.kind == "dtype" for f in findings):
        lines.append("a dtype is never cast: build the model with the checkpoint's dtypes (dtype= on the layers), "
                     "or write a cast copy first (`subsetsaver rewrite CKPT -o OUT --cast EXPR=DTYPE`, or "
                     "ss.rewrite(checkpoint, out, cast={selector: dtype}))")
    if state is not None and not view.slots and any(f.problem.name in state.slots for f in findings):
        lines.append("the checkpoint holds no optimizer slots")
        fixes.append(Fix("optimizer", None, "to load the weights alone"))
    made_by = sorted({f.note.split("made by TF1's ")[1].split(",")[0] for f in findings if "made by TF1's " in f.note})
    if made_by:
        lines.append(f"the checkpoint's slots were made by TF1's {' and '.join(made_by)}: pass the Keras optimizer "
                     "of that algorithm")
        if not any(fix.argument == "optimizer" for fix in fixes):
            fixes.append(Fix("optimizer", None, "to load the weights alone"))
    if match == "order":
        lines.append("no variable was changed; pairing by order takes model.weights and the checkpoint's weights in "
                     "the order the graph created them: build the layers in that order")
        fixes.append(Fix("match", "name", "to pair by name instead"))
    else:
        lines.append("no variable was changed")
        if not pairing.remap:
            fixes.append(Fix("remap", Blank("{checkpoint name or scope: model name or scope}"), "to pair the names"))
    fixes.append(Fix("on_mismatch", "initialize", "to leave the unmatched variables as they are"))
    return "\n".join(lines), tuple(fixes)


def _line(finding) -> str:
    problem = finding.problem
    if problem.kind == "unexpected":
        text = f"unexpected: {problem.checkpoint_name} {_spec_text(problem.found_shape, problem.found_dtype)}"
    else:
        text = problem.describe()
    return f"{text} ({finding.note})" if finding.note else text


def _spec_text(shape, dtype) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + f"] {dtype}"
