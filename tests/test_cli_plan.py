"""The ``plan`` and ``slim`` commands on real .meta files and checkpoints."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from click.testing import CliRunner

import subsetsaver as ss
from subsetsaver.cli import main
from subsetsaver.cli.plan_command import plan_command
from subsetsaver.cli.slim_command import slim_command
from subsetsaver.planning import plan

v1 = tf.compat.v1


def small_model(scope):
    graph = tf.Graph()
    with graph.as_default(), v1.variable_scope("", use_resource=True):
        v1.set_random_seed(0)
        w = v1.get_variable(f"{scope}/w", [4, 3])
        b = v1.get_variable(f"{scope}/b", [3])
        x = v1.placeholder(tf.float32, [None, 4], name="x")
        loss = tf.reduce_sum(tf.matmul(x, w) + b)
        with v1.variable_scope("opt"):
            v1.train.AdamOptimizer(0.1).minimize(loss, global_step=v1.train.get_or_create_global_step())
    return graph, x


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """``model`` and ``net``: a full checkpoint and a .meta each, the same model under two scopes."""
    directory = tmp_path_factory.mktemp("cli")
    values = {}
    for scope in ("model", "net"):
        graph, x = small_model(scope)
        the_plan = plan(ss.everything(), graph)
        with v1.Session(graph=graph) as sess:
            the_plan.restore_or_initialize(sess, None)
            sess.run(graph.get_operation_by_name("opt/Adam"), {x: np.ones((2, 4), np.float32)})
            the_plan.save(sess, str(directory / scope))
            values[scope] = dict(zip(the_plan.saved_names, sess.run(the_plan.saved)))
    return directory, values


def run(command, args):
    return CliRunner().invoke(command, [str(a) for a in args], catch_exceptions=False)


def test_plan_json_is_a_dry_run_with_exact_sizes(files):
    directory, _ = files
    result = run(plan_command, ["--graph", directory / "net.meta", "--save", "trainable()", "--json"])
    assert result.exit_code == 0
    out = json.loads(result.output)
    assert out["selector"] == "trainable()"
    assert [v["name"] for v in out["saved"]] == ["net/w", "net/b"]
    assert [v["checkpoint_name"] for v in out["saved"]] == ["net/w", "net/b"]
    assert [v["name"] for v in out["initialized"]] == [
        "opt/global_step", "opt/beta1_power", "opt/beta2_power",
        "opt/net/w/Adam", "opt/net/w/Adam_1", "opt/net/b/Adam", "opt/net/b/Adam_1",
    ]
    sizes = out["sizes"]
    assert (sizes["saved_bytes"], sizes["rest_bytes"], sizes["data_bytes"], sizes["data_files"]) == (60, 136, 60, 1)
    full_on_disk = os.path.getsize(directory / "net.data-00000-of-00001") + os.path.getsize(directory / "net.index")
    assert sizes["full_checkpoint_bytes"] == full_on_disk  # the .meta's own checkpoint was a full one
    assert out["check"] is None


def test_plan_check_exits_1_and_names_the_remap(files):
    directory, _ = files
    args = ["--graph", directory / "net.meta", "--save", "trainable()", "--checkpoint", directory / "model"]
    result = run(plan_command, args)
    assert result.exit_code == 1
    prefix = directory / "model"
    report = result.output.split("\n\n")[-1]
    assert report.splitlines()[:6] == [
        f"checkpoint '{prefix}' does not match the plan trainable(): 2 missing",
        "  missing: net/w, expected [4, 3] float32; nearest in the checkpoint: model/w",
        "  missing: net/b, expected [3] float32; nearest in the checkpoint: model/b",
        "the checkpoint was written by a plan with selector everything()",
        "Pass --remap model/=net/ to read each variable net/NAME from the checkpoint's model/NAME (the checkpoint holds 2 of the 2 missing variables that way).",
        "Pass --on-mismatch initialize to initialize these variables instead of restoring them.",
    ]
    assert run(plan_command, args + ["--on-mismatch", "initialize"]).exit_code == 0
    assert "a full Saver would write" in result.output

    result = run(plan_command, args + ["--remap", "model/=net/", "--json"])
    assert result.exit_code == 0
    check = json.loads(result.output)["check"]
    assert check["ok"] and check["checkpoint"] == str(prefix)
    assert [p["kind"] for p in check["problems"]] == ["unexpected"] * 7
    assert check["problems"][0] == {
        "kind": "unexpected", "name": "opt/beta1_power", "checkpoint_name": "opt/beta1_power",
        "expected_shape": None, "expected_dtype": None, "found_shape": [], "found_dtype": "float32", "nearest": None,
    }


def test_slim_command_writes_and_verifies(files, tmp_path):
    directory, values = files
    output = tmp_path / "slim" / "model"
    result = run(slim_command, [directory / "model", "--keep", "~slots()", "-o", output])
    assert result.exit_code == 0
    source_bytes = os.path.getsize(directory / "model.index") + os.path.getsize(directory / "model.data-00000-of-00001")
    output_bytes = os.path.getsize(f"{output}.index") + os.path.getsize(f"{output}.data-00000-of-00001")
    assert result.output.splitlines() == [
        "kept 3 tensors, dropped 6 (~slots())",
        f"{directory / 'model'}: {source_bytes} B -> {output}: {output_bytes} B "
        f"({source_bytes / output_bytes:.1f} times smaller); every kept tensor verified bit-exact",
    ]
    reader = tf.train.load_checkpoint(str(output))
    assert sorted(reader.get_variable_to_shape_map()) == ["model/b", "model/w", "opt/global_step"]
    for name in ("model/b", "model/w", "opt/global_step"):
        assert np.array_equal(reader.get_tensor(name), values["model"][name])

    result = run(slim_command, [directory / "model", "--keep", "trainable()", "--graph", directory / "model.meta",
                                "-o", output, "--force", "--json"])
    out = json.loads(result.output)
    # the replacement took the names of two shards (the second empty), which the old checkpoint did not use
    assert (out["kept"], out["verified"], out["data_files"]) == (["model/b", "model/w"], True, 2)


def test_bad_input_ends_in_one_line_and_exit_2(files, capsys, tmp_path):
    directory, _ = files
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--graph", str(directory / "net.meta"), "--save", "scope('nowhere')"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("subsetsaver: error: selector scope('nowhere') matches no variable.")
    with pytest.raises(SystemExit) as exit_:
        main(["slim", str(tmp_path / "absent"), "--keep", "trainable()", "-o", str(tmp_path / "out")])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        f"subsetsaver: error: no checkpoint at '{tmp_path}/absent' (expected '{tmp_path}/absent.index')\n"
    )
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--graph", str(directory / "net.meta"), "--save", "trainable()", "--remap", "model"])
    assert exit_.value.code == 2
    assert "'model' is not OLD=NEW, a scope or name on each side (e.g. model/=net/)" in capsys.readouterr().err
