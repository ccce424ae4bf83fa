"""Layout maps: the data files that say how one model family's checkpoint becomes another layout.

A map is a JSON object (see ``docs/leaving_tensorflow.md``, "Writing a map")::

    {"name": "bert-to-hf", "family": "BERT (google-research/bert)",
     "source": {"layout": "tf", "config": "bert_config.json"},
     "target": {"layout": "safetensors", "config": "config.json", "metadata": {"format": "pt"}},
     "drop": "slots() | global_step()",
     "rules": [{"from": "bert/encoder/layer_*/attention/self/query/kernel",
                "to": "bert.encoder.layer.{1}.attention.self.query.weight", "transform": ["transpose"]}],
     "config": {"keys": {"hidden_size": "hidden_size"}, "fixed": {"model_type": "bert"}},
     "math": {"activation": {"key": "hidden_act", "from": "hidden_act", "values": {"gelu": "gelu_new"}},
              "layer_norm_eps": {"key": "layer_norm_eps", "value": 1e-12}, ...},
     "targets": {"dtypes": ["float32"], "groups": [{"repeat": {"layer": "num_hidden_layers"}, "tensors":
                 {"bert.encoder.layer.{layer}.attention.self.query.weight": ["hidden_size", "hidden_size"]}}]}}

``from`` is a glob of the selector language (``*`` and ``?`` within one ``/``-segment, ``**`` across);
each wildcard captures what it matched, and ``{1}``, ``{2}``, ... in ``to`` put it back (``{1:d}`` as a
number, ``block_000`` -> ``block.0``; ``{1:03d}`` zero-padded, the way back; ``{1:d-1}`` a number less
one; ``{1:letter}`` a letter's place in the alphabet, ``block2b`` -> ``blocks.1.1``). A rule with
several ``from`` globs concatenates (``"concat": AXIS``); one with several ``to`` names splits
(``"split": AXIS``). ``math`` states every config value that changes the math (:data:`MATH_ROLES`);
``targets`` declares every target tensor the config implies (see :mod:`.coverage`). ``drop`` is
selector text, evaluated on the checkpoint's catalog. A rule with ``"fallback": true`` writes a target
only where no earlier rule wrote it (ELECTRA's generator takes ``electra/embeddings`` unless it has its
own); the sources it then leaves are dropped.

A checkpoint that holds several models (ELECTRA's discriminator and generator) gets ``"variants"``: each
a named object of the parts that differ (``description``, ``drop``, ``rules``, ``config``, ``math``,
``targets``), which replace the map's own; ``"default_variant"`` names the one used when none is asked
for. ``source.config_reader`` names a family's own way to find its config (:data:`CONFIG_READERS`).

Example::

    >>> layout = load_map("bert-to-hf")
    >>> layout.rules[0].source_globs
    ('bert/embeddings/word_embeddings',)
"""

from __future__ import annotations

import dataclasses
import os
import re

from .. import bounded_json, storage
from ..errors import LayoutMapError
from ..selectors import fill_glob, glob_captures, glob_wildcard_count
from .transforms import parse_transforms
from .twins import no_twin_named

MAPS_DIRECTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "maps")
LAYOUTS = ("tf", "safetensors")
MATH_ROLES = ("activation", "layer_norm_eps", "position_embedding", "tied_embeddings")
"""The config values that change a model's math: every map states each one, never copies it."""
VISION_MATH_ROLES = ("batch_norm_eps", "padding")
"""What else changes a vision model's math; a map into a vision library states both (see :data:`VISION_TARGETS`)."""
VISION_TARGETS = ("timm",)
"""Target libraries of vision models: a map whose ``"target"`` names one (``"library": "timm"``) states
:data:`VISION_MATH_ROLES` too."""
MAX_MAP_BYTES = 4 * 1024 * 1024
_PLACEHOLDER = re.compile(r"\{(\d+)(?::((?:0\d+|)d(?:[+-]\d+)?|letter))?\}")
"""``{1}`` puts a capture back as it is; ``{1:d}`` as a number (``000`` -> ``0``), ``{1:03d}`` zero-padded,
``{1:d-1}`` a number less one (``block2`` -> ``1``); ``{1:letter}`` a lowercase letter as its place in the
alphabet (``a`` -> ``0``, as tf_keras names the blocks of a stage ``block2a``, ``block2b``, ...)."""
_NUMBER_SPEC = re.compile(r"(0\d+|)d([+-]\d+)?")
_NAMED_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::(?:0\d+)?d)?\}")
_MAP_KEYS = {"name", "family", "description", "source", "target", "drop", "rules", "config", "math", "targets",
             "variants", "default_variant", "classifier", "members", "config_from_tensors"}
