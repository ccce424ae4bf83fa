"""Wire-level code the checkpoint formats share.

- ``crc32c``: CRC32C (Castagnoli) and TensorFlow's masked form, for tensor bundles, the one
  writer's read-back checks and safetensors;
- ``protobuf``: the protocol-buffer wire format, read and written by hand from schemas.

Example::

    from subsetsaver.formats.wire.crc32c import crc32c
    crc32c(b'123456789') == 0xE3069283
    # True
"""

__all__ = ["crc32c", "protobuf"]
