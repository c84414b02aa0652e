"""A real `sluice serve` process per test, found through the port it prints; an ext4
filesystem on a loop device, to fail under it."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from loadtests.common import start_gateway

REPO = Path(__file__).resolve().parents[2]
FS_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
SHUTDOWN_NOLOGFLUSH = 2  # the device is gone: not even the journal is written


@dataclass
class Server:
    """A running gateway process."""

    process: subprocess.Popen[str]
    url: str
    port: int
    data_dir: Path

    def stop(self) -> int:
        """SIGTERM and wait: the exit status of a graceful shutdown."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)


def start_server(
    data_dir: Path,
    *extra: str,
    preexec: Callable[[], None] | None = None,
    log: Path | None = None,
) -> Server:
    """Start `python -m gateway` on a free port (`preexec`: run in the child first, to set
    limits; `log`: where its stderr goes); return once it has opened its logs."""
    process, url = start_gateway(data_dir, *extra, preexec=preexec, log=log)
    port = int(url.rsplit(":", 1)[1])
    return Server(process, url, port, data_dir)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path / "data")
    yield running
    if running.process.poll() is None:
        assert running.stop() == 0


def ready(url: str, **client: object) -> None:
    """The listening line is printed once the logs are open; /readyz must agree."""
    with httpx.Client(**client) as http:  # type: ignore[arg-type]
        assert http.get(f"{url}/readyz").status_code == 200


def until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll another process's progress until `condition()` holds (bounded)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def read_values(
    http: httpx.Client, url: str, topic: str, end: int, partition: int = 0
) -> list[Any]:
    """Every record value of the partition from offset 0 up to `end`, over JSON fetches."""
    offset, values = 0, list[Any]()
    while offset < end:
        answer = http.get(
            f"{url}/v1/topics/{topic}/partitions/{partition}/records",
            params={"offset": offset, "max_records": 50, "timeout_ms": 0},
        ).json()
        values.extend(r["value"] for r in answer["records"])
        offset = answer["next_offset"]
    return values


def write_in_transaction(
    http: httpx.Client, name: str, partition: int, group: str, offset: tuple[int, int]
) -> None:
    """Into `name`'s open transaction (epoch 0): a record on `orders`' `partition`, and the
    offset (partition, offset) of `orders` for a new member of `group`."""
    produced = http.post(
        "/v1/topics/orders/records",
        params={"transactional_id": name, "producer_epoch": "0"},
        json={"records": [{"value": "in a transaction", "partition": partition}]},
    )
    assert produced.status_code == 200, produced.text
    member = http.post(f"/v1/groups/{group}/members", json={"topics": ["orders"]}).json()
    offsets = {
        "producer_epoch": 0,
        "group_id": group,
        "member_id": member["member_id"],
        "generation_id": member["generation"],
        "offsets": [{"topic": "orders", "partition": offset[0], "offset": offset[1]}],
    }
    sent = http.post(f"/v1/transactions/{name}/offsets", json=offsets)
    assert sent.status_code == 200, sent.text


def held_produce(port: int, path: str, body: bytes) -> socket.socket:
    """A JSON produce to `path` whose chunked body stops after its first five bytes: in
    progress until `finish`ed (the admission control counts it meanwhile)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    sock.sendall(head + b"%x\r\n%s\r\n" % (len(body[:5]), body[:5]))
    return sock


def finish(sock: socket.socket, body: bytes) -> bytes:
    """Send the rest of a held produce's `body`; its whole (JSON) answer."""
    rest = body[5:]
    sock.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(rest), rest))
    answer = b""
    while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
        chunk = sock.recv(65536)
        assert chunk, answer
        answer += chunk
    sock.close()
    return answer


@dataclass
class Ext4:
    """An ext4 image mounted on a loop device."""

    image: Path
    mount: Path

    @property
    def device(self) -> str:
        return run("findmnt", "-n", "-o", "SOURCE", str(self.mount)).strip()

    def remount_read_only_by_error(self) -> None:
        """As an I/O error on its metadata would: ext4 aborts its journal and goes read-only
        (`emergency_ro` on recent kernels), whoever holds files open for writing."""
        name = os.path.basename(self.device)
        Path(f"/sys/fs/ext4/{name}/trigger_fs_error").write_text("sluice test: disk failed")
        options = run("findmnt", "-n", "-o", "OPTIONS", str(self.mount)).strip().split(",")
        assert {"ro", "emergency_ro"} & set(options), options

    def die(self) -> None:
        """As when the device dies: every later call on the filesystem answers EIO."""
        fd = os.open(self.mount, os.O_RDONLY)
        try:
            fcntl.ioctl(fd, FS_IOC_SHUTDOWN, struct.pack("I", SHUTDOWN_NOLOGFLUSH))
        finally:
            os.close(fd)

    def repair(self) -> None:
        """The operator's fix: unmount, fsck, mount again (read-write). The failed
        filesystem's superblock can outlive the unmount for a while on its loop device, and
        mount(8) given the same image file reuses that device and mounts the read-only
        superblock again: the repaired filesystem is mounted from a copy of the image."""
        run("umount", str(self.mount))
        fresh = self.image.with_name(f"{self.image.stem}-repaired{self.image.suffix}")
        run("cp", "--sparse=always", str(self.image), str(fresh))
        self.image = fresh
        fsck = subprocess.run(["e2fsck", "-fy", str(self.image)], capture_output=True, text=True)
        assert fsck.returncode in (0, 1), fsck.stdout + fsck.stderr  # 1: errors corrected
        self.attach()

    def attach(self) -> None:
        run("mount", "-o", "loop,errors=remount-ro", str(self.image), str(self.mount))
        options = run("findmnt", "-n", "-o", "OPTIONS", str(self.mount)).strip().split(",")
        assert "rw" in options, f"{self.image} mounted {options}"


def run(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")
    return done.stdout


@pytest.fixture
def ext4(tmp_path: Path) -> Iterator[Ext4]:
    """An ext4 filesystem mounted at tmp_path/disk (root and e2fsprogs needed)."""
    disk = Ext4(tmp_path / "disk.img", tmp_path / "disk")
    disk.mount.mkdir()
    with disk.image.open("wb") as f:
        f.truncate(64 << 20)
    try:
        run("mkfs.ext4", "-q", "-F", str(disk.image))
        disk.attach()
    except (RuntimeError, FileNotFoundError) as exc:  # as the cluster tests, this needs root
        pytest.fail(f"an ext4 loop mount needs root and e2fsprogs: {exc}", pytrace=False)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk.mount)], check=False, capture_output=True)
