"""The whole story on real MNIST, end to end.

Train the classic TF1 CNN with hand-written batch norm, save it three ways (a full
Saver, trainable variables only, and the right subset), restore each in a fresh graph
and compare test accuracy and file sizes, audit the trainable-only mistake, draw the
variable sets, and move weights plus Adam slots through a portable .npz file.

    python examples/mnist_cnn/run.py            # 4.5 minutes on 2 busy CPU cores
    python examples/mnist_cnn/run.py --quick    # a few seconds of training, the same story

Runs are repeatable: seeded, with TensorFlow's deterministic ops, a fixed thread count and
oneDNN's kernels off (oneDNN picks its kernels by the CPU's instruction set; TensorFlow's own
kernels are fixed when the wheel is built), so the same data prints the same figures. TensorFlow's own log lines
(oneDNN, CUDA, absl) are kept out of the output unless ``--verbose``.
Exits 1 if the right subset does not reproduce the trained accuracy exactly.
"""

import argparse
import contextlib
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from subsetsaver.cli.quiet import quiet  # noqa: E402

# Before TensorFlow is imported: it reads this once, as it loads.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
QUIET = contextlib.ExitStack()
if __name__ == "__main__":  # from before TensorFlow is imported: its C++ side logs while it loads
    QUIET.enter_context(quiet(verbose="--verbose" in sys.argv[1:]))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from data import load_mnist  # noqa: E402
from model import build  # noqa: E402
from tqdm import tqdm  # noqa: E402

import subsetsaver as ss  # noqa: E402

v1 = tf.compat.v1
RIGHT_SUBSET = ss.trainable() | ss.bn_stats()
SESSION_CONFIG = v1.ConfigProto(inter_op_parallelism_threads=1, intra_op_parallelism_threads=2)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="training steps (default 1000)")
    parser.add_argument("--limit", type=int, default=None, help="use at most this many digits in all")
    parser.add_argument("--quick", action="store_true", help="150 steps on 2,000 digits")
    parser.add_argument("--data", help="a mnist.npz file (as Keras downloads it)")
    parser.add_argument("--download", action="store_true",
                        help="let Keras download the full MNIST set when it is not cached (default: offline)")
    parser.add_argument("--out", default="out/mnist_cnn", help="output folder (default out/mnist_cnn)")
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verbose", action="store_true", help="let TensorFlow's log lines through")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.limit = 150, args.limit or 2000
    return args


def batches(digits, batch_size, seed):
    """An endless, reproducible stream of (images, labels) training batches."""
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(len(digits.y_train))
        for start in range(0, len(order) - batch_size + 1, batch_size):
            index = order[start:start + batch_size]
            yield digits.x_train[index], digits.y_train[index]


def train(sess, net, stream, steps, description):
    t = net.tensors
    losses = []
    for _ in tqdm(range(steps), desc=description, unit="step", file=sys.stdout, mininterval=1.0):
        images, labels = next(stream)
        _, loss = sess.run([t["train_op"], t["loss"]],
                           {t["x"]: images, t["labels"]: labels, t["phase_train"]: True, t["keep_prob"]: 0.5})
        losses.append(loss)
    return losses


def predict(sess, net, digits):
    """Test-set predictions with inference-time batch norm (moving averages), in fixed chunks."""
    t = net.tensors
    return np.concatenate([sess.run(t["logits"], {t["x"]: digits.x_test[start:start + 500]}).argmax(axis=1)
                           for start in range(0, len(digits.y_test), 500)])


def data_file_bytes(prefix):
    directory, base = os.path.split(prefix)
    return sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory)
               if f.startswith(base + ".data-"))


def restored_predictions(selector, prefix, digits, seed):
    """Build the model again in a fresh graph (other random initial values), restore, predict."""
    net = build(seed=seed + 1)
    with net.graph.as_default(), v1.Session(graph=net.graph, config=SESSION_CONFIG) as sess:
        if selector is None:
            v1.train.Saver().restore(sess, prefix)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ss.SubsetSaverWarning)  # the audit below says it properly
                plan = ss.plan(selector, net.graph)
            plan.restore_or_initialize(sess, prefix)
        return predict(sess, net, digits)


def save_three_ways(sess, net, directory):
    """A full Saver, trainable variables only, and the right subset; with estimates."""
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ss.SubsetSaverWarning)
        trainable_plan = ss.plan(ss.trainable(), net.graph)
        right_plan = ss.plan(RIGHT_SUBSET, net.graph)
    for folder in ("full", "trainable", "subset"):
        os.makedirs(os.path.join(directory, folder), exist_ok=True)
    with net.graph.as_default():
        prefix = v1.train.Saver().save(sess, os.path.join(directory, "full", "model"), write_meta_graph=False)
    rows.append(("full Saver", None, prefix, right_plan.sizes.full_data_bytes))
    for label, folder, plan in (("trainable() only", "trainable", trainable_plan),
                                (repr(RIGHT_SUBSET), "subset", right_plan)):
        prefix = plan.save(sess, os.path.join(directory, folder, "model"))
        rows.append((label, plan.selector, prefix, plan.sizes.data_bytes))
    return rows, trainable_plan, right_plan


