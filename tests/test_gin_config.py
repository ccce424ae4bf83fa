"""read_gin_config: the architecture of a Mesh TensorFlow T5 run off its operative_config.gin, without gin.
The file below is laid out as ``gin.operative_config_str()`` writes one (macros, scoped bindings, ``\\``
continuations, lists over several lines, ``@references``); refusals are one LayoutMapError each."""

import pytest

from subsetsaver.errors import LayoutMapError
from subsetsaver.layouts.gin_config import MAX_DEPTH, MAX_GIN_BYTES, GinBindings, gin_bytes, read_gin_config

OPERATIVE = """\
import mesh_tensorflow.optimize
import mesh_tensorflow.transformer.transformer_layers

# Macros:
# ==============================================================================
d_ff = 2048
d_kv = 64
d_model = 768
dropout_rate = 0.1
num_heads = 12
num_layers = 12

# Parameters for Bitransformer:
# ==============================================================================
Bitransformer.shared_embedding = True

# Parameters for decoder/DenseReluDense:
# ==============================================================================
decoder/DenseReluDense.activation = ['gelu', 'linear']
decoder/DenseReluDense.hidden_size = %d_ff

# Parameters for encoder/DenseReluDense:
# ==============================================================================
encoder/DenseReluDense.activation = ['gelu', 'linear']
encoder/DenseReluDense.hidden_size = %d_ff

# Parameters for decoder/EncDecAttention:
# ==============================================================================
decoder/EncDecAttention.relative_attention_type = None

# Parameters for decoder/make_layer_stack:
# ==============================================================================
decoder/make_layer_stack.layers = \\
    [@mesh_tensorflow.transformer.transformer_layers.SelfAttention,
     @mesh_tensorflow.transformer.transformer_layers.EncDecAttention,
     @mesh_tensorflow.transformer.transformer_layers.DenseReluDense]
decoder/make_layer_stack.num_layers = 10

# Parameters for encoder/make_layer_stack:
# ==============================================================================
encoder/make_layer_stack.num_layers = %num_layers

# Parameters for SelfAttention:
# ==============================================================================
SelfAttention.dropout_rate = %dropout_rate
SelfAttention.fold_scaling_into_initializer = True
SelfAttention.key_value_size = %d_kv
SelfAttention.num_heads = %num_heads
SelfAttention.relative_attention_num_buckets = 32
SelfAttention.relative_attention_type = 'bias_shared'

# Parameters for sublayer_rms_norm:
# ==============================================================================
sublayer_rms_norm.epsilon = 1e-06
sublayer_rms_norm.name = 'rms_norm'

# Parameters for Unitransformer:
# ==============================================================================
transformer.Unitransformer.d_model = %d_model
Unitransformer.positional_embedding = False
Unitransformer.sinusoid_positional_embedding = False
Unitransformer.vocab_divisor = 128
decoder/Unitransformer.shared_embedding_and_softmax_weights = False
encoder/Unitransformer.shared_embedding_and_softmax_weights = True  # the encoder has no softmax
"""

EXPECTED = {"d_model": 768, "d_ff": 2048, "d_kv": 64, "num_heads": 12, "num_layers": 12, "num_decoder_layers": 10,
            "relative_attention_num_buckets": 32, "layer_norm_epsilon": 1e-06, "dropout_rate": 0.1,
            "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False, "shared_embedding": True,
            "position_embedding": "relative_bias_shared"}


def written(tmp_path, text):
    path = tmp_path / "operative_config.gin"
    path.write_text(text, encoding="utf-8")
    return path


def refused(tmp_path, text):
    path = written(tmp_path, text)
    with pytest.raises(LayoutMapError) as error:
        read_gin_config(path)
    return str(error.value).replace(str(path), "GIN")


def test_the_architecture_is_read_through_macros_scopes_and_continuations(tmp_path):
    assert read_gin_config(written(tmp_path, OPERATIVE)) == EXPECTED


def test_a_scoped_binding_wins_over_the_unscoped_one_and_a_later_binding_over_an_earlier(tmp_path):
    text = OPERATIVE + "encoder/make_layer_stack.num_layers = 3\nnum_heads = 6\n"
    assert read_gin_config(written(tmp_path, text))["num_layers"] == 3
    assert read_gin_config(written(tmp_path, text))["num_heads"] == 6
    bindings = GinBindings.parse("A.x = 1\nencoder/A.x = 2\n")
    assert bindings.get("encoder", "A", "x", int) == 2 and bindings.get("decoder", "A", "x", int) == 1


def test_relu_and_position_embeddings_read_as_their_names(tmp_path):
    text = OPERATIVE.replace("['gelu', 'linear']", "'relu'") + "Unitransformer.positional_embedding = True\n"
    config = read_gin_config(written(tmp_path, text))
    assert (config["feed_forward_proj"], config["position_embedding"]) == ("relu", "absolute+relative_bias_shared")
    text = OPERATIVE.replace("['gelu', 'linear']", "['linear', 'gelu']")
    assert read_gin_config(written(tmp_path, text))["feed_forward_proj"] == "linear * gelu"


