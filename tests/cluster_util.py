"""Start and stop a local TensorFlow cluster (``tf.compat.v1.train.Server`` processes) for tests.

Every task is its own process on a free 127.0.0.1 port. One launcher (``sys.executable``
running :data:`LAUNCHER_SCRIPT`) imports TensorFlow once and forks one process per task, so a
three-task cluster costs one TensorFlow import, not three (about 10 s each on a busy 2-core
machine). A task reports ``ready JOB TASK PID`` once its gRPC server is up and exits by itself
when its stdin (shared with the launcher, written by nobody) closes, so even a test process
that dies leaves no server behind. :meth:`stop` closes stdin, then terminates, then kills
after a timeout, every process by its pid, and reports any survivor.

Example::

    with LocalCluster({"ps": 2, "worker": 1}) as cluster:
        with tf.compat.v1.Session(cluster.target, graph=graph, config=session_config()) as sess:
            ...
    assert cluster.survivors() == []
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

LAUNCHER_SCRIPT = r"""
import json, os, socket, sys, traceback
spec = json.loads(sys.argv[1])
# A taken port fails here in milliseconds, before the slow import (gRPC's own bind error is
# still reported the same way when another process takes the port in between).
for job, addresses in spec.items():
    for task, address in enumerate(addresses):
        try:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", int(address.rsplit(":", 1)[1])))
        except OSError as error:
            os.write(1, f"failed {job} {task} {os.getpid()} {error}\n".encode())
            os._exit(3)
os.write(1, f"progress launcher 0 {os.getpid()} importing TensorFlow\n".encode())
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # once: each task is a fork of this process, so the cluster starts in one import
os.write(1, f"progress launcher 0 {os.getpid()} imported TensorFlow\n".encode())

for job, addresses in spec.items():
    for task in range(len(addresses)):
        if os.fork() == 0:
            try:
                server = tf.compat.v1.train.Server(tf.train.ClusterSpec(spec), job_name=job, task_index=task,
                                                   protocol="grpc", start=True)
            except BaseException:
                message = traceback.format_exc().replace(chr(10), " | ")
                os.write(1, f"failed {job} {task} {os.getpid()} {message}\n".encode())
                os._exit(3)
            os.write(1, f"ready {job} {task} {os.getpid()}\n".encode())
            while os.read(0, 4096):  # until the test closes our stdin (or dies)
                pass
            os._exit(0)
os.close(1)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
os._exit(0)  # skip TensorFlow's slow interpreter shutdown
"""

# The launcher reports each step (port probes, TensorFlow imported, each task ready). A start fails only
# when no step is reported for STALL_TIMEOUT seconds (importing TensorFlow on a 2-core box that other jobs
# keep busy can take minutes) or when the launcher exits; START_TIMEOUT bounds the whole start.
STALL_TIMEOUT = 300.0
FORKED_TASK_TIMEOUT = 90.0  # from the import to every task's 'ready': a gRPC server starts in seconds
START_TIMEOUT = 900.0
STOP_TIMEOUT = 10.0      # seconds between closing stdin, SIGTERM and SIGKILL
ATTEMPTS = 4             # port clashes are retried with fresh ports
_CLASH = ("address already in use", "could not start grpc server", "failed to add port", "bind")


class ClusterStartError(RuntimeError):
    """The cluster did not come up; the message holds the failing task's stderr.

    ``clash``: the task could not bind its port (worth retrying with fresh ports).
    """

    def __init__(self, message, clash=False):
        super().__init__(message)
        self.clash = clash


def free_port() -> int:
    """A port nobody listens on right now (bind to port 0, read it, close): may race, hence retries."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def session_config(timeout_ms: int = 30_000):
    """A ConfigProto whose ``operation_timeout_in_ms`` makes a hung cluster fail fast, not hang."""
    import tensorflow as tf

    return tf.compat.v1.ConfigProto(operation_timeout_in_ms=timeout_ms, allow_soft_placement=False)


def is_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (psutil when installed, else signal 0; zombies count as gone)."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else (a recycled pid)
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


