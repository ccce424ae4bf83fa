"""A quiet command line: no TensorFlow log lines, warnings as one line each.

TensorFlow's C++ side writes log lines straight to file descriptor 2 when it is
imported (oneDNN, CUDA, absl's "All log messages before absl::InitializeLog()"), and
``TF_CPP_MIN_LOG_LEVEL`` does not silence all of them. While a command runs,
:func:`quiet` points descriptor 2 at a scratch file and keeps Python's ``sys.stderr``
on the real stream, so the command's own messages still reach the user; Python
warnings print as ``warning: ...`` without source lines; TensorFlow's Python loggers
print errors only, and so do the storage clients' (gcsfs, for one, warns on every
bucket it cannot classify, then carries on). ``--verbose`` leaves everything as it is.

Example::

    with quiet(verbose=False):
        run_the_command()
"""

import contextlib
import io
import logging
import os
import sys
import tempfile
import warnings

_NOISY_LOGGERS = ("tensorflow", "absl", "h5py", "matplotlib", "fsspec", "gcsfs", "s3fs", "aiobotocore", "botocore",
                  "google")


@contextlib.contextmanager
def quiet(verbose=False):
    """Silence TensorFlow's native and Python logs and shorten warnings while the block runs."""
    if verbose:
        yield
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    levels = {name: logging.getLogger(name).level for name in _NOISY_LOGGERS}
    for name in _NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    with warnings.catch_warnings(), _native_stderr_elsewhere():
        warnings.showwarning = _one_line_warning
        warnings.simplefilter("default")
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        try:
            yield
        finally:
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    text = str(message).strip().splitlines()
    sys.stderr.write(f"warning: {text[0] if text else category.__name__}\n")


@contextlib.contextmanager
def _native_stderr_elsewhere():
    """Descriptor 2 goes to a scratch file; ``sys.stderr`` keeps writing where stderr went before."""
    try:
        python_writes_fd2 = sys.stderr.fileno() == 2
        sys.stderr.flush()
        original = os.dup(2)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):  # no real descriptor (captured)
        yield
        return
    previous = sys.stderr
    with tempfile.TemporaryFile() as scratch:
        os.dup2(scratch.fileno(), 2)
        if python_writes_fd2:
            sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(original), "wb"), encoding=previous.encoding,
                                          errors="backslashreplace", line_buffering=True)
        try:
            yield
        finally:
            if python_writes_fd2:
                sys.stderr.flush()
                sys.stderr.close()
                sys.stderr = previous
            os.dup2(original, 2)
            os.close(original)
