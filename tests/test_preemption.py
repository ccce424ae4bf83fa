"""Training that survives preemption (training/preemption.py): PreemptionHook in a
MonitoredTrainingSession and preemptible() in a plain loop, on real graphs in this process
(the step finishes, the save is at that step and named latest, the loop stops, a second signal
does not interrupt the save, the exit status, the grace budget, workers do not save), and a
training script in a child process sent SIGTERM before its first save, during a step, during a
save and during a background write: it exits, its latest checkpoint restores whole, and the
resumed run ends bit-exact with a run never interrupted."""

import logging
import os
import re
import signal
import subprocess
import sys
import threading

import graphs
import pytest
import tensorflow as tf

import subsetsaver as ss
from subsetsaver import training

v1 = tf.compat.v1
TESTS = os.path.dirname(os.path.abspath(__file__))
REPOSITORY = os.path.dirname(TESTS)
SMALL = dict(channels=(4, 8), fc_units=16, input_hw=12)
SUBSET = ss.trainable() | ss.bn_stats() | ss.slots() | ss.global_step()
QUIET = dict(save_summaries_steps=None, save_summaries_secs=None, log_step_count_steps=None)
SAVED_LINE = re.compile(r"SIGTERM at step (\d+): saved '(.+)' \(([\d,]+) bytes in \d+\.\d s\) and named it latest; "
                        r"stopping(; \d+ more signal\(s\) ignored during the save)?$")


def values_of(sess, plan) -> dict:
    names = list(plan.saved_names)
    fetched = sess.run([plan.catalog.variables([name])[0] for name in names])
    return dict(zip(names, fetched))


def assert_bit_equal(actual, expected):
    assert sorted(actual) == sorted(expected)
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype and actual[name].tobytes() == value.tobytes(), name


def restored_values(prefix_or_directory):
    built = graphs.mnist_cnn(**SMALL)
    plan = ss.plan(SUBSET, built.graph)
    with v1.Session(graph=built.graph) as sess:
        report = plan.restore_or_initialize(sess, prefix_or_directory)
        return report, values_of(sess, plan)


def preemption_lines(caplog):
    return [record.getMessage() for record in caplog.records if record.name == "subsetsaver.training"]


@pytest.fixture
def cnn():
    built = graphs.mnist_cnn(**SMALL)
    plan = ss.plan(SUBSET, built.graph)
    return built, plan, graphs.random_feed(built, batch_size=4)


def test_a_loop_finishes_its_step_saves_at_that_step_and_stops(tmp_path, cnn, caplog):
    built, plan, feed = cnn
    caplog.set_level(logging.WARNING, "subsetsaver.training")
    before = signal.getsignal(signal.SIGTERM)
    step = v1.train.get_global_step(built.graph)
    steps = 0
    with v1.Session(graph=built.graph) as sess:
        plan.restore_or_initialize(sess, None)
        with training.preemptible(sess, plan, str(tmp_path / "model"), global_step=step) as p:
            assert signal.getsignal(signal.SIGTERM) != before
            while not p.stop_requested:
                sess.run(built.tensors["train_op"], feed)
                steps += 1
                if steps == 3:
                    os.kill(os.getpid(), signal.SIGTERM)
        at_stop = values_of(sess, plan)
    assert signal.getsignal(signal.SIGTERM) == before
    assert steps == 3 and p.preempted and p.signal == signal.SIGTERM and p.saved == str(tmp_path / "model-3")
    [line] = preemption_lines(caplog)
    assert SAVED_LINE.match(line).groups() == ("3", str(tmp_path / "model-3"), f"{plan.sizes.saved_bytes:,}", None)
    report, values = restored_values(str(tmp_path))
    assert report.checkpoint == str(tmp_path / "model-3")
    assert_bit_equal(values, at_stop)


def test_no_signal_no_save_and_a_background_save_is_waited_for(tmp_path, cnn):
    built, plan, feed = cnn
    with v1.Session(graph=built.graph) as sess:
        plan.restore_or_initialize(sess, None)
        with training.preemptible(sess, plan, str(tmp_path / "model"), global_step=7) as p:
            sess.run(built.tensors["train_op"], feed)
            pending = plan.save(sess, str(tmp_path / "model"), global_step=1, blocking=False)
        assert pending.done() and not p.preempted and p.saved is None
    assert sorted(os.listdir(tmp_path)) == [
        "checkpoint", "model-1.data-00000-of-00001", "model-1.index", "model-1.meta", "model-1.subset.json"]


