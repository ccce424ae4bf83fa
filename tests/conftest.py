"""Shared test setup: the graph builders live in tests/graphs.py, importable as ``graphs``."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
