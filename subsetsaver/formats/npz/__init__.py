"""The portable checkpoint file: a numpy ``.npz`` archive with an embedded JSON manifest.

Only the file format (no TensorFlow graph code). A file is a zip archive of uncompressed
members that ``np.load(path, allow_pickle=False)`` opens:

* one ``.npy`` member per array, named after the variable (``conv_1/w`` ->
  ``conv_1.w.npy``), data aligned to 64 bytes in the file;
* ``__subsetsaver__.json``: the manifest, written last: per array its name, member,
  shape, dtype, the dtype it is stored as, byte size and checksum (the member's CRC-32,
  or the SHA-256 of the data with ``checksum='sha256'``); the selector text and the
  library, TensorFlow, numpy and Python versions.

Dtypes numpy's ``.npy`` format cannot describe (bfloat16, float8, int4) are stored as
raw unsigned bytes of the same width, the true dtype in the manifest; :func:`read`
gives them back typed. String and object arrays are refused (:class:`UnsupportedDtypeError`).
Reading validates everything before it allocates or returns anything and never unpickles;
writes are atomic and durable (:mod:`subsetsaver.storage`).

Modules, each importing only those above it:

- ``format``: constants, dtypes, :class:`ArrayEntry`, :class:`Manifest`, member names,
  ``.npy`` headers, the manifest's JSON schema;
- ``zip_writer``: the streaming zip writer, blocks of small arrays included;
- ``writer``: :func:`write`, :func:`prepare`, :func:`prepare_rows`;
- ``sources``: the bytes of a file being read (local, or remote in memory);
- ``rows``: gathering many small arrays into the rows of one buffer;
- ``parallel_read``: large arrays read by several threads in chunks, CRC-32s joined;
- ``reader``: :class:`Archive`, :func:`read`, :func:`read_manifest`, :func:`verify`;
- ``state``: ``checkpoint_npz.json``, the state file of a directory of portable checkpoints
  (the latest file, the kept ones): :func:`read_state`, :func:`write_state`;
- ``checkpoint_format``: the format's entry in the registry, :data:`NPZ`.

Buffers come from :mod:`subsetsaver.formats.memory` (aligned, recycled), re-exported here.

Example::

    from subsetsaver.formats import npz
    npz.write('/ckpt/model.npz', {'conv_1/w': w, 'opt/beta1_power': b1}, selector='everything()')
    manifest, arrays = npz.read('/ckpt/model.npz')
    manifest.entry('conv_1/w').shape, arrays['conv_1/w'].dtype
    # ((5, 5, 1, 32), dtype('float32'))
"""

from ...errors import UnsupportedDtypeError
from ...lazy_exports import exports, names
from ...storage import finish_background_work
from ..memory import ALIGNMENT, aligned_bytes, evict_oldest, free_idle_buffers, recycled_bytes, reused_bytes

__getattr__, __dir__ = exports(__name__, {
    **names(".format", "CHECKSUMS", "DEFAULT_CHECKSUM", "FORMAT", "FORMAT_VERSION", "MANIFEST_MEMBER", "STORED_AS",
            "ArrayEntry", "Manifest", "entry_spec", "name_problem", "numpy_dtype"),
    **names(".reader", "Archive", "read", "read_manifest", "verify"),
    **names(".writer", "PreparedArray", "PreparedRows", "prepare", "prepare_rows", "write"),
    **names(".state", "STATE_FILENAME", "STATE_FORMAT", "NpzState", "is_bare_name", "read_state", "write_state"),
    **names(".checkpoint_format", "NPZ"),
})

__all__ = [
    "name_problem",
    "ALIGNMENT",
    "CHECKSUMS",
    "DEFAULT_CHECKSUM",
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST_MEMBER",
    "NPZ",
    "NpzState",
    "STATE_FILENAME",
    "STATE_FORMAT",
    "STORED_AS",
    "ArrayEntry",
    "Manifest",
    "Archive",
    "PreparedArray",
    "PreparedRows",
    "UnsupportedDtypeError",
    "aligned_bytes",
    "entry_spec",
    "evict_oldest",
    "finish_background_work",
    "free_idle_buffers",
    "is_bare_name",
    "numpy_dtype",
    "prepare",
    "prepare_rows",
    "read",
    "read_manifest",
    "read_state",
    "recycled_bytes",
    "reused_bytes",
    "verify",
    "write",
    "write_state",
]
