"""``audit``: what a selection forgets, as a CI check (exit 1 when any error is found).

Example::

    $ subsetsaver audit --graph model.meta --save "trainable()"
    error    unsaved-state  conv_1/bn keeps moving averages of the batch mean and variance ...
                            conv_1/bn/conv_1/bn/moments/Squeeze/ExponentialMovingAverage
                            ...
    2 errors, 0 warnings, 0 infos
"""

import sys

import click

from .. import catalog, selectors
from .output import echo_json, meta_graph_path

EXIT_ERRORS_FOUND = 1


@click.command("audit")
@click.option("--graph", "graph", callback=meta_graph_path, required=True, metavar="MODEL.meta", help="MetaGraph file (written by Saver.save).")
@click.option("--save", "expression", required=True, metavar="EXPR", help="Selector of the variables to save.")
@click.option("--fetch", "fetches", multiple=True, metavar="NAME",
              help="Op or tensor that inference runs (repeatable); default: every op that computes with a variable.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a list.")
def audit_command(graph, expression, fetches, as_json):
    """List what saving EXPR from the graph forgets; exit 1 if anything is an error. For MODEL.meta,
    gs:// and s3:// URLs work as well as local paths (pip install 'subsetsaver[gcs]' or '[s3]')."""
    from ..audit import audit  # the audit, and the graph reading it needs, load only to audit

    selector = selectors.parse(expression)
    cat = catalog.load(graph)
    if not cat.traceable:
        raise click.UsageError(f"--graph needs a MetaGraph file (.meta), got '{graph}'")
    findings = audit(selector, cat, fetches=list(fetches) or None)
    counts = {severity: sum(1 for f in findings if f.severity == severity) for severity in ("error", "warning", "info")}
    if as_json:
        echo_json(
            {
                "selector": repr(selector),
                "graph": graph,
                "fetches": list(fetches),
                "findings": [f.to_json() for f in findings],
                "counts": counts,
            }
        )
    else:
        _echo_findings(findings, selector)
        click.echo(
            f"{_count(counts['error'], 'error')}, {_count(counts['warning'], 'warning')}, "
            f"{_count(counts['info'], 'info')}"
        )
    if counts["error"]:
        sys.exit(EXIT_ERRORS_FOUND)  # not click's ctx.exit: the entry point must see the code


def _echo_findings(findings, selector):
    if not findings:
        click.echo(f"no findings for {selector!r}")
        return
    severity_width = max(len(str(f.severity)) for f in findings)
    code_width = max(len(f.code) for f in findings)
    indent = " " * (severity_width + code_width + 4)
    for finding in findings:
        click.echo(f"{str(finding.severity).ljust(severity_width)}  {finding.code.ljust(code_width)}  {finding.message}")
        for name in finding.variables:
            click.echo(indent + name)


def _count(number, noun):
    return f"{number} {noun}{'' if number == 1 or noun == 'info' else 's'}"
