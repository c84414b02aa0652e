"""`python -m gateway` runs `sluice serve` with the same options."""

import sys

from gateway.cli.main import main

main(["serve", *sys.argv[1:]])
