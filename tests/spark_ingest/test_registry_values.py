"""`--value-schema registry` end to end: confluent-kafka's AvroSerializer (unchanged) writes
values through a real gateway's registry, the gateway tiers them to S3 (moto), the job types
them into Parquet columns; the subject then gains compatible versions and later runs evolve.

Spark's own mergeSchema is part of what is tested: an added field merges (old files read it as
null), a widened one (int → long) does not, and an explicit schema reads both.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import re
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from schemas import wire
from schemas.types.protobuf import ProtobufSchema
from spark_ingest import job, manifest
from spark_ingest.errors import IngestError
from spark_ingest.job import JobOptions
from tests.e2e.conftest import Server, start_server, until
from tests.spark_ingest.support import cli, cli_args, options, read_output, tree
from tests.spark_ingest.tiered import T0

PREFIX = "tier"
BUCKET = "registry-values"
CONFIGS = {
    "remote.storage.enable": True,
    "segment.bytes": 4096,
    "segment.ms": 300,  # the last segment rolls too, so everything reaches S3
    "local.retention.bytes": 0,
}
SOURCE = ["partition", "offset", "timestamp", "key", "value", "value_bytes", "headers"]
V1: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "name", "type": "string"},
        {"name": "offset", "type": "string"},  # collides with the source's column
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["NEW", "PAID"]}},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {"name": "score", "type": "float"},
        {
            "name": "ship",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Address",
                    "fields": [{"name": "city", "type": "string"}],
                },
            ],
        },
    ],
}
# v2 adds an optional field; v3 widens two (int → long, float → double): both BACKWARD.
V2 = {
    **V1,
    "fields": [*V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}],
}
V3 = {
    **V2,
    "fields": [
        {**f, "type": {"id": "long", "score": "double"}[f["name"]]}
        if f["name"] in ("id", "score")
        else f
        for f in V2["fields"]
    ],
}


def order(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": n,
        "name": f"order-{n}",
        "offset": f"o{n}",
        "price": Decimal(f"{n % 1000}.25"),
        "day": dt.date(2026, 11, 1 + n % 28),
        "at": dt.datetime.fromtimestamp((T0 + n) / 1000, dt.UTC),
        "tags": [f"t{n}", "x"],
        "attrs": {"n": n},
        "kind": "PAID" if n % 2 else "NEW",
        "digest": (n % 2**32).to_bytes(4, "big"),
        "score": n + 0.5,
        "ship": {"city": f"city-{n}"} if n % 3 else None,
        **extra,
    }


@dataclass
class Env:
    server: Server
    http: httpx.Client
    registry: SchemaRegistryClient
    endpoint: str

    @property
    def registry_url(self) -> str:
        return f"{self.server.url}/schema-registry"

    def topic(self, name: str) -> str:
        created = self.http.post(
            "/v1/topics", json={"name": name, "partitions": 1, "configs": CONFIGS}
        )
        assert created.status_code == 201, created.text
        return name

    def avro(self, topic: str, schema: dict[str, Any], values: list[Any]) -> list[bytes]:
        serialize = AvroSerializer(self.registry, json.dumps(schema))
        context = SerializationContext(topic, MessageField.VALUE)
        written = [serialize(v, context) for v in values]
        assert all(isinstance(w, bytes) for w in written)
        return [bytes(w) for w in written]

    def produce(self, topic: str, values: Sequence[bytes | dict[str, Any]]) -> None:
        """Produce the values (bytes as base64, objects as JSON) and wait until all are on S3."""
        records = [
            {"value": base64.b64encode(v).decode(), "value_encoding": "base64"}
            if isinstance(v, bytes)
            else {"value": v}
            for v in values
        ]
        answer = self.http.post(
            f"/v1/topics/{topic}/partitions/0/records", json={"records": records}
        )
        assert answer.status_code == 200, answer.text
        end = answer.json()["results"][-1]["base_offset"] + len(records)
        until(lambda: self.tiered_end(topic) == end, f"{topic} on S3 up to {end}")

    def tiered_end(self, topic: str) -> int:
        """The end offset of the topic's manifest; -1 before its first upload."""
        try:
            found = manifest.load_topics(self.endpoint, BUCKET, PREFIX, (topic,))
        except IngestError:
            return -1
        return found[0].end_offset

    def options(self, where: Path, topic: str, **extra: Any) -> JobOptions:
        settings = {"value_schema": "registry", "registry_url": self.registry_url, **extra}
        return replace(options(self.endpoint, BUCKET, where, (topic,)), **settings)


