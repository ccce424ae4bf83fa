"""``draw_plan``: a plan's scope tree drawn with graphviz, each variable coloured by its fate.

``scope_tree`` decides which scopes are drawn open and which collapse into one node, so a
model of thousands of variables stays readable; ``draw_plan`` colours it by what the plan
does (saved, initialized, flagged by the audit) and writes the DOT source, rendering it
with Graphviz's ``dot`` when that program is installed.

Example::

    draw_plan(ss.plan(ss.trainable() | ss.bn_stats(), graph), "plan.svg")
    # 'plan.svg'
    [item.label for item in scope_tree(["conv_1/w", "conv_1/b", "step"], len).children]
    # ['step', 'conv_1']
"""

from __future__ import annotations

import dataclasses
import heapq
import os
import shutil
import warnings

from ..audit import audit
from ..errors import SubsetSaverWarning
from ..selectors import format_bytes
from .output import TREE_FORMATS, check_extension
from .style import FLAGGED_COLOR, INITIALIZED_COLOR, SAVED_COLOR, variables_text

GRAPHVIZ_PACKAGE_MESSAGE = "drawing the scope tree needs the graphviz Python package: pip install graphviz"
INSTALL_DOT_HINT = (
    "Graphviz's 'dot' program is not installed, so only the .dot file was written; "
    "install it with 'apt-get install graphviz', 'brew install graphviz' or 'conda install graphviz'"
)
_FLAG_SEVERITIES = ("error", "warning")


@dataclasses.dataclass
class TreeItem:
    """One drawn node of the scope tree.

    ``kind``: 'scope' (an expanded scope, drawn as a header over its children),
    'collapsed' (a scope drawn as one node), 'others' (the root's smallest children,
    drawn as one node) or 'variable'. ``names`` are every variable under it.
    """

    kind: str
    path: str      # the full scope path or variable name
    label: str     # the name shown, relative to the parent
    depth: int
    names: tuple
    children: list = dataclasses.field(default_factory=list)
    scope: object = dataclasses.field(default=None, repr=False)


class _Scope:
    def __init__(self, path):
        self.path = path
        self.scopes = {}
        self.variables = []  # full names
        self._names = None

    def child(self, part):
        if part not in self.scopes:
            self.scopes[part] = _Scope(f"{self.path}/{part}" if self.path else part)
        return self.scopes[part]

    def names(self):
        if self._names is None:
            self._names = tuple(self.variables) + tuple(n for s in self.scopes.values() for n in s.names())
        return self._names


def scope_tree(names, nbytes, *, max_children=16, max_depth=5, max_nodes=150) -> TreeItem:
    """The drawn tree over ``names`` (creation order): scopes expand breadth first, biggest first,
    while they are at most ``max_depth`` levels deep, have at most ``max_children`` children and
    the drawing stays within ``max_nodes`` nodes; the rest collapse into one node each.

    ``nbytes(names) -> int`` sizes a group of variables.
    """
    root = _Scope("")
    for name in names:
        parts = name.split("/")
        scope = root
        for part in parts[:-1]:
            scope = scope.child(part)
        scope.variables.append(name)

    top = TreeItem("scope", "", "", 0, root.names())
    children = child_items(root, 1)
    limit = min(max_children, max_nodes - 1)
    if len(children) > limit:  # the root cannot collapse into itself: fold its smallest children
        children.sort(key=lambda item: -nbytes(item.names))
        kept, folded = children[: limit - 1], children[limit - 1:]
        order = {n: i for i, n in enumerate(names)}
        kept.sort(key=lambda item: order[item.names[0]])
        folded_names = tuple(sorted((n for item in folded for n in item.names), key=order.__getitem__))
        children = kept + [TreeItem("others", "", f"{len(folded)} more", 1, folded_names)]
    top.children = children
    drawn = 1 + len(children)
    queue = []
    for position, item in enumerate(children):
        heapq.heappush(queue, (item.depth, -nbytes(item.names), position, item))
    counter = len(children)
    while queue:
        _, _, _, item = heapq.heappop(queue)
        if item.kind != "collapsed" or item.depth > max_depth:
            continue
        kids = child_items(item.scope, item.depth + 1)
        if len(kids) > max_children or drawn + len(kids) > max_nodes:
            continue
        item.kind, item.children = "scope", kids
        drawn += len(kids)
        for kid in kids:
            counter += 1
            heapq.heappush(queue, (kid.depth, -nbytes(kid.names), counter, kid))
    return top


def child_items(scope, depth) -> list:
    """The items directly under ``scope``: its variables, then its sub-scopes (single chains merged)."""
    items = [TreeItem("variable", name, name.rsplit("/", 1)[-1], depth, (name,)) for name in scope.variables]
    for part, sub in scope.scopes.items():
        label = part
        while not sub.variables and len(sub.scopes) == 1:  # conv_1/bn/moments: one cluster, not three
            (next_part, sub), = sub.scopes.items()
            label = f"{label}/{next_part}"
        names = sub.names()
        if len(names) == 1:
            item = TreeItem("variable", names[0], names[0][len(sub.path) - len(label):], depth, names)
        else:
            item = TreeItem("collapsed", sub.path, label, depth, names, scope=sub)
        items.append(item)
    return items


