"""`python3 -m forkpoint.cli`: the same as the `forkpoint` console script."""

from forkpoint.cli import main

main()
