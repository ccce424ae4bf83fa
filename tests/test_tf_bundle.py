"""TensorFlow's checkpoint files read and written without TensorFlow (subsetsaver.formats.tf.bundle).

What TensorFlow writes (SaveV2, Saver with Adam slots, sharded and partitioned saves,
tf.train.Checkpoint) reads identically to ``tf.train.load_checkpoint``; what the writer
writes restores in a Saver, reads in TensorFlow and is byte for byte what SaveV2 writes;
crafted ``.index`` files (block checksums valid) are refused with whole messages, and
damaged files never give anything but the library's errors or the original values.
The crafted files are built here from scratch (a small table and protobuf encoder of
the test's own), so the reader is not checked against itself.
"""

import os
import socket
import struct
import subprocess
import sys
import tracemalloc
import weakref

import google_crc32c
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorflow.core.protobuf import tensor_bundle_pb2

from subsetsaver.errors import (
    CheckpointMismatchError,
    CheckpointNotFoundError,
    CorruptCheckpointError,
    SubsetSaverError,
    UnsupportedDtypeError,
)
from subsetsaver.formats.tf import bundle as tf_bundle
from subsetsaver.formats.tf import declared_sizes as tf_index
from subsetsaver.formats.tf.bundle import dtypes as bundle_dtypes
from subsetsaver.formats.tf.bundle import proto, slices, table
from subsetsaver.formats.wire import protobuf

v1 = tf.compat.v1
FUZZ = settings(max_examples=int(os.environ.get("SUBSETSAVER_FUZZ_EXAMPLES", "150")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
RESTORE = "restore from an intact copy of the checkpoint"


# ---------------------------------------------------------------------------------
# Helpers: TensorFlow's view of a checkpoint, and comparing values bit for bit
# ---------------------------------------------------------------------------------


def tensorflow_view(prefix):
    """{name: (shape, dtype name, value)} as tf.train.load_checkpoint gives them."""
    reader = tf.train.load_checkpoint(prefix)
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    return {name: (tuple(shapes[name]), dtypes[name].name, _as_array(reader.get_tensor(name))) for name in shapes}


def _as_array(value):
    """TensorFlow gives a string scalar as bytes and other scalars as numpy scalars: as 0-d arrays."""
    return np.array(value, dtype=object) if isinstance(value, bytes) else np.asarray(value)


def our_view(prefix):
    with tf_bundle.BundleReader(prefix) as reader:
        return {name: (reader.spec(name).shape, reader.spec(name).dtype, reader.read(name)) for name in reader.names}


def assert_identical(ours, theirs, name=""):
    """Same dtype, shape and bytes (strings: the same bytes objects)."""
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, name
    if ours.dtype == object:
        assert ours.tolist() == theirs.tolist() and all(type(x) is bytes for x in ours.reshape(-1)), name
    else:
        assert ours.tobytes() == theirs.tobytes(), name


def assert_reads_like_tensorflow(prefix):
    theirs, ours = tensorflow_view(prefix), our_view(prefix)
    assert sorted(ours) == sorted(theirs)
    for name, (shape, dtype, value) in theirs.items():
        assert ours[name][:2] == (shape, dtype), name
        assert_identical(ours[name][2], value, name)
    return ours


def random_values(dtype, shape, seed=0):
    """Values of every bit pattern a dtype can take (NaNs included), from random bytes."""
    generator = np.random.default_rng(seed)
    if dtype == np.bool_:
        return generator.integers(0, 2, shape).astype(bool)
    dtype = np.dtype(dtype)
    return np.frombuffer(generator.bytes(int(np.prod(shape)) * dtype.itemsize), dtype).reshape(shape).copy()


def ml(name):
    return np.dtype(getattr(ml_dtypes, name))


FIXED_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                np.uint32, np.uint64, np.bool_, np.complex64, np.complex128, ml("bfloat16"), ml("float8_e5m2"),
                ml("float8_e4m3fn"), ml("float8_e4m3fnuz"), ml("float8_e4m3b11fnuz"), ml("float8_e5m2fnuz")]
SUB_BYTE_DTYPES = [ml("int4"), ml("uint4"), ml("int2"), ml("uint2"), ml("float4_e2m1fn")]


def every_dtype_arrays():
    """Name -> array: each dtype as a [2, 3] tensor, a scalar and an empty one; strings of every kind."""
    arrays = {}
    for index, dtype in enumerate(FIXED_DTYPES):
        name = np.dtype(dtype).name
        arrays[f"{name}/matrix"] = random_values(dtype, (2, 3), index)
        arrays[f"{name}/scalar"] = random_values(dtype, (), index + 100)
        arrays[f"{name}/empty"] = np.zeros((0, 3), dtype)
    for dtype in SUB_BYTE_DTYPES:  # one byte per element, valid values only
        arrays[f"{dtype.name}/matrix"] = np.array([[0, 1, 0], [1, 1, 0]], dtype)
    arrays["string/words"] = np.array([b"", b"ab", "é→ü".encode(), b"\x00\xff", b"x" * 300], dtype=object)
    arrays["string/matrix"] = np.array([[b"a", b""], [b"", b"bcd"]], dtype=object)
    arrays["string/scalar"] = np.array(b"\xc3\xa9t\xc3\xa9", dtype=object)
    arrays["string/empty"] = np.zeros((0,), dtype=object)
    arrays["string/all_empty"] = np.array([b"", b"", b""], dtype=object)
    return arrays


def tf_constant(array):
    """``tf.constant(array)``, object arrays of bytes as string tensors."""
    if array.dtype != object:  # from a vector: a TensorProto cannot hold one float8 *fnuz element alone
        return tf.reshape(tf.constant(array.reshape(-1)), array.shape)
    return tf.constant(array.tolist() if array.ndim else array.item(), dtype=tf.string, shape=array.shape)


def save_v2(prefix, arrays, names=None):
    """TensorFlow's SaveV2 op on ``arrays`` (eager), in the order of ``names`` (default: sorted)."""
    names = sorted(arrays) if names is None else names
    tensors = [tf_constant(arrays[name]) for name in names]
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names), tensors=tensors)
    return prefix


