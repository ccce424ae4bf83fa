"""The architecture of a Mesh TensorFlow Transformer run (T5, T5 v1.1, mT5), read off its
``operative_config.gin`` without gin.

A Mesh TensorFlow run writes every parameter of every configurable it called into
``operative_config.gin`` (``scope/Configurable.param = value`` lines, ``name = value`` macros, values
as Python literals, ``%macro`` references). :func:`read_gin_config` reads the few bindings a layout map
needs into a plain dict; everything else in the file (datasets, schedules, ``@references``) is split
into statements and skipped. Reading is bounded (file size, bracket depth, value length, macro hops)
and linear; a malformed file or a missing binding is one :class:`~subsetsaver.errors.LayoutMapError`.

Example::

    >>> config = read_gin_config("t5_small/operative_config.gin")    # doctest: +SKIP
    >>> config["d_model"], config["feed_forward_proj"], config["tie_word_embeddings"]   # doctest: +SKIP
    (512, 'relu', True)
"""

from __future__ import annotations

import ast
import re

from .. import storage
from ..errors import LayoutMapError

MAX_GIN_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 64
MAX_VALUE_CHARS = 10_000
MAX_MACRO_HOPS = 32
_TOKEN = re.compile(r"""'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|#[^\n]*|\\\n|[()\[\]{}]|\n|[^'"#\\()\[\]{}\n]+|.""")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_./]*")
_SKIPPED = ("import ", "include ", "from ")
_STACKS = ("encoder", "decoder")


def read_gin_config(path) -> dict:
    """The architecture bound in ``path`` (an ``operative_config.gin``), as a plain dict:

    ``d_model``, ``d_ff``, ``d_kv``, ``num_heads``, ``num_layers`` (the encoder's),
    ``num_decoder_layers``, ``relative_attention_num_buckets``, ``layer_norm_epsilon``, ``dropout_rate``,
    ``feed_forward_proj`` (Mesh TensorFlow's activation: ``"relu"``; ``["gelu", "linear"]`` reads
    ``"gated-gelu"``; others by Mesh TensorFlow's names, whose ``"gelu"`` is the tanh approximation),
    ``tie_word_embeddings`` (the decoder's softmax shares the embedding), ``shared_embedding``
    (encoder and decoder share one) and ``position_embedding`` (``"relative_bias_shared"`` for T5).
    Not the vocabulary's size: T5's runs pass it in code (a map reads it off the embedding). The keys
    are named as in Hugging Face's ``T5Config`` where it has them, so that a map reads either file.
    """
    bindings = GinBindings.read(path)
    config = {"d_model": bindings.both("Unitransformer", "d_model", int),
              "d_ff": bindings.both("DenseReluDense", "hidden_size", int),
              "d_kv": bindings.both("SelfAttention", "key_value_size", int),
              "num_heads": bindings.both("SelfAttention", "num_heads", int),
              "num_layers": bindings.get("encoder", "make_layer_stack", "num_layers", int),
              "num_decoder_layers": bindings.get("decoder", "make_layer_stack", "num_layers", int),
              "relative_attention_num_buckets": bindings.both("SelfAttention", "relative_attention_num_buckets", int),
              "layer_norm_epsilon": bindings.both("sublayer_rms_norm", "epsilon", float),
              "dropout_rate": bindings.both("SelfAttention", "dropout_rate", float),
              "feed_forward_proj": _activation(bindings.both("DenseReluDense", "activation", (str, list))),
              "tie_word_embeddings": bindings.get("decoder", "Unitransformer", "shared_embedding_and_softmax_weights",
                                                  bool),
              "shared_embedding": bindings.get("", "Bitransformer", "shared_embedding", bool),
              "position_embedding": _position_embedding(bindings)}
    if not bindings.both("SelfAttention", "fold_scaling_into_initializer", bool):
        raise LayoutMapError(f"'{path}' scales queries at run time (SelfAttention.fold_scaling_into_initializer = "
                             "False); T5's layouts fold that scale into the query weights",
                             fix="convert a run with the T5 default (True)")
    return config


