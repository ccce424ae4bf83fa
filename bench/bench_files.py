"""File commands on a 1 GB checkpoint, each a whole cold process, against TensorFlow's own tools.

- ``subsetsaver inspect CKPT`` against ``python -m tensorflow.python.tools.inspect_checkpoint``
  (both list every tensor's name, dtype and shape);
- ``subsetsaver slim CKPT --keep ...`` (copy two thirds, verify) and ``subsetsaver convert CKPT
  OUT.safetensors``, against a TensorFlow script that loads the same tensors with
  ``tf.train.load_checkpoint`` and writes them with ``SaveV2``; the note gives each side's peak
  resident memory (``wait4``'s ``ru_maxrss``) and the largest tensor;
- ``subsetsaver diff A B`` (every tensor changed; and a checkpoint against its copy) and
  ``subsetsaver average A B -o OUT`` on two such checkpoints, against
  TensorFlow scripts that read both with ``tf.train.load_checkpoint`` and compare them with numpy,
  or average them and write the result with ``SaveV2``; the note gives the read rate and peaks;
- ``subsetsaver convert CKPT OUT --to name`` of a TF2 object-based checkpoint (``tf.train.Checkpoint``
  of 64 MB ``tf.Variable`` s and a Keras 3 Adam's slots over them, written by TensorFlow in a child
  process), against a TensorFlow script that reads it with ``tf.train.load_checkpoint`` and writes
  its tensors with ``SaveV2``; the note gives both peaks and the largest tensor.

Sides alternate; each line is the median of 3 runs. Run: ``python bench/bench_files.py``
(smaller: ``SUBSETSAVER_BENCH_GB=0.25``).
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.report import print_line  # noqa: E402

GIGABYTES = float(os.environ.get("SUBSETSAVER_BENCH_GB", "1.0"))
TENSOR_MB = 64
RUNS = 3

TF_COPY = """
import sys
import tensorflow as tf
prefix, output = sys.argv[1], sys.argv[2]
reader = tf.train.load_checkpoint(prefix)
names = sorted(n for n in reader.get_variable_to_shape_map() if not n.endswith("/Adam"))
tf.raw_ops.SaveV2(prefix=output, tensor_names=names, shape_and_slices=[""] * len(names),
                  tensors=[reader.get_tensor(n) for n in names])
"""


TF_DIFF = """
import sys
import numpy as np
import tensorflow as tf
a, b = (tf.train.load_checkpoint(p) for p in sys.argv[1:3])
names = sorted(a.get_variable_to_shape_map())
changed = [n for n in names if not np.array_equal(a.get_tensor(n), b.get_tensor(n))]
"""

TF_AVERAGE = """
import sys
import tensorflow as tf
a, b = (tf.train.load_checkpoint(p) for p in sys.argv[1:3])
names = sorted(a.get_variable_to_shape_map())
tf.raw_ops.SaveV2(prefix=sys.argv[3], tensor_names=names, shape_and_slices=[""] * len(names),
                  tensors=[(a.get_tensor(n) + b.get_tensor(n)) / 2 for n in names])
"""


TF_OBJECT_CHECKPOINT = """
import sys
import keras
import tensorflow as tf
prefix, count, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
variables = [tf.Variable(tf.fill((rows, 1024), float(index)), name=f"layer_{index}/w") for index in range(count)]
optimizer = keras.optimizers.Adam()
optimizer.build(variables)
for index, slot in enumerate(v for v in optimizer.variables if len(v.shape) == 2):
    slot.assign(tf.fill(slot.shape, index + 0.5))
optimizer.iterations.assign(1000)
tf.train.Checkpoint(variables=variables, optimizer=optimizer).write(prefix)
"""

TF_OBJECT_TO_NAME = """
import sys
import tensorflow as tf
prefix, output = sys.argv[1], sys.argv[2]
reader = tf.train.load_checkpoint(prefix)
keys = sorted(k for k in reader.get_variable_to_shape_map() if k != "_CHECKPOINTABLE_OBJECT_GRAPH")
names = [k.replace("/.ATTRIBUTES/VARIABLE_VALUE", "") for k in keys]
tf.raw_ops.SaveV2(prefix=output, tensor_names=names, shape_and_slices=[""] * len(names),
                  tensors=[reader.get_tensor(k) for k in keys])
