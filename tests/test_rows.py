"""Row maps: vocabularies grown, heads cut, one tensor into several variables, with their optimizer slots.

The checkpoints are written by real TensorFlow training steps (partitioned variables, Adam and
Momentum slots, resource and reference variables); every restored row is compared bit for bit
with the checkpoint's row it came from, and the grown vocabulary is compared with what
``tf.compat.v1.train.warm_start`` with ``VocabInfo`` gives.
"""

import json

import numpy as np
import pytest
import tensorflow as tf

import subsetsaver as ss
from subsetsaver.errors import CheckpointMismatchError, RowMapError
from subsetsaver.planning import apply_rows

v1 = tf.compat.v1
OLD_ROWS, NEW_ROWS, WIDTH = 30_718, 31_836, 64  # tensor2tensor#728


def vocabularies(directory):
    """Two vocabulary files, 30,718 -> 31,836 tokens: deletions, a reordered block, insertions."""
    rng = np.random.default_rng(728)
    old = [f"tok{i}" for i in range(OLD_ROWS)]
    deleted = set(rng.choice(OLD_ROWS, 300, replace=False).tolist())
    new = [token for row, token in enumerate(old) if row not in deleted]
    block = new[1000:3000]
    new[1000:3000] = block[::-1]  # reordered
    for count in range(NEW_ROWS - len(new)):
        new.insert(int(rng.integers(len(new) + 1)), f"new{count}")
    assert len(new) == NEW_ROWS
    paths = directory / "old_vocab.txt", directory / "new_vocab.txt"
    for path, tokens in zip(paths, (old, new)):
        path.write_text("\n".join(tokens) + "\n")
    return paths


def dense(inputs, units, name):
    """What tf.compat.v1.layers.dense builds (``NAME/kernel`` [inputs, units], ``NAME/bias``), without Keras."""
    with v1.variable_scope(name):
        kernel = v1.get_variable("kernel", [inputs.shape[-1], units])
        bias = v1.get_variable("bias", [units], initializer=v1.zeros_initializer())
    return tf.matmul(inputs, kernel) + bias


def embedding_graph(rows, partitions, *, resource=True, initializer=None):
    """``body/emb`` [rows, 64] in ``partitions`` parts and a dense head, trained with Adam."""
    graph = tf.Graph()
    with graph.as_default():
        step = v1.train.get_or_create_global_step()
        emb = v1.get_variable("body/emb", [rows, WIDTH], initializer=initializer, use_resource=resource,
                              partitioner=v1.fixed_size_partitioner(partitions))
        weights = v1.constant(np.random.default_rng(rows).standard_normal((rows, WIDTH)).astype(np.float32))
        hidden = tf.reduce_sum(tf.square(v1.convert_to_tensor(emb)) * weights, axis=0, keepdims=True)
        logits = dense(hidden, 8, "head")
        train = v1.train.AdamOptimizer(0.01).minimize(tf.reduce_sum(logits), global_step=step)
    return graph, train


