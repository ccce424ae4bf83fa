"""Staged TensorFlow saves: a process that dies at any step of a save leaves a whole checkpoint.

A child process (forked from a *zygote* that imported TensorFlow once) saves step 1 to a
prefix, fills every variable with step 2's values and saves again, dying with
``os._exit`` at one chosen step of :func:`subsetsaver.staging.save_staged`. The test then
checks the directory: the state file names a whole checkpoint holding step 1 or step 2,
a plan restores it bit-exact, and no ``.index`` under a final name is torn. The random
SIGKILL trials are in ``test_crash_safety.py``; these cover every step deterministically.
"""

import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import subsetsaver as ss
from subsetsaver import storage
from subsetsaver.formats import subset_manifest as manifest_module
from subsetsaver.planning import staging
from subsetsaver.storage import local as files

v1 = tf.compat.v1

# step name -> where the child dies (see child_save)
KILL_POINTS = ["before the first data file", "before the index", "after the index", "before the final state",
               "before deleting old checkpoints"]


def build(sharded=False, finalize=True):
    """(graph, plan, fill op, step placeholder): a [1000] float, a partitioned [6, 50] and the global step."""
    graph = tf.Graph()
    with graph.as_default():
        step = v1.placeholder(tf.int64, [], name="step")
        weights = v1.get_variable("w", [1000], initializer=v1.zeros_initializer(), use_resource=True)
        split = v1.get_variable("split", [6, 50], initializer=v1.zeros_initializer(),
                                partitioner=v1.fixed_size_partitioner(2), use_resource=True)
        global_step = v1.train.get_or_create_global_step()
        value = tf.cast(step, tf.float32)
        fill = tf.group(global_step.assign(step), weights.assign(tf.fill([1000], value)),
                        *[part.assign(tf.fill(tf.shape(part), value + 0.5)) for part in split])
    the_plan = ss.plan(ss.everything(), graph, max_to_keep=2, sharded=sharded)
    if finalize:
        graph.finalize()
    return graph, the_plan, fill, step


def child_save(directory, kill_point, sharded, numbered):
    """Save step 1, then step 2 dying at ``kill_point`` (None: survive); numbered: model-1, model-2."""
    graph, the_plan, fill, step = build(sharded)
    original_write_state, original_rename = staging._write_state, storage.rename

    def write_state(saver, directory_, latest, all_paths, latest_filename):
        if kill_point == "before the final state":
            os._exit(9)
        original_write_state(saver, directory_, latest, all_paths, latest_filename)

    def rename(source, target):
        if kill_point == "before the first data file" or (
                kill_point == "before the index" and target.endswith(".index")):
            os._exit(9)
        original_rename(source, target)
        if kill_point == "after the index" and target.endswith(".index"):
            os._exit(9)

    with v1.Session(graph=graph) as sess:
        the_plan.restore_or_initialize(sess, None)
        sess.run(fill, {step: 1})
        the_plan.save(sess, os.path.join(directory, "model"), global_step=1 if numbered else None)
        sess.run(fill, {step: 2})
        staging._write_state, storage.rename = write_state, rename
        saver = the_plan.saver
        if kill_point == "before deleting old checkpoints":
            saver._MaybeDeleteOldCheckpoints = lambda **_: os._exit(9)
        the_plan.save(sess, os.path.join(directory, "model"), global_step=2 if numbered else None)
    os._exit(0)


STAGING = files.TEMPORARY_MARK


ZYGOTE = """
import json, os, sys
sys.path[:0] = json.loads(sys.argv[1])
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow
import subsetsaver
import test_staging
for line in sys.stdin:
    trial = json.loads(line)
    pid = os.fork()
    if pid == 0:
        try:
            test_staging.child_save(**trial)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), flush=True)
"""


