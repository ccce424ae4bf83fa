"""storage/limits.py: the connect, read and retry-budget limits of object stores, from the environment or
set_limits, and the budget kept around a call."""

import subprocess
import sys
import threading

import pytest

from subsetsaver.errors import StoreSettingError
from subsetsaver.storage import limits


@pytest.fixture(autouse=True)
def chosen_limits_restored():
    yield
    limits.set_limits()


def test_limits_come_from_the_environment_unless_set(monkeypatch):
    monkeypatch.setenv("SUBSETSAVER_READ_TIMEOUT", "2.5")
    monkeypatch.delenv("SUBSETSAVER_RETRY_BUDGET", raising=False)
    assert limits.current() == limits.Limits(connect=5.0, read=2.5, budget=15.0)
    assert limits.set_limits(budget=60, connect=1) == limits.Limits(connect=1.0, read=2.5, budget=60.0)
    assert limits.current().budget == 60.0
    assert limits.set_limits(read=7).read == 7.0  # chosen over the environment's 2.5
    assert limits.set_limits() == limits.Limits(connect=5.0, read=2.5, budget=15.0)


def test_the_clients_get_the_time_outs_as_their_own_options():
    chosen = limits.Limits(connect=1, read=2, budget=3)
    timeout = chosen.client_options("gs")["requests_timeout"]
    assert (timeout.total, timeout.sock_connect, timeout.sock_read) == (None, 1, 2)
    assert chosen.client_options("s3") == {"config_kwargs": {"connect_timeout": 1, "read_timeout": 2,
                                                             "retries": {"max_attempts": 3, "mode": "standard"}}}
    assert chosen.client_options("memory") == {}


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "inf"])
def test_a_limit_that_is_not_seconds_above_zero_is_refused(monkeypatch, value):
    monkeypatch.setenv("SUBSETSAVER_RETRY_BUDGET", value)
    with pytest.raises(StoreSettingError) as caught:
        limits.current()
    assert str(caught.value) == (f"SUBSETSAVER_RETRY_BUDGET={value!r} is not a number of seconds above 0; "
                                 "e.g. SUBSETSAVER_RETRY_BUDGET=15")
    monkeypatch.delenv("SUBSETSAVER_RETRY_BUDGET")
    with pytest.raises(StoreSettingError, match=r"^connect=-2 is not a number of seconds above 0; e.g. connect=5$"):
        limits.set_limits(connect=-2)


def test_a_bad_limit_is_one_line_on_the_command_line(tmp_path):
    child = subprocess.run([sys.executable, "-m", "subsetsaver", "inspect", "s3://bucket/model"], capture_output=True,
                           text=True, timeout=120, env={"SUBSETSAVER_READ_TIMEOUT": "soon", "PATH": "/usr/bin:/bin",
                                                        "PYTHONPATH": ":".join(sys.path)})
    assert (child.returncode, child.stderr) == (
        2, "subsetsaver: error: SUBSETSAVER_READ_TIMEOUT='soon' is not a number of seconds above 0; "
           "e.g. SUBSETSAVER_READ_TIMEOUT=15\n")


def test_a_call_past_its_budget_raises_while_the_call_is_still_waiting():
    release, finished = threading.Event(), threading.Event()

    def stalled():
        release.wait(30)
        finished.set()
        return "late"

    with pytest.raises(TimeoutError, match=r"^no answer within 0.2 s$"):
        limits.within_budget(stalled, budget=0.2)
    assert not finished.is_set()  # the caller did not wait for it
    release.set()
    assert limits.within_budget(lambda value: value * 2, 21, budget=5) == 42
    with pytest.raises(KeyError):
        limits.within_budget({}.__getitem__, "absent", budget=5)