_VARIANT_KEYS = {"description", "drop", "rules", "config", "math", "targets"}
_RULE_KEYS = {"from", "to", "transform", "concat", "split", "fallback"}
CONFIG_READERS = ("electra",)
"""Families whose config is not one file read as it is (``source.config_reader``, see :mod:`.electra_config`)."""
_MATH_KEYS = {"key", "value", "from", "values", "why"}
_GROUP_KEYS = {"tensors", "repeat", "when", "config"}
_HEAD_KEYS = {"tensors", "architecture", "infer", "config", "when"}
_TARGET_KEYS = {"dtypes", "groups", "heads", "architecture"}
_READING_KEYS = {"tensor", "reading", "why"}
READINGS = ("values", "keras_normalization_std")
"""How ``"config_from_tensors"`` reads a tensor into a config value (see :mod:`.readings`)."""


def shipped_maps() -> tuple:
    """The names of the maps shipped with the package, sorted."""
    return tuple(sorted(os.path.basename(name)[:-5] for name in storage.list_directory(MAPS_DIRECTORY)
                        if name.endswith(".json")))


@dataclasses.dataclass(frozen=True)
class Rule:
    """One rule of a map, as ``"rules"`` gives it."""

    number: int
    """Its place in ``"rules"``, from 1 (named in messages)."""
    source_globs: tuple
    """``"from"``: one glob, or several whose tensors are concatenated."""
    targets: tuple
    """``"to"``: one target name template, or several the tensor is split into."""
    transforms: tuple = ()
    """``"transform"``: what each tensor goes through, in order."""
    concat: int | None = None
    """``"concat"``: the axis several sources are joined on."""
    split: int | None = None
    """``"split"``: the axis the tensor is cut on, into equal parts, one a target."""
    fallback: bool = False
    """``"fallback"``: write a target only where no earlier rule wrote it."""

    @property
    def text(self) -> str:
        sources = " + ".join(self.source_globs)
        return f"rule {self.number} ({sources} -> {', '.join(self.targets)})"

    def capture(self, name):
        """The wildcards' texts if the first glob matches ``name`` whole, else None."""
        return glob_captures(self.source_globs[0])(name)

    def sources(self, captures) -> tuple:
        """Every source name of this rule for ``captures`` (the other globs filled in)."""
        return tuple(fill_glob(glob, captures) for glob in self.source_globs)

    def target_names(self, captures) -> tuple:
        return tuple(_PLACEHOLDER.sub(lambda m: self._written(captures[int(m.group(1)) - 1], m.group(2)), target)
                     for target in self.targets)

    def _written(self, capture, spec):
        if spec is None:
            return capture
        if spec == "letter":
            if not (len(capture) == 1 and "a" <= capture <= "z"):
                raise LayoutMapError(f"{self.text} writes '{capture[:40]}' as a letter's place", rule=self.text,
                                     fix="match one lowercase letter where a target name writes {1:letter}")
            return str(ord(capture) - ord("a"))
        if not (capture.isascii() and capture.isdigit()):
            raise LayoutMapError(f"{self.text} writes '{capture[:40]}' as a number", rule=self.text,
                                 fix="match numbers only where a target name writes one ({1:d}, {1:03d})")
        width, offset = _NUMBER_SPEC.fullmatch(spec).groups()
        number = int(capture) + int(offset or 0)
        if number < 0:
            raise LayoutMapError(f"{self.text} writes '{capture[:40]}'{offset} as a number, which is negative",
                                 rule=self.text, fix="check the offset of the map's {N:d-K}")
        return format(number, f"{width}d")

    def source_for(self, target, like=None):
        """The source name this rule would read ``target`` from, or None when it does not write it;
        ``like``: the captures of a source this rule read, whose zero-padded numbers (``000``) give the
        width of a number the target writes plain.

        >>> Rule(1, ("block_*/w",), ("block.{1:d}.w",)).source_for("block.7.w", like=("000",))
        'block_007/w'
        """
        for template in self.targets:
            captures = _template_captures(template)(target)
            if captures is not None and len(captures) == glob_wildcard_count(self.source_globs[0]):
                if like is not None:
                    captures = tuple(capture.zfill(len(sample)) if capture.isdigit() and len(sample) > 1
                                     and sample.isdigit() and sample.startswith("0") else capture
                                     for capture, sample in zip(captures, like))
                return fill_glob(self.source_globs[0], captures)
        return None


