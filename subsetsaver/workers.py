"""The one place the library starts worker threads: bounded pools, one per purpose.

A shared pool (:func:`shared_pool`) is named, has a fixed number of threads and starts on first
use; it lives as long as the process, so however much a command reads or writes, the threads it
runs are bounded by the pools' sizes (the memory tests count on it). Work that needs threads for
one call only takes a :func:`scoped_pool`, shut down when its block ends; a save that outlives
its caller runs on a :func:`thread` of its own; a request its caller may give up on, on a :func:`detached` one.
:func:`ahead` makes a stream's next items on a thread of their own while its caller works on earlier ones.

Example::

    crc = shared_pool("subsetsaver-crc32c", 1).submit(zlib.crc32, data)
    with scoped_pool(2) as pool:
        hashed = list(pool.map(hashlib.sha256, pieces))
    for name, array in ahead(read_tensors(), sizes, "subsetsaver-read", budget=64 << 20): ...
"""

from __future__ import annotations

import collections
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
    """Start ``target()`` on a daemon thread of its own, for a request its caller may stop waiting for (a bucket's,
    past its retry budget): the interpreter does not wait for it at exit, and the client's own time-outs end it."""
    started_thread = threading.Thread(target=target, name=name, daemon=True)
    started_thread.start()
    return started_thread


_slots = {}  # name -> the slot of the one stream of ahead() made ahead under it
_END = object()


class _Failed:
    """An error met ahead of the caller, raised when its turn comes."""

    def __init__(self, error):
        self.error = error


def ahead_slot(name) -> threading.BoundedSemaphore:
    """The slot of the one stream of :func:`ahead` called ``name`` made ahead at a time (free when none is)."""
    with _lock:
        return _slots.setdefault(name, threading.BoundedSemaphore(1))


def ahead(items, sizes, name, *, budget, most_items=None, at_least_one=True):
    """Yield what the iterator ``items`` yields (each item's bytes in ``sizes``, in order), each made on a thread
    called ``name`` while the caller has earlier ones: more while the items ahead hold no more than ``budget``
    bytes, and number no more than ``most_items`` (None: any). With nothing ahead, the next item is made
    whatever its size with ``at_least_one``; else one over ``budget`` waits until the caller asks for it. One
    stream of a ``name`` is made ahead at a time: while one is, another's items are made on its caller's
    thread. An error comes in its turn; leaving early stops the thread, gives the slot back and closes
    ``items``. The thread is a daemon: a stream its caller never closed does not keep the process from exiting.

    >>> list(ahead(iter('abc'), [1, 1, 1], 'subsetsaver-example', budget=1))
    ['a', 'b', 'c']
    """
    iterator, sizes = iter(items), list(sizes)
    slot = ahead_slot(name)
    if not slot.acquire(blocking=False):
        yield from iterator
        return
    taken = threading.Condition()
    made, held, state = collections.deque(), [0], {"stopped": False, "asked": False}

    def may_make(size):
        if state["stopped"]:
            return True
        if not made:
            return at_least_one or size <= budget or state["asked"]
        return held[0] + size <= budget and (most_items is None or len(made) < most_items)

    def make_ahead():  # on its own thread, until the iterator ends or fails
        remaining = iter(sizes)
        while True:
            size = next(remaining, 0)
            with taken:
                taken.wait_for(lambda size=size: may_make(size))
                if state["stopped"]:
                    return
            try:
                item = next(iterator, _END)
            except BaseException as error:  # noqa: BLE001 - handed to the caller, in its turn
                item = _Failed(error)
            with taken:
                made.append((item, size))
                held[0] += size
                taken.notify_all()
            if item is _END or isinstance(item, _Failed):
                return

    making = None
    try:
        making = detached(make_ahead, name)
        while True:
            with taken:
                state["asked"] = True
                taken.notify_all()
                taken.wait_for(lambda: made)
                item, size = made.popleft()
                held[0] -= size  # the caller's now
                state["asked"] = False
                taken.notify_all()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item
            del item  # the caller's alone
    finally:
        with taken:
            state["stopped"] = True
            taken.notify_all()
        if making is not None:
            making.join()  # what it reads stays open until it is done with it
        slot.release()
        if hasattr(iterator, "close"):
            iterator.close()  # what it has in flight is cancelled now, not when it is collected