@pytest.fixture(scope="module")
def saved_by_tensorflow(tmp_path_factory):
    """Checkpoints TensorFlow wrote: {kind: prefix}."""
    directory = tmp_path_factory.mktemp("by_tensorflow")
    for kind in ("adam", "sharded", "partitioned", "object"):
        (directory / kind).mkdir()
    prefixes = {"every dtype": save_v2(str(directory / "every_dtype"), every_dtype_arrays())}
    quantized = {f"{dtype.name}": tf.raw_ops.QuantizeV2(input=[1.0, -1.0, 0.25], min_range=-1.0, max_range=1.0,
                                                         T=dtype).output
                 for dtype in (tf.qint8, tf.quint8, tf.qint16, tf.quint16, tf.qint32)}
    tf.raw_ops.SaveV2(prefix=str(directory / "quantized"), tensor_names=list(quantized),
                      shape_and_slices=[""] * len(quantized), tensors=list(quantized.values()))
    prefixes["quantized"] = str(directory / "quantized")

    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3))
        w = v1.get_variable("dense/w", [3, 2], initializer=v1.random_normal_initializer(seed=1))
        b = v1.get_variable("dense/b", [2], initializer=v1.zeros_initializer())
        step = v1.train.get_or_create_global_step()
        train = v1.train.AdamOptimizer(0.1).minimize(tf.reduce_sum(tf.matmul(x, w) + b), global_step=step)
        saver = v1.train.Saver()
    with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        sess.run(train)
        sess.run(train)
        prefixes["saver with adam"] = saver.save(sess, str(directory / "adam" / "model"), write_meta_graph=False)

    graph = tf.Graph()
    with graph.as_default():
        with tf.device("/cpu:0"):
            v1.get_variable("first/w", [5, 3], initializer=v1.random_normal_initializer(seed=2))
        with tf.device("/cpu:1"):
            v1.get_variable("second/w", [4], tf.int64, initializer=v1.constant_initializer(7))
            v1.get_variable("second/words", initializer=tf.constant([b"a", b"bc"]), use_resource=True)
        saver = v1.train.Saver(sharded=True)
    with v1.Session(graph=graph, config=v1.ConfigProto(device_count={"CPU": 2})) as sess:
        sess.run(v1.global_variables_initializer())
        prefixes["sharded"] = saver.save(sess, str(directory / "sharded" / "model"), write_meta_graph=False)

    graph = tf.Graph()
    with graph.as_default():
        v1.get_variable("emb", [10, 4], initializer=v1.random_normal_initializer(seed=3),
                        partitioner=v1.fixed_size_partitioner(3))
        v1.get_variable("wide", [3, 200], tf.float64, initializer=v1.random_normal_initializer(seed=4),
                        partitioner=v1.fixed_size_partitioner(3, axis=1))  # offsets 67, 134: two-byte key numbers
        v1.get_variable("plain", [2], initializer=v1.ones_initializer())
        saver = v1.train.Saver()
    with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        prefixes["partitioned"] = saver.save(sess, str(directory / "partitioned" / "model"), write_meta_graph=False)

    checkpoint = tf.train.Checkpoint(weights=tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3)),
                                     name=tf.Variable(b"model"), step=tf.Variable(3, dtype=tf.int64))
    prefixes["tf.train.Checkpoint"] = checkpoint.write(str(directory / "object" / "ckpt"))
    return prefixes


# ---------------------------------------------------------------------------------
# Files TensorFlow writes read identically
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["every dtype", "quantized", "saver with adam", "sharded", "partitioned",
                                  "tf.train.Checkpoint"])
def test_files_tensorflow_writes_read_identically(saved_by_tensorflow, kind):
    ours = assert_reads_like_tensorflow(saved_by_tensorflow[kind])
    if kind == "every dtype":
        arrays = every_dtype_arrays()
        assert sorted(ours) == sorted(arrays)
        for name, array in arrays.items():
            assert_identical(ours[name][2], array, name)
    if kind == "saver with adam":
        assert sorted(ours) == ["beta1_power", "beta2_power", "dense/b", "dense/b/Adam", "dense/b/Adam_1", "dense/w",
                                "dense/w/Adam", "dense/w/Adam_1", "global_step"]
        assert ours["global_step"][2] == 2 and np.any(ours["dense/w/Adam_1"][2] != 0)
    if kind == "tf.train.Checkpoint":
        assert ours["_CHECKPOINTABLE_OBJECT_GRAPH"][:2] == ((), "string")
        assert ours["name/.ATTRIBUTES/VARIABLE_VALUE"][2].item() == b"model"


def test_names_specs_and_header_of_a_checkpoint(saved_by_tensorflow):
    with tf_bundle.BundleReader(saved_by_tensorflow["every dtype"]) as reader:
        assert reader.prefix == saved_by_tensorflow["every dtype"]
        assert reader.names == tuple(sorted(every_dtype_arrays(), key=str.encode))
        assert (reader.num_shards, reader.version) == (1, tf_bundle.FormatVersion(1, 0, ()))
        assert reader.spec("float32/matrix") == tf_bundle.TensorSpec("float32/matrix", (2, 3), "float32", 24, False)
        assert reader.spec("int4/matrix") == tf_bundle.TensorSpec("int4/matrix", (2, 3), "int4", 6, False)
        # 5 varint lengths (1 + 1 + 1 + 1 + 2 bytes), the length checksum, the bytes
        assert reader.spec("string/words").nbytes == 6 + 4 + 0 + 2 + 7 + 2 + 300
        assert reader.spec("string/empty").nbytes == 4  # no lengths, the checksum of none
        assert reader.specs == {name: reader.spec(name) for name in reader.names}
        with pytest.raises(KeyError, match="holds no tensor 'nope'"):
            reader.read("nope")


def test_sharded_and_partitioned_checkpoints_list_each_variable_once(saved_by_tensorflow):
    with tf_bundle.BundleReader(saved_by_tensorflow["sharded"]) as reader:
        assert reader.num_shards == 2 and reader.names == ("first/w", "second/w", "second/words")
    with tf_bundle.BundleReader(saved_by_tensorflow["partitioned"]) as reader:
        assert reader.names == ("emb", "plain", "wide")
        assert reader.spec("emb") == tf_bundle.TensorSpec("emb", (10, 4), "float32", 160, True)
        assert reader.spec("wide") == tf_bundle.TensorSpec("wide", (3, 200), "float64", 4800, True)
        assert not reader.spec("plain").partitioned


def test_the_wire_decoder_agrees_with_tensorflows_protos(saved_by_tensorflow):
    for prefix in saved_by_tensorflow.values():
        entries = table.read_table(open(prefix + ".index", "rb").read(), CorruptCheckpointError)
        header = tensor_bundle_pb2.BundleHeaderProto.FromString(entries[0][1])
        assert protobuf.decode(proto.BUNDLE_HEADER, entries[0][1]) == {
            "num_shards": header.num_shards, "version": {"producer": header.version.producer}}
        for key, value in entries[1:]:
            entry, decoded = tensor_bundle_pb2.BundleEntryProto.FromString(value), protobuf.decode(proto.BUNDLE_ENTRY, value)
            assert decoded.get("dtype") == entry.dtype and decoded.get("size", 0) == entry.size
            assert (decoded.get("offset", 0), decoded.get("shard_id", 0), decoded.get("crc32c", 0)) == (
                entry.offset, entry.shard_id, entry.crc32c)
            assert [d.get("size", 0) for d in decoded["shape"].get("dim", [])] == [d.size for d in entry.shape.dim]
            assert [[(x.get("start", 0), x.get("length")) for x in s.get("extent", [])] for s in decoded.get("slices", [])] \
                == [[(x.start, x.length if x.HasField("length") else None) for x in s.extent] for s in entry.slices]
            assert protobuf.encode(proto.BUNDLE_ENTRY, decoded) == value  # the canonical bytes TensorFlow wrote
            if key[:1] == b"\x00":  # a part: its key is the ordered code of its name and extents
                name, extents = slices.read_slice_key(key)
                assert slices.slice_key(name, extents) == key and name in (b"emb", b"wide")


