"""The fast paths of portable checkpoints: small arrays gathered from the file into one buffer per
group (mixed dtypes and shapes, subsets, several spans, in-memory and pread sources), large variables
fetched one by one, and a replaced file freed in the background. Every check is bit-exact, and a bad
array still changes no variable."""

import os
import pickle
import zipfile
import zlib

import numpy as np
import pytest
import tensorflow as tf

import subsetsaver as ss
from subsetsaver import portable
from subsetsaver.formats import npz as npzfile
from subsetsaver.formats.npz import format as npz_format
from subsetsaver.formats.npz import rows as npz_rows
from subsetsaver.formats.npz import sources as npz_sources
from subsetsaver.storage import local as local_files

v1 = tf.compat.v1

# name -> (dtype, shape): groups of equal dtype and shape (gathered), one large pair (read row by row),
# a lone variable, int4 (no Pack kernel: fed alone) and a bool group.
SMALL = {f"small/f32_{i}": ("float32", (3,)) for i in range(5)}
SMALL.update({f"small/bf16_{i}": ("bfloat16", (2, 3)) for i in range(3)})
SMALL.update({f"small/i64_{i}": ("int64", ()) for i in range(4)})
SMALL.update({f"small/c64_{i}": ("complex64", (1, 2)) for i in range(2)})
SMALL.update({f"flags/b_{i}": ("bool", (5,)) for i in range(3)})
SMALL.update({"lone/f16": ("float16", (7,)), "lone/i4": ("int4", (4,)), "lone/i4_b": ("int4", (4,))})
LARGE = {f"large/w_{i}": ("float32", (128, 160)) for i in range(2)}  # 80 KiB each: fetched one by one
SHAPES = {**SMALL, **LARGE}


def random_value(dtype_name, shape, rng):
    dtype = npzfile.numpy_dtype(dtype_name)
    if dtype_name == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype_name == "int4":
        return rng.integers(-8, 8, size=shape).astype(dtype)
    count = int(np.prod(shape))
    return rng.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(shape)


def mixed_graph():
    """Resource variables of SHAPES plus a 3-way partitioned one; their init op."""
    graph = tf.Graph()
    with graph.as_default():
        for name, (dtype, shape) in SHAPES.items():
            v1.Variable(tf.zeros(shape, dtype=tf.as_dtype(npzfile.numpy_dtype(dtype))), name=name, use_resource=True)
        v1.get_variable("parted/emb", [9, 2], initializer=v1.zeros_initializer(),
                        partitioner=v1.fixed_size_partitioner(3), use_resource=True)
        init = v1.global_variables_initializer()
    return graph, init


def assign_random(sess, graph, seed):
    """Give every variable random bits (through one-off ops: test setup only); returns {name: whole value}."""
    rng = np.random.default_rng(seed)
    chosen, assigns, feeds = {}, [], {}
    with graph.as_default():
        for variable in graph.get_collection("variables"):
            name = variable.op.name
            dtype = variable.dtype.base_dtype.name
            value = random_value(dtype, variable.shape.as_list(), rng)
            feed = v1.placeholder(variable.dtype.base_dtype, variable.shape)
            assigns.append(variable.assign(feed, read_value=False))
            feeds[feed] = value
            chosen[name] = value
    sess.run(assigns, feeds)
    whole = {name: value for name, value in chosen.items() if not name.startswith("parted/")}
    whole["parted/emb"] = np.concatenate([chosen[f"parted/emb/part_{i}"] for i in range(3)])
    return whole


def current(sess, graph):
    variables = [v for v in graph.get_collection("variables")]
    fetched = dict(zip([v.op.name for v in variables], sess.run(variables)))
    whole = {name: value for name, value in fetched.items() if not name.startswith("parted/")}
    whole["parted/emb"] = np.concatenate([fetched[f"parted/emb/part_{i}"] for i in range(3)])
    return whole


def assert_bits(actual, expected, names=None):
    for name in names if names is not None else expected:
        a, e = actual[name], expected[name]
        assert a.dtype == e.dtype and a.shape == e.shape and a.tobytes() == e.tobytes(), name