@pytest.fixture(scope="module")
def env(moto: str, s3: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """A gateway tiering to moto's S3, with its registry under /schema-registry."""
    s3.create_bucket(Bucket=BUCKET)
    data = tmp_path_factory.mktemp("registry-values") / "data"
    server = start_server(
        data, "--s3-endpoint", moto, "--s3-bucket", BUCKET, "--s3-prefix", PREFIX,
        "--tiering-interval", "0.1",
    )  # fmt: skip
    with httpx.Client(base_url=server.url, timeout=30) as http:
        yield Env(
            server, http, SchemaRegistryClient({"url": f"{server.url}/schema-registry"}), moto
        )
    assert server.stop() == 0


def new_files(root: Path, before: dict[str, bytes]) -> list[Path]:
    return [p for p in sorted(root.rglob("*.parquet")) if str(p.relative_to(root)) not in before]


def test_typed_columns_evolve_across_runs(env: Env, spark: SparkSession, tmp_path: Path) -> None:
    topic = env.topic("orders")
    v1_values = env.avro(topic, V1, [order(n) for n in range(5)])
    v1_id = env.registry.get_latest_version(f"{topic}-value").schema_id
    undecodable: list[bytes | dict[str, Any]] = [
        b"plain bytes, not the wire format",
        wire.frame(987654, b"\x02"),  # an id the subject does not have
        v1_values[0][:-3],  # truncated
        v1_values[0] + b"\x00",  # trailing bytes
        {"id": 1},  # JSON
    ]
    env.produce(topic, [*v1_values, *undecodable])
    opts = env.options(tmp_path, topic)

    job.run(opts, spark)
    out = tmp_path / "out"
    schema = pq.read_schema(next(out.rglob("*.parquet")))
    typed = ["id", "name", "value_offset", "price", "day", "at", "tags", "attrs", "kind"]
    assert schema.names == [*SOURCE, "value_schema_id", *typed, "digest", "score", "ship"]
    assert [schema.field(n).type for n in ("id", "price", "day", "at", "score")] == [
        pa.int32(), pa.decimal128(9, 2), pa.date32(), pa.timestamp("ms", tz="UTC"), pa.float32(),
    ]  # fmt: skip
    assert schema.field("attrs").type == pa.map_(pa.string(), pa.int64())
    assert schema.field("ship").type == pa.struct([("city", pa.string())])
    rows = sorted(read_output(out), key=lambda r: r["offset"])
    for n, row in enumerate(rows[:5]):
        expected = order(n)
        expected["value_offset"] = expected.pop("offset")
        expected["attrs"] = list(expected["attrs"].items())
        assert row["value_schema_id"] == v1_id
        assert {k: row[k] for k in expected} == expected
        assert row["value_bytes"] == v1_values[n]
    for row, raw in zip(rows[5:], undecodable, strict=True):
        assert row["value_schema_id"] is None and row["id"] is None and row["ship"] is None
        assert (row["value_bytes"] if isinstance(raw, bytes) else json.loads(row["value"])) == raw

    # Spark's types: decimal, date, timestamp, array, map, binary, struct.
    read = spark.read.parquet(str(out / f"topic={topic}"))
    types = {f.name: f.dataType for f in read.schema.fields}
    assert types["id"] == T.IntegerType() and types["price"] == T.DecimalType(9, 2)
    assert types["day"] == T.DateType() and types["at"] == T.TimestampType()
    assert types["tags"] == T.ArrayType(T.StringType())
    assert types["attrs"] == T.MapType(T.StringType(), T.LongType())
    assert types["digest"] == T.BinaryType() and types["kind"] == T.StringType()
    assert types["ship"] == T.StructType([T.StructField("city", T.StringType())])

    # v2 adds an optional field: new files have its column, old ones stay as they were.
    first = tree(out)
    env.produce(topic, [*env.avro(topic, V2, [order(10, note="hello")]),
                        *env.avro(topic, V1, [order(11)])])  # fmt: skip
    job.run(opts, spark)
    assert {k: v for k, v in tree(out).items() if k in first and k.endswith(".parquet")} == {
        k: v for k, v in first.items() if k.endswith(".parquet")
    }
    added = new_files(out, first)
    assert pq.read_schema(added[0]).names[-1] == "note"
    rows = sorted(read_output(out), key=lambda r: r["offset"])
    assert [(r["id"], r.get("note")) for r in rows[-2:]] == [(10, "hello"), (11, None)]
    merged = spark.read.option("mergeSchema", "true").parquet(str(out / f"topic={topic}"))
    notes = {r["id"]: r["note"] for r in merged.select("id", "note").collect()}
    assert notes == {**dict.fromkeys([0, 1, 2, 3, 4, 11, None]), 10: "hello"}

    # v3 widens id and score: new files hold the wider types, which mergeSchema refuses to
    # merge with the old files'; reading with the newest schema upcasts the old ones.
    second = tree(out)
    env.produce(topic, env.avro(topic, V3, [order(2**40, note="wide")]))
    job.run(opts, spark)
    newest = new_files(out, second)
    widened = pq.read_schema(newest[0])
    assert (widened.field("id").type, widened.field("score").type) == (pa.int64(), pa.float64())
    dataset = str(out / f"topic={topic}")
    with pytest.raises((PySparkException, Py4JJavaError), match="CANNOT_MERGE_INCOMPATIBLE_DATA"):
        spark.read.option("mergeSchema", "true").parquet(dataset).collect()
    wide = spark.read.schema(spark.read.parquet(str(newest[0])).schema).parquet(dataset)
    ids = sorted(r["id"] for r in wide.select("id").collect() if r["id"] is not None)
    assert ids == [0, 1, 2, 3, 4, 10, 11, 2**40]


def test_a_rerun_after_a_kill_types_with_the_versions_of_its_plan(
    env: Env, spark: SparkSession, tmp_path: Path
) -> None:
    """Exactly once on the typed path, even when the subject gains a version in between."""
    topic = env.topic("crash")
    env.produce(topic, env.avro(topic, V1, [order(n) for n in range(40)]))
    clean = env.options(tmp_path / "clean", topic)
    job.run(clean, spark)
    reference = tree(tmp_path / "clean" / "out")
    part = sorted(p for p in reference if p.endswith(".parquet"))[0]

    crashed_opts = env.options(tmp_path / "crashed", topic)
    crashed = cli(*cli_args(crashed_opts), env={"SLUICE_INGEST_KILL_AT": f"after:{part}"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    pending = json.loads((tmp_path / "crashed" / "ckpt" / "offsets.json").read_text())["pending"]
    assert pending["settings"]["value_schema"] == "registry"
    assert [v["version"] for v in json.loads(pending["schema"])["registry"][topic]] == [1]

    env.registry.register_schema(f"{topic}-value", Schema(json.dumps(V2), "AVRO"))
    assert job.run(crashed_opts, spark)["resumed"]
    assert tree(tmp_path / "crashed" / "out") == reference


def test_bad_registry_input_fails_the_run_before_it_plans(
    env: Env, spark: SparkSession, tmp_path: Path
) -> None:
    """Subjects the job cannot type from are refused with the reason, nothing planned."""
    cases: list[tuple[str, str]] = []
    plain = env.topic("no-subject")
    env.produce(plain, [b"raw"])
    cases.append((plain, "has no subject no-subject-value"))

    tree_topic = env.topic("proto-tree")
    node = 'syntax = "proto3";\nmessage Node { string name = 1; repeated Node children = 2; }\n'
    node_id = env.registry.register_schema(f"{tree_topic}-value", Schema(node, "PROTOBUF"))
    env.produce(tree_topic, [wire.frame(node_id, b"\x00\x0a\x01n")])
    cases.append((tree_topic, r"field\.children\[\]: recursive message Node has no typed column"))

    scalar = env.topic("scalar-subject")
    env.produce(scalar, env.avro(scalar, {"type": "string"}, ["text"]))
    cases.append((scalar, "is not an Avro record"))

    changed = env.topic("changed-type")
    env.registry.set_compatibility(f"{changed}-value", "NONE")
    as_int = {"type": "record", "name": "R", "fields": [{"name": "f", "type": "int"}]}
    as_text = {"type": "record", "name": "R", "fields": [{"name": "f", "type": "string"}]}
    env.produce(changed, [*env.avro(changed, as_int, [{"f": 1}]),
                          *env.avro(changed, as_text, [{"f": "x"}])])  # fmt: skip
    cases.append((changed, "field.f is int32 in one version and string in another"))

    union = env.topic("wide-union")
    several = {"type": "record", "name": "U", "fields": [{"name": "u", "type": ["int", "string"]}]}
    env.produce(union, env.avro(union, several, [{"u": 1}]))
    cases.append((union, "a union of several types besides null"))

    for topic, message in cases:
        where = tmp_path / topic
        with pytest.raises(IngestError, match=message):
            job.run(env.options(where, topic), spark)
        assert not (where / "ckpt" / "offsets.json").exists()
        assert not (where / "out").exists()

    unreachable = env.options(tmp_path / "unreachable", plain, registry_url="http://127.0.0.1:1")
    with pytest.raises(IngestError, match=re.escape("schema registry http://127.0.0.1:1")):
        job.run(unreachable, spark)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"value_schema": "avro", "registry_url": "http://x"}, "must be 'registry', not 'avro'"),
        ({"value_schema": "registry"}, "needs --registry-url"),
        (
            {"value_schema": "registry", "registry_url": "http://x", "json_schema": "infer"},
            "give one of --json-schema and --value-schema",
        ),
    ],
)
def test_bad_options_are_refused_before_anything_runs(
    extra: dict[str, Any], message: str, tmp_path: Path
) -> None:
    opts = replace(options("http://127.0.0.1:1", BUCKET, tmp_path, ("t",)), **extra)
    with pytest.raises(IngestError, match=message):
        job.run(opts)