@dataclasses.dataclass(frozen=True)
class LayoutMap:
    """A parsed map (see the module's docstring): each field is the map's key of that name, checked."""

    name: str
    family: str
    """Who makes checkpoints of this layout, for messages (``"BERT (google-research/bert)"``)."""
    source: dict
    target: dict
    drop: str | None
    """Selector text of what is dropped by role (optimizer state, the step)."""
    rules: tuple
    """The :class:`Rule` objects, in order."""
    config: dict
    math: dict
    """Each of :data:`MATH_ROLES` -> how the target config states it."""
    targets: dict
    """What the target layout holds for a config (see :mod:`.coverage`)."""
    path: str
    """The file the map came from."""
    variant: str | None = None
    """The variant these parts are of (a map with ``"variants"``), or None."""
    variants: tuple = ()
    """The names of every variant of the map."""
    classifier: dict = dataclasses.field(default_factory=dict)
    """Target name -> its class axis, for the tensors of a classifier (``--drop-background-class``)."""
    members: dict = dataclasses.field(default_factory=dict)
    config_from_tensors: dict = dataclasses.field(default_factory=dict)

    @property
    def source_layout(self) -> str:
        return self.source["layout"]

    @property
    def target_layout(self) -> str:
        return self.target["layout"]

    @property
    def optional_prefix(self) -> str:
        """A prefix some source files put before every name (``bert.`` in BertForPreTraining's files)."""
        return self.source.get("optional_prefix", "")


def load_map(name_or_path, variant=None) -> LayoutMap:
    """A shipped map by name (``bert-to-hf``), or a map file by path (a copy of one, changed); ``variant``:
    which of the map's variants (``electra-to-hf``: ``discriminator`` or ``generator``), else its default.

    Raises :class:`~subsetsaver.errors.LayoutMapError` for an unknown name, a file that is not a map, or a
    variant the map does not have.
    """
    text = os.fspath(name_or_path)
    if text.endswith(".json") or os.sep in text:
        path = text
        if not os.path.isfile(path):
            raise LayoutMapError(f"no layout map file at '{path}'", fix=f"name a shipped map ({', '.join(shipped_maps())})"
                                 " or the path of a .json map file")
    else:
        path = os.path.join(MAPS_DIRECTORY, f"{text}.json")
        twin = no_twin_named(text)
        if twin is not None and not os.path.isfile(path):
            raise LayoutMapError(twin.named(text), fix=twin.fix)
        if not os.path.isfile(path):
            raise LayoutMapError(f"unknown layout map '{text}'",
                                 fix=f"use one of {', '.join(shipped_maps())}, or the path of a .json map file")
    try:
        with open(path, "rb") as handle:
            data = bounded_json.loads(handle.read(MAX_MAP_BYTES + 1), max_bytes=MAX_MAP_BYTES)
    except OSError as error:
        raise LayoutMapError(f"cannot read layout map '{path}': {error.strerror or error}") from None
    except ValueError as error:
        raise LayoutMapError(f"layout map '{path}' is not JSON a map can be: {error}") from None
    return parse_map(data, path, variant)


