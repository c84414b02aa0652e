"""The command line the one-run ratio benches share (request_cost, auth_bench): --quick,
--rounds, --seconds, --out; the run stamped with what, when and where, and its report files."""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from loadtests.bench import machine

Run = Callable[[int, float, Path], dict[str, Any]]  # rounds, seconds per cell, scratch -> doc
# The same, measuring an earlier checkout (--before DIR) in the same rounds when given.
RunBeside = Callable[[int, float, Path, Path | None], dict[str, Any]]
# --quick: one round of cells this short (h2load takes milliseconds), long enough for
# every cell to show both sides' CPU
QUICK_SECONDS = 0.5


def run_rounds(
    description: str, module: str, rounds: int, seconds: float, run: Run
) -> tuple[Path, dict[str, Any]]:
    """Parse the options (defaults: `rounds`, `seconds`), run in a scratch directory; the
    output directory and the document with its `meta`."""
    return _run(description, module, rounds, seconds, lambda r, s, p, _: run(r, s, p), False)


def run_rounds_beside(
    description: str, module: str, rounds: int, seconds: float, run: RunBeside
) -> tuple[Path, dict[str, Any]]:
    """`run_rounds` with `--before DIR`: a checkout measured beside this tree."""
    return _run(description, module, rounds, seconds, run, True)


def _run(
    description: str, module: str, rounds: int, seconds: float, run: RunBeside, beside: bool
) -> tuple[Path, dict[str, Any]]:
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"one round of {QUICK_SECONDS:g} s cells (CI)"
    )
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--seconds", type=float, default=seconds, help="per cell")
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    if beside:
        parser.add_argument("--before", type=Path, help="a checkout to measure beside this tree")
    args = parser.parse_args()
    before: Path | None = args.before if beside else None
    rounds, seconds = (1, QUICK_SECONDS) if args.quick else (args.rounds, args.seconds)
    with tempfile.TemporaryDirectory(prefix="sluice-bench-") as scratch:
        doc = run(rounds, seconds, Path(scratch), before)
    options = " --quick" if args.quick else f" --rounds {rounds} --seconds {seconds}"
    doc["meta"] = {
        "command": f"python -m {module}{options}" + (f" --before {before}" if before else ""),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rounds": rounds,
        "seconds_per_cell": seconds,
        "machine": machine(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    return args.out, doc


def write(out: Path, stem: str, doc: dict[str, Any], markdown: str) -> None:
    """`stem`.json and `stem`.md in `out`, and the markdown on stdout."""
    (out / f"{stem}.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    (out / f"{stem}.md").write_text(markdown)
    print(markdown)
