"""Long runs: 20 rounds of save + restore of a 1 GB plan, against ``tf.compat.v1.train.Saver`` doing the same.

Each run happens in its own child process (a clean memory baseline): TensorFlow's Saver,
``ss.plan(..., backend='tf')`` and ``ss.plan(..., backend='npz')``. A line reports the
seconds for all rounds, ours against the Saver's, and notes the ops added after the first
round (``graph.version``), the resident-memory growth over the last 10 rounds (median of
rounds 15-19 minus median of rounds 5-9, after ``malloc_trim``) and the peak resident memory.

Run: ``python bench/bench_long_runs.py`` (or ``python -m bench bench.bench_long_runs``).
Smaller: ``SUBSETSAVER_BENCH_GB=0.25 SUBSETSAVER_BENCH_ROUNDS=10 python bench/bench_long_runs.py``.
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

from bench.report import print_line  # noqa: E402

GIGABYTES = float(os.environ.get("SUBSETSAVER_BENCH_GB", "1.0"))
ROUNDS = int(os.environ.get("SUBSETSAVER_BENCH_ROUNDS", "20"))
VARIABLE_MB = 64


def resident_bytes() -> int:
    """Resident memory now, after handing freed heap memory back to the system (glibc)."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_resident_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def build_graph(gigabytes):
    """float32 resource variables of VARIABLE_MB each, ``gigabytes`` in all, and a global step."""
    import tensorflow as tf

    v1 = tf.compat.v1
    size = VARIABLE_MB * 2**20 // 4
    count = max(1, round(gigabytes * 2**30 / (VARIABLE_MB * 2**20)))
    graph = tf.Graph()
    with graph.as_default():
        variables = [v1.get_variable(f"large/v{i:03d}", [size], initializer=v1.random_uniform_initializer(seed=i),
                                     use_resource=True) for i in range(count)]
        variables.append(v1.train.get_or_create_global_step())
    return graph, variables


def one_run(kind, directory):
    """Time ROUNDS rounds of save + restore in this process; a dict of figures."""
    import numpy as np
    import tensorflow as tf

    import subsetsaver as ss

    v1 = tf.compat.v1
    graph, variables = build_graph(GIGABYTES)
    if kind == "saver":
        with graph.as_default():
            saver = v1.train.Saver(variables, max_to_keep=2)
            init = v1.variables_initializer(variables)

        def save(sess, step):
            return saver.save(sess, os.path.join(directory, "model"), global_step=step, write_meta_graph=False)

        def restore(sess, prefix):
            saver.restore(sess, prefix)
    else:
        the_plan = ss.plan(ss.everything(), graph, backend=kind, max_to_keep=2)
        init = None

        def save(sess, step):
            options = {"write_meta_graph": False} if kind == "tf" else {}
            return the_plan.save(sess, os.path.join(directory, "model"), global_step=step, **options)

        def restore(sess, prefix):
            the_plan.restore_or_initialize(sess, prefix)
    versions, resident, seconds = [], [], 0.0
    with v1.Session(graph=graph) as sess:
        if init is not None:
            sess.run(init)
        else:
            the_plan.restore_or_initialize(sess, None)
        for step in range(ROUNDS):
            start = time.perf_counter()
            prefix = save(sess, step)
            restore(sess, prefix)
            seconds += time.perf_counter() - start
            versions.append(graph.version)
            resident.append(resident_bytes())
    half = len(resident) // 2
    return {
        "seconds": seconds,
        "ops_added": versions[-1] - versions[0],
        "growth": float(np.median(resident[-max(1, half // 2):]) - np.median(resident[half // 2:half])),
        "peak": peak_resident_bytes(),
        "bytes": sum(int(np.prod(v.shape.as_list())) * v.dtype.size for v in variables),
    }


def measure(kind):
    """Run ``one_run(kind)`` in a child process (clean memory), in a scratch directory removed afterwards."""
    directory = tempfile.mkdtemp(prefix=f"bench_long_{kind}_")
    try:
        output = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind, directory],
                                check=True, capture_output=True, text=True).stdout
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return json.loads(output.strip().splitlines()[-1])


def run(report):
    saver = measure("saver")
    for backend in ("tf", "npz"):
        ours = measure(backend)
        note = (f"ops added after round 1: {ours['ops_added']} (Saver {saver['ops_added']}); "
                f"RSS growth over last {ROUNDS // 2} rounds {ours['growth'] / 2**20:+.1f} MiB "
                f"(Saver {saver['growth'] / 2**20:+.1f}); peak RSS {ours['peak'] / 2**30:.2f} GiB "
                f"(Saver {saver['peak'] / 2**30:.2f})")
        label = f"{ROUNDS} x save+restore {ours['bytes'] / 2**30:.2f} GiB, backend {backend!r}"
        report(label, ours["seconds"], saver["seconds"], note)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps(one_run(sys.argv[2], sys.argv[3])))
    else:
        run(print_line)
