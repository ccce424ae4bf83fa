"""Memory the reader hands out and keeps: 64-byte aligned buffers, recycled restore buffers and
small bounded caches.

A restore feeds its buffers to TensorFlow, whose variables then keep them as their own
memory; the next restore's values replace them and TensorFlow lets the old ones go.
:func:`recycled_bytes` takes such a buffer back for the next restore of the same size
instead of unmapping it, as TensorFlow's own allocator keeps the memory its Saver frees:
memory faulted in afresh costs far more than reading the file on a virtual machine that
hands freed memory back to its host. Idle buffers are marked free to the kernel, which
takes their pages when it needs memory; :data:`IDLE_PER_SIZE` of one size and
:data:`IDLE_BUFFERS` in all are kept, and :func:`free_idle_buffers` unmaps them. A file command's
tensors of a few MiB (:func:`reused_bytes`) go back to a pool of their own, bounded in bytes.

Example::

    buffer = aligned_bytes(4096)             # uint8, data address a multiple of ALIGNMENT
    feed = recycled_bytes(1 << 30)           # a mapping freed by an earlier restore, if one is idle
    raw = reused_bytes(64 << 20)             # the same for a tensor read or made, sizes rounded to share
    cache['key'] = value; evict_oldest(cache, keep=8)
"""

from __future__ import annotations

import functools
import mmap
import threading

ALIGNMENT = 64  # bytes: every buffer handed out, and the data of every member of a .npz file
_cache_lock = threading.Lock()
_OWN_MAPPING_FROM = 2 << 20  # buffers this big get their own mapping, in small pages


