"""`rewrite`, `diff` and `average` on real TensorFlow checkpoints, through the library and the command line."""

import io
import json
import os
import shutil
import sys

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import subsetsaver as ss
from subsetsaver.errors import CheckpointMismatchError, EmptySelectionError
from subsetsaver.formats import progress
from subsetsaver.planning import plan
from subsetsaver.tools.average import average
from subsetsaver.tools.diff import diff
from subsetsaver.tools.rewrite import parse_cast, rewrite

v1 = tf.compat.v1


def saved(prefix, values, *, resource=True):
    """A tf.compat.v1.train.Saver checkpoint holding exactly ``values`` (name -> array)."""
    graph = tf.Graph()
    with graph.as_default():
        for name, value in values.items():
            v1.get_variable(name, initializer=np.asarray(value), use_resource=resource)
        saver = v1.train.Saver()
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            return saver.save(session, str(prefix))


def tf_values(prefix) -> dict:
    """Every tensor of a checkpoint as TensorFlow's own reader reads it."""
    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def backbone_net(scope="backbone"):
    """A conv backbone with hand-written batch norm (moving statistics), a dense head, and Adam
    steps that train everything or only the head (the backbone frozen, its statistics too)."""
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(7)
        images = v1.placeholder(tf.float32, [None, 6, 6, 1], name="images")
        labels = v1.placeholder(tf.int64, [None], name="labels")
        with v1.variable_scope(scope):
            kernel = v1.get_variable("conv/w", [3, 3, 1, 4])
            features = tf.nn.conv2d(images, kernel, [1, 1, 1, 1], "SAME")
            beta = v1.get_variable("bn/beta", [4], initializer=v1.zeros_initializer())
            gamma = v1.get_variable("bn/gamma", [4], initializer=v1.ones_initializer())
            moving_mean = v1.get_variable("bn/moving_mean", [4], initializer=v1.zeros_initializer(), trainable=False)
            moving_var = v1.get_variable("bn/moving_variance", [4], initializer=v1.ones_initializer(),
                                         trainable=False)
            mean, variance = tf.nn.moments(features, [0, 1, 2])
            updates = [v1.assign(moving_mean, 0.9 * moving_mean + 0.1 * mean),
                       v1.assign(moving_var, 0.9 * moving_var + 0.1 * variance)]
            features = tf.nn.relu(tf.nn.batch_normalization(features, mean, variance, beta, gamma, 1e-3))
            pooled = tf.reduce_mean(features, [1, 2])
        with v1.variable_scope("head"):
            weights = v1.get_variable("dense/w", [4, 3])
            bias = v1.get_variable("dense/b", [3], initializer=v1.zeros_initializer())
            logits = tf.matmul(pooled, weights) + bias
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        step = v1.train.get_or_create_global_step()
        optimizer = v1.train.AdamOptimizer(0.05)
        with tf.control_dependencies(updates):
            train_all = optimizer.minimize(loss, global_step=step)
        train_head = optimizer.minimize(loss, global_step=step, var_list=[weights, bias])
        init = v1.global_variables_initializer()
        saver = v1.train.Saver()
    rng = np.random.default_rng(0)
    feed = {images: rng.normal(size=(8, 6, 6, 1)).astype(np.float32), labels: rng.integers(0, 3, 8)}
    return graph, init, saver, train_all, train_head, feed


@pytest.fixture(scope="module")
def fine_tune(tmp_path_factory):
    """A pretrained checkpoint (3 steps of everything) and a fine-tuned one (3 steps of the head)."""
    directory = tmp_path_factory.mktemp("fine_tune")
    graph, init, saver, train_all, train_head, feed = backbone_net()
    with v1.Session(graph=graph) as session:
        session.run(init)
        for _ in range(3):
            session.run(train_all, feed)
        pretrained = saver.save(session, str(directory / "pretrained" / "model"), global_step=3)
        for _ in range(3):
            session.run(train_head, feed)
        finetuned = saver.save(session, str(directory / "finetuned" / "model"), global_step=6)
    return pretrained, finetuned


