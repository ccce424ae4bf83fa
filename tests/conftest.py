"""Shared test setup: the graph builders live in tests/graphs.py, importable as ``graphs``; ``run_cli`` runs the command line."""

import os
import subprocess
import sys

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def run_cli(capsys):
    """Run ``subsetsaver ARGS`` in this process, as the console script does: a CompletedProcess with
    the exit code and what it printed."""
    from subsetsaver.cli import main

    def run(*args):
        with pytest.raises(SystemExit) as stop:
            main([str(arg) for arg in args])
        captured = capsys.readouterr()
        return subprocess.CompletedProcess(args, stop.value.code, captured.out, captured.err)

    return run


from object_servers import object_store, server_store  # noqa: E402,F401 - gs:// and s3:// servers for tests
