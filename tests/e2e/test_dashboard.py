"""The Grafana dashboard in docs/grafana queries only metrics a running node exports (with
tiering on, a topic, a produce, a consumer group and a push subscription delivering to a real
receiver on loopback, so that every family has samples)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import orjson
import pytest

from tests.e2e.conftest import REPO, start_server
from tests.s3 import CREDENTIALS, MotoServer

DASHBOARD = REPO / "docs" / "grafana" / "sluice-dashboard.json"
METRIC = re.compile(r"\bsluice_[a-z_]+\b")
SUBSCRIPTION_METRICS = {
    "sluice_subscription_delivered_records_total",
    "sluice_subscription_retried_records_total",
    "sluice_subscription_dead_lettered_records_total",
    "sluice_subscription_in_flight_records",
    "sluice_subscription_lag",
    "sluice_subscription_stopped_partitions",
    "sluice_subscription_requests_in_flight",
    "sluice_subscription_concurrency_limit",
    "sluice_subscription_delivery_latency_seconds_bucket",
}


class Acknowledge(BaseHTTPRequestHandler):
    """A push subscription's endpoint: 204 to every POST."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads the node's metrics, not the receiver's log."""


@pytest.fixture
def receiver() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Acknowledge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    thread.join()


def queried_metrics() -> set[str]:
    doc = orjson.loads(DASHBOARD.read_bytes())
    names: set[str] = set()
    for panel in doc["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names.update(METRIC.findall(target["expr"]))
    return names


def metrics(http: httpx.Client) -> str:
    return http.get("/metrics").text


def test_every_metric_the_dashboard_queries_is_exported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, receiver: str
) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    moto = MotoServer()
    server = start_server(
        tmp_path / "data",
        *("--s3-endpoint", moto.url, "--s3-bucket", moto.new_bucket()),
        *("--tiering-interval", "0.1"),
        *("--subscription-allowed-hosts", "127.0.0.1"),
    )
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            http.post(
                "/v1/topics", json={"name": "t", "configs": {"remote.storage.enable": True}}
            ).raise_for_status()
            http.post("/v1/topics/t/records", json={"records": [{"value": 1}]}).raise_for_status()
            http.get("/v1/topics/t/partitions/0/records", params={"offset": 0}).raise_for_status()
            http.post("/v1/groups/g/members", json={"topics": ["t"]}).raise_for_status()
            http.post(
                "/v1/subscriptions",
                json={"name": "s", "topic": "t", "endpoint": receiver, "start": "earliest"},
            ).raise_for_status()
            deadline = time.monotonic() + 30
            while not all(
                family in (exposition := metrics(http))
                for family in (
                    "sluice_tier_upload_lag_records{",  # the first tiering pass fills these
                    "sluice_subscription_delivery_latency_seconds_bucket{",  # a 2xx, these
                )
            ):
                assert time.monotonic() < deadline, "no tiering pass or delivery reported"
                time.sleep(0.1)
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
    assert queried >= SUBSCRIPTION_METRICS, sorted(SUBSCRIPTION_METRICS - queried)
    assert queried <= exported, sorted(queried - exported)
