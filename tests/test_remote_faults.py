"""Buckets under faults: a server killed mid-read and mid-write, a server that stalls, objects deleted,
replaced or truncated under a reader, a missing bucket, bad credentials, no network.

The servers are the real ones the other remote tests use (fake-gcs-server behind gcsfs, moto's S3 server
behind s3fs); a fault is a ``FaultyRelay`` in front of the server, which kills or stalls the connection at a
chosen byte, as a dying server would. Commands run as a user runs them, in a child process, with small
time-outs from the environment; each must end (the child's ``timeout`` is only a guard against a hang) with
exit code 2 and one line under 2 KB naming the user's URL, and no earlier checkpoint may be lost.
"""

import os
import re
import subprocess
import sys

import numpy as np
import object_servers
import pytest
from object_servers import FaultyRelay

from subsetsaver.errors import CorruptCheckpointError, SubsetSaverError
from subsetsaver.formats import npz
from subsetsaver.formats.tf import bundle as tf_bundle
from subsetsaver.storage.remote_errors import CREDENTIALS

MiB = 1 << 20
LIMITS = {"SUBSETSAVER_CONNECT_TIMEOUT": "1", "SUBSETSAVER_READ_TIMEOUT": "2", "SUBSETSAVER_RETRY_BUDGET": "4"}
HANG_GUARD = 30  # seconds: the bound every fault must end within