def test_the_dtype_table_is_tensorflows():
    for enum in range(1, 100):
        try:
            expected = tf.as_dtype(enum)
        except TypeError:
            assert bundle_dtypes.by_enum(enum) is None, enum
            continue
        ours = bundle_dtypes.by_enum(enum)
        if expected.name == "resource":  # a handle: never in a checkpoint
            assert ours is None
            continue
        assert ours.name == expected.name, enum
        if expected.name in ("string", "variant"):
            assert ours.itemsize is None
            continue
        assert ours.itemsize == expected.size, enum
        numpy_type = np.dtype(expected.as_numpy_dtype)
        base = numpy_type.fields[expected.name][0] if numpy_type.fields else numpy_type  # quantized: a struct
        assert bundle_dtypes.numpy_dtype(ours) == base, enum
    for dtype in FIXED_DTYPES + SUB_BYTE_DTYPES:
        assert bundle_dtypes.for_numpy(dtype).enum == tf.as_dtype(dtype).as_datatype_enum
    assert bundle_dtypes.for_numpy(np.dtype("S3")).name == bundle_dtypes.for_numpy(object).name == "string"
    with pytest.raises(UnsupportedDtypeError):
        bundle_dtypes.for_numpy(np.dtype("datetime64[s]"))


# ---------------------------------------------------------------------------------
# Files written here: restored by TensorFlow, and the bytes SaveV2 writes
# ---------------------------------------------------------------------------------


def test_written_files_restore_in_a_saver_bit_for_bit(tmp_path):
    # Every dtype a CPU variable can have (not the float8 *fnuz types: TensorFlow has no CPU kernels for them;
    # they are checked in tf.train.load_checkpoint and byte for byte against SaveV2 below).
    written = every_dtype_arrays()
    arrays = {name: array for name, array in written.items() if not name.endswith("/empty") and "fnuz" not in name}
    emb = random_values(np.float32, (10, 4), 7)
    prefix = str(tmp_path / "ours")
    with tf_bundle.BundleWriter(prefix) as writer:
        for name in sorted(written):
            writer.add(name, written[name])
        for start, stop in [(0, 4), (4, 7), (7, 10)]:  # as fixed_size_partitioner(3) splits 10 rows
            writer.add_slice("emb", (10, 4), (start, 0), emb[start:stop])
    graph = tf.Graph()
    with graph.as_default():
        variables = {name: v1.get_variable(name, initializer=tf_constant(
                         np.full(array.shape, b"", object) if array.dtype == object else np.zeros_like(array)),
                         use_resource=True) for name, array in arrays.items()}
        variables["emb"] = v1.get_variable("emb", [10, 4], initializer=v1.zeros_initializer(),
                                           partitioner=v1.fixed_size_partitioner(3))
        saver = v1.train.Saver()
        fetches = {name: tf.convert_to_tensor(variable) for name, variable in variables.items()}
    with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        saver.restore(sess, prefix)
        restored = sess.run(fetches)
    for name, array in arrays.items():
        assert_identical(np.asarray(restored[name], dtype=array.dtype), array, name)
    assert_identical(restored["emb"], emb)
    view = tensorflow_view(prefix)
    assert sorted(view) == sorted([*written, "emb"])
    assert_identical(view["emb"][2], emb)
    for name, array in written.items():  # the fnuz and empty ones included
        assert_identical(view[name][2], array, name)


def test_written_files_are_the_bytes_savev2_writes(tmp_path):
    arrays = every_dtype_arrays()
    for index in range(2500):  # an index of two data blocks (over 256 KiB): separators, block boundaries
        arrays[f"many/{index:05d}/" + "long_scope_name/" * 5] = np.float32(index)
    arrays["huge_key/" + "k" * (1 << 19)] = np.int8(1)  # key + value over twice the block size: a block of its own
    theirs, ours = save_v2(str(tmp_path / "theirs"), arrays), tf_bundle.write(str(tmp_path / "ours"), arrays)
    assert ours == str(tmp_path / "ours")
    for suffix in (".index", ".data-00000-of-00001"):
        assert open(theirs + suffix, "rb").read() == open(ours + suffix, "rb").read(), suffix
    assert len(table.read_table(open(ours + ".index", "rb").read(), CorruptCheckpointError)) == len(arrays) + 1


def test_written_partitioned_variables_are_the_bytes_a_saver_writes(saved_by_tensorflow, tmp_path):
    theirs = saved_by_tensorflow["partitioned"]
    view = tensorflow_view(theirs)
    ours = str(tmp_path / "model")
    with tf_bundle.BundleWriter(ours) as writer:  # the Saver's order: by name, parts by offset
        for start, stop in [(0, 4), (4, 7), (7, 10)]:
            writer.add_slice("emb", (10, 4), (start, 0), view["emb"][2][start:stop])
        writer.add("plain", view["plain"][2])
        for start, stop in [(0, 67), (67, 134), (134, 200)]:
            writer.add_slice("wide", (3, 200), (0, start), view["wide"][2][:, start:stop])
    for suffix in (".index", ".data-00000-of-00001"):
        assert open(theirs + suffix, "rb").read() == open(ours + suffix, "rb").read(), suffix


def test_quantized_tensors_read_as_their_integers_and_are_written_back_as_plain_integers(saved_by_tensorflow, tmp_path):
    # numpy has no quantized dtypes: TensorFlow gives qint8 values as int8, so writing them back gives an int8
    # tensor: the only way the writer's files differ from the ones read.
    ours = our_view(saved_by_tensorflow["quantized"])
    assert {name: (dtype, value.dtype.name) for name, (_, dtype, value) in ours.items()} == {
        "qint8": ("qint8", "int8"), "quint8": ("quint8", "uint8"), "qint16": ("qint16", "int16"),
        "quint16": ("quint16", "uint16"), "qint32": ("qint32", "int32")}
    prefix = tf_bundle.write(str(tmp_path / "m"), {name: value for name, (_, _, value) in ours.items()})
    assert {name: dtype for name, (_, dtype, _) in tensorflow_view(prefix).items()}["qint8"] == "int8"


