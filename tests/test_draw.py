"""Pictures: set diagrams whose labels and areas follow the selectors, scope trees that add up."""

import collections
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ElementTree

import graphs
import numpy as np
import pytest
import tensorflow as tf
from click.testing import CliRunner
from markers import needs_dot

import subsetsaver as ss
from subsetsaver import catalog as catalog_module
from subsetsaver import draw
from subsetsaver.cli.draw_command import draw_command
from subsetsaver.draw import plan_tree as plan_tree_module
from subsetsaver.draw import venn as venn_module
from subsetsaver.errors import SubsetSaverWarning
from subsetsaver.selectors import format_bytes

v1 = tf.compat.v1
SVG = "{http://www.w3.org/2000/svg}"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MNIST_SETS = {"trainable": ss.trainable(), "conv_1/bn": ss.scope("conv_1/bn"), "conv_2/bn": ss.scope("conv_2/bn")}
SEED_SAVE = ss.trainable() | ss.scope("conv_1/bn") | ss.scope("conv_2/bn")
Finding = collections.namedtuple("Finding", "code severity variables message")


@pytest.fixture(scope="module")
def mnist():
    return graphs.mnist_cnn()


@pytest.fixture(scope="module")
def mnist_catalog(mnist):
    return catalog_module.load(mnist.graph)


