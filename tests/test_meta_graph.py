"""MetaGraph files read without TensorFlow give the live graph's answers.

``formats/tf/meta_graph.py`` decodes a ``.meta`` file by hand; ``catalog/meta_source.py`` builds the
catalog and the same op-graph view a live graph gives. Here: the decoded messages equal
TensorFlow's own parse; the op graph of a file equals the op graph of its live graph; every
answer (catalog records, roles, selections, audit findings) from the ``.meta`` file of every graph
of the test corpus, computed in a process where ``import tensorflow`` fails, equals the answer
from the live graph; and ``select``, ``plan --checkpoint``, ``audit`` and ``draw`` run on a
``.meta`` file in such a process, with the answers the live graph gives.
"""

import json
import os
import subprocess
import sys
import textwrap

import graphs
import numpy as np
import pytest
import tensorflow as tf
from cli_children import CHILD_PATH
from tensorflow.core.framework import variable_pb2

import subsetsaver as ss
from subsetsaver import catalog
from subsetsaver.audit import audit
from subsetsaver.catalog.op_graph import OpGraph
from subsetsaver.formats.tf import meta_graph

v1 = tf.compat.v1
TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)

# The questions asked of each graph, by the live process and by the process without TensorFlow.
ANSWERS = textwrap.dedent("""
    import subsetsaver as ss
    from subsetsaver import catalog
    from subsetsaver.audit import audit

    SELECTIONS = ["trainable()", "bn_stats()", "slots()", "averages()", "global_step()", "local()",
                  "everything() - slots()", "trainable() | bn_stats()", "collection('model_variables')",
                  "name('**/moving_*')", "scope('conv_1')"]
    AUDITS = ["trainable()", "trainable() | bn_stats()", "everything() - slots()", "trainable() | slots()",
              "everything()"]


    def answers(source):
        cat = catalog.load(source)
        roles = cat.roles
        records = [{"name": r.name, "shape": list(r.shape), "dtype": r.dtype, "nbytes": r.nbytes,
                    "collections": sorted(r.collections), "trainable": r.trainable, "roles": sorted(r.roles),
                    "slot_of": r.slot_of, "average_of": r.average_of, "parts": list(r.parts)}
                   for r in cat.records]
        train_ops = cat.op_collection("train_op")
        found = {
            "records": records,
            "by_role": {role: sorted(names) for role, names in roles.by_role.items()},
            "slot_of": roles.slot_of,
            "average_of": roles.average_of,
            "training_updates": sorted(roles.training_updates),
            "train_ops": train_ops,
            "selections": {text: ss.parse(text).names(cat, allow_empty=True) for text in SELECTIONS},
            "audits": {text: [f.to_json() for f in audit(ss.parse(text), cat)] for text in AUDITS},
        }
        if train_ops and all(key in cat.op_graph.type for key in train_ops):
            found["audit_fetching_train_op"] = [f.to_json() for f in audit(ss.trainable(), cat, fetches=train_ops)]
        return found
""")

