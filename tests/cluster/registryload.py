"""The campaign's schema registry load, run while the faults fire: registers distinct Avro
schemas through random nodes (each call sent once), registers acknowledged ones again under
their subject or another (an idempotent register answers the id it gave), sets subjects'
compatibility levels, and produces values framed with a just acknowledged id into a topic
that validates them (retried until a node whose view holds the id accepts it). After healing
it reads every node's view of the schedule's subjects and the writer's log of `_schemas`; the
checker judges it all (checker.py: the registry rules)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp
import fastavro

from engine import batch as fmt
from schemas import records
from schemas.records import SchemaVersion
from tests.cluster.harness import Cluster
from tests.cluster.sideload import CALL_TIMEOUT_S, SentOnce, SideActor, call_json

PREFIX = "/schema-registry"
SUBJECTS = 3  # the schedule's own subjects, besides the validated topic's
PACING_S = (0.1, 0.35)  # between two registry calls
AGAIN_SHARE = 0.25  # calls that register an acknowledged schema again
CONFIG_SHARE = 0.1  # calls that set a subject's compatibility level
PRODUCE_SHARE = 0.5  # new schemas of the validated subject produced with, once acknowledged
LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "NONE")
PRODUCE_RETRY_S = 0.3  # between two attempts of a validated produce
DRAIN_S = 30.0  # after healing, bound of the validated produces' retries and the final reads
RECORD_BATCH = "application/vnd.sluice.record-batch"


def schema_text(name: str, n: int) -> str:
    """Schema n of a schedule: a record with one field named after n, with a default, so that
    any two are compatible under every level (a refusal is the registry's fault)."""
    fields = [{"name": f"f{n}", "type": "int", "default": 0}]
    return json.dumps({"type": "record", "name": name, "fields": fields})


def framed(schema_id: int, text: str, n: int) -> bytes:
    """A value in Confluent's wire format: magic byte 0, the id, the Avro binary payload."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(json.loads(text)), {f"f{n}": n})
    return struct.pack(">bI", 0, schema_id) + out.getvalue()


@dataclass
class RegistryOp(SentOnce):
    """One registry call sent once through one node: a register (new: a schema's first;
    again: an acknowledged schema once more) or a compatibility level set."""

    kind: str  # new | again | config
    subject: str
    text: str  # the schema, or the level set
    node: int
    start: float
    end: float = 0.0
    status: int | None = None  # None: no answer
    schema_id: int | None = None  # a register's answer
    error_code: int | None = None
    error: str | None = None

    def __str__(self) -> str:
        what = self.status if self.status is not None else self.error
        answer = f" id {self.schema_id}" if self.schema_id is not None else ""
        code = f" {self.error_code}" if self.error_code is not None else ""
        return (
            f"{self.kind} {self.subject} {self.text} through node {self.node} at "
            f"{self.start:.2f}s: {what}{code}{answer}"
        )


@dataclass
class ValidatedProduce:
    """A value framed with an acknowledged id, produced into the topic that validates it until
    accepted (each attempt through a random node: (node, time, status or error))."""

    schema_id: int
    acked_at: float
    attempts: list[tuple[int, float, str]] = field(default_factory=list)
    accepted: bool = False


@dataclass
class RegistryView:
    """A node's view of the schedule's subjects after healing: subject -> version -> (id,
    schema); the subjects and levels it shows, or None where it did not answer."""

    versions: dict[str, dict[int, tuple[int, str]]] = field(default_factory=dict)
    levels: dict[str, str | None] = field(default_factory=dict)
    error: str | None = None


@dataclass
class RegistryHistory:
    """What the registry load did, and what the cluster shows of it once healed."""

    subjects: list[str] = field(default_factory=list)
    ops: list[RegistryOp] = field(default_factory=list)
    produces: list[ValidatedProduce] = field(default_factory=list)
    views: dict[int, RegistryView] = field(default_factory=dict)  # node -> its view
    log: list[SchemaVersion] = field(default_factory=list)  # the writer's, of these subjects
    log_error: str | None = None


class Registrar(SideActor[RegistryHistory]):
    """The registry load of one schedule (see the module's docstring)."""

    def __init__(
        self,
        cluster: Cluster,
        history: RegistryHistory,
        rng: random.Random,
        session: aiohttp.ClientSession,
        topic: str,
        clock: Callable[[], float],
    ) -> None:
        super().__init__(cluster, history, rng, session, topic, clock)
        self.validated = f"{topic}-v"  # the topic with value.schema.validation
        self.name = topic.replace("-", "_")  # the schemas' record name: unique to the schedule
        history.subjects = [f"{topic}-s{k}-value" for k in range(SUBJECTS)]
        history.subjects.append(f"{self.validated}-value")
        self._acked: list[tuple[str, str]] = []  # (subject, schema) answered 200
        self._produces: list[asyncio.Task[None]] = []
        self._counter = 0
        self._give_up_at: float | None = None

    def create_topic(self) -> None:
        """The topic whose values must be framed with an id of its subject."""
        response = self.cluster.post(
            0,
            "/v1/topics",
            json={
                "name": self.validated,
                "partitions": 1,
                "replication_factor": 3,
                "configs": {"min.insync.replicas": 2, "value.schema.validation": True},
            },
        )
        assert response.status_code == 201, response.text

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run())]

    async def close(self) -> None:
        """Stop new calls (the validated produces go on until drained)."""
        self.stop.set()
        await asyncio.gather(*self._tasks)

    async def drain(self, bound_s: float = DRAIN_S) -> None:
        """After healing: retry the validated produces not accepted yet, for `bound_s` at most
        (0: stop them, the schedule being judged stuck already)."""
        loop = asyncio.get_running_loop()
        self._give_up_at = loop.time() + bound_s
        await asyncio.gather(*self._produces)

    def _url(self, node: int, path: str) -> str:
        return f"{self.cluster.url(node)}{PREFIX}{path}"

    async def _run(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(TimeoutError):
                # The pacing of the calls (ends early when told to stop).
                await asyncio.wait_for(self.stop.wait(), self.rng.uniform(*PACING_S))
            if self.stop.is_set():
                return
            draw = self.rng.random()
            if draw < CONFIG_SHARE:
                await self._config(self.rng.choice(self.side.subjects))
            elif draw < CONFIG_SHARE + AGAIN_SHARE and self._acked:
                home, text = self.rng.choice(self._acked)
                subjects = self.side.subjects
                subject = home if self.rng.random() < 0.5 else self.rng.choice(subjects)
                await self._register("again", subject, text)
            else:
                self._counter += 1
                text = schema_text(self.name, self._counter)
                op = await self._register("new", self.rng.choice(self.side.subjects), text)
                if (
                    op.outcome == "ok"
                    and op.schema_id is not None
                    and op.subject == self.side.subjects[-1]
                    and self.rng.random() < PRODUCE_SHARE
                ):
                    produce = ValidatedProduce(op.schema_id, self.clock())
                    self.side.produces.append(produce)
                    value = framed(op.schema_id, text, self._counter)
                    self._produces.append(asyncio.create_task(self._produce(produce, value)))

    async def _send(self, op: RegistryOp, method: str, path: str, body: dict[str, Any]) -> Any:
        status, _, doc, error = await call_json(
            self.session, method, self._url(op.node, path), body
        )
        op.end = self.clock()
        op.status, op.error = status, error
        if isinstance(doc, dict) and status is not None and status >= 300:
            code = doc.get("error_code")
            op.error_code = code if isinstance(code, int) else None
        self.side.ops.append(op)
        return doc

    async def _register(self, kind: str, subject: str, text: str) -> RegistryOp:
        op = RegistryOp(kind, subject, text, self.rng.randrange(self.cluster.size), self.clock())
        doc = await self._send(op, "POST", f"/subjects/{quote(subject)}/versions", {"schema": text})
        if op.status == 200 and isinstance(doc, dict) and isinstance(doc.get("id"), int):
            op.schema_id = doc["id"]
            if kind == "new":
                self._acked.append((subject, text))
        return op

    async def _config(self, subject: str) -> None:
        level = self.rng.choice(LEVELS)
        op = RegistryOp("config", subject, level, self.rng.randrange(self.cluster.size), 0.0)
        op.start = self.clock()
        await self._send(op, "PUT", f"/config/{quote(subject)}", {"compatibility": level})

    async def _produce(self, produce: ValidatedProduce, value: bytes) -> None:
        """Send the framed value until a node accepts it (a node whose view lacks the id yet
        refuses it with 422): while the faults fire, then until the bound after healing."""
        body = bytes(fmt.encode_batch([fmt.RecordInput(None, value)]))
        loop = asyncio.get_running_loop()
        while self._give_up_at is None or loop.time() < self._give_up_at:
            node = self.rng.randrange(self.cluster.size)
            start = self.clock()
            try:
                async with self.session.post(
                    f"{self.cluster.url(node)}/v1/topics/{self.validated}/partitions/0/records",
                    data=body,
                    headers={"Content-Type": RECORD_BATCH},
                    timeout=aiohttp.ClientTimeout(total=CALL_TIMEOUT_S),
                ) as response:
                    answer = str(response.status)
                    if response.status >= 300:
                        answer += " " + (await response.text())[:200]
            except (aiohttp.ClientError, TimeoutError) as exc:
                answer = f"no answer ({type(exc).__name__})"
            produce.attempts.append((node, start, answer))
            if answer == "200":
                produce.accepted = True
                return
            await asyncio.sleep(PRODUCE_RETRY_S)  # pause between retries, not a synchronisation

    async def read_final(self) -> None:
        """After healing: every node's view of the schedule's subjects, read until each answers
        and all agree (or what each showed last at the bound), and the writer's log."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_S
        while True:
            nodes = range(self.cluster.size)
            views = dict(zip(nodes, await asyncio.gather(*map(self._view, nodes)), strict=True))
            answered = all(v.error is None for v in views.values())
            shown = {json.dumps([v.versions, v.levels], sort_keys=True) for v in views.values()}
            if (answered and len(shown) == 1) or loop.time() >= deadline:
                break
            await asyncio.sleep(0.2)  # pause between reads, not a synchronisation
        self.side.views = views
        await asyncio.to_thread(self._read_log)

    async def _view(self, node: int) -> RegistryView:
        view = RegistryView()
        for subject in self.side.subjects:
            path = f"/subjects/{quote(subject)}/versions"
            status, doc, error = await self._get(node, path)
            if status == 404:
                view.versions[subject] = {}
            elif status == 200 and isinstance(doc, list):
                found: dict[int, tuple[int, str]] = {}
                for version in doc:
                    status, one, error = await self._get(node, f"{path}/{version}")
                    if status != 200 or not isinstance(one, dict):
                        view.error = f"{subject} version {version}: {status or error}"
                        return view
                    found[int(version)] = (one["id"], one["schema"])
                view.versions[subject] = found
            else:
                view.error = f"{subject} versions: {status or error}"
                return view
            status, doc, error = await self._get(
                node, f"/config/{quote(subject)}?defaultToGlobal=false"
            )
            if status == 200 and isinstance(doc, dict):
                view.levels[subject] = doc["compatibilityLevel"]
            elif status == 404:
                view.levels[subject] = None
            else:
                view.error = f"{subject} config: {status or error}"
                return view
        return view

    async def _get(self, node: int, path: str) -> tuple[int | None, Any, str | None]:
        status, _, doc, error = await call_json(self.session, "GET", self._url(node, path))
        return status, doc, error

    def _read_log(self) -> None:
        """The records of the schedule's subjects in the log of `_schemas-0`'s leader: the
        order the writer assigned ids in."""
        state = self.cluster.etcd.partition(records.TOPIC, 0)
        if state is None or state.leader < 0:
            self.side.log_error = f"{records.TOPIC}-0 has no leader: {state}"
            return
        subjects = set(self.side.subjects)
        for record in self.cluster.replica_log(state.leader, records.TOPIC, 0):
            decoded = records.decode(record.key, record.value)
            if isinstance(decoded, SchemaVersion) and decoded.subject in subjects:
                self.side.log.append(decoded)
