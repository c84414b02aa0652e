"""What the benches of a QUICK and a FULL plan take from `loadtests.ratio_cli`: the plan the
options choose, the command line a report quotes, the order of its `meta` and the line that
tells it."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from loadtests import ratio_cli


@dataclasses.dataclass(frozen=True)
class Plan:
    records: int
    rounds: int


QUICK, FULL = Plan(records=10, rounds=1), Plan(records=1000, rounds=3)


def test_quick_picks_the_quick_plan_and_rounds_replace_its_rounds() -> None:
    parser = ratio_cli.plan_options("a bench", "default 3")
    assert ratio_cli.chosen_plan(parser.parse_args([]), QUICK, FULL) == FULL
    assert ratio_cli.chosen_plan(parser.parse_args(["--quick"]), QUICK, FULL) == QUICK
    chosen = ratio_cli.chosen_plan(parser.parse_args(["--quick", "--rounds", "5"]), QUICK, FULL)
    assert chosen == Plan(records=10, rounds=5)
    assert parser.parse_args([]).out == Path("bench-out")


def test_the_command_line_names_the_options_not_at_their_default_but_out() -> None:
    parser = ratio_cli.plan_options("a bench", "default 3")
    parser.add_argument("--acks", choices=["ranges", "tokens"], default="ranges")
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--before", type=Path)
    parser.add_argument("--max-records", type=int, default=10)

    def line(*argv: str) -> str:
        return ratio_cli.command("loadtests.a", parser, parser.parse_args(argv))

    assert line("--out", "/tmp/report", "--acks", "ranges") == "python -m loadtests.a"
    assert line("--before", "/old", "--seconds", "2", "--quick", "--acks", "tokens") == (
        "python -m loadtests.a --quick --acks tokens --seconds 2 --before /old"
    )
    assert line("--rounds", "5", "--seconds", "0.5", "--profile", "--max-records", "7") == (
        "python -m loadtests.a --rounds 5 --seconds 0.5 --profile --max-records 7"
    )


def test_meta_dates_the_runs_end_unless_told_and_ends_with_the_load() -> None:
    stamp = ratio_cli.Stamp()
    meta = stamp.meta("python -m x", commit=stamp.commit, plan={"rounds": 1})
    assert list(meta) == [
        "command",
        "date",
        "commit",
        "plan",
        "load_average_before",
        "load_average_after",
    ]
    assert meta["date"] >= ratio_cli.utc(stamp.started)
    started = time.gmtime(0)
    meta = stamp.meta("python -m x", date=ratio_cli.utc(started), ended="later")
    assert list(meta)[:3] == ["command", "date", "ended"]
    assert meta["date"] == "1970-01-01T00:00:00Z"
    assert meta["load_average_before"] == stamp.load_average
    assert len(meta["load_average_after"]) == 3


def test_the_stamp_line_tells_the_command_commit_machine_cpus_and_load() -> None:
    meta = {
        "command": "python -m loadtests.a --quick",
        "commit": "abc1234",
        "machine": {"cpu_model": "Some CPU", "nproc": 2},
        "load_average_before": [0.5, 0.4, 0.3],
        "load_average_after": [1.0, 0.5, 0.3],
    }
    assert ratio_cli.stamp_line(meta, "servers on CPU 0") == (
        "`python -m loadtests.a --quick` at abc1234 on Some CPU (2 CPUs; servers on CPU 0), "
        "load average before [0.5, 0.4, 0.3], after [1.0, 0.5, 0.3]"
    )
