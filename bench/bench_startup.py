"""The command line's start-up: ``subsetsaver --help``, a command's ``--help`` and ``inspect CKPT``, each a whole
new process, against ``python -c "import numpy"`` (the yardstick: every command that reads values needs numpy)
in the same run, sides alternating.

The aim: ``--help`` no slower than ``inspect CKPT``, and both within 1.5x of importing numpy. Each command
runs once untimed first, with bytecode written (``PYTHONDONTWRITEBYTECODE`` dropped), as an installed package
has it: numpy's modules are compiled at install, and compiling ours on every run would time the compiler.

Example::

    $ python -m bench startup
"""

import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from bench.report import RUNS, alternating, print_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _process(*arguments):
    environment = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPATH": ROOT}

    def run():
        done = subprocess.run([sys.executable, *arguments], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=environment)
        if done.returncode != 0:
            raise RuntimeError(f"python {' '.join(arguments)} exited {done.returncode}")
    run()  # untimed: writes the bytecode
    return run


def run(report=print_line, runs=RUNS):
    from subsetsaver.formats.tf import bundle as tf_bundle

    directory = tempfile.mkdtemp(prefix="subsetsaver-startup-")
    try:
        checkpoint = tf_bundle.write(os.path.join(directory, "model"),
                                     {f"layer_{i}/w": np.ones((64, 64), np.float32) for i in range(20)})
        numpy = _process("-c", "import numpy")
        for label, arguments in (("subsetsaver --help", ["--help"]), ("subsetsaver convert --help", ["convert", "--help"]),
                                 ("subsetsaver inspect CKPT (20 tensors)", ["inspect", checkpoint])):
            ours, theirs = alternating(_process("-m", "subsetsaver", *arguments), numpy, runs)
            report(f"{label}, new process", ours, theirs, "aim: <= 1.5x", reference_name="import numpy")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    run()
