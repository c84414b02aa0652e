"""Locust profiles for a Sluice gateway: producers, consumers and a mix of both (FastHttpUser).

    locust -f loadtests/locustfile.py --host http://127.0.0.1:8080 \\
        --headless -u 20 -r 5 -t 1m --csv out/sluice

Pick user classes by name on the command line (e.g. `JsonProducer PartitionConsumer`) or with
SLUICE_PROFILE. Environment variables (defaults in brackets):

    SLUICE_PROFILE      mixed [all classes by weight] | produce | consume
    SLUICE_TOPIC        topic to use [locust]; created at test start if missing
    SLUICE_PARTITIONS   partitions when creating it [4]
    SLUICE_BATCH        records per produce request [100]
    SLUICE_VALUE_BYTES  bytes per record value [100]
    SLUICE_ACKS         0 | 1 | all [1]
    SLUICE_GROUP        consumer group of GroupConsumer [locust]
    SLUICE_POLL_MS      long-poll timeout_ms of consumers [1000]
    SLUICE_MAX_RECORDS  max_records per fetch [500]
    SLUICE_WAIT_S       pause between one user's requests [0]
"""

from __future__ import annotations

import itertools
import os
import urllib.error
import urllib.request
from typing import Any

import orjson
from locust import FastHttpUser, constant, events, task
from locust.env import Environment

TOPIC = os.environ.get("SLUICE_TOPIC", "locust")
PARTITIONS = int(os.environ.get("SLUICE_PARTITIONS", "4"))
BATCH = int(os.environ.get("SLUICE_BATCH", "100"))
VALUE = orjson.dumps("x" * max(0, int(os.environ.get("SLUICE_VALUE_BYTES", "100")) - 2))
ACKS = os.environ.get("SLUICE_ACKS", "1")
GROUP = os.environ.get("SLUICE_GROUP", "locust")
POLL_MS = int(os.environ.get("SLUICE_POLL_MS", "1000"))
MAX_RECORDS = int(os.environ.get("SLUICE_MAX_RECORDS", "500"))
WAIT_S = float(os.environ.get("SLUICE_WAIT_S", "0"))
PROFILE = os.environ.get("SLUICE_PROFILE", "mixed")
PRODUCE_PATH = f"/v1/topics/{TOPIC}/records?acks={ACKS}"
_partitions = itertools.count()


def _in_profile(kind: str) -> bool:
    """Whether a class of this kind (produce/consume) runs in SLUICE_PROFILE."""
    return PROFILE in ("mixed", kind)


def create_topic(environment: Environment, **_: Any) -> None:
    """Create the topic once per run; an existing topic is used as it is."""
    body = orjson.dumps({"name": TOPIC, "partitions": PARTITIONS})
    request = urllib.request.Request(
        f"{environment.host}/v1/topics",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
    except urllib.error.HTTPError as error:
        if error.code != 409:
            raise


events.test_start.add_listener(create_topic)  # type: ignore[no-untyped-call]


class JsonProducer(FastHttpUser):
    """POSTs JSON batches of SLUICE_BATCH records; the gateway spreads them over partitions."""

    abstract = not _in_profile("produce")
    weight = 3
    wait_time = constant(WAIT_S)
    body = orjson.dumps({"records": [{"value": orjson.Fragment(VALUE)}] * BATCH}).decode()

    @task
    def produce(self) -> None:
        headers = {"Content-Type": "application/json"}
        self.client.post(PRODUCE_PATH, data=self.body, headers=headers, name="produce json")


class NdjsonProducer(FastHttpUser):
    """POSTs NDJSON bodies, one record per line."""

    abstract = not _in_profile("produce")
    weight = 3
    wait_time = constant(WAIT_S)
    body = ((VALUE + b"\n") * BATCH).decode()

    @task
    def produce(self) -> None:
        headers = {"Content-Type": "application/x-ndjson"}
        self.client.post(PRODUCE_PATH, data=self.body, headers=headers, name="produce ndjson")


class PartitionConsumer(FastHttpUser):
    """Follows one partition (users take partitions in turn) with long-poll fetches."""

    abstract = not _in_profile("consume")
    weight = 2
    wait_time = constant(WAIT_S)

    def on_start(self) -> None:
        self.partition = next(_partitions) % PARTITIONS
        self.offset: int | str = "earliest"

    @task
    def fetch(self) -> None:
        path = (
            f"/v1/topics/{TOPIC}/partitions/{self.partition}/records?offset={self.offset}"
            f"&timeout_ms={POLL_MS}&max_records={MAX_RECORDS}"
        )
        with self.client.get(path, name="fetch partition", catch_response=True) as response:
            if response.status_code == 200:
                self.offset = response.json()["next_offset"]
            elif response.status_code == 416:  # retention moved the log start past us
                self.offset = "earliest"
                response.success()
            else:
                response.failure(f"{response.status_code}: {response.text}")


class GroupConsumer(FastHttpUser):
    """A member of SLUICE_GROUP: joins, long-polls its assignment with auto-commit, leaves."""

    abstract = not _in_profile("consume")
    weight = 2
    wait_time = constant(WAIT_S)
    member: str | None = None

    def on_start(self) -> None:
        join = {
            "topics": [TOPIC],
            "session_timeout_ms": 30000,
            "auto_offset_reset": "earliest",
            "auto_commit": True,
        }
        with self.client.post(
            f"/v1/groups/{GROUP}/members", json=join, name="group join", catch_response=True
        ) as response:
            if response.status_code == 201:
                self.member = response.json()["member_id"]
            else:
                response.failure(f"{response.status_code}: {response.text}")

    @task
    def consume(self) -> None:
        if self.member is None:
            self.on_start()
            return
        path = (
            f"/v1/groups/{GROUP}/members/{self.member}/records"
            f"?timeout_ms={POLL_MS}&max_records={MAX_RECORDS}"
        )
        with self.client.get(path, name="group consume", catch_response=True) as response:
            if response.status_code == 404:  # the session expired: join again
                self.member = None
                response.failure("member unknown (session expired)")

    def on_stop(self) -> None:
        if self.member is not None:
            self.client.delete(f"/v1/groups/{GROUP}/members/{self.member}", name="group leave")
