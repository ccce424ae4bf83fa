"""Saves that don't stop training: how long ``plan.save(blocking=False)`` blocks the loop against
``Saver.save`` of the same 1 GB, and the time of a training step while the background write runs
against a step with no save.

The graph: float32 resource variables of 64 MB, 1 GB in all, and a training step that updates
every one of them (so the step after a snapshot pays TensorFlow's copy of each buffer the
snapshot still holds). Blocking: the sides alternate, warm (dirty pages written before each run);
ours is the call alone, its background write waited for, untimed, before the next run. Steps:
the median step with no save against the median step taken while a background write runs.

Run: ``python bench/bench_background_saves.py`` (or ``python -m bench bench.bench_background_saves``).
Smaller: ``SUBSETSAVER_BENCH_GB=0.25 python bench/bench_background_saves.py``.
"""

import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.bench_long_runs import build_graph as build_variables  # noqa: E402
from bench.report import Timing, alternating, print_line, warm  # noqa: E402

GIGABYTES = float(os.environ.get("SUBSETSAVER_BENCH_GB", "1.0"))


def build_graph(gigabytes):
    """The variables of ``bench_long_runs`` (64 MB resource variables and a step) and a step that updates them all."""
    import tensorflow as tf

    graph, variables = build_variables(gigabytes)
    *weights, step = variables
    with graph.as_default():
        train = tf.group(*[weight.assign_add(tf.fill(weight.shape, 1e-6), read_value=False) for weight in weights],
                         step.assign_add(1, read_value=False))
    return graph, variables, train


def run(report):
    import tensorflow as tf

    import subsetsaver as ss

    v1 = tf.compat.v1
    graph, variables, train = build_graph(GIGABYTES)
    directory = tempfile.mkdtemp(prefix="bench_background_")
    try:
        with graph.as_default():
            saver = v1.train.Saver(variables, max_to_keep=2)
        plan = ss.plan(ss.everything(), graph, max_to_keep=2)
        graph.finalize()
        path = os.path.join(directory, "model")
        with v1.Session(graph=graph) as sess:
            plan.restore_or_initialize(sess, None)
            sess.run(train)
            blocked = []

            def ours():
                pending = plan.save(sess, path, global_step=1, blocking=False, write_meta_graph=False)
                blocked.append(pending.blocked_secs)

            def theirs():
                saver.save(sess, path + "-saver", global_step=1, write_meta_graph=False)

            def before():
                plan.wait()
                warm()

            ours_timing, theirs_timing = alternating(ours, theirs, before=before)
            plan.wait()
            nbytes = plan.sizes.saved_bytes
            report(f"save(blocking=False) blocks, {nbytes / 2**30:.2f} GiB", ours_timing, theirs_timing,
                   "the loop's wait only; Saver.save into the page cache")
            idle, during = [], []
            for _ in range(3):
                warm()
                for _ in range(5):
                    start = time.perf_counter()
                    sess.run(train)
                    idle.append(time.perf_counter() - start)
                pending = plan.save(sess, path, global_step=2, blocking=False, write_meta_graph=False)
                while not pending.done():
                    start = time.perf_counter()
                    sess.run(train)
                    during.append(time.perf_counter() - start)
                pending.wait()
            report(f"training step during a background write, {nbytes / 2**30:.2f} GiB", Timing(tuple(during)), None,
                   f"steps with no save: median {statistics.median(idle) * 1000:.1f} ms; ratio "
                   f"{statistics.median(during) / statistics.median(idle):.2f}x over {len(during)} steps")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    run(print_line)
