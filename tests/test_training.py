"""Training loops on real graphs, sessions, files and a killed process: the scaffold,
warm starts, PlanSaverHook (both backends) and StaleStatsHook."""

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import time
import warnings

import graphs
import numpy as np
import pytest
import tensorflow as tf

import subsetsaver as ss
from subsetsaver import training
from subsetsaver.errors import CheckpointMismatchError
from subsetsaver.formats import npz as npzfile

v1 = tf.compat.v1
TESTS = os.path.dirname(os.path.abspath(__file__))
SMALL = dict(channels=(4, 8), fc_units=16, input_hw=12)
SUBSET = ss.trainable() | ss.bn_stats()
QUIET = dict(save_summaries_steps=None, save_summaries_secs=None, log_step_count_steps=None)


def cnn(**options):
    return graphs.mnist_cnn(**SMALL, **options)


def op_names(variables):
    return [v.op.name for v in variables]


def reported(raw):
    return [name.decode() for name in raw]


def fetch(sess, variables):
    return dict(zip(op_names(variables), sess.run(list(variables))))


def assert_bit_equal(actual, expected):
    assert sorted(actual) == sorted(expected)
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype and actual[name].tobytes() == value.tobytes(), name


def checkpoint_values(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def initial_values(plan, variables):
    """Values of ``variables`` right after their (deterministic) initializers, in a separate session."""
    with v1.Session(graph=plan.graph) as sess:
        sess.run(plan.init_op)
        return fetch(sess, variables)


class Snapshot(v1.train.SessionRunHook):
    """Records the values of ``variables`` right after the session is created (restore and init done)."""

    def __init__(self, variables):
        self.variables = list(variables)
        self.values = None

    def after_create_session(self, session, coord):
        self.values = fetch(session, self.variables)


@contextlib.contextmanager
def monitored(built, hooks=(), **options):
    """A MonitoredTrainingSession on ``built.graph``, used inside that graph (its hooks may save)."""
    with built.graph.as_default(), v1.train.MonitoredTrainingSession(hooks=list(hooks), **QUIET, **options) as sess:
        yield sess


# -- the scaffold's pieces, step by step ------------------------------------------------


@pytest.mark.parametrize("resource", [True, False], ids=["resource", "reference"])
def test_scaffold_restores_the_subset_and_initializes_only_the_uninitialized_rest(tmp_path, resource):
    built = cnn(resource=resource)
    plan = ss.plan(SUBSET, built.graph)
    scaffold = training.scaffold(plan)
    built.graph.finalize()
    feed = graphs.random_feed(built, batch_size=4)
    step = built.tensors["global_step"]
    assert scaffold.saver is plan.saver
    with v1.Session(graph=built.graph) as sess:
        assert reported(sess.run(scaffold.ready_op)) == op_names(plan.saved) + op_names(plan.rest)
        sess.run(scaffold.init_op)
        assert reported(sess.run(scaffold.ready_op)) == []
        sess.run(built.tensors["train_op"], feed)
        prefix = plan.save(sess, str(tmp_path / "model"), global_step=1)
        trained = fetch(sess, plan.saved)

    with v1.Session(graph=built.graph) as sess:  # what MonitoredTrainingSession does on a resume
        assert reported(sess.run(scaffold.ready_for_local_init_op)) == op_names(plan.saved)
        plan.saver.restore(sess, prefix)
        assert reported(sess.run(scaffold.ready_for_local_init_op)) == []
        assert reported(sess.run(scaffold.ready_op)) == op_names(plan.rest)
        sess.run(scaffold.local_init_op)
        assert reported(sess.run(scaffold.ready_op)) == []
        assert_bit_equal(fetch(sess, plan.saved), trained)
        assert_bit_equal(fetch(sess, plan.rest), initial_values(plan, plan.rest))

        sess.run(built.tensors["train_op"], feed)
        moved = fetch(sess, plan.rest)
        sess.run(scaffold.local_init_op)  # a later session creation: nothing is initialized again
        assert sess.run(step) == 1
        assert_bit_equal(fetch(sess, plan.rest), moved)


@pytest.mark.parametrize("builder", [graphs.partitioned_model, graphs.ema_of_weights_model],
                         ids=["partitioned", "ema-of-weights"])
def test_scaffold_resumes_partitions_and_starts_averages_from_restored_weights(tmp_path, builder):
    built = builder()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = ss.plan(ss.trainable(), built.graph)  # the averages are left to initialization on purpose
    assert [str(w.message).split(":")[0] for w in caught] == ["unsaved-state"] * (2 if built.expected["averages"] else 0)
    scaffold = training.scaffold(plan)
    built.graph.finalize()
    feed = graphs.random_feed(built, batch_size=4)
    with v1.Session(graph=built.graph) as sess:
        sess.run(scaffold.init_op)
        for _ in range(2):
            sess.run(built.tensors["train_op"], feed)
        prefix = plan.save(sess, str(tmp_path / "model"))
        trained = fetch(sess, plan.saved)

    with v1.Session(graph=built.graph) as sess:
        plan.saver.restore(sess, prefix)
        sess.run(scaffold.local_init_op)
        assert reported(sess.run(scaffold.ready_op)) == []
        assert_bit_equal(fetch(sess, plan.saved), trained)
        shadows = fetch(sess, plan.catalog.variables(built.expected["averages"]))
        sess.run(built.tensors["train_op"], feed)
    assert len(plan.saved) == (5 if built.partitions else 4)  # three parts of embed/emb, dense/w, dense/b
    for shadow, primary in zip(built.expected["averages"], built.expected["averaged"]):
        assert shadows[shadow].tobytes() == trained[primary].tobytes()  # initialized from the restored weight


def test_scaffold_refuses_what_it_owns_and_variables_the_plan_does_not_know():
    built = cnn()
    plan = ss.plan(SUBSET, built.graph)
    with pytest.raises(TypeError) as error:
        training.scaffold(plan, saver=plan.saver)
    assert str(error.value) == "scaffold() does not take 'saver': the scaffold's Saver is the plan's"
    with pytest.raises(TypeError) as error:
        training.scaffold(plan, ready_op=None)
    assert str(error.value) == "scaffold() does not take 'ready_op': the scaffold reports the plan's uninitialized variables"
    with built.graph.as_default():
        v1.get_variable("late/w", [2])
        v1.get_variable("late/b", [2])
    with pytest.raises(ValueError) as error:
        training.scaffold(plan)
    assert str(error.value) == (
        "2 variables were created after the plan: late/w, late/b; "
        "build the plan after the whole model (optimizer and moving averages included)"
    )


def test_npz_plan_scaffold_refuses_tensorflow_checkpointing(tmp_path):
    built = cnn()
    plan = ss.plan(SUBSET, built.graph, backend="npz")
    scaffold = training.scaffold(plan)
    assert not scaffold.saver
    with pytest.raises(training.NoSaverError) as error, monitored(built, scaffold=scaffold,
                                                                  checkpoint_dir=str(tmp_path / "run")):
        pass
    assert str(error.value) == (
        "a plan with backend 'npz' has no TensorFlow Saver, so MonitoredTrainingSession cannot save or restore it: "
        "pass save_checkpoint_secs=None and save_checkpoint_steps=None, save with "
        "PlanSaverHook(plan, directory, save_steps=...) and resume with scaffold(plan, resume_from=directory)"
    )
    assert not [name for name in os.listdir(tmp_path / "run") if name.startswith("model")]


# -- a real kill: one child process trains until SIGKILL --------------------------------

CHILD = """
import sys, time
sys.path.insert(0, {tests!r})
import graphs
import tensorflow as tf
import subsetsaver as ss
from subsetsaver import training

built = graphs.mnist_cnn(**{small!r})
tf_plan = ss.plan(ss.trainable() | ss.bn_stats(), built.graph, max_to_keep=2)
npz_plan = ss.plan(ss.trainable() | ss.bn_stats() | ss.global_step(), built.graph, backend="npz", max_to_keep=3)
scaffold = training.scaffold(tf_plan)
hook = training.PlanSaverHook(npz_plan, {npz_dir!r}, save_steps=2)
feed = graphs.random_feed(built, batch_size=8)
with built.graph.as_default(), tf.compat.v1.train.MonitoredTrainingSession(
        checkpoint_dir={tf_dir!r}, scaffold=scaffold, hooks=[hook], save_checkpoint_steps=3,
        save_summaries_steps=None, save_summaries_secs=None, log_step_count_steps=None) as sess:
    for _ in range(10):
        sess.run(built.tensors["train_op"], feed)
    open({marker!r}, "w").close()
    time.sleep(600)  # killed here, inside the session: no final save, no clean shutdown
"""


def _npz_steps(directory):
    names = os.listdir(directory) if os.path.isdir(directory) else []
    return sorted(int(m.group(1)) for m in (re.fullmatch(r"model-(\d+)\.npz", n) for n in names) if m)


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    """(tf_dir, npz_dir) of a training process killed with SIGKILL after 10 steps: TensorFlow
    checkpoints every 3 steps (max_to_keep=2), npz files every 2 steps (max_to_keep=3)."""
    root = tmp_path_factory.mktemp("killed")
    tf_dir, npz_dir, marker = str(root / "tf"), str(root / "npz"), str(root / "trained")
    script = CHILD.format(tests=TESTS, small=SMALL, tf_dir=tf_dir, npz_dir=npz_dir, marker=marker)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    child = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    try:
        while not os.path.exists(marker):
            if child.poll() is not None:
                pytest.fail(f"the training process exited with {child.returncode}:\n{child.stderr.read().decode()}")
            if time.monotonic() > deadline:
                pytest.fail("the training process did not train 10 steps in 240 s")
            time.sleep(0.1)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    return tf_dir, npz_dir


def test_monitored_session_dies_on_resume_without_the_scaffold(killed_run):
    """The failure the scaffold fixes: a plain Scaffold with the plan's Saver cannot resume a subset."""
    tf_dir, _ = killed_run
    built = cnn()
    plan = ss.plan(SUBSET, built.graph)
    plain = v1.train.Scaffold(saver=plan.saver)
    with pytest.raises(RuntimeError, match="Init operations did not make model ready"), monitored(
            built, scaffold=plain, checkpoint_dir=tf_dir, save_checkpoint_secs=None):
        pass


def test_killed_run_resumes_from_its_own_checkpoint_and_keeps_training(killed_run):
    tf_dir, _ = killed_run
    state = tf.train.get_checkpoint_state(tf_dir)
    assert list(state.all_model_checkpoint_paths) == [os.path.join(tf_dir, f"model.ckpt-{s}") for s in (6, 9)]
    latest = state.model_checkpoint_path
    built = cnn()
    plan = ss.plan(SUBSET, built.graph, max_to_keep=2)
    last_saved = checkpoint_values(latest)
    assert sorted(last_saved) == sorted(plan.saved_names)  # only the subset: no slots, no global step
    snapshot = Snapshot(plan.saved + plan.rest)
    feed = graphs.random_feed(built, batch_size=8, seed=1)
    with monitored(built, [snapshot], scaffold=training.scaffold(plan), checkpoint_dir=tf_dir,
                   save_checkpoint_steps=3) as sess:
        losses = [sess.run([built.tensors["train_op"], built.tensors["loss"]], feed)[1] for _ in range(4)]
        final = fetch(sess._tf_sess(), plan.saved)

    assert_bit_equal({n: snapshot.values[n] for n in plan.saved_names}, last_saved)
    assert_bit_equal({n: snapshot.values[n] for n in op_names(plan.rest)}, initial_values(plan, plan.rest))
    assert snapshot.values["opt/global_step"] == 0
    assert np.all(np.isfinite(losses))
    resumed = tf.train.latest_checkpoint(tf_dir)
    assert resumed == os.path.join(tf_dir, "model.ckpt-4")
    assert_bit_equal(checkpoint_values(resumed), final)
    assert not np.array_equal(final["fc/w"], last_saved["fc/w"])


def test_killed_npz_run_resumes_from_the_latest_complete_file(killed_run):
    _, npz_dir = killed_run
    steps = _npz_steps(npz_dir)
    assert steps == [6, 8, 10]  # numbered by the global step, max_to_keep=3
    latest = steps[-1]
    assert sorted(n for n in os.listdir(npz_dir) if n.endswith(".subset.json")) == sorted(
        f"model-{s}.npz.subset.json" for s in steps
    )
    _, last_saved = npzfile.read(os.path.join(npz_dir, f"model-{latest}.npz"))
    with open(os.path.join(npz_dir, f"model-{latest}.npz"), "rb") as whole:
        torn = whole.read()[:1000]
    with open(os.path.join(npz_dir, f"model-{latest + 2}.npz"), "wb") as handle:
        handle.write(torn)  # the next save, cut short

    built = cnn()
    plan = ss.plan(SUBSET | ss.global_step(), built.graph, backend="npz", max_to_keep=3)
    hook = training.PlanSaverHook(plan, npz_dir, save_steps=2)
    snapshot = Snapshot(plan.saved + plan.rest)
    feed = graphs.random_feed(built, batch_size=8, seed=1)
    with monitored(built, [hook, snapshot], scaffold=training.scaffold(plan, resume_from=npz_dir)) as sess:
        for _ in range(6):
            sess.run(built.tensors["train_op"], feed)

    assert sorted(last_saved) == sorted(plan.saved_names)
    assert_bit_equal({n: snapshot.values[n] for n in plan.saved_names}, last_saved)
    assert snapshot.values["opt/global_step"] == latest
    assert_bit_equal({n: snapshot.values[n] for n in op_names(plan.rest)}, initial_values(plan, plan.rest))
    assert hook.saved == [os.path.join(npz_dir, f"model-{latest + k}.npz") for k in (2, 4, 6)]
    assert _npz_steps(npz_dir) == [latest + 2, latest + 4, latest + 6]  # the killed run's files retired too
    assert sorted(n for n in os.listdir(npz_dir) if n.endswith(".subset.json")) == [
        f"model-{latest + k}.npz.subset.json" for k in (2, 4, 6)
    ]


# -- PlanSaverHook with the TensorFlow backend -------------------------------------------


def test_plan_saver_hook_saves_every_n_steps_keeps_max_to_keep_and_resumes(tmp_path):
    directory = str(tmp_path / "run")
    built = cnn()
    plan = ss.plan(SUBSET, built.graph, max_to_keep=2)
    hook = training.PlanSaverHook(plan, directory, save_steps=2)
    feed = graphs.random_feed(built, batch_size=4)
    with monitored(built, [hook], scaffold=training.scaffold(plan, resume_from=directory)) as sess:
        for _ in range(7):
            sess.run(built.tensors["train_op"], feed)
        final = fetch(sess._tf_sess(), plan.saved)
    assert hook.saved == [os.path.join(directory, f"model-{s}") for s in (2, 4, 6, 7)]
    state = tf.train.get_checkpoint_state(directory)
    assert list(state.all_model_checkpoint_paths) == [os.path.join(directory, f"model-{s}") for s in (6, 7)]
    assert sorted(n for n in os.listdir(directory) if n.endswith((".index", ".subset.json"))) == [
        "model-6.index", "model-6.subset.json", "model-7.index", "model-7.subset.json"]
    assert_bit_equal(checkpoint_values(os.path.join(directory, "model-7")), final)

    built = cnn()  # a restart: resume_from restores model-7; the global step (not saved) restarts at 0
    plan = ss.plan(SUBSET, built.graph, max_to_keep=2)
    hook = training.PlanSaverHook(plan, directory, save_steps=2)
    snapshot = Snapshot(plan.saved)
    feed = graphs.random_feed(built, batch_size=4)
    with monitored(built, [hook, snapshot], scaffold=training.scaffold(plan, resume_from=directory)) as sess:
        for _ in range(4):
            sess.run(built.tensors["train_op"], feed)
    assert_bit_equal(snapshot.values, final)
    state = tf.train.get_checkpoint_state(directory)
    assert list(state.all_model_checkpoint_paths) == [os.path.join(directory, f"model-{s}") for s in (2, 4)]
    assert sorted(n for n in os.listdir(directory) if n.endswith((".index", ".subset.json"))) == [
        "model-2.index", "model-2.subset.json", "model-4.index", "model-4.subset.json"]


def test_plan_saver_hook_saves_on_its_clock_with_save_secs(tmp_path, monkeypatch):
    """save_secs is a clock schedule: with the clock moving an hour per step, every step saves;
    with it standing still, only the last step (on close) does."""
    import time

    for seconds_per_step, expected_steps in ((3601.0, (1, 2, 3, 4)), (0.0, (4,))):
        directory = str(tmp_path / f"run-{seconds_per_step:.0f}")
        built = cnn()
        plan = ss.plan(SUBSET, built.graph, max_to_keep=10)
        hook = training.PlanSaverHook(plan, directory, save_secs=3600)
        feed = graphs.random_feed(built, batch_size=4)
        now = [1_000_000.0]
        monkeypatch.setattr(time, "time", lambda clock=now: clock[0])
        with monitored(built, [hook], scaffold=training.scaffold(plan, resume_from=directory)) as sess:
            for _ in range(4):
                now[0] += seconds_per_step
                sess.run(built.tensors["train_op"], feed)
        monkeypatch.undo()
        assert hook.saved == [os.path.join(directory, f"model-{step}") for step in expected_steps]


def test_plan_saver_hook_needs_exactly_one_schedule(tmp_path):
    plan = ss.plan(ss.trainable(), finetune_graph()[0])
    for schedule in ({}, {"save_steps": 2, "save_secs": 10}):
        with pytest.raises(ValueError) as error:
            training.PlanSaverHook(plan, str(tmp_path), **schedule)
        assert str(error.value) == "PlanSaverHook needs exactly one of save_steps and save_secs"
    with pytest.raises(ValueError) as error:
        training.PlanSaverHook(plan, str(tmp_path), save_steps=0)
    assert str(error.value) == "save_steps must be positive, got 0"


# -- StaleStatsHook ------------------------------------------------------------------------


@pytest.mark.parametrize("updates", [False, True], ids=["stats-not-updated", "stats-updated"])
def test_stale_stats_hook_audits_once_and_logs_stale_statistics(caplog, updates):
    built = cnn(batch_norm_updates=updates)
    plan = ss.plan(SUBSET, built.graph)
    hook = training.StaleStatsHook(plan, after_steps=2)
    feed = graphs.random_feed(built, batch_size=4)
    with caplog.at_level(logging.INFO, logger="subsetsaver.training"):
        with monitored(built, [hook], scaffold=training.scaffold(plan)) as sess:
            sess.run(built.tensors["train_op"], feed)
            assert hook.findings is None
            for _ in range(3):
                sess.run(built.tensors["train_op"], feed)
    warnings = [r.getMessage() for r in caplog.records if r.name == "subsetsaver.training" and r.levelno == logging.WARNING]
    if updates:
        assert hook.findings == []
        assert warnings == []
        return
    stats = built.expected["bn_stats"]
    assert [(f.code, f.variables) for f in hook.findings] == [
        ("stale-stats", tuple(stats[:2])), ("stale-stats", tuple(stats[2:]))]
    assert warnings == [str(f) for f in hook.findings]
    assert "at global step 2:" in warnings[0]  # audited once, after the second step


def test_stale_stats_hook_needs_a_positive_step_count():
    plan = ss.plan(ss.trainable(), finetune_graph()[0])
    with pytest.raises(ValueError) as error:
        training.StaleStatsHook(plan, after_steps=0)
    assert str(error.value) == "after_steps must be a positive number of steps, got 0"


# -- warm start ----------------------------------------------------------------------------


def _backbone(x):
    with v1.variable_scope("conv"):
        w = v1.get_variable("w", [3, 3, 1, 4], initializer=v1.truncated_normal_initializer(stddev=0.3))
        b = v1.get_variable("b", [4], initializer=v1.constant_initializer(0.1))
        h = tf.nn.relu(tf.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME") + b)
    with v1.variable_scope("fc"):
        w = v1.get_variable("w", [6 * 6 * 4, 8], initializer=v1.truncated_normal_initializer(stddev=0.3))
        b = v1.get_variable("b", [8], initializer=v1.constant_initializer(0.1))
        return tf.nn.relu(tf.matmul(tf.reshape(h, [-1, 6 * 6 * 4]), w) + b)


def _head(features, classes):
    w = v1.get_variable("w", [8, classes], initializer=v1.truncated_normal_initializer(stddev=0.3))
    b = v1.get_variable("b", [classes], initializer=v1.constant_initializer(0.5))
    return tf.matmul(features, w) + b


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """(prefix, values) of a checkpoint with a backbone under 'pretrained/' and a 10-class 'pretrained_head/'."""
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(7)
        with v1.variable_scope("", use_resource=True):
            x = v1.placeholder(tf.float32, [None, 6, 6, 1])
            with v1.variable_scope("pretrained"):
                features = _backbone(x)
            with v1.variable_scope("pretrained_head"):
                _head(features, 10)
        saver = v1.train.Saver()
        init = v1.global_variables_initializer()
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        prefix = saver.save(sess, str(tmp_path_factory.mktemp("pretrained") / "model"), global_step=100)
    return prefix, checkpoint_values(prefix)


def finetune_graph(classes=3):
    """model/backbone (as pretrained) + a new model/head with ``classes`` outputs; Momentum under 'opt'."""
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(3)
        with v1.variable_scope("", use_resource=True):
            x = v1.placeholder(tf.float32, [None, 6, 6, 1], name="x")
            labels = v1.placeholder(tf.int64, [None], name="labels")
            with v1.variable_scope("model"):
                with v1.variable_scope("backbone"):
                    features = _backbone(x)
                with v1.variable_scope("head"):
                    logits = _head(features, classes)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
            with v1.variable_scope("opt"):
                step = v1.train.get_or_create_global_step()
                train_op = v1.train.MomentumOptimizer(0.5, 0.9).minimize(loss, global_step=step)
    rng = np.random.default_rng(0)
    feed = {x: rng.random((8, 6, 6, 1), dtype=np.float32), labels: rng.integers(0, classes, 8)}
    return graph, train_op, feed


BACKBONE = ["model/backbone/conv/w", "model/backbone/conv/b", "model/backbone/fc/w", "model/backbone/fc/b"]
REMAP = {"pretrained/": "model/backbone/"}


def _start(directory, pretrained_prefix, steps):
    """One start of the fine-tuning run: (snapshot of backbone + head after creation, warm start)."""
    graph, train_op, feed = finetune_graph()
    plan = ss.plan(ss.trainable(), graph)
    start = training.warm_start(ss.scope("model/backbone"), pretrained_prefix, remap=REMAP, graph=graph)
    snapshot = Snapshot(plan.saved)
    with graph.as_default(), v1.train.MonitoredTrainingSession(
            checkpoint_dir=directory, scaffold=training.scaffold(plan, warm_start=start), hooks=[snapshot],
            save_checkpoint_secs=None, save_checkpoint_steps=100, **QUIET) as sess:
        for _ in range(steps):
            sess.run(train_op, feed)
    return snapshot.values, start


def test_warm_start_loads_the_backbone_on_the_first_start_only(tmp_path, pretrained):
    prefix, pretrained_values = pretrained
    directory = str(tmp_path / "run")
    first, start = _start(directory, prefix, steps=3)
    assert_bit_equal({n: first[n] for n in BACKBONE}, {n: pretrained_values[n.replace("model/backbone/", "pretrained/")]
                                                      for n in BACKBONE})
    assert first["model/head/b"].tolist() == [0.5, 0.5, 0.5]  # the new head is initialized, not loaded
    assert start.report.checkpoint == prefix
    assert start.report.restored == tuple(BACKBONE)
    fine_tuned = checkpoint_values(tf.train.latest_checkpoint(directory))
    assert sorted(fine_tuned) == sorted(BACKBONE + ["model/head/w", "model/head/b"])
    assert not np.array_equal(fine_tuned["model/backbone/fc/w"], pretrained_values["pretrained/fc/w"])

    second, start = _start(directory, prefix, steps=1)  # a restart: the run's own checkpoint wins
    assert_bit_equal(second, fine_tuned)
    assert start.report is None


def test_warm_start_reports_a_mismatched_head_before_anything_runs(pretrained):
    prefix, _ = pretrained
    graph, _, _ = finetune_graph(classes=3)
    remap = {**REMAP, "pretrained_head/": "model/head/"}
    with pytest.raises(CheckpointMismatchError) as error:
        training.warm_start(ss.scope("model"), prefix, remap=remap, graph=graph)
    assert str(error.value) == (
        f"checkpoint '{prefix}' does not match the plan scope('model'): 2 shape mismatches\n"
        "  shape mismatch: model/head/w (checkpoint name pretrained_head/w), expected [8, 3] float32, "
        "checkpoint has [8, 10] float32\n"
        "  shape mismatch: model/head/b (checkpoint name pretrained_head/b), expected [3] float32, "
        "checkpoint has [10] float32\n"
        "Pass on_mismatch='initialize' to initialize these variables instead of restoring them."
    )
    assert [(p.kind, p.name) for p in error.value.problems] == [("shape", "model/head/w"), ("shape", "model/head/b")]


def test_warm_start_initializes_mismatched_variables_when_asked(tmp_path, pretrained):
    prefix, pretrained_values = pretrained
    graph, _, _ = finetune_graph(classes=3)
    remap = {**REMAP, "pretrained_head/": "model/head/"}
    start = training.warm_start(ss.scope("model"), prefix, remap=remap, on_mismatch="initialize", graph=graph)
    plan = ss.plan(ss.trainable(), graph)
    scaffold = training.scaffold(plan, warm_start=start)
    graph.finalize()
    with v1.Session(graph=graph) as sess:
        sess.run(scaffold.init_op)
        scaffold.init_fn(sess)
        values = fetch(sess, plan.saved)
    assert start.report.restored == tuple(BACKBONE)
    assert [p.name for p in start.report.mismatched] == ["model/head/w", "model/head/b"]
    assert values["model/head/b"].tolist() == [0.5, 0.5, 0.5]
    assert values["model/backbone/conv/w"].tobytes() == pretrained_values["pretrained/conv/w"].tobytes()


# -- the planner-level API -----------------------------------------------------------------


def test_plan_scaffold_is_the_training_scaffold(tmp_path, pretrained):
    prefix, pretrained_values = pretrained
    graph, train_op, feed = finetune_graph()
    plan = ss.plan(ss.trainable(), graph)
    start = training.warm_start(ss.scope("model/backbone"), prefix, remap=REMAP, graph=graph)
    scaffold = plan.scaffold(warm_start=start)
    assert scaffold.saver is plan.saver
    snapshot = Snapshot(plan.saved)
    with graph.as_default(), v1.train.MonitoredTrainingSession(
            checkpoint_dir=str(tmp_path / "run"), scaffold=scaffold, hooks=[snapshot], **QUIET) as sess:
        sess.run(train_op, feed)
    assert snapshot.values["model/backbone/fc/w"].tobytes() == pretrained_values["pretrained/fc/w"].tobytes()