def test_tensorflow_is_never_imported(tmp_path, saved_by_tensorflow):
    code = (
        "import sys\n"
        "sys.modules['tensorflow'] = None  # any import of TensorFlow fails\n"
        "import numpy as np\n"
        "from subsetsaver.formats.tf import bundle as tf_bundle, declared_sizes as tf_index\n"
        f"prefix = {str(tmp_path / 'model')!r}\n"
        "tf_bundle.write(prefix, {'w': np.arange(6, dtype=np.float32).reshape(2, 3), 'words': np.array([b'a', b''])})\n"
        "with tf_bundle.BundleReader(prefix) as reader:\n"
        "    assert reader.read('w').sum() == 15 and reader.read('words').tolist() == [b'a', b'']\n"
        f"with tf_bundle.BundleReader({saved_by_tensorflow['partitioned']!r}) as reader:\n"
        "    assert reader.read('emb').shape == (10, 4)\n"
        "tf_index.check_declared_sizes(prefix)\n"
        "assert tf_index.file_bytes(prefix + '.index')[-8:] == bytes.fromhex('57fb808b247547db')\n"
        "print(sorted(m for m in sys.modules if m.startswith('tensorflow')))\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "['tensorflow']\n"  # only the None placed there


# ---------------------------------------------------------------------------------
# Writing: atomic, all or nothing, validated
# ---------------------------------------------------------------------------------


def test_an_exception_in_the_with_block_leaves_nothing(tmp_path):
    prefix = str(tmp_path / "model")
    with pytest.raises(RuntimeError, match="stop"):
        with tf_bundle.BundleWriter(prefix) as writer:
            writer.add("w", np.ones(1000, np.float32))
            raise RuntimeError("stop")
    assert os.listdir(tmp_path) == []


def test_a_save_removes_what_a_killed_save_left(tmp_path):
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(finished.stdout)  # a process that no longer runs
    left = tmp_path / f"model.data-00000-of-00001.tmp-{socket.gethostname()}-{dead}-0123abcd"
    left.write_bytes(b"half a tensor")
    tf_bundle.write(str(tmp_path / "model"), {"w": np.ones(3)})
    assert sorted(os.listdir(tmp_path)) == ["model.data-00000-of-00001", "model.index"]


def test_the_writer_keeps_no_array_it_was_given(tmp_path):
    with tf_bundle.BundleWriter(str(tmp_path / "model")) as writer:
        array = np.ones(1 << 20, np.float32)
        kept = weakref.ref(array)
        writer.add("w", array)
        del array
        assert kept() is None  # its bytes are in the data file already; only the index entry stays
    assert our_view(str(tmp_path / "model"))["w"][2].sum() == 1 << 20


def test_a_tensor_stored_only_in_part_is_written_listed_and_refused_whole(tmp_path):
    """TensorFlow gives some slots of partitioned variables the variable's full shape while they hold one
    part: such files are written, TensorFlow restores the part, and reading the whole value is refused."""
    prefix = str(tmp_path / "model")
    part = np.arange(16, dtype=np.float32).reshape(4, 4)
    with tf_bundle.BundleWriter(prefix) as writer:
        writer.add_slice("emb", (10, 4), (0, 0), part)
    np.testing.assert_array_equal(
        tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=["emb"], shape_and_slices=["10 4 0,4:0,4"],
                             dtypes=[tf.float32])[0].numpy(), part)
    with tf_bundle.BundleReader(prefix) as reader:
        assert reader.spec("emb") == tf_bundle.TensorSpec("emb", (10, 4), "float32", 64, partitioned=True)
        with pytest.raises(CheckpointMismatchError) as error:
            reader.read("emb")
    assert str(error.value) == (
        f"tensor 'emb' of checkpoint '{prefix}' is stored only in part (16 of 40 elements), as TensorFlow stores "
        "some optimizer slots of partitioned variables; it has no whole value: leave it out of the selection, or "
        "restore it into its graph")


def test_writer_refusals(tmp_path):
    with tf_bundle.BundleWriter(str(tmp_path / "model")) as writer:
        writer.add("w", np.float32(1))
        with pytest.raises(ValueError, match="already has a tensor 'w'"):
            writer.add("w", np.float32(2))
        with pytest.raises(UnsupportedDtypeError):
            writer.add("when", np.array(["2020-01-01"], "datetime64[D]"))
        with pytest.raises(UnsupportedDtypeError):
            writer.add("objects", np.array([1, b"a"], dtype=object))
        with pytest.raises(ValueError, match="non-empty str"):
            writer.add("", np.float32(1))
        writer.add_slice("emb", (4, 2), (0, 0), np.ones((2, 2), np.float32))
        with pytest.raises(ValueError, match="overlaps one added before"):
            writer.add_slice("emb", (4, 2), (1, 0), np.ones((2, 2), np.float32))
        with pytest.raises(ValueError, match="does not fit"):
            writer.add_slice("emb", (4, 2), (3, 0), np.ones((2, 2), np.float32))
        with pytest.raises(ValueError, match="earlier parts are float32"):
            writer.add_slice("emb", (4, 2), (2, 0), np.ones((2, 2), np.int32))
        writer.add_slice("emb", (4, 2), (2, 0), np.full((2, 2), 2, np.float32))
        writer.add_slice("whole", (2,), (0,), np.ones(2, np.int8))  # one part covering all: a plain tensor
    with tf_bundle.BundleReader(str(tmp_path / "model")) as reader:
        assert reader.names == ("emb", "w", "whole") and not reader.spec("whole").partitioned
        assert reader.read("emb").tolist() == [[1, 1], [1, 1], [2, 2], [2, 2]]
    with pytest.raises(RuntimeError, match="not open"):
        writer.add("late", np.float32(1))


def test_overwriting_a_checkpoint_replaces_all_its_files(saved_by_tensorflow, tmp_path):
    directory = os.path.dirname(saved_by_tensorflow["sharded"])
    copy = tmp_path / "model"
    for name in os.listdir(directory):
        if name.startswith("model."):
            (tmp_path / name).write_bytes(open(os.path.join(directory, name), "rb").read())
    tf_bundle.write(str(copy), {"only": np.arange(3)})
    assert sorted(os.listdir(tmp_path)) == ["model.data-00000-of-00001", "model.index"]
    assert list(our_view(str(copy))) == ["only"]


def test_big_endian_and_non_contiguous_arrays_are_written_little_endian(tmp_path):
    big = np.arange(12, dtype=">i4").reshape(3, 4)
    prefix = tf_bundle.write(str(tmp_path / "m"), {"big": big, "strided": big[:, ::2].astype("<f8")})
    view = tensorflow_view(prefix)
    assert view["big"][2].tolist() == big.tolist() and view["strided"][2].tolist() == big[:, ::2].tolist()


# ---------------------------------------------------------------------------------
# Reading memory: one tensor at a time
# ---------------------------------------------------------------------------------


def test_reading_one_tensor_reads_only_its_bytes(tmp_path, monkeypatch):
    big = np.arange(2 << 20, dtype=np.float32)  # 8 MiB
    prefix = tf_bundle.write(str(tmp_path / "m"), {"big": big, "small": np.arange(5, dtype=np.int64),
                                                   "words": np.array([b"abc", b"de"])})
    read = []
    real_preadv = os.preadv
    monkeypatch.setattr(os, "preadv", lambda fd, buffers, offset: read.append(sum(map(len, buffers)))
                        or real_preadv(fd, buffers, offset))
    with tf_bundle.BundleReader(prefix) as reader:
        assert read == []  # opening reads the index, never the data
        tracemalloc.start()
        assert reader.read("small").tolist() == [0, 1, 2, 3, 4]
        assert reader.read("words").tolist() == [b"abc", b"de"]
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert sum(read) == 40 + reader.spec("words").nbytes and peak < 256 << 10
        tracemalloc.start()
        assert np.array_equal(reader.read("big"), big)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert sum(read) == 40 + reader.spec("words").nbytes + big.nbytes and peak < big.nbytes + (4 << 20) + (1 << 20)


# ---------------------------------------------------------------------------------
# Crafted files: a table and protobuf encoder of the test's own
# ---------------------------------------------------------------------------------


def masked(data):
    crc = google_crc32c.value(bytes(data))
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def varint(value):
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def field(number, value):
    """A varint field for an int, a length-delimited one for bytes."""
    if isinstance(value, bytes):
        return varint(number << 3 | 2) + varint(len(value)) + value
    return varint(number << 3) + varint(value)


def shape_proto(dims, unknown_rank=False):
    return b"".join(field(2, field(1, size) if size else b"") for size in dims) + (field(3, 1) if unknown_rank else b"")


def entry_proto(dtype, dims, offset=0, size=0, crc=0, shard=0, slices_=(), raw_shape=None):
    out = field(1, dtype) + field(2, shape_proto(dims) if raw_shape is None else raw_shape)
    out += (field(3, shard) if shard else b"") + (field(4, offset) if offset else b"") + (field(5, size) if size else b"")
    out += (b"\x35" + struct.pack("<I", crc)) if crc else b""
    for extents in slices_:
        out += field(7, b"".join(field(1, (field(1, start) if start else b"") + field(2, length))
                                 for start, length in extents))
    return out