def parse_map(data, path="<map>", variant=None) -> LayoutMap:
    """A :class:`LayoutMap` from a map's JSON object (its ``variant``, or its default variant); a
    :class:`LayoutMapError` names the first bad part. Every variant is checked, not only the one chosen.
    """
    where = f"layout map '{path}'"
    _require_object(data, where, _MAP_KEYS)
    variants = data.get("variants")
    if variants is None:
        if "default_variant" in data:
            raise LayoutMapError(f"{where} has \"default_variant\" but no \"variants\"", fix=_HOW_TO_WRITE)
        if variant is not None:
            raise LayoutMapError(f"map '{data.get('name', path)}' has no variants, so --variant {str(variant)[:80]} "
                                 "does not apply", fix="leave out --variant (variant= in Python)")
        return _parse_whole(data, path, where)
    _require_object(variants, f"{where}, \"variants\"")
    default = data.get("default_variant")
    if not variants or default not in variants:
        raise LayoutMapError(f"{where}: \"variants\" names each variant, and \"default_variant\" one of them",
                             fix=_HOW_TO_WRITE)
    if variant is not None and variant not in variants:
        raise LayoutMapError(f"map '{data.get('name', path)}' has no variant '{str(variant)[:80]}'",
                             fix=f"use --variant {' or '.join(variants)} (default: {default})")
    base = {key: value for key, value in data.items() if key not in ("variants", "default_variant")}
    parsed = {}
    for name, overrides in variants.items():
        _require_object(overrides, f"{where}, variant '{name[:80]}'", _VARIANT_KEYS)
        layout = _parse_whole({**base, **overrides}, path, f"{where}, variant '{name[:80]}'")
        parsed[name] = dataclasses.replace(layout, variant=name, variants=tuple(variants))
    return parsed[default if variant is None else variant]


def _parse_whole(data, path, where) -> LayoutMap:
    for key in ("name", "source", "target", "rules", "math", "targets"):
        if key not in data:
            raise LayoutMapError(f"{where} has no \"{key}\"", fix=_HOW_TO_WRITE)
    for side, allowed in (("source", {"layout", "config", "optional_prefix", "aliases", "config_reader"}),
                          ("target", {"layout", "config", "metadata", "prefix", "library", "nested_keys"})):
        _require_object(data[side], f"{where}, \"{side}\"", allowed)
        if data[side].get("layout") not in LAYOUTS:
            raise LayoutMapError(f"{where}: \"{side}\".\"layout\" must be one of {', '.join(LAYOUTS)}")
        for key in ("config", "optional_prefix", "prefix", "config_reader", "library"):
            _require_text(data[side], key, f"{where}, \"{side}\"")
        for key in ("aliases", "metadata"):
            _require_text_mapping(data[side].get(key, {}), f"{where}, \"{side}\".\"{key}\"")
    if data["source"].get("config_reader", CONFIG_READERS[0]) not in CONFIG_READERS:
        raise LayoutMapError(f"{where}: \"source\".\"config_reader\" is one of {', '.join(CONFIG_READERS)}")
    if not isinstance(data["target"].get("nested_keys", False), bool):
        raise LayoutMapError(f"{where}: \"target\".\"nested_keys\" is true (a key \"a.b\" is written as "
                             "{\"a\": {\"b\": ...}}) or false")
    if "config" not in data["target"]:
        raise LayoutMapError(f"{where}: \"target\" needs \"config\", the name its config file is written under")
    for key in ("name", "family", "drop"):
        _require_text(data, key, where)
    if not isinstance(data["rules"], list) or not data["rules"]:
        raise LayoutMapError(f"{where}: \"rules\" must be a non-empty list")
    rules = tuple(_parse_rule(number, item, where) for number, item in enumerate(data["rules"], start=1))
    config = data.get("config", {})
    _require_object(config, f"{where}, \"config\"", {"keys", "values", "defaults", "fixed"})
    _require_text_mapping(config.get("keys", {}), f"{where}, \"config\".\"keys\"")
    for key in ("values", "defaults", "fixed"):
        _require_object(config.get(key, {}), f"{where}, \"config\".\"{key}\"")
    for key, table in config.get("values", {}).items():
        _require_object(table, f"{where}, \"config\".\"values\".\"{key[:80]}\"")
    vision = data["target"].get("library") in VISION_TARGETS
    return LayoutMap(name=str(data["name"]), family=str(data.get("family", data["name"])), source=data["source"],
                     target=data["target"], drop=data.get("drop"), rules=rules, config=config,
                     math=_parse_math(data["math"], config, where, vision), targets=_parse_targets(data["targets"], where),
                     path=path, classifier=_parse_classifier(data.get("classifier", {}), where),
                     members=_parse_members(data.get("members", {}), data["math"], where),
                     config_from_tensors=_parse_readings(data.get("config_from_tensors", {}), data["math"], where))


