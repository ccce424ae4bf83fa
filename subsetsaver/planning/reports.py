"""The reports a plan gives, and the one comparison of expected variables with a checkpoint.

Every backend and every restore path (the plan, moving-average evaluation, portable
files, Keras models) compares what it expects with what a checkpoint holds through
:func:`compare_spec` / :func:`compare_contents`, and describes each difference with
:meth:`Problem.describe`, so a mismatch reads the same wherever it is found.

Example::

    >>> problems = compare_contents([("dense/w", "dense/w", (3, 4), "float32")],
    ...                             {"dense/w": ((4, 3), "float32")})
    >>> problems[0].describe()
    'shape mismatch: dense/w, expected [3, 4] float32, checkpoint has [4, 3] float32'
"""

from __future__ import annotations

import dataclasses

from ..errors import CheckpointMismatchError, Fix, with_fixes

LISTED_UNEXPECTED = 20
@dataclasses.dataclass(frozen=True)
class Problem:
    """One difference between a plan and a checkpoint.

    ``kind``: 'missing' (the plan restores ``name`` but the checkpoint lacks
    ``checkpoint_name``), 'shape' or 'dtype' (both have it, differently), or
    'rows' (a row map cannot take the checkpoint's tensor: ``detail`` says why), or
    'unexpected' (the checkpoint holds ``checkpoint_name`` and the plan does not restore
    it; ``name`` is set when the graph has that variable and will initialize it).
    ``nearest``: for a missing name, the closest name the checkpoint does hold.
    """

    kind: str
    name: str | None
    checkpoint_name: str
    expected_shape: tuple | None = None
    expected_dtype: str | None = None
    found_shape: tuple | None = None
    found_dtype: str | None = None
    nearest: str | None = None
    detail: str | None = None

    @property
    def blocking(self) -> bool:
        """True for what stops a restore: missing, shape and dtype problems."""
        return self.kind != "unexpected"

    def describe(self) -> str:
        renamed = f" (checkpoint name {self.checkpoint_name})" if self.name and self.name != self.checkpoint_name else ""
        expected = _spec_text(self.expected_shape, self.expected_dtype)
        found = _spec_text(self.found_shape, self.found_dtype)
        if self.kind == "missing":
            hint = f"; nearest in the checkpoint: {self.nearest}" if self.nearest else ""
            return f"missing: {self.name}{renamed}, expected {expected}{hint}"
        detail = f" ({self.detail})" if self.detail else ""
        if self.kind in ("shape", "dtype"):
            return f"{self.kind} mismatch: {self.name}{renamed}, expected {expected}, checkpoint has {found}{detail}"
        if self.kind == "rows":
            return f"row map: {self.name}{renamed}, checkpoint has {found}: {self.detail}"
        fate = f"; the plan initializes graph variable {self.name}" if self.name else ""
        return f"not restored: {self.checkpoint_name} {found}{fate}"


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """The pre-flight diff between a plan and a checkpoint (see :meth:`Plan.check`).

    ``problems``: every :class:`Problem`, blocking ones first in the plan's order, then
    the checkpoint's tensors the plan does not restore. ``remap``: a suggested ``remap``
    when the missing names exist under another scope prefix (else None).
    ``manifest``: the checkpoint's subsetsaver manifest, if it has one.
    """

    checkpoint: str
    selector: str
    problems: tuple
    remap: dict | None = None
    remap_resolves: int = 0
    manifest: dict | None = None

    @property
    def blocking(self) -> tuple:
        return tuple(p for p in self.problems if p.blocking)

    @property
    def ok(self) -> bool:
        """No missing, shape or dtype problem (tensors the plan ignores are fine)."""
        return not self.blocking

    def of_kind(self, kind) -> tuple:
        return tuple(p for p in self.problems if p.kind == kind)

    @property
    def missing(self) -> tuple:
        return self.of_kind("missing")

    @property
    def unexpected(self) -> tuple:
        return self.of_kind("unexpected")

    @property
    def reason(self) -> str:
        """What does not match, line by line, without the remedies (see :attr:`fixes`)."""
        counts = []
        for kind, label, plural in (("missing", "missing", ""), ("shape", "shape mismatch", "es"),
                                    ("dtype", "dtype mismatch", "es"), ("rows", "row map problem", "s")):
            count = len(self.of_kind(kind))
            if count:
                counts.append(f"{count} {label}{plural if count > 1 else ''}")
        lines = [f"checkpoint '{self.checkpoint}' does not match the plan {self.selector}: {', '.join(counts)}"]
        lines += describe_all(self.blocking)
        if self.manifest is not None:
            lines.append(f"the checkpoint was written by a plan with selector {self.manifest.get('selector')}")
        return "\n".join(lines)

    @property
    def fixes(self) -> tuple:
        """The remedies for a mismatch, as arguments of :func:`~subsetsaver.plan` (the command line
        shows them as its flags): the suggested ``remap``, then ``on_mismatch='initialize'``."""
        fixes = []
        if self.remap:
            missing = len(self.missing)
            fixes.append(Fix("remap", self.remap, f"{remap_in_words(self.remap)} (the checkpoint holds "
                                                  f"{self.remap_resolves} of the {missing} missing "
                                                  f"variable{'s' if missing > 1 else ''} that way)"))
        fixes.append(Fix("on_mismatch", "initialize", "to initialize these variables instead of restoring them"))
        return tuple(fixes)

    def error(self) -> CheckpointMismatchError:
        """The CheckpointMismatchError a restore raises for this report."""
        return CheckpointMismatchError(self.reason, self.blocking, fixes=self.fixes, path=self.checkpoint)

    def text(self, remedies=None) -> str:
        """The report as printed; ``remedies``: the :attr:`fixes` as worded (default: as arguments)."""
        if self.ok:
            head = f"checkpoint '{self.checkpoint}' matches the plan {self.selector}"
        else:
            head = with_fixes(self.reason, [str(fix) for fix in self.fixes] if remedies is None else remedies)
        unexpected = self.unexpected
        lines = [head] + ["  " + p.describe() for p in unexpected[:LISTED_UNEXPECTED]]
        if len(unexpected) > LISTED_UNEXPECTED:
            lines.append(f"  ... and {len(unexpected) - LISTED_UNEXPECTED} more tensors the plan does not restore")
        return "\n".join(lines)

    def __str__(self):
        return self.text()