def header_proto(num_shards=1, endianness=0, producer=1, min_consumer=0, bad_consumers=()):
    version = field(1, producer) + (field(2, min_consumer) if min_consumer else b"")
    version += b"".join(field(3, consumer) for consumer in bad_consumers)
    return field(1, num_shards) + (field(2, endianness) if endianness else b"") + field(3, version)


def part_key(name, extents):
    """The ordered-code key of a part, for numbers in [-64, 64): one byte each."""
    return b"\x00" + name + b"\x00\x01" + bytes([1, len(extents)]) + bytes(
        (0x80 + number) & 0xFF for extent in extents for number in extent)


def block(entries, restart_every=1):
    out, restarts, previous = bytearray(), [], b""
    for number, (key, value) in enumerate(entries):
        shared = 0
        if number % restart_every == 0:
            restarts.append(len(out))
        else:
            while shared < min(len(key), len(previous)) and key[shared] == previous[shared]:
                shared += 1
        out += varint(shared) + varint(len(key) - shared) + varint(len(value)) + key[shared:] + value
        previous = key
    return bytes(out + struct.pack(f"<{len(restarts)}I", *restarts) + struct.pack("<I", len(restarts)))


def table_bytes(entries, restart_every=1, block_type=0, restarts=None, split=None, separator=None):
    """A table of ``entries`` as given (order included), checksums right: one data block, or two
    (``entries[:split]``, ``entries[split:]``) indexed under their last keys, or the first under ``separator``."""
    groups = [entries] if split is None else [entries[:split], entries[split:]]
    out, index_entries = bytearray(), []
    for number, group in enumerate(groups):
        data = block(group, restart_every)
        if restarts is not None and number == 0:  # replace the restart array
            count = struct.unpack("<I", data[-4:])[0]
            data = data[:-4 - 4 * count] + struct.pack(f"<{len(restarts)}I", *restarts) + \
                struct.pack("<I", len(restarts))
        key = separator if separator is not None and number == 0 else (group[-1][0] if group else b"")
        index_entries.append((key, varint(len(out)) + varint(len(data))))
        out += data + bytes([block_type]) + struct.pack("<I", masked(data + bytes([block_type])))
    meta_at, meta = len(out), block([])
    out += meta + b"\0" + struct.pack("<I", masked(meta + b"\0"))
    index_at, index = len(out), block(index_entries)
    out += index + b"\0" + struct.pack("<I", masked(index + b"\0"))
    handles = varint(meta_at) + varint(len(meta)) + varint(index_at) + varint(len(index))
    return bytes(out + handles.ljust(40, b"\0") + struct.pack("<Q", 0xDB4775248B80FB57))


def string_bytes(elements):
    """A string tensor as tensor_bundle.cc stores it, and its entry's masked checksum."""
    lengths = b"".join(varint(len(e)) for e in elements)
    crc = google_crc32c.value(b"".join(struct.pack("<I", len(e)) for e in elements))
    length_checksum = struct.pack("<I", ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF)
    stored = lengths + length_checksum + b"".join(elements)
    crc = google_crc32c.extend(google_crc32c.extend(crc, length_checksum), b"".join(elements))
    return stored, ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


class Crafted:
    """A checkpoint built byte by byte: 'small' float32 [3], 'table' int32 [4, 2], 'words' string [3] and
    'part' float32 [4, 2] in two parts (rows 0:1 and 1:4). Edit ``header``, ``entries`` or ``data``, then
    :meth:`write`."""

    SMALL = np.array([1.5, -2.0, 3.25], np.float32)
    TABLE = np.arange(8, dtype=np.int32).reshape(4, 2)
    WORDS = [b"", b"ab", "é".encode()]
    PART = np.arange(8, dtype=np.float32).reshape(4, 2)

    def __init__(self):
        self.header = header_proto()
        self.data, self.entries = b"", {}
        self.add(b"small", 1, [3], self.SMALL.tobytes())
        self.add(b"table", 3, [4, 2], self.TABLE.tobytes())
        words, crc = string_bytes(self.WORDS)
        self.add(b"words", 7, [3], words, crc)
        self.entries[b"part"] = entry_proto(1, [4, 2], slices_=[[(0, 1), (0, 2)], [(1, 3), (0, 2)]])
        self.add(part_key(b"part", [(0, 1), (0, 2)]), 1, [1, 2], self.PART[:1].tobytes())
        self.add(part_key(b"part", [(1, 3), (0, 2)]), 1, [3, 2], self.PART[1:].tobytes())

    def add(self, key, dtype, dims, stored, crc=None):
        self.entries[key] = entry_proto(dtype, dims, len(self.data), len(stored), masked(stored) if crc is None else crc)
        self.data += stored

    def write(self, directory, order=None, **table_options):
        """Write the files (entries in key order, or ``order``; no header entry if ``header`` is None)."""
        prefix = str(directory / "crafted")
        keys = sorted(self.entries) if order is None else order
        header = [] if self.header is None else [(b"", self.header)]
        index = table_bytes(header + [(key, self.entries[key]) for key in keys], **table_options)
        open(prefix + ".index", "wb").write(index)
        open(prefix + ".data-00000-of-00001", "wb").write(self.data)
        return prefix


def test_the_crafted_checkpoint_is_valid_for_tensorflow_and_for_the_reader(tmp_path):
    prefix = Crafted().write(tmp_path)
    ours = assert_reads_like_tensorflow(prefix)
    assert ours["small"][2].tolist() == Crafted.SMALL.tolist() and ours["words"][2].tolist() == Crafted.WORDS
    assert_identical(ours["part"][2], Crafted.PART)
    tf_index.check_declared_sizes(prefix)


def _set(entries, key, value):
    entries[key] = value


def with_parts(crafted, shape, listed):
    """Make 'part' a float32 tensor of ``shape`` listing the parts ``listed`` (extents), each stored (zeros)."""
    for key in [key for key in crafted.entries if key[:1] == b"\0"]:
        del crafted.entries[key]
    crafted.entries[b"part"] = entry_proto(1, shape, slices_=listed)
    for extents in listed:
        dims = [length for _, length in extents]
        crafted.add(part_key(b"part", extents), 1, dims, bytes(4 * int(np.prod(dims))))


def strings_adding_up_to_less_than_stored(crafted):
    """'words': lengths 0 and 2 (their checksums right), then 5 bytes of strings."""
    stored, checksum = string_bytes([b"", b"ab"])
    crafted.entries[b"words"] = entry_proto(7, [2], 44, 11, checksum)
    crafted.data = crafted.data[:44] + stored + b"\xc3\xa9\0" + crafted.data[55:]


