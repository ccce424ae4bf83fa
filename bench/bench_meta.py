"""Graph commands on a ``.meta`` file (the MNIST example's graph), each a whole new process.

Ours: ``select`` and ``audit --graph model.meta`` with TensorFlow unimportable (the file is
read by subsetsaver's own MetaGraph reader). TensorFlow's side: the same answer through
TensorFlow, as these commands found it before they read ``.meta`` files themselves (import
TensorFlow, import the MetaGraph into a graph, select or audit on it). The physical reference,
in the same run: ``python -c pass`` (an interpreter's start-up) and ``python -c "import numpy"``.

Example::

    $ python -m bench bench.bench_meta
"""

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

from bench.report import RUNS, alternating, print_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SELECTION = "trainable() | bn_stats()"
WITHOUT_TENSORFLOW = "import sys; sys.modules['tensorflow'] = None; from subsetsaver.cli import main; main()"
THROUGH_TENSORFLOW = """
import sys
import tensorflow as tf
from subsetsaver import catalog, parse
from subsetsaver.audit import audit
command, path, expression = sys.argv[1:]
graph = catalog.load(path, live=True)  # what the commands did before: import the MetaGraph into a tf.Graph
if command == "select":
    print(parse(expression).names(graph))
else:
    print(audit(parse(expression), graph))
"""


def _example_graph(path):
    """The MNIST example's training graph (Adam, batch norm), exported to ``path``."""
    import tensorflow as tf

    spec = importlib.util.spec_from_file_location("mnist_model", os.path.join(ROOT, "examples", "mnist_cnn",
                                                                              "model.py"))
    model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model)
    net = model.build()
    with net.graph.as_default():
        tf.compat.v1.train.export_meta_graph(path)


def _process(command, allowed=(0,)):
    def run():
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"})
        if done.returncode not in allowed:
            raise RuntimeError(f"{command} exited {done.returncode}")
    return run


def run(report=print_line, runs=RUNS):
    directory = tempfile.mkdtemp(prefix="subsetsaver-meta-")
    try:
        path = os.path.join(directory, "model.meta")
        _example_graph(path)
        python = [sys.executable]
        start_up, numpy = alternating(_process(python + ["-c", "pass"]), _process(python + ["-c", "import numpy"]),
                                      runs)
        report("reference: python -c pass (ours) vs import numpy", start_up, numpy)
        for command, expression, flags, allowed in (("select", SELECTION, [SELECTION], (0,)),
                                                    ("audit", "trainable()", ["--save", "trainable()"], (0, 1))):
            ours = _process(python + ["-c", WITHOUT_TENSORFLOW, command, "--graph", path] + flags, allowed)
            theirs = _process(python + ["-c", THROUGH_TENSORFLOW, command, path, expression])
            ours, theirs = alternating(ours, theirs, runs)
            report(f"{command} --graph model.meta (MNIST example), new process", ours, theirs,
                   f"TensorFlow unimportable on our side; python -c pass {start_up.median * 1000:.0f} ms")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    run()
