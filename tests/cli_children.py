"""Child processes for the tests: a script in a fresh interpreter, and the command line run inside one.

In the test::

    report = run_script(SCRIPT, [json.dumps(commands)], {"PYTHONPATH": CHILD_PATH}, tmp_path)

In the child's script (``CHILD_PATH`` puts this directory on its path; nothing here imports more than the
standard library, so a child can block TensorFlow first)::

    from cli_children import run_commands
    print("RESULT " + json.dumps({"results": run_commands(json.loads(sys.argv[1]))}))
"""

import contextlib
import io
import json
import os
import subprocess
import sys

TESTS = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(TESTS)
CHILD_PATH = os.pathsep.join([PACKAGE_ROOT, TESTS])
"""The ``PYTHONPATH`` of a child that imports this checkout's subsetsaver and this module."""


def run_commands(commands, measure=None) -> list:
    """Run each command (an argument list) through ``subsetsaver.cli.main`` in this process: for each, its
    ``args``, exit ``code`` and what it printed (``out``, ``err``), plus the fields ``measure()`` returns after it."""
    from subsetsaver.cli import main

    results = []
    for args in commands:
        out, err, code = io.StringIO(), io.StringIO(), None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(args)
            except SystemExit as stop:
                code = stop.code
        results.append({"args": args, "code": code, "out": out.getvalue(), "err": err.getvalue(),
                        **(measure() if measure else {})})
    return results


def run_script(script, arguments, env, cwd) -> dict:
    """Run ``python -c script *arguments`` in ``cwd`` with ``env`` over this environment (TensorFlow's log
    lines off); the JSON of its last ``RESULT`` line, after checking that it exited cleanly."""
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **env}
    done = subprocess.run([sys.executable, "-c", script, *arguments], env=environment, capture_output=True,
                          text=True, timeout=1800, cwd=cwd)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])