def remap_in_words(rules) -> str:
    """What scope rules ``{checkpoint scope: graph scope}`` do, in words, as the purpose of a suggested remap
    ('/' is the root scope: ``{'conv_1/': '/'}`` drops a scope the checkpoint has and the graph has not).

    >>> remap_in_words({'conv_1/': '/'})
    "to read each variable NAME from the checkpoint's conv_1/NAME"
    >>> remap_in_words({'model/': 'net/'})
    "to read each variable net/NAME from the checkpoint's model/NAME"
    """
    def scope(text):
        return "" if text == "/" else text

    return "to read " + " and ".join(f"each variable {scope(new)}NAME from the checkpoint's {scope(old)}NAME"
                                     for old, new in rules.items())


@dataclasses.dataclass(frozen=True)
class RestoreReport:
    """What :meth:`Plan.restore_or_initialize` did.

    ``checkpoint``: the prefix restored from, or None (everything initialized).
    ``restored`` / ``initialized``: variable names, in creation order. ``mismatched``:
    the problems ``on_mismatch='initialize'`` handled by initializing (empty otherwise).
    ``from_averages``: with ``use_averages``, the restored variables that came from their
    moving-average shadow (the others in ``restored`` came from their own values).
    """

    checkpoint: str | None
    restored: tuple
    initialized: tuple
    mismatched: tuple = ()
    from_averages: tuple = ()


def _spec_text(shape, dtype) -> str:
    if shape is None and dtype is None:
        return "?"
    dims = "?" if shape is None else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
    return f"{dims} {dtype}"


def compare_spec(name, key, shape, dtype, found, region=None):
    """The shape or dtype Problem of variable ``name`` against checkpoint entry ``found``
    (``(shape, dtype)`` of ``key``, or ``(shape, dtype, region)`` for a stored part of a
    partitioned variable), or None when they fit. ``region``: the ``(offset, shape)`` the
    variable expects to find stored, when it stores only part of its full shape."""
    found_shape, found_dtype = found[0], found[1]
    shape_ok = _compatible(shape, found_shape)
    if shape_ok and region is not None:
        found_region = found[2] if len(found) > 2 else None
        shape_ok = found_region is not None and (tuple(found_region[0]), tuple(found_region[1])) == tuple(region)
    if not shape_ok:
        return Problem("shape", name, key, shape, dtype, found_shape, found_dtype)
    if dtype != found_dtype:
        return Problem("dtype", name, key, shape, dtype, found_shape, found_dtype)
    return None


def compare_contents(expected, contents, nearest=None) -> list:
    """Every missing, shape and dtype Problem of ``expected`` against a checkpoint's ``contents``.

    ``expected``: ``(name, key, shape, dtype)`` or ``(name, key, shape, dtype, region)`` per
    variable, in the order problems should be listed; ``contents``: key -> ``(shape, dtype)``
    (or with a region, see :func:`compare_spec`); ``nearest``: key -> the closest name the
    checkpoint holds, for missing ones.
    """
    problems = []
    for name, key, shape, dtype, *region in expected:
        found = contents.get(key)
        if found is None:
            problems.append(Problem("missing", name, key, shape, dtype, nearest=(nearest or {}).get(key)))
            continue
        problem = compare_spec(name, key, shape, dtype, found, region[0] if region else None)
        if problem is not None:
            problems.append(problem)
    return problems


def _compatible(expected, found) -> bool:
    if expected is None:
        return True
    return len(expected) == len(found) and all(e is None or e == f for e, f in zip(expected, found))


def describe_all(problems) -> list:
    """One indented line per problem, as every mismatch message lists them."""
    return ["  " + problem.describe() for problem in problems]