# graph id -> the builder call (tf_keras graphs need TF_USE_LEGACY_KERAS=1 and graph mode)
SMALL_CNN = "input_hw=8, channels=(4, 8), fc_units=16"
CORPUS = {
    **{f"mnist-{name}": f"graphs.mnist_cnn(optimizer={name!r}, {SMALL_CNN})" for name in graphs.all_optimizers()},
    "mnist-reference-cond-v1": f"graphs.mnist_cnn(resource=False, {SMALL_CNN})",
    "mnist-no-bn-updates": f"graphs.mnist_cnn(batch_norm_updates=False, {SMALL_CNN})",
    "fused-bn-resource": "graphs.fused_bn_model()",
    "fused-bn-reference": "graphs.fused_bn_model(resource=False)",
    "fused-bn-inference": "graphs.fused_bn_model(training=False)",
    "fused-bn-unwired": "graphs.fused_bn_model(wire_updates=False)",
    "ema-resource": "graphs.ema_of_weights_model()",
    "ema-reference": "graphs.ema_of_weights_model(resource=False)",
    "partitioned-resource": "graphs.partitioned_model()",
    "partitioned-reference": "graphs.partitioned_model(resource=False)",
    "layers-bn": "graphs.layers_bn_model()",
    "layers-bn-fused": "graphs.layers_bn_model(fused=True)",
    "tf-keras-bn": "graphs.tf_keras_bn_model()",
    "bert-adamw-resource": "graphs.bert_classifier(optimizer='adamw')",
    "bert-lamb-reference": "graphs.bert_classifier(optimizer='lamb', resource=False)",
    "adafactor-resource": "graphs.adafactor_transformer()",
    "adafactor-reference": "graphs.adafactor_transformer(resource=False)",
    "group-norm-lamb": "graphs.group_norm_cnn()",
    "group-norm-adam-reference": "graphs.group_norm_cnn(optimizer='adam', resource=False)",
    "accumulating-resource": "graphs.accumulating_cnn()",
    "accumulating-reference": "graphs.accumulating_cnn(resource=False)",
    "loss-scaled-cond-v2": "graphs.loss_scaled_model(resource=True, cond_v2=True)",
    "loss-scaled-cond-v1": "graphs.loss_scaled_model(resource=False, cond_v2=False)",
    "keras-small-adam": "graphs.keras_application(optimizer='adam', application='small')",
    "keras-small-v1-momentum": "graphs.keras_application(optimizer='v1_momentum', application='small')",
    "keras-small-loss-scale": "graphs.keras_application(optimizer='adam', application='small', loss_scale=True)",
}

LIVE = textwrap.dedent("""
    import json, os, sys, warnings
    sys.path[:0] = [os.getcwd()]
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    import graphs
    warnings.simplefilter("ignore")
    directory, corpus = sys.argv[1], json.loads(sys.argv[2])
    report = {}
    for key, call in corpus.items():
        built = eval(call)
        tf.compat.v1.train.export_meta_graph(os.path.join(directory, key + ".meta"), graph=built.graph)
        report[key] = answers(built.graph)
    print("REPORT " + json.dumps(report))
""")

WITHOUT_TENSORFLOW = textwrap.dedent("""
    import json, os, sys, warnings
    sys.modules["tensorflow"] = None
    warnings.simplefilter("ignore")
    directory, keys = sys.argv[1], json.loads(sys.argv[2])
    report = {key: answers(os.path.join(directory, key + ".meta")) for key in keys}
    report["tensorflow_loaded"] = sys.modules.get("tensorflow") is not None
    print("REPORT " + json.dumps(report))
""")


def run_child(script, *args, legacy_keras=False):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT}
    if legacy_keras:
        env["TF_USE_LEGACY_KERAS"] = "1"
    done = subprocess.run([sys.executable, "-c", script, *args], cwd=TESTS, env=env, capture_output=True,
                          text=True, timeout=1200)
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("REPORT "):])


def test_every_corpus_graph_gives_the_same_answers_from_its_meta_file_without_tensorflow(tmp_path):
    live = run_child(ANSWERS + LIVE, str(tmp_path), json.dumps(CORPUS), legacy_keras=True)
    from_files = run_child(ANSWERS + WITHOUT_TENSORFLOW, str(tmp_path), json.dumps(list(CORPUS)))
    assert from_files.pop("tensorflow_loaded") is False
    assert sorted(from_files) == sorted(CORPUS)
    for key in CORPUS:
        assert from_files[key] == live[key], key
    # the corpus exercises what it claims: partitions, references and resources, bodies of functions,
    # statistics, moving averages, slots, loss scales, and a training op to fetch
    everything = [record for answer in live.values() for record in answer["records"]]
    assert any(record["parts"] for record in everything)
    for role in ("bn_stat", "average", "slot", "optimizer", "loss_scale", "global_step"):
        assert any(answer["by_role"][role] for answer in live.values()), role
    assert any(answer["audits"]["trainable()"] for answer in live.values())
    assert any("audit_fetching_train_op" in answer for answer in live.values())
    assert any(os.path.getsize(tmp_path / f"{key}.meta") and _has_functions(tmp_path / f"{key}.meta")
               for key in CORPUS)


