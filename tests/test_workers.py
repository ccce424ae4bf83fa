"""The one place worker threads start (subsetsaver/workers.py): named, bounded pools, and streams made ahead."""

import itertools
import threading
import time
import uuid

import pytest

from subsetsaver import workers


def _threads_named(prefix):
    return sorted(thread.name for thread in threading.enumerate() if thread.name.startswith(prefix))


def test_a_shared_pool_is_started_once_and_never_runs_more_threads_than_it_has():
    name = f"test-{uuid.uuid4().hex[:8]}"
    assert workers.started(name) is None
    pool = workers.shared_pool(name, 2)
    assert workers.shared_pool(name, 2) is pool and workers.started(name) is pool
    release = threading.Event()
    futures = [pool.submit(release.wait, 10) for _ in range(6)]
    assert _threads_named(name) == [f"{name}_0", f"{name}_1"]
    release.set()
    assert [future.result() for future in futures] == [True] * 6


def test_a_scoped_pool_s_threads_end_with_its_block():
    with workers.scoped_pool(3, "test-scoped") as pool:
        assert sorted(pool.map(abs, [-1, -2, -3])) == [1, 2, 3]
    assert _threads_named("test-scoped") == []


def test_a_thread_of_its_own_runs_its_target():
    done = []
    workers.thread(lambda: done.append(threading.current_thread().name), "test-own").join(10)
    assert done == ["test-own"]


class WatchedAhead:
    """A stream made ahead (``start(items)``) over items ``0, 1, ...`` of ``sizes``: which items the thread has
    pulled so far, and the caller's takes, each on a thread of its own, so a stream made ahead that waits for
    ever fails a test, not hangs it."""

    def __init__(self, sizes, start):
        self.pulled = []
        self.read = start(self._items(len(sizes)))

    def _items(self, count):
        for number in range(count):
            self.pulled.append(number)
            yield number

    def settled(self, count):
        """What was pulled once ``count`` items are, and a moment more to pull further, were it allowed to."""
        deadline = time.monotonic() + 10
        while len(self.pulled) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        return list(self.pulled)

    def take(self, count):
        got = []
        taker = threading.Thread(target=lambda: got.extend(itertools.islice(self.read, count)), daemon=True)
        taker.start()
        taker.join(10)
        return got


def _ahead(sizes, **caps):
    name = f"test-ahead-{uuid.uuid4().hex[:8]}"
    return WatchedAhead(sizes, lambda items: workers.ahead(items, sizes, name, **caps)), name


def test_a_stream_is_made_ahead_up_to_its_count_and_its_bytes():
    watched, name = _ahead([1, 1, 1, 1, 1, 5, 1], budget=4, most_items=2, at_least_one=False)
    assert watched.take(1) == [0]
    assert watched.settled(3) == [0, 1, 2]  # two ahead: the count, not the bytes (1 + 1 of 4)
    assert watched.take(3) == [1, 2, 3]
    assert watched.settled(5) == [0, 1, 2, 3, 4]  # the 1 ahead; the 5 after it is over the budget
    assert watched.take(1) == [4]
    assert watched.settled(5) == [0, 1, 2, 3, 4]  # nothing ahead, but the 5 is made only when asked for
    assert watched.take(1) == [5]
    assert watched.take(2) == [6]
    assert workers.ahead_slot(name).acquire(blocking=False)  # given back at the end


def test_with_at_least_one_an_item_over_the_budget_is_made_ahead_when_nothing_else_is():
    watched, _ = _ahead([1, 5, 1], budget=2)
    assert watched.take(1) == [0]
    assert watched.settled(2) == [0, 1]  # the 5 is made while the caller has the 1 before it
    assert watched.take(2) == [1, 2]


def test_an_error_ahead_comes_in_its_turn_and_leaving_early_gives_the_slot_back():
    name = f"test-ahead-{uuid.uuid4().hex[:8]}"

    def failing():
        yield "first"
        raise ValueError("the second item failed")

    made = workers.ahead(failing(), [1, 1], name, budget=2)
    assert next(made) == "first"
    with pytest.raises(ValueError, match="the second item failed"):
        next(made)
    assert workers.ahead_slot(name).acquire(blocking=False)
    workers.ahead_slot(name).release()
    closed = []

    def endless():
        try:
            yield from itertools.count()
        finally:
            closed.append(True)

    left = workers.ahead(endless(), [1] * 100, name, budget=2)
    assert next(left) == 0
    left.close()
    assert closed == [True] and workers.ahead_slot(name).acquire(blocking=False)


def test_a_second_stream_beside_one_made_ahead_is_made_in_turn_on_its_callers_thread():
    name = f"test-ahead-{uuid.uuid4().hex[:8]}"

    def named(count, threads):
        for number in range(count):
            threads.append(threading.current_thread().name)
            yield number

    made_first, made_second = [], []
    first = workers.ahead(named(3, made_first), [1] * 3, name, budget=2)
    assert next(first) == 0
    second = workers.ahead(named(2, made_second), [1] * 2, name, budget=2)
    assert list(second) == [0, 1] and made_second == [threading.current_thread().name] * 2
    assert list(first) == [1, 2] and set(made_first) == {name}


def test_a_stream_made_ahead_that_its_caller_never_closed_does_not_keep_the_process_from_exiting():
    import subprocess
    import sys

    code = ("import itertools\nfrom subsetsaver import workers\n"
            "kept = workers.ahead(itertools.count(), [1] * 10, 'subsetsaver-exit', budget=1, most_items=1)\n"
            "print(next(kept))\n")  # the thread has one ahead and waits; 'kept' is never closed
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout, done.stderr) == (0, "0\n", "")