def checkpoint(directory, seed=0):
    """A TensorFlow checkpoint of a 6 MiB tensor and a small one; returns (prefix, values)."""
    rng = np.random.default_rng(seed)
    values = {"big": rng.standard_normal(6 * MiB // 4).astype(np.float32), "small": np.arange(5, dtype=np.int64)}
    return tf_bundle.write(str(directory / f"model-{seed}"), values), values


class FaultPlace:
    """A directory of a bucket reached through a ``FaultyRelay`` (``env``: what a child process needs to use it),
    and ``direct``, a file system that reaches the same server around the relay."""

    def __init__(self, protocol, relay, direct, env, stop=None):
        self.protocol, self.relay, self.direct, self.stop = protocol, relay, direct, stop
        self.env = {**os.environ, **env, **LIMITS}
        self.directory = f"{protocol}://{object_servers.BUCKET}/faults-{os.getpid()}-{id(self):x}"

    def url(self, name):
        return f"{self.directory}/{name}"

    def upload(self, prefix):
        """The files of the local checkpoint ``prefix`` into this directory; returns its URL."""
        folder, stem = os.path.split(prefix)
        for name in os.listdir(folder):
            if name.startswith(stem + "."):
                self.direct.put_file(os.path.join(folder, name), self.url(name))
        return self.url(stem)


@pytest.fixture(params=["gs", "s3"])
def faulty(request, monkeypatch):
    """gs: a fake-gcs-server of its own behind a FaultyRelay (its upload sessions come back through the relay);
    s3: the session's moto server behind a FaultyRelay of its own."""
    if request.param == "gs":
        gcsfs = pytest.importorskip("gcsfs")
        try:
            server = object_servers.start_fake_gcs(relay_class=FaultyRelay)
        except RuntimeError as error:
            pytest.skip(str(error))
        # a client made as a user makes one, from the environment (gcsfs reads it on every request)
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{server.relay.target_port}")
        direct = gcsfs.GCSFileSystem(skip_instance_cache=True)
        direct.mkdir(object_servers.BUCKET)
        place = FaultPlace("gs", server.relay, direct, {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{server.relay.port}"})
        yield place
        server.stop()
        return
    s3fs = pytest.importorskip("s3fs")
    server = object_servers.object_server("s3")
    relay = FaultyRelay(server.relay.target_port)
    direct = s3fs.S3FileSystem(endpoint_url=server.environ["AWS_ENDPOINT_URL"], key="testing", secret="testing",
                               skip_instance_cache=True)
    yield FaultPlace("s3", relay, direct, {**server.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{relay.port}"})
    relay.close()


def command(place, *args):
    return subprocess.run([sys.executable, "-m", "subsetsaver", *map(str, args)], capture_output=True, text=True,
                          env=place.env, timeout=HANG_GUARD)


def refusal(result) -> str:
    """The one line a refused command printed (exit 2, no traceback, under 2 KB), without its prefix."""
    lines = result.stderr.splitlines()
    assert (result.returncode, len(lines)) == (2, 1), result.stderr[-3000:]
    assert "Traceback" not in result.stderr and len(result.stderr.encode()) < 2048
    assert lines[0].startswith("subsetsaver: error: ")
    return lines[0][len("subsetsaver: error: "):]


def unreachable(place, action, url):
    endpoint = {"gs": "STORAGE_EMULATOR_HOST", "s3": "AWS_ENDPOINT_URL"}[place.protocol]
    return (f"cannot {action} '{url}': no answer from the store within the 4 s retry budget: the server is "
            f"unreachable or stopped sending (check {endpoint} and the network), the bucket is missing, or the "
            "credentials are refused; to wait longer, set SUBSETSAVER_RETRY_BUDGET (seconds)")


def test_a_server_killed_mid_read_ends_in_one_line_naming_the_object(faulty, tmp_path):
    remote = faulty.upload(checkpoint(tmp_path)[0])
    faulty.relay.kill_after(MiB)  # of the server's answers: inside the 6 MiB data object

    line = refusal(command(faulty, "convert", remote, tmp_path / "out" / "out.npz"))

    assert faulty.relay.killed
    assert line.startswith(f"cannot read '{remote}.data-00000-of-00001': no answer from the store")
    assert not (tmp_path / "out" / "out.npz").exists()


def test_a_server_killed_mid_write_leaves_the_previous_checkpoint_whole(faulty, tmp_path):
    first, values = checkpoint(tmp_path, seed=1)
    second, _ = checkpoint(tmp_path, seed=2)
    out = faulty.url("serve/model.npz")
    assert command(faulty, "convert", first, out).returncode == 0
    faulty.relay.kill_after(2 * MiB, upstream=True)  # inside the new 6 MiB upload

    line = refusal(command(faulty, "convert", second, out, "--force"))

    assert faulty.relay.killed
    assert out in line and "no answer from the store" in line
    faulty.direct.get_file(out, str(tmp_path / "kept.npz"))
    _, kept = npz.read(str(tmp_path / "kept.npz"))
    assert kept.keys() == values.keys() and all(np.array_equal(kept[name], values[name]) for name in values)


def test_a_server_that_stops_answering_ends_within_the_read_timeout(faulty, tmp_path):
    remote = faulty.upload(checkpoint(tmp_path)[0])
    faulty.relay.stall_after(0)  # accepts, reads the request, never answers

    line = refusal(command(faulty, "inspect", remote))

    assert line == unreachable(faulty, "look for", remote)


def test_a_server_that_stalls_mid_body_ends_in_one_line(faulty, tmp_path):
    remote = faulty.upload(checkpoint(tmp_path)[0])
    faulty.relay.stall_after(MiB)

    line = refusal(command(faulty, "convert", remote, tmp_path / "out" / "out.npz"))

    assert line.startswith(f"cannot read '{remote}.data-00000-of-00001': no answer from the store within the 4 s")
    assert not (tmp_path / "out" / "out.npz").exists()


def test_no_network_ends_in_one_line(faulty, tmp_path):
    faulty.relay.kill()  # nothing listens at the address the client is given
    remote = faulty.url("model")

    assert refusal(command(faulty, "inspect", remote)) == unreachable(faulty, "look for", remote)


@pytest.mark.parametrize("fault", ["deleted", "replaced", "truncated"])
def test_a_data_object_changed_after_the_index_was_read_is_named(server_store, tmp_path, fault):
    prefix, _ = checkpoint(tmp_path)
    filesystem = __import__("fsspec").filesystem(server_store.protocol)
    for name in os.listdir(tmp_path):
        filesystem.put_file(str(tmp_path / name), server_store.url(name))
    remote, data = server_store.url("model-0"), server_store.url("model-0.data-00000-of-00001")
    size = os.path.getsize(prefix + ".data-00000-of-00001")

    with tf_bundle.BundleReader(remote) as reader:  # the index is read
        if fault == "deleted":
            filesystem.rm_file(data)
        else:
            filesystem.pipe_file(data, bytes(size if fault == "replaced" else size // 2))
        with pytest.raises(SubsetSaverError) as caught:
            reader.read("big")

    expected = {
        "deleted": re.escape(f"'{data}' was deleted while it was read; its checkpoint was removed or replaced: "
                             "read it again"),
        "replaced": re.escape(f"cannot read checkpoint '{remote}': tensor 'big' fails its checksum (bytes 0 to "
                              f"{6 * MiB} of '{data}') (truncated or tampered); restore from an intact copy of the "
                              "checkpoint"),
        "truncated": re.escape(f"'{data}' was replaced while it was read (version ") + ".+"
                     + re.escape(" when opened, ") + ".+" + re.escape(" now): read the checkpoint again"),
    }[fault]
    assert re.fullmatch(expected, str(caught.value)), str(caught.value)
    assert isinstance(caught.value, CorruptCheckpointError) and len(str(caught.value)) < 2048


def test_a_missing_bucket_is_named_for_reads_and_writes(server_store, tmp_path):
    env = {**os.environ, **LIMITS}
    missing = f"{server_store.protocol}://no-such-bucket-{os.getpid()}"
    prefix, _ = checkpoint(tmp_path)
    fix = "check the bucket's name, or create the bucket first"

    read = subprocess.run([sys.executable, "-m", "subsetsaver", "inspect", f"{missing}/model"], capture_output=True,
                          text=True, env=env, timeout=HANG_GUARD)
    write = subprocess.run([sys.executable, "-m", "subsetsaver", "convert", prefix, f"{missing}/out.npz"],
                           capture_output=True, text=True, env=env, timeout=HANG_GUARD)

    assert refusal(read) == (f"cannot look for '{missing}/model.index': the bucket "
                             f"'no-such-bucket-{os.getpid()}' does not exist: {fix}")
    assert refusal(write).endswith(fix) and f"'{missing}/out.npz'" in refusal(write)


def test_bad_credentials_end_in_one_line_naming_the_settings_the_client_reads(tmp_path):
    """S3: moto with authentication on refuses keys it never issued. Cloud Storage: a key file whose token
    service does not answer."""
    port = object_servers.free_port()
    try:
        server = object_servers.start_moto_process(port, env=dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="0"))
    except RuntimeError as error:
        pytest.skip(str(error))
    key_file = tmp_path / "key.json"
    key_file.write_text('{"type": "service_account", "client_email": "a@b.c", "private_key": "-", '
                        '"token_uri": "http://127.0.0.1:9/token"}')
    children = {
        "s3": {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "AKIAUNKNOWN",
               "AWS_SECRET_ACCESS_KEY": "wrong"},
        "gs": {"GOOGLE_APPLICATION_CREDENTIALS": str(key_file)},
    }
    try:
        results = {}
        for protocol, settings in children.items():
            env = {name: value for name, value in os.environ.items() if name != "STORAGE_EMULATOR_HOST"}
            results[protocol] = subprocess.run(
                [sys.executable, "-m", "subsetsaver", "inspect", f"{protocol}://private/model"], capture_output=True,
                text=True, env={**env, **LIMITS, **settings}, timeout=HANG_GUARD)
    finally:
        server.terminate()
        server.wait(timeout=10)

    s3_line, gs_line = refusal(results["s3"]), refusal(results["gs"])
    assert s3_line.startswith("cannot look for 's3://private/model': ") and s3_line.endswith(CREDENTIALS["s3"])
    assert "http" not in s3_line  # the server's address is not the user's URL
    assert gs_line.startswith("cannot connect to the store for 'gs://private/model': ")
    assert "credentials are refused" in gs_line or gs_line.endswith(CREDENTIALS["gcs"])