def _has_functions(path):
    return bool(meta_graph.read_meta_graph(path.read_bytes()).graph_def.library.function)


def _exported(built):
    with built.graph.as_default():
        return v1.train.export_meta_graph()


@pytest.mark.parametrize("builder", [
    lambda: graphs.loss_scaled_model(resource=True, cond_v2=True),  # cond v2: If and its branch functions
    lambda: graphs.mnist_cnn(resource=False, input_hw=8, channels=(4, 8), fc_units=16),  # Switch/Merge, references
    lambda: graphs.partitioned_model(),
], ids=["cond-v2", "cond-v1-reference", "partitioned"])
def test_the_decoded_file_and_its_op_graph_equal_tensorflows(builder):
    exported = _exported(builder())
    decoded = meta_graph.read_meta_graph(exported.SerializeToString())
    assert [(n.name, n.op, list(n.input), n.device) for n in decoded.graph_def.node] == \
        [(n.name, n.op, list(n.input), n.device) for n in exported.graph_def.node]
    for mine, theirs in zip(decoded.graph_def.node, exported.graph_def.node):
        assert sorted(mine.attr) == sorted(theirs.attr)
        for key, value in theirs.attr.items():
            kind = value.WhichOneof("value")
            assert mine.attr[key].HasField(kind), (mine.name, key)
            if kind in ("s", "i", "b", "type", "f"):
                assert getattr(mine.attr[key], kind) == getattr(value, kind)
            elif kind == "shape":
                assert mine.attr[key].shape.dim == [d.size for d in value.shape.dim]
                assert mine.attr[key].shape.unknown_rank == value.shape.unknown_rank
            elif kind == "func":
                assert mine.attr[key].func.name == value.func.name
            elif kind == "list":
                assert mine.attr[key].list.type == list(value.list.type)
                assert mine.attr[key].list.i == list(value.list.i)
                assert [f.name for f in mine.attr[key].list.func] == [f.name for f in value.list.func]
    assert sorted(decoded.op_defs) == sorted(op.name for op in exported.meta_info_def.stripped_op_list.op)
    for op in exported.meta_info_def.stripped_op_list.op:
        assert [(a.name, a.type, a.is_ref) for a in decoded.op_defs[op.name].input_arg] == \
            [(a.name, a.type, a.is_ref) for a in op.input_arg]
        assert [(a.name, a.type) for a in decoded.op_defs[op.name].attr] == [(a.name, a.type) for a in op.attr]
    assert sorted(decoded.collections) == sorted(exported.collection_def)
    for key in meta_graph.VARIABLE_COLLECTIONS & set(exported.collection_def):
        theirs = [variable_pb2.VariableDef.FromString(raw) for raw in exported.collection_def[key].bytes_list.value]
        assert [(d.variable_name, d.initializer_name, d.trainable, d.is_resource)
                for d in decoded.variable_defs(key)] == \
            [(d.variable_name, d.initializer_name, d.trainable, d.is_resource) for d in theirs]
    mine, theirs = OpGraph(decoded.graph_def), OpGraph(exported.graph_def)
    assert mine.type == theirs.type
    assert mine.inputs == theirs.inputs
    assert mine.control_inputs == theirs.control_inputs
    assert mine.returns == theirs.returns


def test_a_file_that_is_not_a_meta_graph_is_refused_with_its_cause(tmp_path):
    path = tmp_path / "model.meta"
    path.write_bytes(b"\x0a\x05\x0a\x03abc\x12\x80")  # a MetaInfoDef, then a GraphDef cut in its length
    with pytest.raises(ss.CorruptCheckpointError) as error:
        catalog.load(str(path))
    assert str(error.value) == (
        f"'{path}' is not a readable MetaGraph file (it does not parse as a MetaGraphDef: a varint runs past "
        "the end); pass the .meta file that tf.compat.v1.train.Saver.save wrote"
    )


COMMANDS = textwrap.dedent("""
    import json, sys
    sys.modules["tensorflow"] = None
    from cli_children import run_commands
    results = run_commands(json.loads(sys.argv[1]))
    print(json.dumps({"results": results, "tensorflow_loaded": sys.modules.get("tensorflow") is not None}))
""")