INDEX_CASES = {  # name -> (edit of a Crafted, then write options; the problem the message states)
    "bad magic": (lambda c: None, {"after": lambda data: data[:-1] + b"\x00"},
                  "'{index}' does not end with the magic number of a TensorFlow table (it is not a checkpoint index) "
                  "(truncated or tampered)"),
    "too short": (lambda c: None, {"after": lambda data: data[-20:]},
                  "'{index}' holds 20 bytes, fewer than the 48-byte footer of a table (truncated or tampered)"),
    "footer handles": (lambda c: None, {"after": lambda data: data[:-48] + b"\xff" * 40 + data[-8:]},
                       "'{index}' has a footer whose block handles do not parse (truncated or tampered)"),
    "block checksum": (lambda c: None, {"after": lambda data: data[:3] + bytes([data[3] ^ 1]) + data[4:]},
                       "'{index}' fails the checksum of its data block 0 (bytes 0 to {block_end}) "
                       "(truncated or tampered)"),
    "compressed block": (lambda c: None, {"block_type": 1},
                         "'{index}' has a snappy-compressed data block 0, but TensorFlow writes checkpoint indexes "
                         "uncompressed (not written by TensorFlow's checkpoint writer)"),
    "unknown block type": (lambda c: None, {"block_type": 7},
                           "'{index}' has its data block 0 in an unknown compression type (7) (truncated or tampered)"),
    "keys out of order": (lambda c: None, {"order": [b"small", b"table", b"part", b"words"]},
                          "'{index}' lists the key 'part' after 'table' (keys out of order) (truncated or tampered)"),
    "index key before its block's last key": (lambda c: None, {"split": 3, "separator": b"\x00"},
                                              "'{index}' indexes data block 0 under key '\\x00', before its last key "
                                              "'part' (part 1,3:0,2) (truncated or tampered)"),
    "a block starting at its predecessor's index key": (lambda c: None, {"split": 3, "separator": b"part"},
                                                        "'{index}' has data block 1 starting at key 'part', not after "
                                                        "the index key 'part' of the block before it (truncated or "
                                                        "tampered)"),
    "restart points": (lambda c: None, {"restarts": [0, 5]},
                       "'{index}' has a data block 0 whose restart points are not the starts of entries "
                       "(truncated or tampered)"),
    "no header": (lambda c: setattr(c, "header", None), {},
                  "'{index}' has no header entry (the empty key) (truncated or tampered)"),
    "header does not parse": (lambda c: setattr(c, "header", b"\x08"), {},
                              "'{index}' has a header that does not parse as a BundleHeaderProto (a varint runs past "
                              "the end) (truncated or tampered)"),
    "no data files": (lambda c: setattr(c, "header", header_proto(num_shards=0)), {},
                      "'{index}' declares 0 data files (truncated or tampered)"),
    "big-endian": (lambda c: setattr(c, "header", header_proto(endianness=1)), {},
                   "'{index}' was written on a big-endian machine, and this reader reads only little-endian data; "
                   "load it with TensorFlow, which swaps the bytes, and save it again"),
    "unknown byte order": (lambda c: setattr(c, "header", header_proto(endianness=5)), {},
                           "'{index}' declares an unknown byte order (5) (truncated or tampered)"),
    "newer min_consumer": (lambda c: setattr(c, "header", header_proto(min_consumer=2)), {},
                           "'{index}' needs a reader of format version 2 or later, and this reader is version 1 "
                           "(written by a newer TensorFlow); read it with the TensorFlow version that wrote it"),
    "bad consumer": (lambda c: setattr(c, "header", header_proto(bad_consumers=(3, 1))), {},
                     "'{index}' declares that readers of format version 1 must not read it (bad_consumers [3, 1]) "
                     "(written by a newer TensorFlow); read it with the TensorFlow version that wrote it"),
    "negative producer": (lambda c: setattr(c, "header", header_proto(producer=-1)), {},
                          "'{index}' declares the format version -1, older than any reader's (truncated or tampered)"),
    "entry does not parse": (lambda c: _set(c.entries, b"small", b"\x08\x01\x12\x05"), {},
                             "tensor 'small' has an index entry that does not parse as a BundleEntryProto (field 2 "
                             "runs past the end) (truncated or tampered)"),
    "entry field of the wrong wire type": (lambda c: _set(c.entries, b"small", field(1, b"\x01")), {},
                                           "tensor 'small' has an index entry that does not parse as a "
                                           "BundleEntryProto (BundleEntryProto.dtype has wire type 2) "
                                           "(truncated or tampered)"),
    "negative dimension": (lambda c: _set(c.entries, b"small", entry_proto(1, [-3], size=12)), {},
                           "tensor 'small' declares the shape [-3] (truncated or tampered)"),
    "unknown rank": (lambda c: _set(c.entries, b"small", entry_proto(1, [], raw_shape=shape_proto([3], True))), {},
                     "tensor 'small' declares a shape of unknown rank (truncated or tampered)"),
    "too many dimensions": (lambda c: _set(c.entries, b"small", entry_proto(1, [1] * 255, size=4)), {},
                            "tensor 'small' declares 255 dimensions, more than TensorFlow's 254 (truncated or "
                            "tampered)"),
    "element count overflows": (lambda c: _set(c.entries, b"small", entry_proto(1, [1 << 32, 1 << 31], size=12)), {},
                                "tensor 'small' declares the shape [4294967296, 2147483648] of 9223372036854775808 "
                                "elements, more than an int64 counts (truncated or tampered)"),
    "byte size overflows": (lambda c: _set(c.entries, b"small", entry_proto(2, [1 << 31, 1 << 30], size=12)), {},
                            "tensor 'small' declares [2147483648, 1073741824] float64 (18446744073709551616 bytes), "
                            "more than an int64 counts (truncated or tampered)"),
    "declared above the size": (lambda c: _set(c.entries, b"small", entry_proto(1, [100], size=12)), {},
                                "tensor 'small' declares [100] float32 (400 bytes) but the checkpoint stores 12 bytes "
                                "for it (truncated or tampered)"),
    "declared below the size": (lambda c: _set(c.entries, b"small", entry_proto(1, [2], size=12)), {},
                                "tensor 'small' declares [2] float32 (8 bytes) but the checkpoint stores 12 bytes for "
                                "it (truncated or tampered)"),
    "strings above the size": (lambda c: _set(c.entries, b"words", entry_proto(7, [1 << 40], offset=44, size=9)), {},
                               "tensor 'words' declares [1099511627776] string (1099511627776 elements, at least "
                               "1099511627780 bytes) but the checkpoint stores 9 bytes for it (truncated or tampered)"),
    "shard out of range": (lambda c: _set(c.entries, b"table", entry_proto(3, [4, 2], 12, 32, shard=1)), {},
                           "tensor 'table' lies in .data file 1 of a checkpoint with 1 (truncated or tampered)"),
    "negative offset": (lambda c: _set(c.entries, b"table", entry_proto(3, [4, 2], -12, 32)), {},
                        "tensor 'table' declares its bytes at the offset -12 (truncated or tampered)"),
    "past the data file": (lambda c: _set(c.entries, b"table", entry_proto(3, [4, 2], 90, 32)), {},
                           "tensor 'table' declares [4, 2] int32 stored in bytes 90 to 122 of '{data}', which holds "
                           "{data_bytes} bytes (truncated or tampered)"),
    "one byte past the data file": (lambda c: setattr(c, "data", c.data[:-1]), {},
                                    "tensor 'part' (part 1,3:0,2) declares [3, 2] float32 stored in bytes 63 to 87 of "
                                    "'{data}', which holds 86 bytes (truncated or tampered)"),
    "unknown dtype": (lambda c: _set(c.entries, b"small", entry_proto(77, [3], size=12)), {},
                      "tensor 'small' declares an unknown dtype (77) (truncated or tampered)"),
    "no dtype": (lambda c: _set(c.entries, b"small", entry_proto(0, [3], size=12)), {},
                 "tensor 'small' declares an unknown dtype (0) (truncated or tampered)"),
    "resource dtype": (lambda c: _set(c.entries, b"small", entry_proto(20, [3], size=12)), {},
                       "tensor 'small' declares an unknown dtype (20) (truncated or tampered)"),
    "key not UTF-8": (lambda c: _set(c.entries, b"\xc3small", c.entries[b"small"]), {},
                      "'{index}' holds the key '\\xc3small', which is not a UTF-8 tensor name (truncated or tampered)"),
    "part no tensor lists": (lambda c: _set(c.entries, part_key(b"small", [(0, 1)]), entry_proto(1, [1], 0, 4)), {},
                             "tensor 'small' (part 0,1) is stored as a part of a partitioned tensor that lists no such "
                             "part (truncated or tampered)"),
    "missing part": (lambda c: c.entries.pop(part_key(b"part", [(1, 3), (0, 2)])), {},
                     "tensor 'part' lists a part (1,3:0,2) that the checkpoint does not hold (truncated or tampered)"),
    "overlapping parts": (lambda c: with_parts(c, [4, 2], [[(0, 1), (0, 2)], [(1, 3), (0, 2)], [(0, 2), (0, 1)]]), {},
                          "tensor 'part' has the overlapping parts 0,1:0,2 and 0,2:0,1 (truncated or tampered)"),
    "overlapping parts of the right total": (lambda c: with_parts(c, [4, 2], [[(0, 2), (0, 2)], [(1, 2), (0, 2)]]), {},
                                             "tensor 'part' has the overlapping parts 0,2:0,2 and 1,2:0,2 (truncated or "
                                             "tampered)"),
    "part outside the shape": (lambda c: _set(c.entries, b"part", entry_proto(1, [3, 2], slices_=[
                                   [(0, 1), (0, 2)], [(1, 3), (0, 2)]])), {},
                               "tensor 'part' lists a part (1,3:0,2) outside its shape [3, 2] (truncated or tampered)"),
    "part of another rank": (lambda c: _set(c.entries, b"part", entry_proto(1, [4, 2], slices_=[[(0, 1)]])), {},
                             "tensor 'part' lists a part (0,1) of 1 dimensions for the shape [4, 2] (truncated or "
                             "tampered)"),
    "part listed twice": (lambda c: _set(c.entries, b"part", entry_proto(1, [4, 2], slices_=[
                              [(0, 1), (0, 2)], [(0, 1), (0, 2)]])), {},
                          "tensor 'part' lists its part 0,1:0,2 twice (truncated or tampered)"),
    "part of another dtype": (lambda c: c.add(part_key(b"part", [(0, 1), (0, 2)]), 3, [1, 2], b"\0" * 8), {},
                              "tensor 'part' (part 0,1:0,2) holds int32 values in a float32 tensor (truncated or "
                              "tampered)"),
    "part of another shape": (lambda c: c.add(part_key(b"part", [(0, 1), (0, 2)]), 1, [2, 1], b"\0" * 8), {},
                              "tensor 'part' (part 0,1:0,2) holds the shape [2, 1] for the extent 0,1:0,2 of [4, 2] "
                              "(truncated or tampered)"),
    "part itself partitioned": (lambda c: _set(c.entries, part_key(b"part", [(0, 1), (0, 2)]), entry_proto(
                                    1, [1, 2], slices_=[[(0, 1), (0, 2)]])), {},
                                "tensor 'part' (part 0,1:0,2) is itself partitioned (truncated or tampered)"),
    "part declared above its size": (lambda c: _set(c.entries, part_key(b"part", [(1, 3), (0, 2)]), entry_proto(
                                         1, [3, 2], 100, 12)), {},
                                     "tensor 'part' (part 1,3:0,2) declares [3, 2] float32 (24 bytes) but the "
                                     "checkpoint stores 12 bytes for it (truncated or tampered)"),
}


