"""Kills and races against every writer, through the command line and the library.

Each writer (``convert`` to a name-based bundle, to ``--to object``, to ``.npz`` and to
``.safetensors``; ``convert --map`` to sharded safetensors; ``rewrite``, ``average``, ``slim``;
``ss.save_npz``; ``plan.save``) writes OVER an
existing output, with other values, in a child process (``tests/kill_util.py``) that is SIGKILLed:

* just before each change it makes to a final name (every step of its publish, so late in
  the write too; learned from a recording run), and
* at moments drawn from a seed during its write (``SUBSETSAVER_KILL_SEED``; the number of
  them per writer: ``SUBSETSAVER_KILL_TIMED``).

After every kill the output, read with TensorFlow's reader (bundles), numpy (``.npz``) or the
safetensors package (a sharded output through its index, as transformers reads it), and with the
library's reader, is either the previous or the new
checkpoint, bit for bit, never neither; a bundle's ``checkpoint`` state file names one that
restores whole. After the next successful write the directory holds exactly what one clean
write leaves: no temporary file. Two writers of one output at once (``SUBSETSAVER_RACE_TRIALS``
times each): the second is refused while the first is stopped midway, with one line naming the
first (its pid), and the first then completes.
``convert`` of a ~256 MB checkpoint of 64 MB tensors to ``.npz`` and ``.safetensors`` peaks at
no more than two tensors and 64 MB (the child's ``ru_maxrss``).
"""

import dataclasses
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys

import graphs
import numpy as np
import pytest
from kill_util import Zygote, read_log, wait_until_stopped
from test_layout_maps import gpt2_checkpoint

from subsetsaver.formats.tf import bundle as tf_bundle

SEED = int(os.environ.get("SUBSETSAVER_KILL_SEED", "24"))
TIMED_KILLS = int(os.environ.get("SUBSETSAVER_KILL_TIMED", "1"))
RACE_TRIALS = int(os.environ.get("SUBSETSAVER_RACE_TRIALS", "3"))
MODEL = {"fc_units": 256}  # mnist_cnn with Adam and batch norm: about 10 MB with the slots
OTHER = {"old": "new", "new": "old"}
NPZ_MANIFEST = "__subsetsaver__.json"


@pytest.fixture(autouse=True)
def _report_the_seed():
    print(f"kill moments drawn with seed {SEED}; rerun with SUBSETSAVER_KILL_SEED={SEED}")


# ---------------------------------------------------------------------------------
# Sources: the same model at two steps, as TensorFlow checkpoints and portable files
# ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Sources:
    root: str
    checkpoint: dict  # 'old'/'new' -> TF name-based prefix written by Saver.save
    npz: dict         # 'old'/'new' -> .npz written by ss.save_npz
    dense: dict       # 'old'/'new' -> TF1 checkpoint of net/dense, net/out for --to object
    builder: str      # path/to/file.py:build of the Keras 3 model of `dense`
    gpt2: dict = dataclasses.field(default_factory=dict)  # 'old'/'new' -> openai/gpt-2-named checkpoint, for --map


