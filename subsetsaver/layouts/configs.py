"""A layout map's config mapping: one family's config file into the target's, e.g. google-research/bert's
``bert_config.json`` into Hugging Face's ``config.json``.

The map's ``"config"`` object has ``"keys"`` (target key -> source key), ``"values"`` (target key ->
{source value -> target value}, for names that differ), ``"defaults"`` (target key -> value when the
source lacks the key) and ``"fixed"`` (target key -> value, always). Its ``"math"`` states the values
that change the math: each a ``"value"``, or a source key ``"from"`` with a table of ``"values"`` that
refuses a source value it does not list (an activation the target has no exact twin of).

Example::

    >>> map_config({"keys": {"n_embd": "hidden_size"}, "fixed": {"model_type": "gpt2"}}, {}, {"hidden_size": 8})
    {'n_embd': 8, 'model_type': 'gpt2'}
"""

from __future__ import annotations

import json
import os

from .. import bounded_json, storage
from ..errors import LayoutMapError
from .gin_config import gin_bytes, read_gin_config

MAX_CONFIG_BYTES = 16 * 1024 * 1024


def map_config(rules, math, source, *, source_name="the config") -> dict:
    """The target config from ``source`` (a dict) by ``rules`` and ``math``; a missing key, or a source
    value the math does not list, raises :class:`~subsetsaver.errors.LayoutMapError` naming it."""
    values, defaults = rules.get("values", {}), rules.get("defaults", {})
    target = {}
    for key, source_key in rules.get("keys", {}).items():
        if source_key in source:
            value = source[source_key]
            if isinstance(value, str) and value in values.get(key, {}):
                value = values[key][value]
            target[key] = value
        elif key in defaults:
            target[key] = defaults[key]
        else:
            raise LayoutMapError(f"{source_name} has no \"{source_key}\" (the map's config key \"{key}\" needs it)",
                                 rule=f"config key \"{key}\"", fix="give the family's own config file with --config")
    target.update(rules.get("fixed", {}))
    for role, entry in math.items():
        value = entry.get("value")
        if "from" in entry:
            given = source.get(entry["from"])
            spelled = given if isinstance(given, str) else json.dumps(given)
            if spelled not in entry["values"]:
                raise LayoutMapError(
                    f"{source_name} says \"{entry['from']}\": {json.dumps(given)[:80]}, which the map's {role} does "
                    f"not convert (it knows {', '.join(map(str, entry['values']))})",
                    rule=f"math \"{role}\"", fix="convert with a map that states this value's exact twin in the "
                    "target library, or none: a near twin gives a model that loads and is wrong")
            value = entry["values"][spelled]
        if entry["key"] is not None:
            target[entry["key"]] = value
    return target


def nested(config) -> dict:
    """``config`` with each dotted key written as nested objects, as timm's ``config.json`` holds its
    ``pretrained_cfg``.

    >>> nested({"architecture": "tf_efficientnet_b0", "pretrained_cfg.mean": [0.5], "pretrained_cfg.std": [0.5]})
    {'architecture': 'tf_efficientnet_b0', 'pretrained_cfg': {'mean': [0.5], 'std': [0.5]}}
    """
    result = {}
    for key, value in config.items():
        *parents, leaf = key.split(".")
        place = result
        for parent in parents:
            place = place.setdefault(parent, {})
        place[leaf] = value
    return result


def read_config(path) -> dict:
    """A JSON config file (or a Mesh TensorFlow run's ``.gin``, see :mod:`.gin_config`) as a dict, or a
    :class:`~subsetsaver.errors.LayoutMapError` saying why not."""
    if os.fspath(path).endswith(".gin"):
        return read_gin_config(path)
    try:
        data = bounded_json.loads(storage.read_bytes(path, MAX_CONFIG_BYTES + 1), max_bytes=MAX_CONFIG_BYTES)
    except OSError as error:
        raise LayoutMapError(f"cannot read config '{path}': {error.strerror or error}") from None
    except ValueError as error:
        raise LayoutMapError(f"config '{path}' is not a JSON config: {error}") from None
    if not isinstance(data, dict):
        raise LayoutMapError(f"config '{path}' is not a JSON object")
    return data


def config_bytes(config, filename="config.json") -> bytes:
    """``config`` as the file ``filename`` names: gin bindings for a ``.gin``, else JSON."""
    if filename.endswith(".gin"):
        return gin_bytes(config)
    return (json.dumps(config, indent=2, sort_keys=True) + "\n").encode("utf-8")


def find_config(checkpoint, filename, given=None):
    """``given``, or ``filename`` beside ``checkpoint`` (in it, for a directory); None when absent."""
    if given is not None:
        return os.fspath(given)
    checkpoint = os.fspath(checkpoint)
    directory = checkpoint if storage.is_directory(checkpoint) else storage.parent(checkpoint) or "."
    path = storage.join(directory, filename)
    return path if storage.exists(path) and not storage.is_directory(path) else None
