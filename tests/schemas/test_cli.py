"""`sluice schemas` against a real gateway: register from a file and stdin, list, show, look up
by id, check compatibility, set the level and mode, delete; the registry's errors as a message
and a failing exit; tables on request, the registry's JSON otherwise."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import REPO, Server, start_server

V1 = {"type": "record", "name": "Click", "fields": [{"name": "page", "type": "string"}]}
V2 = {
    "type": "record",
    "name": "Click",
    "fields": [
        {"name": "page", "type": "string"},
        {"name": "ms", "type": "long", "default": 0},
    ],
}
BREAKING = {"type": "record", "name": "Click", "fields": [{"name": "page", "type": "int"}]}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(Path(tmp_path_factory.mktemp("cli")) / "data")
    yield running
    assert running.stop() == 0


def sluice(
    server: Server, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from gateway.cli.main import main; main()", *args]
    return subprocess.run(
        [*command, "--url", server.url],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_subjects_life_from_the_command_line(server: Server, tmp_path: Path) -> None:
    first = tmp_path / "click.avsc"
    first.write_text(json.dumps(V1))
    registered = json.loads(ok(sluice(server, "schemas", "register", "clicks-value", str(first))))
    schema_id = registered["id"]
    table = ok(
        sluice(
            server, "schemas", "register", "clicks-value", "-", "--output", "table",
            stdin=json.dumps(V2),
        )
    )  # fmt: skip
    assert table.startswith("registered under clicks-value: id ")
    assert json.loads(ok(sluice(server, "schemas", "versions", "clicks-value"))) == [1, 2]
    assert "clicks-value" in json.loads(ok(sluice(server, "schemas", "subjects")))
    shown = ok(sluice(server, "schemas", "show", "clicks-value", "1", "--output", "table"))
    assert shown.startswith(f"subject clicks-value version 1, id {schema_id}, AVRO")
    assert json.loads(shown.split("\n", 1)[1]) == V1
    by_id = json.loads(ok(sluice(server, "schemas", "id", str(schema_id))))
    assert by_id["used_by"] == [{"subject": "clicks-value", "version": 1}]

    breaking = tmp_path / "breaking.avsc"
    breaking.write_text(json.dumps(BREAKING))
    verdict = ok(
        sluice(server, "schemas", "check", "clicks-value", str(breaking), "--output", "table")
    )
    assert verdict.startswith("not compatible:")
    assert ok(sluice(server, "schemas", "check", "clicks-value", str(first), "--output", "table"))

    full = ok(sluice(server, "schemas", "compatibility", "clicks-value", "--set", "FULL"))
    assert json.loads(full)["compatibility"] == "FULL"
    level = ok(sluice(server, "schemas", "compatibility", "clicks-value", "--output", "table"))
    assert level.strip() == "FULL"
    assert ok(sluice(server, "schemas", "mode", "--output", "table")).strip() == "READWRITE"

    assert json.loads(ok(sluice(server, "schemas", "delete", "clicks-value"))) == [1, 2]
    gone = sluice(server, "schemas", "versions", "clicks-value")
    assert gone.returncode == 1 and "404" in gone.stderr
    permanent = sluice(server, "schemas", "delete", "clicks-value", "--permanent")
    assert json.loads(ok(permanent)) == [1, 2]


def test_bad_input_is_a_message_and_a_failing_exit(server: Server, tmp_path: Path) -> None:
    bad = tmp_path / "bad.avsc"
    bad.write_text('{"type": "record", "name": "X", "fields": "no"}')
    done = sluice(server, "schemas", "register", "bad-value", str(bad))
    assert done.returncode == 1 and "422" in done.stderr
    missing = sluice(server, "schemas", "register", "bad-value", str(tmp_path / "absent.avsc"))
    assert missing.returncode == 1 and "absent.avsc" in missing.stderr
    reference = sluice(server, "schemas", "register", "x", str(bad), "--reference", "oops")
    assert reference.returncode == 1 and "NAME=SUBJECT:VERSION" in reference.stderr
    unknown = sluice(server, "schemas", "id", "987654")
    assert unknown.returncode == 1 and "404" in unknown.stderr
