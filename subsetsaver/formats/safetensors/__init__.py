"""safetensors files: the codec (``codec``) and its entry in the format registry (``SAFETENSORS``), and
checkpoints sharded over several of them with an index (``sharded``: ``SHARDED_SAFETENSORS``).

Example::

    from subsetsaver.formats import safetensors
    safetensors.write('out/model.safetensors', [('w', w)], specs=[('w', (2, 3), 'float32')])
    safetensors.specs('out/model.safetensors')[0]
    # {'w': ((2, 3), 'float32')}
"""

from ...lazy_exports import exports, names

__getattr__, __dir__ = exports(__name__, {
    **names(".codec", "CODES", "DTYPES", "ITEM_BYTES", "MAX_HEADER_BYTES", "SUFFIX", "header", "name_problem", "read",
            "specs", "write"),
    **names(".checkpoint_format", "SAFETENSORS"),
    **names(".sharded", "INDEX_NAME", "SHARDED_SAFETENSORS", "parse_size", "plan_shards", "sharded"),
})

__all__ = ["CODES", "DTYPES", "INDEX_NAME", "ITEM_BYTES", "MAX_HEADER_BYTES", "SAFETENSORS", "SHARDED_SAFETENSORS", "SUFFIX",
           "header", "name_problem", "parse_size", "plan_shards", "read", "sharded", "specs", "write"]