class LocalCluster:
    """``{job: task count}`` as server processes on 127.0.0.1; a context manager that always cleans up.

    ``cluster.spec`` (``{job: ['127.0.0.1:PORT', ...]}``), ``cluster.cluster_spec``
    (``tf.train.ClusterSpec``), ``cluster.target`` (``grpc://`` address of the first
    worker), ``cluster.pids`` (every process started: launchers and tasks, failed attempts
    included), ``cluster.attempts``. ``port_source``: a callable giving ports (a test passes
    one that clashes on purpose).
    """

    def __init__(self, jobs, *, port_source=free_port, start_timeout=START_TIMEOUT, stall_timeout=STALL_TIMEOUT):
        self.jobs = dict(jobs)
        self.port_source = port_source
        self.start_timeout = start_timeout
        self.stall_timeout = stall_timeout
        self.spec = None
        self.attempts = 0
        self.pids = []
        self.task_pids = {}
        self._launcher = None
        self._log = None

    # -- starting ---------------------------------------------------------------------
    def start(self):
        """Start every task; retry with fresh ports when one cannot bind its port."""
        last_error = None
        for _ in range(ATTEMPTS):
            self.attempts += 1
            spec = {job: [f"127.0.0.1:{self.port_source()}" for _ in range(count)] for job, count in self.jobs.items()}
            try:
                self._launch(spec)
            except ClusterStartError as error:
                self.stop()
                if not error.clash:
                    raise
                last_error = error
                continue
            except BaseException:
                self.stop()
                raise
            self.spec = spec
            return self
        raise ClusterStartError(f"no free ports after {ATTEMPTS} attempts: {last_error}", clash=True)

    def _launch(self, spec):
        self._log = tempfile.TemporaryFile()
        self._launcher = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER_SCRIPT, json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""},
        )
        self.pids.append(self._launcher.pid)
        self.task_pids = {}
        wanted = sum(len(addresses) for addresses in spec.values())
        started = last_step = time.monotonic()
        imported = False
        stream = self._launcher.stdout
        while len(self.task_pids) < wanted:
            now = time.monotonic()
            limit = FORKED_TASK_TIMEOUT if imported else self.stall_timeout
            if now - last_step > limit:
                # After the import, a task that never reports ready is a fork that deadlocked on a lock one of
                # TensorFlow's threads held: worth a fresh start, like a port clash.
                raise ClusterStartError(f"the cluster reported no progress for {limit:.0f} s{_tail(self._log)}",
                                        clash=imported)
            if now - started > self.start_timeout:
                raise ClusterStartError(f"the cluster was not ready after {self.start_timeout:.0f} s{_tail(self._log)}")
            readable, _, _ = select.select([stream], [], [], 0.5)
            if not readable:
                continue
            line = stream.readline().decode("utf-8", "replace").strip()
            if not line:
                raise ClusterStartError(f"the launcher exited ({self._launcher.poll()}){_tail(self._log)}")
            last_step = time.monotonic()
            status, job, task, pid, *message = line.split(" ", 4)
            if int(pid) not in self.pids:
                self.pids.append(int(pid))
            if status == "progress":
                imported = imported or " ".join(message).startswith("imported")
                continue
            if status == "failed":
                text = " ".join(message)
                raise ClusterStartError(f"/job:{job}/task:{task} failed: {text}",
                                        clash=any(word in text.lower() for word in _CLASH))
            self.task_pids[f"/job:{job}/task:{task}"] = int(pid)

    # -- stopping ---------------------------------------------------------------------
    def stop(self) -> list:
        """Stop every process (close stdin, SIGTERM, SIGKILL, by pid); returns the pids still alive."""
        launcher, self._launcher = self._launcher, None
        try:
            if launcher is not None:
                launcher.stdin.close()  # every task sees end of file and exits
                _wait_gone(self.pids, STOP_TIMEOUT / 2, launcher)
            for pid in self.survivors():
                _signal(pid, signal.SIGTERM)
            _wait_gone(self.pids, STOP_TIMEOUT, launcher)
        finally:
            for pid in self.survivors():
                _signal(pid, signal.SIGKILL)
            _wait_gone(self.pids, STOP_TIMEOUT, launcher)
            if launcher is not None:
                launcher.stdout.close()
            if self._log is not None:
                self._log.close()
                self._log = None
        return self.survivors()

    def survivors(self) -> list:
        """Pids of every process ever started here that still exists."""
        return [pid for pid in self.pids if is_alive(pid)]

    # -- what tests use -----------------------------------------------------------------
    @property
    def cluster_spec(self):
        import tensorflow as tf

        return tf.train.ClusterSpec(self.spec)

    @property
    def target(self) -> str:
        return "grpc://" + self.spec["worker"][0]

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


def _signal(pid, signum):
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _wait_gone(pids, timeout, launcher=None):
    """Wait until none of ``pids`` is alive (reaping the launcher, our own child), or the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if launcher is not None:
            launcher.poll()
        if not any(is_alive(pid) for pid in pids):
            return
        time.sleep(0.05)


def _tail(log, limit=2000) -> str:
    log.seek(0)
    text = log.read().decode("utf-8", "replace").strip()
    return f":\n{text[-limit:]}" if text else ""
