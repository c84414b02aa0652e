"""Rules of the whole suite. Where the test command installed every tool and built every C
extension (scripts/test.sh sets SLUICE_NO_SKIPS=1), a test that skips for a missing one fails
instead: a C path that failed to compile, or a tool that failed to install, must not pass as
a skip. The processes tests start take Ctrl-C as a terminal gives it, however the suite
itself was started. And the gateways they start do not shed produces for their event loop's
delay (`SLUICE_ADMISSION_TARGET_DELAY_MS=0`): on a loaded machine that rule would refuse
produces the test expects answered; the tests of admission control set it themselves."""

from __future__ import annotations

import os
import signal
from collections.abc import Generator
from typing import Any

import pytest

NO_SKIPS = os.environ.get("SLUICE_NO_SKIPS") == "1"


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background by a script inherits SIGINT ignored, and so would
    every process it starts (an ignored signal survives exec): the tests that stop a CLI or a
    server with Ctrl-C would wait for ever. Python's own handler here gives children the
    default again."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.setdefault("SLUICE_ADMISSION_TARGET_DELAY_MS", "0")


def _refuse_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if NO_SKIPS and report.skipped and not hasattr(report, "wasxfail"):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped where the test command installed everything: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    _refuse_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    _refuse_skip(outcome.get_result())
