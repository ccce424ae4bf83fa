"""The benchmark protocol and its lines: alternating sides, medians and spreads, cold and warm.

Every line compares ours with TensorFlow's way of doing the same work, in the same run:

- :func:`alternating` runs the two sides in turn (ours, theirs, theirs, ours, ...), at
  least 5 times each, so a slow moment of the machine falls on both;
- each side is a :class:`Timing`: its median and spread (fastest to slowest run); the
  ratio is taken run by run (ours over theirs of the same round) and reported as the
  median ratio with its spread;
- :func:`cold` makes memory and files cold before a run: dirty pages flushed, the page
  cache dropped where the system allows it, then an idle pause, after which a virtual
  machine has handed freed memory back to its host; :func:`warm` only writes dirty pages,
  so a run reuses the memory and cache the one before it left. Large lines are run both ways.

Example::

    >>> ours, theirs = alternating(lambda: save_npz(sess, path), lambda: saver.save(sess, prefix), before=cold)
    >>> print_line("save 20 x 50 MB, cold", ours, theirs)
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time

RUNS = int(os.environ.get("SUBSETSAVER_BENCH_RUNS", "5"))
PAUSE = float(os.environ.get("SUBSETSAVER_BENCH_PAUSE", "3"))


@dataclasses.dataclass(frozen=True)
class Timing:
    """The seconds of every run of one side."""

    runs: tuple

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def spread(self) -> tuple:
        return min(self.runs), max(self.runs)


def alternating(ours, theirs, runs=RUNS, *, before=None):
    """``(Timing, Timing)`` of ``runs`` calls each, sides alternating; ``before()`` runs untimed
    before every call (e.g. :func:`cold`)."""
    times = {ours: [], theirs: []}
    for index in range(runs):
        for function in (ours, theirs) if index % 2 == 0 else (theirs, ours):
            if before is not None:
                before()
            start = time.perf_counter()
            function()
            times[function].append(time.perf_counter() - start)
    return Timing(tuple(times[ours])), Timing(tuple(times[theirs]))


def cold():
    """Before a cold run: our background work finished, dirty pages written, the page cache
    dropped (when this process may), then :data:`PAUSE` seconds idle."""
    from subsetsaver import storage

    storage.finish_background_work()
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("3\n")
    except OSError:
        pass  # not root, or not Linux: the pause alone
    time.sleep(PAUSE)


def warm():
    """Before a warm run: our background work finished and dirty pages written (so no side's fsync
    waits for the other's writeback), the page cache and memory left as the last run left them."""
    from subsetsaver import storage

    storage.finish_background_work()
    os.sync()


def best_of(function, repeat=5):
    """The fastest of ``repeat`` runs of ``function()``, in seconds (the least disturbed one)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def print_line(label, ours, theirs, note="", reference_name="tensorflow"):
    """``label  ours 12.3 ms (11.9-13.0) | tensorflow 10.1 ms (...) | ratio 1.22x (1.10-1.31)  note``.

    ``ours`` and ``theirs`` are seconds or :class:`Timing` values; ``theirs`` may be None;
    ``reference_name``: what ``theirs`` ran (``cat`` for the read-rate lines).
    """
    text = f"{label:<58} ours {_timing_text(ours):>24}"
    if theirs is not None:
        text += f" | {reference_name} {_timing_text(theirs):>24} | ratio {_ratio_text(ours, theirs)}"
    if note:
        text += f"  {note}"
    print(text, flush=True)


def _timing_text(value):
    if not isinstance(value, Timing):
        return _ms(value)
    low, high = value.spread
    return f"{_ms(value.median)} ({_ms(low, unit=False)}-{_ms(high)})"


def _ratio_text(ours, theirs):
    if isinstance(ours, Timing) and isinstance(theirs, Timing) and len(ours.runs) == len(theirs.runs):
        ratios = [a / b for a, b in zip(ours.runs, theirs.runs)]
        return f"{statistics.median(ratios):5.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
    return f"{_median(ours) / _median(theirs):5.2f}x"


def _median(value):
    return value.median if isinstance(value, Timing) else value


def _ms(seconds, unit=True):
    if seconds < 10:
        return f"{seconds * 1000:.1f}" + (" ms" if unit else "")
    return f"{seconds:.1f}" + (" s" if unit else "")