KERAS_BUILDER = """
import keras


def build():
    return keras.Sequential([keras.Input((256,)), keras.layers.Dense(1024, name="dense"),
                             keras.layers.Dense(512, name="out")], name="net")
"""


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    import tensorflow as tf

    import subsetsaver as ss

    v1 = tf.compat.v1
    root = str(tmp_path_factory.mktemp("sources"))
    built = graphs.mnist_cnn(**MODEL)
    found = Sources(root, {}, {}, {}, os.path.join(root, "builders.py:build"))
    with built.graph.as_default():
        saver = v1.train.Saver(built.graph.get_collection("variables"))
    with v1.Session(graph=built.graph) as sess:
        sess.run(v1.global_variables_initializer())
        for step, values in enumerate(("old", "new")):
            sess.run(built.tensors["train_op"], graphs.random_feed(built, seed=step))
            found.checkpoint[values] = saver.save(sess, os.path.join(root, values, "model"), write_meta_graph=False)
            found.npz[values] = ss.save_npz(sess, os.path.join(root, f"{values}.npz"))
    for seed, values in ((1, "old"), (2, "new")):
        graph = tf.Graph()
        with graph.as_default():
            for name, shape in (("net/dense/kernel", [256, 1024]), ("net/dense/bias", [1024]),
                                ("net/out/kernel", [1024, 512]), ("net/out/bias", [512])):
                v1.get_variable(name, initializer=tf.random.stateless_normal(shape, seed=[seed, len(name)]))
            dense_saver = v1.train.Saver()
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            found.dense[values] = dense_saver.save(sess, os.path.join(root, f"dense-{values}", "model"),
                                                   write_meta_graph=False)
    with open(os.path.join(root, "builders.py"), "w") as handle:
        handle.write(KERAS_BUILDER)
    for seed, values in ((1, "old"), (2, "new")):
        found.gpt2[values], _ = gpt2_checkpoint(os.path.join(root, f"gpt2-{values}"), seed=seed)
    return found


@pytest.fixture(scope="module")
def zygotes():
    """'plain': the package alone, as the file commands run; 'tf': TensorFlow and Keras imported too;
    'library': TensorFlow, and the graphs of the library saves built before its children fork (a
    child forked after a graph was built cannot run Keras: kept apart from 'tf'). They import while
    the sources are written."""
    started = {}
    try:
        started["plain"] = Zygote()
        started["tf"] = Zygote(preload=["tensorflow", "keras"])
        started["library"] = Zygote(preload=["tensorflow", "subsetsaver.portable"])
        yield started
    finally:
        for zygote in started.values():
            zygote.close()


# ---------------------------------------------------------------------------------
# The writers
# ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Writer:
    id: str
    zygote: str      # which zygote runs it
    kind: str        # what it writes: 'bundle', 'npz' or 'safetensors'
    output: str      # the output's name in its directory
    job: object      # (sources, values, output path) -> the job's fields (argv=..., or a library job)

    def __str__(self):
        return self.id


def _library(kind):
    def job(sources, values, output):
        return {"kind": kind, "builder": "mnist_cnn", "builder_args": MODEL, "values": sources.checkpoint[values],
                "output": output}
    return job


WRITERS = {writer.id: writer for writer in [
    Writer("convert-name", "plain", "bundle", "model",
           lambda s, v, out: {"argv": ["convert", s.npz[v], out, "--to", "name", "--force"]}),
    Writer("convert-object", "tf", "bundle", "model",
           lambda s, v, out: {"argv": ["convert", s.dense[v], out, "--to", "object", "--model", s.builder, "--force"]}),
    Writer("convert-npz", "plain", "npz", "model.npz",
           lambda s, v, out: {"argv": ["convert", s.checkpoint[v], out, "--force"]}),
    Writer("convert-safetensors", "plain", "safetensors", "model.safetensors",
           lambda s, v, out: {"argv": ["convert", s.checkpoint[v], out, "--force"]}),
    Writer("convert-map-sharded", "plain", "sharded", "model.safetensors.index.json",
           lambda s, v, out: {"argv": ["convert", s.gpt2[v], os.path.dirname(out), "--map", "gpt2-to-hf",
                                       "--max-shard-size", "2KB", "--force"]}),
    Writer("rewrite", "plain", "bundle", "model",
           lambda s, v, out: {"argv": ["rewrite", s.checkpoint[v], "-o", out, "--remap", "fc/=dense/", "--force"]}),
    Writer("average", "plain", "bundle", "model",  # new: the same two checkpoints, the other way round
           lambda s, v, out: {"argv": ["average", s.checkpoint[v], s.checkpoint[OTHER[v]], "-o", out,
                                       "--weights", "1,3", "--force"]}),
    Writer("slim", "plain", "bundle", "model",
           lambda s, v, out: {"argv": ["slim", s.checkpoint[v], "--keep", "trainable() | bn_stats()", "-o", out,
                                       "--force"]}),
    Writer("save_npz", "library", "npz", "model.npz", _library("save_npz")),
    Writer("plan.save", "library", "bundle", "model", _library("plan.save")),
]}


