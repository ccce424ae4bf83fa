"""The file commands on checkpoints in buckets: memory://, fake-gcs-server (gs://) and moto (s3://).

The checkpoint is a real ``tf.compat.v1.train.Saver`` save of the MNIST CNN after Adam steps, uploaded
with fsspec as a user would; what the commands write is downloaded and restored by TensorFlow.
"""

import os
import subprocess
import sys

import fsspec
import graphs
import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file

import subsetsaver as ss
from subsetsaver.formats import npz
from subsetsaver.formats.tf import bundle as tf_bundle

v1 = tf.compat.v1
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = dict(channels=(4, 8), fc_units=256, input_hw=56)  # fc/w is 1.5 MB, so bodies outweigh HTTP headers


@pytest.fixture(scope="module")
def adam_checkpoint(tmp_path_factory):
    """(local prefix, name -> value, trainable names) of the CNN after 2 Adam steps."""
    built = graphs.mnist_cnn(**SIZES)
    with built.graph.as_default():
        trainable = sorted(v.op.name for v in v1.trainable_variables())
    prefix, values = graphs.trained_checkpoint(built, str(tmp_path_factory.mktemp("adam") / "model.ckpt"), steps=2)
    return prefix, values, trainable


def upload(place, prefix):
    """The checkpoint's files and its ``checkpoint`` state file into ``place``; returns the remote prefix."""
    filesystem = fsspec.filesystem(place.protocol)
    directory = os.path.dirname(prefix)
    for name in os.listdir(directory):
        filesystem.put_file(os.path.join(directory, name), place.url(name))
    return place.url(os.path.basename(prefix))


def download(place, names, directory):
    filesystem = fsspec.filesystem(place.protocol)
    for name in names:
        filesystem.get_file(place.url(name), str(directory / os.path.basename(name)))


def tensorflow_values(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def test_inspect_reads_the_index_and_prints_what_it_prints_locally(object_store, adam_checkpoint, run_cli):
    prefix, _, _ = adam_checkpoint
    remote = upload(object_store, prefix)
    local = run_cli("inspect", prefix)
    if object_store.relay:
        object_store.relay.reset()

    result = run_cli("inspect", remote)

    assert result.returncode == 0, result.stderr
    assert result.stdout == local.stdout.replace(prefix, remote)
    if object_store.relay:
        index_bytes = os.path.getsize(prefix + ".index")
        assert object_store.relay.received <= index_bytes + 64 * 1024, object_store.relay.received


def test_a_remote_command_prints_only_its_own_lines(server_store, adam_checkpoint):
    """The storage clients' own log lines (gcsfs warns about every bucket it cannot classify) stay out of stderr."""
    prefix, _, _ = adam_checkpoint
    remote = upload(server_store, prefix)

    result = subprocess.run([sys.executable, "-m", "subsetsaver", "inspect", remote], capture_output=True, text=True,
                            timeout=300)

    assert (result.returncode, result.stderr) == (0, "")
    assert remote in result.stdout


def test_convert_with_keep_fetches_about_the_selected_bytes_and_is_bit_exact(object_store, adam_checkpoint, run_cli,
                                                                               tmp_path):
    prefix, values, trainable = adam_checkpoint
    remote = upload(object_store, prefix)
    assert run_cli("convert", prefix, tmp_path / "local.safetensors", "--keep", "trainable()").returncode == 0
    if object_store.relay:
        object_store.relay.reset()

    result = run_cli("convert", remote, tmp_path / "remote.safetensors", "--keep", "trainable()")

    assert result.returncode == 0, result.stderr
    got, expected = load_file(tmp_path / "remote.safetensors"), load_file(tmp_path / "local.safetensors")
    assert sorted(got) == trainable == sorted(expected)
    for name in trainable:
        assert got[name].tobytes() == expected[name].tobytes() == values[name].tobytes(), name
    if object_store.relay:
        selected = sum(values[name].nbytes for name in trainable)
        index_bytes = os.path.getsize(prefix + ".index")
        assert object_store.relay.received <= 1.05 * selected + index_bytes, (object_store.relay.received, selected)


def test_slim_and_rewrite_from_bucket_to_bucket_restore_bit_exact_in_tensorflow(server_store, adam_checkpoint,
                                                                                run_cli, tmp_path):
    prefix, values, trainable = adam_checkpoint
    remote = upload(server_store, prefix)

    slimmed = run_cli("slim", remote, "--keep", "trainable()", "-o", server_store.url("serve/model"))
    rewritten = run_cli("rewrite", remote, "-o", server_store.url("renamed/model"), "--remap", "fc/=dense/")

    assert slimmed.returncode == 0 and rewritten.returncode == 0, slimmed.stderr + rewritten.stderr
    (tmp_path / "serve").mkdir()
    (tmp_path / "renamed").mkdir()
    download(server_store, ["serve/model.index", "serve/model.data-00000-of-00001"], tmp_path / "serve")
    download(server_store, ["renamed/model.index", "renamed/model.data-00000-of-00001"], tmp_path / "renamed")
    served = tensorflow_values(str(tmp_path / "serve" / "model"))
    renamed = tensorflow_values(str(tmp_path / "renamed" / "model"))
    assert sorted(served) == trainable
    for name in trainable:
        assert served[name].tobytes() == values[name].tobytes(), name
    assert sorted(renamed) == sorted(name.replace("fc/", "dense/", 1) if name.startswith("fc/") else name
                                     for name in values)
    for name, value in values.items():
        new_name = name.replace("fc/", "dense/", 1) if name.startswith("fc/") else name
        assert renamed[new_name].tobytes() == value.tobytes(), name
    state = fsspec.filesystem(server_store.protocol).cat_file(server_store.url("serve/checkpoint")).decode()
    assert state.startswith(f'model_checkpoint_path: "{server_store.url("serve/model")}"')


def test_an_existing_checkpoint_in_a_bucket_needs_force(object_store, adam_checkpoint, run_cli):
    prefix, values, trainable = adam_checkpoint
    remote = upload(object_store, prefix)
    output = object_store.url("serve/model")
    assert run_cli("slim", remote, "--keep", "trainable()", "-o", output).returncode == 0

    refused = run_cli("slim", remote, "--keep", "trainable() - scope('fc')", "-o", output)
    replaced = run_cli("slim", remote, "--keep", "trainable() - scope('fc')", "-o", output, "--force")

    assert refused.returncode != 0
    assert f"checkpoint '{output}' already exists" in refused.stderr and "--force" in refused.stderr
    assert replaced.returncode == 0, replaced.stderr
    with tf_bundle.BundleReader(output) as written:
        assert sorted(written.names) == [name for name in trainable if not name.startswith("fc/")]


RESTORE_IN_A_NEW_PROCESS = """
import sys
import numpy as np
import tensorflow as tf
import graphs
import numpy as np
import subsetsaver as ss

built = graphs.mnist_cnn(**{sizes})
with built.graph.as_default():
    variables = tf.compat.v1.global_variables()
with tf.compat.v1.Session(graph=built.graph) as sess:
    report = ss.restore_npz(sess, {url!r})
    values = dict(zip([v.op.name for v in variables], sess.run(variables)))
np.savez({out!r}, **{{name.replace("/", "|"): value for name, value in values.items()}})
print(len(report.restored))
"""


def test_save_npz_to_a_bucket_restores_bit_exact_in_a_new_process(server_store, tmp_path):
    built = graphs.mnist_cnn(**SIZES)
    with built.graph.as_default():
        init = v1.global_variables_initializer()
        variables = v1.global_variables()
    url = server_store.url("portable/model-2.npz")
    with v1.Session(graph=built.graph) as sess:
        sess.run(init)
        for step in range(2):
            sess.run(built.tensors["train_op"], graphs.random_feed(built, seed=step))
        ss.save_npz(sess, url)
        saved = dict(zip([v.op.name for v in variables], sess.run(variables)))
    assert any("/Adam" in name for name in saved)

    code = RESTORE_IN_A_NEW_PROCESS.format(sizes=SIZES, url=url, out=str(tmp_path / "restored.npz"))
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([REPOSITORY, os.path.join(REPOSITORY, "tests")]))
    done = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=600)

    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) == len(saved)
    with np.load(tmp_path / "restored.npz", allow_pickle=False) as restored:
        got = {name.replace("|", "/"): restored[name] for name in restored.files}
    assert sorted(got) == sorted(saved)
    for name, value in saved.items():
        assert got[name].tobytes() == value.tobytes(), name


