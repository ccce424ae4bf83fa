"""Reads at memory speed: ``diff``, ``slim`` and ``convert`` of 1 GB checkpoints against ``cat`` of the same files.

Each line times a library call in this process (the command line adds its start-up, about a
second, to every command) against ``cat FILES > /dev/null`` of the files that call reads, in
the same run, sides alternating (:func:`bench.report.alternating`), warm (the files in the page
cache) and cold (before every run the page cache is dropped with ``/proc/sys/vm/drop_caches``
where this process may, else the files' cached pages are dropped with ``posix_fadvise(DONTNEED)``;
the note says which). The ratio is ours over ``cat``'s time; the note gives ours as read rate
per input. Every tensor is verified against its checksum on every line.

Lines: ``diff`` of a checkpoint and its copy (equal bytes), ``diff`` of two checkpoints whose
every tensor differs (each element measured), reading every tensor verified (what ``convert``
and ``slim`` read), ``slim`` of two thirds (read, written durably, read back and verified) and
``convert`` to ``.npz`` (the same, through the zip writer).

Run: ``python -m bench reads`` (smaller: ``SUBSETSAVER_BENCH_GB=0.25``; fewer runs:
``SUBSETSAVER_BENCH_RUNS=3``).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.report import RUNS, alternating, print_line  # noqa: E402

GIGABYTES = float(os.environ.get("SUBSETSAVER_BENCH_GB", "1.0"))
TENSOR_MB = 64
PAUSE = float(os.environ.get("SUBSETSAVER_BENCH_PAUSE", "1"))


def make_checkpoint(prefix, shift):
    """About GIGABYTES of float32 tensors of TENSOR_MB each, a third of them named as Adam slots."""
    import numpy as np

    from subsetsaver.formats.tf import bundle as tf_bundle

    count = max(3, int(GIGABYTES * 1024 / TENSOR_MB))
    rows = TENSOR_MB * 2**20 // 4 // 1024
    rng = np.random.default_rng(0)
    with tf_bundle.BundleWriter(prefix) as writer:
        for index in range(count):
            name = f"layer_{index // 3}/w" + ("/Adam" if index % 3 == 2 else f"_{index % 3}")
            writer.add(name, rng.standard_normal((rows, 1024), dtype=np.float32) + np.float32(shift))
    return prefix


def data_files(prefix):
    from subsetsaver.formats.tf import bundle as tf_bundle

    return tf_bundle.data_files(prefix)


def drop_cache(paths):
    """Written pages flushed, then the page cache dropped; returns how ('drop_caches' or 'fadvise')."""
    from subsetsaver import storage

    storage.finish_background_work()
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("3\n")
        how = "drop_caches"
    except OSError:  # not root, or not Linux: the files' own pages
        for path in paths:
            descriptor = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(descriptor)
        how = "fadvise"
    time.sleep(PAUSE)
    return how


def cat(paths):
    def run():
        subprocess.run(["cat", *paths], stdout=subprocess.DEVNULL, check=True)
    return run


def line(label, ours, paths, inputs, report, *, cold, note="", runs=RUNS, clean=lambda: None):
    """One line: ``ours()`` against ``cat paths``, warm or cold; ``inputs``: bytes read per input."""
    from subsetsaver import storage

    how = []

    def before():
        clean()
        if cold:
            how.append(drop_cache(paths))
        else:
            storage.finish_background_work()
            os.sync()

    for path in paths:  # warm: in the page cache before the first run
        cat([path])()
    theirs = cat(paths)
    mine, reference = alternating(ours, theirs, runs, before=before)
    rate = inputs / mine.median / 1e9
    text = f"ours {rate:.2f} GB/s per input, cat {sum(map(os.path.getsize, paths)) / reference.median / 1e9:.2f} GB/s"
    if cold:
        text += f"; cache dropped by {how[0]}"
    report(f"{label}, {'cold' if cold else 'warm'}", mine, reference, f"{text}{'; ' + note if note else ''}",
           reference_name="cat")


def run(report=print_line):
    from subsetsaver import storage
    from subsetsaver.tools.convert import convert
    from subsetsaver.tools.diff import diff
    from subsetsaver.tools.slim import slim

    directory = tempfile.mkdtemp(prefix="subsetsaver-reads-")
    try:
        a = make_checkpoint(os.path.join(directory, "a"), 0)
        b = make_checkpoint(os.path.join(directory, "b"), 0.5)
        copy = os.path.join(directory, "copy")
        for path in storage.list_directory(directory):
            if path.startswith("a."):
                shutil.copyfile(os.path.join(directory, path), os.path.join(directory, "copy" + path[1:]))
        size = sum(map(os.path.getsize, data_files(a)))
        out = os.path.join(directory, "out")

        def clean():
            shutil.rmtree(out, ignore_errors=True)

        def read_all():
            from subsetsaver import catalog

            names = catalog.file_catalog(a).ordered_names
            for _, value in catalog.read_tensors(a, names):
                del value

        for cold in (False, True):
            runs = RUNS if not cold else max(3, RUNS // 2)
            line(f"diff two {size / 2**30:.2f} GB checkpoints, equal bytes", lambda: diff(a, copy, progress=False),
                 data_files(a) + data_files(copy), size, report, cold=cold, runs=runs)
            line(f"diff two {size / 2**30:.2f} GB checkpoints, every tensor changed",
                 lambda: diff(a, b, progress=False), data_files(a) + data_files(b), size, report, cold=cold, runs=runs,
                 note="every element's difference measured")
            line(f"read every tensor of {size / 2**30:.2f} GB, verified", read_all, data_files(a), size, report,
                 cold=cold, runs=runs, note="what convert and slim read")
            line("slim two thirds of it", lambda: slim(a, "~name('**/Adam')", os.path.join(out, "slim")),
                 data_files(a), size * 2 // 3, report, cold=cold, runs=runs, clean=clean,
                 note="read, written durably, read back and verified")
            line("convert it to .npz", lambda: convert(a, os.path.join(out, "model.npz")), data_files(a), size, report,
                 cold=cold, runs=runs, clean=clean, note="read, written durably, read back and verified")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    run()
