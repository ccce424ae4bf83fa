"""The one place the library starts worker threads: bounded pools, one per purpose.

A shared pool (:func:`shared_pool`) is named, has a fixed number of threads and starts on first
use; it lives as long as the process, so however much a command reads or writes, the threads it
runs are bounded by the pools' sizes (the memory tests count on it). Work that needs threads for
one call only takes a :func:`scoped_pool`, shut down when its block ends; a save that outlives
its caller runs on a :func:`thread` of its own; a request its caller may give up on, on a :func:`detached` one.

Example::

    crc = shared_pool("subsetsaver-crc32c", 1).submit(zlib.crc32, data)
    with scoped_pool(2) as pool:
        hashed = list(pool.map(hashlib.sha256, pieces))
"""

from __future__ import annotations

import concurrent.futures
import threading

_pools = {}  # name -> its shared pool
_lock = threading.Lock()


def shared_pool(name, threads) -> concurrent.futures.ThreadPoolExecutor:
    """The process's pool called ``name`` (its threads ``NAME_0``, ...), with ``threads`` threads, started
    on first use; the same pool on every call."""
    with _lock:
        if name not in _pools:
            _pools[name] = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix=name)
        return _pools[name]


def started(name) -> concurrent.futures.ThreadPoolExecutor | None:
    """The shared pool called ``name`` if it has started, else None (to wait for its work without starting it)."""
    with _lock:
        return _pools.get(name)


def scoped_pool(threads, name="subsetsaver-call") -> concurrent.futures.ThreadPoolExecutor:
    """A pool of ``threads`` threads for one block: ``with scoped_pool(2) as pool:``; its threads end with it."""
    return concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix=name)


def thread(target, name) -> threading.Thread:
    """Start ``target()`` on a thread of its own that the interpreter waits for at exit (a save under way)."""
    started_thread = threading.Thread(target=target, name=name, daemon=False)
    started_thread.start()
    return started_thread


def detached(target, name) -> threading.Thread:
    """Start ``target()`` on a daemon thread of its own, for work the interpreter must not wait for at exit: a
    request its caller may stop waiting for (a bucket's, past its retry budget; the client's own time-outs end
    it), or a reader's read-ahead, which waits for a caller who may never close it."""
    started_thread = threading.Thread(target=target, name=name, daemon=True)
    started_thread.start()
    return started_thread