def test_a_second_signal_during_the_save_does_not_interrupt_it(tmp_path, cnn, caplog, monkeypatch):
    built, plan, feed = cnn
    caplog.set_level(logging.WARNING, "subsetsaver.training")
    save = plan.save

    def interrupted_save(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        return save(*args, **kwargs)

    monkeypatch.setattr(plan, "save", interrupted_save)
    with v1.Session(graph=built.graph) as sess:
        plan.restore_or_initialize(sess, None)
        with training.preemptible(sess, plan, str(tmp_path / "model"), global_step=lambda: 12) as p:
            os.kill(os.getpid(), signal.SIGTERM)
            while not p.stop_requested:
                sess.run(built.tensors["train_op"], feed)
    [line] = preemption_lines(caplog)
    assert SAVED_LINE.match(line).group(4) == "; 2 more signal(s) ignored during the save"
    assert p.saved == str(tmp_path / "model-12") and restored_values(str(tmp_path))[0].checkpoint == p.saved


def test_the_exit_status_is_the_one_chosen(tmp_path, cnn):
    built, plan, feed = cnn
    with v1.Session(graph=built.graph) as sess:
        plan.restore_or_initialize(sess, None)
        with pytest.raises(SystemExit) as caught:
            with training.preemptible(sess, plan, str(tmp_path / "model"), exit_code=143) as p:
                os.kill(os.getpid(), signal.SIGTERM)
                while not p.stop_requested:
                    sess.run(built.tensors["train_op"], feed)
    assert caught.value.code == 143 and p.saved == str(tmp_path / "model")


def test_a_save_that_cannot_fit_the_grace_budget_says_so(tmp_path, cnn, caplog):
    built, plan, feed = cnn
    caplog.set_level(logging.WARNING, "subsetsaver.training")
    with v1.Session(graph=built.graph) as sess:
        plan.restore_or_initialize(sess, None)
        plan.save(sess, str(tmp_path / "model"), global_step=0)  # the estimate's measure
        with training.preemptible(sess, plan, str(tmp_path / "model"), global_step=1, grace_secs=1e-9) as p:
            os.kill(os.getpid(), signal.SIGTERM)
    late, saved = preemption_lines(caplog)
    assert re.fullmatch(r"the save needs about \d+\.\d s \(the last save's rate\) but 0\.0 s of the 0\.0 s grace "
                        r"budget are left: it may be cut short, and then the previous checkpoint stays the latest",
                        late), late
    assert SAVED_LINE.match(saved) and p.saved == str(tmp_path / "model-1")


def test_a_worker_stops_without_a_save(tmp_path, cnn, caplog):
    built, plan, feed = cnn
    caplog.set_level(logging.WARNING, "subsetsaver.training")
    with v1.Session(graph=built.graph) as sess:
        plan.restore_or_initialize(sess, None)
        with training.preemptible(sess, plan, str(tmp_path / "model"), global_step=5, is_chief=False) as p:
            os.kill(os.getpid(), signal.SIGTERM)
            while not p.stop_requested:
                sess.run(built.tensors["train_op"], feed)
    assert p.preempted and p.saved is None and os.listdir(tmp_path) == []
    assert preemption_lines(caplog) == ["SIGTERM: stopping this worker at step 5 without a save (only the chief saves)"]


def test_the_hook_saves_at_the_step_and_stops_the_monitored_session(tmp_path, cnn):
    built, plan, feed = cnn

    class SignalAtThirdStep:
        steps = 0

        def begin(self):
            pass

        def after_create_session(self, session, coord):
            pass

        def before_run(self, run_context):
            return None

        def after_run(self, run_context, run_values):
            self.steps += 1
            if self.steps == 3:
                self.values = values_of(run_context.session, plan)
                os.kill(os.getpid(), signal.SIGTERM)

        def end(self, session):
            pass

    hook = training.PreemptionHook(plan, str(tmp_path / "model"), signals=(signal.SIGTERM,), grace_secs=None)
    runs, signaller = 0, SignalAtThirdStep()
    with built.graph.as_default(), v1.train.MonitoredTrainingSession(
            scaffold=plan.scaffold(), hooks=[signaller, hook], **QUIET) as sess:
        while not sess.should_stop():
            sess.run(built.tensors["train_op"], feed)
            runs += 1
    assert runs == 3 and hook.preempted and hook.saved == str(tmp_path / "model-3")
    report, values = restored_values(str(tmp_path))
    assert report.checkpoint == hook.saved
    assert_bit_equal(values, signaller.values)


def test_bad_options_are_refused_at_once(tmp_path, cnn):
    built, plan, _ = cnn
    with pytest.raises(ValueError) as caught:
        training.PreemptionHook(plan, str(tmp_path / "model"), grace_secs=0)
    assert str(caught.value) == "grace_secs must be a positive number of seconds, got 0"
    with pytest.raises(ValueError) as caught:
        training.PreemptionHook(plan, str(tmp_path / "model"), signals=())
    assert str(caught.value) == "signals is empty: name at least one, e.g. signals=(signal.SIGTERM,)"
    failures = []

    def elsewhere():
        try:
            with training.preemptible(None, plan, str(tmp_path / "model")):
                pass
        except ValueError as error:
            failures.append(str(error))

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert failures == ["preemptible() must start in the main thread: Python runs signal handlers only there"]


# -- a training script killed at random moments ---------------------------------------------

MODEL = r'''
import numpy as np
import tensorflow as tf

v1 = tf.compat.v1
TOTAL_STEPS = 24


def build():
    """Two dense layers of 16 MB each under Adam: a deterministic loop whose saves take a moment."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(np.linspace(-1, 1, 64 * 1024, dtype=np.float32).reshape(64, 1024))
        w1 = v1.get_variable("dense_1/w", [1024, 4096], initializer=v1.random_normal_initializer(seed=1, stddev=0.02))
        w2 = v1.get_variable("dense_2/w", [4096, 1024], initializer=v1.random_normal_initializer(seed=2, stddev=0.02))
        loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2) - x))
        step = v1.train.get_or_create_global_step()
        train = v1.train.AdamOptimizer(1e-3).minimize(loss, global_step=step)
    return graph, step, train


def config():
    return v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
'''

SCRIPT = MODEL + r'''
import os
import sys

import subsetsaver as ss

directory = sys.argv[1]
graph, step, train = build()
plan = ss.plan(ss.everything(), graph, max_to_keep=2)
with v1.Session(graph=graph, config=config()) as sess:
    plan.restore_or_initialize(sess, directory)
    with ss.training.preemptible(sess, plan, os.path.join(directory, "model"), global_step=step, exit_code=143) as p:
        print("ready", sess.run(step), flush=True)  # the handler is in place from here on
        while not p.stop_requested and sess.run(step) < TOTAL_STEPS:
            sess.run(train)
            done = int(sess.run(step))
            print("step", done, flush=True)
            if done % 4 == 2:
                print("saving", done, flush=True)
                plan.save(sess, os.path.join(directory, "model"), global_step=done)
            elif done % 4 == 0:
                plan.save(sess, os.path.join(directory, "model"), global_step=done, blocking=False)
                print("writing", done, flush=True)
print("finished", flush=True)
'''


@pytest.fixture(scope="module")
def model():
    namespace = {}
    exec(compile(MODEL, "model", "exec"), namespace)
    return namespace


def run_script(script, directory, moment=None):
    """Run the training script on ``directory``; with ``moment``, send it SIGTERM when it prints a line
    starting so. Returns (exit status, every line it printed, its stderr)."""
    env = {**os.environ, "PYTHONPATH": REPOSITORY, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    child = subprocess.Popen([sys.executable, str(script), str(directory)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env, text=True)
    seen = []
    try:
        for line in child.stdout if moment else ():
            seen.append(line.strip())
            if seen[-1].startswith(moment):
                child.send_signal(signal.SIGTERM)
                break
        out, err = child.communicate(timeout=600)  # the budget: generous, the machine is shared
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return child.returncode, seen + out.splitlines(), err


@pytest.fixture(scope="module")
def uninterrupted(model, tmp_path_factory):
    """The last checkpoint's values of a run never interrupted (every run's arithmetic in a process of its own)."""
    directory = tmp_path_factory.mktemp("uninterrupted")
    script = directory / "train.py"
    script.write_text(SCRIPT)
    code, lines, err = run_script(script, directory)
    assert code == 0 and lines[-1] == "finished", err[-2000:]
    return checkpoint_values(str(directory / f"model-{model['TOTAL_STEPS']}"))


def checkpoint_values(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.mark.parametrize("moment", ["ready", "step 5", "saving 6", "writing 8"],
                         ids=["before the first save", "during a step", "during a save", "during a background write"])
def test_a_killed_training_script_resumes_bit_exact(tmp_path, model, uninterrupted, moment):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    directory = tmp_path / "run"
    directory.mkdir()
    code, seen, err = run_script(script, directory, moment)
    last_step = max([int(line.split()[1]) for line in seen if line.startswith("step ")], default=0)
    assert code == 143, err[-2000:]
    assert "finished" not in seen
    graph, step, _ = model["build"]()
    plan = ss.plan(ss.everything(), graph, max_to_keep=2)
    with v1.Session(graph=graph) as sess:
        report = plan.restore_or_initialize(sess, str(directory))  # the latest restores whole
        resumed_at = int(sess.run(step))
    assert report.checkpoint == str(directory / f"model-{resumed_at}")
    assert resumed_at in (last_step, last_step + 1), (seen, resumed_at)
    code, lines, err = run_script(script, directory)  # the restart: resumes and trains to the end
    assert code == 0 and lines[0] == f"ready {resumed_at}" and lines[-1] == "finished", err[-2000:]
    assert_bit_equal(checkpoint_values(str(directory / f"model-{model['TOTAL_STEPS']}")), uninterrupted)
    assert not [name for name in os.listdir(directory) if ".tmp-" in name]