class CountingSession:
    def __init__(self, sess):
        self._sess, self.runs, self.graph = sess, 0, sess.graph

    def run(self, *args, **kwargs):
        self.runs += 1
        return self._sess.run(*args, **kwargs)


@pytest.fixture
def mixed():
    graph, init = mixed_graph()
    sess = v1.Session(graph=graph)
    sess.run(init)
    yield graph, sess
    sess.close()


@pytest.fixture(params=["local", "local-pread", "ram"])
def where(request, tmp_path, monkeypatch):
    """Where the file lives: a local file read whole, one read through pread spans, or ram://."""
    if request.param == "local-pread":
        monkeypatch.setattr(npz_sources, "_READ_WHOLE", 0)
        monkeypatch.setattr(npz_rows, "_GATHER_SPAN", 256)  # many spans per group
    if request.param == "ram":
        return f"ram://fast_paths_{os.getpid()}_{id(request)}/m.npz"
    return str(tmp_path / "m.npz")


def test_mixed_dtypes_shapes_and_partitions_round_trip_in_one_run_each_way(mixed, where):
    graph, sess = mixed
    saved = assign_random(sess, graph, seed=1)
    counting = CountingSession(sess)
    path = portable.save_npz(counting, where)
    assert counting.runs == 1
    _, stored = npzfile.read(path)
    assert_bits(stored, saved)
    assign_random(sess, graph, seed=2)
    counting.runs = 0
    report = portable.restore_npz(counting, path)
    assert counting.runs == 1 and report.complete and len(report.restored) == len(SHAPES) + 1
    assert_bits(current(sess, graph), saved)
    assign_random(sess, graph, seed=3)
    portable.restore_npz(sess, path)  # the cached restore program, the same file
    assert_bits(current(sess, graph), saved)


def test_a_subset_of_a_group_restores_only_its_members(mixed, tmp_path):
    graph, sess = mixed
    saved = assign_random(sess, graph, seed=1)
    path = portable.save_npz(sess, str(tmp_path / "m.npz"))
    subsets = [ss.name("small/f32_[13]") | ss.name("flags/b_2"), ss.name("large/w_1") | ss.scope("parted"),
               ss.name("small/f32_[13]") | ss.name("flags/b_2")]  # the last one: its cached program again
    for seed, sel in enumerate(subsets, start=10):
        before = assign_random(sess, graph, seed=seed)
        report = portable.restore_npz(sess, path, sel, strict=False)
        chosen = set(report.restored)
        assert chosen == set(sel.names(graph)) and len(report.unexpected) == len(SHAPES) + 1 - len(chosen)
        now = current(sess, graph)
        assert_bits(now, saved, chosen)
        assert_bits(now, before, set(before) - chosen)


def flip_one_value(path, name, value):
    """Flip a bit in the data of array ``name`` (whose bytes are ``value``) and fix nothing else."""
    data = bytearray(open(path, "rb").read())
    member = name.replace("/", ".") + ".npy"
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member)
    start = data.index(value.tobytes(), info.header_offset)
    data[start] ^= 0x01
    with open(path, "wb") as handle:
        handle.write(data)


@pytest.mark.parametrize("checksum", ["crc32", "sha256"])
def test_a_damaged_small_array_is_named_and_changes_no_variable(mixed, tmp_path, checksum, monkeypatch):
    graph, sess = mixed
    saved = assign_random(sess, graph, seed=1)
    path = str(tmp_path / "m.npz")
    portable.save_npz(sess, path, checksum=checksum)
    portable.restore_npz(sess, path)  # builds and caches the restore program of this file
    flip_one_value(path, "small/f32_3", saved["small/f32_3"])
    before = assign_random(sess, graph, seed=2)
    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, lambda *a, **k: pytest.fail("unpickled"))
    with pytest.raises(ss.CorruptCheckpointError) as error:
        portable.restore_npz(sess, path)
    member_crc = zlib.crc32(saved["small/f32_3"].tobytes(), zlib.crc32(npz_format.npy_header("<f4", (3,))))
    message = str(error.value)
    assert message.startswith(f"'{path}', member 'small.f32_3.npy': checksum mismatch for array 'small/f32_3' ")
    assert message.endswith("its data was altered or damaged; use another checkpoint")
    if checksum == "crc32":
        assert f"manifest says {member_crc:08x}" in message
    assert_bits(current(sess, graph), before)


