"""Checkpoints in buckets: bytes fetched, memory and throughput of the file commands on gs:// and s3://.

The stores are the servers the tests use (fake-gcs-server behind gcsfs, moto's S3 server behind
s3fs), on this machine. The checkpoint is a ``tf.compat.v1.train.Saver`` save of two dense layers
trained with Adam (``WIDTH`` 3300: about 260 MB with the slots). Every command runs in its own process,
configured through the environment only, as a user runs it. Lines, for each store:

- ``inspect``: bytes that crossed the socket (counted by a relay, HTTP headers included) over the
  ``.index`` size;
- ``convert --keep trainable()`` to ``.safetensors``: bytes on the socket over the selected bytes,
  and the process's peak RSS above its RSS before the command, over the largest tensor;
- a full ``convert`` to a local ``.npz`` against an fsspec ``get`` of the same objects to local
  disk (no relay; the median of ``RUNS`` alternating runs): the throughput ratio; and reading
  every tensor (verified, written nowhere) against the same ``get``.

Run: ``python bench/bench_remote.py``; quick: ``SUBSETSAVER_BENCH_WIDTH=1000 python bench/bench_remote.py``.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPOSITORY, "tests"))

import object_servers  # noqa: E402 - the tests' own servers

WIDTH = int(os.environ.get("SUBSETSAVER_BENCH_WIDTH", "3300"))
RUNS = int(os.environ.get("SUBSETSAVER_BENCH_RUNS", "3"))

MAKE_CHECKPOINT = """
import sys
import numpy as np
import tensorflow as tf
v1 = tf.compat.v1
v1.disable_eager_execution()
width = {width}
x = v1.placeholder(tf.float32, [None, width])
h = x
for name in ("dense_1", "dense_2"):
    with v1.variable_scope(name):
        w = v1.get_variable("kernel", [width, width], initializer=v1.random_normal_initializer(stddev=0.01))
        b = v1.get_variable("bias", [width], initializer=v1.zeros_initializer())
        h = tf.nn.relu(tf.matmul(h, w) + b)
step = v1.train.get_or_create_global_step()
train = v1.train.AdamOptimizer(1e-3).minimize(tf.reduce_mean(h ** 2), global_step=step)
with v1.Session() as sess:
    sess.run(v1.global_variables_initializer())
    sess.run(train, {{x: np.random.default_rng(0).random((8, width), dtype=np.float32)}})
    print(v1.train.Saver().save(sess, {prefix!r}, global_step=step, write_meta_graph=False))
"""

RUN_COMMAND = """
import json, os, sys, time
import subsetsaver.cli
if os.environ.get("BENCH_CONNECT"):  # connected before the clock starts, as the get below is
    import fsspec
    fsspec.filesystem(os.environ["BENCH_CONNECT"], use_listings_cache=False).exists(os.environ["BENCH_BUCKET"])


def status(field):  # this process's own memory (ru_maxrss would count the parent's: it survives exec)
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) * 1024 for line in lines if line.startswith(field + ":"))


before = status("VmRSS")
start = time.perf_counter()
try:
    subsetsaver.cli.main(sys.argv[1:])
except SystemExit as stop:
    code = stop.code
seconds = time.perf_counter() - start
print(json.dumps({"code": code, "seconds": seconds, "before": before, "peak": status("VmHWM")}), file=sys.stderr)
"""

READ_ALL = """
import os, sys, time, fsspec
from subsetsaver.catalog import file_catalog, read_tensors
fsspec.filesystem(sys.argv[1], use_listings_cache=False).exists(sys.argv[2])  # connected, as the get is
start = time.perf_counter()
names = file_catalog(sys.argv[2]).all_names
total = sum(value.nbytes for _, value in read_tensors(sys.argv[2], names))
print(time.perf_counter() - start, total)
"""

GET = """
import sys, time, fsspec
filesystem = fsspec.filesystem(sys.argv[1])
start = time.perf_counter()
for url in sys.argv[3:]:
    filesystem.get_file(url, sys.argv[2] + "/" + url.rsplit("/", 1)[-1])
print(time.perf_counter() - start)
"""


def run(code, args, environ, quiet=True):
    """Run ``code`` in a new process, as an installed package runs: its bytecode written once and read after
    (``PYTHONDONTWRITEBYTECODE`` dropped; the clients' modules are compiled at install), not compiled anew each run."""
    environment = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPATH": REPOSITORY,
                   **environ}
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=environment, capture_output=True,
                          text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return done