def gin_bytes(config) -> bytes:
    """``config`` (binding or macro name -> Python literal) as gin text: macros first, then bindings.

    >>> gin_bytes({"SelfAttention.num_heads": 8, "d_model": 512}).decode()
    'd_model = 512\\nSelfAttention.num_heads = 8\\n'
    """
    lines = []
    for name in sorted(config, key=lambda name: ("." in name, name)):
        value = config[name]
        if not _NAME.fullmatch(name) or not _is_literal(value):
            raise LayoutMapError(f"cannot write {name[:80]!r} = {value!r:.80} as a gin binding",
                                 fix="map the config to binding names and Python literals")
        lines.append(f"{name} = {value!r}\n")
    return "".join(lines).encode("utf-8")


def _is_literal(value):
    if isinstance(value, list):
        return all(_is_literal(item) for item in value)
    return value is None or isinstance(value, (bool, int, float, str))


class GinBindings:
    """The ``(scope, configurable, parameter) -> (value text, line)`` bindings and the macros of one file."""

    def __init__(self, path, bindings, macros):
        self.path, self.bindings, self.macros = path, bindings, macros

    @classmethod
    def read(cls, path):
        try:
            data = storage.read_bytes(path, MAX_GIN_BYTES + 1)
        except OSError as error:
            raise LayoutMapError(f"cannot read gin config '{path}': {error.strerror or error}") from None
        if len(data) > MAX_GIN_BYTES:
            raise LayoutMapError(f"gin config '{path}' is over {MAX_GIN_BYTES:,} bytes; an operative_config.gin is "
                                 "far smaller")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise LayoutMapError(f"gin config '{path}' is not UTF-8 (byte {error.start})") from None
        return cls.parse(text, path)

    @classmethod
    def parse(cls, text, path="<gin>"):
        """Bindings from gin ``text``: ``import``/``include`` lines skipped, later bindings win."""
        bindings, macros = {}, {}
        for line, statement in _statements(text, path):
            if statement.startswith(_SKIPPED):
                continue
            name, equals, value = statement.partition("=")
            name = name.strip()
            if not equals or not _NAME.fullmatch(name):
                raise LayoutMapError(f"gin config '{path}', line {line}: '{statement[:80]}' is not a binding "
                                     "(scope/Configurable.parameter = value, or macro = value)")
            scope, _, dotted = name.rpartition("/")
            parts = dotted.split(".")
            if len(parts) == 1:
                macros[name] = (value.strip(), line)
            else:
                bindings[(scope, parts[-2], parts[-1])] = (value.strip(), line, name)
        return cls(path, bindings, macros)

    def find(self, scope, configurable, parameter):
        """(value text, line, name as written) of the binding ``scope`` sees (its own, else the unscoped
        one), or None."""
        return self.bindings.get((scope, configurable, parameter)) or self.bindings.get(("", configurable, parameter))

    def get(self, scope, configurable, parameter, kind):
        found = self.find(scope, configurable, parameter)
        if found is None:
            raise LayoutMapError(f"gin config '{self.path}' binds no {scope + '/' if scope else ''}{configurable}."
                                 f"{parameter}",
                                 fix="give the run's operative_config.gin, which binds every parameter the run used")
        return self.value(*found, kind)

    def both(self, configurable, parameter, kind):
        """The value the encoder and the decoder share; they differing is a LayoutMapError."""
        encoder, decoder = (self.get(stack, configurable, parameter, kind) for stack in _STACKS)
        if encoder != decoder:
            raise LayoutMapError(f"gin config '{self.path}': the encoder's {configurable}.{parameter} is "
                                 f"{encoder!r:.40} and the decoder's {decoder!r:.40}; one T5 config says one value",
                                 fix="convert a run whose encoder and decoder share it")
        return encoder

    def value(self, text, line, where, kind):
        """The Python literal ``text`` of binding ``where`` (following ``%macro`` references), checked to be
        a ``kind``."""
        for _ in range(MAX_MACRO_HOPS):
            if not text.startswith("%"):
                break
            if text[1:] not in self.macros:
                raise LayoutMapError(f"gin config '{self.path}', line {line}: {where} = {text[:80]} names no macro "
                                     "of the file")
            text, line = self.macros[text[1:]]
        else:
            raise LayoutMapError(f"gin config '{self.path}', line {line}: {where} follows over {MAX_MACRO_HOPS} "
                                 "macros (a cycle?)")
        try:
            if len(text) > MAX_VALUE_CHARS:
                raise ValueError
            value = ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise LayoutMapError(f"gin config '{self.path}', line {line}: {where} = {text[:80]} is not a "
                                 "Python literal") from None
        if kind is float and type(value) is int:
            value = float(value)
        if not isinstance(value, kind) or (kind is int and (type(value) is bool or value < 0)):
            raise LayoutMapError(f"gin config '{self.path}', line {line}: {where} = {text[:80]} is not "
                                 f"{'a count' if kind is int else _KIND_NAMES.get(kind, 'a string or a list')}")
        return value