def test_a_flipped_byte_in_a_bucket_fails_the_tensors_checksum(object_store, adam_checkpoint, run_cli, tmp_path):
    prefix, values, _ = adam_checkpoint
    remote = upload(object_store, prefix)
    with tf_bundle.BundleReader(prefix) as reader:
        stored = reader._index.tensors["fc/w"].stored
    data_url = remote + ".data-00000-of-00001"
    filesystem = fsspec.filesystem(object_store.protocol)
    damaged = bytearray(filesystem.cat_file(data_url))
    damaged[stored.offset + 1000] ^= 0x01
    filesystem.pipe_file(data_url, bytes(damaged))

    result = run_cli("convert", remote, tmp_path / "out.safetensors", "--keep", "trainable()")

    assert result.returncode != 0 and not (tmp_path / "out.safetensors").exists()
    assert "fc/w" in result.stderr and "fails its checksum" in result.stderr, result.stderr


def test_safetensors_files_are_written_to_and_read_from_buckets(object_store, adam_checkpoint, run_cli, tmp_path):
    """convert writes a .safetensors object; inspect and convert read it back, bit for bit."""
    prefix, values, trainable = adam_checkpoint
    remote = object_store.url("weights.safetensors")

    written = run_cli("convert", prefix, remote, "--keep", "trainable()")
    back = run_cli("convert", remote, tmp_path / "back.npz")
    listed = run_cli("inspect", remote, "--json")

    assert (written.returncode, back.returncode, listed.returncode) == (0, 0, 0), written.stderr + back.stderr
    download(object_store, ["weights.safetensors"], tmp_path)
    got = load_file(tmp_path / "weights.safetensors")
    assert sorted(got) == trainable
    for name in trainable:
        assert got[name].tobytes() == values[name].tobytes(), name
    _manifest, arrays = npz.read(str(tmp_path / "back.npz"))
    assert sorted(arrays) == trainable and all(arrays[name].tobytes() == values[name].tobytes() for name in trainable)
    assert remote in listed.stdout
