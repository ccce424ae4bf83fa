"""The ``subsetsaver`` command: a thin layer over the library's plain functions.

Each command module parses flags, calls functions of the rooms below (catalog,
selectors, audit, planning, portable, tools, draw) and prints a table or JSON
(``output``). Nothing here computes what the library does not.

Example::

    $ subsetsaver select --graph model.meta "trainable() | bn_stats()"
    $ subsetsaver inspect ckpt/model-1000 --json
"""

import importlib
import os
import sys

import click

from ..errors import SubsetSaverError, first_line
from .advice import render
from .quiet import quiet

__all__ = ["cli", "main"]

COMMANDS = {
    "audit": ("audit_command", "List what saving a selection from a graph forgets."),
    "average": ("average_command", "Write the mean of the float tensors of several checkpoints."),
    "convert": ("convert_command", "Write a checkpoint in another format or library's layout."),
    "diff": ("diff_command", "Compare two checkpoints tensor by tensor."),
    "draw": ("draw_command", "Draw the variable sets, or the scope tree of a plan."),
    "inspect": ("inspect_command", "List the tensors of a checkpoint, with bytes and totals."),
    "plan": ("plan_command", "Show what a selection saves and initializes, and its sizes."),
    "rewrite": ("rewrite_command", "Write a checkpoint with tensors renamed, dropped or cast."),
    "select": ("select_command", "List the variables a selector chooses."),
    "slim": ("slim_command", "Write a checkpoint with only the tensors a selector keeps."),
}
"""Each command: the module of this package that defines it (as a function of the module's own name), and the
sentence ``subsetsaver --help`` lists it with. A module loads, with the rooms it uses, only when its command runs
or shows its own help, so ``--help`` loads none and ``inspect`` never loads planning or Keras."""


class CommandTable(click.Group):
    """A click group whose commands are loaded from ``COMMANDS`` on first use."""

    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module, _ = COMMANDS[name]
        return getattr(importlib.import_module(f".{module}", __name__), module)

    def format_commands(self, ctx, formatter):
        """The commands and their sentences from ``COMMANDS``, without loading a command's module."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, summary) for name, (_, summary) in COMMANDS.items()])


@click.group(cls=CommandTable, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="subsetsaver")
@click.option("--verbose", is_flag=True, help="Show TensorFlow's own log lines and whole Python warnings.")
@click.pass_context
def cli(ctx, verbose):
    """Save and restore exactly the TensorFlow 1 variables you choose."""
    ctx.with_resource(quiet(verbose))


ONE_BLAS_THREAD = ("OPENBLAS_NUM_THREADS", "1")
"""Set for the command's process unless the user set it: the commands never multiply large matrices, and
numpy's OpenBLAS otherwise starts a thread per core when numpy is imported, whose spinning cost 0.1 s of CPU
here (``python -c 'import numpy'``: 0.22-0.25 s of CPU against 0.10-0.15 s with one thread), taken from a
bucket's transfer on a small machine."""


def main(argv=None):
    """Entry point: bad input ends in one line on stderr and a non-zero exit, never a traceback."""
    os.environ.setdefault(*ONE_BLAS_THREAD)  # before a command imports numpy
    arguments = sys.argv[1:] if argv is None else list(argv)
    command = next((word for word in arguments if not word.startswith("-")), None)
    try:
        cli.main(args=argv, prog_name="subsetsaver", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("subsetsaver: aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except SubsetSaverError as error:
        click.echo(f"subsetsaver: error: {render(error, cli.get_command(None, command))}", err=True)
        sys.exit(2)
    except (OSError, ValueError, TypeError) as error:
        click.echo(f"subsetsaver: error: {error}", err=True)
        sys.exit(2)
    except SystemExit:
        raise
    except Exception as error:  # a failure the library did not name (TensorFlow's own, ...): still one line
        click.echo(f"subsetsaver: error: {type(error).__name__}: {first_line(error)}", err=True)
        sys.exit(2)
    sys.exit(0)
