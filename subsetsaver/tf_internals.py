"""The one place that touches TensorFlow's (and Keras's) private attributes and modules.

TensorFlow exposes some facts only through private names: where a part of a
partitioned variable sits (``_save_slice_info``), creation order across global and
local variables (``op._id``), a cheap "has the graph changed" stamp
(``graph._collections``), whether a tensor is a reference (``dtype._is_ref_dtype``).
Every such access is here, behind a small function that says what it means, so a
TensorFlow upgrade that renames one breaks one function. Nothing here imports
TensorFlow at import time.

Example::

    info = slice_info(part)          # None for a variable that is not a partition
    info.full_shape, info.var_offset, info.var_shape, info.spec
    # ([20, 8], [10, 0], [10, 8], '20 8 10,10:0,8')
"""

from __future__ import annotations


def slice_info(variable):
    """The ``SaveSliceInfo`` of one part of a partitioned variable (``full_name``, ``full_shape``,
    ``var_offset``, ``var_shape``, ``spec``), or None for a whole variable."""
    return getattr(variable, "_save_slice_info", None)


def slice_infos(variables) -> list:
    """:func:`slice_info` of each of ``variables``, in one pass (a catalog of a big graph asks for all)."""
    return [getattr(variable, "_save_slice_info", None) for variable in variables]


def op_names(variables) -> list:
    """The name of each of ``variables``' ops, read off its tensor's name where that is the op's output 0
    (``'dense/w:0'``: ``'dense/w'``): ``variable.op.name`` asks TensorFlow's C layer twice a variable, 40 ms
    for 20,000 of them, where the tensor names take 10.

    op_names(graph.get_collection('variables'))
    # ['dense/w', 'dense/b']
    """
    return [name[:-2] if (name := variable.name).endswith(":0") else variable.op.name for variable in variables]


def slice_spec(variable) -> str:
    """The ``shape_and_slices`` string SaveV2/RestoreV2 take for ``variable`` ('' when whole)."""
    info = slice_info(variable)
    return info.spec if info is not None else ""


def creation_id(op) -> int:
    """A number that grows with op creation in one graph (orders local among global variables)."""
    return op._id


def collections_stamp(graph):
    """Something equal as long as ``graph``'s collections hold the same number of items, or None
    when this TensorFlow keeps them elsewhere (then callers must not cache)."""
    collections = getattr(graph, "_collections", None)
    if collections is None:
        return None
    return graph.version, tuple((key, len(items)) for key, items in collections.items())


def initialized_flag(variable):
    """The ``bool`` tensor TensorFlow built with ``variable`` that says whether it is initialized (a
    graph resource variable's ``NAME/IsInitialized/VarIsInitializedOp``, also found by that name in a
    graph imported from a MetaGraph), or None when there is none to run as it is."""
    flag = getattr(variable, "_is_initialized_op", None)
    op = getattr(flag, "op", None)
    if op is None:
        graph, name = getattr(variable, "graph", None), getattr(getattr(variable, "op", None), "name", None)
        if graph is None or name is None:
            return None
        try:
            op = graph.get_operation_by_name(name + "/IsInitialized/VarIsInitializedOp")
        except (KeyError, ValueError):
            return None
    if (op.type != "VarIsInitializedOp" or op.graph is not variable.graph or op.inputs[0].op is not variable.op
            or op.control_inputs or op._get_control_flow_context() is not None):
        return None
    return op.outputs[0]


def value_read(variable):
    """The tensor TensorFlow built with ``variable`` to read its value (a resource variable's
    ``Read/ReadVariableOp``, a reference variable's ``read`` snapshot): running it makes no op."""
    found = getattr(variable, "_graph_element", None)
    return found if found is not None else getattr(variable, "_snapshot", None)


def standalone_read(variable):
    """:func:`value_read` when it can be fed to a new op as it is (in the variable's graph, with no
    control inputs and outside any control flow), else None."""
    read = value_read(variable)
    if read is None or read.graph is not variable.graph or read.op.control_inputs \
            or read.op._get_control_flow_context() is not None:
        return None
    return read


def is_reference(tensor) -> bool:
    """Whether ``tensor`` is a reference (a ref variable's value), which an assign cannot take directly."""
    return bool(tensor.dtype._is_ref_dtype)


def mark_used(tensor) -> None:
    """Tell TensorFlow that ``tensor`` is run later on purpose (no "never evaluated" warning)."""
    getattr(tensor, "mark_used", lambda: None)()


def op_def(op_type):
    """The registered ``OpDef`` of ``op_type``, or None (TensorFlow has no public lookup)."""
    from tensorflow.python.framework import op_def_registry

    return op_def_registry.get(op_type)


def read_meta_graph_file(path):
    """TensorFlow's own reader of a ``.meta`` file (binary or text protobuf)."""
    from tensorflow.python.framework import meta_graph

    return meta_graph.read_meta_graph_file(path)


def checkpoint_management():
    """TensorFlow's module that writes the ``checkpoint`` state file (``update_checkpoint_state_internal``)."""
    from tensorflow.python.checkpoint import checkpoint_management as module

    return module


def keras_sublayers(model):
    """Every layer inside a Keras 3 ``model``, itself included, depth first."""
    return model._flatten_layers(include_self=True, recursive=True)


def distribute_strategy_of(variable):
    """The ``tf.distribute`` strategy a Keras 3 variable was created under, or None."""
    return getattr(getattr(variable, "value", None), "_distribute_strategy", None)


def saver_is_sharded(saver) -> bool:
    """Whether a ``tf.compat.v1.train.Saver`` writes one ``.data`` file per device."""
    return bool(getattr(saver, "_sharded", False))


def saver_relative_paths(saver) -> bool:
    """Whether a ``tf.compat.v1.train.Saver`` records checkpoint paths relative to its directory."""
    return saver._save_relative_paths


def saver_pads_step_number(saver) -> bool:
    """Whether a ``tf.compat.v1.train.Saver`` writes ``PREFIX-%08d`` rather than ``PREFIX-STEP``."""
    return saver._pad_step_number


def saver_record_checkpoint(saver, prefix) -> None:
    """Add ``prefix`` to the checkpoints a ``Saver`` keeps, as its own ``save`` does."""
    saver._RecordLastCheckpoint(prefix)


def saver_retire_old_checkpoints(saver, meta_graph_suffix) -> None:
    """Delete the checkpoints past the Saver's ``max_to_keep``, as its own ``save`` does."""
    saver._MaybeDeleteOldCheckpoints(meta_graph_suffix=meta_graph_suffix)
