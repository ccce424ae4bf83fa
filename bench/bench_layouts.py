"""Layout maps on a GPT-2 124M-shaped checkpoint (12 layers of width 768, random values, about
500 MB with no slots), each side a whole child process:

- ours: ``subsetsaver convert CKPT OUT --map gpt2-to-hf`` (no TensorFlow imported; streamed one
  rule at a time, read back and verified);
- tensorflow: the way Hugging Face's converters work: ``tf.train.load_checkpoint``, each tensor
  read and reshaped in numpy into one dict, then ``safetensors.numpy.save_file``.

The note gives each side's peak resident memory (``wait4``'s ``ru_maxrss``) and the largest tensor.
A second line converts a GPT-2-shaped checkpoint of about 2.5 GB (36 layers of width 1152) with
``--max-shard-size 1GB`` against the same TensorFlow reading followed by huggingface_hub's
``split_state_dict_into_shards_factory`` and one ``save_file`` a shard; where transformers is installed,
``GPT2LMHeadModel`` then loads the shards from the index and its embedding is compared bit for bit.
Sides alternate; the line is the median of 3 runs. Run: ``python bench/bench_layouts.py``.
"""

import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.bench_files import paired  # noqa: E402
from bench.report import print_line  # noqa: E402

TF_CONVERT = """
import sys
import tensorflow as tf
from safetensors.numpy import save_file
prefix, output = sys.argv[1], sys.argv[2]
reader = tf.train.load_checkpoint(prefix)
tensors = {}
for key in reader.get_variable_to_shape_map():
    if key.startswith("model/"):
        value = reader.get_tensor(key)
        name = key[len("model/"):].replace("/", ".")
        tensors[name] = value[0] if value.ndim == 3 else value
if len(sys.argv) > 3:  # sharded, as transformers' save_pretrained cuts it
    import json
    import os
    from huggingface_hub import split_state_dict_into_shards_factory
    split = split_state_dict_into_shards_factory(tensors, max_shard_size=sys.argv[3], filename_pattern=
                                                 "model{suffix}.safetensors", get_storage_size=lambda t: t.nbytes)
    for shard, names in split.filename_to_tensors.items():
        save_file({name: tensors[name] for name in names}, os.path.join(output, shard))
    with open(os.path.join(output, "model.safetensors.index.json"), "w") as handle:
        json.dump({"metadata": split.metadata, "weight_map": split.tensor_to_filename}, handle)
else:
    save_file(tensors, output)
"""


def gpt2_checkpoint(directory, layers=12, width=768, vocab=50257, context=1024):
    import numpy as np

    from subsetsaver.formats.tf import bundle as tf_bundle

    rng = np.random.default_rng(0)
    prefix = os.path.join(directory, "model.ckpt")
    with tf_bundle.BundleWriter(prefix) as writer:
        writer.add("model/wte", rng.standard_normal((vocab, width), np.float32))
        writer.add("model/wpe", rng.standard_normal((context, width), np.float32))
        for layer in range(layers):
            h = f"model/h{layer}"
            for name, shape in ((f"{h}/attn/c_attn/w", (1, width, 3 * width)), (f"{h}/attn/c_attn/b", (3 * width,)),
                                (f"{h}/attn/c_proj/w", (1, width, width)), (f"{h}/attn/c_proj/b", (width,)),
                                (f"{h}/mlp/c_fc/w", (1, width, 4 * width)), (f"{h}/mlp/c_fc/b", (4 * width,)),
                                (f"{h}/mlp/c_proj/w", (1, 4 * width, width)), (f"{h}/mlp/c_proj/b", (width,)),
                                (f"{h}/ln_1/g", (width,)), (f"{h}/ln_1/b", (width,)), (f"{h}/ln_2/g", (width,)),
                                (f"{h}/ln_2/b", (width,))):
                writer.add(name, rng.standard_normal(shape, np.float32))
        writer.add("model/ln_f/g", np.ones(width, np.float32))
        writer.add("model/ln_f/b", np.zeros(width, np.float32))
    with open(os.path.join(directory, "hparams.json"), "w") as handle:
        json.dump({"n_vocab": vocab, "n_ctx": context, "n_embd": width, "n_head": 12, "n_layer": layers}, handle)
    return prefix, vocab * width * 4


def run(report=print_line):
    directory = tempfile.mkdtemp(prefix="subsetsaver-layouts-")
    try:
        prefix, largest = gpt2_checkpoint(directory)
        size = sum(os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory))
        out = os.path.join(directory, "hf")
        script = os.path.join(directory, "tf_convert.py")
        with open(script, "w") as handle:
            handle.write(TF_CONVERT)
        ours = [sys.executable, "-m", "subsetsaver", "convert", prefix, out, "--map", "gpt2-to-hf", "--force"]
        theirs = [sys.executable, script, prefix, os.path.join(directory, "tf.safetensors")]
        (ours_s, ours_peak), (theirs_s, theirs_peak) = paired(ours, theirs)
        report(f"convert --map gpt2-to-hf, {size / 1e6:.0f} MB", ours_s, theirs_s,
               f"peak {ours_peak / 1e6:.0f} MB vs {theirs_peak / 1e6:.0f} MB; largest tensor {largest / 1e6:.0f} MB")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    run_sharded(report)


def run_sharded(report=print_line):
    directory = tempfile.mkdtemp(prefix="subsetsaver-shards-")
    try:
        prefix, largest = gpt2_checkpoint(directory, layers=36, width=1152)
        size = sum(os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory))
        script = os.path.join(directory, "tf_convert.py")
        with open(script, "w") as handle:
            handle.write(TF_CONVERT)
        os.makedirs(os.path.join(directory, "tf-shards"))
        ours = [sys.executable, "-m", "subsetsaver", "convert", prefix, os.path.join(directory, "hf"), "--map",
                "gpt2-to-hf", "--max-shard-size", "1GB", "--force"]
        theirs = [sys.executable, script, prefix, os.path.join(directory, "tf-shards"), "1GB"]
        (ours_s, ours_peak), (theirs_s, theirs_peak) = paired(ours, theirs)
        shards = [name for name in os.listdir(os.path.join(directory, "hf")) if name.startswith("model-")]
        report(f"convert --map gpt2-to-hf --max-shard-size 1GB, {size / 1e9:.2f} GB", ours_s, theirs_s,
               f"{len(shards)} shards; peak {ours_peak / 1e6:.0f} MB vs {theirs_peak / 1e6:.0f} MB; largest tensor "
               f"{largest / 1e6:.0f} MB (ours {(ours_peak - largest) / 2**20:.0f} MiB over it); "
               f"{loads_in_transformers(prefix, os.path.join(directory, 'hf'))}")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def loads_in_transformers(prefix, out_dir):
    """Whether transformers' GPT2LMHeadModel loads ``out_dir`` from its index with the checkpoint's embedding."""
    try:
        import transformers
    except ImportError:
        return "transformers not installed: no load"
    import numpy as np

    from subsetsaver.formats.tf import bundle as tf_bundle

    model = transformers.GPT2LMHeadModel.from_pretrained(out_dir)
    with tf_bundle.BundleReader(prefix) as reader:
        same = np.array_equal(reader.read("model/wte"), model.transformer.wte.weight.detach().numpy())
    return f"GPT2LMHeadModel loads it from the index, embedding {'bit-exact' if same else 'DIFFERENT'}"


if __name__ == "__main__":
    run()
