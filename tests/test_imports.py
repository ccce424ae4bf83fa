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
