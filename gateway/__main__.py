"""``python -m gateway`` is the ``gateway`` command."""

from gateway.cli import main

main()
