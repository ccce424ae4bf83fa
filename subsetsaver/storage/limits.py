"""How long a request to an object store may wait: a connect time-out, a read (idle) time-out and a retry
budget, set once here for every store.

- ``connect``: seconds to open a connection;
- ``read``: the longest silence while an answer arrives (a server that accepts, then stops sending);
- ``budget``: the longest one request may take with all its retries. Past it the request fails with
  :class:`~subsetsaver.errors.StoreUnreachableError` naming the URL, whatever the client would still try.

Each comes from the environment (``SUBSETSAVER_CONNECT_TIMEOUT``, ``SUBSETSAVER_READ_TIMEOUT``,
``SUBSETSAVER_RETRY_BUDGET``, in seconds) unless :func:`set_limits` chose it. gcsfs and s3fs get the first
two as their own public options (aiohttp's ``ClientTimeout``, botocore's ``Config``); the budget is kept
here, around every call (:func:`within_budget`), because gcsfs fixes its retry count in its code.

Example::

    >>> Limits(connect=5, read=15, budget=15).client_options("s3")["config_kwargs"]["read_timeout"]
    15
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
import warnings

from .. import workers
from ..errors import StoreSettingError, clipped

ENVIRONMENT = {"connect": "SUBSETSAVER_CONNECT_TIMEOUT", "read": "SUBSETSAVER_READ_TIMEOUT",
               "budget": "SUBSETSAVER_RETRY_BUDGET"}
"""The environment variable of each limit."""
CLIENT_LOGGERS = ("gcsfs", "s3fs", "aiobotocore", "botocore", "fsspec")
"""Loggers of the storage clients: their retry messages (with tracebacks) are not the user's to read."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """Seconds: ``connect`` to open a connection, ``read`` of silence while an answer arrives, ``budget`` for a
    request with its retries."""

    connect: float = 5.0
    read: float = 15.0
    budget: float = 15.0

    def client_options(self, protocol) -> dict:
        """The keyword arguments of ``fsspec.filesystem(protocol, ...)`` that set the time-outs, and for S3 a
        few retries of botocore's own (each within the budget)."""
        if protocol in ("gs", "gcs"):
            import aiohttp

            return {"requests_timeout": aiohttp.ClientTimeout(total=None, sock_connect=self.connect,
                                                              sock_read=self.read)}
        if protocol in ("s3", "s3a"):
            return {"config_kwargs": {"connect_timeout": self.connect, "read_timeout": self.read,
                                      "retries": {"max_attempts": 3, "mode": "standard"}}}
        return {}


_chosen = {}  # the limits set_limits chose, by field


def current() -> Limits:
    """The limits in force: each as :func:`set_limits` chose it, else the environment's, else the default."""
    values = {}
    for field, variable in ENVIRONMENT.items():
        text = os.environ.get(variable)
        if text is not None and field not in _chosen:
            values[field] = _seconds(text, f"{variable}=", f"{variable}={getattr(Limits(), field):g}")
    return Limits(**values, **_chosen)


def set_limits(*, connect=None, read=None, budget=None) -> Limits:
    """Choose the limits for every store from now on (None: the environment's, else the default); returns those
    in force.

    >>> set_limits(budget=60).budget
    60.0
    >>> set_limits().budget
    15.0
    """
    chosen = {field: _seconds(value, f"{field}=", f"{field}={getattr(Limits(), field):g}")
              for field, value in (("connect", connect), ("read", read), ("budget", budget)) if value is not None}
    _chosen.clear()
    _chosen.update(chosen)
    return current()


def _seconds(value, name, example) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        shown = clipped(repr(value) if isinstance(value, str) else value, 40)
        raise StoreSettingError(f"{name}{shown} is not a number of seconds above 0; e.g. {example}")
    return seconds


def quiet_clients():
    """Keep the storage clients' log records (gcsfs logs each retry with its traceback) off the terminal when
    nothing was set up to show them: a NullHandler stops Python's last-resort printing; a user's own logging
    configuration still receives them. aiohttp's ResourceWarning about the parts gcsfs uploads as bytes is
    not the user's to act on either."""
    warnings.filterwarnings("ignore", category=ResourceWarning, module="aiohttp")
    for name in CLIENT_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(handler, logging.NullHandler) for handler in logger.handlers):
            logger.addHandler(logging.NullHandler())


def within_budget(function, *args, budget, **kwargs):
    """``function(*args, **kwargs)``, waited for at most ``budget`` seconds; past it, TimeoutError.

    The call runs on a detached thread (:func:`~subsetsaver.workers.detached`); one that overruns is left to
    its client's own time-outs and retries, which end it in the background (the caller never waits for them,
    and a process that exits does not either)."""
    outcome = []
    finished = threading.Event()

    def run():
        try:
            outcome.append((True, function(*args, **kwargs)))
        except BaseException as error:  # handed to the caller, who raises it
            outcome.append((False, error))
        finally:
            finished.set()

    workers.detached(run, "subsetsaver-store-request")
    if not finished.wait(budget):
        raise TimeoutError(f"no answer within {budget:g} s")
    succeeded, value = outcome[0]
    if not succeeded:
        raise value
    return value