def test_a_rewritten_file_is_read_again_not_served_from_the_cached_program(mixed, tmp_path):
    graph, sess = mixed
    path = str(tmp_path / "m.npz")
    assign_random(sess, graph, seed=1)
    portable.save_npz(sess, path)
    portable.restore_npz(sess, path)  # caches the program of this file
    second = assign_random(sess, graph, seed=2)
    portable.save_npz(sess, path, ss.everything() - ss.name("small/f32_0"))  # another structure
    third = assign_random(sess, graph, seed=3)
    report = portable.restore_npz(sess, path, strict=False)
    assert report.missing == ("small/f32_0",)
    now = current(sess, graph)
    assert_bits(now, second, set(second) - {"small/f32_0"})
    assert_bits(now, third, ["small/f32_0"])
    fourth = assign_random(sess, graph, seed=4)
    portable.save_npz(sess, path)  # the first structure again, other values
    assign_random(sess, graph, seed=5)
    portable.restore_npz(sess, path)
    assert_bits(current(sess, graph), fourth)


def test_large_variables_are_fetched_one_by_one_and_small_ones_in_stacks(mixed):
    graph, _ = mixed
    portable.prepare_npz(ss.everything(), graph)
    stacks = [op for op in graph.get_operations() if op.name.startswith("subsetsaver_npz/") and op.type == "Pack"]
    # One stack per group of two or more small variables of one dtype and shape: f32, bf16, i64, c64, bool;
    # none for the two 80 KiB variables (nor for int4, which has no Pack kernel).
    assert sorted(op.inputs[0].dtype.name for op in stacks) == ["bfloat16", "bool", "complex64", "float32", "int64"]
    assert sorted(len(op.inputs) for op in stacks) == [2, 3, 3, 4, 5]


# ---------------------------------------------------------------------------------
# npzfile: gathering rows
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, shape", [("float32", (3,)), ("int16", (3,)), ("uint8", (5,)), ("float64", (0,)),
                                          ("complex128", (2, 2))])
@pytest.mark.parametrize("span", [1 << 20, 40])
def test_load_rows_gathers_into_any_rows_across_spans(tmp_path, monkeypatch, dtype, shape, span):
    monkeypatch.setattr(npz_rows, "_GATHER_SPAN", span)
    rng = np.random.default_rng(5)
    arrays = {f"a{i}": random_value(dtype, shape, rng) for i in range(7)}
    arrays["other"] = np.arange(3, dtype=np.int8)  # not gathered: another size
    path = str(tmp_path / "rows.npz")
    npzfile.write(path, arrays)
    names = ["a5", "a0", "a3", "a6"]
    rows = [3, 0, 6, 1]  # any order, gaps included
    nbytes = arrays["a0"].nbytes
    out = np.full((7, nbytes), 0xAB, dtype=np.uint8)
    with npzfile.Archive(path) as archive:
        plan = archive.plan_rows(names, rows, nbytes)
        archive.load_rows(plan, out)
    for name, row in zip(names, rows):
        assert out[row].tobytes() == arrays[name].tobytes(), name
    for row in (2, 4, 5):
        assert out[row].tobytes() == b"\xab" * nbytes


def test_load_rows_works_on_files_whose_data_is_not_aligned(tmp_path):
    # Python's zipfile writes members back to back: data offsets with no common factor but 1.
    path = str(tmp_path / "plain.npz")
    npzfile.write(path, {"x": np.float32(1.0), "y": np.float32(2.0)})
    with zipfile.ZipFile(path) as archive:
        members = [(info.filename, archive.read(info.filename)) for info in archive.infolist()]
    with zipfile.ZipFile(path, "w") as archive:
        for member in members:
            archive.writestr(*member)
    out = np.zeros((2, 4), np.uint8)
    with npzfile.Archive(path) as archive:
        offsets = [archive.locations()[name][1] for name in ("x", "y")]
        plan = archive.plan_rows(["x", "y"], [1, 0], 4)
        archive.load_rows(plan, out)
    assert np.gcd.reduce(offsets) == 1 and plan.unit == 1
    assert out.view(np.float32).tolist() == [[2.0], [1.0]]