def resnet_graph(blocks=(3, 4, 6, 3)):
    """ResNet-50's variables (names and shapes, bottleneck units), trained with momentum."""
    graph = tf.Graph()
    with graph.as_default():

        def conv(name, shape):
            with v1.variable_scope(name):
                v1.get_variable("weights", shape, initializer=v1.zeros_initializer())
                with v1.variable_scope("bn"):
                    depth = shape[-1]
                    v1.get_variable("gamma", [depth], initializer=v1.ones_initializer())
                    v1.get_variable("beta", [depth], initializer=v1.zeros_initializer())
                    v1.get_variable("moving_mean", [depth], initializer=v1.zeros_initializer(), trainable=False)
                    v1.get_variable("moving_variance", [depth], initializer=v1.ones_initializer(), trainable=False)

        with v1.variable_scope("resnet"):
            conv("conv0", [7, 7, 3, 64])
            depth_in = 64
            for i, units in enumerate(blocks, start=1):
                depth = 256 * 2 ** (i - 1)
                for j in range(1, units + 1):
                    with v1.variable_scope(f"block{i}/unit{j}"):
                        if j == 1:
                            conv("shortcut", [1, 1, depth_in, depth])
                        conv("conv1", [1, 1, depth_in, depth // 4])
                        conv("conv2", [3, 3, depth // 4, depth // 4])
                        conv("conv3", [1, 1, depth // 4, depth])
                    depth_in = depth
            with v1.variable_scope("logits"):
                v1.get_variable("weights", [2048, 1000], initializer=v1.zeros_initializer())
                v1.get_variable("biases", [1000], initializer=v1.zeros_initializer())
        loss = tf.add_n([tf.reduce_sum(v) for v in v1.trainable_variables()])
        with v1.variable_scope("opt"):
            step = v1.train.get_or_create_global_step()
            v1.train.MomentumOptimizer(0.1, 0.9).minimize(loss, global_step=step)
    return graph


@pytest.fixture(scope="module")
def resnet_catalog():
    return catalog_module.load(resnet_graph())


class StandInPlan:
    """What draw_plan reads from a plan, without the planner."""

    def __init__(self, catalog, selector):
        self.catalog = catalog
        self.saved_names = tuple(selector.names(catalog))
        self.rest_names = tuple(n for n in catalog.ordered_names if n not in set(self.saved_names))


def expected_regions(sets, catalog, saved=None):
    """code -> (names, bytes, saved names), computed from the selectors' names alone."""
    chosen = [set(sel.names(catalog, allow_empty=True)) for sel in sets.values()]
    saved_names = set(saved.names(catalog)) if saved is not None else set()
    regions = {}
    for name in catalog.ordered_names:
        code = "".join("1" if name in group else "0" for group in chosen)
        regions.setdefault(code, []).append(name)
    return {code: (names, catalog.nbytes(names), [n for n in names if n in saved_names])
            for code, names in regions.items()}


def svg_groups(path):
    """gid -> the lines of text inside that SVG group (matplotlib writes one <text> per line)."""
    root = ElementTree.parse(path).getroot()
    assert root.tag == SVG + "svg"
    return {g.get("id"): ["".join(t.itertext()) for t in g.iter(SVG + "text")]
            for g in root.iter(SVG + "g") if g.get("id")}


def polygon_area(patch):
    path = patch.get_path().transformed(patch.get_patch_transform())
    area = 0.0
    for polygon in path.to_polygons(closed_only=False):
        x, y = polygon[:, 0], polygon[:, 1]
        area += 0.5 * abs(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1)))
    return area


# ---------------------------------------------------------------------------------
# draw_sets
# ---------------------------------------------------------------------------------


def test_mnist_svg_labels_match_the_selectors_totals(tmp_path, mnist, mnist_catalog):
    path = tmp_path / "sets.svg"
    assert draw.draw_sets(MNIST_SETS, path, saved=SEED_SAVE, graph=mnist.graph) == path
    groups = svg_groups(path)
    expected = expected_regions(MNIST_SETS, mnist_catalog, SEED_SAVE)
    # trainable only, each bn scope's trainable part (beta, gamma) and statistics (2 EMA shadows),
    # and outside every set: the optimizer's slots, its own variables and the global step.
    assert sorted(expected) == ["000", "001", "010", "100", "101", "110"]
    assert [len(expected[c][0]) for c in ("010", "110", "001", "101")] == [2, 2, 2, 2]
    assert sorted(g for g in groups if g.startswith("region-")) == [f"region-{c}" for c in sorted(expected)]
    for code, (names, nbytes, _) in expected.items():
        lines = groups[f"region-{code}"]
        assert f"{len(names)} variables" in lines, (code, lines)
        assert format_bytes(nbytes) in lines, (code, lines)
    assert groups["region-010"] == ["conv_1/bn only", "2 variables", "256 B", "saved"]
    assert groups["region-101"] == ["trainable ∩ conv_2/bn", "2 variables", "512 B", "saved"]
    assert groups["region-000"][0] == "in none of the sets" and groups["region-000"][-1] == "not saved"
    assert groups["set-0"] == ["trainable"]

    caption = " ".join(groups["caption"])
    total = mnist_catalog.nbytes(mnist_catalog.all_names)
    saved_names = SEED_SAVE.names(mnist_catalog)
    assert f"all variables: {len(mnist_catalog)} ({format_bytes(total)})" in caption
    assert f"writes: {len(saved_names)} variables" in caption
    if importlib.util.find_spec("subsetsaver.planning") is None:
        pytest.fail("subsetsaver.planning is missing: cannot compare the caption with the planner's sizes")
    from subsetsaver.planning import plan

    sizes = plan(SEED_SAVE, mnist.graph).sizes
    assert f"an estimated {format_bytes(sizes.checkpoint_bytes)} checkpoint" in caption
    assert f"vs {format_bytes(sizes.full_checkpoint_bytes)} for a full Saver" in caption
    assert draw.checkpoint_bytes(mnist_catalog, saved_names) == sizes.checkpoint_bytes


@pytest.mark.parametrize("sets", [
    MNIST_SETS,
    {"trainable": ss.trainable(), "conv_2": ss.scope("conv_2")},
    {"trainable": ss.trainable(), "slots": ss.slots()},
], ids=["bn-scopes", "overlap", "disjoint"])
def test_areas_follow_bytes(mnist_catalog, sets):
    drawing = draw.sets_figure(sets, saved=ss.trainable(), graph=mnist_catalog)
    assert drawing.kind == "venn"
    expected = expected_regions(sets, mnist_catalog)
    codes = draw.VENN_CODES[len(sets)]
    per_byte = {}
    for code, patch in zip(codes, drawing.diagram.patches):
        nbytes = expected.get(code, ((), 0, ()))[1]
        if nbytes == 0:
            assert patch is None or polygon_area(patch) < 1e-9
        else:
            per_byte[code] = polygon_area(patch) / nbytes
    assert len(per_byte) >= 2
    reference = per_byte[max(per_byte, key=lambda c: expected[c][1])]
    for code, ratio in per_byte.items():
        assert ratio == pytest.approx(reference, rel=0.03), code
    assert drawing.area_error < 0.03
    frame = drawing.frame.get_width() * drawing.frame.get_height()
    drawn = sum(polygon_area(p) for p in drawing.diagram.patches if p is not None)
    outside = expected["0" * len(sets)][1]
    if drawing.frame_to_scale:
        assert (frame - drawn) / outside == pytest.approx(reference, rel=0.03)
    else:
        assert frame > drawn and "The frame is not to scale" in drawing.caption


def test_circles_that_cannot_fit_say_so(mnist_catalog):
    sets = {"trainable": ss.trainable(), "conv": ss.regex("conv"), "opt": ss.scope("opt")}
    drawing = draw.sets_figure(sets, saved=ss.trainable(), graph=mnist_catalog)
    assert drawing.area_error > 0.05
    assert "Circles cannot show these sets exactly: areas are approximate ('conv only' is drawn at" in drawing.caption
    # trainable and slots do not meet, but three circles have to draw a trainable ∩ slots region
    sets = {"trainable": ss.trainable(), "slots": ss.slots(), "fc": ss.scope("fc") | ss.scope("opt/fc")}
    drawing = draw.sets_figure(sets, graph=mnist_catalog)
    assert drawing.area_error == float("inf")
    assert "areas are approximate ('fc only' holds no bytes but is drawn)" in drawing.caption


def test_png_and_pdf_by_extension_and_unknown_extension(tmp_path, mnist_catalog):
    sets = {"trainable": ss.trainable(), "bn": ss.bn_stats()}
    draw.draw_sets(sets, tmp_path / "sets.png", saved=SEED_SAVE, graph=mnist_catalog)
    draw.draw_sets(sets, tmp_path / "sets.pdf", graph=mnist_catalog)
    assert (tmp_path / "sets.png").read_bytes()[:8] == PNG_SIGNATURE
    assert (tmp_path / "sets.pdf").read_bytes()[:5] == b"%PDF-"
    with pytest.raises(ValueError) as error:
        draw.draw_sets(sets, tmp_path / "sets.jpeg", graph=mnist_catalog)
    assert str(error.value) == (
        f"draw_sets cannot write '{tmp_path / 'sets.jpeg'}': unknown extension '.jpeg'; supported: .png, .svg, .pdf"
    )
    assert not (tmp_path / "sets.jpeg").exists()


def test_more_than_three_sets_give_an_upset_chart(tmp_path, mnist_catalog):
    sets = {"trainable": ss.trainable(), "conv_1": ss.scope("conv_1"), "conv_2": ss.scope("conv_2"),
            "bn": ss.bn_stats(), "opt": ss.scope("opt")}
    path = tmp_path / "upset.svg"
    draw.draw_sets(sets, path, saved=SEED_SAVE, graph=mnist_catalog)
    groups = svg_groups(path)
    expected = expected_regions(sets, mnist_catalog)
    assert sorted(g for g in groups if g.startswith("region-")) == [f"region-{c}" for c in sorted(expected)]
    for code, (names, nbytes, _) in expected.items():
        assert groups[f"region-{code}"] == [f"{len(names)} var{'s' if len(names) != 1 else ''}",
                                             format_bytes(nbytes)]
    assert draw.sets_figure(sets, graph=mnist_catalog).kind == "upset"


def test_zero_byte_regions_empty_sets_and_one_set_do_not_crash(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        v1.get_variable("weights", [100], initializer=v1.zeros_initializer())
        v1.Variable("", name="vocab_file", trainable=False)   # a string: 0 bytes of known size
        v1.Variable(["a", "b"], name="tokens", trainable=False)
    catalog = catalog_module.load(graph)
    assert [catalog.nbytes([n]) for n in catalog.ordered_names] == [400, 0, 0]
    sets = {"weights": ss.name("weights"), "strings": ss.name("vocab_*"), "nothing": ss.nothing()}
    path = tmp_path / "odd.svg"
    draw.draw_sets(sets, path, saved=ss.name("vocab_*"), graph=catalog)
    groups = svg_groups(path)
    assert groups["region-010"] == ["strings only", "1 variable", "0 B", "saved"]
    assert groups["region-000"] == ["in none of the sets", "1 variable", "0 B", "not saved"]
    assert "Empty (no variable): nothing." in " ".join(groups["caption"])
    draw.draw_sets({"weights": ss.name("weights")}, tmp_path / "one.png", graph=catalog)
    assert (tmp_path / "one.png").read_bytes()[:8] == PNG_SIGNATURE
    with pytest.raises(TypeError, match=r"^set 'w' must be a selector"):
        draw.draw_sets({"w": "weights"}, tmp_path / "bad.png", graph=catalog)


@pytest.mark.parametrize("sizes", [
    (1000, 1000, 256, 691236, 0, 402327, 1),       # matplotlib-venn: "holes are not supported"
    (256, 0, 10_000_000, 10, 10, 1, 256),          # matplotlib-venn: its root finder fails (ValueError)
])
def test_sizes_circles_cannot_lay_out_give_an_upset_chart(tmp_path, sizes):
    graph = tf.Graph()
    with graph.as_default():
        for code, size in zip(draw.VENN_CODES[3], sizes):
            if size:
                members = "".join(letter for letter, bit in zip("ABC", code) if bit == "1")
                v1.get_variable(f"in_{members}", [size], dtype=tf.int8, initializer=v1.zeros_initializer())
    sets = {"A": ss.regex("_.*A"), "B": ss.regex("_.*B"), "C$": ss.regex("C$")}
    drawing = draw.sets_figure(sets, graph=graph)
    assert drawing.kind == "upset"
    draw.draw_sets(sets, tmp_path / "fallback.svg", saved=ss.regex("A$"), graph=graph)
    groups = svg_groups(tmp_path / "fallback.svg")
    for code, size in zip(draw.VENN_CODES[3], sizes):
        if size:
            assert groups[f"region-{code}"] == ["1 var", format_bytes(size)]
    assert "saved = regex('A$') writes: 1 variable," in " ".join(groups["caption"])


def test_missing_viz_extra_names_it(tmp_path, monkeypatch, mnist_catalog):
    monkeypatch.setitem(sys.modules, "matplotlib_venn", None)
    with pytest.raises(ImportError) as error:
        draw.draw_sets(MNIST_SETS, tmp_path / "sets.png", graph=mnist_catalog)
    assert str(error.value) == "drawing needs matplotlib and matplotlib-venn: pip install subsetsaver[viz]"
    assert isinstance(error.value.__cause__, ImportError)
    assert not (tmp_path / "sets.png").exists()


def test_import_subsetsaver_imports_no_drawing_library():
    code = (
        "import sys, subsetsaver, subsetsaver.draw, subsetsaver.cli.draw_command\n"
        "print(sorted(m for m in ('matplotlib', 'matplotlib_venn', 'graphviz') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------
# draw_plan
# ---------------------------------------------------------------------------------

NODE = re.compile(r'^\s*"([scov])/([^"]*)" \[(.*?)\]$', re.M | re.S)
EDGE = re.compile(r'^\s*"([^"]+)" -> "([^"]+)"', re.M)


def dot_nodes(source):
    """node id -> (kind letter, attributes text) for the tree's nodes (the legend left out)."""
    return {f"{kind}/{name}": (kind, attributes) for kind, name, attributes in NODE.findall(source)}


def totals(attributes):
    count, nbytes = re.search(r'tooltip="[^"]*?: (\d+) variables?, (\d+) bytes', attributes).groups()
    return int(count), int(nbytes)


def check_dot(source):
    assert source.startswith("digraph ")
    depth = 0
    for character in re.sub(r'"(?:[^"\\]|\\.)*"', "", source):  # braces inside labels do not count
        depth += {"{": 1, "}": -1}.get(character, 0)
        assert depth >= 0
    assert depth == 0
    if shutil.which("dot"):
        result = subprocess.run(["dot", "-Tsvg"], input=source, capture_output=True, text=True)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        ElementTree.fromstring(result.stdout)


def check_totals_add_up(source, catalog):
    nodes = dot_nodes(source)
    leaves = [totals(a) for kind, a in nodes.values() if kind in "cov"]
    assert sum(c for c, _ in leaves) == len(catalog)
    assert sum(b for _, b in leaves) == catalog.nbytes(catalog.all_names)
    children = collections.defaultdict(list)
    for parent, child in EDGE.findall(source):
        if parent in nodes:
            children[parent].append(child)
    for node, (kind, attributes) in nodes.items():
        if kind == "s":
            parts = [totals(nodes[child][1]) for child in children[node]]
            assert totals(attributes) == (sum(c for c, _ in parts), sum(b for _, b in parts)), node
    assert totals(nodes["s/(root)"][1]) == (len(catalog), catalog.nbytes(catalog.all_names))
    return nodes


def fills(source):
    return {node: re.search(r'fillcolor="([^"]+)"', a).group(1) for node, (kind, a) in dot_nodes(source).items()
            if kind == "v"}


@needs_dot
def test_plan_tree_colours_variables_by_fate(tmp_path, mnist, mnist_catalog):
    stand_in = StandInPlan(mnist_catalog, ss.trainable())
    shadows = ss.bn_stats().names(mnist_catalog)
    finding = Finding("unsaved-state", "error", tuple(shadows[:2]), "conv_1/bn keeps moving averages ...")
    info = Finding("optimizer-state-saved", "info", ("conv_1/w",), "not a flag")
    path = tmp_path / "plan.svg"
    assert draw.draw_plan(stand_in, path, findings=[finding, info]) == path
    source = (tmp_path / "plan.dot").read_text()
    check_dot(source)
    ElementTree.parse(path)
    check_totals_add_up(source, mnist_catalog)
    colours = fills(source)
    assert set(colours) == {f"v/{n}" for n in mnist_catalog.ordered_names}  # 43 variables: all drawn
    for name in mnist_catalog.ordered_names:
        fate = "flagged" if name in shadows[:2] else "saved" if name in stand_in.saved_names else "initialized"
        assert colours[f"v/{name}"] == {"saved": draw.SAVED_COLOR, "initialized": draw.INITIALIZED_COLOR,
                                        "flagged": draw.FLAGGED_COLOR}[fate], name
    label = dot_nodes(source)["v/conv_2/w"][1]
    assert "[5, 5, 32, 64] float32 · 200.0 KB" in label
    assert 'tooltip="conv_2/w: 1 variable, 204800 bytes (saved)"' in label
    assert "unsaved-state (initialized)" in dot_nodes(source)[f"v/{shadows[0]}"][1]
    scope_label = dot_nodes(source)["s/conv_1/bn"][1]
    assert "bn\n4 variables · 512 B\nsaved 2, flagged 2" in scope_label
    assert "legend_flagged" in source


def test_plan_tree_with_the_real_planner_and_auditor(tmp_path, mnist, mnist_catalog):
    for module in ("subsetsaver.planning", "subsetsaver.audit"):
        if importlib.util.find_spec(module) is None:
            pytest.fail(f"{module} is missing")
    from subsetsaver.audit import audit
    from subsetsaver.planning import plan

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SubsetSaverWarning)
        the_plan = plan(ss.trainable(), mnist.graph)
    flagged = {n for f in audit(the_plan) if f.severity in ("error", "warning") for n in f.variables}
    assert flagged == set(ss.bn_stats().names(mnist_catalog))  # the four EMA shadows
    path = tmp_path / "plan.dot"
    assert draw.draw_plan(the_plan, path) == path
    source = path.read_text()
    check_dot(source)
    check_totals_add_up(source, the_plan.catalog)
    colours = fills(source)
    assert {n[2:] for n, c in colours.items() if c == draw.FLAGGED_COLOR} == flagged
    assert {n[2:] for n, c in colours.items() if c == draw.SAVED_COLOR} == set(the_plan.saved_names) - flagged
    assert {n[2:] for n, c in colours.items() if c == draw.INITIALIZED_COLOR} == set(the_plan.rest_names) - flagged


@needs_dot
def test_resnet_size_tree_stays_small_and_adds_up(tmp_path, resnet_catalog):
    assert len(resnet_catalog) > 300
    stand_in = StandInPlan(resnet_catalog, ss.trainable() | ss.name("**/moving_*"))
    path = tmp_path / "resnet.svg"
    draw.draw_plan(stand_in, path, findings=[])
    source = (tmp_path / "resnet.dot").read_text()
    check_dot(source)
    nodes = check_totals_add_up(source, resnet_catalog)
    assert 100 <= len(nodes) <= 150
    assert any(kind == "c" for kind, _ in nodes.values())
    root = ElementTree.parse(path).getroot()
    assert root.tag == SVG + "svg"

    tree = draw.scope_tree(resnet_catalog.ordered_names, resnet_catalog.nbytes)
    leaves, stack = [], [tree]
    while stack:
        item = stack.pop()
        stack.extend(item.children)
        if not item.children:
            leaves.append(item)
    names = [n for leaf in leaves for n in leaf.names]
    assert sorted(names) == sorted(resnet_catalog.ordered_names)  # each variable under exactly one leaf


def test_collapse_rules(resnet_catalog):
    names, nbytes = resnet_catalog.ordered_names, resnet_catalog.nbytes

    def drawn(tree):
        items, stack = [], [tree]
        while stack:
            item = stack.pop()
            items.append(item)
            stack.extend(item.children)
        return items

    shallow = draw.scope_tree(names, nbytes, max_depth=1)
    assert [(i.kind, i.label) for i in shallow.children] == [("scope", "resnet"), ("scope", "opt")]
    assert {i.kind for i in drawn(shallow) if i.depth == 2} <= {"collapsed", "variable"}
    narrow = draw.scope_tree(names, nbytes, max_children=5)
    items = drawn(narrow)
    assert all(len(i.children) <= 5 for i in items if i.kind == "scope" and i.depth > 0)
    collapsed = {i.path: len(plan_tree_module.child_items(i.scope, i.depth + 1)) for i in items if i.kind == "collapsed"}
    assert collapsed == {"resnet": 6, "opt/resnet": 6}  # conv0, block1-4, logits: too many children
    shallow = draw.scope_tree(names, nbytes, max_depth=2)
    items = drawn(shallow)
    assert max(i.depth for i in items if i.kind == "scope") == 2
    assert {i.path for i in items if i.kind == "collapsed" and i.depth == 3} >= {"resnet/block1/unit1",
                                                                                 "opt/resnet/block4"}
    small = draw.scope_tree(names, nbytes, max_nodes=20)
    assert len(drawn(small)) <= 20
    wide = draw.scope_tree([f"v{i}" for i in range(40)], lambda n: len(n), max_children=8)
    assert [i.kind for i in wide.children] == ["variable"] * 7 + ["others"]
    assert wide.children[-1].names == tuple(f"v{i}" for i in range(7, 40))


def test_without_dot_the_dot_file_is_still_written(tmp_path, monkeypatch, mnist_catalog):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    stand_in = StandInPlan(mnist_catalog, SEED_SAVE)
    with pytest.warns(SubsetSaverWarning) as caught:
        written = draw.draw_plan(stand_in, tmp_path / "plan.png", findings=[])
    assert [str(w.message) for w in caught] == [draw.INSTALL_DOT_HINT]
    assert draw.INSTALL_DOT_HINT == (
        "Graphviz's 'dot' program is not installed, so only the .dot file was written; "
        "install it with 'apt-get install graphviz', 'brew install graphviz' or 'conda install graphviz'"
    )
    assert written == str(tmp_path / "plan.dot")
    assert not (tmp_path / "plan.png").exists()
    assert (tmp_path / "plan.dot").read_text().startswith("digraph ")
    # shutil.which may find a dot that graphviz then cannot run: the same outcome.
    monkeypatch.setattr(plan_tree_module.shutil, "which", lambda program: "/nowhere/dot")
    with pytest.warns(SubsetSaverWarning, match="Graphviz's 'dot' program is not installed"):
        assert draw.draw_plan(stand_in, tmp_path / "again.svg", findings=[]) == str(tmp_path / "again.dot")


def test_plan_errors(tmp_path, monkeypatch, mnist_catalog):
    stand_in = StandInPlan(mnist_catalog, SEED_SAVE)
    with pytest.raises(ValueError) as error:
        draw.draw_plan(stand_in, tmp_path / "plan.jpg", findings=[])
    assert str(error.value) == (f"draw_plan cannot write '{tmp_path / 'plan.jpg'}': unknown extension '.jpg'; "
                                "supported: .dot, .gv, .svg, .png, .pdf")
    monkeypatch.setitem(sys.modules, "graphviz", None)
    with pytest.raises(ImportError, match=r"^drawing the scope tree needs the graphviz Python package: "
                                          r"pip install graphviz$"):
        draw.draw_plan(stand_in, tmp_path / "plan.svg", findings=[])
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mnist_meta(tmp_path_factory, mnist):
    path = tmp_path_factory.mktemp("meta") / "model.meta"
    with mnist.graph.as_default():
        v1.train.export_meta_graph(filename=str(path))
    return str(path)


def test_command_draws_sets_and_tree(tmp_path, mnist_meta, monkeypatch):
    runner = CliRunner()
    sets_path = tmp_path / "sets.svg"
    result = runner.invoke(draw_command, [
        "--graph", mnist_meta, "--save", "trainable() | scope('conv_1/bn') | scope('conv_2/bn')",
        "--set", "trainable=trainable()", "--set", "conv_1/bn=scope('conv_1/bn')",
        "--set", "conv_2/bn=scope('conv_2/bn')", "-o", str(sets_path)])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"wrote {sets_path}\n"
    assert svg_groups(sets_path)["region-010"] == ["conv_1/bn only", "2 variables", "256 B", "saved"]

    default_path = tmp_path / "default.png"
    result = runner.invoke(draw_command, ["--graph", mnist_meta, "-o", str(default_path)])
    assert result.exit_code == 0, result.output
    assert default_path.read_bytes()[:8] == PNG_SIGNATURE

    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    tree_path = tmp_path / "tree.svg"
    with pytest.warns(SubsetSaverWarning) as planned:  # the command line prints these as one line each
        result = runner.invoke(draw_command, ["--graph", mnist_meta, "--save", "trainable()", "--tree",
                                              "-o", str(tree_path)])
    assert result.exit_code == 0, result.output
    assert [str(w.message) for w in planned] == [
        f"unsaved-state: {layer} keeps moving averages of the batch mean and variance that inference reads; they "
        f"are not saved and will be re-initialized on restore. Add bn_stats() or scope('{layer}')."
        for layer in ("conv_1/bn", "conv_2/bn")
    ]
    assert f"warning: {draw.INSTALL_DOT_HINT}\n" in result.stderr
    assert result.stdout == f"wrote {tmp_path / 'tree.dot'} (not {tree_path})\n"
    assert (tmp_path / "tree.dot").read_text().startswith("digraph ")


def test_command_rejects_bad_options(tmp_path, mnist_meta):
    runner = CliRunner()
    result = runner.invoke(draw_command, ["--graph", mnist_meta, "--set", "no-equals-sign", "-o",
                                          str(tmp_path / "x.png")])
    assert result.exit_code == 2
    assert "Invalid value for --set: expected LABEL=EXPR, got 'no-equals-sign'" in result.output
    result = runner.invoke(draw_command, ["--graph", mnist_meta, "--tree", "-o", str(tmp_path / "x.svg")])
    assert result.exit_code == 2
    assert "--tree needs --save EXPR" in result.output
    assert list(tmp_path.iterdir()) == []


def dot_depths(source):
    """(brace depth, line) for each line of a DOT source: 1 is the top graph, 2+ inside subgraphs."""
    depth, lines = 0, []
    for line in source.splitlines():
        lines.append((depth, line))
        depth += line.count("{") - line.count("}")
    return lines


def test_plan_tree_draws_each_scope_node_in_its_own_box_and_a_legend_of_what_is_drawn(tmp_path, mnist_catalog):
    """Edges live on the top graph: graphviz puts every node an edge names into the subgraph the edge is
    written in, which drew each parent inside its child's box."""
    stand_in = StandInPlan(mnist_catalog, ss.trainable())
    draw.draw_plan(stand_in, tmp_path / "plan.dot", findings=[])
    source = (tmp_path / "plan.dot").read_text()
    inside = [line for depth, line in dot_depths(source) if "->" in line and depth > 1 and "legend" not in line]
    assert inside == []
    clusters = re.findall(r'subgraph "?cluster_s/([^" {]+)', source)
    assert "conv_1" in clusters and "opt/conv_1/bn" in clusters
    legend = list(dict.fromkeys(re.findall(r"(legend_\w+) \[", source)))
    assert legend == ["legend_saved", "legend_initialized"]  # nothing flagged, nothing collapsed


def test_sets_legend_lists_only_the_states_drawn_and_leaders_cross_no_label(mnist_catalog):
    for saved, expected in ((ss.trainable(), ["saved", "not saved"]),
                            (ss.trainable() | ss.scope("opt/conv_1"), ["saved", "partly saved", "not saved"])):
        drawing = draw.sets_figure({"trainable": ss.trainable(), "bn_stats": ss.bn_stats(), "slots": ss.slots()},
                                   saved=saved, graph=mnist_catalog)
        axes = drawing.figure.axes[0]
        assert [text.get_text() for text in axes.get_legend().get_texts()] == expected
        renderer = drawing.figure.canvas.get_renderer() if hasattr(drawing.figure.canvas, "get_renderer") else None
        if renderer is None:
            from matplotlib.backends.backend_agg import FigureCanvasAgg

            renderer = FigureCanvasAgg(drawing.figure).get_renderer()
        notes = [child for child in axes.texts if getattr(child, "arrow_patch", None) is not None]
        others = [child for child in axes.texts if child not in notes]
        for note in notes:
            start = axes.transAxes.transform(note.xyann)
            end = axes.transData.transform(note.xy)
            for other in others:
                box = other.get_window_extent(renderer)
                assert not venn_module.crosses_box(start, end, box), (note.get_text(), other.get_text())


def test_command_never_replaces_the_dot_source_beside_the_picture_without_force(tmp_path, mnist_meta, monkeypatch,
                                                                                run_cli):
    """-o plan.svg writes plan.dot too (alone when Graphviz's dot is missing): a plan.dot the user already
    has is refused, before anything is drawn, then replaced with --force."""
    monkeypatch.setattr(plan_tree_module.shutil, "which", lambda program: None)
    (tmp_path / "plan.dot").write_text("the user's own graph\n")
    picture = tmp_path / "plan.svg"
    arguments = ["draw", "--graph", mnist_meta, "--save", "trainable()", "--tree", "-o", picture]
    result = run_cli(*arguments)
    assert (result.returncode, result.stdout, result.stderr) == (
        2, "", f"subsetsaver: error: '{tmp_path / 'plan.dot'}' already exists (the tree's DOT source, written "
               f"beside '{picture}'); pass --force to replace it\n")
    assert (tmp_path / "plan.dot").read_text() == "the user's own graph\n" and not picture.exists()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SubsetSaverWarning)
        result = run_cli(*arguments, "--force")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"wrote {tmp_path / 'plan.dot'} (not {picture})\n"
    assert (tmp_path / "plan.dot").read_text().startswith("digraph ")
