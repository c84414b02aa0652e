"""The Grafana dashboard in docs/grafana queries only metrics a running node exports (with
tiering on, a topic, a produce and a consumer group, so that every family has samples)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import orjson
import pytest

from tests.e2e.conftest import REPO, start_server
from tests.s3 import CREDENTIALS, MotoServer

DASHBOARD = REPO / "docs" / "grafana" / "sluice-dashboard.json"
METRIC = re.compile(r"\bsluice_[a-z_]+\b")


def queried_metrics() -> set[str]:
    doc = orjson.loads(DASHBOARD.read_bytes())
    names: set[str] = set()
    for panel in doc["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names.update(METRIC.findall(target["expr"]))
    return names


def metrics(http: httpx.Client) -> str:
    return http.get("/metrics").text


def test_every_metric_the_dashboard_queries_is_exported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    moto = MotoServer()
    server = start_server(
        tmp_path / "data",
        *("--s3-endpoint", moto.url, "--s3-bucket", moto.new_bucket()),
        *("--tiering-interval", "0.1"),
    )
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            http.post(
                "/v1/topics", json={"name": "t", "configs": {"remote.storage.enable": True}}
            ).raise_for_status()
            http.post("/v1/topics/t/records", json={"records": [{"value": 1}]}).raise_for_status()
            http.get("/v1/topics/t/partitions/0/records", params={"offset": 0}).raise_for_status()
            http.post("/v1/groups/g/members", json={"topics": ["t"]}).raise_for_status()
            deadline = time.monotonic() + 30
            while "sluice_tier_upload_lag_records{" not in (exposition := metrics(http)):
                assert time.monotonic() < deadline, "no tiering pass reported"
                time.sleep(0.1)  # the first tiering pass fills the per-partition gauges
    finally:
        server.stop()
        moto.close()
    exported = {
        re.split(r"[{ ]", line, maxsplit=1)[0]
        for line in exposition.splitlines()
        if line and not line.startswith("#")
    }
    queried = queried_metrics()
    assert len(queried) >= 20
    assert queried <= exported, sorted(queried - exported)
