"""``python -m bench``'s command line: usage on --help, one readable line for a wrong name, no traceback."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench(*args):
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


CHOICES = ("selectors, planner, audit, portable, long_runs, files, meta, rows, layouts, background_saves, reads, "
           "startup")


def test_help_prints_usage():
    done = bench("--help")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("usage: python -m bench [-h] [BENCHMARK ...]\n")
    assert f"which to run, of: {CHOICES} (default: all)" in " ".join(
        done.stdout.split())


def test_a_wrong_name_is_one_line_and_no_traceback():
    done = bench("--quick")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines()[-1] == "python -m bench: error: unrecognized arguments: --quick"
    done = bench("plannr")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"python -m bench: error: no benchmark named plannr; choose from {CHOICES}")
