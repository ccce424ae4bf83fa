"""storage/remote.py against memory://, fake-gcs-server (gs://) and moto's S3 server (s3://)."""

import contextlib
import json
import os
import random
import subprocess
import sys
import textwrap
import time

import numpy as np
import object_servers
import pytest

from subsetsaver.errors import CheckpointWriteError, CorruptCheckpointError, RemoteStorageError
from subsetsaver.storage import remote as remote_storage
from subsetsaver.storage import remote_ranges
from subsetsaver.storage.remote import LOCK_NAME, RemoteStorage
from subsetsaver.storage.remote_errors import CREDENTIALS
from subsetsaver.storage.remote_ranges import PART_BYTES, merge_ranges

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20


def pattern(size, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


def storage_for(place):
    return RemoteStorage(place.protocol)


def write(storage, url, data, chunk=3 * MiB):
    with storage.replacing(url) as sink:
        for start in range(0, len(data), chunk):
            sink.write(memoryview(data)[start:start + chunk])


def test_a_written_object_reads_back_exactly(object_store):
    storage = storage_for(object_store)
    data = pattern(20 * MiB + 7)
    url = object_store.url("model.data-00000-of-00001")
    with storage.replacing(url) as sink:
        sink.write(data[:5])
        sink.write(np.frombuffer(data, dtype=np.uint8)[5:MiB])  # numpy arrays are buffers too
        sink.write(memoryview(data)[MiB:])
    write(storage, object_store.url("model.index"), b"index")

    assert storage.exists(url) and storage.size(url) == len(data)
    assert storage.read_bytes(url) == data
    assert storage.read_bytes(url, 10) == data[:10]
    assert storage.read_bytes(object_store.url("model.index"), 4096) == b"index"
    assert storage.is_directory(object_store.url()) and not storage.is_directory(url)
    assert storage.list_directory(object_store.url()) == ["model.data-00000-of-00001", "model.index"]
    assert storage.can_rename is False


def test_an_empty_object_reads_as_no_bytes_whole_or_from_its_start(object_store):
    storage = storage_for(object_store)
    url = object_store.url("checkpoint")
    write(storage, url, b"")
    assert (storage.size(url), storage.read_bytes(url), storage.read_bytes(url, 4096)) == (0, b"", b"")


def test_ranges_come_back_in_the_order_given(object_store):
    storage = storage_for(object_store)
    data = pattern(3 * PART_BYTES + 123, seed=1)
    url = object_store.url("blob")
    write(storage, url, data)
    ranges = [(0, 0), (100, 7), (107, 50), (5, 10), (PART_BYTES - 3, 2 * PART_BYTES + 9), (len(data) - 1, 1),
              (50, 100), (len(data), 0)]

    got = [bytes(view) for view in storage.read_ranges(url, ranges)]
    buffers = [np.full(length, 7, dtype=np.uint8) for _, length in ranges]
    handed = list(storage.read_ranges(url, ranges, into=buffers))  # long ranges land in their buffers directly

    assert got == [data[offset:offset + length] for offset, length in ranges]
    assert [buffer.tobytes() for buffer in buffers] == got
    assert all(np.shares_memory(np.asarray(item), buffer) for item, buffer in zip(handed, buffers) if len(buffer))
    assert_buffers_made_as_bytes_arrive(storage, url, ranges, got)


def assert_buffers_made_as_bytes_arrive(storage, url, ranges, got):
    """Read ``ranges`` again with a function per range in ``into=``: each buffer is made once, only when asked
    for, is handed out filled with ``got`` (what a read without buffers gave), with no copy beside it."""
    made = {}
    makers = [lambda number=number, length=length: made.setdefault(number, np.full(length, 7, dtype=np.uint8))
              for number, (_, length) in enumerate(ranges)]
    lazily = storage.read_ranges(url, ranges, into=makers)
    assert made == {}  # nothing is made before the first range is asked for
    handed = list(lazily)
    assert [made[number].tobytes() for number in range(len(ranges))] == got
    assert all(np.shares_memory(np.asarray(item), made[number]) for number, item in enumerate(handed) if len(item))


def test_neighbouring_ranges_are_merged_and_long_ones_split():
    blocks = merge_ranges([(0, 10), (12, 4), (16, 0), (20, 5), (10 * MiB, 2 * PART_BYTES + 1), (0, 3)])

    assert [(block.start, block.end, len(block.members)) for block in blocks] == [
        (0, 16, 2), (16, 16, 1), (20, 25, 1), (10 * MiB, 10 * MiB + 2 * PART_BYTES + 1, 1), (0, 3, 1)]
    assert [len(block.parts()) for block in blocks] == [1, 0, 1, 3, 1]
    # a gap larger than its share of what is asked for is not read through
    assert len(merge_ranges([(0, 1000), (1000 + 100 * 1024, 1000)])) == 2
    assert len(merge_ranges([(0, MiB), (MiB + 60 * 1024, MiB)])) == 1


def test_only_the_asked_bytes_cross_the_wire(server_store):
    storage = storage_for(server_store)
    data = pattern(48 * MiB, seed=2)
    url = server_store.url("model.data-00000-of-00001")
    write(storage, url, data)
    small = [(offset, 4096) for offset in range(MiB, MiB + 64 * 4096, 4096 + 512)]  # merged: one request
    ranges = small + [(20 * MiB, 3 * MiB), (36 * MiB, PART_BYTES + 5)]  # two parts for the last one
    relay = server_store.relay
    relay.reset()

    got = [bytes(view) for view in storage.read_ranges(url, ranges)]

    assert got == [data[offset:offset + length] for offset, length in ranges]
    asked = sum(length for _, length in ranges)
    assert relay.requests == 4
    # what was skipped between the small ranges, plus HTTP headers
    assert asked < relay.received <= asked + 63 * 512 + 4 * 2048, (relay.received, asked)


@pytest.fixture
def small_streams(monkeypatch):
    """Runs of 8 MiB or more are streamed, through a queue of 4 chunks of 256 KiB (so it fills and waits)."""
    monkeypatch.setattr(remote_ranges, "STREAM_MIN_BYTES", 8 * MiB)
    monkeypatch.setattr(remote_ranges, "CHUNK_BYTES", 256 * 1024)
    monkeypatch.setattr(remote_ranges, "QUEUED_CHUNKS", 4)


def test_a_long_run_of_ranges_is_one_streamed_request(server_store, small_streams):
    storage = storage_for(server_store)
    data = pattern(40 * MiB, seed=3)
    url = server_store.url("model.data-00000-of-00001")
    write(storage, url, data)
    run = [(0, 5 * MiB), (5 * MiB, 7 * MiB + 3), (12 * MiB + 100, 9 * MiB), (21 * MiB + 100, 0)]  # 100 B skipped
    ranges = run + [(30 * MiB, MiB)]  # alone and short: in parts
    relay = server_store.relay
    relay.reset()

    got = [bytes(view) for view in storage.read_ranges(url, ranges)]
    requests, received = relay.requests, relay.received
    buffers = [np.zeros(length, dtype=np.uint8) for _, length in ranges]
    handed = list(storage.read_ranges(url, ranges, into=buffers))

    assert got == [data[offset:offset + length] for offset, length in ranges]
    assert [buffer.tobytes() for buffer in buffers] == got
    assert all(np.shares_memory(np.asarray(item), buffer) for item, buffer in zip(handed, buffers) if len(buffer))
    assert_buffers_made_as_bytes_arrive(storage, url, ranges, got)
    assert requests == 2
    asked = sum(length for _, length in ranges)
    assert asked + 100 < received <= asked + 100 + 2 * 2048


def test_a_streamed_read_left_early_stops_and_the_next_one_starts(server_store, small_streams):
    storage = storage_for(server_store)
    data = pattern(24 * MiB, seed=4)
    url = server_store.url("blob")
    write(storage, url, data)
    ranges = [(0, MiB), (MiB, 23 * MiB)]

    reading = storage.read_ranges(url, ranges)
    first = bytes(next(reading))
    reading.close()  # the reader stops after the first range: the request is dropped, nothing waits
    again = [bytes(view) for view in storage.read_ranges(url, ranges)]

    assert first == data[:MiB]
    assert again == [data[:MiB], data[MiB:]]


def test_a_stream_that_breaks_is_finished_in_parts(server_store, small_streams, monkeypatch):
    storage = storage_for(server_store)
    data = pattern(24 * MiB, seed=5)
    url = server_store.url("blob")
    write(storage, url, data)
    ranges = [(0, 3 * MiB), (3 * MiB, 9 * MiB), (12 * MiB, 12 * MiB)]
    opener = remote_ranges.body_reader(storage.filesystem)

    @contextlib.asynccontextmanager
    async def breaking(filesystem, path, start, end):  # the connection drops after 5 MiB of the body
        async with opener(filesystem, path, start, end) as read:
            given = 0

            async def read_some(size):
                nonlocal given
                if given >= 5 * MiB:
                    raise ConnectionResetError("connection reset by peer")
                chunk = await read(size)
                given += len(chunk)
                return chunk
            yield read_some

    monkeypatch.setattr(remote_ranges, "body_reader", lambda filesystem: breaking)
    server_store.relay.reset()
    got = [bytes(view) for view in storage.read_ranges(url, ranges)]

    assert got == [data[offset:offset + length] for offset, length in ranges]
    # the stream, then what it had not handed out (9 + 12 MiB) in six 4 MiB parts; the first 3 MiB are not
    # asked for again (what the stream had buffered past 5 MiB when it broke crossed the relay too)
    assert server_store.relay.requests >= 1 + 6
    assert 5 * MiB + 21 * MiB < server_store.relay.received < 24 * MiB + 21 * MiB


def test_a_stream_that_is_cancelled_never_leaves_the_reader_waiting(server_store, small_streams, monkeypatch):
    import asyncio

    storage = storage_for(server_store)
    data = pattern(12 * MiB, seed=6)
    url = server_store.url("blob")
    write(storage, url, data)

    @contextlib.asynccontextmanager
    async def cancelled(filesystem, path, start, end):  # the pump ends with no item queued
        raise asyncio.CancelledError()
        yield

    monkeypatch.setattr(remote_ranges, "body_reader", lambda filesystem: cancelled)
    got = [bytes(view) for view in storage.read_ranges(url, [(0, 12 * MiB)])]

    assert got == [data]  # read in parts instead


def test_a_streamed_read_from_cloud_storage_before_gcsfs_connected_opens_its_own_connection():
    """The gs:// stream uses gcsfs's connections once its first request has made them; before that, its own."""
    import asyncio

    import fsspec

    place = object_servers.Place("gs", object_servers.object_server("gs"))
    data = pattern(3 * MiB, seed=7)
    write(RemoteStorage("gs"), place.url("blob"), data)
    fresh = fsspec.filesystem("gs", skip_instance_cache=True)  # no request made yet: no session
    opener = remote_ranges.body_reader(fresh)

    async def read_range():
        pieces = []
        async with opener(fresh, place.url("blob"), MiB, 2 * MiB + 5) as read:
            while piece := await read(256 * 1024):
                pieces.append(piece)
        return b"".join(pieces)

    assert fresh.session is None
    assert asyncio.run_coroutine_threadsafe(read_range(), fresh.loop).result(timeout=60) == data[MiB:2 * MiB + 5]


def test_a_short_object_read_in_one_stream_is_named_with_its_length(server_store, small_streams):
    storage = storage_for(server_store)
    url = server_store.url("model.data-00000-of-00001")
    write(storage, url, pattern(9 * MiB))

    for ranges in ([(0, 10 * MiB)], [(10 * MiB, 9 * MiB)]):  # cut short; begins past the end
        with pytest.raises(CorruptCheckpointError) as caught:
            list(storage.read_ranges(url, ranges))
        assert str(caught.value) == (
            f"'{url}' is {9 * MiB} bytes long but its index says bytes up to {sum(ranges[0])} are in it: the "
            "object is short (an upload that did not finish, or a data file of another checkpoint); write the "
            "checkpoint again")


def test_answers_about_an_object_are_reused_only_while_fresh(server_store, monkeypatch):
    """Opening a checkpoint asks the same questions many times: asked again within METADATA_FRESH_SECONDS,
    they cross no wire; this process's own writes are seen at once, another writer's once the time is up."""
    monkeypatch.setattr(remote_storage, "METADATA_FRESH_SECONDS", 1.0)
    storage = storage_for(server_store)
    url = server_store.url("model.index")
    write(storage, url, b"first")
    def answers():
        return storage.exists(url), storage.size(url), storage.read_bytes(url), storage.is_directory(url)

    first = answers()
    server_store.relay.reset()
    again = [answers() for _ in range(4)]
    asked_again = server_store.relay.requests

    write(storage, url, b"second!")  # this process's own write
    mine = (storage.size(url), storage.read_bytes(url))
    other = RemoteStorage(server_store.protocol)  # another writer: answers this one remembers go stale
    with other.replacing(url) as sink:
        sink.write(b"third, longer")
    stale = storage.size(url)
    time.sleep(1.1)
    fresh = (storage.size(url), storage.read_bytes(url))

    assert [first, *again] == [(True, 5, b"first", False)] * 5
    assert asked_again == 0
    assert mine == (7, b"second!")
    assert stale == 7
    assert fresh == (13, b"third, longer")


def test_absent_objects_are_file_not_found(object_store):
    storage = storage_for(object_store)
    url = object_store.url("model.index")
    write(storage, object_store.url("other"), b"x")

    assert not storage.exists(url)
    for read in (storage.size, storage.read_bytes, lambda path: list(storage.read_ranges(path, [(0, 4)]))):
        with pytest.raises(FileNotFoundError):
            read(url)
    storage.remove(url)  # absent is fine


@pytest.mark.parametrize("count", [2, 16, 48])
def test_the_sizes_of_many_objects_are_asked_together(monkeypatch, count):
    """A checkpoint's data files in a bucket cost about one round trip, not one each: their sizes are asked at once,
    at most MAX_REQUESTS (16) at a time. Here each answer waits until as many are asked."""
    import threading

    from subsetsaver import storage as file_layer

    place = object_servers.Place("memory")
    urls = [place.url(f"model.data-{number:05d}-of-{count:05d}") for number in range(count)]
    for number, url in enumerate(urls[1:], 1):
        file_layer.write_bytes(url, b"x" * number)
    filesystem_type = type(file_layer.backend(urls[0]).filesystem)
    together = threading.Barrier(min(count, remote_storage.MAX_REQUESTS), timeout=20)
    waiting, most = [0], [0]
    counting = threading.Lock()
    info = filesystem_type.info

    def info_once_all_are_asked(filesystem, path, **kwargs):
        with counting:
            waiting[0] += 1
            most[0] = max(most[0], waiting[0])
        together.wait()
        with counting:
            waiting[0] -= 1
        return info(filesystem, path, **kwargs)

    monkeypatch.setattr(filesystem_type, "info", info_once_all_are_asked)
    assert file_layer.sizes(urls) == {url: (number or None) for number, url in enumerate(urls)}
    assert most[0] == min(count, remote_storage.MAX_REQUESTS)


def test_a_short_object_is_named_with_its_length(object_store):
    storage = storage_for(object_store)
    url = object_store.url("model.data-00000-of-00001")
    write(storage, url, pattern(1000))

    with pytest.raises(CorruptCheckpointError) as caught:
        list(storage.read_ranges(url, [(0, 10), (900, 200)]))

    assert str(caught.value) == (
        f"'{url}' is 1000 bytes long but its index says bytes up to 1100 are in it: the object is short (an "
        "upload that did not finish, or a data file of another checkpoint); write the checkpoint again")


def test_an_upload_that_raises_never_appears(object_store):
    storage = storage_for(object_store)
    fresh, existing = object_store.url("fresh"), object_store.url("existing")
    write(storage, existing, b"previous")

    for url in (fresh, existing):
        with pytest.raises(KeyError):
            with storage.replacing(url) as sink:
                sink.write(pattern(20 * MiB))  # more than one uploaded part
                raise KeyError("stopped")

    assert not storage.exists(fresh)
    assert storage.read_bytes(existing) == b"previous"


def test_remove_deletes_the_object(object_store):
    storage = storage_for(object_store)
    url = object_store.url("model.index")
    write(storage, url, b"index")

    storage.remove(url)

    assert not storage.exists(url)


def test_a_second_writer_is_refused_with_the_holder_named(object_store):
    first, second = storage_for(object_store), storage_for(object_store)
    first.hold_directory(object_store.url())
    first.hold_directory(object_store.url() + "/")  # again in this process: nothing to do
    lock_url = object_store.url(LOCK_NAME)
    holder = json.loads(first.read_bytes(lock_url))

    with pytest.raises(CheckpointWriteError) as caught:
        second.hold_directory(object_store.url())

    assert holder["pid"] == os.getpid()
    assert str(caught.value) == (
        f"another process (pid {os.getpid()} on {holder['host']}, since {holder['since']}) is saving checkpoints "
        f"in '{object_store.url()}'; two writers in one directory replace each other's files: give each run its "
        f"own directory, or stop the other process first (if it was killed, remove '{lock_url}')")
    first.release_all()
    second.hold_directory(object_store.url())
    second.release_all()
    assert not first.exists(lock_url)


def test_the_lock_of_a_process_that_is_gone_is_taken_over(object_store):
    storage = storage_for(object_store)
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    import socket

    stale = {"host": socket.gethostname(), "pid": int(finished.stdout), "since": "2026-01-01T00:00:00+00:00"}
    write(storage, object_store.url(LOCK_NAME), json.dumps(stale).encode())

    storage.hold_directory(object_store.url())

    assert json.loads(storage.read_bytes(object_store.url(LOCK_NAME)))["pid"] == os.getpid()
    storage.release_all()


def run_python(code, environ=None, **kwargs):
    environment = dict(os.environ, PYTHONPATH=REPOSITORY, **(environ or {}))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=environment, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


def test_a_lock_is_released_when_its_process_exits(server_store):
    holder = run_python(f"""
        from subsetsaver.storage.remote import RemoteStorage
        RemoteStorage({server_store.protocol!r}).hold_directory({server_store.url()!r})
        print("held")
    """)
    out, err = holder.communicate(timeout=120)
    assert out == "held\n", err
    storage = storage_for(server_store)

    assert not storage.exists(server_store.url(LOCK_NAME))
    storage.hold_directory(server_store.url())
    storage.release_all()


def test_a_killed_upload_never_leaves_a_partial_object(server_store):
    """Kill the writer at random moments of a 16 MiB upload: the object is then absent, or whole."""
    size = 16 * MiB
    url = server_store.url("model.data-00000-of-00001")
    storage = storage_for(server_store)
    rng = random.Random(25)
    outcomes = set()
    for attempt in range(3):
        writer = run_python(f"""
            import sys, time
            import numpy as np
            from subsetsaver.storage.remote import RemoteStorage
            storage = RemoteStorage({server_store.protocol!r})
            storage.exists({url!r})  # connected before the first write
            print("ready", flush=True)
            data = np.random.default_rng({attempt}).integers(0, 256, {size}, dtype=np.uint8).tobytes()
            with storage.replacing({url!r}) as sink:
                for start in range(0, len(data), 1 << 20):
                    sink.write(data[start:start + (1 << 20)])
                    time.sleep(0.05)
            print("done", flush=True)
        """)
        assert writer.stdout.readline() == "ready\n", writer.stderr.read()
        time.sleep(rng.uniform(0.0, 2.0))
        writer.kill()
        writer.communicate()
        time.sleep(0.2)  # a request the killed process had sent may still be finishing
        if storage.exists(url):
            expected = np.random.default_rng(attempt).integers(0, 256, size, dtype=np.uint8).tobytes()
            assert storage.read_bytes(url) == expected
            outcomes.add("whole")
            storage.remove(url)
        else:
            outcomes.add("absent")
    assert "absent" in outcomes


def test_bad_credentials_name_the_settings_the_client_reads(tmp_path):
    """moto with authentication on (INITIAL_NO_AUTH_ACTION_COUNT=0) refuses keys it never issued."""
    pytest.importorskip("s3fs")
    port = object_servers.free_port()
    try:
        server = object_servers.start_moto_process(port, env=dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="0"))
    except RuntimeError as error:
        pytest.skip(str(error))
    try:
        client = run_python("""
            from subsetsaver.storage.remote import RemoteStorage
            try:
                RemoteStorage("s3").size("s3://private/model.index")
            except Exception as error:
                print(type(error).__name__, "|", error.url, "|", error.fix)
        """, {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "AKIAUNKNOWN",
              "AWS_SECRET_ACCESS_KEY": "wrong"})
        out, err = client.communicate(timeout=120)
    finally:
        server.terminate()
        server.wait(timeout=10)

    name, url, fix = out.strip().split(" | ")
    assert (name, url) == ("RemoteStorageError", "s3://private/model.index"), err
    assert fix == CREDENTIALS["s3"]
    assert "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in fix


def test_a_missing_client_library_says_which_extra_to_install():
    client = run_python("""
        import sys
        sys.modules["gcsfs"] = None  # as if `pip install subsetsaver[gcs]` had not been run
        from subsetsaver.storage.remote import RemoteStorage
        try:
            RemoteStorage("gs").exists("gs://bucket/model.index")
        except Exception as error:
            print(type(error).__name__, "|", error.url, "|", error.fix)
    """)
    out, err = client.communicate(timeout=120)

    assert out.strip() == ("RemoteStorageError | gs://bucket/model.index | install the client library: "
                           "pip install 'subsetsaver[gcs]'"), err


def test_client_errors_become_remote_storage_errors_with_the_url(server_store):
    storage = storage_for(server_store)
    url = f"{server_store.protocol}://no-such-bucket-{os.getpid()}/model.index"

    with pytest.raises(RemoteStorageError) as caught:
        with storage.replacing(url) as sink:
            sink.write(b"index")

    assert caught.value.url == url and isinstance(caught.value, OSError)
    assert str(caught.value).startswith(f"cannot finish writing '{url}': ")
    assert str(caught.value).endswith(": check the bucket's name, or create the bucket first")
