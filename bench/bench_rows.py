"""Row maps on the tensor2tensor#728 case: a 30,718 x 64 embedding in 16 parts, trained with Adam,
grown to 31,836 rows in 4 parts from two vocabularies.

Lines, printed by ``python -m bench bench.bench_rows`` (or ``python bench/bench_rows.py``):

- ``restore with a row map vs a plain Saver restore``: ``plan.restore_or_initialize`` with
  ``rows={'body/emb': RowMap.from_vocab(...)}`` (weights and both Adam slots gathered, the rest
  restored) against ``Saver.restore`` of the same grown graph from a checkpoint that already has
  its shapes; the issue's bar is at most 1.5x;
- ``restore with a row map vs the same plan without``: the same against a plan without ``rows``
  restoring that grown checkpoint (its pre-flight check included on both sides);
- ``offline rewrite --rows: peak memory / one partition``: the peak of numpy allocations during
  ``ss.rewrite(..., rows=...)`` (tracemalloc) over the bytes of one of the 16 stored parts.

Protocol (:mod:`bench.report`): the sides alternate, warm page cache, ``RUNS`` runs each (at least 11).
"""

from __future__ import annotations

import os
import sys
import tempfile
import tracemalloc

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.report import RUNS, alternating, print_line  # noqa: E402

OLD_ROWS, NEW_ROWS, WIDTH = 30_718, 31_836, 64


def _graph(rows, parts):
    import numpy as np
    import tensorflow as tf

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        step = v1.train.get_or_create_global_step()
        emb = v1.get_variable("body/emb", [rows, WIDTH], partitioner=v1.fixed_size_partitioner(parts))
        scale = v1.constant(np.random.default_rng(rows).standard_normal((rows, WIDTH)).astype(np.float32))
        loss = tf.reduce_sum(tf.square(v1.convert_to_tensor(emb)) * scale)
        train = v1.train.AdamOptimizer(0.01).minimize(loss, global_step=step)
    return graph, train


def _vocabularies(directory):
    import numpy as np

    rng = np.random.default_rng(728)
    old = [f"tok{i}" for i in range(OLD_ROWS)]
    deleted = set(rng.choice(OLD_ROWS, 300, replace=False).tolist())
    new = [token for row, token in enumerate(old) if row not in deleted]
    new[1000:3000] = new[1000:3000][::-1]
    for count in range(NEW_ROWS - len(new)):
        new.insert(int(rng.integers(len(new) + 1)), f"new{count}")
    paths = os.path.join(directory, "old.txt"), os.path.join(directory, "new.txt")
    for path, tokens in zip(paths, (old, new)):
        with open(path, "w") as handle:
            handle.write("\n".join(tokens) + "\n")
    return paths


def run(report=print_line):
    import tensorflow as tf

    import subsetsaver as ss

    v1 = tf.compat.v1
    with tempfile.TemporaryDirectory() as directory:
        old_vocab, new_vocab = _vocabularies(directory)
        graph, train = _graph(OLD_ROWS, 16)
        with graph.as_default(), v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            session.run(train)
            old_prefix = v1.train.Saver().save(session, os.path.join(directory, "old", "model"))
        rows = ss.RowMap.from_vocab(old_vocab, new_vocab, init="mean")

        new_graph, _train = _graph(NEW_ROWS, 4)
        plan = ss.plan(ss.everything(), new_graph, rows={"body/emb": rows})
        same_plan = ss.plan(ss.everything(), new_graph)  # restores the grown checkpoint as it is
        with new_graph.as_default():
            saver = v1.train.Saver()
        session = v1.Session(graph=new_graph)
        plan.restore_or_initialize(session, old_prefix)
        with new_graph.as_default():
            new_prefix = saver.save(session, os.path.join(directory, "new", "model"))
        new_graph.finalize()

        def plain():
            with new_graph.as_default():
                saver.restore(session, new_prefix)

        ours, theirs = alternating(lambda: plan.restore_or_initialize(session, old_prefix), plain, max(RUNS, 11))
        report("restore with a row map vs a plain Saver restore", ours, theirs, "(bar: at most 1.5x)")
        ours, theirs = alternating(lambda: plan.restore_or_initialize(session, old_prefix),
                                   lambda: same_plan.restore_or_initialize(session, new_prefix), max(RUNS, 11))
        report("restore with a row map vs the same plan without", ours, theirs,
               "(right side: the plan without rows, not TensorFlow; bar: at most 1.5x)")
        session.close()

        part_bytes = OLD_ROWS * WIDTH * 4 // 16
        tracemalloc.start()
        ss.rewrite(old_prefix, os.path.join(directory, "offline", "model"), rows={"body/emb": rows})
        _current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"{'offline rewrite --rows: peak memory / one partition':<58} {peak / part_bytes:5.1f}x "
              f"({peak / 2**20:.1f} MiB peak, one of 16 parts {part_bytes / 2**20:.2f} MiB)", flush=True)


if __name__ == "__main__":
    run()