def values(session, graph) -> dict:
    """Every global variable's value, partitioned ones joined, slots under their logical names."""
    with graph.as_default():
        found = {v.op.name: session.run(v) for v in v1.global_variables()}
    joined = {}
    for name, value in found.items():
        if "/part_" in name:
            head, tail = name.split("/part_", 1)
            index, _, rest = tail.partition("/")
            joined.setdefault(head + ("/" + rest if rest else ""), []).append((int(index), value))
        else:
            joined[name] = value
    return {name: np.concatenate([v for _, v in sorted(value)]) if isinstance(value, list) else value
            for name, value in joined.items()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A checkpoint of the 16-way partitioned 30,718 x 64 embedding after two Adam steps, and its values."""
    directory = tmp_path_factory.mktemp("rows")
    graph, train = embedding_graph(OLD_ROWS, 16)
    with graph.as_default(), v1.Session(graph=graph) as session:
        session.run(v1.global_variables_initializer())
        session.run(train)
        session.run(train)
        prefix = v1.train.Saver().save(session, str(directory / "old" / "model"))
        old = values(session, graph)
    old_vocab, new_vocab = vocabularies(directory)
    return {"prefix": prefix, "old": old, "old_vocab": old_vocab, "new_vocab": new_vocab, "dir": directory}


def restore_grown(trained, rowmap, **graph_options):
    graph, _train = embedding_graph(NEW_ROWS, 4, **graph_options)
    plan = ss.plan(ss.everything(), graph, rows={"body/emb": rowmap})
    before = len(graph.get_operations())
    graph.finalize()  # a restore that built an op would raise
    with v1.Session(graph=graph) as session:
        report = plan.restore_or_initialize(session, trained["prefix"])
        assert len(graph.get_operations()) == before  # every op was built at plan time
        return values(session, graph), report, plan


def test_vocabulary_growth_moves_rows_and_adam_slots_across_partitions(trained):
    rowmap = ss.RowMap.from_vocab(trained["old_vocab"], trained["new_vocab"], init="mean")
    assert rowmap.counts() == (30_418, 1_418, 300)
    new, report, _plan = restore_grown(trained, rowmap)
    old, taken = trained["old"], rowmap.new_to_old
    kept = taken >= 0
    for name in ("body/emb", "body/emb/Adam", "body/emb/Adam_1"):
        assert new[name].shape == (NEW_ROWS, WIDTH)
        np.testing.assert_array_equal(new[name][kept], old[name][taken[kept]])
    np.testing.assert_array_equal(new["body/emb"][~kept][0], old["body/emb"].astype(np.float64).mean(0).astype(np.float32))
    assert (new["body/emb"][~kept] == new["body/emb"][~kept][0]).all()
    assert not new["body/emb/Adam"][~kept].any() and not new["body/emb/Adam_1"][~kept].any()
    moved = old["body/emb/Adam"][taken[kept]]  # trained values, not zeros (an initial weight may be exactly 0)
    assert np.count_nonzero(moved) > 0.99 * moved.size
    for name in ("global_step", "beta1_power", "beta2_power", "head/kernel", "head/kernel/Adam"):
        np.testing.assert_array_equal(new[name], old[name])
    assert report.initialized == () and "body/emb/Adam_1" in report.restored


def test_grown_vocabulary_equals_tensorflow_warm_start_with_vocab_info(trained):
    """warm_start with VocabInfo and the same backup initializer gives the same weights."""
    rowmap = ss.RowMap.from_vocab(trained["old_vocab"], trained["new_vocab"], init="mean")
    ours, _report, _plan = restore_grown(trained, rowmap, resource=False)
    mean = trained["old"]["body/emb"].astype(np.float64).mean(0).astype(np.float32)

    def backup(shape, dtype=None, partition_info=None):  # asked for the missing rows' values, flat
        return tf.tile(tf.constant(mean), [shape[0] // WIDTH])

    graph, _train = embedding_graph(NEW_ROWS, 4, resource=False)
    with graph.as_default():
        info = v1.train.VocabInfo(str(trained["new_vocab"]), NEW_ROWS, 0, str(trained["old_vocab"]),
                                  backup_initializer=backup)
        v1.train.warm_start(trained["prefix"], vars_to_warm_start="body/emb",
                            var_name_to_vocab_info={"body/emb": info})
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            theirs = values(session, graph)
    np.testing.assert_array_equal(ours["body/emb"], theirs["body/emb"])


def test_zeros_init_equals_warm_start_default(trained):
    rowmap = ss.RowMap.from_vocab(trained["old_vocab"], trained["new_vocab"], init="zeros")
    ours, _report, _plan = restore_grown(trained, rowmap)
    graph, _train = embedding_graph(NEW_ROWS, 4)
    with graph.as_default():
        info = v1.train.VocabInfo(str(trained["new_vocab"]), NEW_ROWS, 0, str(trained["old_vocab"]),
                                  backup_initializer=v1.zeros_initializer())
        v1.train.warm_start(trained["prefix"], vars_to_warm_start="body/emb", var_name_to_vocab_info={"body/emb": info})
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            np.testing.assert_array_equal(ours["body/emb"], values(session, graph)["body/emb"])


def test_variable_init_fills_new_rows_with_the_variables_initializer(trained):
    rowmap = ss.RowMap.from_vocab(trained["old_vocab"], trained["new_vocab"], init="variable")
    new, _report, _plan = restore_grown(trained, rowmap, initializer=v1.constant_initializer(7.0))
    assert (new["body/emb"][rowmap.is_new] == 7.0).all()
    assert not new["body/emb/Adam"][rowmap.is_new].any()


def test_normal_init_is_seeded_and_the_same_offline(trained, tmp_path):
    rowmap = ss.RowMap.from_vocab(trained["old_vocab"], trained["new_vocab"], init="normal", seed=3, stddev=0.02)
    new, _report, _plan = restore_grown(trained, rowmap)
    again, _report, _plan = restore_grown(trained, rowmap)
    np.testing.assert_array_equal(new["body/emb"], again["body/emb"])
    assert abs(float(new["body/emb"][rowmap.is_new].std()) - 0.02) < 0.001
    ss.rewrite(trained["prefix"], tmp_path / "grown", rows={"body/emb": rowmap}, keep="name('body/emb')")
    np.testing.assert_array_equal(tf.train.load_checkpoint(str(tmp_path / "grown")).get_tensor("body/emb"),
                                  new["body/emb"])


def test_resume_from_the_plans_own_checkpoint_restores_as_saved(trained, tmp_path):
    rowmap = ss.RowMap.from_vocab(trained["old_vocab"], trained["new_vocab"], init="mean")
    graph, train = embedding_graph(NEW_ROWS, 4)
    plan = ss.plan(ss.everything(), graph, rows={"body/emb": rowmap})
    with v1.Session(graph=graph) as session:
        plan.restore_or_initialize(session, trained["prefix"])
        session.run(train)
        prefix = plan.save(session, str(tmp_path / "model"), global_step=3)
        saved = values(session, graph)
    with v1.Session(graph=graph) as session:
        plan.restore_or_initialize(session, prefix)
        for name, value in values(session, graph).items():
            np.testing.assert_array_equal(value, saved[name], err_msg=name)


def test_offline_rewrite_restores_into_the_new_graph_bit_exact(trained, tmp_path, run_cli):
    in_plan, _report, _plan = restore_grown(
        trained, ss.RowMap.from_vocab(trained["old_vocab"], trained["new_vocab"], init="mean"))
    result = run_cli("rewrite", trained["prefix"], "-o", tmp_path / "grown" / "model", "--rows",
                     f"body/emb={trained['old_vocab']}:{trained['new_vocab']}", "--init", "mean")
    assert result.returncode == 0, result.stderr
    assert "rows of body/emb (axis 0): 30,418 kept, 1,418 added, 300 dropped" in result.stdout
    assert "rows of body/emb/Adam_1 (axis 0): 30,418 kept, 1,418 added, 300 dropped\n\nwrote checkpoint " in result.stdout
    assert result.stdout.endswith(": 12 tensors (0 renamed, 0 cast, 0 dropped), 23.3 MB; every tensor verified\n")
    graph, _train = embedding_graph(NEW_ROWS, 4)
    plan = ss.plan(ss.everything(), graph)
    with v1.Session(graph=graph) as session:
        plan.restore_or_initialize(session, tmp_path / "grown" / "model")
        offline = values(session, graph)
    for name, value in in_plan.items():
        np.testing.assert_array_equal(offline[name], value, err_msg=name)


def test_dry_run_counts_rows_and_writes_nothing(trained, tmp_path, run_cli):
    result = run_cli("rewrite", trained["prefix"], "-o", tmp_path / "out", "--rows",
                     f"body/emb={trained['old_vocab']}:{trained['new_vocab']}", "--dry-run", "--json")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["rows"] == [{"name": name, "axis": 0, "kept": 30_418, "added": 1_418, "dropped": 300}
                             for name in ("body/emb", "body/emb/Adam", "body/emb/Adam_1")]
    assert [t["shape"] for t in found["tensors"] if t["old"] == "body/emb"] == [[NEW_ROWS, WIDTH]]
    assert not list(tmp_path.iterdir())


def head_graph(classes, *, resource):
    """A dense head of ``classes`` units trained with Momentum (an accumulator slot)."""
    graph = tf.Graph()
    with graph.as_default():
        step = v1.train.get_or_create_global_step()
        x = v1.constant(np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32))
        with v1.variable_scope("head", use_resource=resource):
            logits = dense(x, classes, "out")
        loss = tf.reduce_sum(tf.square(logits) * tf.range(classes, dtype=tf.float32))
        train = v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss, global_step=step)
    return graph, train


@pytest.mark.parametrize(("resource", "axis"), [(True, -1), (False, None)], ids=["resource", "reference-axis-found"])
def test_head_keeps_700_of_1000_classes_with_their_momentum_in_the_plan_and_offline(tmp_path, resource, axis):
    graph, train = head_graph(1000, resource=resource)
    with graph.as_default(), v1.Session(graph=graph) as session:
        session.run(v1.global_variables_initializer())
        session.run(train)
        prefix = v1.train.Saver().save(session, str(tmp_path / "old" / "model"))
        old = values(session, graph)
    kept = np.random.default_rng(10155).permutation(1000)[:700]
    (tmp_path / "kept.txt").write_text("".join(f"{row}\n" for row in kept))
    rowmap = ss.RowMap.keep(tmp_path / "kept.txt", axis=axis)  # None: the classes' axis is the one of 700
    new_graph, _train = head_graph(700, resource=resource)
    plan = ss.plan(ss.everything(), new_graph, rows={"head": rowmap})
    ss.rewrite(prefix, tmp_path / "offline" / "model", rows={"head": rowmap})
    for checkpoint in (prefix, tmp_path / "offline" / "model"):
        with v1.Session(graph=new_graph) as session:
            plan.restore_or_initialize(session, checkpoint)
            new = values(session, new_graph)
        for name in ("head/out/kernel", "head/out/kernel/Momentum"):
            np.testing.assert_array_equal(new[name], old[name][:, kept])
        for name in ("head/out/bias", "head/out/bias/Momentum"):
            np.testing.assert_array_equal(new[name], old[name][kept])
        assert np.count_nonzero(old["head/out/kernel/Momentum"][:, kept]) > 0.99 * 16 * 700
        assert new["global_step"] == old["global_step"]


def tied_graph(names):
    graph = tf.Graph()
    with graph.as_default():
        step = v1.train.get_or_create_global_step()
        loss = 0.0
        for position, name in enumerate(names):
            emb = v1.get_variable(name, [50, 8], partitioner=v1.fixed_size_partitioner(1 + position))
            loss += tf.reduce_sum(tf.square(v1.convert_to_tensor(emb)) * (position + 1.5))
        train = v1.train.AdamOptimizer(0.1).minimize(loss, global_step=step)
    return graph, train


def test_one_tensor_restores_into_two_variables_bit_exact(tmp_path):
    graph, train = tied_graph(["shared/emb"])
    with graph.as_default(), v1.Session(graph=graph) as session:
        session.run(v1.global_variables_initializer())
        session.run(train)
        prefix = v1.train.Saver().save(session, str(tmp_path / "model"))
        old = values(session, graph)
    new_graph, _train = tied_graph(["encoder/emb", "decoder/emb"])
    plan = ss.plan(ss.everything(), new_graph, remap={"shared/emb": ["encoder/emb", "decoder/emb"]})
    assert plan.check(prefix).problems == ()
    with v1.Session(graph=new_graph) as session:
        report = plan.restore_or_initialize(session, prefix)
        new = values(session, new_graph)
    for side in ("encoder", "decoder"):
        for slot in ("", "/Adam", "/Adam_1"):
            np.testing.assert_array_equal(new[f"{side}/emb{slot}"], old[f"shared/emb{slot}"])
    assert report.initialized == ()


def test_rule_problems_are_reported_together_at_plan_time(trained):
    graph, _train = embedding_graph(NEW_ROWS, 4)
    rowmap = ss.RowMap.from_vocab(trained["old_vocab"], trained["new_vocab"])
    with pytest.raises(RowMapError) as raised:
        ss.plan(ss.trainable(), graph, rows={"body/emb": rowmap, "body/emb/Adam": rowmap, "decoder": rowmap},
                remap={"old/emb": "body/emb", "shared/emb": ["body/emb", "head/kernel"]})
    assert str(raised.value) == (
        "3 problems with the plan's rows/remap rules, found before anything was built:\n"
        "  rows names body/emb/Adam, which the plan does not save (it initializes it); select it, or drop the rule\n"
        "  rows names decoder, which is neither a variable the plan saves nor a scope holding one\n"
        "  remap sends 2 tensors into body/emb ('old/emb', 'shared/emb'); keep one rule for it")


def test_wrong_vocabulary_length_is_reported_with_every_other_mismatch_before_any_change(trained, tmp_path):
    short = tmp_path / "short_vocab.txt"
    short.write_text("".join(f"tok{i}\n" for i in range(OLD_ROWS - 18)))
    rowmap = ss.RowMap.from_vocab(short, trained["new_vocab"])
    graph, _train = embedding_graph(NEW_ROWS, 4)
    with graph.as_default():
        v1.get_variable("extra/w", [3])
    plan = ss.plan(ss.everything(), graph, rows={"body/emb": rowmap})
    with v1.Session(graph=graph) as session:
        plan.restore_or_initialize(session, None)
        before = values(session, graph)
        with pytest.raises(CheckpointMismatchError) as raised:
            plan.restore_or_initialize(session, trained["prefix"])
        after = values(session, graph)
    expected_vocab = (f"vocabularies '{short}' (30,700 tokens) -> '{trained['new_vocab']}' (31,836 tokens) expects "
                      "30,700 old rows, the checkpoint's tensor has 30,718 on axis 0 (shape [30718, 64]); use the vocabulary "
                      "the checkpoint was trained with")
    assert str(raised.value) == "\n".join([
        f"checkpoint '{trained['prefix']}' does not match the plan everything(): 1 missing, 3 row map problems",
        "  missing: extra/w, expected [3] float32",
        f"  row map: body/emb, checkpoint has [30718, 64] float32: {expected_vocab}",
        f"  row map: body/emb/Adam, checkpoint has [30718, 64] float32: {expected_vocab}",
        f"  row map: body/emb/Adam_1, checkpoint has [30718, 64] float32: {expected_vocab}",
        "Pass on_mismatch='initialize' to initialize these variables instead of restoring them."])
    assert len(str(raised.value)) < 2048
    for name, value in before.items():
        np.testing.assert_array_equal(after[name], value, err_msg=name)


def test_row_map_values_and_their_errors(tmp_path):
    rows = ss.RowMap.from_vocab(["a", "b", "c"], ["c", "a", "z"], init="zeros")
    assert rows.new_to_old.tolist() == [2, 0, -1] and rows.counts(3) == (2, 1, 1)
    old = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
    np.testing.assert_array_equal(apply_rows(old, rows), [[5, 6], [1, 2], [0, 0]])
    np.testing.assert_array_equal(apply_rows(old, ss.RowMap.from_indices([-1, 1], init="mean")), [[3, 4], [3, 4]])
    np.testing.assert_array_equal(apply_rows(old, ss.RowMap.keep([1], axis=-1)), [[2], [4], [6]])
    (tmp_path / "v.txt").write_text("a\nb\na\n")
    with pytest.raises(RowMapError, match=r"^'.*v.txt' repeats 1 token \('a'\); a vocabulary names each token once$"):
        ss.RowMap.from_vocab(tmp_path / "v.txt", ["a"])
    with pytest.raises(RowMapError, match=r"^init='normal' needs a seed"):
        ss.RowMap.from_indices([0, -1], init="normal")
    with pytest.raises(RowMapError, match=r"^RowMap.keep takes old row indices \(0 or more\), got -2"):
        ss.RowMap.keep([1, -2])
    with pytest.raises(RowMapError) as raised:
        apply_rows(old, ss.RowMap.keep([0, 7], axis=0))
    assert str(raised.value) == "1 row of a list of kept rows past the 3 old rows (new row 1 <- 7)"
    with pytest.raises(RowMapError) as raised:
        apply_rows(old, ss.RowMap.keep([0, 7]))
    assert str(raised.value) == ("which axis holds the rows is not clear for a tensor of shape [3, 2]; "
                                 "pass axis= to the RowMap")


def test_command_line_names_a_bad_rows_option_in_one_line(trained, tmp_path, run_cli):
    result = run_cli("rewrite", trained["prefix"], "-o", tmp_path / "out", "--rows", "body/emb=only_one_file.txt")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert ("--rows 'body/emb=only_one_file.txt': 'only_one_file.txt' is not OLD_VOCAB:NEW_VOCAB (two files, "
            "one token a line)") in result.stderr
    result = run_cli("rewrite", trained["prefix"], "-o", tmp_path / "out", "--rows",
                     f"body/emb={tmp_path / 'absent.txt'}:{trained['new_vocab']}")
    assert f"cannot read the old file '{tmp_path / 'absent.txt'}': No such file or directory" in result.stderr
    assert not (tmp_path / "out.index").exists()


def test_rows_need_the_tensorflow_backend():
    graph, _train = tied_graph(["emb"])
    with pytest.raises(RowMapError, match=r"^rows= and one-to-many remap rules restore TensorFlow checkpoints"):
        ss.plan(ss.everything(), graph, rows={"emb": ss.RowMap.keep(range(50))}, backend="npz")


def test_a_map_that_cannot_apply_initializes_its_variable_and_slots_with_on_mismatch_initialize(trained, tmp_path):
    short = tmp_path / "short_vocab.txt"
    short.write_text("".join(f"tok{i}\n" for i in range(100)))
    graph, _train = embedding_graph(NEW_ROWS, 4, initializer=v1.constant_initializer(0.5))
    plan = ss.plan(ss.everything(), graph, rows={"body/emb": ss.RowMap.from_vocab(short, trained["new_vocab"])},
                   on_mismatch="initialize")
    with v1.Session(graph=graph) as session:
        report = plan.restore_or_initialize(session, trained["prefix"])
        new = values(session, graph)
    assert report.initialized == ("body/emb", "body/emb/Adam", "body/emb/Adam_1")
    assert [problem.kind for problem in report.mismatched] == ["rows", "rows", "rows"]
    assert (new["body/emb"] == 0.5).all() and not new["body/emb/Adam"].any()
    np.testing.assert_array_equal(new["head/kernel/Adam_1"], trained["old"]["head/kernel/Adam_1"])


def test_a_resume_is_told_from_a_warm_start_by_what_the_map_could_apply_to():
    from subsetsaver.planning.row_rules import _told_apart

    assert _told_apart(ss.RowMap.keep(range(300, 1000), axis=0), (700,))  # indices past 700 rows: a resume
    assert not _told_apart(ss.RowMap.from_indices([2, 0, 1], axis=0), (3,))  # a reordering applies
    assert not _told_apart(ss.RowMap.from_indices([0, 1, -1], axis=0), (3,))  # could apply: give old_rows
    assert _told_apart(ss.RowMap.from_indices([0, 1, -1], old_rows=2, axis=0), (3,))


def test_offline_rewrite_of_a_partitioned_tensor_reads_and_writes_it_part_by_part(trained, tmp_path, monkeypatch):
    """rewrite --rows holds about two parts of a partitioned embedding, not the tensor: no read asks for more
    bytes than one stored part; what it writes (in parts) equals the rows moved in the whole tensor, bit for bit."""
    from subsetsaver.formats.tf import bundle as tf_bundle
    from subsetsaver.storage import local as local_files

    largest = []
    read_into = local_files.LocalReader.read_into

    def counted(self, offset, buffer):
        largest.append(memoryview(buffer).nbytes)
        return read_into(self, offset, buffer)

    monkeypatch.setattr(local_files.LocalReader, "read_into", counted)
    rowmap = ss.RowMap.from_vocab(trained["old_vocab"], trained["new_vocab"], init="mean")
    ss.rewrite(trained["prefix"], tmp_path / "grown" / "model", rows={"body/emb": rowmap})
    part_bytes = -(-NEW_ROWS // 16) * WIDTH * 4  # a new part (read back once written) is the largest
    assert 0 < max(largest) <= part_bytes  # a whole tensor would be 16 parts

    monkeypatch.undo()
    old, found = trained["old"], tf.train.load_checkpoint(str(tmp_path / "grown" / "model"))
    with tf_bundle.BundleReader(tmp_path / "grown" / "model") as reader:
        assert len(reader.parts("body/emb/Adam")) == 16
    for name in ("body/emb", "body/emb/Adam", "body/emb/Adam_1"):
        np.testing.assert_array_equal(found.get_tensor(name), apply_rows(old[name], rowmap, slot=name != "body/emb"))
    for name in ("global_step", "beta1_power", "beta2_power", "head/kernel/Adam"):
        np.testing.assert_array_equal(found.get_tensor(name), old[name])


def test_old_rows_summed_part_by_part_give_the_sums_of_the_whole_tensor():
    """The mean that fills new rows is summed in the same float64 blocks however the rows arrive."""
    from subsetsaver.planning.rows import RowStats

    rows = np.random.default_rng(27).standard_normal((10_000, 64)).astype(np.float32)
    whole, parted = RowStats(), RowStats()
    whole.add(rows)
    for start, stop in ((0, 1_000), (1_000, 1_003), (1_003, 6_500), (6_500, 10_000)):
        parted.add(rows[start:stop])
    assert parted.result()["mean"].tobytes() == whole.result()["mean"].tobytes()
    assert parted.result()["std"] == whole.result()["std"]


def test_parts_whose_gathers_are_equal_each_get_their_own_new_rows(tmp_path):
    """Two parts of only new rows gather the same old rows; each is filled in its own buffer (a graph
    optimizer may merge equal gathers into one, which two in-place fills would then share)."""
    old_graph, new_graph = tf.Graph(), tf.Graph()
    with old_graph.as_default():
        v1.get_variable("emb", initializer=np.arange(32, dtype=np.float32).reshape(8, 4))
        with v1.Session() as session:
            session.run(v1.global_variables_initializer())
            prefix = v1.train.Saver().save(session, str(tmp_path / "model"))
    rowmap = ss.RowMap.from_indices(list(range(8)) + [-1] * 8, init="normal", seed=5, stddev=1.0, old_rows=8)
    with new_graph.as_default():
        emb = v1.get_variable("emb", [16, 4], partitioner=v1.fixed_size_partitioner(4))
    plan = ss.plan(ss.everything(), new_graph, rows={"emb": rowmap})
    with v1.Session(graph=new_graph) as session:
        plan.restore_or_initialize(session, prefix)
        restored = session.run(list(emb))
    expected = apply_rows(np.arange(32, dtype=np.float32).reshape(8, 4), rowmap)
    np.testing.assert_array_equal(np.concatenate(restored), expected)
    assert not np.array_equal(restored[2], restored[3])


def small_embedding(directory, shape):
    """A checkpoint holding one float32 tensor ``emb`` of ``shape`` (values 0, 1, 2, ...)."""
    graph = tf.Graph()
    with graph.as_default():
        v1.get_variable("emb", initializer=np.arange(np.prod(shape), dtype=np.float32).reshape(shape))
        with v1.Session() as session:
            session.run(v1.global_variables_initializer())
            return v1.train.Saver().save(session, str(directory / "small" / "model"))


def test_a_vocabulary_that_matches_only_the_width_is_refused_naming_both_lengths(tmp_path, run_cli):
    """4 old tokens against a [6, 4] embedding: the 4 columns are not its rows."""
    prefix = small_embedding(tmp_path, (6, 4))
    old, new = tmp_path / "old.txt", tmp_path / "new.txt"
    old.write_text("a\nb\nc\nd\n")
    new.write_text("a\nb\nc\nd\ne\n")
    expected = (f"row map problem, found before anything was read: emb: vocabularies '{old}' (4 tokens) -> '{new}' "
                "(5 tokens) expects 4 old rows, the checkpoint's tensor has 6 on axis 0 (shape [6, 4]); use the "
                "vocabulary the checkpoint was trained with")
    with pytest.raises(RowMapError) as raised:
        ss.rewrite(prefix, tmp_path / "out", rows={"emb": ss.RowMap.from_vocab(old, new)}, dry_run=True)
    assert str(raised.value) == expected
    result = run_cli("rewrite", prefix, "-o", tmp_path / "out", "--rows", f"emb={old}:{new}")
    assert (result.returncode, result.stderr) == (2, f"subsetsaver: error: {expected}\n")
    assert not (tmp_path / "out.index").exists()
    graph = tf.Graph()
    with graph.as_default():
        v1.get_variable("emb", [6, 5])  # the new vocabulary's 5 tokens match only its width too
    with pytest.raises(RowMapError) as raised:
        ss.plan(ss.everything(), graph, rows={"emb": ss.RowMap.from_vocab(old, new)})
    assert str(raised.value) == (
        "1 problem with the plan's rows/remap rules, found before anything was built:\n"
        f"  rows: emb has 6 rows on axis 0, the map from vocabularies '{old}' (4 tokens) -> '{new}' (5 tokens) "
        "makes 5")


def test_dry_run_names_the_axis_of_rows(tmp_path, run_cli):
    prefix = small_embedding(tmp_path, (3, 6))
    (tmp_path / "kept.txt").write_text("5\n0\n")
    result = run_cli("rewrite", prefix, "-o", tmp_path / "out", "--rows", f"emb=keep:{tmp_path / 'kept.txt'}",
                     "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "\nrows of emb (axis 1): 2 kept, 0 added, 4 dropped\n" in result.stdout
    report = ss.rewrite(prefix, tmp_path / "out", rows={"emb": ss.RowMap.keep([5, 0])}, dry_run=True)
    assert report.row_axes == (("emb", 1),) and report.rows[0].shape == (3, 2)


def test_vocabulary_files_are_read_alike_with_or_without_a_byte_order_mark_or_carriage_returns(tmp_path):
    tokens = ["<pad>", "the", "cat"]
    plain, marked, windows = tmp_path / "plain.txt", tmp_path / "marked.txt", tmp_path / "windows.txt"
    plain.write_bytes("\n".join(tokens).encode() + b"\n")
    marked.write_bytes(b"\xef\xbb\xbf" + "\n".join(tokens).encode() + b"\n")
    windows.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(tokens).encode() + b"\r\n")
    for old, new in ((plain, marked), (marked, plain), (windows, plain), (plain, windows)):
        rowmap = ss.RowMap.from_vocab(old, new)
        assert rowmap.new_to_old.tolist() == [0, 1, 2], (old.name, new.name)


def test_a_vocabulary_file_that_is_not_utf8_is_refused_with_its_name_and_byte_offset(tmp_path, run_cli):
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("a\ncaf\u00e9\n".encode("latin-1"))
    with pytest.raises(RowMapError) as raised:
        ss.RowMap.from_vocab(latin, ["a"])
    assert str(raised.value) == (f"the old file '{latin}' is not UTF-8: byte 5 (0xe9) invalid continuation byte; "
                                 "save it as UTF-8")
    marked = tmp_path / "marked.txt"
    marked.write_bytes(b"\xef\xbb\xbfa\n\xffb\n")  # the offset counts the mark
    result = run_cli("rewrite", tmp_path / "absent", "-o", tmp_path / "out", "--rows", f"emb={latin}:{marked}")
    assert (result.returncode, result.stderr) == (
        2, f"subsetsaver: error: the old file '{latin}' is not UTF-8: byte 5 (0xe9) invalid continuation byte; "
           "save it as UTF-8\n")
    with pytest.raises(RowMapError) as raised:
        ss.RowMap.keep(marked)
    assert str(raised.value) == (f"the kept rows file '{marked}' is not UTF-8: byte 5 (0xff) invalid start byte; "
                                 "save it as UTF-8")
