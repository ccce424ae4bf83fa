"""The file-tools room: whole checkpoints in, new checkpoints out, no graph needed.

``slim`` writes a checkpoint with only the tensors a selector keeps; ``convert`` turns a
TensorFlow checkpoint into a portable ``.npz`` or ``.safetensors`` file and back;
``rewrite`` renames, drops and casts; ``diff`` compares two checkpoints (or a live
session) tensor by tensor; ``average`` writes the mean of several. What they write goes
through the one writer (:mod:`subsetsaver.formats.checkpoint_writer`): checked, locked,
streamed, verified tensor by tensor and published atomically.

This room imports ``catalog``, ``selectors``, ``formats``, ``planning`` (the scratch-graph
writer in ``restore_ops``) and ``errors``.

Example::

    from subsetsaver.tools import convert, slim
    slim.slim('train/model-9000', '~slots()', 'serve/model').ratio
    # 3.0
"""

from ..lazy_exports import exports

__getattr__, __dir__ = exports(__name__, {module: (f".{module}", None) for module in ("average", "convert", "diff",
                                                                                       "rewrite", "slim")})

__all__ = ["average", "convert", "diff", "rewrite", "slim"]
