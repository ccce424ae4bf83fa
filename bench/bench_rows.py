"""Row maps on the tensor2tensor#728 case: a 30,718 x 64 embedding in 16 parts, trained with Adam,
grown to 31,836 rows in 4 parts from two vocabularies.

Lines, printed by ``python -m bench bench.bench_rows`` (or ``python bench/bench_rows.py``):

- ``restore with a row map vs a plain Saver restore``: ``plan.restore_or_initialize`` with
  ``rows={'body/emb': RowMap.from_vocab(...)}`` (weights and both Adam slots gathered, the rest
  restored) against ``Saver.restore`` of the same grown graph from a checkpoint that already has
  its shapes; the issue's bar is at most 1.5x; the same pair again in CPU time (``time.process_time``
  of the process, every thread), which the machine's other work moves less than wall time;
- ``restore with a row map vs the same plan without``: the same against a plan without ``rows``
  restoring that grown checkpoint (its pre-flight check included on both sides);
- ``restore with a row map vs Saver.restore of the old graph``: against restoring the old checkpoint
  into the graph it was saved from, which reads the same 16-part tensors (TensorFlow reads a tensor
  stored in 16 parts 25-40% slower than one in 4): what the gathers and the mean cost;
- ``offline rewrite --rows``, the t2t case and a larger one (``SUBSETSAVER_BENCH_ROWS`` rows x 128,
  default 400,000, 16 parts, Adam slots, written without TensorFlow): each rewrite runs in a new
  process, which reports its peak of traced allocations (tracemalloc: numpy's buffers) and how far the
  rewrite raised its resident memory (``VmHWM`` after ``/proc/self/clear_refs``, Linux), over the bytes of
  one of the 16 stored parts.

Protocol (:mod:`bench.report`): the sides alternate, warm page cache, ``RUNS`` runs each (at least 11).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.report import RUNS, Timing, alternating, print_line  # noqa: E402

OLD_ROWS, NEW_ROWS, WIDTH = 30_718, 31_836, 64
LARGE_ROWS = int(os.environ.get("SUBSETSAVER_BENCH_ROWS", "400000"))
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MEASURE = """
import json, sys, tracemalloc
import numpy as np
import subsetsaver as ss

def status(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith(field + ":"))

prefix, indices, old_rows, out = sys.argv[1:5]
rows = ss.RowMap.from_indices(np.load(indices), init="mean", old_rows=int(old_rows))
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")  # the peak resident memory starts again from what is resident now
before = status("VmRSS")
tracemalloc.start()
ss.rewrite(prefix, out, rows={"body/emb": rows})
traced = tracemalloc.get_traced_memory()[1]
print(json.dumps({"traced": traced, "rss": status("VmHWM") - before}))
"""


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
        old_session = v1.Session(graph=graph)
        with graph.as_default():
            old_saver = v1.train.Saver()
            old_session.run(v1.global_variables_initializer())
            old_session.run(train)
            old_prefix = old_saver.save(old_session, os.path.join(directory, "old", "model"))
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
        ours, theirs = _cpu_times(lambda: plan.restore_or_initialize(session, old_prefix), plain, max(RUNS, 11))
        report("the same, CPU time", ours, theirs, "(every thread's; the bar is on wall time)")
        ours, theirs = alternating(lambda: plan.restore_or_initialize(session, old_prefix),
                                   lambda: same_plan.restore_or_initialize(session, new_prefix), max(RUNS, 11))
        report("restore with a row map vs the same plan without", ours, theirs,
               "(right side: the plan without rows, not TensorFlow; bar: at most 1.5x)")

        def same_bytes():
            with graph.as_default():
                old_saver.restore(old_session, old_prefix)

        ours, theirs = alternating(lambda: plan.restore_or_initialize(session, old_prefix), same_bytes, max(RUNS, 11))
        report("restore with a row map vs Saver.restore of the old graph", ours, theirs,
               "(the same 16-part tensors read: what the map itself costs)")
        session.close()
        old_session.close()

        _offline_line("offline rewrite --rows, t2t case", directory, old_prefix, rows.new_to_old, OLD_ROWS, WIDTH)
        large = _large_checkpoint(directory, LARGE_ROWS, 128)
        _offline_line(f"offline rewrite --rows, {LARGE_ROWS:,} x 128", directory, *large, 128)


def _cpu_times(ours, theirs, runs):
    """``(Timing, Timing)`` of the process's CPU time (every thread), sides alternating."""
    times = {ours: [], theirs: []}
    for index in range(runs):
        for function in (ours, theirs) if index % 2 == 0 else (theirs, ours):
            start = time.process_time()
            function()
            times[function].append(time.process_time() - start)
    return Timing(tuple(times[ours])), Timing(tuple(times[theirs]))


