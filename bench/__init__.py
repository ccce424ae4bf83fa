"""Benchmarks: each line is our time against TensorFlow's own way, measured in the same run."""