# -- diff ---------------------------------------------------------------------------


def test_diff_of_a_frozen_backbone_fine_tune_says_the_backbone_is_unchanged(fine_tune, run_cli):
    pretrained, finetuned = fine_tune
    backbone = diff(pretrained, finetuned, keep="scope('backbone')")
    assert not backbone.different
    assert backbone.counts() == {"equal": 11}  # 3 trainable variables with Adam's two slots, 2 statistics
    head = diff(pretrained, finetuned, keep="scope('head')")
    assert head.different
    assert {t.name: t.status for t in head.tensors} == {
        "head/dense/b": "changed", "head/dense/b/Adam": "changed", "head/dense/b/Adam_1": "changed",
        "head/dense/w": "changed", "head/dense/w/Adam": "changed", "head/dense/w/Adam_1": "changed"}
    whole = diff(pretrained, os.path.dirname(finetuned))
    assert whole.by_scope() == {"backbone": {"equal": 11}, "(root)": {"changed": 3}, "head": {"changed": 6}}
    assert whole.by_role() == {
        "optimizer": {"changed": 2}, "slot": {"equal": 6, "changed": 6}, "global_step": {"changed": 1},
        "trainable": {"equal": 3, "changed": 2}, "bn_stat": {"equal": 2}}
    assert run_cli("diff", pretrained, finetuned, "--keep", "scope('backbone')").returncode == 0
    assert run_cli("diff", pretrained, finetuned, "--keep", "bn_stats()").returncode == 0
    assert run_cli("diff", pretrained, finetuned, "--keep", "scope('head')").returncode == 1


def test_diff_reports_every_kind_of_difference_in_one_table(tmp_path, run_cli):
    a = saved(tmp_path / "a" / "model", {
        "net/w": np.array([[1, 2], [3, 4]], np.float32), "net/b": np.array([0.5, 0.25], np.float32),
        "net/c": np.zeros(2, np.float32), "net/d": np.zeros(2, np.float32), "old": np.ones(1, np.float32),
        "global_step": np.int64(10)})
    b = saved(tmp_path / "b" / "model", {
        "net/w": np.array([[1, 2], [3, 4.5]], np.float32), "net/b": np.array([0.5, 0.25], np.float32),
        "net/c": np.zeros(3, np.float32), "net/d": np.zeros(2, np.float64), "new": np.ones(1, np.float32),
        "global_step": np.int64(11)})
    result = run_cli("diff", a, b)
    assert result.returncode == 1 and result.stderr == ""
    assert result.stdout == f"""A: {a}
B: {b}

name         status         shape       dtype               max abs  rel L2  beyond
-----------  -------------  ----------  ------------------  -------  ------  ------
global_step  changed        []          int64               1           0.1  100.0%
net/b        equal          [2]         float32             0             0    0.0%
net/c        shape differs  [2] vs [3]  float32             -             -       -
net/d        dtype differs  [2]         float32 vs float64  -             -       -
net/w        changed        [2, 2]      float32             0.5      0.0913   25.0%
new          only in B      [1]         float32             -             -       -
old          only in A      [1]         float32             -             -       -

scope   tensors  equal  changed  only in A  only in B  shape differs  dtype differs
------  -------  -----  -------  ---------  ---------  -------------  -------------
(root)        3      0        1          1          1              0              0
net           4      1        1          0          0              1              1

role         tensors  equal  changed  only in A  only in B  shape differs  dtype differs
-----------  -------  -----  -------  ---------  ---------  -------------  -------------
global_step        1      0        1          0          0              0              0
trainable          6      1        1          1          1              1              1

7 tensors: 1 equal, 2 changed, 1 only in A, 1 only in B, 1 shape differs, 1 dtype differs (atol 0, rtol 0): different
"""
    as_json = json.loads(run_cli("diff", a, b, "--keep", "name('net/*')", "--json").stdout)
    assert as_json == {
        "a": a, "b": b, "atol": 0.0, "rtol": 0.0, "different": True,
        "counts": {"equal": 1, "changed": 1, "shape": 1, "dtype": 1},
        "tensors": [
            {"name": "net/b", "a_name": "net/b", "status": "equal", "shape_a": [2], "shape_b": [2], "dtype_a": "float32",
             "dtype_b": "float32", "bytes": 8, "roles": ["trainable"], "max_abs": 0.0, "rel_l2": 0.0,
             "changed_fraction": 0.0},
            {"name": "net/c", "a_name": "net/c", "status": "shape", "shape_a": [2], "shape_b": [3],
             "dtype_a": "float32", "dtype_b": "float32", "bytes": 12, "roles": ["trainable"], "max_abs": None,
             "rel_l2": None, "changed_fraction": None},
            {"name": "net/d", "a_name": "net/d", "status": "dtype", "shape_a": [2], "shape_b": [2],
             "dtype_a": "float32", "dtype_b": "float64", "bytes": 16, "roles": ["trainable"], "max_abs": None,
             "rel_l2": None, "changed_fraction": None},
            {"name": "net/w", "a_name": "net/w", "status": "changed", "shape_a": [2, 2], "shape_b": [2, 2],
             "dtype_a": "float32", "dtype_b": "float32", "bytes": 16, "roles": ["trainable"], "max_abs": 0.5,
             "rel_l2": 0.5 / np.sqrt(30.0), "changed_fraction": 0.25},
        ],
        "scopes": [{"scope": "net", "counts": {"equal": 1, "changed": 1, "shape": 1, "dtype": 1}}],
        "roles": [{"role": "trainable", "counts": {"equal": 1, "changed": 1, "shape": 1, "dtype": 1}}],
    }
    same = run_cli("diff", a, a)
    assert same.returncode == 0
    assert same.stdout.splitlines()[-1] == "6 tensors: 6 equal (atol 0, rtol 0): no differences beyond the tolerances"


