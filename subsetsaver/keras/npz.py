"""Portable checkpoints for TF2 / Keras 3 models in eager mode: weights and optimizer state as ``.npz``.

The same file format as graph mode (:mod:`subsetsaver.formats.npz`): no SaveV2, no pickle.
Names are Keras variable paths (``dense/kernel``, ``adam/dense_kernel_momentum``,
``adam/iteration``), so selectors choose what to save. Restoring builds the optimizer's
variables first (``optimizer.build(model.trainable_variables)``), so Adam's moments are
in place before the first step, and finds optimizer variables by their path without the
optimizer's name (a fresh ``adam_1`` restores what ``adam`` saved). Works inside a
``tf.distribute`` strategy scope (the strategy the model's variables belong to is
entered for building and assigning).

Example::

    ss.keras.save_npz('model.npz', model, optimizer)                  # everything
    ss.keras.save_npz('weights.npz', model, sel=ss.trainable() | ss.bn_stats())
    fresh, opt = make_model(), keras.optimizers.Adam(1e-3)
    ss.keras.restore_npz('model.npz', fresh, opt).restored[:2]
    # ('dense/kernel', 'dense/bias')
"""

from __future__ import annotations

import os

from ..catalog import keras_dtype_name, read_keras
from ..errors import CheckpointMismatchError
from ..formats import npz
from ..planning import Problem, describe_all
from ..portable import NpzRestoreReport
from ..selectors import as_selector
from .common import compiled_optimizer, require_built, strategy_scope, value


def save_npz(path, model, optimizer=None, sel=None, *, checksum=npz.DEFAULT_CHECKSUM) -> str:
    """Write the variables of ``model`` and ``optimizer`` that ``sel`` chooses (None: all) to ``path``.

    ``optimizer`` None means ``model.optimizer`` when the model was compiled with one.
    ``checksum``: 'crc32' or 'sha256' per array. Returns ``path``.
    """
    optimizer = compiled_optimizer(model, optimizer)
    require_built(model)
    found = read_keras(model, optimizer)
    names = _chosen(sel, found.catalog)
    arrays, info = {}, {}
    with strategy_scope(model):
        for name in names:
            variable = found.variables[name]
            arrays[name] = value(variable)
            info[name] = {"owner": found.owner[name], "local": found.local[name], "trainable": bool(variable.trainable)}
    metadata = {"source": "keras", "model": model.name,
                "optimizer": None if optimizer is None else type(optimizer).__name__}
    selector_text = repr(as_selector(sel))
    path = os.fspath(path)
    npz.write(path, arrays, selector=selector_text, metadata=metadata, array_info=info, checksum=checksum)
    return path


def restore_npz(path, model, optimizer=None, *, strict=True):
    """Assign ``model`` (and ``optimizer``) variables from the portable file ``path``.

    Builds ``optimizer`` first if it is not built. Validates the whole file before any
    variable changes. ``strict=True``: the file and the variables must correspond one to
    one (same names, shapes, dtypes), else one CheckpointMismatchError lists every
    difference; ``strict=False`` restores what both hold and reports the rest. Returns
    a :class:`subsetsaver.portable.NpzRestoreReport`.
    """
    optimizer = compiled_optimizer(model, optimizer)
    require_built(model)
    with strategy_scope(model):
        if optimizer is not None and not getattr(optimizer, "built", True):
            optimizer.build(model.trainable_variables)
        found = read_keras(model, optimizer)
        path = os.fspath(path)
        by_key = {(found.owner[name], found.local[name]): name for name in found.variables}
        with npz.Archive(path) as archive:
            manifest = archive.manifest
            targets, unexpected, mismatched = {}, [], []
            for entry in manifest.arrays:
                info = entry.info or {}
                key = (info.get("owner"), info.get("local")) if "owner" in info else None
                name = by_key.get(key) if key else (entry.name if entry.name in found.variables else None)
                if name is None:
                    unexpected.append(entry.name)
                    continue
                variable = found.variables[name]
                shape, dtype, _ = npz.entry_spec(entry)
                expected_shape = tuple(int(d) for d in variable.shape)
                expected_dtype = keras_dtype_name(variable.dtype)
                if shape != expected_shape or dtype != expected_dtype:
                    kind = "shape" if shape != expected_shape else "dtype"
                    mismatched.append(Problem(kind, name, entry.name, expected_shape, expected_dtype, shape, dtype))
                    continue
                targets[entry.name] = name
            matched = set(targets.values()) | {p.name for p in mismatched}
            missing = [Problem("missing", name, name, tuple(int(d) for d in v.shape),
                               keras_dtype_name(v.dtype))
                       for name, v in found.variables.items() if name not in matched]
            if strict and (missing or mismatched or unexpected):
                raise CheckpointMismatchError(_message(path, manifest, missing, mismatched, unexpected, len(targets)),
                                              missing + mismatched)
            arrays = archive.load(list(targets))
        for file_name, name in targets.items():
            found.variables[name].assign(arrays[file_name])
    return NpzRestoreReport(
        path=path,
        restored=tuple(name for name in found.variables if name in set(targets.values())),
        missing=tuple(p.name for p in missing),
        mismatched=tuple(mismatched),
        unexpected=tuple(unexpected),
    )


def _message(path, manifest, missing, mismatched, unexpected, restorable):
    lines = [f"portable checkpoint '{path}' does not match the Keras model and optimizer: "
             f"{len(missing)} missing, {len(mismatched)} shape/dtype mismatches, {len(unexpected)} unexpected"]
    lines += describe_all(missing + mismatched)
    lines += [f"  unexpected: {name} (no such variable in the model or optimizer)" for name in unexpected[:20]]
    if len(unexpected) > 20:
        lines.append(f"  ... and {len(unexpected) - 20} more unexpected")
    if manifest.selector:
        lines.append(f"the file was saved with selector {manifest.selector}")
    lines.append(
        f"no variable was changed; fix: build the same architecture with the same layer names (and pass the "
        f"optimizer if the file holds its state), or pass strict=False to restore the {restorable} variables both hold"
    )
    return "\n".join(lines)


def _chosen(sel, catalog):
    return as_selector(sel).names(catalog)