@pytest.fixture(scope="module")
def zygote():
    process = subprocess.Popen([sys.executable, "-c", ZYGOTE, json.dumps(sys.path)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def run(**trial):
        process.stdin.write(json.dumps(trial) + "\n")
        process.stdin.flush()
        return int(process.stdout.readline())

    try:
        yield run
    finally:
        process.stdin.close()
        process.wait(60)


def read_checkpoint(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def assert_step(values, step, where):
    assert sorted(values) == ["global_step", "split", "w"], where
    assert values["global_step"] == step, f"{where}: global_step {values['global_step']}, not {step}"
    assert np.array_equal(values["w"], np.full([1000], step, np.float32)), where
    assert np.array_equal(values["split"], np.full([6, 50], step + 0.5, np.float32)), where


@pytest.fixture(scope="module")
def checker():
    graph, the_plan, _, _ = build()
    with v1.Session(graph=graph) as sess:
        def restore(directory):
            report = the_plan.restore_or_initialize(sess, directory)
            fetched = sess.run({name: the_plan.catalog.variables([name]) for name in the_plan.catalog.ordered_names})
            values = {name: np.concatenate(parts) if len(parts) > 1 else parts[0] for name, parts in fetched.items()}
            return report, values

        yield restore


@pytest.mark.parametrize("sharded", [False, True], ids=["SaveV2", "sharded"])
@pytest.mark.parametrize("kill_point", KILL_POINTS)
def test_a_kill_at_any_step_of_an_overwrite_leaves_a_whole_checkpoint(zygote, checker, tmp_path, kill_point,
                                                                       sharded):
    assert zygote(directory=str(tmp_path), kill_point=kill_point, sharded=sharded, numbered=False) == 9
    latest = tf.train.latest_checkpoint(str(tmp_path))
    assert latest is not None, os.listdir(tmp_path)
    report, values = checker(str(tmp_path))
    final = str(tmp_path / "model")
    assert report.checkpoint == latest == final  # the state file only ever names the final prefix
    step = 2 if KILL_POINTS.index(kill_point) >= KILL_POINTS.index("after the index") else 1
    assert_step(values, step, kill_point)  # the old checkpoint until the new .index replaces it, then the new
    assert_step(read_checkpoint(final), step, "the final name, read by TensorFlow")


@pytest.mark.parametrize("kill_point", KILL_POINTS[1:])
def test_a_kill_during_a_numbered_save_keeps_the_previous_checkpoint(zygote, checker, tmp_path, kill_point):
    assert zygote(directory=str(tmp_path), kill_point=kill_point, sharded=False, numbered=True) == 9
    report, values = checker(str(tmp_path))
    step = 2 if kill_point == "before deleting old checkpoints" else 1
    assert report.checkpoint == str(tmp_path / f"model-{step}")
    assert_step(values, step, kill_point)
    assert_step(read_checkpoint(str(tmp_path / "model-1")), 1, "model-1")
    if os.path.exists(tmp_path / "model-2.index"):  # published: whole
        assert_step(read_checkpoint(str(tmp_path / "model-2")), 2, "model-2")


def test_the_next_save_removes_what_a_killed_save_left(zygote, tmp_path):
    assert zygote(directory=str(tmp_path), kill_point="before the index", sharded=True, numbered=True) == 9
    left = sorted(name for name in os.listdir(tmp_path) if STAGING in name)
    assert left, "the killed save left no staged files to clean up"
    assert zygote(directory=str(tmp_path), kill_point=None, sharded=False, numbered=True) == 0
    names = sorted(os.listdir(tmp_path))
    assert not [name for name in names if STAGING in name], names
    # max_to_keep=2 kept model-1 and model-2 of the surviving process. model-1 replaced the dead process's whole
    # model-1, so it took the other shard count's names; the dead process's model-2 data files, published
    # without their .index, were garbage and went first, so model-2 has the names the Saver gives.
    assert names == ["checkpoint", "model-1.data-00000-of-00002", "model-1.data-00001-of-00002", "model-1.index",
                     "model-1.meta", "model-1.subset.json", "model-2.data-00000-of-00001", "model-2.index",
                     "model-2.meta", "model-2.subset.json"]
    assert read_checkpoint(str(tmp_path / "model-2"))["global_step"] == 2
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert state.model_checkpoint_path == str(tmp_path / "model-2")
    assert list(state.all_model_checkpoint_paths) == [str(tmp_path / "model-1"), str(tmp_path / "model-2")]


def test_temporaries_of_a_live_process_or_another_host_are_left_alone(tmp_path):
    host = socket.gethostname()
    mine = os.path.basename(staging.staging_prefix(str(tmp_path / "model-3")))
    other_host = ".model-4.tmp-elsewhere-1-0123abcd"
    dead = f".model-5.tmp-{host}-999999999-89abcdef"
    left = [name + suffix for name in (mine, other_host) for suffix in (".index", ".data-00000-of-00001")]
    abandoned = [dead + ".index", dead + "-link.data-00000-of-00001", dead + ".data-00000-of-00001.tempstate123",
                 f"model-5.subset.json.tmp-{host}-999999999-0a1b2c3d", f"model-6.npz.tmp-{host}-999999999-4e5f6a7b"]
    for name in left + abandoned + ["model-7.tmp-notes.txt"]:
        (tmp_path / name).write_bytes(b"x")
    os.makedirs(tmp_path / (dead + "_temp"))
    assert files.remove_abandoned(str(tmp_path)) == sorted(abandoned + [dead + "_temp"])
    assert sorted(os.listdir(tmp_path)) == sorted(left + ["model-7.tmp-notes.txt"])


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="a zombie is told apart through /proc")
def test_temporaries_of_a_killed_writer_not_yet_reaped_are_removed(tmp_path):
    """A writer killed a moment ago is a zombie until its parent reaps it: it holds nothing, and a writer
    starting then removes what it left."""
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killed.kill()
    deadline = time.monotonic() + 30
    while open(f"/proc/{killed.pid}/stat", "rb").read().rsplit(b")", 1)[1].split()[0] != b"Z":
        assert time.monotonic() < deadline, "the killed process never became a zombie"
        time.sleep(0.01)
    try:
        left = f".model-8.tmp-{socket.gethostname()}-{killed.pid}-0123abcd.index"
        (tmp_path / left).write_bytes(b"x")
        assert files.remove_abandoned(str(tmp_path)) == [left]
    finally:
        killed.wait()


def save_in_turn(directory, steps, **options):
    """For each ``value: global_step`` of ``steps``: fill the variables with value, save as model-STEP."""
    graph, the_plan, fill, step = build()
    with v1.Session(graph=graph) as sess:
        the_plan.restore_or_initialize(sess, None)
        for value, global_step in steps.items():
            sess.run(fill, {step: value})
            the_plan.save(sess, str(directory / "model"), global_step=global_step, **options)


def test_max_to_keep_retires_manifests_with_their_checkpoints(tmp_path):
    save_in_turn(tmp_path, {1: 1, 2: 2, 3: 3}, write_meta_graph=False)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model-2.data-00000-of-00001", "model-2.index",
                                            "model-2.subset.json", "model-3.data-00000-of-00001", "model-3.index",
                                            "model-3.subset.json"]
    assert manifest_module.read_manifest(str(tmp_path / "model-2"))["checkpoint"] == "model-2"


def test_a_rewritten_prefix_keeps_its_manifest_and_the_state_lists_it_once(tmp_path):
    save_in_turn(tmp_path, {1: 1, 2: 1, 3: 2})
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert list(state.all_model_checkpoint_paths) == [str(tmp_path / "model-1"), str(tmp_path / "model-2")]
    assert_step(read_checkpoint(str(tmp_path / "model-1")), 2, "model-1 rewritten")
    for prefix in ("model-1", "model-2"):
        assert manifest_module.read_manifest(str(tmp_path / prefix))["checkpoint"] == prefix


def test_monitored_training_session_saves_through_the_staged_saver(tmp_path, monkeypatch):
    """The scaffold hands plan.saver to MonitoredTrainingSession: its CheckpointSaverHook's saves are staged too."""
    staged = []
    original = staging.staging_prefix
    monkeypatch.setattr(staging, "staging_prefix", lambda final: staged.append(final) or original(final))
    graph, the_plan, fill, step = build(finalize=False)
    assert isinstance(the_plan.saver, v1.train.Saver)
    with graph.as_default():
        increment = v1.assign_add(v1.train.get_global_step(), 1)
    scaffold = the_plan.scaffold()
    with graph.as_default(), v1.train.MonitoredTrainingSession(
            checkpoint_dir=str(tmp_path), scaffold=scaffold, save_checkpoint_steps=2) as sess:
        for _ in range(5):
            sess.run(increment)
    state = tf.train.get_checkpoint_state(str(tmp_path))
    written = [str(tmp_path / f"model.ckpt-{n}") for n in (0, 2, 4, 5)]  # at creation, every 2 steps, at the end
    assert staged == written
    assert list(state.all_model_checkpoint_paths) == written[-2:]  # max_to_keep=2
    assert not [name for name in os.listdir(tmp_path) if STAGING in name]


def test_an_npz_save_removes_what_a_killed_npz_save_left(tmp_path):
    abandoned = f"model-1.npz.tmp-{socket.gethostname()}-999999999-4e5f6a7b"
    (tmp_path / abandoned).write_bytes(b"half a file")
    graph = tf.Graph()
    with graph.as_default():
        v1.get_variable("w", [10], initializer=v1.ones_initializer(), use_resource=True)
    the_plan = ss.plan(ss.everything(), graph, backend="npz")
    with v1.Session(graph=graph) as sess:
        the_plan.restore_or_initialize(sess, None)
        the_plan.save(sess, str(tmp_path / "model"), global_step=2)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_npz.json", "model-2.npz", "model-2.npz.subset.json"]
