"""Spark ingest throughput: tiered segments on S3 -> hourly Parquet, against spark.read.json.

    python -m loadtests.ingest_bench --records 1000000 --out DIR [--cores 2] [--unflagged]
        [--typed]

N records (a key, a ~90-byte JSON object value, one timestamp a second) are written through
the engine as segments of --segment-records records, spread over --partitions partitions,
and uploaded with their manifests to a local moto_server. Then, in one Spark session on
local[--cores]:

- ingest: the job (`spark_ingest.job.run`) over those segments: download, verify, decode,
  write hourly Parquet under deterministic names, finalize, commit;
- json: the same records as JSON lines on local disk, one file per segment, read with
  `spark.read.schema(...).json(...)` (an explicit schema: the job infers nothing either) and
  written with `.write.parquet(...)`.

With --typed, three more cells type the values into columns, over the same records:

- json-typed: the job with `--json-schema` (a DDL file of the four fields) over the JSON values;
- avro-typed: the job with `--value-schema registry` over the same objects written as Avro in
  Confluent's wire format, their schema registered in a gateway's registry (a local
  `python -m gateway`);
- protobuf-typed: the same as Protobuf messages (the four fields; the first message's index,
  then its bytes), their schema registered in its serialized form, as confluent-kafka's
  ProtobufSerializer registers one.

Every path writes Parquet (zstd) to local disk. A tiny warm-up of each runs first, so none
pays the JVM's and Python workers' start-up. Records/s per core is records / wall seconds /
cores. By default values sit in batches flagged as JSON (the gateway's JSON produce), so the
job trusts them; --unflagged makes it validate each value with json.loads.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import hashlib
import io
import json
import os
import shutil
import struct
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import fastavro
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from engine import batch as fmt
from engine.config import TopicConfig
from engine.log import PartitionLog
from loadtests.common import MotoServer, start_gateway
from spark_ingest import job

T0 = 1_795_000_000_000 - 1_795_000_000_000 % 3_600_000
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
}
BUCKET = "ingest-bench"
JSON_DDL = "partition INT, offset BIGINT, timestamp TIMESTAMP, key STRING, value STRING"
VALUE_DDL = "id BIGINT, customer STRING, amount BIGINT, status STRING"  # --json-schema's
AVRO_SCHEMA = {
    "type": "record",
    "name": "Payment",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "long"},
        {"name": "status", "type": "string"},
    ],
}
WIRE_HEADER = struct.Struct(">bI")  # Confluent's wire format: magic byte 0, schema id


def payment_proto() -> descriptor_pb2.FileDescriptorProto:
    """AVRO_SCHEMA's record as a proto3 message: `message Payment { int64 id = 1; string
    customer = 2; int64 amount = 3; string status = 4; }`."""
    kinds = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="payment.proto", syntax="proto3")
    payment = file.message_type.add(name="Payment")
    for number, (name, kind) in enumerate(
        [("id", kinds.TYPE_INT64), ("customer", kinds.TYPE_STRING),
         ("amount", kinds.TYPE_INT64), ("status", kinds.TYPE_STRING)], 1,
    ):  # fmt: skip
        payment.field.add(name=name, number=number, type=kind, label=kinds.LABEL_OPTIONAL)
    return file


def fields_of(n: int) -> dict[str, Any]:
    return {"id": n, "customer": f"c-{n % 9973}", "amount": n % 1000, "status": "paid"}


def value_of(n: int) -> bytes:
    return json.dumps(fields_of(n)).encode()


def avro_values(schema_id: int) -> Callable[[int], bytes]:
    """Record n's fields as Avro in the wire format, with the registered schema's id."""
    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    header = WIRE_HEADER.pack(0, schema_id)

    def encode(n: int) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, fields_of(n))
        return header + out.getvalue()

    return encode


def protobuf_values(schema_id: int) -> Callable[[int], bytes]:
    """Record n's fields as a Protobuf message in the wire format: the header, the first
    message's index (a single 0 byte), the message."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(payment_proto())
    payment = message_factory.GetMessageClass(pool.FindMessageTypeByName("Payment"))
    header = WIRE_HEADER.pack(0, schema_id) + b"\x00"

    def encode(n: int) -> bytes:
        body: bytes = payment(**fields_of(n)).SerializeToString()
        return header + body

    return encode


def make_segments(
    root: Path,
    s3: Any,
    topic: str,
    records: int,
    partitions: int,
    per_segment: int,
    flagged: bool,
    value: Callable[[int], bytes] = value_of,
) -> list[Path]:
    """Write the records through engine logs, upload segments + manifests; return JSON files.

    Each segment also becomes one JSON-lines file with the same records, for the json path.
    """
    json_dir = root / "json"
    json_dir.mkdir(parents=True)
    files: list[Path] = []
    per_partition = records // partitions
    for p in range(partitions):
        log = PartitionLog(root / "logs" / f"{topic}-{p}", topic, p, TopicConfig())
        entries: list[dict[str, Any]] = []
        for first in range(0, per_partition, per_segment):
            begin = p * per_partition + first
            rows: list[tuple[bytes, bytes, fmt.Headers, int]] = [
                (f"k{n % 1000}".encode(), value(n), [], T0 + n * 1000)
                for n in range(begin, min(begin + per_segment, (p + 1) * per_partition))
            ]
            data = fmt.encode_batches(rows, max_batch_bytes=1 << 20, values_json=flagged)
            info = log.append_as_leader(data, 1)
            log.roll()
            segment = log.segments[-2]
            body = segment.path.read_bytes()
            name = f"{info.first_offset:020d}-{info.last_offset:020d}"
            s3.put_object(Bucket=BUCKET, Key=f"{topic}/{p}/{name}.log", Body=body)
            entries.append(
                {
                    "base_offset": info.first_offset,
                    "last_offset": info.last_offset,
                    "records": len(rows),
                    "size": len(body),
                    "first_timestamp": rows[0][3],
                    "max_timestamp": rows[-1][3],
                    "sha256": hashlib.sha256(body).hexdigest(),
                    "epochs": [[1, info.first_offset]],
                    "uploaded_ms": int(time.time() * 1000),
                }
            )
            path = json_dir / f"{topic}-{p}-{name}.json"
            with path.open("w") as out:
                for i, (key, _, _, ts) in enumerate(rows):
                    line = {
                        "partition": p,
                        "offset": info.first_offset + i,
                        "timestamp": dt.datetime.fromtimestamp(ts / 1000, dt.UTC).isoformat(),
                        "key": key.decode(),
                        "value": fields_of(begin + i),
                    }
                    out.write(json.dumps(line) + "\n")
            files.append(path)
        log.close()
        manifest = {
            "format": 1,
            "topic": topic,
            "partition": p,
            "topic_id": hashlib.md5(topic.encode()).hexdigest(),
            "leader_epoch": 1,
            "log_start_offset": 0,
            "segments": entries,
        }
        s3.put_object(Bucket=BUCKET, Key=f"{topic}/{p}/manifest.json", Body=json.dumps(manifest))
    return files


def run_ingest(
    spark: Any,
    endpoint: str,
    topic: str,
    out: Path,
    json_schema: str | None = None,
    value_schema: str | None = None,
    registry_url: str | None = None,
) -> tuple[float, int]:
    """Time one job run (values typed as JobOptions' typing options say)."""
    options = job.JobOptions(
        endpoint=endpoint,
        bucket=BUCKET,
        prefix="",
        topics=(topic,),
        out=str(out / "parquet"),
        checkpoint=str(out / "offsets.json"),
        json_schema=json_schema,
        value_schema=value_schema,
        registry_url=registry_url,
    )
    began = time.perf_counter()
    rows = int(job.run(options, spark)["rows"])
    return time.perf_counter() - began, rows


def run_json(spark: Any, files: list[Path], out: Path) -> tuple[float, int]:
    began = time.perf_counter()
    df = spark.read.schema(JSON_DDL).json([str(f) for f in files])
    df.write.mode("overwrite").option("compression", "zstd").parquet(str(out))
    seconds = time.perf_counter() - began
    return seconds, int(spark.read.parquet(str(out)).count())


@contextmanager
def registry(root: Path) -> Iterator[str]:
    """A local gateway; the URL of its schema registry."""
    process, url = start_gateway(root / "gateway")
    try:
        yield f"{url}/schema-registry"
    finally:
        process.terminate()
        process.wait(timeout=30)


def register(registry_url: str, subject: str, schema_type: str = "AVRO") -> int:
    """Register AVRO_SCHEMA (or its Protobuf message, serialized) under `subject`; its id."""
    if schema_type == "AVRO":
        body = {"schema": json.dumps(AVRO_SCHEMA)}
    else:
        serialized = base64.standard_b64encode(payment_proto().SerializeToString()).decode()
        body = {"schema": serialized, "schemaType": schema_type}
    request = urllib.request.Request(
        f"{registry_url}/subjects/{subject}/versions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        schema_id: int = json.loads(answer.read())["id"]
    return schema_id


def cell(seconds: float, rows: int, cores: int) -> dict[str, Any]:
    """One run's figures."""
    return {
        "seconds": round(seconds, 2),
        "rows": rows,
        "records_per_s_per_core": round(rows / seconds / cores),
    }


def run_typed(
    spark: Any, endpoint: str, args: argparse.Namespace, s3: Any, registry_url: str
) -> dict[str, Any]:
    """The json-typed, avro-typed and protobuf-typed cells (warmed up), over the same
    records."""
    ddl = args.out / "values.ddl"
    ddl.write_text(VALUE_DDL)
    as_json = {"json_schema": str(ddl)}
    as_registry = {"value_schema": "registry", "registry_url": registry_url}
    encoders = {"avro": avro_values, "protobuf": protobuf_values}
    for kind, values in encoders.items():
        for topic in (f"{kind}-warmup", kind):
            encode = values(register(registry_url, f"{topic}-value", kind.upper()))
            size = 2000 if topic.endswith("-warmup") else args.records
            per_segment = 1000 if topic.endswith("-warmup") else args.segment_records
            make_segments(
                args.out / topic, s3, topic, size, args.partitions, per_segment, False, encode
            )
    run_ingest(spark, endpoint, "warmup", args.out / "warm-json-typed", **as_json)
    for kind in encoders:
        run_ingest(
            spark, endpoint, f"{kind}-warmup", args.out / f"warm-{kind}-typed", **as_registry
        )
    json_s, json_rows = run_ingest(spark, endpoint, "bench", args.out / "json-typed", **as_json)
    report: dict[str, Any] = {"json_typed": cell(json_s, json_rows, args.cores)}
    for kind in encoders:
        seconds, rows = run_ingest(spark, endpoint, kind, args.out / f"{kind}-typed", **as_registry)
        report[f"{kind}_typed"] = cell(seconds, rows, args.cores)
        report[f"ratio_{kind}_typed_over_json_typed"] = round(json_s / seconds, 2)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--segment-records", type=int, default=100_000)
    parser.add_argument("--unflagged", action="store_true", help="values not flagged as JSON")
    parser.add_argument(
        "--typed",
        action="store_true",
        help="also the json-typed, avro-typed and protobuf-typed cells",
    )
    args = parser.parse_args()

    os.environ.update(CREDENTIALS)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    moto = MotoServer()
    endpoint = moto.url
    try:
        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket=BUCKET)
        began = time.perf_counter()
        flagged = not args.unflagged
        files = make_segments(
            args.out / "data", s3, "bench", args.records, args.partitions,
            args.segment_records, flagged,
        )  # fmt: skip
        warm = make_segments(args.out / "warm", s3, "warmup", 2000, 2, 1000, flagged)
        print(f"made and uploaded {args.records} records in {time.perf_counter() - began:.1f}s")

        spark = job.start_spark(f"local[{args.cores}]")
        run_ingest(spark, endpoint, "warmup", args.out / "warm")
        run_json(spark, warm, args.out / "warm" / "json-parquet")

        ingest_s, ingest_rows = run_ingest(spark, endpoint, "bench", args.out / "ingest")
        json_s, json_rows = run_json(spark, files, args.out / "json-parquet")
        typed: dict[str, Any] = {}
        if args.typed:
            with registry(args.out) as registry_url:
                typed = run_typed(spark, endpoint, args, s3, registry_url)
        spark.stop()
    finally:
        moto.close()

    report = {
        "records": args.records,
        "cores": args.cores,
        "values": "flagged JSON" if flagged else "unflagged (validated per record)",
        "ingest": cell(ingest_s, ingest_rows, args.cores),
        "spark_read_json": cell(json_s, json_rows, args.cores),
        "ratio_ingest_over_json": round(json_s / ingest_s, 2),
        **typed,
    }
    (args.out / "ingest_bench.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
