"""Crash safety: SIGKILL a process at random moments while it saves, then check what is on disk.

A *zygote* process (this file run as a script) imports TensorFlow once; for each trial it
forks a *saver* child that restores the latest checkpoint of a directory (as a restarted
training job does), then saves a ~20 MB plan in a loop (``global_step`` numbering,
``max_to_keep=3``), every variable filled with a value derived from the step. The test
kills the child with SIGKILL after a random delay and checks, before the next trial:

* ``tf.train.latest_checkpoint`` (or the npz backend's latest) names a checkpoint at least
  as new as the last save the child reported, and it restores bit-exact through a plan;
* every checkpoint under a final name (every ``.index`` and the data it points to, every
  ``*.npz``) and every one the state file lists reads back complete with its step's values;
* every ``PREFIX.subset.json`` manifest is whole JSON and sits beside a complete checkpoint.

Then the checkpoints the state file does not list are deleted (as an operator would; a
restarted Saver never deletes the files of an earlier process) and the next trial starts.
``SUBSETSAVER_CRASH_TRIALS`` (default 20 per backend) and ``SUBSETSAVER_CRASH_SEED`` tune it.
"""

import json
import os
import random
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

TRIALS = int(os.environ.get("SUBSETSAVER_CRASH_TRIALS", "20"))
SEED = int(os.environ.get("SUBSETSAVER_CRASH_SEED", str(time.time_ns() % 1_000_000)))


@pytest.fixture(autouse=True)
def _report_the_seed():
    """Shown with every failure (pytest prints a failing test's captured setup output)."""
    print(f"kill moments drawn with seed {SEED}; rerun with SUBSETSAVER_CRASH_SEED={SEED}")
    yield
KILL_WINDOW = 1.0          # seconds after the child restored: the kill lands uniformly in it
CHILD_LIFETIME = 60.0      # a saver child stops by itself after this long, whatever happens
MAX_TO_KEEP = 3
VARIABLES = 5              # float32 [1M] each: 20 MB, plus a partitioned [3, 64K] and the step
STEP_NAME = re.compile(r"^model-(\d+)(?:\.npz)?$")


# ---------------------------------------------------------------------------------
# The model and the saver child (run in the forked process; the checks use them too)
# ---------------------------------------------------------------------------------


def build(backend, sharded=False):
    """(graph, plan, fill op, step placeholder): fill_op sets every variable from the step."""
    import tensorflow as tf

    import subsetsaver as ss

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        step = v1.placeholder(tf.int64, [], name="step")
        variables = [v1.get_variable(f"big/v{i}", [1 << 20], initializer=v1.zeros_initializer(), use_resource=True)
                     for i in range(VARIABLES)]
        variables.append(v1.get_variable("big/split", [3, 1 << 16], initializer=v1.zeros_initializer(),
                                         partitioner=v1.fixed_size_partitioner(3), use_resource=True))
        global_step = v1.train.get_or_create_global_step()
        assigns = [global_step.assign(step)]
        for index, variable in enumerate(variables):
            value = tf.cast(step * 64 + index, tf.float32)
            parts = list(variable) if hasattr(variable, "_get_variable_list") else [variable]
            assigns += [part.assign(tf.fill(tf.shape(part), value)) for part in parts]
        fill = tf.group(*assigns)
    options = {"sharded": True} if sharded else {}
    the_plan = ss.plan(ss.everything(), graph, backend=backend, max_to_keep=MAX_TO_KEEP, **options)
    graph.finalize()
    return graph, the_plan, fill, step


def expected_value(name, step):
    """What the child writes into variable ``name`` at ``step``."""
    if name == "global_step":
        return np.int64(step)
    index = VARIABLES if name == "big/split" else int(name.rsplit("v", 1)[1])
    return np.float32(step * 64 + index)