def test_references_and_soft_deleted_versions_still_type_their_records(
    env: Env, spark: SparkSession, tmp_path: Path
) -> None:
    """A version's references come with it; a soft-deleted version still decodes the records
    written with it (they are still in the log)."""
    topic = env.topic("shipments")
    address = {"type": "record", "name": "Address", "namespace": "shop",
               "fields": [{"name": "city", "type": "string"}]}  # fmt: skip
    env.registry.register_schema("address", Schema(json.dumps(address), "AVRO"))
    refs = [SchemaReference("shop.Address", "address", 1)]
    v1 = {"type": "record", "name": "Shipment", "namespace": "shop",
          "fields": [{"name": "to", "type": "shop.Address"}]}  # fmt: skip
    v2 = {
        **v1,
        "fields": [*v1["fields"], {"name": "kg", "type": ["null", "double"], "default": None}],
    }
    subject = f"{topic}-value"
    ids = [
        env.registry.register_schema(subject, Schema(json.dumps(v), "AVRO", refs)) for v in (v1, v2)
    ]
    assert env.registry.delete_version(subject, 1) == 1

    def written(schema: dict[str, Any], value: dict[str, Any]) -> bytes:
        named: dict[str, Any] = {}
        fastavro.parse_schema(address, named)
        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(schema, named), value)
        return out.getvalue()

    oslo = wire.frame(ids[0], written(v1, {"to": {"city": "Oslo"}}))
    rome = wire.frame(ids[1], written(v2, {"to": {"city": "Rome"}, "kg": 2.5}))
    env.produce(topic, [oslo, rome])
    job.run(env.options(tmp_path, topic), spark)
    rows = sorted(read_output(tmp_path / "out"), key=lambda r: r["offset"])
    assert [(r["value_schema_id"], r["to"], r["kg"]) for r in rows] == [
        (ids[0], {"city": "Oslo"}, None),
        (ids[1], {"city": "Rome"}, 2.5),
    ]