def command(args, environ):
    done = run(RUN_COMMAND, args, environ)
    result = json.loads(done.stderr.strip().splitlines()[-1])
    if result["code"] not in (0, None):
        raise RuntimeError(done.stderr[-2000:])
    return result


def upload(server, directory):
    import fsspec

    place = object_servers.Place(server.protocol, server)
    os.environ.update(server.environ)  # the client reads its endpoint when it is made
    filesystem = fsspec.filesystem(server.protocol, skip_instance_cache=True)
    for name in os.listdir(directory):
        filesystem.put_file(os.path.join(directory, name), place.url(name))
    return place


def main():
    work = tempfile.mkdtemp(prefix="bench-remote-")
    try:
        local = os.path.join(work, "ckpt")
        os.makedirs(local)
        prefix = run(MAKE_CHECKPOINT.format(width=WIDTH, prefix=os.path.join(local, "model.ckpt")), [], {}).stdout
        prefix = prefix.strip().splitlines()[-1]
        files = sorted(os.listdir(local))
        index_bytes = os.path.getsize(prefix + ".index")
        total = sum(os.path.getsize(os.path.join(local, name)) for name in files)
        selected = 2 * (WIDTH * WIDTH + WIDTH) * 4
        largest = WIDTH * WIDTH * 4
        print(f"checkpoint: {total / 2**20:.1f} MB in {len(files)} files, index {index_bytes} B, "
              f"trainable {selected / 2**20:.1f} MB, largest tensor {largest / 2**20:.1f} MB")
        for start in (object_servers.start_fake_gcs, object_servers.start_moto_s3):
            relayed, direct = start(relayed=True), start(relayed=False)
            try:
                measure(relayed, direct, local, prefix, index_bytes, selected, largest, work)
            finally:
                relayed.stop()
                direct.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(relayed, direct, local, prefix, index_bytes, selected, largest, work):
    import fsspec

    protocol = relayed.protocol
    for server in (relayed, direct):
        os.environ.update(server.environ)
        fsspec.filesystem(protocol, skip_instance_cache=True).mkdir(object_servers.BUCKET)
    place = upload(relayed, local)
    remote = place.url(os.path.basename(prefix))

    relayed.relay.reset()
    command(["inspect", remote], relayed.environ)
    print(f"{protocol}: inspect fetched {relayed.relay.received} B for an index of {index_bytes} B "
          f"({relayed.relay.received - index_bytes:+d} B, {relayed.relay.requests} requests)")

    relayed.relay.reset()
    result = command(["convert", remote, os.path.join(work, "keep.safetensors"), "--keep", "trainable()", "--force"],
                     relayed.environ)
    print(f"{protocol}: convert --keep trainable() fetched {relayed.relay.received / selected:.3f}x the selected "
          f"bytes ({relayed.relay.received / 2**20:.1f} MB, index included; {relayed.relay.requests} requests); "
          f"peak RSS +{(result['peak'] - result['before']) / 2**20:.0f} MB over its start "
          f"({result['peak'] / 2**20:.0f} MB in all) for a largest tensor of {largest / 2**20:.0f} MB")

    place = upload(direct, local)
    remote = place.url(os.path.basename(prefix))
    urls = [place.url(name) for name in sorted(os.listdir(local))]
    ours, reads, theirs = [], [], []
    for _ in range(RUNS):
        reads.append(float(run(READ_ALL, [protocol, remote], direct.environ).stdout.split()[0]))
        out = os.path.join(work, "full.npz")
        connected = dict(direct.environ, BENCH_CONNECT=protocol, BENCH_BUCKET=f"{protocol}://{object_servers.BUCKET}")
        ours.append(command(["convert", remote, out, "--force"], connected)["seconds"])
        os.remove(out)
        target = tempfile.mkdtemp(dir=work)
        theirs.append(float(run(GET, [protocol, target, *urls], direct.environ).stdout.split()[-1]))
        shutil.rmtree(target)
    mine, get = statistics.median(ours), statistics.median(theirs)
    print(f"{protocol}: full convert to .npz {mine:.2f} s (runs {', '.join(f'{s:.2f}' for s in ours)}), fsspec get "
          f"{get:.2f} s (runs {', '.join(f'{s:.2f}' for s in theirs)}): throughput {get / mine:.2f}x the get's")
    read = statistics.median(reads)
    print(f"{protocol}: reading every tensor (verified, nothing written) {read:.2f} s (runs "
          f"{', '.join(f'{s:.2f}' for s in reads)}): throughput {get / read:.2f}x the get's")


if __name__ == "__main__":
    main()
