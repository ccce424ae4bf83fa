"""Kill and race harness: run a writing command or library save in a child process, and SIGKILL
(or stop) it at a chosen moment of its write.

A *zygote* (this file run as a script) imports the package once (and TensorFlow, when asked);
for each job it forks a child that runs either the command line exactly as
``python -m subsetsaver ARGS`` does (``runpy`` on the package's ``__main__``) or one library save
(:func:`library_job`). Forking keeps a trial at the cost of the write itself, not of an import.

The child watches its output directory through Python's audit hooks (``open`` for writing,
``os.rename``/``os.replace``, ``os.remove``, ``os.link``, ``os.mkdir``, ...): it logs every
change it makes there, and counts the changes to *final names* (the names a completed write
leaves, learned from a recording run). A job can ask to be SIGKILLed (or SIGSTOPped) just before
its k-th change of a final name, or SIGKILLed a number of seconds after its write began. Bytes
that native code writes (TensorFlow's SaveV2, the safetensors package) are not seen by the hooks;
the timed kills reach them.

Protocol on the zygote's stdin, one JSON object a line; answers on its stdout:

* ``{"op": "run", ...job...}`` -> ``child PID``
* ``{"op": "wait", "pid": PID}`` -> ``exit PID STATUS`` (the raw ``waitpid`` status)

Example::

    zygote = Zygote(preload=["tensorflow"])
    pid = zygote.run(argv=["convert", "a/model", "b/model.npz", "--force"], watch="b", log="b.log",
                     final_names=["model.npz"], kill_before=1, out="o.txt", err="e.txt")
    status = zygote.wait(pid)
"""

import importlib
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_TARGET_OF = {  # audit event -> index of the path it changes in the event's arguments
    "os.rename": 1, "os.link": 1, "os.symlink": 1, "shutil.move": 1, "shutil.copyfile": 1,
    "os.remove": 0, "os.rmdir": 0, "os.mkdir": 0, "os.truncate": 0, "shutil.rmtree": 0,
}


# ---------------------------------------------------------------------------------
# The child's side
# ---------------------------------------------------------------------------------


def changed_path(event, args):
    """The path an audit event changes, or None when it changes nothing (a read, a descriptor)."""
    if event == "open":
        path, _mode, flags = args
        if not isinstance(flags, int) or not flags & _WRITE_FLAGS:
            return None
    elif event in _TARGET_OF:
        path = args[_TARGET_OF[event]]
    else:
        return None
    if isinstance(path, (str, bytes, os.PathLike)):
        return os.fsdecode(path)
    return None


class Tripwire:
    """An audit hook: logs the changes made in ``watch`` and kills or stops the process before the
    ``kill_before``-th (or ``stop_before``-th) change of a name in ``final_names`` (1-based)."""

    def __init__(self, watch, log, final_names=(), kill_before=None, stop_before=None):
        self.watch = os.path.realpath(watch)
        self.log = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.final_names = set(final_names)
        self.kill_before, self.stop_before = kill_before, stop_before
        self.finals = 0
        self.origin = time.monotonic()
        self._inside = False

    def begin(self):
        """The write starts now: times in the log count from here."""
        self.origin = time.monotonic()
        self.note({"event": "begin"})

    def note(self, record):
        record["t"] = round(time.monotonic() - self.origin, 6)
        os.write(self.log, (json.dumps(record) + "\n").encode())

    def __call__(self, event, args):
        if self._inside:
            return
        path = changed_path(event, args)
        if path is None:
            return
        self._inside = True
        try:
            if os.path.dirname(os.path.abspath(path)) != self.watch:
                return
            name = os.path.basename(path)
            final = name in self.final_names
            self.finals += final
            self.note({"event": event, "name": name, "final": final})
            if final and self.finals == self.kill_before:
                os.kill(os.getpid(), signal.SIGKILL)
            if final and self.finals == self.stop_before:
                os.kill(os.getpid(), signal.SIGSTOP)
        finally:
            self._inside = False


_prepared = {}  # (builder, its arguments, kind) -> (graph, loader, plan): built in the zygote, before forks


def prepare_library_job(job):
    """Build the job's graph, the Saver that loads its values and (for 'plan.save') its plan, once per
    zygote: every forked child starts from them and only opens a session."""
    import graphs
    import tensorflow as tf

    import subsetsaver as ss

    key = (job["builder"], json.dumps(job.get("builder_args", {}), sort_keys=True), job["kind"])
    if key not in _prepared:
        built = getattr(graphs, job["builder"])(**job.get("builder_args", {}))
        with built.graph.as_default():
            loader = tf.compat.v1.train.Saver(built.graph.get_collection("variables"))
        plan = ss.plan(ss.everything(), built.graph) if job["kind"] == "plan.save" else None
        _prepared[key] = (built.graph, loader, plan)
    return _prepared[key]


def library_job(job, tripwire):
    """One library save of a ``tests/graphs.py`` model holding the values of the checkpoint ``job['values']``:
    ``plan.save(sess, output)`` (kind 'plan.save') or ``ss.save_npz(sess, output)`` (kind 'save_npz')."""
    import tensorflow as tf

    import subsetsaver as ss

    graph, loader, plan = prepare_library_job(job)
    with tf.compat.v1.Session(graph=graph) as sess:
        loader.restore(sess, job["values"])
        tripwire.begin()
        if plan is not None:
            plan.save(sess, job["output"])
        else:
            ss.save_npz(sess, job["output"])


