"""Import only what runs: the command line loads no heavy library until a command needs it.

``python -X importtime -m subsetsaver`` shows the same: TensorFlow, ml_dtypes (bfloat16 and
float8 values), safetensors, Keras, matplotlib and networkx load on first use.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

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
    """``import subsetsaver`` and its command line (every command line run) load no room but the errors;
    every public name loads its room on first use and stays the name it was (``ss.audit`` the function,
    after ``import subsetsaver.audit`` too)."""
    done = subprocess.run([sys.executable, "-c", LAZY_CHILD], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        ["cli", "errors", "lazy_exports", "version"],
        "subsetsaver.audit", "subsetsaver.planning.planner", "subsetsaver.keras", "subsetsaver.training", True]


COMMAND_CHILD = ("import json, sys\n"
                 "from subsetsaver.cli import main\n"
                 "try:\n"
                 "    main(json.loads(sys.argv[1]))\n"
                 "except SystemExit as done:\n"
                 "    assert done.code == int(sys.argv[2]), done.code\n"
                 "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('subsetsaver.', 'email')))))\n")
GRAPH_SIDE = ("subsetsaver.audit", "subsetsaver.catalog.dataflow", "subsetsaver.catalog.dataflow_roles",
              "subsetsaver.catalog.op_graph", "subsetsaver.catalog.training_state", "subsetsaver.catalog.sources",
              "subsetsaver.catalog.meta_source", "subsetsaver.catalog.keras_source", "subsetsaver.formats.tf.meta_graph",
              "subsetsaver.planning.planner")
WRITING_OR_REMOTE = ("subsetsaver.storage.remote", "subsetsaver.storage.gfile",
                     "subsetsaver.formats.tf.bundle.writer", "subsetsaver.formats.npz.reader",
                     "subsetsaver.formats.npz.writer", "subsetsaver.formats.npz.format")
SELECTOR_LANGUAGE = ("subsetsaver.selectors.expressions", "subsetsaver.selectors.parser", "subsetsaver.tf_internals")
# diff's command module is average's and rewrite's too, and they write: it loads the one writer
ONE_WRITER = ("subsetsaver.formats.checkpoint_writer",)


@pytest.mark.parametrize("command,exit_code,never", [
    ("inspect", 0, GRAPH_SIDE + WRITING_OR_REMOTE + SELECTOR_LANGUAGE + ONE_WRITER),
    ("diff", 1, GRAPH_SIDE + WRITING_OR_REMOTE),  # 1: the checkpoints differ
])
def test_a_file_command_loads_only_the_modules_that_read_its_files(tmp_path, command, exit_code, never):
    """Every module a process loads is compiled from source where no bytecode is kept: ``inspect`` and ``diff``
    of local checkpoints load no graph-side module (audit, dataflow, MetaGraph, planner), no writer, no remote
    storage, and not the standard library's e-mail package (``importlib.metadata`` brings it); ``inspect``
    not the selector language either."""
    from subsetsaver.formats.tf import bundle as tf_bundle

    a = tf_bundle.write(tmp_path / "a", {"dense/w": np.ones((2, 3), np.float32)})
    b = tf_bundle.write(tmp_path / "b", {"dense/w": np.zeros((2, 3), np.float32)})
    argv = ["inspect", a] if command == "inspect" else ["diff", a, b]
    done = subprocess.run([sys.executable, "-c", COMMAND_CHILD, json.dumps(argv), str(exit_code)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert "dense/w" in done.stdout and "subsetsaver.formats.tf.bundle.reader" in loaded
    assert [name for name in loaded if name in never or name.startswith("email")] == []


HELP_CHILD = ("import json, sys\n"
              "from subsetsaver.cli import main\n"
              "try:\n"
              "    main(json.loads(sys.argv[1]))\n"
              "except SystemExit as done:\n"
              "    assert done.code == 0, done.code\n"
              "print(json.dumps({name: hasattr(module, '__path__') for name, module in sys.modules.items()}))\n")


def _loaded_by(argv) -> dict:
    """{module: whether it is a package} of every module ``subsetsaver ARGV`` loads, run in a fresh process."""
    done = subprocess.run([sys.executable, "-c", HELP_CHILD, json.dumps(argv)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_help_loads_nothing_that_inspecting_a_checkpoint_does_not(tmp_path):
    """``subsetsaver --help`` and every command's ``--help`` load no module that ``subsetsaver inspect CKPT`` does not,
    but the command line's own, click's help formatting and the package's rooms (whose names load on first use): the
    command table names each command's module and sentence, and a command's module imports the rooms it runs
    with as packages, or inside the command where the room loads its code eagerly."""
    from subsetsaver.cli import COMMANDS
    from subsetsaver.formats.tf import bundle as tf_bundle

    checkpoint = tf_bundle.write(tmp_path / "model", {"dense/w": np.ones((2, 3), np.float32)})
    inspected = _loaded_by(["inspect", checkpoint])
    beyond = {}
    for argv in [["--help"]] + [[command, "--help"] for command in COMMANDS]:
        beyond[" ".join(argv)] = sorted(
            name for name, package in _loaded_by(argv).items() if name not in inspected
            and not name.startswith(("subsetsaver.cli.", "click.")) and not (package and name.startswith("subsetsaver.")))
    assert beyond == {" ".join(argv): [] for argv in [["--help"]] + [[command, "--help"] for command in COMMANDS]}


BLAS_CHILD = ("import json, os, sys\n"
              "from subsetsaver.cli import main\n"
              "assert 'numpy' not in sys.modules  # the command imports it, after main set the thread count\n"
              "try:\n"
              "    main(json.loads(sys.argv[1]))\n"
              "except SystemExit as done:\n"
              "    assert done.code == 0, done.code\n"
              "import numpy\n"
              "print(json.dumps([os.environ.get('OPENBLAS_NUM_THREADS'), 'numpy' in sys.modules]))\n")


@pytest.mark.parametrize("given,expected", [(None, "1"), ("2", "2")])
def test_a_command_gives_numpys_blas_one_thread_unless_the_user_chose(tmp_path, given, expected):
    from subsetsaver.formats.tf import bundle as tf_bundle

    checkpoint = tf_bundle.write(tmp_path / "model", {"dense/w": np.ones((2, 3), np.float32)})
    environment = {name: value for name, value in os.environ.items() if name != "OPENBLAS_NUM_THREADS"}
    environment |= {"PYTHONPATH": ROOT} | ({} if given is None else {"OPENBLAS_NUM_THREADS": given})
    done = subprocess.run([sys.executable, "-c", BLAS_CHILD, json.dumps(["inspect", checkpoint])], capture_output=True,
                          text=True, timeout=300, env=environment)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [expected, True]