def test_json_schema_values_become_columns(env: Env, spark: SparkSession, tmp_path: Path) -> None:
    """confluent-kafka's JSONSerializer's values: the payload is JSON, typed by the version's
    properties; a value its schema does not describe is kept with null typed columns."""
    topic = env.topic("payments")
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "amount": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "payer": {"$ref": "#/definitions/Payer"},
        },
        "required": ["id"],
        "definitions": {"Payer": {"type": "object", "properties": {"name": {"type": "string"}}}},
    }
    serialize = JSONSerializer(json.dumps(schema), env.registry)
    context = SerializationContext(topic, MessageField.VALUE)
    values = [{"id": n, "amount": n / 4, "tags": ["a"], "payer": {"name": f"p{n}"}} for n in (1, 2)]
    written = [serialize(v, context) for v in values]
    schema_id = env.registry.get_latest_version(f"{topic}-value").schema_id
    assert schema_id is not None and all(isinstance(w, bytes) for w in written)
    misfit = wire.frame(schema_id, b'{"id": "one"}')  # the serializer would refuse it
    env.produce(topic, [*[bytes(w) for w in written if w is not None], misfit])
    job.run(env.options(tmp_path, topic), spark)
    files = sorted((tmp_path / "out").rglob("*.parquet"))
    assert pq.read_schema(files[0]).field("amount").type == pa.float64()
    rows = sorted(read_output(tmp_path / "out"), key=lambda r: r["offset"])
    assert [(r["value_schema_id"], r["id"], r["amount"], r["tags"], r["payer"]) for r in rows] == [
        (schema_id, 1, 0.25, ["a"], {"name": "p1"}),
        (schema_id, 2, 0.5, ["a"], {"name": "p2"}),
        (None, None, None, None, None),
    ]
    assert rows[2]["value_bytes"] == misfit


