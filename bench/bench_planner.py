"""The planner against TensorFlow's own Saver on the MNIST CNN of the seed article, same run.

Lines, all printed by ``python -m bench bench.bench_planner`` (or ``python bench/bench_planner.py``):

- ``save: subset vs full Saver``: ``plan.save`` of ``trainable() | scope('conv_1/bn') |
  scope('conv_2/bn')`` against a full ``Saver().save`` of the same trained model; the time should
  track the bytes (Adam keeps two slots per weight, so about 3x);
- ``restore_or_initialize vs Saver.restore + init of the rest``: ours checks the checkpoint (its
  index, read once per version of its files), restores and initializes; TensorFlow's side runs the
  Saver's restore op and the initializer of the rest;
- ``build: ss.plan vs a Saver over the same variables``: ``ss.plan`` (catalog, selection, the audit
  it warns from, the Saver, the initializers) against ``tf.compat.v1.train.Saver(var_list)`` alone,
  ``var_list`` chosen with ``get_collection`` before the clock starts; each run on a fresh graph, with
  the garbage of earlier runs (their graphs) collected before the clock starts too;
- ``build on 3,000 variables: ss.plan vs Saver``: the same on ``graphs.wide_graph(num_variables=3000)``
  with ``trainable()`` (2,250 saved, 750 initialized).

Protocol (:mod:`bench.report`): the sides alternate, ``RUNS`` runs each (5; more with
``SUBSETSAVER_BENCH_RUNS``), and every line gives both medians with their spreads and the
run-by-run ratio. A harness may call ``run(report)`` with ``report(label, ours, theirs, note)``.
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from bench.report import RUNS, alternating, print_line  # noqa: E402

SELECTOR = "trainable() | scope('conv_1/bn') | scope('conv_2/bn')"
RESTORE_RUNS = max(RUNS, 21)  # a restore takes milliseconds: more rounds, same protocol
WIDE_VARIABLES = 3000


def _files_bytes(prefix):
    directory, base = os.path.split(prefix)
    return sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory)
               if f.startswith(base + ".data-") or f == base + ".index")


def _tensorflow_selection(graph):
    """``SELECTOR`` chosen the TF1 way: trainable variables, then the two batch-norm scopes, once each."""
    import tensorflow as tf

    keys = tf.compat.v1.GraphKeys
    chosen, seen = [], set()
    for variable in (graph.get_collection(keys.TRAINABLE_VARIABLES)
                     + graph.get_collection(keys.GLOBAL_VARIABLES, scope="conv_1/bn/")
                     + graph.get_collection(keys.GLOBAL_VARIABLES, scope="conv_2/bn/")):
        if id(variable) not in seen:
            seen.add(id(variable))
            chosen.append(variable)
    return chosen


def _build_lines(report, label, make_graph, selector, tensorflow_selection, note, runs=RUNS):
    """``plan(selector, graph)`` against ``Saver(tensorflow_selection(graph))``, each on a graph made
    before the clock starts."""
    import tensorflow as tf

    from subsetsaver.planning import plan

    fresh = []

    def before():
        graph = make_graph()
        fresh.append((graph, tensorflow_selection(graph)))
        gc.collect()  # the graphs of earlier runs are garbage in cycles: collected here, not during a timed run

    def ours():
        graph, _ = fresh.pop()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the audit's warning about what trainable() leaves out
            plan(selector, graph)

    def theirs():
        graph, var_list = fresh.pop()
        with graph.as_default():
            tf.compat.v1.train.Saver(var_list)

    ours_timing, theirs_timing = alternating(ours, theirs, runs, before=before)
    report(label, ours_timing, theirs_timing, note)


def run(report=print_line):
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
        subset, full = alternating(lambda: the_plan.save(sess, ours, write_meta_graph=False),
                                   lambda: full_saver.save(sess, theirs, write_meta_graph=False))
        subset_bytes, full_bytes = _files_bytes(ours), _files_bytes(theirs)
        report(
            "save: subset vs full Saver",
            subset,
            full,
            f"bytes {subset_bytes:,} vs {full_bytes:,} ({full_bytes / subset_bytes:.2f}x fewer); "
            f"predicted .data+.index {the_plan.sizes.checkpoint_bytes:,} bytes",
        )

        # -- restore ------------------------------------------------------------------------
        rest_init = the_plan.init_op
        saver_def = the_plan.saver.saver_def

        def tf_restore():
            sess.run(saver_def.restore_op_name, {saver_def.filename_tensor_name: ours})
            sess.run(rest_init)

        the_plan.restore_or_initialize(sess, ours)  # both sides' first runs build their executors
        tf_restore()
        ours_restore, theirs_restore = alternating(lambda: the_plan.restore_or_initialize(sess, ours), tf_restore,
                                                   RESTORE_RUNS)
        report(
            "restore_or_initialize vs Saver.restore + init of the rest",
            ours_restore,
            theirs_restore,
            "ours adds the pre-flight check (the .index, read once per version of its files)",
        )

    # -- build time -----------------------------------------------------------------------
    _build_lines(report, "build: ss.plan vs a Saver over the same variables", lambda: graphs.mnist_cnn().graph,
                 selector, _tensorflow_selection,
                 "the plan adds the catalog read, the audit's errors and two initializer ops")
    _build_lines(report, f"build on {WIDE_VARIABLES:,} variables: ss.plan vs Saver",
                 lambda: graphs.wide_graph(num_variables=WIDE_VARIABLES).graph, ss.trainable(),
                 lambda graph: graph.get_collection(v1.GraphKeys.TRAINABLE_VARIABLES),
                 "2,250 saved, 750 initialized; the audit reads the whole graph (one variable left out is read)")


if __name__ == "__main__":
    run()
