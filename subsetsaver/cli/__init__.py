"""The ``subsetsaver`` command: a thin layer over the library's plain functions.

Each command module parses flags, calls functions of the rooms below (catalog,
selectors, audit, planning, portable, tools, draw) and prints a table or JSON
(``output``). Nothing here computes what the library does not.

Example::

    $ subsetsaver select --graph model.meta "trainable() | bn_stats()"
    $ subsetsaver inspect ckpt/model-1000 --json
"""

import importlib
import sys

import click

from ..errors import SubsetSaverError, first_line
from .advice import render
from .quiet import quiet

__all__ = ["cli", "main"]

COMMANDS = {
    "inspect": ("catalog_commands", "inspect_command"),
    "select": ("catalog_commands", "select_command"),
    "plan": ("plan_commands", "plan_command"),
    "audit": ("audit_command", "audit_command"),
    "draw": ("draw_command", "draw_command"),
    "slim": ("plan_commands", "slim_command"),
    "convert": ("convert_command", "convert_command"),
    "rewrite": ("tool_commands", "rewrite_command"),
    "diff": ("tool_commands", "diff_command"),
    "average": ("tool_commands", "average_command"),
}
"""Each command and the module of this package that defines it: a module loads, with the rooms it
uses, only when its command runs or its help is shown (``inspect`` never loads planning or Keras)."""


class CommandTable(click.Group):
    """A click group whose commands are loaded from ``COMMANDS`` on first use."""

    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module, attribute = COMMANDS[name]
        return getattr(importlib.import_module(f".{module}", __name__), attribute)


@click.group(cls=CommandTable, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="subsetsaver")
@click.option("--verbose", is_flag=True, help="Show TensorFlow's own log lines and whole Python warnings.")
@click.pass_context
def cli(ctx, verbose):
    """Save and restore exactly the TensorFlow 1 variables you choose."""
    ctx.with_resource(quiet(verbose))


def main(argv=None):
    """Entry point: bad input ends in one line on stderr and a non-zero exit, never a traceback."""
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
