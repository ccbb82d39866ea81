"""`python -m stetho` runs the CLI."""

from stetho.cli import main

main()
