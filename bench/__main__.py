"""``python -m bench``: every benchmark line, each a ratio against TensorFlow in the same run."""

import importlib
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.report import print_line  # noqa: E402

MODULES = ["bench.bench_selectors", "bench.bench_planner", "bench.bench_audit", "bench.bench_portable",
           "bench.bench_long_runs", "bench.bench_files", "bench.bench_meta"]


def main(names=None):
    for module_name in names or MODULES:
        importlib.import_module(module_name).run(print_line)


if __name__ == "__main__":
    main(sys.argv[1:])