def _parse_classifier(value, where) -> dict:
    """``"classifier": {"TARGET": CLASS_AXIS, ...}``: the target tensors of a classifier and the axis of
    their classes."""
    _require_object(value, f"{where}, \"classifier\"")
    if not all(type(axis) is int for axis in value.values()):
        raise LayoutMapError(f"{where}: \"classifier\" maps each target name to its class axis (an integer)",
                             fix=_HOW_TO_WRITE)
    return dict(value)


_HOW_TO_WRITE = "see \"Writing a map\" in docs/leaving_tensorflow.md"


def _require_object(value, where, allowed=None):
    if not isinstance(value, dict):
        raise LayoutMapError(f"{where} must be a JSON object")
    unknown = sorted(set(value) - allowed) if allowed is not None else []
    if unknown:
        raise LayoutMapError(f"{where} has an unknown key \"{str(unknown[0])[:80]}\" (known: {', '.join(sorted(allowed))})",
                             fix=_HOW_TO_WRITE)


def _require_text(data, key, where):
    if key in data and not (isinstance(data[key], str) or (key == "drop" and data[key] is None)):
        raise LayoutMapError(f"{where}: \"{key}\" must be a string")


def _require_text_mapping(value, where):
    _require_object(value, where)
    if not all(isinstance(item, str) for item in value.values()):
        raise LayoutMapError(f"{where} maps names to names (strings)")


def _names(value) -> tuple:
    """A rule's ``"from"`` or ``"to"``: one name, or a list of them (anything else: empty, refused by the caller)."""
    return (value,) if isinstance(value, str) else tuple(value) if isinstance(value, list) else ()


def _parse_rule(number, item, where) -> Rule:
    where = f"{where}, rule {number}"
    _require_object(item, where, _RULE_KEYS)
    if "from" not in item or "to" not in item:
        raise LayoutMapError(f"{where} needs \"from\" and \"to\"")
    sources, targets = _names(item["from"]), _names(item["to"])
    if not sources or not targets or not all(isinstance(text, str) and text for text in sources + targets):
        raise LayoutMapError(f"{where}: \"from\" and \"to\" are names or lists of names")
    try:
        transforms = parse_transforms(item.get("transform"))
        glob_captures(sources[0])
    except ValueError as error:
        raise LayoutMapError(f"{where}: {error}") from None
    for key in ("concat", "split"):
        if key in item and type(item[key]) is not int:
            raise LayoutMapError(f"{where}: \"{key}\" is an axis (an integer)")
    if "fallback" in item and type(item["fallback"]) is not bool:
        raise LayoutMapError(f"{where}: \"fallback\" is true or false")
    if len(sources) > 1 and "concat" not in item:
        raise LayoutMapError(f"{where} has {len(sources)} sources: say along which axis with \"concat\"")
    if len(targets) > 1 and "split" not in item:
        raise LayoutMapError(f"{where} has {len(targets)} targets: say along which axis with \"split\"")
    wildcards = glob_wildcard_count(sources[0])
    for template in targets:
        for index, _ in _PLACEHOLDER.findall(template):
            if not 1 <= int(index) <= wildcards:
                raise LayoutMapError(f"{where}: '{template}' uses {{{index}}}, but '{sources[0]}' has "
                                     f"{wildcards} wildcard(s)")
    for glob in sources[1:]:
        if glob_wildcard_count(glob) != wildcards:
            raise LayoutMapError(f"{where}: '{glob}' must have as many wildcards as '{sources[0]}'")
    return Rule(number=number, source_globs=sources, targets=targets, transforms=transforms,
                concat=item.get("concat"), split=item.get("split"), fallback=item.get("fallback", False))


