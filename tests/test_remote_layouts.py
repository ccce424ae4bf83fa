"""A layout map straight from a bucket: the selected tensors' bytes are fetched, the optimizer state is
not, and nothing is copied down first (fake-gcs-server behind gcsfs, moto's S3 server behind s3fs)."""

import json
import os

import fsspec
import numpy as np
from test_layout_maps import gpt2_checkpoint

import subsetsaver as ss
from subsetsaver.formats import safetensors


def _with_adam_slots(directory):
    """A GPT-2-shaped checkpoint whose every weight has Adam's two slots: two thirds of its bytes are state."""
    _, arrays = gpt2_checkpoint(directory, layers=2, width=64)
    weights = {name: value for name, value in arrays.items() if name.startswith("model/") and "/Adam" not in name}
    slots = {f"{name}/Adam{suffix}": np.zeros_like(value) for name, value in weights.items() for suffix in ("", "_1")}
    checkpoint, arrays = gpt2_checkpoint(directory, layers=2, width=64, extra=slots)
    return checkpoint, arrays, sum(value.nbytes for value in weights.values())


def test_a_bucket_checkpoint_converts_fetching_only_the_kept_bytes(server_store, tmp_path):
    checkpoint, arrays, kept = _with_adam_slots(tmp_path / "gpt2")
    filesystem = fsspec.filesystem(server_store.protocol)
    for name in os.listdir(tmp_path / "gpt2"):
        filesystem.put_file(str(tmp_path / "gpt2" / name), server_store.url(name))
    server_store.relay.reset()

    report = ss.convert(server_store.url("model.ckpt"), tmp_path / "hf", map="gpt2-to-hf", max_shard_size="100KB")

    fetched = server_store.relay.received
    assert len(report.dropped) == 2 * 28 + 1  # both slots of each of the 28 weights, and the step
    assert fetched <= 1.05 * kept + 64 * 1024, (fetched, kept)  # the index and the headers, no slot
    with open(tmp_path / "hf" / safetensors.INDEX_NAME) as handle:
        weight_map = json.load(handle)["weight_map"]
    (_, fused), = safetensors.read(str(tmp_path / "hf" / weight_map["h.1.attn.c_attn.weight"]),
                                   ["h.1.attn.c_attn.weight"])
    assert fused.tobytes() == arrays["model/h1/attn/c_attn/w"][0].tobytes()
