"""Preemption on a local TensorFlow cluster: two parameter servers, two workers, each worker a
training process of its own (between-graph replication, MonitoredTrainingSession, PreemptionHook).

A SIGTERM to the worker that is not the chief stops it without a save while the chief trains
on; a SIGTERM to the chief saves and stops it; the checkpoint holds the partitioned embedding
on the parameter servers whole and restores into a single-process graph. Timeouts are generous
and nothing is timed: the machine is shared."""

import json
import os
import re
import signal
import subprocess
import sys

import tensorflow as tf
from cluster_util import LocalCluster

import subsetsaver as ss

v1 = tf.compat.v1
TESTS = os.path.dirname(os.path.abspath(__file__))
REPOSITORY = os.path.dirname(TESTS)
TIMEOUT = 600

SCRIPT = r'''
import json
import os
import sys

import tensorflow as tf

import subsetsaver as ss

v1 = tf.compat.v1
spec, task, directory = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
graph = tf.Graph()
with graph.as_default():
    setter = v1.train.replica_device_setter(worker_device=f"/job:worker/task:{task}", ps_tasks=2,
                                            cluster=tf.train.ClusterSpec(spec))
    with graph.device(setter):
        emb = v1.get_variable("embed/emb", [64, 8], initializer=v1.random_normal_initializer(seed=1),
                              partitioner=v1.fixed_size_partitioner(2), use_resource=True)
        dense = v1.get_variable("dense/w", [8, 4], initializer=v1.random_normal_initializer(seed=2), use_resource=True)
        step = v1.train.get_or_create_global_step()
        ids = tf.constant([0, 9, 31, 32, 50, 63], tf.int64)
        loss = tf.reduce_sum(tf.square(v1.nn.embedding_lookup(emb, ids, partition_strategy="div") @ dense))
        train = v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss, global_step=step)
plan = ss.plan(ss.everything(), graph)
hook = ss.training.PreemptionHook(plan, os.path.join(directory, "model"), exit_code=143, is_chief=task == 0)
config = v1.ConfigProto(operation_timeout_in_ms=300_000, device_filters=["/job:ps", f"/job:worker/task:{task}"])
with graph.as_default(), v1.train.MonitoredTrainingSession(
        master="grpc://" + spec["worker"][task], is_chief=task == 0, scaffold=plan.scaffold(), hooks=[hook],
        config=config, save_summaries_steps=None, save_summaries_secs=None, log_step_count_steps=None) as sess:
    done = 0
    while not sess.should_stop():
        sess.run(train)
        done += 1
        if done % 20 == 0:
            print("steps", done, flush=True)
print("finished", flush=True)
'''


def start(cluster, task, script, directory):
    env = {**os.environ, "PYTHONPATH": REPOSITORY, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.Popen([sys.executable, str(script), json.dumps(cluster.spec), str(task), str(directory)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)


def wait_for_steps(child, count=1):
    """Read the child's output until it has reported ``count`` more lines of steps; returns them."""
    lines = []
    while len(lines) < count:
        line = child.stdout.readline()
        assert line, f"the process ended before training ({child.wait()}): {child.stderr.read()[-2000:]}"
        if line.startswith("steps"):
            lines.append(line.strip())
    return lines


def stopped(child):
    out, err = child.communicate(timeout=TIMEOUT)
    return child.returncode, out, err


def test_only_the_chief_saves_and_a_worker_stops_alone(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    directory = tmp_path / "run"
    directory.mkdir()
    children = []
    with LocalCluster({"ps": 2, "worker": 2}) as cluster:
        try:
            chief = start(cluster, 0, script, directory)
            children.append(chief)
            wait_for_steps(chief)
            worker = start(cluster, 1, script, directory)
            children.append(worker)
            wait_for_steps(worker)
            worker.send_signal(signal.SIGTERM)
            code, out, err = stopped(worker)
            assert code == 143, err[-2000:]
            assert re.search(r"SIGTERM: stopping this worker at step \d+ without a save \(only the chief saves\)",
                             err), err[-2000:]
            assert os.listdir(directory) == []  # the worker saved nothing
            wait_for_steps(chief, 2)  # and the chief trains on
            assert chief.poll() is None
            chief.send_signal(signal.SIGTERM)
            code, out, err = stopped(chief)
            assert code == 143, err[-2000:]
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
    saved = re.search(r"SIGTERM at step (\d+): saved '(.+)' \(([\d,]+) bytes", err)
    assert saved, err[-2000:]
    prefix = saved.group(2)
    assert prefix == str(directory / f"model-{saved.group(1)}")
    assert tf.train.latest_checkpoint(str(directory)) == prefix
    reader = tf.train.load_checkpoint(prefix)
    assert reader.get_variable_to_shape_map()["embed/emb"] == [64, 8]  # both parts, on two ps tasks
    graph = tf.Graph()
    with graph.as_default():  # one process, the embedding not partitioned
        embedding = v1.get_variable("embed/emb", [64, 8], use_resource=True)
        v1.get_variable("dense/w", [8, 4], use_resource=True)
        step = v1.train.get_or_create_global_step()
        v1.get_variable("embed/emb/Momentum", [64, 8], use_resource=True, trainable=False)
        v1.get_variable("dense/w/Momentum", [8, 4], use_resource=True, trainable=False)
    plan = ss.plan(ss.everything(), graph)
    with v1.Session(graph=graph) as sess:
        report = plan.restore_or_initialize(sess, str(directory))
        assert report.checkpoint == prefix and sorted(report.restored) == sorted(reader.get_variable_to_shape_map())
        assert sess.run(step) == int(saved.group(1))
        assert sess.run(embedding).tobytes() == reader.get_tensor("embed/emb").tobytes()