def test_graph_commands_on_a_meta_file_run_without_tensorflow(tmp_path):
    built = graphs.mnist_cnn(input_hw=8, channels=(4, 8), fc_units=16)
    graph = built.graph
    with graph.as_default():
        saver = v1.train.Saver()
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            prefix = saver.save(sess, str(tmp_path / "model"), global_step=3)
    meta = prefix + ".meta"
    chosen = "trainable() | bn_stats()"
    commands = [
        ["select", "--graph", meta, chosen, "--json"],
        ["plan", "--graph", meta, "--save", chosen, "--checkpoint", prefix, "--json"],
        ["plan", "--graph", meta, "--save", "everything()", "--remap", "block_1/=conv_1/", "--checkpoint", prefix,
         "--json"],
        ["audit", "--graph", meta, "--save", "trainable()", "--json"],
        ["draw", "--graph", meta, "--save", chosen, "--tree", "-o", str(tmp_path / "plan.dot")],
    ]
    child = subprocess.run([sys.executable, "-c", COMMANDS, json.dumps(commands)], capture_output=True, text=True,
                           timeout=600, env={**os.environ, "PYTHONPATH": CHILD_PATH})
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout)
    assert report["tensorflow_loaded"] is False
    codes = [(result["args"][0], result["code"]) for result in report["results"]]
    assert codes == [("select", 0), ("plan", 0), ("plan", 1), ("audit", 1), ("draw", 0)], report
    selected, planned, remapped, audited, _drawn = (result["out"] for result in report["results"])

    selector = ss.parse(chosen)
    assert [v["name"] for v in json.loads(selected)["variables"]] == selector.names(graph)
    live_plan = ss.plan(selector, graph)
    planned = json.loads(planned)
    assert [v["name"] for v in planned["saved"]] == list(live_plan.saved_names)
    assert [v["name"] for v in planned["initialized"]] == list(live_plan.rest_names)
    sizes = live_plan.sizes
    assert planned["sizes"]["data_bytes"] == sizes.data_bytes == os.path.getsize(
        prefix + ".data-00000-of-00001") - _unsaved_bytes(prefix, live_plan)
    assert (planned["sizes"]["saved_bytes"], planned["sizes"]["index_bytes"],
            planned["sizes"]["full_checkpoint_bytes"]) == (sizes.saved_bytes, sizes.index_bytes,
                                                           sizes.full_checkpoint_bytes)
    live_report = live_plan.check(prefix)
    assert planned["check"]["ok"] is live_report.ok is True
    assert [(p["kind"], p["checkpoint_name"]) for p in planned["check"]["problems"]] == \
        [(p.kind, p.checkpoint_name) for p in live_report.problems]
    assert {p["kind"] for p in planned["check"]["problems"]} == {"unexpected"}  # the slots it leaves out
    remapped = json.loads(remapped)
    live_check = ss.plan(ss.everything(), graph, remap={"block_1/": "conv_1/"}).check(prefix)
    assert [(p["kind"], p["name"], p["checkpoint_name"], p["nearest"]) for p in remapped["check"]["problems"]] == \
        [(p.kind, p.name, p.checkpoint_name, p.nearest) for p in live_check.problems]
    assert remapped["check"]["remap_suggestion"] == live_check.remap
    assert remapped["check"]["ok"] is live_check.ok is False
    assert json.loads(audited)["findings"] == [f.to_json() for f in audit(ss.trainable(), graph)]
    assert json.loads(audited)["counts"]["error"] == 2
    ss.draw_plan(live_plan, str(tmp_path / "live.dot"))
    drawn = (tmp_path / "plan.dot").read_text()
    assert drawn == (tmp_path / "live.dot").read_text() and "conv_1" in drawn


def _unsaved_bytes(prefix, plan):
    """Bytes of the full checkpoint's tensors that ``plan`` does not save (the checkpoint holds all)."""
    reader = tf.train.load_checkpoint(prefix)
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    return sum(int(np.prod(shapes[n])) * dtypes[n].size for n in shapes if n not in plan.saved_names)
