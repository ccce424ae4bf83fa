"""Restore buffers recycled: a buffer's memory is reused only once nothing (TensorFlow included) uses
it, so alternating restores stay bit-exact while the memory is not faulted in afresh each time."""

import gc

import numpy as np
import pytest
import tensorflow as tf

from subsetsaver import CorruptCheckpointError, portable
from subsetsaver.formats import memory

v1 = tf.compat.v1
MB = 1 << 20


@pytest.fixture(autouse=True)
def no_idle_buffers():
    memory.free_idle_buffers()
    yield
    memory.free_idle_buffers()


def address(array):
    return array.__array_interface__["data"][0]


def test_a_dropped_buffer_is_given_to_the_next_call_of_its_size():
    first = memory.recycled_bytes(3 * MB)
    first[:] = 7
    where = address(first)
    del first
    again = memory.recycled_bytes(3 * MB)
    assert address(again) == where and again.nbytes == 3 * MB and again.flags.writeable
    other = memory.recycled_bytes(4 * MB)  # another size: a mapping of its own
    assert address(other) != where and address(other) % 4096 == 0


def test_a_buffer_is_not_reused_while_any_view_of_it_lives():
    buffer = memory.recycled_bytes(3 * MB)
    where = address(buffer)
    kept = np.asarray(buffer.view(np.float32).reshape(3, -1)[1:])  # a plain array, as TensorFlow keeps a feed
    del buffer
    gc.collect()
    second = memory.recycled_bytes(3 * MB)
    assert address(second) != where
    kept[...] = 1.5  # still its own memory: nothing else was handed it
    second[:] = 0
    assert float(kept.min()) == float(kept.max()) == 1.5
    del kept
    third = memory.recycled_bytes(3 * MB)
    assert address(third) == where


def test_free_idle_buffers_gives_the_memory_back_and_small_sizes_are_plain_arrays():
    for size in (3 * MB, 5 * MB):
        memory.recycled_bytes(size)  # dropped at once: idle
    assert memory.free_idle_buffers() == 8 * MB
    assert memory.free_idle_buffers() == 0
    small = memory.recycled_bytes(4096)
    assert type(small) is np.ndarray and address(small) % 64 == 0


def test_two_idle_buffers_of_a_size_and_four_in_all_are_kept():
    first, second, third = (memory.recycled_bytes(3 * MB) for _ in range(3))
    addresses = [address(buffer) for buffer in (first, second, third)]
    del first, second, third  # three of one size go idle, in this order: the first is unmapped
    assert [len(m) for m in memory._idle] == [3 * MB, 3 * MB]
    assert address(memory.recycled_bytes(3 * MB)) == addresses[2]  # the newest first
    sizes = [(4 + index) * MB for index in range(memory.IDLE_BUFFERS + 1)]
    for size in sizes:
        memory.recycled_bytes(size)
    assert [len(m) for m in memory._idle] == sizes[1:]


def test_alternating_restores_of_large_variables_stay_bit_exact(tmp_path, monkeypatch):
    graph = tf.Graph()
    with graph.as_default():
        variables = [v1.get_variable(f"big/v{i}", [MB], initializer=v1.zeros_initializer()) for i in range(3)]
        init = v1.global_variables_initializer()
    rng = np.random.default_rng(5)
    saved = {}
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        for label in ("a", "b"):
            values = [rng.standard_normal(MB).astype(np.float32) for _ in variables]
            for variable, value in zip(variables, values):
                variable.load(value, sess)
            saved[label] = values
            portable.save_npz(sess, str(tmp_path / f"{label}.npz"))
        made = []
        monkeypatch.setattr(memory, "_mapping", lambda count, original=memory._mapping: made.append(count)
                            or original(count))
        for label in ("a", "b", "a", "a", "b", "a", "b", "b"):
            portable.restore_npz(sess, str(tmp_path / f"{label}.npz"))
            got = sess.run(variables)
            assert all(g.tobytes() == s.tobytes() for g, s in zip(got, saved[label])), label
        assert made == [3 * 4 * MB] * len(made) and 1 <= len(made) <= 2  # the variables' own, and one to read into
        held = sess.run(variables)
        portable.restore_npz(sess, str(tmp_path / "a.npz"))
        portable.restore_npz(sess, str(tmp_path / "b.npz"))
        assert all(h.tobytes() == s.tobytes() for h, s in zip(held, saved["b"]))  # fetched values untouched
        # A damaged file read into a recycled buffer must not reach variables that may use that memory.
        damaged = bytearray((tmp_path / "a.npz").read_bytes())
        damaged[damaged.index(saved["a"][2][1000:1002].tobytes())] ^= 0x10
        (tmp_path / "damaged.npz").write_bytes(bytes(damaged))
        for _ in range(3):
            with pytest.raises(CorruptCheckpointError, match="checksum mismatch for array 'big/v2'"):
                portable.restore_npz(sess, str(tmp_path / "damaged.npz"))
            got = sess.run(variables)
            assert all(g.tobytes() == s.tobytes() for g, s in zip(got, saved["b"]))


