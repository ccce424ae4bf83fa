"""What a plan reads once and builds once: the checkpoint index its restores check, the ops they run,
the audit it runs when it is built, the catalog a selector resolves against."""

import os
import re
import warnings

import graphs
import numpy as np
import pytest
import tensorflow as tf
from glob_cases import reference_captures

import subsetsaver as ss
from subsetsaver import catalog as catalog_module
from subsetsaver.audit import audit, audit_errors
from subsetsaver.errors import CorruptCheckpointError, UninitializedVariablesError
from subsetsaver.planning import plan, tf_backend
from subsetsaver.selectors.patterns import glob_selector, regex_selector

v1 = tf.compat.v1
SEED_SELECTOR = ss.trainable() | ss.scope("conv_1/bn") | ss.scope("conv_2/bn")


def mlp(hidden=3, resource=True):
    """x -> dense (w, b) -> out (w, b), Momentum, a global step."""
    graph = tf.Graph()
    with graph.as_default(), v1.variable_scope("", use_resource=resource):
        x = v1.placeholder(tf.float32, [None, 4], name="x")
        w1 = v1.get_variable("dense/w", [4, hidden])
        b1 = v1.get_variable("dense/b", [hidden])
        w2 = v1.get_variable("out/w", [hidden, 2])
        b2 = v1.get_variable("out/b", [2])
        loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2))
        step = v1.train.get_or_create_global_step()
        train = v1.train.MomentumOptimizer(0.1, 0.9).minimize(loss, global_step=step)
    return graph, {"x": x, "train": train}


def saved_checkpoint(path, hidden=3):
    graph, _ = mlp(hidden)
    the_plan = plan(ss.trainable(), graph)
    with v1.Session(graph=graph) as sess:
        the_plan.restore_or_initialize(sess, None)
        return the_plan, the_plan.save(sess, str(path), write_meta_graph=False)


@pytest.fixture
def index_reads(monkeypatch):
    """The prefixes whose index the plan's backend read, in order."""
    reads = []
    read = tf_backend.checkpoint_contents

    def counting(prefix):
        reads.append(prefix)
        return read(prefix)

    monkeypatch.setattr(tf_backend, "checkpoint_contents", counting)
    return reads


# -- the checkpoint index ---------------------------------------------------------------


def test_repeated_restores_read_the_index_once_and_grow_no_graph(tmp_path, index_reads):
    graph, tensors = mlp()
    the_plan = plan(ss.trainable(), graph, on_mismatch="initialize")
    with v1.Session(graph=graph) as sess:
        the_plan.restore_or_initialize(sess, None)
        prefix = the_plan.save(sess, str(tmp_path / "model"), write_meta_graph=False)
        expected = sess.run(the_plan.saved)
        count = len(graph.get_operations())
        for _ in range(20):
            sess.run(tensors["train"], {tensors["x"]: np.ones((2, 4), np.float32)})
            report = the_plan.restore_or_initialize(sess, prefix)
            assert report.checkpoint == prefix and report.mismatched == ()
            assert all(np.array_equal(a, b) for a, b in zip(expected, sess.run(the_plan.saved)))
        for _ in range(5):
            assert the_plan.check(prefix).ok
        assert len(graph.get_operations()) == count
    assert index_reads == [prefix]


def test_a_checkpoint_rewritten_under_the_same_prefix_is_read_again(tmp_path, index_reads):
    prefix = str(tmp_path / "model")
    narrow, _ = saved_checkpoint(prefix, hidden=3)
    wide, _ = saved_checkpoint(prefix + "-wide", hidden=5)
    assert narrow.check(prefix).ok
    assert [p.name for p in wide.check(prefix).blocking] == ["dense/w", "dense/b", "out/w"]
    assert index_reads == [prefix]

    # Saved again under the same prefix: the staged save links new files under the old names.
    saved_checkpoint(prefix, hidden=5)
    assert wide.check(prefix).ok
    assert [p.name for p in narrow.check(prefix).blocking] == ["dense/w", "dense/b", "out/w"]
    assert index_reads == [prefix, prefix]
    graph = wide.graph
    with v1.Session(graph=graph) as sess:
        assert wide.restore_or_initialize(sess, prefix).checkpoint == prefix


def test_an_index_rewritten_in_place_is_read_again(tmp_path, index_reads):
    prefix = str(tmp_path / "model")
    narrow, _ = saved_checkpoint(prefix, hidden=3)
    _, other = saved_checkpoint(tmp_path / "other", hidden=5)
    assert narrow.check(prefix).ok
    inode = os.stat(prefix + ".index").st_ino
    for suffix in (".data-00000-of-00001", ".index"):  # the same files, new bytes
        with open(other + suffix, "rb") as source, open(prefix + suffix, "r+b") as target:
            target.truncate(0)
            target.write(source.read())
        later = os.stat(prefix + suffix).st_mtime_ns + 1_000_000_000
        os.utime(prefix + suffix, ns=(later, later))  # the clock of a later write, even on a coarse file system
    assert os.stat(prefix + ".index").st_ino == inode
    assert [p.kind for p in narrow.check(prefix).blocking] == ["shape", "shape", "shape"]
    assert index_reads == [prefix, prefix]