_KIND_NAMES = {float: "a number", bool: "True or False", str: "a string"}


def _statements(text, path):
    """(line, statement) for each statement of ``text``: comments dropped, lines ended by ``\\`` or
    inside brackets joined. One pass over the text's tokens."""
    statements, current, depth, line, start = [], [], 0, 1, 1
    for token in _TOKEN.findall(text):
        first = token[0]
        if first == "#":
            continue
        if token == "\\\n" or (token == "\n" and depth):
            line += 1
            current.append(" ")
            continue
        if token == "\n":
            statement = "".join(current).strip()
            if statement:
                statements.append((start, statement))
            current, line, start = [], line + 1, line + 1
            continue
        if first in "([{":
            depth += 1
            if depth > MAX_DEPTH:
                raise LayoutMapError(f"gin config '{path}', line {line}: brackets nested over {MAX_DEPTH} deep")
        elif first in ")]}":
            depth -= 1
            if depth < 0:
                raise LayoutMapError(f"gin config '{path}', line {line}: '{first}' closes no bracket")
        elif first in "'\"" and (len(token) < 2 or token[-1] != first):
            raise LayoutMapError(f"gin config '{path}', line {line}: a string is not closed on its line")
        if not current:
            start = line
        current.append(token)
    if depth:
        raise LayoutMapError(f"gin config '{path}': a bracket opened on line {start} is never closed")
    statement = "".join(current).strip()
    return statements + ([(start, statement)] if statement else [])


def _activation(value):
    """``"relu"``, ``"gelu"``, ...; ``[act, "linear"]`` (a gated feed-forward) reads ``"gated-act"``."""
    if isinstance(value, str):
        return value
    if len(value) == 2 and all(isinstance(part, str) for part in value) and value[1] == "linear":
        return f"gated-{value[0]}"
    return " * ".join(map(str, value))


def _position_embedding(bindings):
    """What positions the model sees: ``"relative_bias_shared"`` for T5 (a bias per head and bucket shared
    by a stack's layers); ``"absolute"``/``"sinusoid"`` and an attention over the encoder's output with
    relative positions are named too, joined by ``+``, so that a map that knows T5's alone refuses them."""
    parts = []
    if bindings.both("Unitransformer", "sinusoid_positional_embedding", bool):
        parts.append("sinusoid")
    elif bindings.both("Unitransformer", "positional_embedding", bool):
        parts.append("absolute")
    relative = bindings.both("SelfAttention", "relative_attention_type", (str, type(None)))
    if relative:
        parts.append(f"relative_{relative}")
    across = bindings.get("decoder", "EncDecAttention", "relative_attention_type", (str, type(None)))
    if across:
        parts.append(f"enc_dec_relative_{across}")
    return "+".join(parts) or "none"
