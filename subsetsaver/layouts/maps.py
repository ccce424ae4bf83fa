"""Layout maps: the data files that say how one model family's checkpoint becomes another layout.

A map is a JSON object (see ``docs/leaving_tensorflow.md``)::

    {"name": "bert-to-hf", "family": "BERT (google-research/bert)",
     "source": {"layout": "tf", "config": "bert_config.json"},
     "target": {"layout": "safetensors", "config": "config.json", "metadata": {"format": "pt"}},
     "drop": "slots() | global_step()",
     "rules": [{"from": "bert/encoder/layer_*/attention/self/query/kernel",
                "to": "bert.encoder.layer.{1}.attention.self.query.weight", "transform": ["transpose"]}],
     "config": {"keys": {"hidden_size": "hidden_size"}, "values": {}, "fixed": {"model_type": "bert"}}}

``from`` is a glob of the selector language (``name('...')``, with ``*`` and ``?``); each wildcard
captures what it matched, and ``{1}``, ``{2}``, ... in ``to`` put it back. A rule with several ``from`` globs
concatenates (``"concat": AXIS``); one with several ``to`` names splits (``"split": AXIS``). A rule
is required unless ``"optional": true``; the first required rule that matches nothing says the
checkpoint is of another family. ``drop`` is selector text, evaluated on the checkpoint's catalog
(roles from its names: ``slots()`` finds Adam's and AdamWeightDecay's moments).

Example::

    >>> layout = load_map("bert-to-hf")
    >>> layout.rules[0].source_globs
    ('bert/embeddings/word_embeddings',)
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

from .. import storage
from ..errors import LayoutMapError
from .transforms import parse_transforms

MAPS_DIRECTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "maps")
LAYOUTS = ("tf", "safetensors")
_PLACEHOLDER = re.compile(r"\{(\d+)\}")


def shipped_maps() -> tuple:
    """The names of the maps shipped with the package, sorted."""
    return tuple(sorted(os.path.basename(name)[:-5] for name in storage.list_directory(MAPS_DIRECTORY)
                        if name.endswith(".json")))


@dataclasses.dataclass(frozen=True)
class Rule:
    """One rule: source globs, target name templates, per-tensor transforms, concat or split axis."""

    number: int
    source_globs: tuple
    targets: tuple
    transforms: tuple = ()
    concat: int | None = None
    split: int | None = None
    optional: bool = False

    @property
    def text(self) -> str:
        sources = " + ".join(self.source_globs)
        return f"rule {self.number} ({sources} -> {', '.join(self.targets)})"

    def capture(self, name):
        """The wildcards' texts if the first glob matches ``name`` whole, else None."""
        found = _capturing(self.source_globs[0]).fullmatch(name)
        return None if found is None else found.groups()

    def sources(self, captures) -> tuple:
        """Every source name of this rule for ``captures`` (the other globs filled in)."""
        return tuple(_fill_glob(glob, captures) for glob in self.source_globs)

    def target_names(self, captures) -> tuple:
        return tuple(_PLACEHOLDER.sub(lambda m: captures[int(m.group(1)) - 1], target) for target in self.targets)


@dataclasses.dataclass(frozen=True)
class LayoutMap:
    """A parsed map (see the module's docstring). ``path`` is the file it came from."""

    name: str
    family: str
    source: dict
    target: dict
    drop: str | None
    rules: tuple
    config: dict
    path: str

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


def load_map(name_or_path) -> LayoutMap:
    """A shipped map by name (``bert-to-hf``), or a map file by path (a copy of one, changed).

    Raises :class:`~subsetsaver.errors.LayoutMapError` for an unknown name or a file that is not a map.
    """
    text = os.fspath(name_or_path)
    if text.endswith(".json") or os.sep in text:
        path = text
        if not os.path.isfile(path):
            raise LayoutMapError(f"no layout map file at '{path}'", fix=f"name a shipped map ({', '.join(shipped_maps())})"
                                 " or the path of a .json map file")
    else:
        path = os.path.join(MAPS_DIRECTORY, f"{text}.json")
        if not os.path.isfile(path):
            raise LayoutMapError(f"unknown layout map '{text}'",
                                 fix=f"use one of {', '.join(shipped_maps())}, or the path of a .json map file")
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except ValueError as error:
        raise LayoutMapError(f"layout map '{path}' is not JSON: {error}") from None
    return parse_map(data, path)