def print_table(rows):
    headers = ("checkpoint", "estimated .data", "actual .data", "test accuracy", "same predictions")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))))


def continue_exactly(sess, net, digits, directory, seed, steps=5):
    """Weights and Adam slots through a portable .npz: a restored run continues exactly."""
    path = ss.save_npz(sess, os.path.join(directory, "model.npz"), ss.everything(), net.graph)
    stream = list(_take(batches(digits, 50, seed + 7), steps))

    def losses(session, network):
        t = network.tensors
        return [session.run([t["train_op"], t["loss"]],
                            {t["x"]: x, t["labels"]: y, t["phase_train"]: True, t["keep_prob"]: 1.0})[1]
                for x, y in stream]

    uninterrupted = losses(sess, net)
    fresh = build(seed=seed + 2)
    with v1.Session(graph=fresh.graph, config=SESSION_CONFIG) as fresh_sess:
        report = ss.restore_npz(fresh_sess, path, ss.everything(), fresh.graph)
        resumed = losses(fresh_sess, fresh)
    return path, report, uninterrupted, resumed


def _take(iterator, count):
    for _ in range(count):
        yield next(iterator)


def main(argv=None):
    args = parse_args(argv)
    tf.config.experimental.enable_op_determinism()  # the same figures on every run
    os.makedirs(args.out, exist_ok=True)
    digits = load_mnist(args.data, args.limit, seed=args.seed, download=args.download)
    print(f"MNIST: {len(digits.y_train)} training and {len(digits.y_test)} test digits from {digits.source}")

    net = build(seed=args.seed)
    sess = v1.Session(graph=net.graph, config=SESSION_CONFIG)
    with net.graph.as_default():
        sess.run(v1.global_variables_initializer())
    train(sess, net, batches(digits, args.batch_size, args.seed), args.steps, "training")
    trained_predictions = predict(sess, net, digits)
    trained = float((trained_predictions == digits.y_test).mean())
    print(f"\ntrained test accuracy: {trained:.4f}\n")

    saves, trainable_plan, right_plan = save_three_ways(sess, net, os.path.join(args.out, "checkpoints"))
    rows, accuracies, same = [], {}, {}
    for label, selector, prefix, estimated in saves:
        predictions = restored_predictions(selector, prefix, digits, args.seed)
        accuracies[label] = float((predictions == digits.y_test).mean())
        same[label] = int((predictions == trained_predictions).sum())
        rows.append((label, f"{estimated:,} B", f"{data_file_bytes(prefix):,} B", f"{accuracies[label]:.4f}",
                     f"{same[label]:,} of {len(trained_predictions):,}"))
    print("Each checkpoint restored into a fresh graph:")
    print_table(rows)
    print("\n" + right_plan.summary())

    print("\nThe audit of the trainable-only selection:")
    for finding in ss.audit(trainable_plan):
        print(f"  [{finding.severity}] {finding.code}: {finding.message}")
    print(f"The audit of {RIGHT_SUBSET!r}: {len([f for f in ss.audit(right_plan) if f.severity == 'error'])} errors")

    sets_path = ss.draw_sets(
        {"trainable": ss.trainable(), "conv_1/bn": ss.scope("conv_1/bn"), "conv_2/bn": ss.scope("conv_2/bn")},
        os.path.join(args.out, "sets.png"), saved=RIGHT_SUBSET, graph=net.graph,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ss.SubsetSaverWarning)
        tree_path = ss.draw_plan(trainable_plan, os.path.join(args.out, "plan.svg"))
    for warning in caught:
        print(f"  note: {warning.message}")
    print(f"\ndiagrams: {sets_path}, {tree_path}")

    npz_path, report, uninterrupted, resumed = continue_exactly(sess, net, digits, args.out, args.seed)
    sess.close()
    print(f"\nportable checkpoint {npz_path}: {len(report.restored)} variables (weights, Adam slots, "
          f"statistics, step), {os.path.getsize(npz_path):,} bytes")
    print("losses of 5 more steps, uninterrupted:", " ".join(f"{v:.6f}" for v in uninterrupted))
    print("losses of 5 more steps, restored:     ", " ".join(f"{v:.6f}" for v in resumed))

    right = accuracies[repr(RIGHT_SUBSET)]
    failures = []
    if right != trained:
        failures.append(f"the right subset restored {right:.4f}, trained was {trained:.4f}")
    if accuracies["full Saver"] != trained:
        failures.append("the full Saver did not reproduce the trained accuracy")
    if same[repr(RIGHT_SUBSET)] != len(trained_predictions):
        failures.append("the right subset changed some predictions")
    if [float(v) for v in resumed] != [float(v) for v in uninterrupted]:
        failures.append("training resumed from the .npz file did not continue exactly")
    if failures:
        print("\nFAILED: " + "; ".join(failures))
        return 1
    changed = len(trained_predictions) - same["trainable() only"]
    print(f"\nOK: the right subset reproduces every prediction and the trained accuracy ({trained:.4f}); "
          f"trainable-only changes {changed} predictions and gives {accuracies['trainable() only']:.4f}; "
          "the .npz run continues exactly.")
    return 0


if __name__ == "__main__":
    with QUIET:
        status = main()
    sys.exit(status)