def run_job(job):
    """The child: redirect output, arm the tripwire, run the job; returns the exit code."""
    for fd, path in ((1, job["out"]), (2, job["err"])):
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(descriptor, fd)
        os.close(descriptor)
    tripwire = Tripwire(job["watch"], job["log"], job.get("final_names", ()), job.get("kill_before"),
                        job.get("stop_before"))
    sys.addaudithook(tripwire)
    if job.get("kill_after") is not None:
        timer = threading.Timer(job["kill_after"], os.kill, (os.getpid(), signal.SIGKILL))
        timer.daemon = True
    else:
        timer = None
    code = 0
    try:
        if "argv" in job:
            sys.argv = ["subsetsaver", *job["argv"]]
            tripwire.begin()
            if timer is not None:
                timer.start()
            try:
                runpy.run_module("subsetsaver", run_name="__main__", alter_sys=True)
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
                if isinstance(stop.code, str):
                    print(stop.code, file=sys.stderr)
        else:
            if timer is not None:
                original = tripwire.begin

                def begin():
                    original()
                    timer.start()

                tripwire.begin = begin
            try:
                library_job(job, tripwire)
            except Exception as error:  # noqa: BLE001  (reported as one line, as a user's script would)
                print(f"{type(error).__name__}: {error}", file=sys.stderr)
                code = 3
        tripwire.note({"event": "end", "code": code})
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def zygote_main(preload):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    for module in preload:
        importlib.import_module(module)
    import subsetsaver.cli  # imported once, before any fork, with every command's modules

    for module, _ in subsetsaver.cli.COMMANDS.values():
        importlib.import_module(f"subsetsaver.cli.{module}")

    os.write(1, b"zygote ready\n")
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "wait":
            _, status = os.waitpid(request["pid"], 0)
            os.write(1, f"exit {request['pid']} {status}\n".encode())
            continue
        if "argv" not in request:
            prepare_library_job(request)
        pid = os.fork()
        if pid == 0:
            code = 4
            try:
                code = run_job(request)
            finally:
                os._exit(code)
        os.write(1, f"child {pid}\n".encode())
    os._exit(0)


# ---------------------------------------------------------------------------------
# The test's side
# ---------------------------------------------------------------------------------


class Zygote:
    """A zygote process with ``preload`` imported; :meth:`run` forks a job, :meth:`wait` reaps it."""

    def __init__(self, preload=()):
        self.log = tempfile.TemporaryFile()
        tests = os.path.dirname(os.path.abspath(__file__))
        path = os.pathsep.join([tests] + [p for p in sys.path if p])
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), *preload],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": path},
        )
        self.children = set()
        self._ready = False

    def ready(self):
        """Wait until the zygote has imported what it preloads (it starts importing when created)."""
        if not self._ready:
            line = self._readline(600)
            assert line == "zygote ready", line + self.stderr()
            self._ready = True
        return self

    def _readline(self, timeout):
        readable, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not readable:
            raise AssertionError(f"the zygote said nothing for {timeout} s{self.stderr()}")
        return self.process.stdout.readline().decode().strip()

    def _send(self, request):
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        self.process.stdin.flush()

    def stderr(self):
        self.log.seek(0)
        text = self.log.read().decode("utf-8", "replace").strip()
        return "\n" + text[-3000:] if text else ""

    def run(self, **job):
        """Fork a child for ``job`` (see :func:`run_job`); its pid."""
        self.ready()
        self._send({"op": "run", **job})
        kind, pid = self._readline(60).split()
        assert kind == "child", kind + self.stderr()
        self.children.add(int(pid))
        return int(pid)

    def wait(self, pid, timeout=300):
        """The raw wait status of child ``pid``; AssertionError if it runs longer than ``timeout`` seconds
        (then it is killed, so that the zygote serves the next job)."""
        self._send({"op": "wait", "pid": pid})
        try:
            line = self._readline(timeout).split()
        except AssertionError:
            for sig in (signal.SIGKILL, signal.SIGCONT):
                os.kill(pid, sig)
            self._readline(60)
            self.children.discard(pid)
            raise AssertionError(f"child {pid} did not end within {timeout} s; it was killed") from None
        assert line[:2] == ["exit", str(pid)], " ".join(line) + self.stderr()
        self.children.discard(pid)
        return int(line[2])

    def close(self):
        for pid in self.children:  # a child left stopped or running by a failed test
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        try:
            self.process.stdin.close()
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        finally:
            self.process.stdout.close()
            self.log.close()


def is_stopped(pid) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP); False once it has ended."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state in ("T", "t")


def wait_until_stopped(pid, timeout=300) -> bool:
    """Poll until ``pid`` stops (True) or ends or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_stopped(pid):
            return True
        if not os.path.exists(f"/proc/{pid}") or _is_zombie(pid):
            return False
        time.sleep(0.01)
    return False


def _is_zombie(pid) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


def read_log(path) -> list:
    """The records a child's tripwire logged, in order."""
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


if __name__ == "__main__":
    zygote_main(sys.argv[1:])