LINE_PROTO = 'syntax = "proto3";\npackage shop;\nmessage Line { string sku = 1; double kg = 2; }\n'
ORDER_PROTO = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "shop/line.proto";
message Order {
  int32 qty = 1;
  string offset = 2;
  Status status = 3;
  repeated Line lines = 4;
  map<string, int64> attrs = 5;
  google.protobuf.Timestamp at = 6;
  oneof pay { string card = 7; string iban = 8; }
  uint64 big = 9;
  enum Status { NEW = 0; PAID = 1; }
}
message Refund { string why = 1; }
"""
# v2 widens qty (int32 -> int64, the same wire type) and adds a field: both BACKWARD.
ORDER_PROTO_V2 = ORDER_PROTO.replace("int32 qty", "int64 qty").replace(
    "uint64 big = 9;", "uint64 big = 9;\n  optional string note = 10;"
)


def test_protobuf_values_become_columns(env: Env, spark: SparkSession, tmp_path: Path) -> None:
    """confluent-kafka's ProtobufSerializer's values (their schema and its import registered
    by the serializer, in its serialized form) typed by the first message's fields, over two
    versions; values it cannot type are kept with null typed columns."""
    topic = env.topic("orders-pb")
    line = ProtobufSchema(LINE_PROTO, {})
    v1, v2 = (ProtobufSchema(t, {"shop/line.proto": line}) for t in (ORDER_PROTO, ORDER_PROTO_V2))
    context = SerializationContext(topic, MessageField.VALUE)
    conf = {"use.deprecated.format": False}

    def written(schema: ProtobufSchema, index: int, **fields: Any) -> bytes:
        cls = schema.message_class([index])
        value = ProtobufSerializer(cls, env.registry, conf)(cls(**fields), context)
        assert value is not None
        return bytes(value)

    at = dt.datetime(2026, 11, 27, 9, 30, 0, 250_000, tzinfo=dt.UTC)
    old = written(
        v1, 0, qty=3, offset="o1", status=1, lines=[{"sku": "s", "kg": 1.5}],
        attrs={"n": 2**40}, at=at, card="c", big=2**64 - 1,
    )  # fmt: skip
    new = written(v2, 0, qty=2**40, iban="DE", note="hi")
    ids = [wire.unframe(v)[0] for v in (old, new)]
    assert env.registry.get_versions(f"{topic}-value") == [1, 2]
    refund = written(v1, 1, why="late")  # message 1 of the file: not the columns' message
    # cut inside big's varint; an id the subject does not have; another message
    undecodable = [old[:-2], wire.frame(987654, b"\x00"), refund]
    env.produce(topic, [old, new, *undecodable])

    job.run(env.options(tmp_path, topic), spark)
    out = tmp_path / "out"
    schema = pq.read_schema(next(out.rglob("*.parquet")))
    typed = ["qty", "value_offset", "status", "lines", "attrs", "at", "card", "iban", "big"]
    assert schema.names == [*SOURCE, "value_schema_id", *typed, "note"]
    assert [schema.field(n).type for n in ("qty", "status", "at", "big")] == [
        pa.int64(), pa.string(), pa.timestamp("us", tz="UTC"), pa.decimal128(20, 0),
    ]  # fmt: skip
    rows = sorted(read_output(out), key=lambda r: r["offset"])
    assert {k: rows[0][k] for k in (*typed, "note", "value_schema_id")} == {
        "value_schema_id": ids[0],
        "qty": 3,
        "value_offset": "o1",
        "status": "PAID",
        "lines": [{"sku": "s", "kg": 1.5}],
        "attrs": [("n", 2**40)],
        "at": at,
        "card": "c",
        "iban": None,
        "big": Decimal(2**64 - 1),
        "note": None,  # v1 has no note
    }
    assert {k: rows[1][k] for k in (*typed, "note", "value_schema_id")} == {
        "value_schema_id": ids[1],
        "qty": 2**40,
        "value_offset": "",  # proto3 scalars absent read as their defaults
        "status": "NEW",
        "lines": [],
        "attrs": [],
        "at": None,  # messages absent are null, as are oneof members not set
        "card": None,
        "iban": "DE",
        "big": Decimal(0),
        "note": "hi",
    }
    for row, raw in zip(rows[2:], undecodable, strict=True):
        assert row["value_schema_id"] is None and row["value_bytes"] == raw
        assert all(row[k] is None for k in (*typed, "note"))

    read = spark.read.parquet(str(out / f"topic={topic}"))
    types = {f.name: f.dataType for f in read.schema.fields}
    assert types["big"] == T.DecimalType(20, 0) and types["at"] == T.TimestampType()
    assert types["attrs"] == T.MapType(T.StringType(), T.LongType())
    line_type = T.StructType([T.StructField("sku", T.StringType()),
                              T.StructField("kg", T.DoubleType())])  # fmt: skip
    assert types["lines"] == T.ArrayType(line_type)
