"""Every curl and sluice example in README.md runs against a fresh server and prints what is
shown."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.e2e.conftest import REPO, Server

VOLATILE = {"timestamp", "topic_id", "cursor"}


def examples() -> list[tuple[str, str]]:
    """(command, expected output) pairs from the README's console blocks, in order."""
    text = (REPO / "README.md").read_text()
    pairs: list[tuple[str, str]] = []
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        command: str | None = None
        output: list[str] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                if command is not None:
                    pairs.append((command, "\n".join(output)))
                command, output = line[2:], []
            else:
                output.append(line)
        if command is not None:
            pairs.append((command, "\n".join(output)))
    return pairs


def normalise(text: str) -> Any:
    """JSON (or NDJSON, a list of lines) with the volatile fields blanked; other text (the
    console tools' tables) as the words of each non-blank line, so alignment does not count."""
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        try:
            doc = [orjson.loads(line) for line in lines]
        except orjson.JSONDecodeError:
            return [line.split() for line in lines]
    return _blank(doc)


def _blank(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: "*" if k in VOLATILE else _blank(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_blank(v) for v in doc]
    return doc


def test_the_readme_has_curl_examples() -> None:
    commands = [command for command, _ in examples()]
    assert len(commands) >= 10
    assert all(command.startswith(("curl ", "printf ", "sluice ")) for command in commands)


def test_readme_examples(server: Server, tmp_path: Path) -> None:
    """In order, on one server: the console tools' examples continue the curl ones."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "SLUICE_URL": f"http://localhost:{server.port}",
    }
    for command, expected in examples():
        live = command.replace("localhost:8080", f"localhost:{server.port}")
        done = subprocess.run(
            ["bash", "-c", live], capture_output=True, text=True, timeout=30, check=False, env=env
        )
        assert done.returncode == 0, (command, done.stderr)
        assert normalise(done.stdout) == normalise(expected), command


@pytest.mark.parametrize("flag", ["--http1.1", "--http2-prior-knowledge"])
def test_both_protocols_answer_alike(server: Server, flag: str) -> None:
    outputs = []
    for path in ("/v1/topics", "/v1/topics/missing", "/v1/nowhere"):
        done = subprocess.run(
            ["curl", "-s", "-i", flag, f"{server.url}{path}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        outputs.append(done.stdout.splitlines()[0].split()[1])
    assert outputs == ["200", "404", "404"]
