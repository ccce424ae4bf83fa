"""Every ```python block in docs/ runs: the blocks of one page run in order, in a fresh process."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
PAGES = sorted(p for p in DOCS.glob("*.md") if BLOCK.search(p.read_text(encoding="utf-8")))


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_code_samples_run(page, tmp_path):
    code = "\n".join(BLOCK.findall(page.read_text(encoding="utf-8")))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "MPLBACKEND": "Agg"}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, f"{page.name}:\n{result.stderr[-3000:]}"
