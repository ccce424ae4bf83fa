"""``convert(checkpoint, out_dir, map=NAME)``: a model family's checkpoint into another library's layout,
without TensorFlow.

The source is read with the project's own readers (a TensorFlow checkpoint prefix or
directory, or a Hugging Face directory or ``.safetensors`` file); its family config is found
beside it (or given). Everything is checked first (the map, the family, every tensor's rule and
shape, the config's keys); only then are tensors streamed through the map into ``out_dir``:
``model.safetensors`` and ``config.json`` for a Hugging Face layout, a ``model.ckpt`` prefix (named
latest) and the family's config for a TensorFlow one.

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
from ..errors import LayoutMapError
from ..formats import safetensors
from ..selectors import parse
from .configs import config_bytes, find_config, map_config, read_config
from .engine import plan_conversion
from .maps import load_map
from .output import TensorStream, nbytes, write_safetensors, write_tf_checkpoint

SAFETENSORS_FILE = "model.safetensors"
TF_PREFIX = "model.ckpt"


@dataclasses.dataclass(frozen=True)
class LayoutReport:
    """What :func:`convert` did (or, with ``dry_run``, would do).

    ``rows``: (source name, target name, transform, shape) per target tensor; ``dropped``: source names
    left out by the map's ``drop``; ``files``: what was written (empty for a dry run).
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


def convert(checkpoint, out_dir, map, config=None, *, dry_run=False, overwrite=False) -> LayoutReport:  # noqa: A002
    """Convert ``checkpoint`` into ``out_dir`` by the layout map ``map`` (a shipped name such as
    ``bert-to-hf``, or a map file's path); ``config``: the family's config file when it is not beside
    the checkpoint. Raises :class:`~subsetsaver.errors.LayoutMapError` before writing anything when the
    map, the checkpoint or the config does not fit.

    convert("gpt2/model.ckpt", "gpt2-hf", map="gpt2-to-hf").rows[0]
    # ('model/h0/attn/c_attn/b', 'h.0.attn.c_attn.bias', '', (2304,))
    """
    layout = load_map(map)
    source = _source_path(layout, checkpoint)
    catalog = catalog_module.file_catalog(source)
    specs = {name: (tuple(catalog.entry(name).shape), catalog.entry(name).dtype) for name in catalog.ordered_names}
    dropped = parse(layout.drop).names(catalog, allow_empty=True) if layout.drop else []
    plan = plan_conversion(layout, specs, dropped)
    config_path = find_config(checkpoint, layout.source["config"], config)
    if config_path is None:
        raise LayoutMapError(f"no {layout.source['config']} beside '{checkpoint}'",
                             fix=f"give the {layout.family} config file with --config FILE (config= in Python)")
    target_config = map_config(layout.config, read_config(config_path), source_name=f"config '{config_path}'")
    out_dir = os.fspath(out_dir)
    rows = tuple(plan.rows())
    size = sum(nbytes(shape, dtype) for shape, dtype in plan.specs.values())
    if dry_run:
        return LayoutReport(map=layout.name, source=source, out_dir=out_dir, config=config_path, rows=rows,
                            dropped=plan.dropped, files=(), nbytes=size, dry_run=True)
    config_file = os.path.join(out_dir, layout.target["config"])
    weights = os.path.join(out_dir, SAFETENSORS_FILE if layout.target_layout == "safetensors" else TF_PREFIX)
    _prepare(out_dir, [config_file, weights if layout.target_layout == "safetensors" else weights + ".index"],
             overwrite)
    stream = TensorStream(plan.specs, plan.stream(catalog_module.read_tensors(source, plan.source_names)))
    if layout.target_layout == "safetensors":
        write_safetensors(weights, stream, layout.target.get("metadata"), overwrite=overwrite)
    else:
        write_tf_checkpoint(weights, stream, overwrite=overwrite)
    storage.write_bytes(config_file, config_bytes(target_config))
    return LayoutReport(map=layout.name, source=source, out_dir=out_dir, config=config_path, rows=rows,
                        dropped=plan.dropped, files=(weights, config_file), nbytes=size, dry_run=False)


def _source_path(layout, checkpoint):
    checkpoint = os.fspath(checkpoint)
    if layout.source_layout == "safetensors":
        path = os.path.join(checkpoint, SAFETENSORS_FILE) if os.path.isdir(checkpoint) else checkpoint
        if not path.endswith(safetensors.SUFFIX) or not os.path.isfile(path):
            raise LayoutMapError(f"map '{layout.name}' reads a Hugging Face directory or .safetensors file; "
                                 f"'{checkpoint}' is neither",
                                 fix=f"name a directory holding {SAFETENSORS_FILE}, or the file itself")
        return path
    if catalog_module.file_format(checkpoint) != "name":
        raise LayoutMapError(f"map '{layout.name}' reads a TensorFlow checkpoint; '{checkpoint}' is a "
                             f"{catalog_module.file_format(checkpoint)} file",
                             fix="name the checkpoint's prefix (model.ckpt for model.ckpt.index) or its directory")
    return catalog_module.checkpoint_prefix(checkpoint)


def _prepare(out_dir, files, overwrite):
    existing = [path for path in files if storage.exists(path)]
    if existing and not overwrite:
        raise LayoutMapError(f"'{existing[0]}' exists", fix="choose an empty OUT_DIR, or pass --force "
                             "(overwrite=True in Python) to replace it")
    if storage.exists(out_dir) and not storage.is_directory(out_dir):
        raise LayoutMapError(f"OUT_DIR '{out_dir}' is a file", fix="name a directory (new or existing)")
