"""``python -m subsetsaver ...`` runs the command line."""

from .cli import main

main()