def draw_plan(plan, path, *, max_children=16, max_depth=5, max_nodes=150, findings=None):
    """Draw ``plan``'s scope tree with graphviz and save it to ``path`` (.dot, .gv, .svg, .png, .pdf).

    Variables are coloured by fate: saved, initialized, or flagged by the audit (the error and
    warning ``findings``; by default ``ss.audit(plan)``). Each shows its shape and
    size; each scope its totals. Scopes deeper than ``max_depth``, with more than
    ``max_children`` children, or past ``max_nodes`` drawn nodes collapse into one node
    with their count and bytes.

    The DOT source is always written beside the picture (``plan.svg`` -> ``plan.dot``).
    Without Graphviz's ``dot`` program only the .dot is written, a ``SubsetSaverWarning``
    says how to install it, and the .dot path is returned.

    ``plan`` is what ``ss.plan`` returns, or anything with its ``saved_names`` and ``catalog``
    (every other variable of the catalog is initialized, as ``rest_names`` says).

    draw_plan(ss.plan(ss.trainable() | ss.bn_stats(), graph), "plan.svg")
    # 'plan.svg'
    """
    extension = check_extension(path, TREE_FORMATS, "draw_plan")
    if max_children < 2 or max_depth < 1 or max_nodes < 2:
        raise ValueError("draw_plan needs max_children >= 2, max_depth >= 1 and max_nodes >= 2")
    graphviz = _import_graphviz()
    catalog = plan.catalog
    saved = frozenset(plan.saved_names)
    if findings is None:
        findings = _audit(plan)
    flags = {}
    for finding in findings:
        if finding.severity in _FLAG_SEVERITIES:
            for name in finding.variables:
                flags.setdefault(name, []).append(finding)
    tree = scope_tree(catalog.ordered_names, catalog.nbytes, max_children=max_children, max_depth=max_depth,
                      max_nodes=max_nodes)
    dot = _tree_dot(graphviz, tree, catalog, saved, flags)
    text = dot.source
    dot_path = dot_source_path(path)
    with open(dot_path, "w", encoding="utf-8") as handle:
        handle.write(text)
    if extension in (".dot", ".gv"):
        return path
    if shutil.which("dot") is None:
        warnings.warn(INSTALL_DOT_HINT, SubsetSaverWarning, stacklevel=2)
        return dot_path
    try:
        rendered = dot.pipe(format=extension[1:])
    except graphviz.ExecutableNotFound:
        warnings.warn(INSTALL_DOT_HINT, SubsetSaverWarning, stacklevel=2)
        return dot_path
    with open(os.fspath(path), "wb") as handle:
        handle.write(rendered)
    return path


def dot_source_path(path) -> str:
    """Where :func:`draw_plan` writes the DOT source of a picture at ``path``: ``path`` itself for .dot
    and .gv, else beside it.

    >>> dot_source_path("out/plan.svg"), dot_source_path("plan.gv")
    ('out/plan.dot', 'plan.gv')
    """
    path = os.fspath(path)
    return path if os.path.splitext(path)[1].lower() in (".dot", ".gv") else os.path.splitext(path)[0] + ".dot"


def _import_graphviz():
    try:
        import graphviz
    except ImportError as error:
        raise ImportError(GRAPHVIZ_PACKAGE_MESSAGE) from error
    return graphviz


def _audit(plan) -> list:
    return list(audit(plan))


def _fate(name, saved, flags) -> str:
    if name in flags:
        return "flagged"
    return "saved" if name in saved else "initialized"


_FATE_COLORS = {"saved": SAVED_COLOR, "initialized": INITIALIZED_COLOR, "flagged": FLAGGED_COLOR}


def _tally(names, catalog, saved, flags) -> dict:
    """fate -> (count, bytes) over ``names``."""
    tally = {}
    for name in names:
        fate = _fate(name, saved, flags)
        count, size = tally.get(fate, (0, 0))
        tally[fate] = (count + 1, size + catalog.nbytes((name,)))
    return tally


def _tally_text(tally) -> str:
    return ", ".join(f"{fate} {tally[fate][0]}" for fate in ("saved", "initialized", "flagged") if fate in tally)


def _stripes(tally) -> str:
    total_bytes = sum(size for _, size in tally.values())
    total_count = sum(count for count, _ in tally.values())
    weights = [(fate, (size / total_bytes) if total_bytes else count / max(total_count, 1))
               for fate, (count, size) in tally.items()]
    weights = [(fate, w) for fate, w in weights if w > 0] or [("initialized", 1.0)]
    if len(weights) == 1:
        return _FATE_COLORS[weights[0][0]]
    order = ("saved", "initialized", "flagged")
    weights.sort(key=lambda item: order.index(item[0]))
    # graphviz wants the fractions to sum to at most 1; the last stripe takes what is left.
    parts = [f"{_FATE_COLORS[fate]};{max(w, 0.001) - 0.0005:.4f}" for fate, w in weights[:-1]]
    return ":".join(parts + [_FATE_COLORS[weights[-1][0]]])