@pytest.mark.parametrize("case", sorted(INDEX_CASES))
def test_a_crafted_index_is_refused_on_opening_with_the_reason(tmp_path, case):
    edit, options, problem = INDEX_CASES[case]
    crafted = Crafted()
    edit(crafted)
    options = dict(options)
    after = options.pop("after", None)  # an edit of the table's bytes
    prefix = crafted.write(tmp_path, options.pop("order", None), **options)
    if after:
        edited = after(open(prefix + ".index", "rb").read())
        open(prefix + ".index", "wb").write(edited)
    block_end = len(block([(b"", crafted.header or b"")] + sorted(crafted.entries.items())))
    problem = problem.format(index=prefix + ".index", data=prefix + ".data-00000-of-00001",
                             data_bytes=len(crafted.data), block_end=block_end)
    remedy = f"; {RESTORE}" if problem.endswith(")") else ""  # else the problem ends with its own remedy
    expected = f"cannot read checkpoint '{prefix}': {problem}{remedy}"
    with pytest.raises(CorruptCheckpointError) as error:
        tf_bundle.BundleReader(prefix)
    assert str(error.value) == expected
    with pytest.raises(CorruptCheckpointError) as error:
        tf_index.check_declared_sizes(prefix)
    assert str(error.value) == expected


def test_missing_files_are_checkpoint_not_found_errors(tmp_path):
    prefix = Crafted().write(tmp_path)
    os.remove(prefix + ".data-00000-of-00001")
    with pytest.raises(CheckpointNotFoundError) as error:
        tf_bundle.BundleReader(prefix)
    assert str(error.value) == (
        f"cannot read checkpoint '{prefix}': its data file '{prefix}.data-00000-of-00001' is missing (tensor 'part' "
        "(part 0,1:0,2) lies in it); copy every file of the checkpoint")
    tf_index.check_declared_sizes(prefix)  # a missing data file is left to the caller, which names it
    with tf_bundle.BundleReader(prefix, require_data_files=False) as reader, pytest.raises(CheckpointNotFoundError):
        reader.read("small")
    os.remove(prefix + ".index")
    with pytest.raises(CheckpointNotFoundError) as error:
        tf_bundle.BundleReader(prefix)
    assert str(error.value) == f"no checkpoint at '{prefix}' (expected '{prefix}.index')"


def _flip(data, position):
    return data[:position] + bytes([data[position] ^ 0x10]) + data[position + 1:]


VALUE_CASES = {  # name -> (edit of a Crafted, tensor read, problem)
    "changed bytes": (lambda c: setattr(c, "data", _flip(c.data, 5)), "small",
                      "tensor 'small' fails its checksum (bytes 0 to 12 of '{data}')"),
    # the data: small 0-12, table 12-44, words 44-55 (lengths 44-47, their checksum, strings 51-55), parts 55-63, 63-87
    "changed part": (lambda c: setattr(c, "data", _flip(c.data, len(c.data) - 1)), "part",
                     "tensor 'part' (part 1,3:0,2) fails its checksum (bytes 63 to 87 of '{data}')"),
    "changed string length": (lambda c: setattr(c, "data", _flip(c.data, 45)), "words",
                              "tensor 'words' fails the checksum of its string lengths (bytes 47 to 55 of '{data}')"),
    "changed string": (lambda c: setattr(c, "data", _flip(c.data, 52)), "words",
                       "tensor 'words' fails its checksum (bytes 44 to 55 of '{data}')"),
    "string lengths not the size": (strings_adding_up_to_less_than_stored, "words",
                                    "tensor 'words' has string lengths adding up to 2 bytes, but the checkpoint stores "
                                    "5 bytes of strings for it (bytes 44 to 55 of '{data}')"),
    "a bool byte of 2": (lambda c: c.add(b"small", 10, [3], b"\x01\x02\x00"), "small",
                         "tensor 'small' holds a bool byte other than 0 and 1 (bytes 87 to 90 of '{data}')"),
}


