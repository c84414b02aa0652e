"""`python -m gateway` runs `sluice serve` with the same options."""

import sys

from gateway.cli import main

main(["serve", *sys.argv[1:]])