# ---------------------------------------------------------------------------------
# Reading what a writer left
# ---------------------------------------------------------------------------------


def _tensorflow_reader(prefix):
    import tensorflow as tf

    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def _numpy_reader(path):
    """The arrays of a portable file as numpy reads them (its manifest, which records when it was written,
    is checked by the library's reader)."""
    with np.load(path, allow_pickle=False) as opened:
        return {name: opened[name] for name in opened.files if name != NPZ_MANIFEST}


def _safetensors_reader(path):
    from safetensors.numpy import load_file

    return load_file(path)


def _sharded_safetensors_reader(index_path):
    """A sharded output as transformers reads it: the index's weight map, each shard by the safetensors package."""
    import json

    from safetensors.numpy import load_file

    with open(index_path) as handle:
        weight_map = json.load(handle)["weight_map"]
    arrays = {}
    for shard in sorted(set(weight_map.values())):
        loaded = load_file(os.path.join(os.path.dirname(index_path), shard))
        arrays.update((name, loaded[name]) for name, where in weight_map.items() if where == shard)
    return arrays


def _library_reader(path):
    from subsetsaver import catalog

    return dict(catalog.read_tensors(path, catalog.file_catalog(path).ordered_names))


READERS = {
    "bundle": {"tensorflow": _tensorflow_reader, "subsetsaver": _library_reader},
    "npz": {"numpy": _numpy_reader, "subsetsaver": _library_reader},
    "safetensors": {"safetensors": _safetensors_reader, "subsetsaver": _library_reader},
    "sharded": {"safetensors": _sharded_safetensors_reader, "subsetsaver": _library_reader},
}


def fingerprints(kind, path) -> dict:
    """reader -> {name: (dtype, shape, sha256 of the bytes)} of the checkpoint at ``path``, read whole."""
    result = {}
    for reader, read in READERS[kind].items():
        arrays = read(path)
        result[reader] = {name: (np.asarray(value).dtype.str, np.shape(value),
                                 hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest())
                          for name, value in arrays.items()}
    return result


def outcome(kind, path, expected, where) -> str:
    """'old' or 'new': which of ``expected`` (values -> fingerprints) the checkpoint at ``path`` is, for
    every reader; AssertionError naming what is there otherwise."""
    try:
        found = fingerprints(kind, path)
    except Exception as error:  # noqa: BLE001  (any reader's failure: neither checkpoint restores)
        raise AssertionError(f"{where}: '{path}' is neither the previous nor the new checkpoint: "
                             f"{type(error).__name__}: {str(error).splitlines()[0][:300]}; files: "
                             f"{listing(os.path.dirname(path))}") from None
    for values, wanted in expected.items():
        if found == wanted:
            return values
    reader = next(iter(found))
    mixed = {name: [v for v in expected if expected[v][reader].get(name) == fingerprint]
             for name, fingerprint in found[reader].items()}
    raise AssertionError(f"{where}: '{path}' is neither the previous nor the new checkpoint whole; per tensor "
                         f"({reader}): {mixed}; files: {listing(os.path.dirname(path))}")


def state_outcome(directory, expected, where) -> str:
    """Which checkpoint the ``checkpoint`` state file of ``directory`` names, read whole by TensorFlow."""
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(directory)
    assert latest is not None, f"{where}: the state file of '{directory}' names no checkpoint: {listing(directory)}"
    return outcome("bundle", latest, expected, f"{where} (the checkpoint the state file names)")


def listing(directory) -> list:
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


