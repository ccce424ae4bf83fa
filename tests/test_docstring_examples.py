"""Every ``>>>`` example in the package's docstrings runs and prints what it shows.

An example that needs a session, a graph or a checkpoint on disk is written as plain code (no
prompts, its result as a comment); a prompt promises that the lines run as they stand.
"""

import doctest
import importlib
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "subsetsaver"


def module_names():
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>>" not in path.read_text(encoding="utf-8"):
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_the_package_has_runnable_examples():
    assert len(module_names()) >= 20


@pytest.mark.parametrize("name", module_names())
def test_the_examples_of_a_module_run(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    failures = []
    examples = 0
    for test in finder.find(module, name):
        examples += len(test.examples)
        out = []
        result = runner.run(test, out=out.append, clear_globs=True)
        if result.failed:
            failures.append("".join(out))
    assert examples > 0, f"{name} shows '>>>' outside a docstring example doctest can find"
    assert not failures, "\n".join(failures)[-3000:]
