"""The one place worker threads start (subsetsaver/workers.py): named, bounded pools."""

import threading
import uuid

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
