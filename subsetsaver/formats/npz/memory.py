"""Memory the reader hands out and keeps: 64-byte aligned buffers and small bounded caches.

Example::

    >>> buffer = aligned_bytes(4096)             # uint8, data address a multiple of ALIGNMENT
    >>> cache['key'] = value; evict_oldest(cache, keep=8)
"""

from __future__ import annotations

import threading

from .format import ALIGNMENT

_cache_lock = threading.Lock()


def aligned_bytes(count):
    """An uninitialized uint8 array of ``count`` bytes whose data is ALIGNMENT-aligned."""
    import numpy as np

    raw = np.empty(count + ALIGNMENT, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGNMENT
    return raw[start:start + count]


def evict_oldest(cache, keep=8):
    """Drop the oldest entries of a small insertion-ordered cache (safe from several threads)."""
    with _cache_lock:
        while len(cache) > keep:
            cache.pop(next(iter(cache)), None)
