"""Regenerate the pictures of the MNIST-style CNN used in the README and the guide.

    python docs/img/make_images.py

writes ``docs/img/mnist_sets.png`` (the trainable variables and the two batch-norm scopes,
area following bytes, shaded where ``trainable() | scope('conv_1/bn') | scope('conv_2/bn')``
saves) and ``docs/img/mnist_plan.svg`` (the scope tree of a ``trainable()``-only plan: the
auditor flags the batch-norm moving averages it forgets), plus ``mnist_plan.dot``.
"""

import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests"))  # the MNIST-style CNN builder the tests use

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import graphs  # noqa: E402

import subsetsaver as ss  # noqa: E402
from subsetsaver.draw import draw_plan, draw_sets  # noqa: E402
from subsetsaver.planning import plan  # noqa: E402


def main():
    model = graphs.mnist_cnn()
    sets = {"trainable": ss.trainable(), "conv_1/bn": ss.scope("conv_1/bn"), "conv_2/bn": ss.scope("conv_2/bn")}
    saved = ss.trainable() | ss.scope("conv_1/bn") | ss.scope("conv_2/bn")
    print(draw_sets(sets, os.path.join(HERE, "mnist_sets.png"), saved=saved, graph=model.graph))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ss.SubsetSaverWarning)  # the plan's audit: the picture shows it
        forgetful = plan(ss.trainable(), model.graph)
    print(draw_plan(forgetful, os.path.join(HERE, "mnist_plan.svg")))


if __name__ == "__main__":
    main()