# ---------------------------------------------------------------------------------
# Running writers
# ---------------------------------------------------------------------------------


class Bench:
    """One writer's runs: jobs in child processes of its zygote, each with its own log and outputs."""

    def __init__(self, writer, zygote, sources, logs):
        self.writer, self.zygote, self.sources, self.logs = writer, zygote, sources, logs
        self.runs = 0

    def start(self, values, directory, **kill):
        self.runs += 1
        base = os.path.join(self.logs, f"{self.writer.id}-{self.runs}")
        job = self.writer.job(self.sources, values, os.path.join(directory, self.writer.output))
        pid = self.zygote.run(**job, watch=directory, log=base + ".log", out=base + ".out", err=base + ".err",
                              **kill)
        return pid, base

    def run(self, values, directory, timeout=300, **kill):
        """(wait status, log records, stderr text) of one job run to its end."""
        pid, base = self.start(values, directory, **kill)
        status = self.zygote.wait(pid, timeout)
        return status, read_log(base + ".log"), _text(base + ".err")

    def write(self, values, directory, where):
        """Run a job that must succeed; its log."""
        status, log, err = self.run(values, directory)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"{where}: {self.writer} failed: {err}"
        return log


def _text(path):
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


@dataclasses.dataclass
class Reference:
    """What clean writes of the writer leave: fingerprints of 'old' and 'new'; the names in the directory
    after writing 'old', and after writing 'new' over it (a writer may alternate its data files' names);
    every final name; and the log of writing 'new' over 'old'."""

    expected: dict
    listings: list
    final_names: list
    log: list


_references = {}


def reference(writer, zygote, sources, tmp_path_factory) -> Reference:
    """Write 'old', then 'new' over it, in a fresh directory (once per writer)."""
    if writer.id not in _references:
        directory = str(tmp_path_factory.mktemp(f"reference-{writer.id}"))
        bench = Bench(writer, zygote, sources, str(tmp_path_factory.mktemp(f"logs-{writer.id}")))
        path = os.path.join(directory, writer.output)
        bench.write("old", directory, "reference")
        old = fingerprints(writer.kind, path)
        listings = [listing(directory)]
        log = bench.write("new", directory, "reference")
        new = fingerprints(writer.kind, path)
        listings.append(listing(directory))
        for reader in old:
            assert old[reader] != new[reader], f"{writer}: 'old' and 'new' hold the same values ({reader})"
        finals = sorted(set(listings[0]) | set(listings[1]))
        _references[writer.id] = Reference({"old": old, "new": new}, listings, finals, log)
    return _references[writer.id]


def kill_moments(ref, rng) -> list:
    """Before every change of a final name the recording run made, then TIMED_KILLS moments of its write
    (from the first file it opened for writing, or from the start when native code writes first)."""
    finals = sum(1 for record in ref.log if record.get("name") in ref.final_names)
    moments = [{"kill_before": k} for k in range(1, finals + 1)]
    end = next(record["t"] for record in ref.log if record["event"] == "end")
    first = next((record for record in ref.log if record["event"] not in ("begin", "end")), None)
    start = first["t"] if first is not None and first["event"] == "open" else 0.0
    moments += [{"kill_after": round(rng.uniform(start, end), 4)} for _ in range(TIMED_KILLS)]
    return moments


# ---------------------------------------------------------------------------------
# SIGKILL at every step of the publish and at seeded moments of the write
# ---------------------------------------------------------------------------------

KILL_CASES = list(WRITERS)


