"""A layout map straight from a bucket: ``convert gs://…/model.ckpt-1 OUT --map t5-to-hf`` against an fsspec
``get`` of the same objects, on fake-gcs-server (the tests' server, on this machine).

The checkpoint is a T5 v1.1 at about T5-small's widths (d_model 512, 6 + 6 layers, a 32k vocabulary) built,
trained one Adafactor step and saved by Mesh TensorFlow's own code (``tests/mesh_t5.py save v1.1-bench``), with
Adafactor's state unfactored: half of its bytes are state that the conversion never fetches. Each side is a
whole child process, connected to the server before its clock starts, with the library's bytecode written as an
installed package has it; both sides run once untimed, then alternate, and each figure is the median of ``RUNS``.

Two servers hold the checkpoint, as ``bench_remote.py`` has them. The times are taken against one the clients
reach directly. The bytes are counted on one behind the tests' relay: a Python process on this machine's cores
that copies every byte, so it takes CPU time from whichever side works hardest, and that is the conversion. The
first line gives the conversion's throughput (the bytes it fetched per second of the whole command) over the
get's (every byte of the objects per second), and the two wall times. The second line is the physical reference
for the disk: the time this process takes to write as many bytes as the conversion fetched through the library's
own writer (past the page cache, each stage read back from the disk, fsynced, renamed), in each run between the
two sides, and the throughput a conversion would have if it took only that long. The get writes into the page
cache and reads nothing back. The third line is the reference for the fetching side: the time a process takes
to read the tensors the conversion keeps (the catalog's roles drop Adafactor's state and the step), each verified
against its checksum, none transformed or written, in each run too, its clock started where the conversion's is
(the library's command line imported, the rest not). The fourth line gives the same two sides timed through the
relay, over the whole command and over the transfer alone: the bytes the relay passed per second from the
server's first byte to its last, as the relay saw them; the conversion's start-up before its first request, and
what is left of its check of the output after the last byte (each stage is read back from the disk as it is
written), fall outside it.

Run: ``python bench/bench_remote_layouts.py``.
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPOSITORY)
sys.path.insert(0, os.path.join(REPOSITORY, "tests"))

import object_servers  # noqa: E402 - the tests' own servers

from bench.bench_remote import GET, command, run, upload  # noqa: E402

RUNS = int(os.environ.get("SUBSETSAVER_BENCH_RUNS", "3"))

READ_KEPT = """
import sys, time, fsspec
import subsetsaver.cli
fsspec.filesystem("gs", use_listings_cache=False).exists(sys.argv[2])  # connected, as the other two sides are
start = time.perf_counter()
from subsetsaver.catalog import file_catalog, read_tensors
catalog = file_catalog(sys.argv[1])
dropped = set().union(*(catalog.role(role) for role in ("slot", "optimizer", "global_step")))
kept = [name for name in catalog.all_names if name not in dropped]
total = sum(value.nbytes for _, value in read_tensors(sys.argv[1], kept))
print(time.perf_counter() - start, total)
"""


def main():
    work = tempfile.mkdtemp(prefix="bench-remote-layouts-")
    servers = []
    try:
        local = os.path.join(work, "t5")
        os.makedirs(local)
        subprocess.run([sys.executable, os.path.join(REPOSITORY, "tests", "mesh_t5.py"), "save", "v1.1-bench", local],
                       check=True, capture_output=True, timeout=3600)
        os.remove(os.path.join(local, "outputs.npz"))
        total = sum(os.path.getsize(os.path.join(local, name)) for name in os.listdir(local))
        for relayed in (True, False):
            servers.append(object_servers.start_fake_gcs(relayed=relayed))
        counting, direct = servers
        import fsspec

        sides = {}
        for server in servers:
            os.environ.update(server.environ)
            fsspec.filesystem("gs", skip_instance_cache=True).mkdir(object_servers.BUCKET)
            place = upload(server, local)
            sides[server] = (place.url("model.ckpt-1"), [place.url(name) for name in sorted(os.listdir(local))])
        for server in servers:  # once untimed: each side's bytecode written, the server's objects read once
            _convert(server, sides[server][0], work)
            _get(server, sides[server][1], work)
        timed = {server: ([], []) for server in servers}
        fetched, rates, disk, reads = [], [], [], []
        for _ in range(RUNS):
            counting.relay.reset()
            timed[counting][0].append(_convert(counting, sides[counting][0], work))
            fetched.append(counting.relay.received)
            mine_rate = _transfer_rate(counting.relay)
            counting.relay.reset()
            timed[counting][1].append(_get(counting, sides[counting][1], work))
            rates.append(mine_rate / _transfer_rate(counting.relay))
            timed[direct][0].append(_convert(direct, sides[direct][0], work))
            timed[direct][1].append(_get(direct, sides[direct][1], work))
            disk.append(_write_and_read_back(work, fetched[-1]))
            reads.append(_read_kept(direct, sides[direct][0]))
        moved = statistics.median(fetched)
        mine, get = (statistics.median(times) for times in timed[direct])
        print(f"gs: convert --map t5-to-hf of a {total / 1e6:.0f} MB Mesh TensorFlow T5 (half Adafactor state): "
              f"fetched {moved / 1e6:.0f} MB in {mine:.2f} s (runs {_runs(timed[direct][0])}); fsspec get of the "
              f"{len(sides[direct][1])} objects {get:.2f} s (runs {_runs(timed[direct][1])}): throughput "
              f"{(moved / mine) / (total / get):.2f}x the get's, wall time {mine / get:.2f}x")
        floor = statistics.median(disk)
        print(f"disk: writing {moved / 1e6:.0f} MB as the writer does, read back from the disk, takes {floor:.2f} s "
              f"(runs {_runs(disk)}): a conversion taking only that long would have "
              f"{(moved / floor) / (total / get):.2f}x the get's throughput")
        read = statistics.median(reads)
        print(f"fetch: reading the kept tensors alone (verified, none transformed or written) takes {read:.2f} s (runs "
              f"{_runs(reads)}): a conversion taking only that long would have {(moved / read) / (total / get):.2f}x "
              f"the get's throughput")
        mine, get = (statistics.median(times) for times in timed[counting])
        print(f"gs, through the counting relay: the conversion {mine:.2f} s (runs {_runs(timed[counting][0])}), the "
              f"get {get:.2f} s (runs {_runs(timed[counting][1])}): throughput {(moved / mine) / (total / get):.2f}x "
              f"the get's; over the transfer alone (the server's first byte to its last, at the relay) "
              f"{statistics.median(rates):.2f}x (runs {_runs(rates)})")
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


def _convert(server, remote, work) -> float:
    out = os.path.join(work, "hf")
    connected = dict(server.environ, BENCH_CONNECT="gs", BENCH_BUCKET=f"gs://{object_servers.BUCKET}")
    seconds = command(["convert", remote, out, "--map", "t5-to-hf", "--force"], connected)["seconds"]
    shutil.rmtree(out)
    return seconds


def _get(server, urls, work) -> float:
    target = tempfile.mkdtemp(dir=work)
    seconds = float(run(GET, ["gs", target, *urls], server.environ).stdout.split()[-1])
    shutil.rmtree(target)
    return seconds


def _read_kept(server, remote) -> float:
    return float(run(READ_KEPT, [remote, f"gs://{object_servers.BUCKET}"], server.environ).stdout.split()[0])


def _runs(figures) -> str:
    return ", ".join(f"{figure:.2f}" for figure in figures)


def _write_and_read_back(work, nbytes) -> float:
    """Seconds to write ``nbytes`` to a new file in ``work`` through the library's writer, each stage read back from
    the disk as the conversion's output is (its checksums kept, as the conversion's check keeps them)."""
    import numpy as np

    from subsetsaver import storage
    from subsetsaver.formats.landed_checksums import LandedChecksums

    stage = np.random.default_rng(0).integers(0, 256, 4 << 20, dtype=np.uint8)
    path = os.path.join(work, "disk.bin")
    start = time.perf_counter()
    with storage.reporting_landed(LandedChecksums()), storage.replacing(path) as sink:
        for offset in range(0, nbytes, len(stage)):
            sink.write(stage[:nbytes - offset])
    seconds = time.perf_counter() - start
    os.remove(path)
    return seconds


def _transfer_rate(relay) -> float:
    """Bytes per second the relay passed from the server, its first byte since the reset to its last."""
    first, last = relay.flowing
    return relay.received / (last - first)


if __name__ == "__main__":
    main()
