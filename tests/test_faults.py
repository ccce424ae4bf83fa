"""Saving under faults: a full disk, a read-only file system, and a second writer.

The disk is a real tmpfs of a few MiB mounted for the test (root only; elsewhere these
tests skip and say so). A failed save raises the library's CheckpointWriteError naming
the path, the bytes it needs and the checkpoint that remains latest; the previous
checkpoint restores bit for bit, and no temporary file is left.
"""

import contextlib
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import subsetsaver as ss

v1 = tf.compat.v1
BACKENDS = ["tf", "npz"]


@contextlib.contextmanager
def small_disk(megabytes):
    """A fresh tmpfs of ``megabytes`` MiB, unmounted afterwards."""
    mount_point = tempfile.mkdtemp(prefix="subsetsaver-disk-")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", mount_point],
                            capture_output=True, text=True)
    if result.returncode != 0:
        os.rmdir(mount_point)
        pytest.skip(f"cannot mount a small tmpfs here ({result.stderr.strip() or 'not root'}); CI runs as root")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", mount_point], capture_output=True)
        os.rmdir(mount_point)


def one_mib_model():
    graph = tf.Graph()
    with graph.as_default():
        weights = v1.get_variable("dense/w", initializer=tf.random.stateless_uniform([256, 1024], seed=[1, 2]))
        step = v1.train.get_or_create_global_step()
        train = tf.group(weights.assign_add(tf.ones_like(weights)), step.assign_add(1))
    return graph, weights, train


def files(directory):
    return sorted(os.listdir(directory))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_full_disk_raises_names_what_remains_and_keeps_the_previous_checkpoint(backend):
    with small_disk(3) as disk:
        graph, weights, train = one_mib_model()
        plan = ss.plan(ss.everything(), graph, backend=backend)
        with v1.Session(graph=graph) as sess:
            plan.restore_or_initialize(sess, None)
            first = plan.save(sess, os.path.join(disk, "model"), global_step=1)
            saved = sess.run(weights)
            sess.run(train)
            before = files(disk)
            with open(os.path.join(disk, "filler"), "wb") as filler:
                filler.write(b"\0" * (1200 << 10))
            with pytest.raises(ss.CheckpointWriteError) as error:
                plan.save(sess, os.path.join(disk, "model"), global_step=2)
            sizes = plan.sizes
            needed = (f"{sizes.checkpoint_bytes:,} bytes (.data {sizes.data_bytes:,}, .index ~{sizes.index_bytes:,})"
                      if backend == "tf" else f"{sizes.saved_bytes:,} bytes of values")
            assert str(error.value) == (
                f"cannot save '{disk}/model' (step 2): no space left on device; it needs about {needed}; nothing "
                f"was left under its name and the latest checkpoint is still '{first}'; free space or save elsewhere"
            )
            assert error.value.errno == 28
            assert isinstance(error.value, OSError)
            assert files(disk) == sorted(before + ["filler"])
            assert plan.restore_or_initialize(sess, disk).checkpoint == first
            np.testing.assert_array_equal(sess.run(weights), saved)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_read_only_file_system_raises_the_library_error(backend):
    with small_disk(8) as disk:
        graph, weights, train = one_mib_model()
        plan = ss.plan(ss.everything(), graph, backend=backend)
        with v1.Session(graph=graph) as sess:
            plan.restore_or_initialize(sess, None)
            first = plan.save(sess, os.path.join(disk, "model"), global_step=1)
            before = files(disk)
            subprocess.run(["mount", "-o", "remount,ro", disk], check=True)
            with pytest.raises(ss.CheckpointWriteError) as error:
                plan.save(sess, os.path.join(disk, "model"), global_step=2)
            assert str(error.value).startswith(f"cannot save '{disk}/model' (step 2): read-only file system; ")
            assert str(error.value).endswith(f"the latest checkpoint is still '{first}'; free space or save elsewhere")
            assert files(disk) == before


SECOND_WRITER = textwrap.dedent("""
    import os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf
    import subsetsaver as ss
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.get_variable("w", initializer=tf.zeros([4]))
    plan = ss.plan(ss.everything(), graph, backend=sys.argv[2])
    with tf.compat.v1.Session(graph=graph) as sess:
        plan.restore_or_initialize(sess, None)
        print(plan.save(sess, os.path.join(sys.argv[1], "model"), global_step=5), flush=True)
        sys.stdin.read()  # hold the directory until the test closes stdin
""")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_second_writer_in_one_directory_is_refused_until_the_first_ends(tmp_path, backend):
    directory = str(tmp_path)
    writer = subprocess.Popen([sys.executable, "-c", SECOND_WRITER, directory, backend], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        written = writer.stdout.readline().strip()
        assert written == os.path.join(directory, "model-5" + (".npz" if backend == "npz" else ""))
        graph = tf.Graph()
        with graph.as_default():
            w = v1.get_variable("w", initializer=tf.ones([4]))
        plan = ss.plan(ss.everything(), graph, backend=backend)
        with v1.Session(graph=graph) as sess:
            plan.restore_or_initialize(sess, None)
            with pytest.raises(ss.CheckpointWriteError) as error:
                plan.save(sess, os.path.join(directory, "model"), global_step=5)
            assert str(error.value) == (
                f"another process is writing checkpoints in '{directory}' (process {writer.pid}); two writers in "
                "one directory replace each other's files: give each its own directory, or stop the other process "
                "first"
            )
            assert plan.restore_or_initialize(sess, directory).checkpoint == written
            np.testing.assert_array_equal(sess.run(w), np.zeros(4, np.float32))
            writer.stdin.close()
            assert writer.wait(timeout=120) == 0
            assert plan.save(sess, os.path.join(directory, "model"), global_step=6).startswith(
                os.path.join(directory, "model-6"))
    finally:
        if writer.poll() is None:
            writer.kill()