def test_tolerances_nan_and_integers(tmp_path):
    a = saved(tmp_path / "a" / "m", {"x": np.array([1.0, 2.0, np.nan, 4.0], np.float32),
                                     "big": np.array([2**53], np.int64), "flags": np.array([True, False])})
    b = saved(tmp_path / "b" / "m", {"x": np.array([1.0, 2.001, np.nan, 4.0], np.float32),
                                     "big": np.array([2**53 + 1], np.int64), "flags": np.array([True, False])})
    exact = {t.name: t for t in diff(a, b).tensors}
    assert exact["x"].status == "changed" and exact["x"].changed_fraction == 0.25
    assert exact["big"].status == "changed"  # float64 cannot tell them apart; the comparison does
    assert exact["flags"].status == "equal"  # NaN where the other has NaN counts as equal
    loose = diff(a, b, atol=0.01, keep="name('x')")
    assert [(t.status, t.changed_fraction) for t in loose.tensors] == [("close", 0.0)] and not loose.different
    assert diff(a, b, rtol=1e-3, keep="name('x')").tensors[0].status == "close"
    one_sided = saved(tmp_path / "c" / "m", {"x": np.array([1.0, 2.0, 3.0, 4.0], np.float32)})
    found = diff(a, one_sided, keep="name('x')").tensors[0]
    assert (found.status, found.max_abs, found.changed_fraction) == ("changed", np.inf, 0.25)
    with pytest.raises(ValueError, match=r"^tolerances must be 0 or more, got atol=-1, rtol=0.0$"):
        diff(a, b, atol=-1)
    with pytest.raises(EmptySelectionError, match=r"^scope\('nowhere'\) selects no tensor of '.*' or '.*'"):
        diff(a, b, keep="scope('nowhere')")


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_diff_shows_a_bar_over_the_bytes_compared_on_a_terminal_only(tmp_path, monkeypatch, capsys):
    values = {"x": np.arange(6, dtype=np.float32), "y": np.zeros(4, np.float64), "only_a": np.ones(3, np.int8)}
    a = saved(tmp_path / "a" / "m", values)
    b = saved(tmp_path / "b" / "m", {name: value for name, value in values.items() if name != "only_a"})
    diff(a, b)
    assert capsys.readouterr().err == ""  # piped: nothing
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(progress, "SHOWN_AFTER_SECONDS", 0)  # a long diff, as far as the bar knows
    monkeypatch.setattr(progress, "REFRESH_SECONDS", 0)  # every update drawn

    diff(a, b)
    quiet = terminal.getvalue()
    diff(a, b, progress=False)

    assert "diff m:" in quiet and "112/112 [" in quiet, quiet  # x and y on both sides: 2 x (24 + 32) bytes
    assert terminal.getvalue() == quiet