@pytest.mark.parametrize("writer_id", KILL_CASES)
def test_a_kill_leaves_the_previous_or_the_new_checkpoint_whole(writer_id, zygotes, sources, tmp_path,
                                                               tmp_path_factory):
    writer = WRITERS[writer_id]
    zygote = zygotes[writer.zygote]
    ref = reference(writer, zygote, sources, tmp_path_factory)
    directory = str(tmp_path / "out")
    os.makedirs(directory)
    bench = Bench(writer, zygote, sources, str(tmp_path))
    path = os.path.join(directory, writer.output)
    bench.write("old", directory, "setup")
    current, history = "old", []
    for trial, moment in enumerate(kill_moments(ref, random.Random(f"{SEED}-{writer_id}"))):
        where = f"{writer} trial {trial}, killed {moment} (seed {SEED}), writing {OTHER[current]!r} over {current!r}"
        status, _, err = bench.run(OTHER[current], directory, final_names=ref.final_names, **moment)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        assert killed or os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"{where}: {err}"
        left = outcome(writer.kind, path, ref.expected, where)
        if not killed:
            assert left == OTHER[current], f"{where}: the write succeeded but the output holds {left!r}"
        if writer.kind == "bundle":
            state_outcome(directory, ref.expected, where)
        history.append((moment, "killed" if killed else "finished", left))
        current = left
    print(f"\n{writer}: {history}")
    assert any(how == "killed" and "kill_before" in moment for moment, how, _ in history), \
        f"{writer}: no kill landed before a change of a final name: {history}"
    bench.write(OTHER[current], directory, "the write after the kills")
    assert outcome(writer.kind, path, ref.expected, "after the kills") == OTHER[current]
    assert listing(directory) in ref.listings, (
        f"{writer}: after a successful write, the directory holds {listing(directory)}; a clean write leaves "
        f"{' or '.join(map(str, ref.listings))}")


# ---------------------------------------------------------------------------------
# Two writers of one output
# ---------------------------------------------------------------------------------

RACE_CASES = [(writer, writer) for writer in WRITERS] + [("plan.save", "convert-name")]  # the lock is one for all


@pytest.mark.parametrize("first_id, second_id", RACE_CASES)
def test_a_second_writer_of_one_output_is_refused_naming_the_first(first_id, second_id, zygotes, sources, tmp_path,
                                                                  tmp_path_factory):
    first_writer, second_writer = WRITERS[first_id], WRITERS[second_id]
    ref = reference(first_writer, zygotes[first_writer.zygote], sources, tmp_path_factory)
    first = Bench(first_writer, zygotes[first_writer.zygote], sources, str(tmp_path))
    second = Bench(second_writer, zygotes[second_writer.zygote], sources, str(tmp_path))
    directory = str(tmp_path / "out")
    os.makedirs(directory)
    path = os.path.join(directory, first_writer.output)
    first.write("old", directory, "setup")
    current = "old"
    for trial in range(RACE_TRIALS):
        where = f"{first_writer} then {second_writer}, trial {trial}"
        pid, base = first.start(OTHER[current], directory, final_names=ref.final_names, stop_before=1)
        try:
            assert wait_until_stopped(pid), f"{where}: the first writer ended before it published: {_text(base + '.err')}"
            before = (listing(directory), outcome(first_writer.kind, path, ref.expected, where))
            status, _, err = second.run(current, directory, timeout=120)
            after = (listing(directory), outcome(first_writer.kind, path, ref.expected, where))
        finally:
            os.kill(pid, signal.SIGCONT)
            first_status = first.zygote.wait(pid)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0, (
            f"{where}: the second writer was not refused while the first (pid {pid}) was midway: {err}")
        lines = err.strip().splitlines()
        assert len(lines) == 1 and str(pid) in lines[0] and len(lines[0]) < 2048, (
            f"{where}: the refusal is not one line naming the first writer (pid {pid}): {err!r}")
        assert after == before, f"{where}: the refused writer changed the output: {before} -> {after}"
        assert os.WIFEXITED(first_status) and os.WEXITSTATUS(first_status) == 0, _text(base + ".err")
        assert outcome(first_writer.kind, path, ref.expected, where) == OTHER[current]
        current = OTHER[current]


# ---------------------------------------------------------------------------------
# Memory: two tensors, not the whole checkpoint
# ---------------------------------------------------------------------------------

