"""Benchmark the planner against TensorFlow's own Saver on the MNIST CNN of the seed article.

* subset save (``trainable() | scope('conv_1/bn') | scope('conv_2/bn')``) vs a full
  ``tf.compat.v1.train.Saver().save`` of the same trained model: the time should track
  the byte ratio (Adam keeps two slots per weight, so about 3x);
* ``ss.plan(...)`` build time vs building the Saver alone on an identical graph (the
  plan also reads the catalog and builds the initializers and the uninitialized report);
* ``restore_or_initialize`` (check + restore + initialize + confirm) vs ``Saver.restore``
  followed by the initializer of the rest.

Run ``python bench/bench_planner.py``; a harness calls ``run(report)`` with
``report(label, ours_seconds, tf_seconds, note)``.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

REPEATS = 7
SELECTOR = "trainable() | scope('conv_1/bn') | scope('conv_2/bn')"


def _median_seconds(function, repeats=REPEATS):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _files_bytes(prefix):
    directory, base = os.path.split(prefix)
    return sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory)
               if f.startswith(base + ".data-") or f == base + ".index")


def run(report):
    import graphs
    import tensorflow as tf

    import subsetsaver as ss
    from subsetsaver.planning import plan

    v1 = tf.compat.v1
    selector = ss.parse(SELECTOR)

    # -- save time vs bytes -------------------------------------------------------------
    built = graphs.mnist_cnn()
    the_plan = plan(selector, built.graph, max_to_keep=1)
    with built.graph.as_default():
        full_saver = v1.train.Saver(max_to_keep=1)
    with tempfile.TemporaryDirectory() as directory, v1.Session(graph=built.graph) as sess:
        the_plan.restore_or_initialize(sess, None)
        sess.run(built.tensors["train_op"], graphs.random_feed(built, batch_size=8))
        ours = os.path.join(directory, "subset", "model")
        theirs = os.path.join(directory, "full", "model")
        os.makedirs(os.path.dirname(ours))
        os.makedirs(os.path.dirname(theirs))
        subset_seconds = _median_seconds(lambda: the_plan.save(sess, ours, write_meta_graph=False))
        full_seconds = _median_seconds(lambda: full_saver.save(sess, theirs, write_meta_graph=False))
        subset_bytes, full_bytes = _files_bytes(ours), _files_bytes(theirs)
        report(
            "save: subset vs full Saver",
            subset_seconds,
            full_seconds,
            f"bytes {subset_bytes:,} vs {full_bytes:,} ({full_bytes / subset_bytes:.2f}x fewer); "
            f"time {full_seconds / subset_seconds:.2f}x faster; predicted .data+.index "
            f"{the_plan.sizes.checkpoint_bytes:,} bytes",
        )

        # -- restore ------------------------------------------------------------------------
        rest_init = the_plan.init_op
        saver_def = the_plan.saver.saver_def

        def tf_restore():
            sess.run(saver_def.restore_op_name, {saver_def.filename_tensor_name: ours})
            sess.run(rest_init)

        ours_restore = _median_seconds(lambda: the_plan.restore_or_initialize(sess, ours))
        report(
            "restore_or_initialize vs Saver.restore + init of the rest",
            ours_restore,
            _median_seconds(tf_restore),
            "ours adds the pre-flight check (reads the .index) and the uninitialized report",
        )

    # -- build time -----------------------------------------------------------------------
    def build_seconds(make_graph, build, repeats=3):
        times = []
        for _ in range(repeats):
            graph = make_graph()  # not timed
            start = time.perf_counter()
            build(graph)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    def build_saver(graph):
        with graph.as_default():
            v1.train.Saver(selector.resolve(graph))

    report(
        "build: ss.plan vs a Saver over the same variables",
        build_seconds(lambda: graphs.mnist_cnn().graph, lambda graph: plan(selector, graph)),
        build_seconds(lambda: graphs.mnist_cnn().graph, build_saver),
        "the plan adds the catalog read, two initializers and the uninitialized report",
    )

    def wide():
        return graphs.wide_graph(num_variables=3000).graph

    def wide_saver(graph):
        with graph.as_default():
            v1.train.Saver(v1.trainable_variables())

    report(
        "build on 3,000 variables: ss.plan vs Saver",
        build_seconds(wide, lambda graph: plan(ss.trainable(), graph), 1),
        build_seconds(wide, wide_saver, 1),
        "2,250 saved, 750 initialized; report_uninitialized_variables adds one op per variable",
    )


def _print_report(label, ours, theirs, note):
    print(f"{label:<58} ours {ours * 1000:9.2f} ms   tf {theirs * 1000:9.2f} ms   {note}")


if __name__ == "__main__":
    run(_print_report)
