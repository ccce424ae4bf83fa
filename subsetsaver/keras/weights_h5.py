"""A TensorFlow checkpoint as Keras 3's own weights file, ``.weights.h5``, which ``model.load_weights``
reads on any backend with no subsetsaver and no TensorFlow.

:func:`convert_weights` builds the Keras 3 model with a function of the user's (or a
``keras.applications`` name), fills every weight with :func:`~subsetsaver.keras.load_checkpoint`
(object graph first, then names, tf_keras's names where Keras 3 renamed a weight, ``remap`` rules;
every missing, reshaped or retyped weight is refused before anything is written), and has Keras
write the file (``model.save_weights``), so the layout is Keras's own, under the one writer's
staging name and directory lock. Then every dataset of every layer is read back and compared
bit-exact with the checkpoint tensor its weight was loaded from; only then is the file renamed into
place. Memory: the model, and about one tensor besides.

Example::

    report = convert_weights('train/model-9000', 'model.weights.h5', 'keras.applications.EfficientNetB0')
    report.tensors, report.load.restored['stem_conv/kernel']
    # (314, 'stem_conv/kernel')
"""

from __future__ import annotations

import math
import os

from .. import catalog as catalog_module
from .. import storage, tf_internals
from ..errors import CheckpointMismatchError, CorruptCheckpointError, InvalidOutputError, ModelBuilderError
from ..formats import checkpoint_writer, keras_h5, publish
from .checkpoint_side import checkpoint_path, checkpoint_view
from .convert import ModelConvertReport, built_model, difference, import_builder, label_of
from .load import MATCHES, load_view
from .pairings import builtin_pairing


def convert_weights(checkpoint, output, build, *, remap=None, match="auto", overwrite=False, weights=None,
                    drop_background_class=False) -> ModelConvertReport:
    """Write ``checkpoint`` (TF1 name-based, or tf.keras object-based) as the ``.weights.h5`` file ``output``
    of the Keras 3 model ``build`` returns.

    ``build``: a function of no arguments returning a built Keras 3 model (or ``(model, optimizer)``:
    the optimizer is left out), its ``'MODULE:FUNCTION'`` text, or ``'keras.applications.NAME'``
    (:func:`~subsetsaver.keras.import_builder`). ``remap`` and ``match``: as
    :func:`~subsetsaver.keras.load_checkpoint` takes them. Every model weight must be filled, with its
    shape and dtype: anything else is one CheckpointMismatchError before anything is written.
    ``overwrite``: replace an existing ``output``. ``weights``: None (the default: each weight's moving
    average when every weight has one, as tf-slim's evaluation restores them, else the raw values),
    'ema' or 'raw' (see :func:`~subsetsaver.catalog.choose_weights`). ``drop_background_class``: leave out
    class 0 of a classifier that has one class more than the model's (tf-slim's 1001 ImageNet classes
    into a 1000-class model); without it such a checkpoint is refused. A built-in pairing
    (:mod:`.pairings`: tf-slim's InceptionV3 into ``keras.applications.InceptionV3``) pairs a checkpoint
    whose names say nothing of the model's, by the model's structure.

    convert_weights('train/', 'mobilenet.weights.h5', 'models.py:build', remap={'net/': ''}).verified[:1]
    # ('Conv1/kernel',)
    """
    if match not in MATCHES:  # refused before the builder imports Keras
        raise ValueError(f"match={match!r} is not one of {', '.join(repr(m) for m in MATCHES)}")
    source = checkpoint_path(checkpoint)
    catalog_module.file_catalog(source)  # a missing or unreadable source is refused first
    output = _checked_output(output)
    checkpoint_writer.check_output(output, keras_h5.KERAS_H5, sources=[source], overwrite=overwrite)
    builder, label = (import_builder(build), build) if isinstance(build, str) else (build, label_of(build))
    model, _optimizer = built_model(builder, label)
    if not catalog_module.is_keras_model(model):
        raise ModelBuilderError(f"model builder '{label}' returned a {type(model).__name__}; a .weights.h5 file is "
                                "a Keras 3 model's")
    view = checkpoint_view(source)
    pairing = builtin_pairing(model, view)
    if pairing is not None:
        remap = {**pairing.remap, **(remap or {})}
        view = view.reading(transforms=pairing.transforms)
    try:
        report = load_view(model, view, remap=remap, match=match, weights=weights,
                           drop_background_class=drop_background_class)
    except CheckpointMismatchError as error:  # every weight is filled here: leaving some as built is no remedy
        fixes = [fix for fix in error.fixes if fix.argument != "on_mismatch"]
        raise CheckpointMismatchError(error.reason, error.problems, fixes=fixes, path=error.path) from None
    with checkpoint_writer.writing(output, keras_h5.KERAS_H5, sources=[source], overwrite=overwrite) as staged:
        written = staged + keras_h5.SUFFIX  # Keras writes only names that end so
        try:
            model.save_weights(written)
            verified = _verify(model, report, source, written, output)
            tensors = keras_h5.KERAS_H5.contents(written).tensors
            publish.publish({output: written}, commit=output, replaced=keras_h5.KERAS_H5.files(output))
        except BaseException:
            publish.discard([written])
            raise
    nbytes = sum(_nbytes(info) for info in tensors)
    notes = tuple(note for note in (report.weights_note, report.classes_note) if note)
    return ModelConvertReport(source, output, label, report, len(tensors), nbytes, verified,
                              pairing=None if pairing is None else pairing.name,
                              notes=notes + (() if pairing is None else pairing.notes))