@pytest.mark.parametrize("change, message", [
    (("encoder/make_layer_stack.num_layers = %num_layers\n", ""),
     "gin config 'GIN' binds no encoder/make_layer_stack.num_layers; give the run's operative_config.gin, which "
     "binds every parameter the run used"),
    (("decoder/DenseReluDense.hidden_size = %d_ff", "decoder/DenseReluDense.hidden_size = 1024"),
     "gin config 'GIN': the encoder's DenseReluDense.hidden_size is 2048 and the decoder's 1024; one T5 config says "
     "one value; convert a run whose encoder and decoder share it"),
    (("num_heads = 12", "num_heads = %heads"),
     "gin config 'GIN', line 10: SelfAttention.num_heads = %heads names no macro of the file"),
    (("num_heads = 12", "num_heads = %num_heads"),
     "gin config 'GIN', line 10: SelfAttention.num_heads follows over 32 macros (a cycle?)"),
    (("d_kv = 64", "d_kv = 'sixty-four'"),
     "gin config 'GIN', line 7: SelfAttention.key_value_size = 'sixty-four' is not a count"),
    (("d_kv = 64", "d_kv = -64"), "gin config 'GIN', line 7: SelfAttention.key_value_size = -64 is not a count"),
    (("sublayer_rms_norm.epsilon = 1e-06", "sublayer_rms_norm.epsilon = @tiny()"),
     "gin config 'GIN', line 54: sublayer_rms_norm.epsilon = @tiny() is not a Python literal"),
    (("Bitransformer.shared_embedding = True", "Bitransformer.shared_embedding = 1"),
     "gin config 'GIN', line 15: Bitransformer.shared_embedding = 1 is not True or False"),
    (("SelfAttention.fold_scaling_into_initializer = True", "SelfAttention.fold_scaling_into_initializer = False"),
     "'GIN' scales queries at run time (SelfAttention.fold_scaling_into_initializer = False); T5's layouts fold "
     "that scale into the query weights; convert a run with the T5 default (True)"),
])
def test_a_missing_or_unusable_binding_is_one_error_naming_it(tmp_path, change, message):
    old, new = change
    assert old in OPERATIVE
    assert refused(tmp_path, OPERATIVE.replace(old, new, 1)) == message


@pytest.mark.parametrize("text, message", [
    ("d_model 512\n", "gin config 'GIN', line 1: 'd_model 512' is not a binding (scope/Configurable.parameter = "
                      "value, or macro = value)"),
    ("a.b = [1,\n2\n", "gin config 'GIN': a bracket opened on line 1 is never closed"),
    ("a.b = 1]\n", "gin config 'GIN', line 1: ']' closes no bracket"),
    ("x = 1\na.b = 'open\n", "gin config 'GIN', line 2: a string is not closed on its line"),
    ("a.b = " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n",
     f"gin config 'GIN', line 1: brackets nested over {MAX_DEPTH} deep"),
])
def test_a_malformed_file_is_one_error_naming_the_line(tmp_path, text, message):
    assert refused(tmp_path, text) == message


def test_strings_keep_their_hashes_and_brackets(tmp_path):
    bindings = GinBindings.parse("a.b = 'x # not a comment ]'  # a comment\nc.d = \"[\"\n")
    assert bindings.get("", "a", "b", str) == "x # not a comment ]"
    assert bindings.get("", "c", "d", str) == "["


def test_a_file_too_large_or_not_utf8_or_absent_is_refused_before_it_is_parsed(tmp_path):
    big = tmp_path / "big.gin"
    big.write_bytes(b"#" * (MAX_GIN_BYTES + 1))
    with pytest.raises(LayoutMapError, match=r"is over 4,194,304 bytes; an operative_config.gin is far smaller$"):
        read_gin_config(big)
    latin = tmp_path / "latin.gin"
    latin.write_bytes(b"a.b = '\xe9'\n")
    with pytest.raises(LayoutMapError, match=r"latin.gin' is not UTF-8 \(byte 7\)$"):
        read_gin_config(latin)
    with pytest.raises(LayoutMapError, match=r"^cannot read gin config '.*absent.gin': No such file or directory$"):
        read_gin_config(tmp_path / "absent.gin")


def test_bindings_written_as_gin_read_back_as_they_were(tmp_path):
    config = {"SelfAttention.num_heads": 8, "d_model": 512, "DenseReluDense.activation": ["gelu", "linear"],
              "sublayer_rms_norm.epsilon": 1e-06, "decoder/EncDecAttention.relative_attention_type": None,
              "Unitransformer.positional_embedding": False, "SelfAttention.relative_attention_type": "bias_shared"}
    text = gin_bytes(config)
    assert text.decode().splitlines()[:2] == ["d_model = 512", "DenseReluDense.activation = ['gelu', 'linear']"]
    bindings = GinBindings.parse(text.decode())
    assert {name: bindings.get(*_key(name), object) for name in config if "." in name} == \
        {name: value for name, value in config.items() if "." in name}
    assert bindings.macros["d_model"] == ("512", 1)


def _key(name):
    scope, _, dotted = name.rpartition("/")
    configurable, parameter = dotted.split(".")
    return scope, configurable, parameter


@pytest.mark.parametrize("config, message", [
    ({"a b": 1}, "cannot write 'a b' = 1 as a gin binding; map the config to binding names and Python literals"),
    ({"A.x": {"k": 1}}, "cannot write 'A.x' = {'k': 1} as a gin binding; map the config to binding names and "
                        "Python literals"),
])
def test_a_config_that_is_not_bindings_of_literals_is_not_written_as_gin(config, message):
    with pytest.raises(LayoutMapError) as error:
        gin_bytes(config)
    assert str(error.value) == message
