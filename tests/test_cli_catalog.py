"""`subsetsaver inspect` and `subsetsaver select` through the real entry point."""

import json
import subprocess
import sys

import graphs
import pytest
import tensorflow as tf

from subsetsaver import catalog
from subsetsaver.cli import main

SMALL = dict(channels=(4, 8), fc_units=16)


@pytest.fixture
def run_cli(capsys):
    """Run the command in this process (as the console script does) and collect its output."""

    def run(*args):
        with pytest.raises(SystemExit) as stop:
            main(list(args))
        captured = capsys.readouterr()
        return subprocess.CompletedProcess(args, stop.value.code, captured.out, captured.err)

    return run


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
