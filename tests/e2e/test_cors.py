"""CORS against a real `sluice serve --cors-origins ...`: curl sends the preflights a browser
would, over HTTP/1.1 and h2c, and the README's CORS examples print what is shown."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Server, start_server
from tests.e2e.test_readme import examples, normalise

APP = "https://app.example.com"
PROTOCOLS = {"--http1.1": "HTTP/1.1", "--http2-prior-knowledge": "HTTP/2"}


@pytest.fixture(scope="module")
def cors_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("cors") / "data", "--cors-origins", APP)
    yield running
    assert running.stop() == 0


def curl(flag: str, *args: str) -> tuple[str, dict[str, str]]:
    """The status line's protocol and status, and the headers (names in lower case)."""
    done = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-D", "-", flag, *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    status, *lines = done.stdout.strip().splitlines()
    headers = dict(line.split(": ", 1) for line in lines if ": " in line)
    return status.strip(), {k.lower(): v.strip() for k, v in headers.items()}


@pytest.mark.parametrize("flag", PROTOCOLS)
@pytest.mark.parametrize(
    "path", ["/v1/topics", "/v1/topics/orders/partitions/0/records", "/v1/groups/g/members"]
)
def test_a_real_preflight(cors_server: Server, flag: str, path: str) -> None:
    status, headers = curl(
        flag,
        "-X",
        "OPTIONS",
        f"{cors_server.url}{path}",
        "-H",
        f"Origin: {APP}",
        "-H",
        "Access-Control-Request-Method: POST",
        "-H",
        "Access-Control-Request-Headers: content-type,idempotency-key",
    )
    assert status.split()[:2] == [PROTOCOLS[flag], "204"]
    assert headers["access-control-allow-origin"] == APP
    assert "POST" in headers["access-control-allow-methods"].split(", ")
    assert {"Content-Type", "Idempotency-Key"} <= set(
        headers["access-control-allow-headers"].split(", ")
    )
    assert headers["access-control-max-age"] == "600"
    assert headers["vary"] == "Origin"


@pytest.mark.parametrize("flag", PROTOCOLS)
def test_answers_and_preflights_by_origin(cors_server: Server, flag: str) -> None:
    status, headers = curl(flag, f"{cors_server.url}/v1/topics/missing", "-H", f"Origin: {APP}")
    assert status.split()[1] == "404"
    assert headers["access-control-allow-origin"] == APP
    assert "Sluice-Next-Offset" in headers["access-control-expose-headers"]
    status, headers = curl(
        flag,
        "-X",
        "OPTIONS",
        f"{cors_server.url}/v1/topics",
        "-H",
        "Origin: https://elsewhere.example",
        "-H",
        "Access-Control-Request-Method: GET",
    )
    assert status.split()[1] == "403"
    assert not any(name.startswith("access-control") for name in headers)


def test_readme_cors_examples(cors_server: Server, tmp_path: Path) -> None:
    assert examples("console-cors")
    for command, expected in examples("console-cors"):
        live = command.replace("localhost:8080", f"localhost:{cors_server.port}")
        done = subprocess.run(
            ["bash", "-c", live], capture_output=True, text=True, timeout=30, check=False
        )
        assert done.returncode == 0, (command, done.stderr)
        assert normalise(done.stdout) == normalise(expected), command
