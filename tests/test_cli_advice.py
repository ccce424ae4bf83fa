"""The command line's advice is true of the files at hand: a checkpoint saved without a MetaGraph is told how
to get one, and ``inspect model.meta`` says that it inspected the checkpoint beside it."""

import pytest
import tensorflow as tf

v1 = tf.compat.v1


def save(directory, write_meta_graph):
    graph = tf.Graph()
    with graph.as_default():
        v1.get_variable("dense/w", [2, 3])
        v1.get_variable("dense/b", [3])
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            return v1.train.Saver().save(sess, str(directory / "model"), write_meta_graph=write_meta_graph)


@pytest.mark.parametrize("command", [["audit", "trainable()"], ["select", "trainable()"]])
def test_graph_without_a_meta_file_says_how_to_write_one(command, tmp_path, run_cli):
    prefix = save(tmp_path / "ckpt", write_meta_graph=False)
    for given, cause in [
        (prefix, f"'{prefix}' is a checkpoint, not a MetaGraph file; there is no {prefix}.meta (saved with "
                 "write_meta_graph=False); write one from the graph that trains it with "
                 f"tf.compat.v1.train.export_meta_graph('{prefix}.meta') and pass that "
                 f"(or --checkpoint {prefix} for names, shapes and dtypes only)"),
        (str(tmp_path / "ckpt"), f"'{tmp_path / 'ckpt'}' is a directory, not a MetaGraph file, and it holds no .meta "
                                 "file; write one from the graph that trains it with "
                                 f"tf.compat.v1.train.export_meta_graph('{tmp_path / 'ckpt' / 'model'}.meta') and "
                                 f"pass that (or --checkpoint {tmp_path / 'ckpt'} for names, shapes and dtypes only)"),
    ]:
        result = run_cli(command[0], "--graph", given, *command[1:])
        assert (result.returncode, result.stdout) == (2, "")
        assert result.stderr.splitlines()[-1] == f"Error: Invalid value for '--graph': {cause}"


def test_inspect_of_a_meta_file_says_which_checkpoint_it_inspected(tmp_path, run_cli):
    prefix = save(tmp_path, write_meta_graph=True)
    result = run_cli("inspect", prefix + ".meta")
    assert result.returncode == 0
    assert result.stdout.splitlines()[0].startswith(f"checkpoint {prefix} (")
    assert result.stderr == (
        f"note: '{prefix}.meta' is a MetaGraph file (a graph, no values); inspecting the checkpoint '{prefix}' saved "
        f"with it. For the graph's variables and roles: subsetsaver select --graph {prefix}.meta 'everything()'\n")
    plain = run_cli("inspect", prefix)
    assert (plain.returncode, plain.stderr, plain.stdout) == (0, "", result.stdout)
