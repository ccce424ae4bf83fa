"""The file commands work where TensorFlow cannot be imported at all.

The checkpoint is written by TensorFlow in this process; a child process with
``sys.modules['tensorflow'] = None`` (every ``import tensorflow`` fails) runs ``inspect``,
``select --checkpoint``, ``slim`` and ``convert`` both ways through the real entry
point; TensorFlow then reads what the child wrote, bit for bit.
"""

import json
import subprocess
import sys
import textwrap

import numpy as np
import tensorflow as tf

v1 = tf.compat.v1

CHILD = textwrap.dedent("""
    import contextlib, io, json, sys
    sys.modules["tensorflow"] = None
    from subsetsaver.cli import main
    results = []
    for args in json.loads(sys.argv[1]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                main(args)
            except SystemExit as stop:
                code = stop.code
        results.append({"args": args, "code": code, "out": out.getvalue()})
    print(json.dumps({"results": results, "tensorflow_loaded": sys.modules.get("tensorflow") is not None}))
""")


def test_file_commands_run_without_tensorflow(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        weights = v1.get_variable("dense/w", initializer=tf.reshape(tf.range(12.0), [3, 4]))
        bias = v1.get_variable("dense/b", initializer=tf.constant([1.0, 2.0, 3.0, 4.0]))
        loss = tf.reduce_sum(tf.matmul(tf.ones([2, 3]), weights) + bias)
        step = v1.train.get_or_create_global_step()
        train = v1.train.AdamOptimizer(0.1).minimize(loss, global_step=step)
        saver = v1.train.Saver()
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            sess.run(train)
            prefix = saver.save(sess, str(tmp_path / "train" / "model"), global_step=1)
            trained = {"dense/w": sess.run(weights), "dense/b": sess.run(bias)}
    slim_out, npz_out, back = str(tmp_path / "serve" / "model"), str(tmp_path / "m.npz"), str(tmp_path / "back" / "m")
    commands = [
        ["inspect", prefix, "--json"],
        ["select", "--checkpoint", prefix, "slots()", "--json"],
        ["slim", prefix, "--keep", "~slots()", "-o", slim_out],
        ["convert", slim_out, npz_out],
        ["convert", npz_out, back],
    ]
    child = subprocess.run([sys.executable, "-c", CHILD, json.dumps(commands)], capture_output=True, text=True,
                           timeout=300)
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout)
    assert report["tensorflow_loaded"] is False
    codes = [(result["args"][0], result["code"]) for result in report["results"]]
    assert codes == [("inspect", 0), ("select", 0), ("slim", 0), ("convert", 0), ("convert", 0)], report
    inspected = json.loads(report["results"][0]["out"])
    assert [t["name"] for t in inspected["tensors"]] == sorted(tf.train.load_checkpoint(prefix)
                                                               .get_variable_to_shape_map())
    slots = [v["name"] for v in json.loads(report["results"][1]["out"])["variables"]]
    assert sorted(slots) == ["beta1_power", "beta2_power", "dense/b/Adam", "dense/b/Adam_1", "dense/w/Adam",
                             "dense/w/Adam_1"]
    for written in (slim_out, back):
        reader = tf.train.load_checkpoint(written)
        assert sorted(reader.get_variable_to_shape_map()) == ["dense/b", "dense/w", "global_step"]
        for name, value in trained.items():
            np.testing.assert_array_equal(reader.get_tensor(name), value)
        assert reader.get_tensor("global_step") == 1
        assert tf.train.latest_checkpoint(written.rsplit("/", 1)[0]) == written
