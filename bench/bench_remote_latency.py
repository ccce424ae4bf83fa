"""A checkpoint in a bucket far away: ``inspect`` and a full ``convert`` of a sixteen-shard checkpoint (as the
released T5 checkpoints are) on fake-gcs-server behind a relay that holds every request back by ``DELAY``
seconds, as a round trip to a distant region would.

The reference is the delay itself: each line gives the command's time, the requests the relay counted, and how
many round trips' worth of time the command took (its time over the delay); asked one after another, every request
would cost a whole round trip. Each command is a whole process, timed inside it once the library is imported,
run ``RUNS`` times (medians).

Run: ``python bench/bench_remote_latency.py``; ``SUBSETSAVER_BENCH_DELAY=0.1`` for 100 ms.
"""

import os
import pathlib
import shutil
import statistics
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPOSITORY)
sys.path.insert(0, os.path.join(REPOSITORY, "tests"))

import object_servers  # noqa: E402 - the tests' own servers

from bench.bench_remote import command, upload  # noqa: E402

RUNS = int(os.environ.get("SUBSETSAVER_BENCH_RUNS", "3"))
DELAY = float(os.environ.get("SUBSETSAVER_BENCH_DELAY", "0.05"))
SHARDS = 16


def main():
    from test_crafted_files import sharded  # a checkpoint with each tensor in a data file of its own

    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-remote-latency-"))
    server = object_servers.start_fake_gcs(relay_class=object_servers.DelayingRelay)
    try:
        local = work / "ckpt"
        local.mkdir()
        sharded(local, SHARDS, name="model.ckpt-1000000")
        os.environ.update(server.environ)
        import fsspec

        fsspec.filesystem("gs", skip_instance_cache=True).mkdir(object_servers.BUCKET)
        remote = upload(server, str(local)).url("model.ckpt-1000000")
        server.relay.delay = DELAY
        for name, args in (("inspect", ["inspect", remote]),
                           ("convert to .npz", ["convert", remote, str(work / "out.npz"), "--force"])):
            seconds, requests = [], []
            for _ in range(RUNS):
                server.relay.reset()
                seconds.append(command(args, server.environ)["seconds"])  # timed inside, after the imports
                requests.append(server.relay.requests)
            took = statistics.median(seconds)
            print(f"gs, {DELAY * 1000:.0f} ms a request, {SHARDS} data files: {name} {took:.2f} s "
                  f"(runs {', '.join(f'{s:.2f}' for s in seconds)}), {statistics.median(requests):.0f} requests: "
                  f"{took / DELAY:.0f} round trips' worth")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