def _parse_math(math, config, where, vision=False) -> dict:
    where = f"{where}, \"math\""
    roles = MATH_ROLES + VISION_MATH_ROLES if vision else MATH_ROLES
    _require_object(math, where, set(roles))
    missing = [role for role in roles if role not in math]
    if missing:
        raise LayoutMapError(f"{where} does not state {', '.join(missing)}: every map says each value that changes "
                             "the math, so none is inherited from the map it was copied from", fix=_HOW_TO_WRITE)
    copied = set(config.get("keys", {})) | set(config.get("fixed", {})) | set(config.get("defaults", {}))
    for role, entry in math.items():
        _require_object(entry, f"{where}, \"{role}\"", _MATH_KEYS)
        if "key" not in entry or not (entry["key"] is None or isinstance(entry["key"], str)):
            raise LayoutMapError(f"{where}, \"{role}\" needs \"key\": the target config's key, or null when the "
                                 "target has none")
        if ("value" in entry) == ("from" in entry) or ("from" in entry) != ("values" in entry):
            raise LayoutMapError(f"{where}, \"{role}\" states either \"value\", or \"from\" (a source config key) "
                                 "with \"values\" (each source value and what it becomes)")
        if "from" in entry and not (isinstance(entry["from"], str) and isinstance(entry["values"], dict)):
            raise LayoutMapError(f"{where}, \"{role}\": \"from\" is a source config key and \"values\" a JSON object")
        if entry["key"] in copied:
            raise LayoutMapError(f"{where}, \"{role}\": \"config\" also sets \"{entry['key']}\"; state it in "
                                 "\"math\" alone, so a copied map cannot carry it over unseen")
    return math


def _parse_members(members, math, where) -> dict:
    """``"members"``: a family's members (``"b0"``, ``"b1"``, ...), each ``{"config": {...}, "sizes": {...}}``:
    the config values it implies (written) and the sizes its tensors' shapes are stated in (not written);
    the one whose tensors the checkpoint holds exactly is converted (see :mod:`.members`)."""
    where = f"{where}, \"members\""
    _require_object(members, where)
    stated = {entry.get("key") for entry in math.values() if isinstance(entry, dict)} - {None}
    for member, values in members.items():
        here = f"{where}.\"{str(member)[:40]}\""
        _require_object(values, here, {"config", "sizes"})
        for part in ("config", "sizes"):
            _require_object(values.get(part, {}), f"{here}.\"{part}\"")
        if not all(type(size) is int for size in values.get("sizes", {}).values()):
            raise LayoutMapError(f"{here}.\"sizes\" are integers")
        clash = sorted(stated & (set(values.get("config", {})) | set(values.get("sizes", {}))))
        if clash:
            raise LayoutMapError(f"{here} sets \"{clash[0]}\", which \"math\" states")
    return members


def _parse_readings(readings, math, where) -> dict:
    """``"config_from_tensors"``: target config key -> ``{"tensor": NAME, "reading": HOW}``, a small tensor read
    into the config (Keras EfficientNet's input normalization), never converted."""
    where = f"{where}, \"config_from_tensors\""
    _require_object(readings, where)
    for key, entry in readings.items():
        _require_object(entry, f"{where}.\"{str(key)[:80]}\"", _READING_KEYS)
        if not isinstance(entry.get("tensor"), str) or entry.get("reading") not in READINGS:
            raise LayoutMapError(f"{where}.\"{str(key)[:80]}\" is {{\"tensor\": NAME, \"reading\": one of "
                                 f"{', '.join(READINGS)}}}")
    return readings


def _parse_targets(targets, where) -> dict:
    where = f"{where}, \"targets\""
    _require_object(targets, where, _TARGET_KEYS)
    dtypes = targets.get("dtypes")
    if not isinstance(dtypes, list) or not dtypes or not all(isinstance(dtype, str) for dtype in dtypes):
        raise LayoutMapError(f"{where} needs \"dtypes\": the float dtypes the target takes, e.g. [\"float32\"]")
    groups = targets.get("groups")
    if not isinstance(groups, list) or not groups:
        raise LayoutMapError(f"{where} needs \"groups\": the tensors the config implies", fix=_HOW_TO_WRITE)
    for number, group in enumerate(groups, start=1):
        _check_group(group, f"{where}, group {number}", _GROUP_KEYS)
        _check_readings(group, ("config",), f"{where}, group {number}", "group's")
    heads = targets.get("heads", {})
    _require_object(heads, f"{where}, \"heads\"")
    for head, declared in heads.items():
        _check_group(declared, f"{where}, head '{head}'", _HEAD_KEYS)
        _check_readings(declared, ("infer", "config"), f"{where}, head '{head}'", "head's")
    return targets


