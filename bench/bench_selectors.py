"""Resolving a selector on a wide graph against the equivalent ``tf.compat.v1.get_collection`` calls.

Lines, all printed by ``python -m bench bench.bench_selectors`` (or ``python bench/bench_selectors.py``):

- ``24-star glob, captures, first answer``: ``glob_captures(glob)(name)`` (RE2 compiled, then one
  match) for ``'*a' * 24`` on a name of 60 'a' and a 'b' that it does not match, against Python's
  ``fnmatch.fnmatchcase`` on the same glob and name (no captures; its atomic groups keep it from
  backtracking). A backtracking translation, ``(.*?)`` per star, takes seconds at 8 stars. Each run
  uses a glob of its own, so both sides compile it;
- ``resolve 5-term selector, 20,000 variables``: ``selector.resolve(graph)`` once the graph's catalog
  is read (later resolves reuse it) against the same selection made with ``get_collection`` (scopes
  matched at '/' boundaries) and ``re.search``, order kept;
- ``first resolve (reads the catalog), 20,000 variables``: the same, every run reading the catalog
  again (an item added to a collection of its own before each run changes the graph, as any new
  variable would).

Protocol (:mod:`bench.report`): the sides alternate, ``RUNS`` runs each (5; more with
``SUBSETSAVER_BENCH_RUNS``), and every line gives both medians with their spreads and the
run-by-run ratio.
"""

import fnmatch
import itertools
import os
import re
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.report import RUNS, alternating, print_line  # noqa: E402

EXPRESSION = "(trainable() | scope('conv_1/bn') | scope('conv_2/bn')) - scope('opt') - regex('/Adam')"


def build_wide_graph(num_variables=20_000):
    """Many small variables under conv_1, conv_10, conv_2 (with bn sub-scopes) and opt.

    Creating 20,000 variables one by one through Python takes minutes, so one variable
    is built as a template and copied inside a MetaGraphDef, which TensorFlow imports in
    one call: the result is the same graph, collections included.
    """
    import tensorflow as tf
    from tensorflow.core.framework import variable_pb2

    template = tf.Graph()
    with template.as_default():
        tf.compat.v1.Variable(lambda: tf.zeros([2]), name="template", use_resource=True)
        meta = tf.compat.v1.train.export_meta_graph(graph=template)
    nodes = list(meta.graph_def.node)
    proto = variable_pb2.VariableDef()
    proto.ParseFromString(meta.collection_def["variables"].bytes_list.value[0])
    del meta.graph_def.node[:]
    for key in ("variables", "trainable_variables"):
        del meta.collection_def[key].bytes_list.value[:]

    scopes = ["conv_1", "conv_1/bn", "conv_10", "conv_2", "conv_2/bn", "opt"]
    for index in range(num_variables):
        scope_name = scopes[index % len(scopes)]
        suffix = "/Adam" if scope_name == "opt" and index % 2 else ""
        name = f"{scope_name}/v{index}{suffix}"
        for node in nodes:
            copy = meta.graph_def.node.add()
            copy.CopyFrom(node)
            copy.name = node.name.replace("template", name, 1)
            copy.input[:] = [i.replace("template", name, 1) for i in node.input]
            if "shared_name" in copy.attr:
                copy.attr["shared_name"].s = name.encode()
            if "_class" in copy.attr:
                copy.attr["_class"].list.s[:] = [f"loc:@{name}".encode()]
        variable_def = variable_pb2.VariableDef()
        variable_def.CopyFrom(proto)
        for field in ("variable_name", "initializer_name", "snapshot_name", "initial_value_name"):
            setattr(variable_def, field, getattr(proto, field).replace("template", name, 1))
        serialized = variable_def.SerializeToString()
        meta.collection_def["variables"].bytes_list.value.append(serialized)
        if not scope_name.endswith("bn") and scope_name != "opt":
            meta.collection_def["trainable_variables"].bytes_list.value.append(serialized)

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.train.import_meta_graph(meta)
    return graph


def tensorflow_equivalent(graph):
    """The same selection done by hand the TF1 way, order kept (scopes matched at '/' boundaries)."""
    import tensorflow as tf

    keys = tf.compat.v1.GraphKeys
    chosen = {id(v) for v in graph.get_collection(keys.TRAINABLE_VARIABLES)}
    chosen |= {id(v) for v in graph.get_collection(keys.GLOBAL_VARIABLES, scope="conv_1/bn/")}
    chosen |= {id(v) for v in graph.get_collection(keys.GLOBAL_VARIABLES, scope="conv_2/bn/")}
    chosen -= {id(v) for v in graph.get_collection(keys.GLOBAL_VARIABLES, scope="opt/")}
    adam = re.compile("/Adam")
    every = graph.get_collection(keys.GLOBAL_VARIABLES) + graph.get_collection(keys.LOCAL_VARIABLES)
    chosen -= {id(v) for v in every if adam.search(v.op.name)}
    return [v for v in every if id(v) in chosen]


def run_globs(report=print_line, stars=24, runs=RUNS):
    """The capturing glob engine of layout maps on a glob built to make a backtracking matcher hang."""
    from subsetsaver.selectors import glob_captures

    name, fresh = "a" * 60 + "b", itertools.count()
    ours, theirs = alternating(lambda: glob_captures("*a" * stars + str(next(fresh)))(name),
                               lambda: fnmatch.fnmatchcase(name, "*a" * stars + str(next(fresh))), runs)
    assert glob_captures("*a" * stars)("a" * 60) == ("",) * (stars - 1) + ("a" * (60 - stars),), "wrong captures"
    report(f"{stars}-star glob, captures, first answer", ours, theirs, "", reference_name="fnmatch")


def run(report=print_line, num_variables=20_000, runs=RUNS):
    import subsetsaver as ss

    run_globs(report, runs=runs)
    start = time.perf_counter()
    graph = build_wide_graph(num_variables)
    build_seconds = time.perf_counter() - start
    selector = ss.parse(EXPRESSION)

    first = selector.resolve(graph)
    expected = tensorflow_equivalent(graph)
    assert [v.name for v in first] == [v.name for v in expected], "the two selections differ"

    ours, theirs = alternating(lambda: selector.resolve(graph), lambda: tensorflow_equivalent(graph), runs)
    note = f"{len(first)} of {num_variables} variables chosen; graph built in {build_seconds:.1f} s"
    report(f"resolve 5-term selector, {num_variables:,} variables", ours, theirs, note)

    marks = graph.get_collection_ref("bench_first_resolve")
    ours, theirs = alternating(lambda: selector.resolve(graph), lambda: tensorflow_equivalent(graph), runs,
                               before=lambda: marks.append(len(marks)))
    report(f"  first resolve (reads the catalog), {num_variables:,} variables", ours, theirs, "")


if __name__ == "__main__":
    run()