def test_a_data_file_that_goes_after_a_check_is_named_as_before(tmp_path):
    prefix = str(tmp_path / "model")
    the_plan, _ = saved_checkpoint(prefix)
    assert the_plan.check(prefix).ok
    (data,) = [name for name in os.listdir(tmp_path) if name.startswith("model.data-")]
    os.remove(tmp_path / data)
    with pytest.raises(CorruptCheckpointError) as error:
        the_plan.check(prefix)
    assert str(error.value) == (f"checkpoint '{prefix}' is incomplete: {tmp_path / data} missing; "
                                "copy every file of the checkpoint")


def test_the_contents_a_backend_returns_are_its_callers_to_change(tmp_path):
    prefix = str(tmp_path / "model")
    the_plan, _ = saved_checkpoint(prefix)
    contents = the_plan.backend.contents(prefix)
    contents.clear()
    assert the_plan.backend.contents(prefix)["dense/w"] == ((4, 3), "float32")


# -- what a restore checks ---------------------------------------------------------------


def variable_that_its_initializer_leaves_uninitialized():
    """A resource variable whose VariableDef names a NoOp as its initializer."""
    from tensorflow.core.framework import variable_pb2

    graph = tf.Graph()
    with graph.as_default():
        good = v1.Variable(tf.zeros([2]), name="good", use_resource=True)
        handle = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[2], shared_name="odd", name="odd")
        tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.float32, name="odd/Read/ReadVariableOp")
        tf.no_op(name="odd/initialize_nothing")
        odd = v1.Variable(variable_def=variable_pb2.VariableDef(
            variable_name="odd:0", initializer_name="odd/initialize_nothing",
            snapshot_name="odd/Read/ReadVariableOp:0", is_resource=True, trainable=False))
        graph.add_to_collection(v1.GraphKeys.GLOBAL_VARIABLES, odd)
    return graph, good, odd


def test_an_initializer_that_initializes_nothing_is_still_caught():
    graph, _good, _odd = variable_that_its_initializer_leaves_uninitialized()
    the_plan = plan(ss.trainable(), graph)
    with v1.Session(graph=graph) as sess:
        with pytest.raises(UninitializedVariablesError) as error:
            the_plan.restore_or_initialize(sess, None)
    assert str(error.value) == "after initializing, 1 variable is still uninitialized: odd"
    assert error.value.names == ("odd",)


@pytest.mark.parametrize("resource", [True, False], ids=["resource", "reference"])
@pytest.mark.parametrize("finalized", [False, True], ids=["open", "finalized"])
def test_a_save_names_every_uninitialized_variable(tmp_path, resource, finalized):
    graph, _ = mlp(resource=resource)
    the_plan = plan(ss.scope("out"), graph)
    if finalized:
        graph.finalize()
    count = len(graph.get_operations())
    with v1.Session(graph=graph) as sess:
        with pytest.raises(UninitializedVariablesError) as error:
            the_plan.save(sess, str(tmp_path / "model"))
    assert str(error.value) == ("cannot save: 4 variables not initialized: out/w, out/b, out/w/Momentum, "
                                "out/b/Momentum; run plan.restore_or_initialize(sess, None) first")
    assert finalized or not resource or len(graph.get_operations()) == count  # TF's own flags are reused


@pytest.mark.filterwarnings("ignore::subsetsaver.errors.SubsetSaverWarning")  # conv_1/v00000 is read, not saved
def test_a_graph_of_variables_without_flags_names_them_too(tmp_path):
    graph = graphs.wide_graph(num_variables=12).graph  # variables from VariableDefs: no IsInitialized op
    the_plan = plan(ss.scope("conv_10"), graph)
    with v1.Session(graph=graph) as sess:
        with pytest.raises(UninitializedVariablesError) as error:
            the_plan.save(sess, str(tmp_path / "model"))
        assert error.value.names == the_plan.saved_names
        the_plan.restore_or_initialize(sess, None)
        assert the_plan.restore_or_initialize(sess, the_plan.save(sess, str(tmp_path / "model"))).restored


