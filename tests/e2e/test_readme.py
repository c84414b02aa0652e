"""Every curl and sluice example in README.md runs against a fresh server and prints what is
shown."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.workers.local_cluster import LocalCluster, free_port
from tests.e2e.conftest import REPO, Server, start_server
from tests.s3 import CREDENTIALS, MotoServer

# per run
VOLATILE = {
    "timestamp",
    "topic_id",
    "cursor",
    "cluster_id",
    "lock_expires_at",
    "started_ms",
    "updated_ms",
    "expires_ms",
}
CLUSTER_VOLATILE = VOLATILE | {"controller"}


def examples(kind: str = "console") -> list[tuple[str, str]]:
    """(command, expected output) pairs from the README's `kind` blocks, in order."""
    text = (REPO / "README.md").read_text()
    pairs: list[tuple[str, str]] = []
    for block in re.findall(rf"```{kind}\n(.*?)```", text, flags=re.S):
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


def normalise(text: str, volatile: set[str] = VOLATILE) -> Any:
    """JSON (or several JSON documents, as NDJSON or one after another: a list) with the
    volatile fields blanked; other text (the console tools' tables) as the words of each
    non-blank line, so alignment does not count."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        try:
            doc = _documents(text)
        except json.JSONDecodeError:
            return [_line(line, volatile) for line in text.splitlines() if line.strip()]
    return _blank(doc, volatile)


def _line(line: str, volatile: set[str]) -> Any:
    """A line of text as its words; a Server-Sent Event's `data:` line as its JSON."""
    if line.startswith("data: "):
        with contextlib.suppress(orjson.JSONDecodeError):
            return _blank(orjson.loads(line[6:]), volatile)
    return line.split()


def _documents(text: str) -> list[Any]:
    """The JSON documents that follow one another in `text` (whitespace between them)."""
    decoder, docs, end = json.JSONDecoder(), [], 0
    while (start := len(text) - len(text[end:].lstrip())) < len(text):
        doc, end = decoder.raw_decode(text, start)
        docs.append(doc)
    return docs


def _blank(doc: Any, volatile: set[str]) -> Any:
    if isinstance(doc, dict):
        return {k: "*" if k in volatile else _blank(v, volatile) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_blank(v, volatile) for v in doc]
    return doc


def test_the_readme_has_curl_examples() -> None:
    commands = [command for command, _ in examples()]
    assert len(commands) >= 10
    # Past an environment setting or a shell variable taking a command's output.
    programs = [re.sub(r"^(SLUICE_\w+=\S+ |\w+=\$\()+", "", command) for command in commands]
    assert all(p.startswith(("curl ", "printf ", "sluice ")) for p in programs)


def test_readme_examples(server: Server, tmp_path: Path) -> None:
    """In order, on one server and in one scratch directory: the console tools' examples
    continue the curl ones."""
    env = {
        # As a user's shell has it: without the suite's own setting (tests/conftest.py).
        **{k: v for k, v in os.environ.items() if k != "SLUICE_ADMISSION_TARGET_DELAY_MS"},
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "SLUICE_URL": f"http://localhost:{server.port}",
    }
    for command, expected in examples():
        live = command.replace("localhost:8080", f"localhost:{server.port}")
        done = subprocess.run(
            ["bash", "-c", live],
            capture_output=True, text=True, timeout=30, check=False, env=env, cwd=tmp_path,
        )  # fmt: skip
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


def _three_free_ports() -> int:
    """A base port P with P, P+1 and P+2 free (the README's 8080-8082, moved)."""
    for _ in range(50):
        base = free_port()
        if base + 2 < 65536 and all(_port_free(base + i) for i in range(3)):
            return base
    raise AssertionError("no three consecutive free ports")


