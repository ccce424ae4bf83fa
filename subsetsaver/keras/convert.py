"""A TF1 checkpoint rewritten as a TensorFlow 2 object-based one, through the Keras 3 model that reads it.

:func:`convert_checkpoint` builds the model (and optimizer) with a function of the user's,
loads the checkpoint into it with :func:`~subsetsaver.keras.load_checkpoint` (remap rules,
selector, match by name or order), writes ``tf.train.Checkpoint(model=model,
optimizer=optimizer)`` and reads the result back with the project's own reader: every
loaded variable must hold, byte for byte, the source tensor it was loaded from. Only then
is the output put in place (local paths: written beside it, then renamed) and named the
latest checkpoint of its directory (``tf.train.Checkpoint.write`` does not name it).

A Keras 3 user reads the output back with the same function:
``tf.train.Checkpoint(model=model, optimizer=optimizer).read(prefix)`` (the optimizer may be
built before or after; a model alone reads it too).

Example::

    report = convert_checkpoint('train/model-3', 'tf2/ckpt', 'models:build',
                                remap={'conv_1/w': 'conv/kernel'})
    report.output, report.load.iterations
    # ('tf2/ckpt', 3)
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import os
import re
import sys

import numpy as np

from .. import catalog as catalog_module
from ..errors import CorruptCheckpointError, ModelBuilderError
from ..formats import checkpoint_writer, registry
from ..formats.tf import bundle, checkpoint_state
from ..graph_mode import tensorflow
from ..selectors import as_selector
from .checkpoint_side import checkpoint_path
from .common import is_tf_module
from .load import MATCHES, CheckpointLoadReport, load_checkpoint

APPLICATIONS = "keras.applications."
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_FORM = ("name a module (my_models, pkg.models) or a file (path/to/models.py), a colon and a function "
         "of no arguments, e.g. my_models:build")


@dataclasses.dataclass(frozen=True)
class ModelConvertReport:
    """What a conversion through a built model did (:func:`convert_checkpoint` to a TF2 object-based
    checkpoint, :func:`~subsetsaver.keras.convert_weights` to Keras 3's ``.weights.h5``): ``source`` (the
    checkpoint read), ``output`` (what was written), ``builder`` (the function's name, ``models:build``),
    ``load`` (the :class:`~subsetsaver.keras.CheckpointLoadReport` of the load into the model), ``tensors``
    and ``nbytes`` (the output's tensors and the bytes of their values) and ``verified`` (what was read
    back bit-exact: the output's tensors, or the model weights whose datasets were); ``pairing``: the
    built-in pairing used (:mod:`.pairings`), or None; ``notes``: what a reader should know, one line each
    (which values were converted: moving averages or raw; the classifier's classes; what was left out).
    """

    source: str
    output: str
    builder: str
    load: CheckpointLoadReport
    tensors: int
    nbytes: int
    verified: tuple
    pairing: str | None = None
    notes: tuple = ()


def convert_checkpoint(checkpoint, output, build, *, keep=None, remap=None, match="auto", on_mismatch="error",
                       overwrite=False, optimizer=True, weights="raw",
                       drop_background_class=False) -> ModelConvertReport:
    """Write ``checkpoint`` (TF1 name-based or tf.keras object-based) as a TF2 object-based checkpoint
    ``output`` of the Keras 3 model (or ``tf.Module``) that ``build`` returns.

    ``build``: a function of no arguments, or its ``'MODULE:FUNCTION'`` text
    (:func:`import_builder`), returning a built model, or ``(model, optimizer)``. ``keep``
    (``sel`` of the load: the model weights to load; the rest keep their built values), ``remap``,
    ``match`` and ``on_mismatch``: as :func:`~subsetsaver.keras.load_checkpoint` takes them. ``overwrite``:
    replace an existing ``output``. ``optimizer=False`` (``--no-optimizer``): leave out the optimizer
    ``build`` returns, and load and write the weights alone. Everything that can be refused (the output, the builder,
    any mismatch) is refused before anything is written; a written output that does not read
    back bit-exact is a CorruptCheckpointError, and is not left in place. ``weights`` and
    ``drop_background_class``: as :func:`~subsetsaver.keras.load_checkpoint` takes them ('raw' by default:
    an object-based checkpoint with its optimizer is training state).

    convert_checkpoint('train/', 'tf2/ckpt', 'models.py:build', keep='~slots()').verified[:2]
    # ('conv/kernel', 'conv/bias')
    """
    if match not in MATCHES:  # refused before the builder imports TensorFlow
        raise ValueError(f"match={match!r} is not one of {', '.join(repr(m) for m in MATCHES)}")
    tensorflow("writing a TF2 object-based checkpoint (convert --to object)")
    source = checkpoint_path(checkpoint)
    catalog_module.file_catalog(source)  # a missing or unreadable source is refused first
    output = os.fspath(output)
    checkpoint_writer.check_output(output, registry.OBJECT, sources=[source], overwrite=overwrite)
    keep = as_selector(keep, "keep")
    builder, label = (import_builder(build), build) if isinstance(build, str) else (build, label_of(build))
    model, built_optimizer = built_model(builder, label)
    optimizer = built_optimizer if optimizer else None
    report = load_checkpoint(model, source, optimizer, sel=keep, remap=remap, match=match, on_mismatch=on_mismatch,
                             weights=weights, drop_background_class=drop_background_class)
    with checkpoint_writer.writing(output, registry.OBJECT, sources=[source], overwrite=overwrite) as staged:
        written = _write(model, optimizer, staged)
        out, verified = _verify(source, written, report, output)
        if written != output:
            bundle.publish_staged(written, output)
    checkpoint_state.name_latest(output)
    notes = tuple(note for note in (report.weights_note, report.classes_note) if note)
    return ModelConvertReport(source, output, label, report, len(out.records),
                              sum(record.nbytes for record in out.records), verified, notes=notes)


def import_builder(text):
    """The function ``'MODULE:FUNCTION'`` names: ``MODULE`` is an importable module (the current
    directory is on the search path while it is imported, as with ``python -m``) or a
    ``path/to/file.py`` (its directory is searched first while it is imported); or a Keras 3 application,
    ``'keras.applications.EfficientNetB0'``, built with ``weights=None`` (its other arguments as Keras
    sets them: write a function for another input size, ``alpha`` or class count). Every problem is
    one ModelBuilderError that names ``text``.

    import_builder('models.py:build').__name__
    # 'build'
    """
    if text.startswith(APPLICATIONS) and ":" not in text:
        return _application(text)
    module_text, colon, function = text.rpartition(":")
    is_file = module_text.endswith(".py")
    if not colon or not module_text or not function.isidentifier() or not (is_file or _DOTTED.match(module_text)):
        raise ModelBuilderError(f"model builder '{text}' is not MODULE:FUNCTION: {_FORM}")
    if is_file:
        if not os.path.isfile(module_text):
            raise ModelBuilderError(f"model builder '{text}': no file '{module_text}'")
        module = _import_file(text, module_text)
    else:
        module = _import_module(text, module_text)
    if not hasattr(module, function):
        raise ModelBuilderError(f"model builder '{text}': module '{module_text}' has no function '{function}'")
    found = getattr(module, function)
    if not callable(found):
        raise ModelBuilderError(f"model builder '{text}': '{function}' of module '{module_text}' is not a function "
                        f"(it is {type(found).__name__})")
    return found


def built_model(builder, label) -> tuple:
    """``(model, optimizer or None)`` from calling ``builder``: a ModelBuilderError names ``label`` when it
    raises, or returns anything but a Keras 3 model or ``tf.Module``, or a ``(model, optimizer)`` tuple of them.

    model, optimizer = built_model(lambda: (model, keras.optimizers.Adam()), 'models:build')
    """
    import keras

    try:
        result = builder()
    except Exception as error:
        raise ModelBuilderError(f"model builder '{label}' raised {type(error).__name__}: {_first_line(error)}") from error
    model, optimizer = result if isinstance(result, tuple) and len(result) == 2 else (result, None)
    is_model = catalog_module.is_keras_model(model) or is_tf_module(model)
    if not is_model or not (optimizer is None or isinstance(optimizer, keras.optimizers.Optimizer)):
        what = (f"a tuple of {type(model).__name__} and {type(optimizer).__name__}" if isinstance(result, tuple)
                else f"a {type(result).__name__}")
        raise ModelBuilderError(f"model builder '{label}' returned {what}, not a Keras 3 model or tf.Module, or a "
                        "(model, optimizer) tuple with a Keras 3 optimizer")
    return model, optimizer


# ---------------------------------------------------------------------------------


def label_of(build) -> str:
    """``MODULE:QUALNAME`` of a builder function, for messages."""
    if not callable(build):
        raise TypeError(f"build is a function or its 'MODULE:FUNCTION' text, got {type(build).__name__}")
    return f"{getattr(build, '__module__', '?')}:{getattr(build, '__qualname__', type(build).__name__)}"


def _first_line(error) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"


def _application(text):
    """The Keras 3 application ``text`` names (``keras.applications.MobileNetV2``), as a function of no
    arguments that builds it without downloading weights."""
    import keras

    found = keras
    for part in text.split(".")[1:]:
        found = getattr(found, part, None) if part.isidentifier() else None
        if found is None:
            raise ModelBuilderError(f"model builder '{text}': keras.applications has no '{text[len(APPLICATIONS):]}' "
                             "(e.g. keras.applications.EfficientNetB0)")
    if not callable(found):
        raise ModelBuilderError(f"model builder '{text}' is not a function (it is {type(found).__name__})")
    return functools.partial(found, weights=None)


def _import_module(text, name):
    here = os.getcwd()
    added = here not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        return importlib.import_module(name)
    except Exception as error:
        raise ModelBuilderError(f"model builder '{text}': cannot import module '{name}' "
                         f"({type(error).__name__}: {_first_line(error)})") from error
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(here)


def _import_file(text, path):
    name = os.path.splitext(os.path.basename(path))[0]
    directory = os.path.dirname(os.path.abspath(path))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    registered = name not in sys.modules
    if registered:
        sys.modules[name] = module
    sys.path.insert(0, directory)
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        if registered:
            del sys.modules[name]
        raise ModelBuilderError(f"model builder '{text}': cannot import '{path}' "
                         f"({type(error).__name__}: {_first_line(error)})") from error
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(directory)
    return module


def _write(model, optimizer, prefix) -> str:
    import tensorflow as tf

    trackables = {"model": model} if optimizer is None else {"model": model, "optimizer": optimizer}
    return tf.train.Checkpoint(**trackables).write(prefix)


def _verify(source, written, report, output) -> tuple:
    """The catalog of ``written`` (``output``'s files, maybe under a temporary prefix), and the names
    of its tensors that hold bit-exact what the load read."""
    out = catalog_module.file_catalog(written)
    if out.checkpoint_kind != "object":
        raise CorruptCheckpointError(f"checkpoint '{output}' that tf.train.Checkpoint wrote is not object-based")
    # the iteration counter comes last in optimizer_restored (load._report puts it there)
    step = next(reversed(report.optimizer_restored)) if report.iterations is not None else None
    pairs = [*report.restored.items(), *report.optimizer_restored.items()]
    names = {record.name for record in out.records}
    for name, _ in pairs:
        if name not in names:
            raise CorruptCheckpointError(f"checkpoint '{output}' that tf.train.Checkpoint wrote holds no tensor "
                                         f"named '{name}'; its tensors: {', '.join(sorted(names))}")
    got_values = catalog_module.read_tensors(written, [name for name, _ in pairs])
    expected_values = report.view.read([key for _, key in pairs])  # as loaded: averages, transforms
    for (name, got), (key, expected) in zip(got_values, expected_values):
        why = difference(got, expected, counter=name == step)
        if why:
            raise CorruptCheckpointError(f"checkpoint '{output}' does not hold what was loaded from '{source}': "
                                         f"'{name}' {why} '{key}'")
        del got, expected
    return out, tuple(name for name, _ in pairs)


def difference(got, expected, counter=False) -> str:
    """Why ``got`` is not ``expected`` byte for byte ('' when it is); an iteration counter compares
    by value (an int32 step fills Keras's int64 counter)."""
    if counter and got.shape == expected.shape == () and np.issubdtype(got.dtype, np.integer) \
            and np.issubdtype(expected.dtype, np.integer):
        return "" if int(got) == int(expected) else f"holds {int(got)}, not the {int(expected)} of"
    if got.dtype != expected.dtype or got.shape != expected.shape:
        return f"is {list(got.shape)} {got.dtype}, not the {list(expected.shape)} {expected.dtype} of"
    if np.ascontiguousarray(got).tobytes() != np.ascontiguousarray(expected).tobytes():
        return "holds other bytes than"
    return ""