def saver_child(backend, directory, sharded, numbered=True):
    """Restore the latest checkpoint (or initialize), then save steps forever; report on fd 1.

    ``numbered=False``: every save goes to the same prefix (no ``global_step``), overwriting it.
    """
    import tensorflow as tf

    graph, the_plan, fill, step = build(backend, sharded)
    with tf.compat.v1.Session(graph=graph) as sess:
        try:
            report = the_plan.restore_or_initialize(sess, directory)
        except Exception:  # a torn checkpoint (same-prefix trials): start over, as a user would have to
            report = the_plan.restore_or_initialize(sess, None)
        current = int(sess.run(the_plan.catalog.variables(["global_step"])[0]))
        os.write(1, f"restored {current} {report.checkpoint}\n".encode())
        deadline = time.monotonic() + CHILD_LIFETIME
        while time.monotonic() < deadline:
            current += 1
            sess.run(fill, {step: current})
            os.write(1, f"saving {current}\n".encode())
            prefix = the_plan.save(sess, os.path.join(directory, "model"), global_step=current if numbered else None)
            os.write(1, f"saved {current} {prefix}\n".encode())


def zygote_main():
    """Read one JSON trial per stdin line, fork a saver child for it, report 'child PID' and 'exit STATUS'."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow  # noqa: F401  (the point of the zygote: imported once, before any fork)

    import subsetsaver  # noqa: F401
    import subsetsaver.portable  # noqa: F401

    os.write(1, b"zygote ready\n")
    for line in sys.stdin:
        trial = json.loads(line)
        pid = os.fork()
        if pid == 0:
            status = 0
            try:
                saver_child(**trial)
            except BaseException as error:  # reported to the test through the exit status and stderr
                os.write(2, f"saver child failed: {type(error).__name__}: {error}\n".encode())
                status = 4
            os._exit(status)
        os.write(1, f"child {pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        os.write(1, f"exit {status}\n".encode())
    os._exit(0)


# ---------------------------------------------------------------------------------
# The test's side: run trials, check the directory
# ---------------------------------------------------------------------------------


class Zygote:
    def __init__(self):
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        self.children = []
        assert self.readline(120) == "zygote ready", self.stderr()

    def readline(self, timeout):
        readable, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not readable:
            raise AssertionError(f"the zygote said nothing for {timeout} s{self.stderr()}")
        return self.process.stdout.readline().decode().strip()

    def stderr(self):
        self.log.seek(0)
        text = self.log.read().decode("utf-8", "replace").strip()
        return "\n" + text[-3000:] if text else ""

    def trial(self, rng, **trial):
        """Start a saver child, kill it after a random delay; (restored step, saved steps, killed mid-save)."""
        self.process.stdin.write((json.dumps(trial) + "\n").encode())
        self.process.stdin.flush()
        kind, pid = self.readline(60).split()
        assert kind == "child"
        self.children.append(int(pid))
        line = self.readline(120)
        assert line.startswith("restored "), line + self.stderr()
        restored = int(line.split()[1])
        delay = rng.uniform(0, KILL_WINDOW)
        time.sleep(delay)
        os.kill(int(pid), signal.SIGKILL)
        saved, saving = [], False
        while True:
            line = self.readline(60)
            if line.startswith(("saving ", "saved ")):
                saving = line.startswith("saving ")
                if not saving:
                    saved.append(int(line.split()[1]))
                continue
            assert line == f"exit {signal.SIGKILL}", f"the saver child did not die by SIGKILL: {line}{self.stderr()}"
            return restored, saved, saving

    def close(self):
        try:
            self.process.stdin.close()
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        finally:
            for pid in self.children:  # each was SIGKILLed and reaped by the zygote; never leave one behind
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.process.stdout.close()
            self.log.close()


@pytest.fixture(scope="module")
def zygote():
    process = Zygote()
    try:
        yield process
    finally:
        process.close()


def step_of(name):
    match = STEP_NAME.match(name)
    return int(match.group(1)) if match else None


def assert_values(arrays, step, where):
    """Every array of a checkpoint holds exactly what the child wrote at ``step``."""
    assert sorted(arrays) == sorted(["global_step", "big/split"] + [f"big/v{i}" for i in range(VARIABLES)]), where
    for name, value in arrays.items():
        expected = expected_value(name, step)
        assert value.dtype == expected.dtype, f"{where}: {name} dtype {value.dtype}"
        shape = () if name == "global_step" else (3, 1 << 16) if name == "big/split" else (1 << 20,)
        assert value.shape == shape, f"{where}: {name} shape {value.shape}"
        assert (value == expected).all(), f"{where}: {name} does not hold step {step}'s values"


def read_tf_checkpoint(prefix):
    import tensorflow as tf

    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


class Checker:
    """The test process's view: one restore plan per backend (built once) and the directory checks."""

    def __init__(self, backend, directory):
        import tensorflow as tf

        self.backend, self.directory = backend, directory
        self.graph, self.plan, _, _ = build(backend)
        self.session = tf.compat.v1.Session(graph=self.graph)
        self.plan.restore_or_initialize(self.session, None)  # every variable has a value to compare
        self.findings = []  # (trial, text): what TensorFlow or the library left behind
        self.trial = None
        self._verified = {}  # path -> (signature of its files, step): unchanged files are not read again

    def latest(self):
        import tensorflow as tf

        from subsetsaver.planning import NpzBackend

        if self.backend == "tf":
            return tf.train.latest_checkpoint(self.directory)
        return NpzBackend.latest_checkpoint(self.directory)

    def complete_checkpoints(self, where):
        """{final name: step} of every checkpoint under a final name, each read back and checked whole."""
        from subsetsaver.formats import npz as npzfile

        found = {}
        for name in sorted(os.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            if self.backend == "tf" and name.endswith(".index"):
                path = path[:-len(".index")]
                read = read_tf_checkpoint
            elif self.backend == "npz" and name.endswith(".npz"):
                read = lambda p: npzfile.read(p)[1]  # noqa: E731  (structure and every checksum)
            else:
                continue
            step = step_of(os.path.basename(path))
            if step is None:  # a temporary name (a staged copy): see check_leftovers
                continue
            signature = self._signature(path)
            if self._verified.get(path) != signature:
                try:
                    assert_values(read(path), step, f"{where}: {name}")
                except Exception as error:  # noqa: BLE001  (the state file and manifests must not name it: checked next)
                    self.findings.append((self.trial, f"{name}: torn under its final name "
                                                      f"({type(error).__name__}: {str(error).splitlines()[0][:120]})"))
                    continue
                self._verified[path] = signature
            found[path] = step
        return found

    def _signature(self, path):
        """(name, inode, size, mtime) of every file of a checkpoint: any rewrite changes it."""
        directory, base = os.path.split(path)
        files = [n for n in os.listdir(directory) if n == base or n.startswith(base + ".data-") or n == base + ".index"]
        return tuple(sorted((n, s.st_ino, s.st_size, s.st_mtime_ns) for n in files
                            for s in [os.stat(os.path.join(directory, n))]))

    def check(self, trial, restored, saved):
        self.trial = trial
        where = f"{self.backend} trial {trial} (seed {SEED})"
        complete = self.complete_checkpoints(where)
        last_reported = saved[-1] if saved else restored
        latest = self.latest()
        if latest is None:  # killed before its first save was recorded, in an empty directory
            assert last_reported == 0 and set(complete.values()) <= {1}, f"{where}: no latest after {last_reported}"
            return 0
        latest_step = step_of(os.path.basename(latest))
        assert latest in complete, f"{where}: latest checkpoint {latest} is not complete"
        # the child may have finished one more save than it could report
        assert latest_step in (last_reported, last_reported + 1), f"{where}: latest is step {latest_step}"
        self.check_state_file(where, complete, latest)
        self.check_manifests(where, trial, complete)
        report = self.plan.restore_or_initialize(self.session, self.directory)
        assert report.checkpoint == latest and report.initialized == (), where
        values = self.restored_values()
        assert_values(values, latest_step, f"{where}: restored through the plan")
        self.check_leftovers(where, trial, complete)
        return latest_step

    def restored_values(self):
        """Every logical variable's value in the checker's session (partitions joined), one session.run."""
        cat = self.plan.catalog
        fetched = self.session.run([cat.variables([name]) for name in cat.ordered_names])
        return {name: np.concatenate(parts) if len(parts) > 1 else parts[0]
                for name, parts in zip(cat.ordered_names, fetched)}

    def check_state_file(self, where, complete, latest):
        import tensorflow as tf

        from subsetsaver.planning import STATE_FILENAME

        if self.backend == "tf":
            state = tf.train.get_checkpoint_state(self.directory)
            assert state.model_checkpoint_path == latest, where
            listed = list(state.all_model_checkpoint_paths)
        else:
            path = os.path.join(self.directory, STATE_FILENAME)
            if not os.path.exists(path):  # killed between the first file's rename and the first state write
                assert list(complete) == [latest], f"{where}: no state file beside {sorted(complete)}"
                return
            with open(path) as handle:
                state = json.load(handle)  # written atomically: always whole JSON
            assert os.path.join(self.directory, state["latest"]) == latest, where
            listed = [os.path.join(self.directory, name) for name in state["kept"]]
        for prefix in listed:
            assert prefix in complete, f"{where}: the state file lists {prefix}, which is not a complete checkpoint"

    def check_manifests(self, where, trial, complete):
        from subsetsaver.formats import subset_manifest as manifest_module

        for name in sorted(os.listdir(self.directory)):
            if not name.endswith(manifest_module.SUFFIX):
                continue
            prefix = os.path.join(self.directory, name[:-len(manifest_module.SUFFIX)])
            content = manifest_module.read_manifest(prefix)  # whole JSON, or CorruptCheckpointError
            assert content["checkpoint"] == os.path.basename(prefix), where
            if prefix not in complete:
                self.findings.append((trial, f"manifest {name} names a checkpoint that is gone"))
        return None

    def check_leftovers(self, where, trial, complete):
        """Anything else in the directory: temporary files and remains of deleted checkpoints, never under a final name."""
        for name in sorted(os.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            if path in complete or name in ("checkpoint", "checkpoint_npz.json") or name.endswith(".subset.json"):
                continue
            if ".tmp" in name or ".staging-" in name or "tempstate" in name or name.endswith("_temp"):
                self.findings.append((trial, f"{name}: a temporary file"))
                continue
            if self.backend == "tf" and re.search(r"\.(index|meta|data-\d{5}-of-\d{5})$", name):
                if re.sub(r"\.(index|meta|data-\d{5}-of-\d{5})$", "", path) in complete:
                    continue
                # a .meta or .data file whose .index is gone: TensorFlow deletes .index first
                self.findings.append((trial, f"{name}: part of a deleted checkpoint (its .index is gone)"))
                continue
            raise AssertionError(f"{where}: unexpected file {name}")

    def prune(self, latest):
        """Delete checkpoints the state file does not keep (a restarted Saver never deletes them)."""
        import tensorflow as tf

        if self.backend == "tf":
            keep = set(tf.train.get_checkpoint_state(self.directory).all_model_checkpoint_paths)
        elif os.path.exists(os.path.join(self.directory, "checkpoint_npz.json")):
            with open(os.path.join(self.directory, "checkpoint_npz.json")) as handle:
                keep = {os.path.join(self.directory, n) for n in json.load(handle)["kept"]}
        else:  # see check_state_file: the latest alone, found by its name
            keep = set()
        keep.add(latest)
        for name in os.listdir(self.directory):
            path = os.path.join(self.directory, name)
            stem = re.match(r"^(model-\d+(?:\.npz)?)", name)
            if stem and os.path.join(self.directory, stem.group(1)) not in keep:
                if os.path.isdir(path):
                    import shutil

                    shutil.rmtree(path)
                else:
                    os.remove(path)


@pytest.mark.parametrize("backend", ["tf", "npz"])
def test_sigkill_during_saves_never_loses_or_tears_a_checkpoint(zygote, tmp_path, backend):
    rng = random.Random(f"{SEED}-{backend}")
    checker = Checker(backend, str(tmp_path))
    steps, saves, mid_save = [], 0, 0
    try:
        for trial in range(TRIALS):
            sharded = backend == "tf" and trial % 2 == 1  # both TensorFlow paths: SaveV2, and shards + merge
            restored, saved, killed_mid_save = zygote.trial(rng, backend=backend, directory=str(tmp_path), sharded=sharded)
            if trial:
                assert restored == steps[-1], f"trial {trial}: the child restored step {restored}, not {steps[-1]}"
            saves += len(saved)
            mid_save += killed_mid_save
            latest = checker.check(trial, restored, saved)
            steps.append(latest)
            if latest:
                checker.prune(checker.latest())
    finally:
        checker.session.close()
    assert len(steps) == TRIALS
    print(f"\n{backend}: {TRIALS} trials, {mid_save} killed mid-save, {saves} completed saves, "
          f"steps {steps}, seed {SEED}")
    for trial, text in checker.findings:
        print(f"  trial {trial}: {text}")
    assert mid_save >= TRIALS // 2, f"only {mid_save} of {TRIALS} kills landed during a save"
    assert saves >= TRIALS // 4, f"only {saves} saves completed in {TRIALS} trials: retiring old ones went untested"
    torn = [text for _, text in checker.findings if "torn under its final name" in text]
    assert not torn, f"{len(torn)} checkpoint(s) torn under a final name, e.g. {torn[0]}"
    stale = [text for _, text in checker.findings if text.startswith("manifest")]
    assert not stale, f"{len(stale)} trial(s) left a manifest beside a deleted checkpoint, e.g. {stale[0]}"


# ---------------------------------------------------------------------------------
# Overwriting one prefix: TensorFlow tears it; what the library does with a torn checkpoint
# ---------------------------------------------------------------------------------

SAME_PREFIX_TRIALS = int(os.environ.get("SUBSETSAVER_CRASH_SAME_PREFIX_TRIALS", "8"))


def same_prefix_outcome(checker, directory):
    """('complete', step) or ('torn', CorruptCheckpointError text) for the checkpoint the state file names."""
    from subsetsaver.errors import CorruptCheckpointError

    latest = checker.latest()
    if latest is None:
        return "none", None
    before = checker.restored_values()
    try:
        report = checker.plan.restore_or_initialize(checker.session, directory)
    except CorruptCheckpointError as error:
        after = checker.restored_values()
        assert all(np.array_equal(after[n], before[n]) for n in before), "a refused restore changed variables"
        assert f"'{latest}'" in str(error), str(error)
        return "torn", str(error)
    values = checker.restored_values()
    step = int(values["global_step"])
    assert report.checkpoint == latest
    assert_values(values, step, f"{latest} restored through the plan")
    return "complete", step


@pytest.mark.parametrize("backend", ["tf", "npz"])
def test_sigkill_while_overwriting_one_prefix(zygote, tmp_path, backend):
    """Saves without global_step rewrite one prefix in place. npz replaces the file atomically; TensorFlow's
    SaveV2 renames the new .data over the old one before it renames the new .index, and
    MergeV2Checkpoints (sharded=True) writes the merged .index in place: a kill in between leaves
    the state file naming a torn checkpoint, the only one there is."""
    rng = random.Random(f"{SEED}-{backend}-same")
    checker = Checker(backend, str(tmp_path))
    outcomes = []
    try:
        for trial in range(SAME_PREFIX_TRIALS):
            sharded = backend == "tf" and trial % 2 == 1
            zygote.trial(rng, backend=backend, directory=str(tmp_path), sharded=sharded, numbered=False)
            outcomes.append((sharded,) + same_prefix_outcome(checker, str(tmp_path)))
    finally:
        checker.session.close()
    print(f"\n{backend} same prefix: {[o[1] for o in outcomes]}")
    torn = [o for o in outcomes if o[1] == "torn"]
    assert not torn, (f"the only checkpoint was torn in {len(torn)} of {len(outcomes)} kills "
                      f"({sum(o[0] for o in torn)} sharded): {torn[0][2].splitlines()[0][:200]}")


def restore_recording_warnings(checker, directory):
    """(report, [warning texts]) of a directory restore through the checker's plan."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = checker.plan.restore_or_initialize(checker.session, directory)
    return report, [str(w.message) for w in caught]


def save_steps_1_and_2(backend, directory, then=None):
    """model-1 and model-2 holding steps 1 and 2; ``then(sess, the_plan, fill, step)`` runs before the session closes."""
    import tensorflow as tf

    graph, the_plan, fill, step = build(backend)
    with tf.compat.v1.Session(graph=graph) as sess:
        the_plan.restore_or_initialize(sess, None)
        for value in (1, 2):
            sess.run(fill, {step: value})
            latest = the_plan.save(sess, os.path.join(directory, "model"), global_step=value)
        if then is not None:
            then(sess, the_plan, fill, step)
    return latest


def torn_directory(directory, how):
    """model-1 (step 1) complete, model-2 (latest in the state file) torn the way a kill tears it."""
    import tensorflow as tf

    def tear(sess, the_plan, fill, step):
        if how == "new .data, old .index":  # SaveV2 killed between renaming its .data and its .index
            with open(prefix + ".index", "rb") as handle:
                old_index = handle.read()
            sess.run(fill, {step: 5})
            the_plan.save(sess, os.path.join(directory, "model"), global_step=2)
            # (the replacement's data took the other shard count's names: put it where the old index looks)
            os.replace(prefix + ".data-00000-of-00002", prefix + ".data-00000-of-00001")
            os.remove(prefix + ".data-00001-of-00002")
            with open(prefix + ".index", "wb") as handle:
                handle.write(old_index)
        else:  # MergeV2Checkpoints killed while writing the merged .index in place
            size = os.path.getsize(prefix + ".index")
            os.truncate(prefix + ".index", size // 2)

    prefix = os.path.join(directory, "model-2")
    assert save_steps_1_and_2("tf", directory, tear) == prefix
    assert tf.train.latest_checkpoint(directory) == prefix
    return prefix


@pytest.mark.parametrize("how", ["new .data, old .index", "truncated .index"])
def test_a_torn_tf_checkpoint_is_refused_and_the_directory_restore_falls_back(tmp_path, how):
    from subsetsaver.errors import CorruptCheckpointError

    torn = torn_directory(str(tmp_path), how)
    checker = Checker("tf", str(tmp_path))
    try:
        before = checker.restored_values()
        with pytest.raises(CorruptCheckpointError) as error:
            checker.plan.restore_or_initialize(checker.session, torn)
        after = checker.restored_values()
        assert all(np.array_equal(after[n], before[n]) for n in before), "a refused restore changed variables"
        message = str(error.value)
        assert f"'{torn}'" in message
        cause = "Checksum does not match" if how.startswith("new") else "does not end with the magic number of a TensorFlow table"
        assert cause in message.splitlines()[0], message
        report, warned = restore_recording_warnings(checker, str(tmp_path))
        assert report.checkpoint == os.path.join(str(tmp_path), "model-1")
        assert_values(checker.restored_values(), 1, "fallback")
        assert [w for w in warned if w.startswith(f"skipped damaged checkpoint '{torn}' (")], warned
    finally:
        checker.session.close()


@pytest.mark.parametrize("how", ["truncated", "one flipped data byte"])
def test_a_torn_npz_checkpoint_is_refused_and_the_directory_restore_falls_back(tmp_path, how):
    from subsetsaver.errors import CorruptCheckpointError

    latest = save_steps_1_and_2("npz", str(tmp_path))
    if how == "truncated":
        os.truncate(latest, os.path.getsize(latest) // 2)
    else:
        with open(latest, "r+b") as handle:
            handle.seek(os.path.getsize(latest) // 2)
            byte = handle.read(1)
            handle.seek(-1, 1)
            handle.write(bytes([byte[0] ^ 1]))
    checker = Checker("npz", str(tmp_path))
    try:
        before = checker.restored_values()
        with pytest.raises(CorruptCheckpointError) as error:
            checker.plan.restore_or_initialize(checker.session, latest)
        assert str(error.value).startswith(f"'{latest}'")
        after = checker.restored_values()
        assert all(np.array_equal(after[n], before[n]) for n in before), "a refused restore changed variables"
        report, warned = restore_recording_warnings(checker, str(tmp_path))
        assert report.checkpoint == os.path.join(str(tmp_path), "model-1.npz")
        assert_values(checker.restored_values(), 1, "fallback")
        if how != "truncated":  # a truncated file is not even a candidate: its structure does not validate
            assert [w for w in warned if w.startswith(f"skipped damaged checkpoint '{latest}' (")], warned
    finally:
        checker.session.close()


if __name__ == "__main__":
    zygote_main()
