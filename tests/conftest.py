"""Shared test setup: the graph builders live in tests/graphs.py, importable as ``graphs``; ``run_cli`` runs the command line."""

import os
import subprocess
import sys

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_sessionfinish(session):
    servers = sys.modules.get("object_servers")
    if servers is not None:  # the object-store servers: a pytest-xdist worker ends without running atexit
        servers.stop_all()


class CliRun(subprocess.CompletedProcess):
    """What a command line run gave: ``.returncode``, ``.stdout``, ``.stderr``; unpacks as ``code, out, err``."""

    def __iter__(self):
        return iter((self.returncode, self.stdout, self.stderr))


@pytest.fixture
def run_cli(capsys):
    """Run ``subsetsaver ARGS`` in this process, as the console script does: a :class:`CliRun` with the exit
    code and what it printed."""
    from subsetsaver.cli import main

    def run(*args):
        with pytest.raises(SystemExit) as stop:
            main([str(arg) for arg in args])
        captured = capsys.readouterr()
        return CliRun(args, stop.value.code, captured.out, captured.err)

    return run


@pytest.fixture
def direct_transfers(tmp_path):
    """Skip, saying why, where the file system under ``tmp_path`` refuses O_DIRECT (tmpfs before Linux 6.6,
    some FUSE): every transfer there goes through the page cache, which tests/test_storage.py checks."""
    from subsetsaver.storage import direct_io

    probe = os.path.join(tmp_path, ".direct-probe")
    descriptor = direct_io._open_direct(probe, os.O_WRONLY | os.O_CREAT)
    if descriptor is None:
        pytest.skip(f"the file system under {tmp_path} refuses O_DIRECT: every transfer there goes through the "
                    "page cache, as tests/test_storage.py checks")
    os.close(descriptor)
    os.remove(probe)


from object_servers import object_store, server_store  # noqa: E402,F401 - gs:// and s3:// servers for tests