def _check_readings(group, kinds, where, whose):
    for kind in kinds:
        _require_object(group.get(kind, {}), f"{where}, \"{kind}\"")
        for key, reading in group.get(kind, {}).items():
            if not (isinstance(reading, list) and len(reading) == 2 and reading[0] in group["tensors"]
                    and type(reading[1]) is int and reading[1] >= 0):
                raise LayoutMapError(f"{where}, \"{kind}\".\"{key}\" is [one of the {whose} tensors, an axis]: "
                                     "the size read off it")


def _check_group(group, where, allowed):
    _require_object(group, where, allowed)
    tensors, repeat = group.get("tensors"), group.get("repeat", {})
    _require_object(tensors, f"{where}, \"tensors\"")
    _require_object(repeat, f"{where}, \"repeat\"")
    for placeholder, count in repeat.items():
        if not (isinstance(count, (int, str)) or (isinstance(count, list) and len(count) == 2 and all(
                isinstance(bound, (int, str)) for bound in count))) or isinstance(count, bool):
            raise LayoutMapError(f"{where}, \"repeat\".\"{str(placeholder)[:40]}\" is a count, or [first, stop) "
                                 "(integers or expressions of config keys)")
    if not isinstance(group.get("when", {}), (dict, str)):
        raise LayoutMapError(f"{where}: \"when\" is {{key: value}} or a comparison of config keys")
    if not tensors:
        raise LayoutMapError(f"{where} names no tensor")
    for name, shape in tensors.items():
        used = set(_NAMED_PLACEHOLDER.findall(name))
        if used != set(repeat):
            raise LayoutMapError(f"{where}: '{name[:120]}' must use each of the group's repeat placeholders "
                                 f"({', '.join('{' + key + '}' for key in repeat) or 'none'}) and no other")
        if not isinstance(shape, list) or not all(isinstance(size, (int, str)) and not isinstance(size, bool)
                                                  for size in shape):
            raise LayoutMapError(f"{where}: the shape of '{name[:120]}' is a list of sizes (integers or "
                                 "expressions of config keys)")


_TEMPLATES = {}


def _template_captures(template):
    """A matcher of the names ``template`` writes: each ``{n}`` captures (in its order of ``n``)."""
    if template not in _TEMPLATES:
        placeholders = _PLACEHOLDER.findall(template)
        order = [int(index) for index, _ in placeholders]
        readers = [_capture_reader(spec) for _, spec in placeholders]
        match = glob_captures("*".join(_escaped(text) for text in _PLACEHOLDER.split(template)[::3]))

        def captures(name, match=match, order=order, readers=readers):
            found = match(name)
            if found is None or sorted(order) != list(range(1, len(order) + 1)) or any(
                    "." in part or "/" in part for part in found):  # a capture is a layer number or a word
                return None
            # each written capture is read back as the source had it (a number less its offset, a letter, ...)
            found = [reader(part) for part, reader in zip(found, readers)]
            if None in found:
                return None
            return tuple(found[order.index(index)] for index in range(1, len(order) + 1))

        _TEMPLATES[template] = captures
    return _TEMPLATES[template]


def _capture_reader(spec):
    """What reads a written capture back into the text the source name had: None where it cannot. ``spec``:
    what follows the ``:`` of a placeholder (empty for ``{1}``)."""
    if not spec:
        return lambda part: part
    if spec == "letter":
        return lambda part: chr(ord("a") + int(part)) if part.isdigit() and int(part) < 26 else None
    width, offset = _NUMBER_SPEC.fullmatch(spec).groups()
    if not width and not offset:
        return lambda part: part
    return lambda part: str(int(part) - int(offset or 0)) if part.isdigit() and int(part) >= int(offset or 0) else None


def _escaped(text):
    return re.sub(r"([*?\[])", r"[\1]", text)