def aligned_bytes(count):
    """An uninitialized uint8 array of ``count`` bytes whose data is ALIGNMENT-aligned.

    Large buffers are an anonymous mapping of their own, in normal pages: numpy asks for
    transparent huge pages, and on a virtual machine that has handed freed memory back to
    its host a huge page takes far longer to fault in (1.2-2.2 s per GiB, against 0.4-0.6 s
    in small pages, measured a few seconds after freeing). The mapping is unmapped when the
    last array using it is dropped.
    """
    import numpy as np

    if count >= _OWN_MAPPING_FROM and hasattr(mmap, "MAP_ANONYMOUS"):
        return np.frombuffer(_mapping(count), dtype=np.uint8)  # page-aligned, writable; keeps the mapping
    raw = np.empty(count + ALIGNMENT, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGNMENT
    return raw[start:start + count]


IDLE_PER_SIZE = 2  # idle buffers kept of one size: the variables hold one, the next restore reads into another
IDLE_BUFFERS = 4  # idle buffers kept in all, the oldest unmapped first
_idle = []  # idle mappings, oldest first
_idle_lock = threading.Lock()


def _mapping(count):
    """An anonymous, page-aligned mapping of ``count`` bytes in small pages (see :func:`aligned_bytes`)."""
    mapping = mmap.mmap(-1, count, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        mapping.madvise(mmap.MADV_NOHUGEPAGE)
    return mapping


def recycled_bytes(count, *, make_room=False):
    """An uninitialized, page-aligned uint8 array of ``count`` bytes, whose memory goes back to the
    idle buffers when the array and every view of it are dropped (by TensorFlow too), for the next
    call of the same size. Small sizes, and systems without anonymous mappings, get :func:`aligned_bytes`.
    With ``make_room``, a call that finds no idle buffer of its size first unmaps the idle ones smaller
    than it (see :func:`reused_bytes`)."""
    if count < _OWN_MAPPING_FROM or not hasattr(mmap, "MAP_ANONYMOUS"):
        return aligned_bytes(count)
    with _idle_lock:
        mapping = _taken(_idle, count)
        if mapping is None and make_room:
            _idle[:] = [idle for idle in _idle if len(idle) > count]
    return _recycled(_mapping(count) if mapping is None else mapping, _keep_idle)


def _taken(idle, size):
    """The newest mapping of ``size`` in the list ``idle`` (its pages the likeliest kept), taken out of it; None
    when there is none. The caller holds ``_idle_lock``."""
    same = [number for number, mapping in enumerate(idle) if len(mapping) == size]
    return idle.pop(same[-1]) if same else None


def _recycled(mapping, keep):
    """A uint8 array over ``mapping`` that hands it to ``keep`` (:func:`_keep_idle`, :func:`_keep_mid`) once it and
    every view of it are dropped."""
    import numpy as np

    buffer = np.frombuffer(mapping, dtype=np.uint8).view(_recycled_type())
    buffer._mapping, buffer._keep = mapping, keep  # the root alone holds them; every view keeps the root alive
    return buffer


_MID_FROM = 256 << 10  # tensors this large are made in memory reused across calls
_REUSED_FROM = 8 << 20  # ... and this large, in the restore buffers' memory (marked free to the kernel while idle)
IDLE_MID_BYTES = 32 << 20  # idle mid-size buffers kept, in bytes: about what a read-ahead holds
_idle_mid = []  # idle mid-size mappings, oldest first (guarded by _idle_lock)


def reused_bytes(nbytes):
    """An uninitialized uint8 array of ``nbytes`` to fill with a tensor: one of 256 KiB or more in memory that goes
    back to be reused for a later tensor of a similar size once every view of it is dropped (memory
    faulted in afresh costs more than reading the file from the page cache). A tensor of 8 MiB or more that
    needs fresh memory first gives back the idle buffers smaller than itself, which stay resident until the kernel
    wants them: a file command's peak stays about its largest tensor plus what it works on, not that
    plus the buffers of the sizes it read before.

    Below 8 MiB a buffer goes back to a pool of its own (:data:`IDLE_MID_BYTES` kept, not marked free): a
    conversion reads, transposes and lets go of hundreds of them a second, and a new mapping's pages are
    each cleared when first touched, while marking or unmapping one flushes every core's address cache. A
    bucket's T5 conversion here (``bench/bench_remote_layouts.py``'s) took 63,000 page faults instead of
    70,000 and 0.07 s less CPU time (of 1.06 s), 12 runs against the code before.

    raw = reused_bytes(64 << 20)      # an idle buffer of 64 MiB to 68 MiB, if one is kept
    """
    import numpy as np

    if nbytes < _MID_FROM:
        return np.empty(nbytes, dtype=np.uint8)
    step = 1 << max(nbytes.bit_length() - 4, 12)  # sizes rounded up by less than an eighth share buffers
    size = -(-nbytes // step) * step
    buffer = _mid_bytes(size) if size < _REUSED_FROM else recycled_bytes(size, make_room=True)
    return buffer[:nbytes].view(np.ndarray)


def _mid_bytes(size):
    """A page-aligned uint8 array of ``size`` bytes whose mapping joins the idle mid-size buffers when it is dropped
    (:func:`aligned_bytes` where the system has no anonymous mappings)."""
    if not hasattr(mmap, "MAP_ANONYMOUS"):
        return aligned_bytes(size)
    with _idle_lock:
        mapping = _taken(_idle_mid, size)
    return _recycled(_mapping(size) if mapping is None else mapping, _keep_mid)


@functools.cache
def _recycled_type():
    import numpy as np

    class RecycledBytes(np.ndarray):
        """An array from :func:`_recycled`: when the root goes, its mapping becomes idle."""

        def __del__(self):
            mapping = self.__dict__.get("_mapping")
            if mapping is not None:
                self.__dict__["_keep"](mapping)

    return RecycledBytes


def _keep_idle(mapping):
    if hasattr(mmap, "MADV_FREE"):  # the kernel may take the pages whenever it needs memory
        mapping.madvise(mmap.MADV_FREE)
    with _idle_lock:
        _idle.append(mapping)
        same = [i for i, idle in enumerate(_idle) if len(idle) == len(mapping)]
        if len(same) > IDLE_PER_SIZE:
            del _idle[same[0]]
        del _idle[:-IDLE_BUFFERS]


def _keep_mid(mapping):
    """Keep a mid-size buffer's mapping idle, as it is (a buffer reused within milliseconds is not worth
    marking), the oldest unmapped past :data:`IDLE_MID_BYTES`."""
    with _idle_lock:
        _idle_mid.append(mapping)
        while sum(len(idle) for idle in _idle_mid) > IDLE_MID_BYTES:
            del _idle_mid[0]


def free_idle_buffers() -> int:
    """Unmap every idle restore buffer and mid-size buffer; returns the bytes given back."""
    with _idle_lock:
        mappings = _idle + _idle_mid
        _idle.clear()
        _idle_mid.clear()
    return sum(len(mapping) for mapping in mappings)


def evict_oldest(cache, keep=8):
    """Drop the oldest entries of a small insertion-ordered cache (safe from several threads)."""
    with _cache_lock:
        while len(cache) > keep:
            cache.pop(next(iter(cache)), None)