def _checked_output(output) -> str:
    output = os.fspath(output)
    if not output.endswith(keras_h5.SUFFIX):
        stem = output[:-3] if output.endswith(".h5") else output
        raise InvalidOutputError(f"output '{output}': Keras 3's load_weights reads only files named *.weights.h5; "
                                 f"name it '{stem}{keras_h5.SUFFIX}'", path=output)
    if not storage.is_local(output):
        raise InvalidOutputError(f"output '{output}': a Keras weights file is written to a local path; write it "
                                 "locally, then copy it", path=output)
    return output


def _verify(model, report, source, written, output) -> tuple:
    """The model weights whose datasets in ``written`` hold, bit-exact, the checkpoint tensors they were
    loaded from. Each ``vars`` group is matched to its layer by the name Keras records on it, and its
    datasets to the layer's weights by the index the layer's ``save_own_variables`` gives them."""
    layers = {}
    for layer in tf_internals.keras_sublayers(model):
        layers.setdefault(layer.name, []).append(layer)
    path_of = {id(variable): variable.path for variable in model.weights}
    where = {}
    for group, name in keras_h5.layer_names(written).items():
        for layer in layers.get(name, ()):
            saved = {}
            layer.save_own_variables(saved)
            for index, value in saved.items():
                weight = path_of.get(id(value))
                if weight is not None:
                    where.setdefault(weight, f"{group}/vars/{index}" if group else f"vars/{index}")
    loaded = report.restored
    lost = [weight for weight in loaded if weight not in where]
    if lost:
        raise CorruptCheckpointError(f"Keras weights file '{output}' holds no dataset for {len(lost)} loaded weights "
                                     f"({', '.join(lost[:3])}); it is not put in place", path=output)
    weights = list(loaded)
    got_values = keras_h5.read(written, [where[weight] for weight in weights])
    expected_values = report.view.read([loaded[weight] for weight in weights])  # as loaded: averages, transforms
    for weight, (dataset, got), (key, expected) in zip(weights, got_values, expected_values):
        why = difference(got, expected, counter=got.shape == ())  # an integer scalar compares by value (legacy_names)
        if why:
            raise CorruptCheckpointError(f"Keras weights file '{output}' does not hold what was loaded from "
                                         f"'{source}': '{dataset}' (weight '{weight}') {why} '{key}'", path=output)
        del got, expected
    return tuple(weights)


def _nbytes(info) -> int:
    import numpy as np

    size = 2 if info.dtype == "bfloat16" else np.dtype(info.dtype).itemsize
    return math.prod(info.shape) * size
