"""The ``subsetsaver`` command: a thin layer over the library's plain functions.

Each command module parses flags, calls functions of the rooms below (catalog,
selectors, audit, planning, portable, tools, draw) and prints a table or JSON
(``output``). Nothing here computes what the library does not.

Example::

    $ subsetsaver select --graph model.meta "trainable() | bn_stats()"
    $ subsetsaver inspect ckpt/model-1000 --json
"""

import sys

import click

from ..errors import SubsetSaverError
from ..planning import first_line
from .advice import render
from .audit_command import audit_command
from .catalog_commands import inspect_command, select_command
from .convert_command import convert_command
from .draw_command import draw_command
from .plan_commands import plan_command, slim_command
from .quiet import quiet
from .tool_commands import average_command, diff_command, rewrite_command

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="subsetsaver")
@click.option("--verbose", is_flag=True, help="Show TensorFlow's own log lines and whole Python warnings.")
@click.pass_context
def cli(ctx, verbose):
    """Save and restore exactly the TensorFlow 1 variables you choose."""
    ctx.with_resource(quiet(verbose))


for command in (inspect_command, select_command, plan_command, audit_command, draw_command, slim_command,
                convert_command, rewrite_command, diff_command, average_command):
    cli.add_command(command)


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
        click.echo(f"subsetsaver: error: {render(error, cli.commands.get(command))}", err=True)
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