def parse_map(data, path="<map>") -> LayoutMap:
    """A :class:`LayoutMap` from a map's JSON object; a :class:`LayoutMapError` names the first bad part."""
    if not isinstance(data, dict):
        raise LayoutMapError(f"layout map '{path}' must be a JSON object")
    for key in ("name", "source", "target", "rules"):
        if key not in data:
            raise LayoutMapError(f"layout map '{path}' has no \"{key}\"")
    for side in ("source", "target"):
        if data[side].get("layout") not in LAYOUTS:
            raise LayoutMapError(f"layout map '{path}': \"{side}\".\"layout\" must be one of {', '.join(LAYOUTS)}")
    rules = tuple(_parse_rule(number, item, path) for number, item in enumerate(data["rules"], start=1))
    return LayoutMap(name=data["name"], family=data.get("family", data["name"]), source=data["source"],
                     target=data["target"], drop=data.get("drop"), rules=rules, config=data.get("config", {}),
                     path=path)


def _parse_rule(number, item, path) -> Rule:
    where = f"layout map '{path}', rule {number}"
    if not isinstance(item, dict) or "from" not in item or "to" not in item:
        raise LayoutMapError(f"{where} needs \"from\" and \"to\"")
    sources = (item["from"],) if isinstance(item["from"], str) else tuple(item["from"])
    targets = (item["to"],) if isinstance(item["to"], str) else tuple(item["to"])
    try:
        transforms = parse_transforms(item.get("transform"))
        _capturing(sources[0])
    except ValueError as error:
        raise LayoutMapError(f"{where}: {error}") from None
    if len(sources) > 1 and "concat" not in item:
        raise LayoutMapError(f"{where} has {len(sources)} sources: say along which axis with \"concat\"")
    if len(targets) > 1 and "split" not in item:
        raise LayoutMapError(f"{where} has {len(targets)} targets: say along which axis with \"split\"")
    wildcards = _wildcard_count(sources[0])
    for template in targets:
        for index in _PLACEHOLDER.findall(template):
            if not 1 <= int(index) <= wildcards:
                raise LayoutMapError(f"{where}: '{template}' uses {{{index}}}, but '{sources[0]}' has "
                                     f"{wildcards} wildcard(s)")
    for glob in sources[1:]:
        if _wildcard_count(glob) != wildcards:
            raise LayoutMapError(f"{where}: '{glob}' must have as many wildcards as '{sources[0]}'")
    return Rule(number=number, source_globs=sources, targets=targets, transforms=transforms,
                concat=item.get("concat"), split=item.get("split"), optional=bool(item.get("optional", False)))


_CAPTURING = {}


def _capturing(glob):
    """``glob`` as a compiled regex with one group per ``*`` or ``?``; every other character is itself."""
    if glob not in _CAPTURING:
        parts = re.split(r"(\*|\?)", glob)
        pattern = "".join("(.*?)" if part == "*" else "(.)" if part == "?" else _plain(part) for part in parts)
        _CAPTURING[glob] = re.compile(pattern, re.DOTALL)
    return _CAPTURING[glob]


def _plain(part):
    return re.escape(part)


def _wildcard_count(glob) -> int:
    return sum(1 for part in re.split(r"(\*|\?)", glob) if part in ("*", "?"))


def _fill_glob(glob, captures) -> str:
    values = iter(captures)
    return re.sub(r"\*|\?", lambda _: next(values), glob)