"""


# Linux keeps a process's peak RSS across exec, so a command forked from this process (which has
# written gigabytes) would report this process's size: a small launcher starts it and reports its peak.
PEAK_LAUNCHER = """
import os, subprocess, sys, time
start = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
print(os.waitstatus_to_exitcode(status), time.perf_counter() - start, usage.ru_maxrss * 1024)
"""


def timed(command, allowed=(0,)):
    """(seconds, peak resident bytes) of one child process that ends with an ``allowed`` exit code."""
    result = subprocess.run([sys.executable, "-c", PEAK_LAUNCHER, *command], capture_output=True, text=True)
    code, seconds, peak = result.stdout.split()
    if int(code) not in allowed:
        raise RuntimeError(f"{command} failed")
    return float(seconds), int(peak)


def paired(ours, theirs, cleanup=lambda: None, ours_allowed=(0,)):
    """Medians of alternating runs: ((seconds, peak), (seconds, peak))."""
    results = {"ours": [], "theirs": []}
    for _ in range(RUNS):
        for side, command in (("ours", ours), ("theirs", theirs)):
            cleanup()
            results[side].append(timed(command, ours_allowed if side == "ours" else (0,)))
    return tuple((statistics.median(s for s, _ in runs), max(p for _, p in runs))
                 for runs in (results["ours"], results["theirs"]))


def run(report=print_line):
    import numpy as np

    directory = tempfile.mkdtemp(prefix="subsetsaver-files-")
    try:
        count = max(3, int(GIGABYTES * 1024 / TENSOR_MB))
        prefix = os.path.join(directory, "model")
        from subsetsaver.formats.tf import bundle as tf_bundle

        rows = TENSOR_MB * 2**20 // 4 // 1024
        with tf_bundle.BundleWriter(prefix) as writer:  # a third of the tensors are 'Adam' slots
            for index in range(count):
                name = f"layer_{index // 3}/w" + ("/Adam" if index % 3 == 2 else f"_{index % 3}")
                writer.add(name, np.full((rows, 1024), index, np.float32))
        size = sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory))
        ours_cli = [sys.executable, "-m", "subsetsaver"]
        (ours, _), (theirs, _) = paired(
            ours_cli + ["inspect", prefix],
            [sys.executable, "-m", "tensorflow.python.tools.inspect_checkpoint", f"--file_name={prefix}"])
        report(f"inspect {size / 2**30:.2f} GB checkpoint, cold process", ours, theirs,
               "vs python -m tensorflow.python.tools.inspect_checkpoint")

        slim_out = os.path.join(directory, "out", "slim")
        tf_out = os.path.join(directory, "out", "tf")

        def clean():
            shutil.rmtree(os.path.join(directory, "out"), ignore_errors=True)
            os.makedirs(os.path.join(directory, "out"))
            os.sync()

        (ours, ours_peak), (theirs, theirs_peak) = paired(
            ours_cli + ["slim", prefix, "--keep", "~name('**/Adam')", "-o", slim_out],
            [sys.executable, "-c", TF_COPY, prefix, tf_out], clean)
        note = (f"{size * 2 / 3 / 2**30:.2f} GB written and verified; peak RSS ours {ours_peak / 2**20:.0f} MB, "
                f"TensorFlow {theirs_peak / 2**20:.0f} MB; largest tensor {TENSOR_MB} MB")
        report("slim two thirds of it (ours verifies every tensor)", ours, theirs, note)
        (ours, ours_peak), (theirs, theirs_peak) = paired(
            ours_cli + ["convert", prefix, os.path.join(directory, "out", "m.safetensors"),
                        "--keep", "~name('**/Adam')"],
            [sys.executable, "-c", TF_COPY, prefix, tf_out], clean)
        report("convert two thirds of it to safetensors", ours, theirs,
               f"peak RSS ours {ours_peak / 2**20:.0f} MB (safetensors' writer holds what it writes), "
               f"TensorFlow {theirs_peak / 2**20:.0f} MB")
        second = os.path.join(directory, "second")
        with tf_bundle.BundleWriter(second) as writer:  # the same names, every tensor different
            for index in range(count):
                name = f"layer_{index // 3}/w" + ("/Adam" if index % 3 == 2 else f"_{index % 3}")
                writer.add(name, np.full((rows, 1024), index + 0.5, np.float32))
        read = 2 * size / 2**20
        (ours, ours_peak), (theirs, theirs_peak) = paired(
            ours_cli + ["diff", prefix, second, "--json"], [sys.executable, "-c", TF_DIFF, prefix, second], clean,
            ours_allowed=(1,))  # 1: the checkpoints differ
        report("diff two of them (every tensor changed)", ours, theirs,
               f"ours reads {read / ours:.0f} MB/s; peak RSS ours {ours_peak / 2**20:.0f} MB, "
               f"TensorFlow {theirs_peak / 2**20:.0f} MB")
        copy = os.path.join(directory, "copy")
        for suffix in (".index", ".data-00000-of-00001"):
            shutil.copyfile(prefix + suffix, copy + suffix)
        (ours, ours_peak), (theirs, theirs_peak) = paired(
            ours_cli + ["diff", prefix, copy, "--json"], [sys.executable, "-c", TF_DIFF, prefix, copy], clean)
        report("diff one and its copy (equal bytes)", ours, theirs,
               f"ours reads {read / ours:.0f} MB/s; peak RSS ours {ours_peak / 2**20:.0f} MB, "
               f"TensorFlow {theirs_peak / 2**20:.0f} MB")
        (ours, ours_peak), (theirs, theirs_peak) = paired(
            ours_cli + ["average", prefix, second, "-o", os.path.join(directory, "out", "avg"),
                        "--keep", "everything()"],
            [sys.executable, "-c", TF_AVERAGE, prefix, second, tf_out], clean)
        report("average two of them (ours verifies every tensor)", ours, theirs,
               f"ours reads {read / ours:.0f} MB/s; peak RSS ours {ours_peak / 2**20:.0f} MB, "
               f"TensorFlow {theirs_peak / 2**20:.0f} MB")
        object_to_name(directory, clean, report)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def object_to_name(directory, clean, report=print_line):
    """The line 'convert an object-based checkpoint to name-based': variables of TENSOR_MB and their
    two Adam slots each, about GIGABYTES in all, written by TensorFlow."""
    count = max(1, round(GIGABYTES * 1024 / TENSOR_MB / 3))
    rows = TENSOR_MB * 2**20 // 4 // 1024
    source = os.path.join(directory, "object", "ckpt")
    subprocess.run([sys.executable, "-c", TF_OBJECT_CHECKPOINT, source, str(count), str(rows)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    size = sum(os.path.getsize(os.path.join(directory, "object", n)) for n in os.listdir(os.path.dirname(source)))
    (ours, ours_peak), (theirs, theirs_peak) = paired(
        [sys.executable, "-m", "subsetsaver", "convert", source, os.path.join(directory, "out", "name"), "--to", "name"],
        [sys.executable, "-c", TF_OBJECT_TO_NAME, source, os.path.join(directory, "out", "tf")], clean)
    report("convert an object-based checkpoint to name-based", ours, theirs,
           f"{size / 2**30:.2f} GB, {count} variable{'s' if count > 1 else ''} and {2 * count} Adam slots "
           "(ours writes TF1 names, global_step, beta powers, and verifies); "
           f"peak RSS ours {ours_peak / 2**20:.0f} MB, TensorFlow {theirs_peak / 2**20:.0f} MB; "
           f"largest tensor {TENSOR_MB} MB")


if __name__ == "__main__":
    run()