def _port_free(port: int) -> bool:
    """Nothing listens on it (connections left in TIME_WAIT do not count)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_readme_cluster_examples(tmp_path: Path) -> None:
    """The cluster section's examples, in order, on a fresh three-node cluster and its etcd."""
    assert len(examples("console-cluster")) >= 4
    base = _three_free_ports()
    cluster = LocalCluster(tmp_path, 3, base_port=base)
    cluster.start()
    try:
        for command, expected in examples("console-cluster"):
            live, shown = command, expected
            for i in range(3):
                live = live.replace(f":{8080 + i}", f":{base + i}")
                shown = shown.replace(f":{8080 + i}", f":{base + i}")
            done = subprocess.run(
                ["bash", "-c", live], capture_output=True, text=True, timeout=30, check=False
            )
            assert done.returncode == 0, (command, done.stderr)
            assert normalise(done.stdout, CLUSTER_VOLATILE) == normalise(shown, CLUSTER_VOLATILE), (
                command
            )
    finally:
        cluster.stop()


def test_dev_cluster_runs_until_interrupted(tmp_path: Path) -> None:
    """`sluice dev-cluster` prints etcd's and the nodes' URLs, serves, and stops them all on
    Ctrl-C (SIGINT)."""
    base = _three_free_ports()
    sluice = Path(sys.executable).parent / "sluice"
    process = subprocess.Popen(
        [
            str(sluice),
            "dev-cluster",
            "--nodes",
            "2",
            "--data-dir",
            str(tmp_path),
            "--base-port",
            str(base),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    lines = [process.stdout.readline() for _ in range(4)]
    try:
        assert lines[0].startswith("etcd ") and lines[3].startswith("Ctrl-C")
        assert lines[1].split() == ["node", "0", f"http://127.0.0.1:{base}"]
        view = orjson.loads(
            subprocess.run(
                ["curl", "-s", f"http://127.0.0.1:{base + 1}/v1/cluster"],
                capture_output=True,
                check=True,
            ).stdout
        )
        assert [n["alive"] for n in view["nodes"]] == [True, True]
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    for i in range(2):
        assert _port_free(base + i), "a node outlived dev-cluster"


def test_dev_cluster_without_etcd_names_the_package(tmp_path: Path) -> None:
    sluice = Path(sys.executable).parent / "sluice"
    done = subprocess.run(
        [str(sluice), "dev-cluster", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PATH": str(Path(sys.executable).parent)},
    )
    assert done.returncode != 0
    assert "etcd-server" in done.stderr


TIERED_VOLATILE = VOLATILE | {
    *("sha256", "first_timestamp", "max_timestamp", "uploaded_ms"),  # the manifest's
    *("hours", "files", "hours_finalized", "seconds"),  # the ingest summary's (hours: now)
}


def test_readme_tiered_examples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiered-storage and ingest section on a fresh server with a moto_server: each
    command is repeated until it prints what is shown (uploads happen in the background)."""
    assert len(examples("console-tiered")) >= 4
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    moto = MotoServer()
    server = start_server(
        tmp_path / "data",
        "--s3-endpoint",
        moto.url,
        "--s3-bucket",
        "sluice-demo",
        "--s3-prefix",
        "demo",
        "--tiering-interval",
        "1",
    )
    try:
        moves = {
            "localhost:8080": f"localhost:{server.port}",
            "localhost:9000": f"localhost:{moto.port}",
            "/tmp/sluice-demo": str(tmp_path / "demo"),
        }
        for command, expected in examples("console-tiered"):
            live, wanted = command, expected
            for old, new in moves.items():
                live, wanted = live.replace(old, new), wanted.replace(old, new)
            deadline = time.monotonic() + 30
            while True:
                done = subprocess.run(
                    ["bash", "-c", live], capture_output=True, text=True, timeout=300, check=False
                )
                assert done.returncode == 0, (command, done.stderr)
                shown = normalise(wanted, TIERED_VOLATILE)
                if normalise(done.stdout, TIERED_VOLATILE) == shown:
                    break
                assert time.monotonic() < deadline, (command, done.stdout)
                time.sleep(0.2)  # the background upload has not happened yet: ask again
    finally:
        server.stop()
        moto.close()
