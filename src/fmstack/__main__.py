"""`python -m fmstack` runs the CLI."""

from fmstack.cli.main import main

main()