BIG_TENSORS = 4
BIG_ELEMENTS = 16 << 20  # float32: 64 MiB each, 256 MiB in all


def big_value(index):
    return np.random.default_rng(index).random(BIG_ELEMENTS, dtype=np.float32)


# Linux keeps a process's peak RSS across exec, so a child forked from this (large) test process would
# report this process's size: a small launcher starts the command and reports its child's ru_maxrss.
PEAK_RSS_LAUNCHER = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:])
_, status, usage = os.wait4(child.pid, 0)
print(usage.ru_maxrss * 1024)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def peak_rss(command, env):
    """(exit code, stderr, peak resident bytes) of ``command`` run in a fresh process."""
    result = subprocess.run([sys.executable, "-c", PEAK_RSS_LAUNCHER, *command], capture_output=True, text=True,
                            env=env)
    return result.returncode, result.stderr, int(result.stdout.split()[-1])


@pytest.fixture(scope="module")
def big_conversions(tmp_path_factory):
    """Convert a 256 MiB TensorFlow checkpoint to .npz and .safetensors on the command line:
    (tensor names, {format: (output path, peak RSS of the converting process in bytes)})."""
    import tensorflow as tf

    root = str(tmp_path_factory.mktemp("big"))
    prefix = os.path.join(root, "model")
    names = [f"layer_{i}/kernel" for i in range(BIG_TENSORS)]
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * BIG_TENSORS,
                      tensors=[tf.constant(big_value(i)) for i in range(BIG_TENSORS)])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    results = {}
    for extension in ("npz", "safetensors"):
        output = os.path.join(root, f"model.{extension}")
        code, err, peak = peak_rss([sys.executable, "-m", "subsetsaver", "convert", prefix, output], env)
        assert code == 0, err
        results[extension] = (output, peak)
    copy = os.path.join(root, "copy", "model")
    os.makedirs(os.path.dirname(copy))
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copyfile(prefix + suffix, copy + suffix)
    output = os.path.join(root, "average", "model")
    code, err, peak = peak_rss([sys.executable, "-m", "subsetsaver", "average", prefix, copy, "-o", output,
                                "--keep", "everything()"], env)
    assert code == 0, err
    results["average"] = (output, peak)
    return names, results


def test_a_large_conversion_reads_back_bit_exact(big_conversions):
    import json

    from safetensors.numpy import load_file

    names, results = big_conversions
    tensors = load_file(results["safetensors"][0])
    assert sorted(tensors) == sorted(names)
    with tf_bundle.BundleReader(results["average"][0]) as averaged:  # the mean of two copies: the same bits
        assert {name: averaged.read(name).tobytes() for name in names} == \
               {name: big_value(index).tobytes() for index, name in enumerate(names)}
    with np.load(results["npz"][0], allow_pickle=False) as portable:
        members = {entry["name"]: entry["member"] for entry in json.loads(bytes(portable[NPZ_MANIFEST]))["arrays"]}
        assert sorted(members) == sorted(names)
        for index, name in enumerate(names):
            expected = big_value(index).tobytes()
            for value in (tensors.pop(name), portable[members[name][:-len(".npy")]]):
                assert value.dtype == np.float32 and value.shape == (BIG_ELEMENTS,)
                assert value.tobytes() == expected, name


@pytest.mark.parametrize("extension", ["npz", "safetensors", "average"])
def test_a_large_conversion_holds_two_tensors_at_most(big_conversions, extension):
    _, results = big_conversions
    peak = results[extension][1]
    bound = 2 * BIG_ELEMENTS * 4 + (64 << 20)
    print(f"\n{extension}: peak RSS {peak / 2**20:.0f} MiB, bound {bound / 2**20:.0f} MiB")
    assert peak <= bound, f"{extension} peaked at {peak / 2**20:.0f} MiB (> {bound / 2**20:.0f} MiB)"