def test_load_rows_refuses_a_bool_byte_other_than_zero_and_one(tmp_path):
    path = str(tmp_path / "b.npz")
    bad = np.array([2, 1], np.uint8).view(bool)  # a bool array whose first byte is 2: written as it is
    npzfile.write(path, {"f0": np.array([True, False]), "f1": bad})
    out = np.zeros((2, 2), np.uint8)
    with npzfile.Archive(path) as archive, pytest.raises(ss.CorruptCheckpointError) as error:
        archive.load_rows(archive.plan_rows(["f0", "f1"], [0, 1], 2), out)
    assert str(error.value) == f"'{path}', member 'f1.npy': array 'f1' holds bool bytes other than 0 and 1"


def test_plan_rows_names_what_it_cannot_gather(tmp_path):
    path = str(tmp_path / "r.npz")
    npzfile.write(path, {"a": np.zeros(2, np.float32), "b": np.zeros(3, np.float32)})
    with npzfile.Archive(path) as archive:
        with pytest.raises(KeyError) as missing:
            archive.plan_rows(["a", "nope"], [0, 1], 8)
        with pytest.raises(ValueError) as wrong:
            archive.plan_rows(["a", "b"], [0, 1], 8)
    assert missing.value.args[0] == f"'{path}' holds no array nope"
    assert str(wrong.value) == "arrays b do not have 8 bytes"


# ---------------------------------------------------------------------------------
# npzfile: the replaced file is freed in the background
# ---------------------------------------------------------------------------------


def open_descriptors():
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through Linux /proc")
def test_a_replaced_file_is_closed_in_the_background_and_the_new_one_is_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(local_files, "_RELEASE_IN_BACKGROUND", 1)
    path = str(tmp_path / "m.npz")
    npzfile.write(path, {"w": np.arange(1000, dtype=np.float32)})
    npzfile.finish_background_work()
    before = open_descriptors()
    old_inode = os.stat(path).st_ino
    npzfile.write(path, {"w": np.arange(1000, dtype=np.float64)})
    npzfile.finish_background_work()
    assert open_descriptors() == before
    assert os.stat(path).st_ino != old_inode
    assert npzfile.read(path)[1]["w"].tobytes() == np.arange(1000, dtype=np.float64).tobytes()
    assert sorted(os.listdir(tmp_path)) == ["m.npz"]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through Linux /proc")
def test_a_failed_rename_closes_the_held_file_and_keeps_it(tmp_path, monkeypatch):
    monkeypatch.setattr(local_files, "_RELEASE_IN_BACKGROUND", 1)
    path = str(tmp_path / "m.npz")
    npzfile.write(path, {"w": np.ones(10, np.float32)})
    npzfile.finish_background_work()
    before = open_descriptors()

    def refuse(source, target):
        raise PermissionError(13, "refused by the test")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(PermissionError):
        npzfile.write(path, {"w": np.zeros(10, np.float32)})
    npzfile.finish_background_work()
    assert open_descriptors() == before
    assert sorted(os.listdir(tmp_path)) == ["m.npz"]
    assert npzfile.read(path)[1]["w"].tobytes() == np.ones(10, np.float32).tobytes()


def test_a_symbolic_link_target_is_replaced_by_the_file_not_held(tmp_path, monkeypatch):
    monkeypatch.setattr(local_files, "_RELEASE_IN_BACKGROUND", 1)
    real = tmp_path / "real.npz"
    npzfile.write(str(real), {"w": np.ones(3, np.float32)})
    link = tmp_path / "link.npz"
    os.symlink(real, link)
    npzfile.write(str(link), {"w": np.zeros(3, np.float32)})
    npzfile.finish_background_work()
    assert not os.path.islink(link)  # like os.replace: the link itself is replaced
    assert npzfile.read(str(real))[1]["w"].tobytes() == np.ones(3, np.float32).tobytes()
    assert npzfile.read(str(link))[1]["w"].tobytes() == np.zeros(3, np.float32).tobytes()
