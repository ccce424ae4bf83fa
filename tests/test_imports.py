"""Import only what runs: the command line loads no heavy library until a command needs it.

``python -X importtime -m subsetsaver`` shows the same: TensorFlow, ml_dtypes (bfloat16 and
float8 values), safetensors, Keras, matplotlib and networkx load on first use.
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("tensorflow", "ml_dtypes", "safetensors", "keras", "tf_keras", "matplotlib", "networkx", "graphviz")
CHILD = ("import json, sys\n"
         "import subsetsaver\n"
         "from subsetsaver.cli import main\n"
         f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n")


def test_importing_the_library_and_its_command_line_loads_no_heavy_library():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


LAZY_CHILD = ("import json, sys\n"
              "import subsetsaver as ss\n"
              "import subsetsaver.cli\n"
              "loaded = sorted(m.split('.')[1] for m in sys.modules if m.count('.') >= 1 and m.startswith('subsetsaver.'))\n"
              "import subsetsaver.audit\n"
              "print(json.dumps([sorted(set(loaded)), ss.audit.__module__, ss.plan.__module__, ss.keras.__name__,\n"
              "                  ss.training.__name__, 'plan' in dir(ss)]))\n")


def test_the_library_loads_a_room_when_one_of_its_names_is_first_used():
    """``import subsetsaver`` (every command line run) loads the rooms an ``inspect`` needs, not planning,
    Keras, drawings, layouts or training; their names load on first use and stay the names they were."""
    done = subprocess.run([sys.executable, "-c", LAZY_CHILD], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        ["audit", "catalog", "cli", "errors", "formats", "selectors", "tf_internals", "version"],
        "subsetsaver.audit", "subsetsaver.planning.planner", "subsetsaver.keras", "subsetsaver.training", True]
