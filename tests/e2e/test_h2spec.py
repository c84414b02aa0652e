"""HTTP/2 conformance: h2spec (../shared/tools/h2spec, beside the repository; see its README)
in strict mode against a fresh `sluice serve`, h2c and h2 over TLS, with each HTTP/2 session
(ours over libnghttp2, and the ngh2 fallback). Every case must pass but 3.5/2 on h2c: an
invalid preface on a port shared with HTTP/1.1 is taken for an HTTP/1.1 request.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.e2e.conftest import REPO, start_server
from tests.tls import write_self_signed

H2SPEC = REPO.parent / "shared" / "tools" / "h2spec"
FRAME_TIMEOUT = 3  # seconds h2spec waits for a frame: a case expecting one fails only after it
CASES = 147  # h2spec 2.6.0's in strict mode: fewer, and it could not run them all
ALLOWED = {"h2c": {"http2/3.5/2"}, "tls": set[str]()}


def h2spec() -> Path:
    """The h2spec binary: missing is a failure in CI ($CI=true), a skip elsewhere."""
    if not H2SPEC.is_file():
        why = f"h2spec is not at {H2SPEC} (../shared/tools/ beside the repository)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return H2SPEC


def failed_cases(report: Path) -> tuple[int, dict[str, str]]:
    """From h2spec's JUnit report: how many cases ran, and each one not passed (its id, as
    h2spec numbers it: the suite's package and the case's place in it) with why, on a line."""
    cases = 0
    failed = {}
    for suite in ET.parse(report).getroot().iter("testsuite"):
        for number, case in enumerate(suite.iter("testcase"), start=1):
            cases += 1
            for outcome in ("failure", "error", "skipped"):
                found = case.find(outcome)
                if found is not None:
                    # h2spec's text: what it expected (a line each), then what it got.
                    *expected, got = (found.text or "").strip().splitlines() or [outcome]
                    why = f"expected {' or '.join(expected)}, got {got}" if expected else got
                    failed[f"{suite.get('package')}/{number}"] = f"{case.get('classname')}: {why}"
    return cases, failed


@pytest.mark.parametrize("transport", ["h2c", "tls"])
@pytest.mark.parametrize("session", ["native", "ngh2"])
def test_h2spec_strict(
    session: str, transport: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every h2spec case passes (strict mode), but those ALLOWED to fail."""
    binary = h2spec()
    if session == "ngh2":
        monkeypatch.setenv("SLUICE_H2_SESSION", "ngh2")  # read by the server at import
    else:
        monkeypatch.delenv("SLUICE_H2_SESSION", raising=False)
        if importlib.util.find_spec("gateway.http._h2session") is None:
            pytest.skip("gateway.http._h2session is not built")
    command = [str(binary), "-h", "127.0.0.1", "-P", "/healthz", "-S", "-o", str(FRAME_TIMEOUT)]
    tls: list[str] = []
    if transport == "tls":
        cert, key = write_self_signed(tmp_path)
        command += ["-t", "-k"]
        tls = ["--tls-cert", str(cert), "--tls-key", str(key)]
    report = tmp_path / "h2spec.xml"
    server = start_server(tmp_path / "data", *tls)
    try:
        run = subprocess.run(
            [*command, "-p", str(server.port), "-j", str(report)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    finally:
        stopped = server.stop()
    assert report.is_file(), f"h2spec wrote no report:\n{run.stdout}\n{run.stderr}"
    cases, failed = failed_cases(report)
    assert cases >= CASES, f"h2spec ran {cases} cases:\n{run.stdout}"
    unexpected = sorted(
        f"{case} {why}" for case, why in failed.items() if case not in ALLOWED[transport]
    )
    assert not unexpected, (
        f"{len(unexpected)} h2spec case(s) failed ({session}, {transport}):\n"
        + "\n".join(unexpected)
    )
    assert stopped == 0, "the server did not shut down cleanly after h2spec"
