"""Progress of a long command, on stderr so stdout stays its output: a bar on a terminal,
plain lines when piped (at each tenth of a known total, else every PLAIN_EVERY_S at most,
and one at the end), so a log can follow it without being flooded."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

from rich import filesize
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    ProgressColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as Bar

PLAIN_EVERY_S = 10.0


class Progress:
    """`done` of `total` (None: unknown) in `unit` ("bytes" is shown as kB, MB...), with a
    note (what is going on) beside it; with `show` False, nothing is shown."""

    def __init__(
        self,
        what: str,
        total: float | None = None,
        *,
        unit: str = "",
        show: bool = True,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.total = total
        self.unit = unit
        self.show = show
        self.done = 0.0
        self.note = ""
        self.stream = sys.stderr if stream is None else stream
        self.clock = clock
        self._last_line = clock()
        self._tenths = 0  # of the total, said in plain lines so far
        self._said: tuple[float, str] | None = None  # the last plain line's done and note
        self._bar: Bar | None = None
        if show and self.stream.isatty():
            count: ProgressColumn = DownloadColumn() if unit == "bytes" else MofNCompleteColumn()
            self._bar = Bar(
                TextColumn("{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                count,
                TextColumn("{task.fields[note]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                redirect_stdout=False,
            )
            self._task = self._bar.add_task(what, total=total, note="")
            self._bar.start()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def advance(self, amount: float = 1, note: str | None = None) -> None:
        """`amount` more done (and what is going on now)."""
        self.done += amount
        if note is not None:
            self.note = note
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, note=self.note)
            return
        if not self.show:
            return
        now = self.clock()
        tenths = int(10 * self.done / self.total) if self.total else 0
        if tenths > self._tenths or now - self._last_line >= PLAIN_EVERY_S:
            self._tenths = tenths
            self._say(now)

    def describe(self, text: str) -> None:
        """A new stage (one of a few): beside the bar, or a plain line of its own."""
        self.note = text
        if self._bar is not None:
            self._bar.update(self._task, note=text)
        elif self.show:
            print(f"{self.what}: {text}", file=self.stream, flush=True)

    def close(self) -> None:
        """The final state: the bar left in place, or a last plain line."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self.show and self._said != (self.done, self.note):
            self._say(self.clock())

    def _say(self, now: float) -> None:
        """`what: 1.2 kB of 4.0 kB (30%), note` or `what: 2 of 6 scenarios (33%), note`."""
        self._last_line, self._said = now, (self.done, self.note)
        sizes = self.unit == "bytes"

        def amount(value: float) -> str:
            return filesize.decimal(int(value)) if sizes else f"{int(value):,}"

        line = f"{self.what}: {amount(self.done)}"
        if self.total:
            line += f" of {amount(self.total)}"
        if self.unit and not sizes:
            line += f" {self.unit}"
        if self.total:
            line += f" ({100 * self.done / self.total:.0f}%)"
        if self.note:
            line += f", {self.note}"
        print(line, file=self.stream, flush=True)
