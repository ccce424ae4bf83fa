"""Portable checkpoints (``save_npz``/``restore_npz``) against ``tf.compat.v1.train.Saver``, same variables, same run.

Lines: save and restore of large variables (20 x 50 MB by default), each run both cold
and warm (see :mod:`bench.report`: cold drops the page cache and idles ``PAUSE`` seconds
first, so a virtual machine has handed freed memory back to its host, as saves minutes
apart always meet it; warm reuses what the run before left), first and later restores and
saves of 3,000 small variables, the first ``save_npz`` against fetching everything and
writing it with numpy, the ops added across 100 restores, and the peak memory a save adds
(measured in a child process) against the largest variable.

Both sides write the same variables to the same directory; the sides alternate and every
line gives the median and spread of ``RUNS`` runs (5) and the run-by-run ratio. Our save is
durable (fsync of the file and of its directory); the Saver's is not, so the save lines come
with two more: ours without fsync, and the Saver's followed by an fsync of its files.

Run: ``python bench/bench_portable.py`` (or ``python -m bench bench.bench_portable``). Quick
run: ``SUBSETSAVER_BENCH_MB=5 SUBSETSAVER_BENCH_LARGE=4 python bench/bench_portable.py``.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.report import RUNS, alternating, cold, print_line, warm  # noqa: E402

LARGE_MB = float(os.environ.get("SUBSETSAVER_BENCH_MB", "50"))
LARGE_COUNT = int(os.environ.get("SUBSETSAVER_BENCH_LARGE", "20"))
SMALL_COUNT = int(os.environ.get("SUBSETSAVER_BENCH_SMALL", "3000"))


def large_graph(count=LARGE_COUNT, megabytes=LARGE_MB):
    """``count`` float32 resource variables of ``megabytes`` each, random values, and their Saver."""
    import tensorflow as tf

    v1 = tf.compat.v1
    size = int(megabytes * 2**20) // 4
    graph = tf.Graph()
    with graph.as_default():
        variables = [v1.get_variable(f"large/v{i:02d}", [size], initializer=v1.random_uniform_initializer(seed=i),
                                     use_resource=True) for i in range(count)]
        saver = v1.train.Saver(variables, max_to_keep=None)
        init = v1.variables_initializer(variables)
    return graph, saver, init


def small_graph(count=SMALL_COUNT):
    """``count`` small resource variables (shape [2]) built fast, and their Saver."""
    import tensorflow as tf

    from bench.bench_selectors import build_wide_graph

    graph = build_wide_graph(count)
    with graph.as_default():
        variables = tf.compat.v1.global_variables()
        start = time.perf_counter()
        saver = tf.compat.v1.train.Saver(variables, max_to_keep=None)
        saver_build = time.perf_counter() - start
        init = tf.compat.v1.variables_initializer(variables)
    return graph, saver, init, saver_build


def timed(function):
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def checkpoint_bytes(prefix):
    directory, base = os.path.split(prefix)
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory)
               if n.startswith(base + ".") and not n.endswith(".meta"))


def bench_large(report, directory):
    import tensorflow as tf

    import subsetsaver as ss
    from subsetsaver import portable

    graph, saver, init = large_graph()
    npz_path = os.path.join(directory, "portable_large.npz")
    prefix = os.path.join(directory, "large")
    portable.prepare_npz(ss.everything(), graph)
    shape = f"{LARGE_COUNT} x {LARGE_MB:g} MB"
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        ours = lambda: portable.save_npz(sess, npz_path)  # noqa: E731
        theirs = lambda: saver.save(sess, prefix, write_meta_graph=False, write_state=False)  # noqa: E731
        ours(), theirs()  # warm-up: executors built, files in place (each later save replaces one)
        for memory, before in (("cold", cold), ("warm", warm)):
            report(f"save {shape}, {memory}", *alternating(ours, theirs, before=before),
                   "ours fsyncs the file and its directory, the Saver does not; target <= 1.25x")
        with _without_fsync():
            report("  the same save, ours without fsync, cold", *alternating(ours, theirs, before=cold),
                   "neither durable")
        report("  the same save, the Saver's files fsynced after it, cold",
               *alternating(ours, lambda: (theirs(), _fsync_checkpoint(prefix)), before=cold), "both durable")
        restore_ours = lambda: portable.restore_npz(sess, npz_path)  # noqa: E731
        restore_theirs = lambda: saver.restore(sess, prefix)  # noqa: E731
        restore_ours(), restore_theirs()  # the first run of each restore builds its executor
        for memory, before in (("cold", cold), ("warm", warm)):
            report(f"restore {shape}, {memory}", *alternating(restore_ours, restore_theirs, before=before),
                   "ours reads and checksums the whole file first; target <= 1.25x")


def _fsync_checkpoint(prefix):
    directory, base = os.path.split(prefix)
    for name in os.listdir(directory):
        if name.startswith(base + "."):
            descriptor = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class _without_fsync:
    """Make our saves skip every fsync (file, directory, and the background fdatasyncs) for some measurements:
    ``os.fsync``, ``os.fdatasync`` and ``local_files.fsync_directory`` are no-ops in this process until exit."""

    def __enter__(self):
        from subsetsaver.storage import local as local_files

        def skipped(_):
            return None

        self._patched = [(os, "fsync"), (os, "fdatasync"), (local_files, "fsync_directory")]
        self._saved = [getattr(owner, name) for owner, name in self._patched]
        for owner, name in self._patched:
            setattr(owner, name, skipped)
        return self

    def __exit__(self, *exc):
        for (owner, name), original in zip(self._patched, self._saved):
            setattr(owner, name, original)
        return False


def bench_small(report, directory):
    import numpy as np
    import tensorflow as tf

    import subsetsaver as ss
    from subsetsaver import portable

    graph, saver, init, saver_build = small_graph()
    npz_path = os.path.join(directory, "portable_small.npz")
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        variables = tf.compat.v1.global_variables()
        first = timed(lambda: portable.save_npz(sess, npz_path))
        numpy_path = os.path.join(directory, "numpy_small.npz")
        by_numpy = timed(lambda: np.savez(numpy_path, **{f"a{i}": v for i, v in enumerate(sess.run(variables))}))
        report(f"first save_npz, {SMALL_COUNT:,} small variables", first, by_numpy,
               "TensorFlow column: one session.run of everything, then np.savez; target <= 2x")
    graph, saver, init, saver_build = small_graph()
    start = time.perf_counter()
    portable.prepare_npz(ss.everything(), graph)
    prepare = time.perf_counter() - start
    report(f"build restore ops, {SMALL_COUNT:,} small variables", prepare, saver_build,
           "prepare_npz vs constructing the Saver (both at plan time)")
    graph.finalize()
    prefix = os.path.join(directory, "small")
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        save_ours = lambda: portable.save_npz(sess, npz_path)  # noqa: E731
        save_theirs = lambda: saver.save(sess, prefix, write_meta_graph=False, write_state=False)  # noqa: E731
        save_ours(), save_theirs()
        report(f"save {SMALL_COUNT:,} small variables", *alternating(save_ours, save_theirs, before=warm),
               "target <= 1.5x")
        restore_ours = lambda: portable.restore_npz(sess, npz_path)  # noqa: E731
        restore_theirs = lambda: saver.restore(sess, prefix)  # noqa: E731
        cold()
        theirs = timed(restore_theirs)
        ours = timed(restore_ours)
        report(f"first restore, {SMALL_COUNT:,} small variables", ours, theirs, "one run each; target <= 2x")
        later = alternating(restore_ours, restore_theirs, runs=max(RUNS, 9))
        report(f"later restores, {SMALL_COUNT:,} small variables", *later, "target <= 1.5x")

        ops_before = len(graph.get_operations())
        ours = timed(lambda: [restore_ours() for _ in range(100)])
        ours_added = len(graph.get_operations()) - ops_before
        theirs = timed(lambda: [restore_theirs() for _ in range(100)])
        report(f"100 restores, {SMALL_COUNT:,} small variables", ours, theirs,
               f"ops added: {ours_added} (graph finalized; {ops_before:,} ops)")


MEMORY_CHILD = "--memory-child"


def memory_child(mode, directory):
    """In a fresh process: peak resident memory added by one save, in bytes (Linux VmHWM)."""
    import tensorflow as tf

    from subsetsaver import portable

    graph, saver, init = large_graph()
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        if mode == "npz":
            portable.prepare_npz(None, graph)
        before = _status("VmRSS")
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")  # resets VmHWM, the peak resident set size, to the current size
        start = time.perf_counter()
        if mode == "npz":
            path = portable.save_npz(sess, os.path.join(directory, "portable_memory.npz"))
            size = os.path.getsize(path)
        else:
            prefix = saver.save(sess, os.path.join(directory, "memory"), write_meta_graph=False, write_state=False)
            size = checkpoint_bytes(prefix)
        seconds = time.perf_counter() - start
        peak = _status("VmHWM")
    print(json.dumps({"extra": peak - before, "size": size, "seconds": seconds}))


def _status(field):
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def bench_memory(report, directory):
    directory = os.path.join(directory, "memory")  # its own: this process holds its directory for its saves
    os.makedirs(directory)
    results = {}
    for mode in ("npz", "tf"):
        done = subprocess.run([sys.executable, os.path.abspath(__file__), MEMORY_CHILD, mode, directory],
                              capture_output=True, text=True, check=True)
        results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    ours, theirs = results["npz"], results["tf"]
    largest = LARGE_MB * 2**20
    report(f"save peak memory, {LARGE_COUNT} x {LARGE_MB:g} MB", ours["seconds"], theirs["seconds"],
           f"peak extra RSS: npz {ours['extra'] / 2**20:.0f} MB = {ours['extra'] / largest:.2f}x the largest "
           f"variable (target <= 1.2x + 64 MB = {(1.2 * largest + 2**26) / 2**20:.0f} MB); Saver "
           f"{theirs['extra'] / 2**20:.0f} MB")


def run(report=print_line):
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    print(f"# portable checkpoints vs tf.compat.v1.train.Saver: medians (spread) of {RUNS} alternating runs; "
          f"load average {load}", flush=True)
    directory = tempfile.mkdtemp(prefix="bench_portable_")
    try:
        bench_large(report, directory)
        bench_small(report, directory)
        if os.path.exists("/proc/self/clear_refs"):
            bench_memory(report, directory)
        else:
            report("save peak memory", 0.0, None, "skipped: needs Linux /proc/self/clear_refs")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == MEMORY_CHILD:
        memory_child(sys.argv[2], sys.argv[3])
    else:
        run()
