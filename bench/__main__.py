"""``python -m bench``: every benchmark line, each a ratio against TensorFlow in the same run."""

import argparse
import importlib
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.report import print_line  # noqa: E402

MODULES = ["bench.bench_selectors", "bench.bench_planner", "bench.bench_audit", "bench.bench_portable",
           "bench.bench_long_runs", "bench.bench_files", "bench.bench_meta", "bench.bench_rows",
           "bench.bench_layouts", "bench.bench_background_saves", "bench.bench_reads", "bench.bench_startup"]
SHORT_NAMES = {name.rsplit(".bench_", 1)[-1]: name for name in MODULES}


def parse_args(argv):
    """The benchmarks to run: short names (``planner``) or modules (``bench.bench_planner``); none: all.

    >>> parse_args(["planner", "files"])
    ['bench.bench_planner', 'bench.bench_files']
    """
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__.splitlines()[0].split(": ", 1)[-1],
        epilog="Each line prints subsetsaver's time against TensorFlow's own in the same run, as a ratio.")
    parser.add_argument("benchmarks", nargs="*", metavar="BENCHMARK",
                        help=f"which to run, of: {', '.join(SHORT_NAMES)} (default: all)")
    names = parser.parse_args(argv).benchmarks
    unknown = [name for name in names if name not in SHORT_NAMES and name not in MODULES]
    if unknown:
        parser.error(f"no benchmark named {', '.join(unknown)}; choose from {', '.join(SHORT_NAMES)}")
    return [SHORT_NAMES.get(name, name) for name in names] or MODULES


def main(names=None):
    for module_name in names or MODULES:
        importlib.import_module(module_name).run(print_line)


if __name__ == "__main__":
    main(parse_args(sys.argv[1:]))