@pytest.mark.parametrize("case", sorted(VALUE_CASES))
def test_values_that_fail_their_checks_are_refused_on_reading(tmp_path, case):
    edit, name, problem = VALUE_CASES[case]
    crafted = Crafted()
    edit(crafted)
    prefix = crafted.write(tmp_path)
    with tf_bundle.BundleReader(prefix) as reader:
        with pytest.raises(CorruptCheckpointError) as error:
            reader.read(name)
        others = {other: reader.read(other) for other in reader.names if other != name}
    problem = problem.format(data=prefix + ".data-00000-of-00001")
    assert str(error.value) == f"cannot read checkpoint '{prefix}': {problem} (truncated or tampered); {RESTORE}"
    assert others.get("table", Crafted.TABLE).tolist() == Crafted.TABLE.tolist()


def test_variant_tensors_are_listed_and_checked_but_not_read(tmp_path):
    iterator = iter(tf.data.Dataset.range(10))
    next(iterator)
    prefix = tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / "iterator"))
    tf_index.check_declared_sizes(prefix)
    with tf_bundle.BundleReader(prefix) as reader:
        state = "iterator/.ATTRIBUTES/ITERATOR_STATE"
        assert reader.names == ("_CHECKPOINTABLE_OBJECT_GRAPH", state) and reader.spec(state).dtype == "variant"
        with pytest.raises(UnsupportedDtypeError) as error:
            reader.read(state)
        assert str(error.value) == (f"cannot read tensor '{state}' of checkpoint '{prefix}': variant tensors hold "
                                    "serialized C++ objects that only TensorFlow can read")
        graph = tf.train.load_checkpoint(prefix).get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH")
        assert reader.read("_CHECKPOINTABLE_OBJECT_GRAPH").item() == graph


def test_parts_too_many_to_compare_on_opening_are_checked_on_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(slices, "OVERLAP_BUDGET", 0)  # as if a crafted file listed a million parts
    assert_identical(our_view(Crafted().write(tmp_path))["part"][2], Crafted.PART)
    crafted = Crafted()
    INDEX_CASES["overlapping parts of the right total"][0](crafted)  # rows 0-2 and 1-3: row 3 never written
    prefix = crafted.write(tmp_path)
    with tf_bundle.BundleReader(prefix) as reader, pytest.raises(CorruptCheckpointError) as error:
        reader.read("part")
    assert str(error.value) == (f"cannot read checkpoint '{prefix}': tensor 'part' (part 1,2:0,2) overlaps another "
                                f"part of its tensor (truncated or tampered); {RESTORE}")


def test_a_data_file_truncated_after_opening_is_refused(tmp_path):
    prefix = Crafted().write(tmp_path)
    with tf_bundle.BundleReader(prefix) as reader:
        os.truncate(prefix + ".data-00000-of-00001", 20)
        with pytest.raises(CorruptCheckpointError, match="ended while reading it"):
            reader.read("table")


# ---------------------------------------------------------------------------------
# Fuzzing: damage gives the library's errors or the original values, never anything else
# ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_sources(saved_by_tensorflow):
    """{kind: (the files' bytes by suffix, the values read)} of checkpoints TensorFlow wrote."""
    sources = {}
    for kind in ("every dtype", "partitioned", "saver with adam"):
        prefix = saved_by_tensorflow[kind]
        suffixes = [".index"] + [name[len(os.path.basename(prefix)):] for name in os.listdir(os.path.dirname(prefix))
                                 if name.startswith(os.path.basename(prefix) + ".data-")]
        sources[kind] = ({suffix: open(prefix + suffix, "rb").read() for suffix in suffixes}, our_view(prefix))
    return sources


def _outcome(prefix):
    """{name: value} read, or the class of the library's error (anything else fails the test)."""
    try:
        with tf_bundle.BundleReader(prefix) as reader:
            return {name: reader.read(name) for name in reader.names}
    except SubsetSaverError as error:
        return type(error)


@FUZZ
@given(kind=st.sampled_from(["every dtype", "partitioned", "saver with adam"]), data_file=st.booleans(),
       damage=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(1, 255)), min_size=1, max_size=4),
       truncate=st.one_of(st.none(), st.integers(0, 1 << 20)))
def test_damaged_files_give_the_librarys_errors_or_the_original_values(tmp_path, fuzz_sources, kind, data_file, damage,
                                                                        truncate):
    files, original = fuzz_sources[kind]
    suffix = ".data-00000-of-00001" if data_file else ".index"
    data = bytearray(files[suffix])
    for position, flip in damage:
        data[position % len(data)] ^= flip
    if truncate is not None:
        data = data[:truncate % (len(data) + 1)]
    prefix = str(tmp_path / "model")
    for name, content in files.items():
        open(prefix + name, "wb").write(bytes(data) if name == suffix else content)
    outcome = _outcome(prefix)
    if isinstance(outcome, type):
        return
    assert sorted(outcome) == sorted(original)  # read without error: exactly what was saved
    for name, value in outcome.items():
        assert_identical(value, original[name][2], name)


@FUZZ
@given(key=st.sampled_from([b"", b"small", b"table", b"words", b"part", part_key(b"part", [(1, 3), (0, 2)])]),
       position=st.integers(0, 200), replacement=st.binary(min_size=0, max_size=12), cut=st.integers(0, 12))
def test_crafted_entries_give_the_librarys_errors_or_values_of_their_spec(tmp_path, key, position, replacement, cut):
    crafted = Crafted()
    value = crafted.header if key == b"" else crafted.entries[key]
    position %= len(value) + 1
    edited = value[:position] + replacement + value[position + cut:]
    if key == b"":
        crafted.header = edited
    else:
        crafted.entries[key] = edited
    outcome = _outcome(crafted.write(tmp_path))
    if isinstance(outcome, type):
        return
    with tf_bundle.BundleReader(str(tmp_path / "crafted")) as reader:  # checksums hold: values as their specs say
        for name, array in outcome.items():
            spec = reader.spec(name)
            assert array.shape == spec.shape and (array.dtype == object) == (spec.dtype == "string")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-(1 << 63), (1 << 63) - 1), min_size=2, max_size=20), st.binary(max_size=8))
def test_part_keys_sort_as_their_numbers_and_read_back(numbers, name):
    keys = [slices.ordered_signed(n) for n in sorted(numbers)]
    assert keys == sorted(keys)
    extents = list(zip(numbers[::2], numbers[1::2]))
    assert slices.read_slice_key(slices.slice_key(name, extents)) == (name, extents)


def test_a_pipe_or_directory_under_a_checkpoints_name_is_refused_without_waiting(tmp_path):
    prefix = Crafted().write(tmp_path)
    os.remove(prefix + ".data-00000-of-00001")
    os.mkfifo(prefix + ".data-00000-of-00001")  # opening it to read would wait for a writer forever
    with pytest.raises(CorruptCheckpointError) as error:
        tf_bundle.BundleReader(prefix)
    assert str(error.value) == f"'{prefix}.data-00000-of-00001' is not a regular file; {RESTORE}"
    os.remove(prefix + ".index")
    os.mkdir(prefix + ".index")
    with pytest.raises(CorruptCheckpointError) as error:
        tf_bundle.BundleReader(prefix)
    assert str(error.value) == f"'{prefix}.index' is not a regular file; {RESTORE}"
