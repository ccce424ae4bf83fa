"""``python bench/run.py``: the same as ``python -m bench``."""

import os
import runpy

runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "__main__.py"), run_name="__main__")
