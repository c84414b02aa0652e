"""The job's progress on stderr (stdout is its summary): a bar on a terminal; otherwise a log
line at each tenth, so a log follows a long run without being flooded. The write is followed
through Spark's status tracker: the tasks finished of the jobs it started."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import uuid
from collections.abc import Iterator

from pyspark.sql import SparkSession
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

log = logging.getLogger("spark_ingest")
POLL_S = 0.5  # how often the write's tasks are counted
JOB_GROUP_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


class Counter:
    """`done` of `total` things, shown as a bar on a terminal, else a log line per tenth."""

    def __init__(self, what: str, total: int, unit: str) -> None:
        self.what, self.total, self.unit = what, total, unit
        self.done = 0
        self._tenths = 0
        self._bar: Progress | None = None
        if sys.stderr.isatty():
            self._bar = Progress(
                TextColumn(what),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(unit),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                redirect_stdout=False,
            )
            self._task = self._bar.add_task(what, total=total)
            self._bar.start()

    def update(self, done: int) -> None:
        """`done` so far (never going back)."""
        self.done = max(self.done, min(done, self.total))
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)
            return
        tenths = 10 * self.done // self.total if self.total else 10
        if tenths > self._tenths:
            self._tenths = tenths
            log.info("%s: %d of %d %s (%d%%)", self.what, self.done, self.total, self.unit,
                     100 * self.done // max(self.total, 1))  # fmt: skip

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


@contextlib.contextmanager
def spark_tasks(spark: SparkSession, what: str, total: int) -> Iterator[None]:
    """Count the finished tasks of the Spark jobs started inside (`total` expected: one per
    segment); all of them once the block ends without an error."""
    context = spark.sparkContext
    group = f"sluice-ingest-{uuid.uuid4().hex}"
    saved = {key: context.getLocalProperty(key) for key in JOB_GROUP_PROPERTIES}
    context.setJobGroup(group, what)
    counter = Counter(what, total, "tasks")
    stop = threading.Event()

    def poll() -> None:
        tracker = context.statusTracker()
        while not stop.wait(POLL_S):
            done = 0
            for job in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job)
                for stage in info.stageIds if info is not None else ():
                    stage_info = tracker.getStageInfo(stage)
                    done += stage_info.numCompletedTasks if stage_info is not None else 0
            counter.update(done)

    poller = threading.Thread(target=poll, name="ingest-progress", daemon=True)
    poller.start()
    finished = False
    try:
        yield
        finished = True
    finally:
        stop.set()
        poller.join()
        if finished:
            counter.update(total)
        counter.close()
        for key, value in saved.items():
            context.setLocalProperty(key, value)  # type: ignore[arg-type]  # None: removed
