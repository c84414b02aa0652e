"""Crash injection for the exactly-once tests: SIGKILL the whole job at a named point.

`SLUICE_INGEST_KILL_AT=<point>` names the point: `planned` (pending checkpoint written),
`during:<path>` (half of an output file written to its temporary name), `after:<path>` (an
output file or `_SUCCESS`, relative to --out, is in place), `summary`
(summary written, checkpoint not yet) or `committed`. The job's process group is killed, and
from an executor also the executor's own (Spark's Python daemon has its own group), so no
part of the job outlives the crash. Unset, nothing happens.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

ENV = "SLUICE_INGEST_KILL_AT"


@dataclass(frozen=True)
class KillSwitch:
    point: str | None
    job_group: int

    @classmethod
    def from_env(cls) -> KillSwitch:
        return cls(os.environ.get(ENV) or None, os.getpgrp())

    def at(self, point: str) -> None:
        """Kill the job if `point` is the chosen one."""
        if point != self.point:
            return
        os.killpg(self.job_group, signal.SIGKILL)
        os.killpg(os.getpgrp(), signal.SIGKILL)
