"""Tiering in a three-node cluster (real etcd, real node processes, moto_server): only the
leader uploads; when it is killed, the new leader continues the same manifest in its own
epoch from where it ends, and every record stays readable from offset 0 through any node."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.tiered.manifest import Manifest
from gateway.workers.local_cluster import LocalCluster
from tests.e2e.conftest import read_values, until
from tests.s3 import CREDENTIALS, MotoServer, manifest_of

CONFIGS = {
    "remote.storage.enable": True,
    "segment.bytes": 1024,
    "local.retention.bytes": 0,
    "min.insync.replicas": 2,
}


def test_a_new_leader_continues_the_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    moto = MotoServer()
    bucket = moto.new_bucket()
    cluster = LocalCluster(
        tmp_path,
        3,
        node_options=(
            "--s3-endpoint",
            moto.url,
            "--s3-bucket",
            bucket,
            "--tiering-interval",
            "0.2",
        ),
    )
    cluster.start()
    http = httpx.Client(timeout=30)

    def manifest() -> Manifest | None:
        found: Manifest | None = manifest_of(moto, bucket, "", "t", 0)
        return found

    def post(url: str, records: list[dict[str, Any]], answers: list[httpx.Response]) -> bool:
        """One acks=all produce; False on a 421 (nodes whose views of a new leadership differ
        for a moment refuse to forward it, and nothing was appended)."""
        answers.append(
            http.post(
                f"{url}/v1/topics/t/partitions/0/records",
                params={"acks": "all"},
                json={"records": records},
            )
        )
        return answers[-1].status_code != 421

    def produce(url: str, first: int) -> None:
        for start in range(first, first + 100, 10):
            records = [{"value": {"n": n}} for n in range(start, start + 10)]
            answers: list[httpx.Response] = []
            until(functools.partial(post, url, records, answers), "a produce not misdirected")
            assert answers[-1].status_code == 200, answers[-1].text

    try:
        urls = [node.url for node in cluster.nodes]
        created = http.post(
            f"{urls[0]}/v1/topics",
            json={"name": "t", "replication_factor": 3, "configs": CONFIGS},
        )
        assert created.status_code == 201, created.text
        leader = created.json()["partitions"][0]["leader"]
        produce(urls[0], 0)
        until(lambda: (m := manifest()) is not None and len(m.segments) >= 1, "first uploads")
        before = manifest()
        assert before is not None

        cluster.nodes[leader].kill()
        other = urls[(leader + 1) % 3]

        def new_leader() -> int | None:
            row = http.get(f"{other}/v1/topics/t").json()["partitions"][0]
            return int(row["leader"]) if row["leader"] not in (None, leader) else None

        until(lambda: new_leader() is not None, "a new leader")
        produce(other, 100)

        def continued() -> bool:
            """The new leader's epoch has uploaded past offset 100 (its first upload in that
            epoch may still end at the segments it had before: not yet what is asked)."""
            m = manifest()
            return (
                m is not None
                and m.leader_epoch > before.leader_epoch
                and m.end_offset is not None
                and m.end_offset > 100
            )

        until(continued, "the new leader's uploads past offset 100")
        after = manifest()
        assert after is not None
        assert after.segments[: len(before.segments)] == before.segments
        for earlier, later in zip(after.segments, after.segments[1:], strict=False):
            assert later.base_offset == earlier.next_offset

        assert read_values(http, other, "t", 200) == [{"n": n} for n in range(200)]
    finally:
        http.close()
        cluster.stop()
        moto.close()