def test_a_tensor_read_that_needs_fresh_memory_gives_back_the_smaller_idle_buffers():
    for size in (40 * MB, 10 * MB, 9 * MB):
        memory.reused_bytes(size)  # dropped at once: idle
    assert [len(m) for m in memory._idle] == [40 * MB, 10 * MB, 9 * MB]
    again = memory.reused_bytes(10 * MB)  # idle of its size: taken, nothing else unmapped
    assert [len(m) for m in memory._idle] == [40 * MB, 9 * MB]
    larger = memory.reused_bytes(20 * MB)  # none of its size: the smaller idle one goes, the larger stays
    assert [len(m) for m in memory._idle] == [40 * MB]
    assert again.nbytes == 10 * MB and larger.nbytes == 20 * MB
    memory.recycled_bytes(3 * MB)  # a restore's buffer keeps the idle buffers of other sizes, as before
    memory.recycled_bytes(50 * MB)
    assert [len(m) for m in memory._idle] == [40 * MB, 3 * MB, 50 * MB]


def test_a_mid_size_tensor_buffer_is_reused_once_every_view_of_it_is_dropped(monkeypatch):
    made = []
    monkeypatch.setattr(memory, "_mapping", lambda count, original=memory._mapping: made.append(count)
                        or original(count))
    first = memory.reused_bytes(MB + 5)  # rounded up to share, to a step of an eighth of the power of two below
    where = address(first)
    kept = first[10:20]
    del first
    second = memory.reused_bytes(MB)  # the first is still seen through a view: memory of its own
    assert address(second) != where and address(second) % 4096 == 0
    del kept
    third = memory.reused_bytes(MB + 5)
    assert address(third) == where and third.nbytes == MB + 5 and type(third) is np.ndarray
    assert made == [MB + MB // 8, MB]  # the third is the first's mapping, not a new one at the same address
    small = memory.reused_bytes(memory._MID_FROM - 1)  # smaller tensors: numpy's own memory
    assert type(small) is np.ndarray and small.base is None


def test_idle_mid_size_buffers_are_kept_up_to_their_byte_cap_the_oldest_unmapped_first():
    count = memory.IDLE_MID_BYTES // (4 * MB) + 3
    buffers = [memory.reused_bytes(4 * MB) for _ in range(count)]
    addresses = [address(buffer) for buffer in buffers]
    while buffers:
        buffers.pop(0)  # all go idle, in order
    kept = memory.IDLE_MID_BYTES // (4 * MB)
    assert [len(mapping) for mapping in memory._idle_mid] == [4 * MB] * kept
    assert memory._idle == []  # a restore's idle buffers are not theirs
    assert address(memory.reused_bytes(4 * MB)) == addresses[-1]  # the newest first
    assert memory.free_idle_buffers() == kept * 4 * MB  # the one just taken and dropped went back too
    assert memory._idle_mid == [] and memory.free_idle_buffers() == 0