def test_diff_against_a_live_session_and_an_npz_file(fine_tune, tmp_path):
    pretrained, _ = fine_tune
    graph, init, saver, train_all, _, feed = backbone_net()
    ss.tools.convert.convert(pretrained, tmp_path / "pretrained.npz")
    with v1.Session(graph=graph) as session:
        saver.restore(session, pretrained)
        assert diff(session, pretrained).counts() == {"equal": 20}
        assert diff(pretrained, tmp_path / "pretrained.npz").counts() == {"equal": 20}
        session.run(train_all, feed)
        moved = diff(pretrained, session)
    assert moved.by_role()["bn_stat"] == {"changed": 2}
    assert moved.by_role()["trainable"] == {"changed": 5}
    assert moved.a == pretrained and moved.b == "session"


def test_diff_of_a_partitioned_variable_in_a_session_joins_its_parts(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        v1.get_variable("emb", [10, 3], partitioner=v1.fixed_size_partitioner(3),
                        initializer=v1.random_normal_initializer(seed=1))
        saver = v1.train.Saver()
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            prefix = saver.save(session, str(tmp_path / "model"))
            assert [(t.name, t.status) for t in diff(session, prefix).tensors] == [("emb", "equal")]
            (part_1,) = [v for v in v1.global_variables() if v.op.name == "emb/part_1"]
            session.run(part_1.assign_add(np.ones((3, 3), np.float32)))
            changed = diff(prefix, session).tensors[0]
    assert (changed.status, changed.changed_fraction) == ("changed", 0.3)


# -- rewrite ------------------------------------------------------------------------


def test_rewrite_after_a_scope_refactor_restores_into_the_new_graph(fine_tune, tmp_path, run_cli):
    _, finetuned = fine_tune
    output = tmp_path / "refactored" / "model"
    dry = run_cli("rewrite", finetuned, "-o", output, "--remap", "backbone/=encoder/", "--keep", "scope('backbone')",
                  "--dry-run")
    assert dry.returncode == 0 and not output.parent.exists()
    assert dry.stdout == """old                          new                         shape         dtype
---------------------------  --------------------------  ------------  -------
backbone/bn/beta             encoder/bn/beta             [4]           float32
backbone/bn/beta/Adam        encoder/bn/beta/Adam        [4]           float32
backbone/bn/beta/Adam_1      encoder/bn/beta/Adam_1      [4]           float32
backbone/bn/gamma            encoder/bn/gamma            [4]           float32
backbone/bn/gamma/Adam       encoder/bn/gamma/Adam       [4]           float32
backbone/bn/gamma/Adam_1     encoder/bn/gamma/Adam_1     [4]           float32
backbone/bn/moving_mean      encoder/bn/moving_mean      [4]           float32
backbone/bn/moving_variance  encoder/bn/moving_variance  [4]           float32
backbone/conv/w              encoder/conv/w              [3, 3, 1, 4]  float32
backbone/conv/w/Adam         encoder/conv/w/Adam         [3, 3, 1, 4]  float32
backbone/conv/w/Adam_1       encoder/conv/w/Adam_1       [3, 3, 1, 4]  float32

dry run: """ + f"{output} would hold 11 tensors (11 renamed, 0 cast, 9 dropped), 560 B; nothing written\n"

    as_json = json.loads(run_cli("rewrite", finetuned, "-o", output, "--keep", "name('head/dense/*') - slots()",
                                 "--remap", "head/dense/w=head/kernel", "--cast", "name('**/b')=float16", "--dry-run",
                                 "--json").stdout)
    assert as_json == {
        "source": finetuned, "output": str(output), "written": False,
        "tensors": [{"old": "head/dense/b", "new": "head/dense/b", "shape": [3], "dtype": "float32",
                     "new_dtype": "float16"},
                    {"old": "head/dense/w", "new": "head/kernel", "shape": [4, 3], "dtype": "float32",
                     "new_dtype": "float32"}],
        "dropped": sorted(set(tf_values(finetuned)) - {"head/dense/b", "head/dense/w"}), "bytes": 54}
    written = run_cli("rewrite", finetuned, "-o", output, "--remap", "backbone/=encoder/")
    assert written.returncode == 0, written.stderr
    assert written.stdout.splitlines()[-1] == (
        f"wrote checkpoint {output}: 20 tensors (11 renamed, 0 cast, 0 dropped), 756 B; every tensor verified")
    assert tf.train.latest_checkpoint(str(output.parent)) == str(output)  # TensorFlow's own reading of the state

    graph, *_ = backbone_net(scope="encoder")
    with graph.as_default():
        every = plan(ss.everything(), graph)
    assert every.check(str(output.parent)).ok
    source = tf_values(finetuned)
    with v1.Session(graph=graph) as session:
        report = every.restore_or_initialize(session, str(output.parent))
        got = dict(zip(every.saved_names, session.run(every.saved)))
    assert list(report.initialized) == []
    assert len(got) == 20
    for name, value in got.items():
        assert np.array_equal(value, source[name.replace("encoder/", "backbone/", 1)]), name

    changes = diff(finetuned, output, remap={"backbone/": "encoder/"})
    assert changes.counts() == {"equal": 20}


def test_rewrite_casts_and_drops_as_tensorflow_reads_them(fine_tune, tmp_path):
    _, finetuned = fine_tune
    output = tmp_path / "serve" / "model"
    report = rewrite(finetuned, output, keep="~slots()", cast={"trainable()": "bfloat16"})
    assert [row.old for row in report.cast] == ["backbone/bn/beta", "backbone/bn/gamma", "backbone/conv/w",
                                                "head/dense/b", "head/dense/w"]
    assert report.dropped == tuple(sorted(n for n in tf_values(finetuned) if n.endswith(("Adam", "Adam_1", "_power"))))
    source, written = tf_values(finetuned), tf_values(output)
    assert sorted(written) == [row.new for row in report.rows]
    for row in report.rows:
        if row in report.cast:
            assert written[row.new].dtype == ml_dtypes.bfloat16
            expected = tf.cast(source[row.old], tf.bfloat16).numpy()  # TensorFlow's rounding
            assert written[row.new].tobytes() == expected.tobytes(), row.old
        else:
            assert np.array_equal(written[row.new], source[row.old]) and written[row.new].dtype == source[row.old].dtype
    changes = diff(finetuned, output)
    assert changes.counts() == {"equal": 3, "only_a": 12, "dtype": 5}


def test_rewrite_refuses_bad_rules_before_writing(fine_tune, tmp_path, run_cli):
    _, finetuned = fine_tune
    output = tmp_path / "out" / "model"
    cases = [
        (["--remap", "nowhere/=x/"], "--remap nowhere/=x/ matches no name; the left-hand side names "
                                     "tensors (or scopes ending in '/') of the checkpoint"),
        (["--remap", "head/dense/w=w", "--remap", "head/dense/b=w"],
         "remap sends both head/dense/b and head/dense/w to w"),
        (["--cast", "global_step()=float16"],
         "cast global_step()=float16 selects global_step (int64), which is not a float tensor; leave it out, "
         "e.g. \"(global_step()) - name('global_step')=float16\""),
        (["--cast", "trainable()=int8"], "cast to 'int8': a checkpoint's tensors are cast between float types only "
                                         "(float16, bfloat16, float32, float64)"),
        (["--cast", "trainable()"], "cast 'trainable()' is not SELECTOR=DTYPE, e.g. \"trainable()=bfloat16\""),
        (["--keep", "~slots()", "--cast", "slots()=float16"],
         "cast slots()=float16 selects no tensor that is kept; check the selector"),
    ]
    for flags, message in cases:
        result = run_cli("rewrite", finetuned, "-o", output, *flags)
        assert (result.returncode, result.stderr) == (2, f"subsetsaver: error: {message}\n"), flags
        if flags[-2] == "--cast":  # the library's own error, the rule as a field
            keep = flags[1] if flags[0] == "--keep" else None
            with pytest.raises(ss.CastRuleError) as error:
                rewrite(finetuned, output, keep=keep, cast=parse_cast([flags[-1]]))
            assert (str(error.value), error.value.rule) == (message, flags[-1]) and isinstance(error.value, ValueError)
    assert not output.parent.exists()
    assert run_cli("rewrite", finetuned, "-o", output).returncode == 0
    again = run_cli("rewrite", finetuned, "-o", output)
    assert again.stderr == (f"subsetsaver: error: checkpoint '{output}' already exists "
                            f"({output}.data-00000-of-00001); pass --force to replace it\n")
    with pytest.raises(ValueError, match="is the source checkpoint"):
        rewrite(finetuned, finetuned, overwrite=True)



def test_rewrite_shows_its_table_only_with_dry_run_or_verbose(tmp_path, run_cli):
    """A rewrite that writes says what it did in one line, the number renamed among its counts; the old -> new
    table of every tensor comes with --dry-run or -v."""
    from subsetsaver.formats.tf import bundle as tf_bundle

    os.makedirs(tmp_path / "source")
    source = tf_bundle.write(tmp_path / "source" / "model", {"model/w": np.ones((2, 3), np.float32),
                                                             "model/b": np.zeros(3, np.float32)})
    table = ["old      new    shape   dtype", "-------  -----  ------  -------", "model/b  net/b  [3]     float32",
             "model/w  net/w  [2, 3]  float32", ""]
    quiet = run_cli("rewrite", source, "-o", tmp_path / "quiet" / "model", "--remap", "model/=net/")
    assert (quiet.returncode, quiet.stderr) == (0, "")
    assert quiet.stdout.splitlines() == [f"wrote checkpoint {tmp_path / 'quiet' / 'model'}: 2 tensors (2 renamed, "
                                         "0 cast, 0 dropped), 36 B; every tensor verified"]
    verbose = run_cli("rewrite", source, "-o", tmp_path / "verbose" / "model", "--remap", "model/=net/", "-v")
    assert verbose.stdout.splitlines() == table + [f"wrote checkpoint {tmp_path / 'verbose' / 'model'}: 2 tensors "
                                                   "(2 renamed, 0 cast, 0 dropped), 36 B; every tensor verified"]
    dry = run_cli("rewrite", source, "-o", tmp_path / "dry" / "model", "--remap", "model/=net/", "--dry-run")
    assert dry.stdout.splitlines() == table + [f"dry run: {tmp_path / 'dry' / 'model'} would hold 2 tensors "
                                               "(2 renamed, 0 cast, 0 dropped), 36 B; nothing written"]


# -- average ------------------------------------------------------------------------


def test_average_of_copies_is_the_checkpoint_bit_for_bit(fine_tune, tmp_path):
    pretrained, _ = fine_tune
    copies = []
    for index in range(3):
        copy = tmp_path / f"copy{index}"
        copy.mkdir()
        for path in tf.io.gfile.glob(pretrained + ".*"):
            shutil.copy(path, copy)
        copies.append(str(copy / os.path.basename(pretrained)))
    for weights in (None, [1, 2, 7]):
        output = tmp_path / f"avg-{weights is None}" / "model"
        report = average(copies, output, weights=weights)
        assert len(report.averaged) == 7 and "global_step" in report.copied
        source, written = tf_values(pretrained), tf_values(output)
        assert sorted(written) == sorted(source)
        for name, value in source.items():
            assert written[name].tobytes() == value.tobytes() and written[name].dtype == value.dtype, name


def test_average_of_copies_keeps_infinities_and_nans(tmp_path):
    values = {"w": np.array([np.inf, -np.inf, np.nan, 1.5, -0.0], np.float32),
              "h": np.array([1, 2], ml_dtypes.bfloat16), "d": np.array([np.pi, np.inf])}
    first = saved(tmp_path / "a" / "m", values)
    second = saved(tmp_path / "b" / "m", values)
    written = tf_values(average([first, second], tmp_path / "avg" / "m", weights=[1, 2]).output)
    for name, value in values.items():
        assert written[name].tobytes() == value.tobytes(), name


def test_average_of_two_checkpoints_is_numpys_mean_and_keeps_the_last_state(fine_tune, tmp_path, run_cli):
    pretrained, finetuned = fine_tune
    output = tmp_path / "avg" / "model"
    result = run_cli("average", pretrained, finetuned, "-o", output)
    assert result.returncode == 0, result.stderr
    a, b, written = tf_values(pretrained), tf_values(finetuned), tf_values(output)
    averaged = ["backbone/bn/beta", "backbone/bn/gamma", "backbone/bn/moving_mean", "backbone/bn/moving_variance",
                "backbone/conv/w", "head/dense/b", "head/dense/w"]
    copied = sorted(set(b) - set(averaged))
    assert result.stdout == (
        "averaged 7 tensors over 2 checkpoints (weights 0.5, 0.5)\n"
        f"from the last checkpoint {finetuned}: {', '.join(copied)}\n"
        f"wrote checkpoint {output}: 20 tensors, 756 B; every tensor verified\n")
    for name in averaged:
        assert written[name].tobytes() == np.mean(np.stack([a[name], b[name]]), axis=0).tobytes(), name
    for name in copied:  # the step, Adam's slots and beta powers: the last checkpoint's, found by role
        assert written[name].tobytes() == b[name].tobytes(), name
    assert tf.train.latest_checkpoint(str(output.parent)) == str(output)
    as_json = json.loads(run_cli("average", pretrained, finetuned, "-o", output, "--force", "--weights", "1,1",
                                 "--keep", "bn_stats()", "--json").stdout)
    assert as_json == {"inputs": [pretrained, finetuned], "output": str(output), "weights": [0.5, 0.5],
                       "averaged": ["backbone/bn/moving_mean", "backbone/bn/moving_variance"],
                       "copied": sorted(set(b) - {"backbone/bn/moving_mean", "backbone/bn/moving_variance"}),
                       "bytes": 756}

    weighted = average([pretrained, finetuned], tmp_path / "weighted" / "model", weights=[1, 3], keep="~global_step()")
    assert len(weighted.averaged) == 19 and weighted.copied == ("global_step",) and weighted.weights == (0.25, 0.75)
    written = tf_values(weighted.output)
    for name in weighted.averaged:
        exact = np.average(np.stack([a[name], b[name]]).astype(np.float64), axis=0, weights=[1, 3])
        np.testing.assert_array_max_ulp(written[name], exact.astype(np.float32), maxulp=1)


def test_a_tensor_stored_in_parts_averages_to_the_bits_of_the_same_tensor_stored_whole(tmp_path):
    rng = np.random.default_rng(9)
    inputs = [rng.standard_normal((6, 5)).astype(np.float32) for _ in range(3)]  # each input different
    parted, whole = [], []
    for index, value in enumerate(inputs):
        prefix = str(tmp_path / f"parts{index}" / "m")
        tf.raw_ops.SaveV2(prefix=prefix, tensor_names=["emb", "emb"], shape_and_slices=["6 5 0,4:-", "6 5 4,2:-"],
                          tensors=[value[:4], value[4:]])  # stored in two parts: read whole, not streamed
        parted.append(prefix)
        whole.append(saved(tmp_path / f"whole{index}" / "m", {"emb": value}))
    from_parts = average(parted, tmp_path / "avg-parts" / "m", weights=[1, 2, 3])
    from_whole = average(whole, tmp_path / "avg-whole" / "m", weights=[1, 2, 3])
    assert from_parts.averaged == from_whole.averaged == ("emb",)
    expected = tf_values(from_whole.output)["emb"]
    exact = np.average(np.stack(inputs).astype(np.float64), axis=0, weights=[1, 2, 3])
    np.testing.assert_array_max_ulp(expected, exact.astype(np.float32), maxulp=1)
    assert tf_values(from_parts.output)["emb"].tobytes() == expected.tobytes()


def test_average_reports_every_disagreement_at_once(tmp_path, run_cli):
    first = saved(tmp_path / "a" / "m", {"w": np.zeros((2, 2), np.float32), "b": np.zeros(2, np.float32),
                                         "s": np.zeros(2, np.float32)})
    last = saved(tmp_path / "b" / "m", {"w": np.zeros((2, 3), np.float32), "b": np.zeros(2, np.float64),
                                        "s": np.zeros(2, np.float32), "extra": np.zeros(1, np.float32)})
    with pytest.raises(CheckpointMismatchError) as error:
        average([first, last], tmp_path / "out" / "m")
    assert [p.kind for p in error.value.problems] == ["dtype", "missing", "shape"]
    result = run_cli("average", first, last, "-o", tmp_path / "out" / "m")
    assert result.returncode == 2
    assert result.stderr == (
        f"subsetsaver: error: cannot average: 3 tensors of the inputs disagree with the last checkpoint, '{last}':\n"
        f"  {first}: dtype mismatch: b, expected [2] float64, checkpoint has [2] float32\n"
        f"  {first}: missing: extra, expected [1] float32\n"
        f"  {first}: shape mismatch: w, expected [2, 3] float32, checkpoint has [2, 2] float32\n"
        "leave them out with --keep, e.g. --keep \"~slots() - global_step() - name('b')\", or average checkpoints "
        "of one model\n")
    assert not (tmp_path / "out").exists()
    bad = run_cli("average", first, last, "-o", tmp_path / "out" / "m", "--weights", "1,x")
    assert bad.returncode == 2 and "'1,x' is not a comma-separated list of numbers, e.g. 1,1,2" in bad.stderr
    with pytest.raises(ValueError, match=r"^1 weights for 2 checkpoints; give one weight per checkpoint$"):
        average([first, last], tmp_path / "o" / "m", weights=[1])
    with pytest.raises(ValueError, match=r"^weights must be finite, 0 or more, and not all 0"):
        average([first, last], tmp_path / "o" / "m", weights=[0, 0])


def test_a_directory_of_checkpoints_without_a_state_file_is_an_error_never_an_initialize(fine_tune, tmp_path):
    pretrained, _ = fine_tune
    output = tmp_path / "out" / "model"
    rewrite(pretrained, output)
    os.remove(tmp_path / "out" / "checkpoint")
    graph, *_ = backbone_net()
    with graph.as_default():
        every = plan(ss.everything(), graph)
    with v1.Session(graph=graph) as session:
        with pytest.raises(ss.CheckpointNotFoundError) as error:
            every.restore_or_initialize(session, str(output.parent))
        assert session.run(v1.report_uninitialized_variables()).size == 20  # nothing was initialized
    assert str(error.value) == (
        f"directory '{output.parent}' holds 1 checkpoint ('{output}') but no 'checkpoint' state file naming the "
        f"latest; pass a prefix such as '{output}', or write the state file with tf.train.update_checkpoint_state")
