"""Crafted files and hostile input: everything a file declares (data-file counts, shapes, names,
object graphs, manifest fields) is bounded before a loop or an allocation uses it, and every
refusal is the library's own error: a subclass of SubsetSaverError and of the right builtin, one
line on the command line, under 2 KB, with no file changed.

The TensorFlow index files are built byte by byte with the table and protobuf encoder of
``test_tf_bundle`` (not the reader's own); object graphs are those of real ``tf.train.Checkpoint``
files with one field changed.
"""

import copy
import json
import os
import subprocess
import sys
import textwrap
import unicodedata
import zipfile

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file
from test_tf_bundle import Crafted, entry_proto, header_proto, masked, table_bytes

import subsetsaver as ss
from subsetsaver.errors import (
    CheckpointMismatchError,
    CorruptCheckpointError,
    InvalidNameError,
    SelectorSyntaxError,
    SubsetSaverError,
)
from subsetsaver.formats import npz
from subsetsaver.formats import npz as npz_state
from subsetsaver.formats import safetensors as safetensors_file
from subsetsaver.formats.tf import bundle as tf_bundle
from subsetsaver.formats.tf import object_graph
from subsetsaver.formats.wire import protobuf as proto
from subsetsaver.tools import convert

FUZZ = settings(max_examples=int(os.environ.get("SUBSETSAVER_FUZZ_EXAMPLES", "150")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
MOST_BYTES = 2048
TAMPERED = "(truncated or tampered); restore from an intact copy of the checkpoint"


def snapshot(directory):
    """{path: (size, mtime_ns)} of every file and folder under ``directory``."""
    found = {}
    for root, folders, files in os.walk(directory):
        for name in folders + files:
            status = os.stat(os.path.join(root, name))
            found[os.path.relpath(os.path.join(root, name), directory)] = (status.st_size, status.st_mtime_ns)
    return found


def refusal(run_cli, *args):
    """The one line the command line prints for a refused input (exit code 2, no traceback), without its prefix."""
    result = run_cli(*args)
    lines = result.stderr.splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[:3000]
    assert len(result.stderr.encode()) < MOST_BYTES and lines[0].startswith("subsetsaver: error: ")
    return lines[0][len("subsetsaver: error: "):]


# ---------------------------------------------------------------------------------
# Counts: data files
# ---------------------------------------------------------------------------------


def sharded(directory, count, name="sharded"):
    """A checkpoint of ``count`` float32 [2] tensors 't000', 't001', ..., each in a data file of its own."""
    prefix = str(directory / name)
    entries = [(b"", header_proto(num_shards=count))]
    for shard in range(count):
        stored = np.array([shard, -shard], np.float32).tobytes()
        entries.append((f"t{shard:03d}".encode(), entry_proto(1, [2], 0, len(stored), masked(stored), shard=shard)))
        with open(tf_bundle.data_path(prefix, shard, count), "wb") as handle:
            handle.write(stored)
    with open(prefix + ".index", "wb") as handle:
        handle.write(table_bytes(entries))
    return prefix


@pytest.mark.parametrize("num_shards", [8, 1000, 2**31 - 1])
def test_an_index_declaring_more_data_files_than_entries_is_refused_at_once(tmp_path, run_cli, num_shards):
    crafted = Crafted()  # six entries: three tensors, a partitioned one and its two parts
    crafted.header = header_proto(num_shards=num_shards)
    prefix = crafted.write(tmp_path)
    files = snapshot(tmp_path)
    expected = (f"cannot read checkpoint '{prefix}': '{prefix}.index' declares {num_shards} data files for 6 index "
                f"entries (each data file but one holds a tensor) {TAMPERED}")
    with pytest.raises(CorruptCheckpointError) as error:
        tf_bundle.BundleReader(prefix, require_data_files=False)
    assert str(error.value) == expected
    for command in (["inspect", prefix], ["convert", prefix, tmp_path / "out.npz"]):
        assert refusal(run_cli, *command) == expected
    assert snapshot(tmp_path) == files


def test_a_data_file_for_every_entry_still_reads(tmp_path):
    prefix = sharded(tmp_path, 12)
    with tf_bundle.BundleReader(prefix) as reader:
        assert reader.num_shards == 12
        assert [reader.read(name).tolist() for name in reader.names] == [[n, -n] for n in range(12)]
    assert tf.train.load_checkpoint(prefix).get_tensor("t011").tolist() == [11, -11]


def test_forty_missing_data_files_make_a_short_message(tmp_path, run_cli):
    prefix = sharded(tmp_path, 40)
    for shard in range(40):
        os.remove(tf_bundle.data_path(prefix, shard, 40))
    shown = ", ".join(tf_bundle.data_path(prefix, shard, 40) for shard in range(3))
    expected = f"checkpoint '{prefix}' is incomplete: {shown} missing; copy every file of the checkpoint"
    assert refusal(run_cli, "inspect", prefix) == expected


# ---------------------------------------------------------------------------------
# Sizes: shapes numpy cannot allocate
# ---------------------------------------------------------------------------------

BUNDLE_DTYPES = [(1, "float32", np.float32), (2, "float64", np.float64), (4, "uint8", np.uint8),
                 (18, "complex128", np.complex128), (7, "string", object)]


@st.composite
def empty_shapes(draw):
    """A shape with a zero somewhere and other dimensions up to an int64, small or huge."""
    dims = draw(st.lists(st.one_of(st.integers(1, 9), st.integers(1, 2**63 - 1)), max_size=5))
    dims.insert(draw(st.integers(0, len(dims))), 0)
    return dims


@FUZZ
@given(dims=empty_shapes(), dtype=st.sampled_from(BUNDLE_DTYPES))
def test_an_empty_tensor_of_any_declared_shape_reads_as_numpy_does_or_is_refused(tmp_path_factory, dims, dtype):
    enum, name, numpy_type = dtype
    try:
        wanted = np.empty(dims, numpy_type)
    except ValueError:  # "array is too big": numpy counts the other dimensions even with a 0 among them
        wanted = None
    crafted = Crafted()
    crafted.entries[b"small"] = entry_proto(enum, dims, crc=masked(b""))
    prefix = crafted.write(tmp_path_factory.mktemp("empty"))
    try:
        with tf_bundle.BundleReader(prefix) as reader:
            value = reader.read("small")
    except CorruptCheckpointError as error:
        assert wanted is None, error
        assert str(error) == (f"cannot read checkpoint '{prefix}': tensor 'small' declares the shape {dims}: no "
                              f"elements, but its other dimensions come to more {name} bytes than an int64 counts "
                              f"{TAMPERED}")
    else:
        assert wanted is not None and value.shape == wanted.shape and value.dtype == wanted.dtype


def test_the_zero_by_int64_max_entry_is_refused_by_every_command(tmp_path, run_cli):
    crafted = Crafted()
    crafted.entries[b"small"] = entry_proto(1, [0, 2**63 - 1], crc=masked(b""))
    prefix = crafted.write(tmp_path)
    files = snapshot(tmp_path)
    expected = (f"cannot read checkpoint '{prefix}': tensor 'small' declares the shape [0, 9223372036854775807]: no "
                f"elements, but its other dimensions come to more float32 bytes than an int64 counts {TAMPERED}")
    for command in (["inspect", prefix], ["diff", prefix, prefix], ["convert", prefix, tmp_path / "out.npz"],
                    ["convert", prefix, tmp_path / "out.safetensors", "--keep", "name('small')"]):
        assert refusal(run_cli, *command) == expected
    assert snapshot(tmp_path) == files


def safetensors_bytes(header, data=b""):
    """A safetensors file of ``header`` (JSON text) and ``data``."""
    encoded = header.encode()
    return len(encoded).to_bytes(8, "little") + encoded + data


def not_readable(path, problem):
    return f"'{path}' is not a readable safetensors file: {problem}; convert it again from its source"


@pytest.mark.parametrize("shape, dtype", [([0, 2**62 - 1], "F32"), ([3, 0, 2**61], "I64"), ([2**61, 0, 2**61], "U8")])
def test_a_safetensors_header_declaring_an_array_numpy_cannot_make_is_refused(tmp_path, run_cli, shape, dtype):
    path = tmp_path / "crafted.safetensors"
    path.write_bytes(safetensors_bytes(f'{{"w": {{"dtype": "{dtype}", "shape": {shape}, "data_offsets": [0, 0]}}}}'))
    files = snapshot(tmp_path)
    expected = not_readable(path, f"tensor 'w' declares the shape {shape}, which no numpy array can hold")
    with pytest.raises(CorruptCheckpointError) as error:
        safetensors_file.specs(path)
    assert str(error.value) == expected
    assert refusal(run_cli, "convert", path, tmp_path / "out.npz") == expected
    assert snapshot(tmp_path) == files


def with_manifest(good, path, edit):
    """A copy of the npz ``good`` whose manifest ``edit`` changed (a dict; ``"BIG"`` becomes a 5,000-digit number)."""
    with zipfile.ZipFile(good) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    manifest = json.loads(members[MANIFEST])
    edit(manifest)
    members[MANIFEST] = json.dumps(manifest).replace('"BIG"', "9" * 5000).encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return str(path)


MANIFEST = "__subsetsaver__.json"
MANIFEST_EDITS = {  # edit of the manifest of {'a': float32 [2, 3], 'e': float32 [0, 3]} -> what is wrong
    "a full shape of text": (lambda m: m["arrays"][0].update(info={"full_shape": "abc", "offset": [0, 0]}),
                             "manifest array #0 ('a'): its part of full_shape 'abc' at offset [0, 0] is not 2 "
                             "non-negative integers each"),
    "a negative full shape": (lambda m: m["arrays"][0].update(info={"full_shape": [-2, 3], "offset": [0, 0]}),
                              "manifest array #0 ('a'): its part of full_shape [-2, 3] at offset [0, 0] is not 2 "
                              "non-negative integers each"),
    "no offset": (lambda m: m["arrays"][0].update(info={"full_shape": [4, 3]}),
                  "manifest array #0 ('a'): its part of full_shape [4, 3] at offset None is not 2 non-negative "
                  "integers each"),
    "a part past its full shape": (lambda m: m["arrays"][0].update(info={"full_shape": [4, 3], "offset": [3, 0]}),
                                   "manifest array #0 ('a'): its part [2, 3] at offset [3, 0] does not fit in the "
                                   "full shape [4, 3]"),
    "a full shape too big": (lambda m: m["arrays"][0].update(info={"full_shape": [2**62, 3], "offset": [0, 0]}),
                             "manifest array #0 ('a'): full shape [4611686018427387904, 3] is more than an array "
                             "can hold"),
    "an empty shape too big": (lambda m: m["arrays"][1].update(shape=[0, 2**63 - 1]),
                               "manifest array #1 ('e'): shape [0, 9223372036854775807] is more than an array can "
                               "hold"),
    "a shape of text and nbytes -1": (lambda m: m["arrays"][0].update(shape=["x"], nbytes=-1),
                                      "manifest array #0 ('a'): shape ['x'] is not a list of non-negative integers"),
    "a long format": (lambda m: m.update(format="f" * 100_000),
                      f"manifest format is '{'f' * 37}...{'f' * 38}', not 'subsetsaver.npz'"),
    "a long shape": (lambda m: m["arrays"][0].update(shape=[[1]] * 100_000),
                     "manifest array #0 ('a'): shape [[1], [1], [1], [1], [1], [1], [1], [1], ...] is not a list of "
                     "non-negative integers"),
    "a 4096-character name twice": (lambda m: [entry.update(name="n" * 4096) for entry in m["arrays"]],
                                    f"manifest lists array '{'n' * 160}... (3936 more characters)' twice"),
    "a number too long to print": (lambda m: m["arrays"][0].update(nbytes="BIG"),
                                   "manifest is not valid JSON (Exceeds the limit (4300 digits) for integer string "
                                   "conversion: value has 5000 digits; use sys.set_int_max_str_digits() to "
                                   "increase the limit)"),
}


@pytest.fixture(scope="module")
def good_npz(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("npz") / "good.npz")
    npz.write(path, {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "e": np.zeros((0, 3), np.float32)})
    return path


@pytest.mark.parametrize("case", MANIFEST_EDITS)
def test_a_crafted_manifest_is_refused_in_a_short_message(tmp_path, run_cli, good_npz, case):
    edit, problem = MANIFEST_EDITS[case]
    path = with_manifest(good_npz, tmp_path / "crafted.npz", edit)
    files = snapshot(tmp_path)
    suffix = "" if "JSON" in problem else "; the manifest was edited or damaged"
    expected = f"'{path}', member '{MANIFEST}': {problem}{suffix}"
    for command in (["inspect", path], ["convert", path, tmp_path / "out.safetensors"],
                    ["convert", path, tmp_path / "tf1model", "--to", "name"]):
        assert refusal(run_cli, *command) == expected
    assert snapshot(tmp_path) == files


DEEP = "[" * 100_000 + "]" * 100_000
TOO_DEEP = "it is nested 100,000 deep; at most 64 levels are read"


def test_json_nested_100000_deep_is_refused_by_each_reader_as_the_librarys_error(tmp_path, run_cli, good_npz):
    """The .npz manifest, the safetensors header and the subset manifest refuse it in one line; a state
    file that is not a state file reads as none. No RecursionError."""
    manifest = tmp_path / "deep.npz"
    with zipfile.ZipFile(good_npz) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    members[MANIFEST] = members[MANIFEST].replace(b'"selector":', b'"deep": ' + DEEP.encode() + b', "selector":')
    with zipfile.ZipFile(manifest, "w", zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    header = tmp_path / "deep.safetensors"
    header.write_bytes(len(DEEP).to_bytes(8, "little") + DEEP.encode())
    prefix = tf_bundle.write(str(tmp_path / "model"), {"w": np.zeros(2, np.float32)})
    (tmp_path / "model.subset.json").write_text(DEEP)
    state = tmp_path / "checkpoint_npz.json"
    state.write_text(json.dumps({"format": npz_state.STATE_FORMAT, "latest": "a.npz"})[:-1] + ', "kept": ' + DEEP + "}")
    files = snapshot(tmp_path)
    assert refusal(run_cli, "inspect", manifest) == (f"'{manifest}', member '{MANIFEST}': manifest is not valid JSON "
                                                     f"({TOO_DEEP.replace('100,000', '100,001')})")  # in its object
    assert refusal(run_cli, "inspect", header) == not_readable(header, f"its header is not JSON ({TOO_DEEP})")
    assert refusal(run_cli, "inspect", prefix) == (f"manifest '{prefix}.subset.json' is not valid JSON ({TOO_DEEP}); "
                                                   "delete it or rewrite it")
    assert npz_state.read_state(state) is None
    assert snapshot(tmp_path) == files


# ---------------------------------------------------------------------------------
# Object graphs: slots that are their own variable, shared optimizer state
# ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def object_checkpoint(tmp_path_factory):
    """A tf.train.Checkpoint of 'dense/kernel' [2, 3] and a legacy Adam after one step: (arrays by key, nodes).

    Node 1 is the optimizer (children iter (node 3), beta_1, beta_2, decay, learning_rate; slots m (node 8)
    and v (node 9) of node 2, the variable)."""
    variable = tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="dense/kernel")
    optimizer = tf_keras.optimizers.legacy.Adam()
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(variable * variable)
    optimizer.apply_gradients([(tape.gradient(loss, variable), variable)])
    prefix = tf.train.Checkpoint(v=variable, optimizer=optimizer).write(str(tmp_path_factory.mktemp("object") / "ckpt"))
    with tf_bundle.BundleReader(prefix) as reader:
        arrays = {name: reader.read(name) for name in reader.names}
    nodes = proto.decode(object_graph.TRACKABLE_OBJECT_GRAPH, arrays.pop(object_graph.OBJECT_GRAPH_KEY).item())
    assert [child["local_name"] for child in nodes["nodes"][1]["children"]][0] == b"iter"
    assert nodes["nodes"][1]["slot_variables"][0] == {"original_variable_node_id": 2, "slot_name": b"m",
                                                      "slot_variable_node_id": 8}
    return arrays, nodes["nodes"]


def write_object_checkpoint(directory, arrays, nodes):
    graph = proto.encode(object_graph.TRACKABLE_OBJECT_GRAPH, {"nodes": nodes})
    return tf_bundle.write(str(directory / "ckpt"), {**arrays, object_graph.OBJECT_GRAPH_KEY: np.array(graph, object)})


def edited(object_checkpoint, edit):
    arrays, nodes = dict(object_checkpoint[0]), copy.deepcopy(object_checkpoint[1])
    edit(arrays, nodes)
    return arrays, nodes


def _slot(nodes, position, **fields):
    nodes[1]["slot_variables"][position].update(fields)


def _second_optimizer(nodes):  # a second Adam whose counter is the first one's
    nodes.append({"children": [{"node_id": 3, "local_name": b"iter"}],
                  "slot_variables": [{"original_variable_node_id": 2, "slot_name": b"m", "slot_variable_node_id": 8}]})
    nodes[0]["children"].append({"node_id": len(nodes) - 1, "local_name": b"optimizer_2"})


OBJECT_GRAPH_CASES = {
    "a slot that is its variable": (lambda arrays, nodes: _slot(nodes, 0, slot_variable_node_id=2),
                                    "makes node 2 the slot 'm' of node 2, which is the slot itself"),
    "a slot of a slot": (lambda arrays, nodes: _slot(nodes, 1, original_variable_node_id=8),
                         "makes node 9 the slot 'v' of node 8, which is itself a slot"),
    "a slot that is its own original": (lambda arrays, nodes: _slot(nodes, 0, original_variable_node_id=8),
                                        "makes node 8 the slot 'm' of node 8, which is the slot itself"),
    "two optimizers sharing a counter": (lambda arrays, nodes: _second_optimizer(nodes),
                                         "gives node 3 to the optimizers of nodes 1 and 10"),
}


@pytest.mark.parametrize("case", OBJECT_GRAPH_CASES)
def test_an_object_graph_giving_a_tensor_two_roles_is_refused(tmp_path, run_cli, object_checkpoint, case):
    edit, problem = OBJECT_GRAPH_CASES[case]
    prefix = write_object_checkpoint(tmp_path, *edited(object_checkpoint, edit))
    files = snapshot(tmp_path)
    expected = (f"cannot read checkpoint '{prefix}': its object graph (tensor '_CHECKPOINTABLE_OBJECT_GRAPH') "
                f"{problem} {TAMPERED}")
    with tf_bundle.BundleReader(prefix) as reader, pytest.raises(CorruptCheckpointError) as error:
        object_graph.read_object_graph(reader)
    assert str(error.value) == expected
    for command in (["inspect", prefix], ["convert", prefix, tmp_path / "tf1model", "--to", "name"]):
        assert refusal(run_cli, *command) == expected
    assert snapshot(tmp_path) == files


def test_the_unedited_object_checkpoint_converts(tmp_path, object_checkpoint):
    prefix = write_object_checkpoint(tmp_path, *object_checkpoint)
    convert.convert(prefix, str(tmp_path / "tf1model"), to="name")
    with tf_bundle.BundleReader(tmp_path / "tf1model") as reader:
        assert reader.read("global_step").dtype == np.int64 and reader.read("global_step") == 1
        assert reader.read("dense/kernel").tobytes() == object_checkpoint[0]["v/.ATTRIBUTES/VARIABLE_VALUE"].tobytes()


REFERENCES = [(1, "children", 0, "node_id"), (1, "children", 1, "node_id"), (0, "children", 1, "node_id"),
              (1, "slot_variables", 0, "original_variable_node_id"), (1, "slot_variables", 0, "slot_variable_node_id"),
              (1, "slot_variables", 1, "original_variable_node_id"), (1, "slot_variables", 1, "slot_variable_node_id")]
FULL_NAMES = [b"global_step", b"beta1_power", b"dense/kernel", b"dense/kernel/Adam", b"", b"a//b", b"Adam/iter"]


@FUZZ
@given(references=st.lists(st.tuples(st.sampled_from(REFERENCES), st.integers(0, 9)), max_size=3),
       names=st.lists(st.tuples(st.integers(2, 9), st.sampled_from(FULL_NAMES)), max_size=3))
def test_a_crafted_object_graph_converts_to_copies_of_its_tensors_or_is_refused(tmp_path_factory, object_checkpoint,
                                                                               references, names):
    def edit(arrays, nodes):
        for (node, field, position, key), target in references:
            nodes[node][field][position][key] = target
        for node, full_name in names:
            nodes[node]["attributes"][0]["full_name"] = full_name
    directory = tmp_path_factory.mktemp("fuzzed")
    prefix = write_object_checkpoint(directory, *edited(object_checkpoint, edit))
    try:
        convert.convert(prefix, str(directory / "tf1model"), to="name")
    except SubsetSaverError as error:
        assert len(str(error).encode()) < MOST_BYTES and "\n" not in str(error)
        return
    sources = [(value.dtype, value.shape, value.tobytes()) for value in object_checkpoint[0].values()]
    with tf_bundle.BundleReader(directory / "tf1model") as reader:
        for name in reader.names:
            value = reader.read(name)
            if name in ("beta1_power", "beta2_power"):  # computed from the counter and the betas
                continue
            if name == "global_step" and value.dtype == np.int64:  # the counter, its value kept
                assert value == object_checkpoint[0][COUNTER_KEY], name
            else:
                assert (value.dtype, value.shape, value.tobytes()) in sources, name


# ---------------------------------------------------------------------------------
# Silent wrong values: what a name promises
# ---------------------------------------------------------------------------------

VALUE_KEY = "v/.ATTRIBUTES/VARIABLE_VALUE"
COUNTER_KEY = "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE"


def _named_global_step(value):
    def edit(arrays, nodes):
        nodes[2]["attributes"][0]["full_name"] = b"global_step"
        nodes[1]["children"] = nodes[1]["children"][1:]  # no counter: nothing else is global_step
        arrays[VALUE_KEY] = value
    return edit


@pytest.mark.parametrize("value", [np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3),
                                   np.array([7, -8, 9], np.int32), np.array(2.5), np.array([1e30], np.float32)])
def test_a_variable_named_global_step_is_written_as_it_is(tmp_path, object_checkpoint, value):
    prefix = write_object_checkpoint(tmp_path, *edited(object_checkpoint, _named_global_step(value)))
    convert.convert(prefix, str(tmp_path / "tf1model"), to="name")
    written = tf.train.load_checkpoint(str(tmp_path / "tf1model")).get_tensor("global_step")
    assert np.asarray(written).dtype == np.asarray(value).dtype and np.asarray(written).tobytes() == value.tobytes()


@pytest.mark.parametrize("counter, shown", [(np.uint64(2**64 - 1), "18446744073709551615 (uint64"),
                                            (np.uint64(2**63), "9223372036854775808 (uint64")])
def test_an_iteration_counter_int64_cannot_hold_is_refused(tmp_path, run_cli, object_checkpoint, counter, shown):
    prefix = write_object_checkpoint(tmp_path, *edited(object_checkpoint,
                                                       lambda arrays, nodes: arrays.update({COUNTER_KEY: counter})))
    files = snapshot(tmp_path)
    expected = (f"checkpoint '{prefix}': its iteration counter holds {shown}, shape []), which TF1's int64 "
                "global_step cannot hold")
    with pytest.raises(CheckpointMismatchError) as error:
        convert.convert(prefix, str(tmp_path / "tf1model"), to="name")
    assert str(error.value) == expected
    assert refusal(run_cli, "convert", prefix, tmp_path / "tf1model", "--to", "name") == expected
    assert snapshot(tmp_path) == files


def test_a_uint32_counter_becomes_the_same_int64_global_step(tmp_path, object_checkpoint):
    prefix = write_object_checkpoint(tmp_path, *edited(
        object_checkpoint, lambda arrays, nodes: arrays.update({COUNTER_KEY: np.uint32(4_000_000_000)})))
    convert.convert(prefix, str(tmp_path / "tf1model"), to="name")
    step = tf.train.load_checkpoint(str(tmp_path / "tf1model")).get_tensor("global_step")
    assert step.dtype == np.int64 and step == 4_000_000_000


def test_a_bool_byte_other_than_0_or_1_in_a_safetensors_file_is_refused(tmp_path, run_cli):
    path = tmp_path / "flags.safetensors"
    path.write_bytes(safetensors_bytes('{"flags": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}}',
                                       bytes([1, 7, 0])))
    expected = not_readable(path, "tensor 'flags' holds a bool byte other than 0 and 1")
    assert refusal(run_cli, "convert", path, tmp_path / "flags.npz") == expected
    assert not (tmp_path / "flags.npz").exists()


# ---------------------------------------------------------------------------------
# Names no checkpoint can hold
# ---------------------------------------------------------------------------------

UNREADABLE_NAMES = {"": "an empty name", "\x00": "a control character", "w\n": "a control character",
                    "__metadata__": "the name the header keeps for metadata"}
BAD_NAMES = {"a//b": "an empty part (a leading, trailing or doubled '/')", "w\n": "a control character",
             "../w": "a '..' part", "a/": "an empty part (a leading, trailing or doubled '/')",
             "x" * 5000: "longer than 4096 characters"}


def quoted(name):
    return repr(name if len(name) <= 160 else f"{name[:160]}... ({len(name) - 160} more characters)")


@pytest.mark.parametrize("name", UNREADABLE_NAMES, ids=repr)
def test_a_safetensors_name_the_format_cannot_hold_is_refused_reading_and_writing(tmp_path, run_cli, name):
    path = tmp_path / "named.safetensors"
    header = f'{{"ok": {{"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, {json.dumps(name)}: ' \
             '{"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}'
    path.write_bytes(safetensors_bytes(header, bytes(8)))
    files = snapshot(tmp_path)
    expected = not_readable(path, f"a tensor has {UNREADABLE_NAMES[name]}")
    if name != "__metadata__":  # (the package reads that one as the metadata)
        with pytest.raises(CorruptCheckpointError) as error:
            safetensors_file.specs(path)
        assert str(error.value) == expected
        for command in (["inspect", path], ["convert", path, tmp_path / "out.npz"]):
            assert refusal(run_cli, *command) == expected
    out = tmp_path / "out.safetensors"
    with pytest.raises(InvalidNameError) as error:
        safetensors_file.write(out, [(name, np.ones(1, np.float32))], specs=[(name, (1,), "float32")])
    assert str(error.value) == (f"cannot write tensor {name!r} to a safetensors file: it has "
                                f"{UNREADABLE_NAMES[name]}")
    assert snapshot(tmp_path) == files


@pytest.mark.parametrize("name", [name for name in BAD_NAMES if "\n" not in name], ids=lambda name: repr(name[:8]))
def test_a_safetensors_name_no_checkpoint_variable_has_is_refused_by_convert(tmp_path, run_cli, name):
    path = tmp_path / "named.safetensors"
    save_file({name: np.ones(2, np.float32), "ok": np.zeros(1, np.float32)}, str(path))
    files = snapshot(tmp_path)
    expected = (f"converting '{path}' would write {quoted(name)}, which no checkpoint variable is named "
                f"({BAD_NAMES[name]}); leave it out (--keep), or rename it (--remap OLD=NEW)")
    for target in ("out.npz", "tf1model"):
        with pytest.raises(InvalidNameError) as error:
            convert.convert(str(path), str(tmp_path / target), to="name" if target == "tf1model" else None)
        assert str(error.value) == expected
        assert refusal(run_cli, "convert", path, tmp_path / target, *(["--to", "name"] if target == "tf1model"
                                                                       else [])) == expected
    assert snapshot(tmp_path) == files


@pytest.mark.parametrize("name", ["a//b", "w\n", "../w"], ids=repr)
@pytest.mark.parametrize("target", ["out.npz", "out.safetensors"])
def test_a_tensorflow_name_another_format_cannot_hold_is_refused_before_writing(tmp_path, run_cli, name, target):
    prefix = tf_bundle.write(str(tmp_path / "model"), {name: np.ones(2, np.float32), "ok": np.zeros(1, np.float32)})
    files = snapshot(tmp_path)
    expected = (f"converting '{prefix}' would write {quoted(name)}, which no checkpoint variable is named "
                f"({BAD_NAMES[name]}); leave it out (--keep), or rename it (--remap OLD=NEW)")
    with pytest.raises(InvalidNameError) as error:
        convert.convert(prefix, str(tmp_path / target))
    assert str(error.value) == expected and isinstance(error.value, ValueError)
    assert refusal(run_cli, "convert", prefix, tmp_path / target) == expected
    assert snapshot(tmp_path) == files


def test_two_tensors_written_under_one_name_are_an_invalid_name_error(tmp_path, run_cli, object_checkpoint):
    def named_beta1_power(arrays, nodes):  # the variable's recorded name is the one TF1's Adam state gets
        nodes[2]["attributes"][0]["full_name"] = b"beta1_power"
    prefix = write_object_checkpoint(tmp_path, *edited(object_checkpoint, named_beta1_power))
    files = snapshot(tmp_path)
    expected = (f"converting '{prefix}' would write both beta1_power and the computed beta1_power as 'beta1_power'; "
                "leave one out (--keep), or rename it (--remap OLD=NEW)")
    with pytest.raises(InvalidNameError) as error:
        convert.convert(prefix, str(tmp_path / "tf1model"), to="name")
    assert str(error.value) == expected
    assert refusal(run_cli, "convert", prefix, tmp_path / "tf1model", "--to", "name") == expected
    assert snapshot(tmp_path) == files


# ---------------------------------------------------------------------------------
# Write errors: the library's, with their errno
# ---------------------------------------------------------------------------------

WRITE_UNDER_A_FILE_SIZE_LIMIT = textwrap.dedent("""
    import json, os, resource, signal, sys
    from subsetsaver.tools import convert
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    try:
        convert.convert(sys.argv[1], sys.argv[2])
    except Exception as error:
        print(json.dumps([type(error).__name__, isinstance(error, OSError), error.errno, str(error)]))
    print(json.dumps(sorted(os.listdir(os.path.dirname(sys.argv[2])))))
""")


def test_a_write_the_file_system_refuses_is_a_checkpoint_write_error_keeping_its_errno(tmp_path):
    prefix = tf_bundle.write(str(tmp_path / "model"), {"big": np.ones(1 << 20, np.float32)})  # 4 MiB
    out = tmp_path / "out"
    out.mkdir()
    target = str(out / "model.safetensors")
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(ss.__file__)))
    child = subprocess.run([sys.executable, "-c", WRITE_UNDER_A_FILE_SIZE_LIMIT, prefix, target],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": package_root})
    failure, listing = child.stdout.splitlines()
    assert json.loads(failure) == ["CheckpointWriteError", True, 27, f"cannot write '{target}': File too large; "
                                   "nothing was written under that name"]
    assert json.loads(listing) == []


# ---------------------------------------------------------------------------------
# Messages: short, whatever the input holds
# ---------------------------------------------------------------------------------

HOSTILE_CHARACTERS = st.sampled_from(["\u0301", "\u200b", "\u202e", "\x00", "\t", "\r", "\n", "\ufeff", "界", "\U0001f600",
                                      "'", '"', "(", ")", "|", "a", " ", "\\", "\udcff"])


@FUZZ
@given(st.tuples(st.sampled_from(["", "scope('a') ", "name('", "regex('[", "trainable() | "]),
                 st.lists(st.tuples(HOSTILE_CHARACTERS, st.integers(1, 3000)), min_size=1, max_size=4)))
def test_a_selector_syntax_error_is_under_2_kb_whatever_the_text(case):
    start, runs = case
    text = start + "".join(character * count for character, count in runs)
    try:
        ss.parse(text)
    except SelectorSyntaxError as error:
        assert len(str(error).encode("utf-8", "surrogatepass")) < MOST_BYTES, (len(str(error)), text[:40])


def test_ten_thousand_combining_accents_are_one_column_of_the_excerpt(run_cli):
    text = "scope('a')" + "\u0301" * 10000
    expected = f"unexpected character '\u0301'\n  scope('a'){chr(0x301) * 60}...\n            ^"
    with pytest.raises(SelectorSyntaxError) as error:
        ss.parse(text)
    assert str(error.value) == expected and unicodedata.combining(text[-1])


@pytest.mark.parametrize("key", [b"x" * 100_000, "é".encode() * 30_000, b"\x01" * 5000])
def test_a_long_crafted_key_is_quoted_in_part(tmp_path, run_cli, key):
    crafted = Crafted()
    crafted.entries[key] = entry_proto(77, [1])
    prefix = crafted.write(tmp_path)
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in key.decode())
    expected = (f"cannot read checkpoint '{prefix}': tensor '{shown[:160]}... ({len(shown) - 160} more characters)' "
                f"declares an unknown dtype (77) {TAMPERED}")
    assert refusal(run_cli, "inspect", prefix) == expected


def test_a_header_of_five_thousand_bad_consumers_is_quoted_in_part(tmp_path, run_cli):
    crafted = Crafted()
    crafted.header = header_proto(bad_consumers=[2] * 5000 + [1])
    prefix = crafted.write(tmp_path)
    listed = str([2] * 5000 + [1])
    expected = (f"cannot read checkpoint '{prefix}': '{prefix}.index' declares that readers of format version 1 must "
                f"not read it (bad_consumers {listed[:160]}... ({len(listed) - 160} more characters)) (written by a "
                "newer TensorFlow); read it with the TensorFlow version that wrote it")
    assert refusal(run_cli, "inspect", prefix) == expected


def test_a_shape_of_254_huge_dimensions_is_quoted_in_part(tmp_path, run_cli):
    crafted = Crafted()
    crafted.entries[b"small"] = entry_proto(1, [2**62] * 254, size=12)
    prefix = crafted.write(tmp_path)
    dims = ", ".join([str(2**62)] * 8)
    expected = (f"cannot read checkpoint '{prefix}': tensor 'small' declares the shape [{dims}, ... (254 dimensions)] "
                f"of 2**15748 or more elements, more than an int64 counts {TAMPERED}")
    assert refusal(run_cli, "inspect", prefix) == expected