def _grown_indices(old_rows, seed=728):
    """``new_to_old`` of a vocabulary grown as the t2t one is: 1% of the rows deleted, 2,000 reversed,
    3.6% more inserted at random places."""
    import numpy as np

    rng = np.random.default_rng(seed)
    kept = np.delete(np.arange(old_rows), rng.choice(old_rows, old_rows // 100, replace=False))
    kept[1000:3000] = kept[1000:3000][::-1].copy()
    new = kept.tolist()
    for _ in range(old_rows * (NEW_ROWS - OLD_ROWS + 300) // OLD_ROWS):
        new.insert(int(rng.integers(len(new) + 1)), -1)
    return np.asarray(new, np.int64)


def _large_checkpoint(directory, rows, width, parts=16):
    """A checkpoint of ``body/emb`` [rows, width] in ``parts`` parts with Adam slots, written without
    TensorFlow: ``(prefix, new_to_old, rows)``."""
    import numpy as np

    from subsetsaver.formats.tf import bundle as tf_bundle

    prefix = os.path.join(directory, "large", "model")
    os.makedirs(os.path.dirname(prefix))
    rng = np.random.default_rng(rows)
    sizes = [rows // parts + (1 if index < rows % parts else 0) for index in range(parts)]
    with tf_bundle.BundleWriter(prefix) as writer:
        writer.add("global_step", np.int64(2))
        writer.add("beta1_power", np.float32(0.9 ** 3))
        writer.add("beta2_power", np.float32(0.999 ** 3))
        for name in ("body/emb", "body/emb/Adam", "body/emb/Adam_1"):
            start = 0
            for size in sizes:
                writer.add_slice(name, (rows, width), (start, 0), rng.standard_normal((size, width), dtype=np.float32))
                start += size
    return prefix, _grown_indices(rows), rows


def _offline_line(label, directory, prefix, new_to_old, old_rows, width):
    """Print the peak memory of ``rewrite --rows`` of ``prefix`` in a new process, over one stored part."""
    import numpy as np

    indices = os.path.join(directory, f"indices-{old_rows}.npy")
    np.save(indices, np.asarray(new_to_old))
    out = os.path.join(directory, f"offline-{old_rows}", "model")
    found = json.loads(subprocess.run(
        [sys.executable, "-c", _MEASURE, prefix, indices, str(old_rows), out], check=True, capture_output=True,
        text=True, cwd=directory, env={**os.environ, "PYTHONPATH": _ROOT}).stdout.splitlines()[-1])
    part = old_rows * width * 4 / 16
    print(f"{label + ': peak memory / one partition':<58} {found['traced'] / part:5.1f}x traced, "
          f"{found['rss'] / part:5.1f}x resident ({found['traced'] / 2**20:.1f} / {found['rss'] / 2**20:.1f} MiB; "
          f"one of 16 parts {part / 2**20:.2f} MiB, the tensor {16 * part / 2**20:.1f} MiB)", flush=True)


if __name__ == "__main__":
    run()
