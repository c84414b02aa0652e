"""The command line the benches share, the run stamped with what, when and where, and its
report files: all of it for the one-run ratio benches (request_cost, auth_bench: --quick,
--rounds, --seconds, --out); the options, the stamp and the files for the benches of a QUICK
and a FULL plan (queue_bench, txn_bench, subscriptions_bench, ...), whose runs differ too much
to share more."""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from loadtests.bench import machine
from loadtests.common import source_commit

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Plan = TypeVar("Plan", bound="DataclassInstance")

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
    parser = _parser(description)
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
        "date": utc(),
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


def plan_options(description: str, rounds_help: str) -> argparse.ArgumentParser:
    """The options of a bench of two plans: --quick (the QUICK plan), --rounds, --out."""
    parser = _parser(description)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round (CI)")
    parser.add_argument("--rounds", type=int, help=rounds_help)
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    return parser


def chosen_plan(args: argparse.Namespace, quick: Plan, full: Plan) -> Plan:
    """`quick` with --quick, else `full`; its rounds --rounds when given."""
    plan = quick if args.quick else full
    return plan if args.rounds is None else dataclasses.replace(plan, rounds=args.rounds)


def command(module: str, parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The command line that runs `module` as this run did: the options not at their default,
    in the parser's order (a flag bare, a float as %g), but --out: where the report went."""
    words = [f"python -m {module}"]
    for name, value in vars(args).items():
        if name == "out" or value == parser.get_default(name):
            continue
        option = "--" + name.replace("_", "-")
        if value is True:
            words.append(option)
        else:
            words.append(f"{option} {value:g}" if isinstance(value, float) else f"{option} {value}")
    return " ".join(words)


def utc(moment: time.struct_time | None = None) -> str:
    """A report's time (now unless given), in UTC."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime() if moment is None else moment)


def load_average() -> list[float]:
    """The machine's load average over 1, 5 and 15 minutes: how busy it was beside the run."""
    return [round(x, 2) for x in os.getloadavg()]


class Stamp:
    """What a report's `meta` says of its run, taken before the run starts: when, the commit
    measured and the load average; `meta` adds the rest once it ended."""

    def __init__(self) -> None:
        self.started = time.gmtime()
        self.load_average = load_average()
        self.commit = source_commit()

    def meta(self, command: str, **fields: Any) -> dict[str, Any]:
        """`command`, the date (the run's end, unless `fields` give one), `fields`, and the
        load average before and after the run."""
        return {
            "command": command,
            "date": utc(),
            **fields,
            "load_average_before": self.load_average,
            "load_average_after": load_average(),
        }


def stamp_line(meta: dict[str, Any], cpus: str) -> str:
    """A report's line of what a `Stamp` recorded: the command, the commit, the machine and
    where the run put its processes (`cpus`), the load average before and after."""
    return (
        f"`{meta['command']}` at {meta['commit']} on {meta['machine']['cpu_model']} "
        f"({meta['machine']['nproc']} CPUs; {cpus}), load average before "
        f"{meta['load_average_before']}, after {meta['load_average_after']}"
    )


def _parser(description: str) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