@pytest.mark.parametrize("resource", [True, False], ids=["resource", "reference"])
def test_a_plan_adds_two_ops_to_what_its_saver_adds(resource):
    built, twin = graphs.mnist_cnn(resource=resource), graphs.mnist_cnn(resource=resource)
    before = len(built.graph.get_operations())
    the_plan = plan(SEED_SELECTOR, built.graph)
    before_twin = len(twin.graph.get_operations())
    with twin.graph.as_default():
        v1.train.Saver(SEED_SELECTOR.resolve(twin.graph))
    added, saver_added = len(built.graph.get_operations()) - before, len(twin.graph.get_operations()) - before_twin
    snapshot = [op for op in built.graph.get_operations() if op.name.startswith("subsetsaver_snapshot/")]
    assert added - saver_added - len(snapshot) == 2  # initialize_rest, initialize_all
    # saves with blocking=False: a queue, its put and its take for the one run of 32 MB, one op putting
    # every run, and a copy of each reference variable (its reads share the buffer training changes)
    assert len(snapshot) == 3 + 1 + (0 if resource else len(the_plan.saved))


# -- the audit at build -------------------------------------------------------------------


def test_a_plan_that_leaves_out_nothing_inference_reads_never_serializes_the_graph(monkeypatch):
    built = graphs.mnist_cnn()

    def refuse(*args, **kwargs):
        raise AssertionError("the graph was serialized")

    monkeypatch.setattr(built.graph, "as_graph_def", refuse)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan(SEED_SELECTOR, built.graph)
    monkeypatch.undo()
    with pytest.warns(ss.SubsetSaverWarning) as caught:
        plan(ss.trainable(), built.graph)
    assert [str(w.message).split(" keeps ")[0] for w in caught] == ["unsaved-state: conv_1/bn",
                                                                    "unsaved-state: conv_2/bn"]


CORPUS = {
    "mnist adam": lambda: graphs.mnist_cnn(channels=(4, 8), fc_units=16, input_hw=8),
    "mnist momentum, reference": lambda: graphs.mnist_cnn(optimizer="momentum", resource=False, channels=(4, 8),
                                                          fc_units=16, input_hw=8),
    "fused batch norm": graphs.fused_bn_model,
    "moving averages of weights": graphs.ema_of_weights_model,
    "partitioned": graphs.partitioned_model,
    "bert": graphs.bert_classifier,
    "accumulating": lambda: graphs.accumulating_cnn(resource=False),
    "loss scaled, cond v2": lambda: graphs.loss_scaled_model(cond_v2=True),
    "wide": lambda: graphs.wide_graph(num_variables=60),
}


@pytest.mark.parametrize("builder", sorted(CORPUS))
def test_the_errors_at_build_are_the_audits_and_the_nearby_ops_never_miss_a_reader(builder):
    catalog = catalog_module.load(CORPUS[builder]().graph)
    flow = catalog_module.dataflow(catalog)
    for name in catalog.ordered_names:
        if not catalog_module.may_be_read_forward(catalog, [name]):
            assert flow.forward_reader(name) is None, name
    for selector in (ss.trainable(), ss.trainable() | ss.bn_stats(), ss.everything() - ss.slots(), ss.everything()):
        errors = [finding for finding in audit(selector, catalog) if finding.severity == "error"]
        assert audit_errors(selector, catalog) == errors


# -- selectors ------------------------------------------------------------------------------

NAMES = ["conv_1/w", "conv_1/w/Adam", "conv_1/w/Adam_1", "conv_10/b", "opt/beta1_power", "Adam", "a.b/c", "ünï/çødé",
         "x\ny", "conv_1", "conv_1/"]


@pytest.mark.parametrize("pattern", ["/Adam", "Adam", "conv_1", "^conv_1", "^conv_1/", "ü", "", "^", "/", "w/Adam_1",
                                     "^Adam", "a.b", "y$", r"\d", "^x\ny"])
def test_a_regex_selects_what_re_search_finds(pattern):
    assert regex_selector(pattern)(NAMES) == [name for name in NAMES if re.search(pattern, name)]


@pytest.mark.parametrize("glob", ["conv_1/w", "Adam", "conv_1/**", "**/Adam*", "a.b/c", "x\ny", "[!c]*", "conv_1?"])
def test_a_glob_selects_what_the_reference_matcher_accepts(glob):
    assert sorted(glob_selector(glob)(frozenset(NAMES))) == sorted(n for n in NAMES
                                                                   if reference_captures(glob, n) is not None)


def test_a_scope_and_a_catalog_reread_after_the_graph_changes():
    built = graphs.wide_graph(num_variables=40)
    graph = built.graph
    first = ss.scope("conv_1").names(graph)
    assert first == built.expected["scope:conv_1"]
    with graph.as_default():
        v1.Variable(tf.zeros([1]), name="conv_1/late", use_resource=True)
    assert ss.scope("conv_1").names(graph) == first + ["conv_1/late"]
    catalog = catalog_module.load(graph)
    assert catalog.entry("conv_1/late").shape == (1,) and catalog.entry("conv_1/late").index == 40
    assert catalog.parts("conv_1/late") == ("conv_1/late",)
    with pytest.raises(KeyError):
        catalog.entry("conv_1/none")
