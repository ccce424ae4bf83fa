"""TensorFlow's checkpoint files (tensor bundles, the V2 format), read and written without TensorFlow.

A checkpoint ``PREFIX`` is ``PREFIX.index``, a table of one BundleEntryProto per tensor
(dtype, shape, data file, offset, size, checksum) after a BundleHeaderProto, and
``PREFIX.data-0000K-of-0000N``, the tensors' bytes. Reading checks everything about the
files before it returns a value, and each value against its checksum; writing gives the
bytes TensorFlow's SaveV2 writes, atomically and durably.

Modules, each importing only those above it:

- ``problems``: the wording of every refusal;
- ``proto``: the bundle's message schemas (the wire format and masked CRC32C are
  :mod:`subsetsaver.formats.wire`'s);
- ``table``: the ``.index`` table format (LevelDB's SSTable), read and built;
- ``dtypes``: TensorFlow's DataType enum and numpy's dtypes;
- ``slices``: keys and geometry of the parts of partitioned variables;
- ``files``: the files of a prefix (its ``.index`` and data shards), and their shard counts;
- reading files at an offset goes through :mod:`subsetsaver.storage`;
- ``index``: the parsed and checked index, :class:`TensorSpec`;
- ``reader``: :class:`BundleReader`;  ``writer``: :class:`BundleWriter`, :func:`write`.

Example::

    from subsetsaver.formats.tf import bundle
    bundle.write('/ckpt/model', {'dense/w': w, 'dense/b': b})
    # '/ckpt/model'
    with bundle.BundleReader('/ckpt/model') as reader:
        reader.names, reader.spec('dense/w').dtype, reader.read('dense/b').shape
    # (('dense/b', 'dense/w'), 'float32', (10,))
"""

from ....lazy_exports import exports, names
from . import dtypes
from .index import FormatVersion, TensorSpec, data_path, index_path
from .reader import BundleReader

__getattr__, __dir__ = exports(__name__, {
    **names(".files", "bundle_files", "checkpoint_bytes", "data_files"),
    **names(".table", "build_table"),
    **names(".writer", "BundleWriter", "publish_staged", "shard_count_for", "write"),
})

__all__ = ["BundleReader", "BundleWriter", "FormatVersion", "TensorSpec", "build_table", "bundle_files", "checkpoint_bytes",
           "data_files", "data_path", "dtypes", "index_path", "publish_staged", "shard_count_for", "write"]
