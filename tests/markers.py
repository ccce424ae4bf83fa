"""Markers shared by the tests: conditions a fresh machine may lack, each with its reason.

Example::

    from markers import needs_dot

    @needs_dot
    def test_svg(tmp_path): ...
"""

import os
import shutil

import pytest

# A fresh machine with only Python has no Graphviz `dot`; CI installs it, and there the tests must run.
needs_dot = pytest.mark.skipif(
    shutil.which("dot") is None and not os.environ.get("CI"),
    reason="Graphviz's dot program is not installed (apt-get install graphviz); CI installs it and runs this",
)
