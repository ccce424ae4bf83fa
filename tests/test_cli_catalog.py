"""`subsetsaver inspect` and `subsetsaver select` through the real entry point."""

import json
import math
import os
import subprocess
import sys

import graphs
import pytest
import tensorflow as tf

from subsetsaver import catalog

SMALL = dict(channels=(4, 8), fc_units=16)


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("model")
    built = graphs.mnist_cnn(**SMALL)
    with built.graph.as_default():
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=built.graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            prefix = saver.save(session, str(directory / "model"), global_step=1)
    return built, prefix


def test_select_json_lists_the_chosen_variables_with_totals(saved_model, run_cli):
    built, prefix = saved_model
    result = run_cli("select", "--graph", prefix + ".meta", "trainable() | bn_stats()", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    expected = built.expected["trainable"] + built.expected["bn_stats"]
    cat = catalog.load(built.graph)
    assert [v["name"] for v in report["variables"]] == cat.in_order(expected)
    assert report["total"] == {"variables": len(expected), "bytes": cat.nbytes(expected)}
    assert report["selector"] == "trainable() | bn_stats()"
    first = report["variables"][0]
    record = cat.record(first["name"])
    assert (first["shape"], first["dtype"], first["bytes"]) == (list(record.shape), record.dtype, record.nbytes)


def test_select_table_and_explain(saved_model, run_cli):
    built, prefix = saved_model
    result = run_cli("select", "--graph", prefix + ".meta", "slots()", "--explain")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("slots()") and f"{len(built.expected['slots'])} variables" in lines[0]
    assert lines[-1].startswith(f"{len(built.expected['slots'])} of {len(built.expected['all'])} variables")


def test_inspect_json_totals_per_scope_and_optimizer_state(saved_model, run_cli):
    built, prefix = saved_model
    result = run_cli("inspect", prefix, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    cat = catalog.load(built.graph)
    assert report["total"] == {"tensors": len(cat), "bytes": cat.nbytes(cat.all_names)}
    by_scope = {s["scope"]: s["bytes"] for s in report["scopes"]}
    assert by_scope["opt"] == cat.nbytes(n for n in cat.all_names if n.startswith("opt/"))
    assert sum(by_scope.values()) == report["total"]["bytes"]
    assert report["optimizer_state"]["tensors"] == len(built.expected["slots"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["inspect", "/no/such/ckpt"], "subsetsaver: error: no checkpoint at '/no/such/ckpt' (expected '/no/such/ckpt.index')"),
        (["select", "--checkpoint", "/no/such/ckpt", "trainable()"],
         "subsetsaver: error: no checkpoint at '/no/such/ckpt' (expected '/no/such/ckpt.index')"),
        (["select", "--graph", "x.meta", "trainabel()"],
         "subsetsaver: error: unknown selector 'trainabel' — did you mean 'trainable'?\n  trainabel()\n  ^"),
        (["select", "trainable()"], "Error: name a source: --graph model.meta or --checkpoint CKPT"),
    ],
)
def test_bad_input_is_one_clear_message_without_traceback(args, message, run_cli):
    result = run_cli(*args)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().endswith(message)


def test_not_a_checkpoint_through_python_dash_m(tmp_path):
    """The real process: one line on stderr, exit 2, no traceback."""
    fake = tmp_path / "fake"
    (tmp_path / "fake.index").write_bytes(b"not an index at all")
    result = subprocess.run(
        [sys.executable, "-m", "subsetsaver", "inspect", str(fake)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"subsetsaver: error: cannot read checkpoint '{fake}': ")


def test_the_entry_point_offers_exactly_these_commands():
    result = subprocess.run([sys.executable, "-m", "subsetsaver", "--help"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    listed = result.stdout.split("Commands:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in listed if line.strip()] == [
        "audit", "average", "convert", "diff", "draw", "inspect", "plan", "rewrite", "select", "slim"]
    assert result.stderr == ""


def test_inspect_prints_every_tensor_and_the_totals(saved_model, run_cli):
    """The whole table: each row's name, shape, dtype and bytes are TensorFlow's own reader's."""
    from subsetsaver.selectors import format_bytes

    _, prefix = saved_model
    result = run_cli("inspect", prefix)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    reader = tf.train.load_checkpoint(prefix)
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    names = sorted(shapes)
    sizes = {n: math.prod(shapes[n]) * dtypes[n].size for n in names}
    lines = result.stdout.splitlines()
    assert lines[0] == (f"checkpoint {prefix} (TensorFlow checkpoint): {len(names)} tensors, "
                        f"{format_bytes(sum(sizes.values()))}")
    assert lines[1].split() == ["name", "shape", "dtype", "bytes", "size", "roles"]
    rows = lines[3:3 + len(names)]
    for name, row in zip(names, rows):
        shape = "[" + ", ".join(str(d) for d in shapes[name]) + "]"
        expected = [*shape.split(), dtypes[name].name, str(sizes[name]), *format_bytes(sizes[name]).split()]
        assert row.startswith(name + " "), row
        assert row[len(name):].split()[:len(expected)] == expected
    assert lines[3 + len(names)] == ""
    assert lines[4 + len(names)].split() == ["scope", "tensors", "bytes", "size"]
    assert lines[-1].startswith("looks like optimizer state")


def test_select_explain_json_carries_the_explanation(saved_model, run_cli):
    built, prefix = saved_model
    table = run_cli("select", "--graph", prefix + ".meta", "trainable() - slots()", "--explain")
    as_json = run_cli("select", "--graph", prefix + ".meta", "trainable() - slots()", "--explain", "--json")
    assert as_json.returncode == table.returncode == 0
    explanation = json.loads(as_json.stdout)["explain"]
    assert explanation == table.stdout.split("\n\n")[0].splitlines()
    assert explanation[0].startswith("trainable() - slots()")


def test_graph_takes_only_a_graph(saved_model, run_cli):
    _, prefix = saved_model
    directory = prefix.rsplit("/", 1)[0]
    for given, cause in [
        (directory, f"'{directory}' is a directory, not a MetaGraph file; pass --graph {prefix}.meta "
                    f"(or --checkpoint {directory} for names, shapes and dtypes only)"),
        (prefix, f"'{prefix}' is a checkpoint, not a MetaGraph file; pass --graph {prefix}.meta "
                 f"(or --checkpoint {prefix} for names, shapes and dtypes only)"),
    ]:
        result = run_cli("select", "--graph", given, "trainable()")
        assert result.returncode == 2
        assert result.stdout == ""
        assert result.stderr.splitlines()[-1] == f"Error: Invalid value for '--graph': {cause}"


def test_an_empty_selection_names_the_flag_that_allows_it(saved_model, run_cli):
    _, prefix = saved_model
    refused = run_cli("select", "--graph", prefix + ".meta", "scope('nowhere')")
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1] == "Pass --allow-empty (or use nothing()) if an empty selection is intended."
    allowed = run_cli("select", "--graph", prefix + ".meta", "scope('nowhere')", "--allow-empty")
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout.splitlines()[-1].startswith("0 of ")


def test_commands_are_quiet_on_stderr_when_they_succeed(saved_model, tmp_path):
    """A real process: no TensorFlow log lines, no Python warning source lines."""
    _, prefix = saved_model
    commands = [
        ["inspect", prefix],
        ["select", "--graph", prefix + ".meta", "trainable()"],
        ["plan", "--graph", prefix + ".meta", "--save", "everything()", "--checkpoint", prefix],
        ["slim", prefix, "--keep", "~slots()", "-o", str(tmp_path / "slim" / "model")],
        ["convert", prefix, str(tmp_path / "model.npz")],
    ]
    for command in commands:
        result = subprocess.run([sys.executable, "-m", "subsetsaver", *command], capture_output=True, text=True,
                                timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"})
        assert result.returncode == 0, (command, result.stderr)
        assert result.stderr == "", (command, result.stderr)


def test_writing_commands_refuse_to_replace_without_force(saved_model, tmp_path, run_cli):
    _, prefix = saved_model
    out = tmp_path / "new" / "dir" / "model.npz"
    assert run_cli("convert", prefix, str(out)).returncode == 0  # missing directories are created
    again = run_cli("convert", prefix, str(out))
    assert again.returncode == 2
    assert again.stderr.strip() == f"subsetsaver: error: checkpoint '{out}' already exists ({out}); pass --force to replace it"
    assert run_cli("convert", prefix, str(out), "--force").returncode == 0
    slim_out = tmp_path / "slim" / "model"
    assert run_cli("slim", prefix, "--keep", "trainable()", "-o", str(slim_out)).returncode == 0
    again = run_cli("slim", prefix, "--keep", "trainable()", "-o", str(slim_out))
    assert again.returncode == 2
    assert again.stderr.strip() == (f"subsetsaver: error: checkpoint '{slim_out}' already exists "
                                    f"({slim_out}.data-00000-of-00001); pass --force to replace it")