def _shape_text(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _tree_dot(graphviz, tree, catalog, saved, flags):
    records = catalog.records_by_name
    dot = graphviz.Digraph("scope_tree", format="svg")
    total = _tally(tree.names, catalog, saved, flags)
    dot.attr(rankdir="LR", ordering="out", nodesep="0.06", ranksep="0.3", fontname="Helvetica", fontsize="12", labelloc="t",
             labeljust="l", compound="true",
             label=f"Scope tree: {variables_text(len(tree.names))}, {format_bytes(catalog.nbytes(tree.names))} "
                   f"({_tally_text(total)})")
    dot.attr("node", fontname="Helvetica", fontsize="9", shape="box", style="rounded,filled", height="0.3",
             margin="0.06,0.03")
    dot.attr("edge", arrowhead="none", color="#9a9a9a")

    def node_id(item):
        # '/'-separated prefixes: graphviz reads ':' in a node name as a port.
        return {"scope": "s/", "collapsed": "c/", "others": "o/", "variable": "v/"}[item.kind] + (item.path or "(root)")

    def tooltip(item, tally):
        return (f"{item.path or item.label or 'all variables'}: {variables_text(len(item.names))}, "
                f"{catalog.nbytes(item.names)} bytes ({_tally_text(tally)})")

    def emit(graph, item, parent_id, shade):
        identifier = node_id(item)
        tally = _tally(item.names, catalog, saved, flags)
        size = format_bytes(catalog.nbytes(item.names))
        if item.kind == "variable":
            name = item.names[0]
            record = records[name]
            fate = _fate(name, saved, flags)
            lines = [item.label, f"{_shape_text(record.shape)} {record.dtype} · {size}"]
            if fate == "flagged":
                codes = ", ".join(dict.fromkeys(f.code for f in flags[name]))
                lines.append(f"{codes} ({'saved' if name in saved else 'initialized'})")
            text = f"{name}: 1 variable, {catalog.nbytes(item.names)} bytes ({fate})"
            if fate == "flagged":
                text += " — " + " ".join(f.message for f in flags[name])
            graph.node(identifier, "\n".join(lines), fillcolor=_FATE_COLORS[fate], tooltip=text)
            drawn.add(fate)
        elif item.kind in ("collapsed", "others"):
            title = f"{item.label}/ …" if item.kind == "collapsed" else f"… {item.label}"
            graph.node(identifier, f"{title}\n{variables_text(len(item.names))} · {size}\n{_tally_text(tally)}",
                       shape="box", style="filled", fillcolor=_stripes(tally), penwidth="1.4",
                       tooltip=tooltip(item, tally))
            drawn.add("collapsed")
        else:
            title = item.label or "all variables"
            graph.node(identifier, f"{title}\n{variables_text(len(item.names))} · {size}\n{_tally_text(tally)}",
                       shape="tab", style="filled", fillcolor="white", fontname="Helvetica-Bold",
                       tooltip=tooltip(item, tally))
        if parent_id is not None:
            # On the top graph, not inside a cluster: graphviz adds every node an edge statement names
            # to the subgraph the statement is in, which drew each parent inside its child's box.
            edges.append((parent_id, identifier))
        # Inside a cluster, dot stacks the nodes emitted first at the bottom: reverse them to read top-down.
        for child in item.children if graph is dot else reversed(item.children):
            if child.kind == "scope":
                with graph.subgraph(name=f"cluster_{node_id(child)}") as cluster:
                    cluster.attr(label="", style="rounded,filled", color="#c8c8c8",
                                 fillcolor="#f6f6f6" if shade else "#ececec")
                    emit(cluster, child, identifier, not shade)
            else:
                emit(graph, child, identifier, shade)

    edges, drawn = [], set()
    emit(dot, tree, None, True)
    for parent_id, identifier in edges:
        dot.edge(parent_id, identifier)
    _legend(dot, drawn)
    return dot


_LEGEND = (
    ("saved", "saved (restored from the checkpoint)", {"fillcolor": SAVED_COLOR}),
    ("initialized", "initialized (not in the checkpoint)", {"fillcolor": INITIALIZED_COLOR}),
    ("flagged", "flagged by the audit", {"fillcolor": FLAGGED_COLOR}),
    ("collapsed", "collapsed scope: count, bytes,\nstripes by bytes of each fate",
     {"shape": "box", "style": "filled", "fillcolor": f"{SAVED_COLOR};0.5:{INITIALIZED_COLOR}"}),
)


def _legend(dot, drawn):
    """A legend of the fates and node kinds the picture shows, and only those."""
    entries = [(f"legend_{key}", text, style) for key, text, style in _LEGEND if key in drawn]
    with dot.subgraph(name="cluster_legend") as legend:
        legend.attr(label="Legend", style="rounded", color="#bbbbbb", fontsize="10")
        for identifier, text, style in entries:
            legend.node(identifier, text, **style)
        for (first, _, _), (second, _, _) in zip(entries, entries[1:]):
            legend.edge(first, second, style="invis")
