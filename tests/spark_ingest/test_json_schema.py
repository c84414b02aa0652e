"""`--json-schema`: JSON values expanded into columns, the source's columns kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from spark_ingest import job
from spark_ingest.errors import IngestError
from tests.spark_ingest.support import options, read_output
from tests.spark_ingest.tiered import T0

FIXED = ["partition", "offset", "timestamp", "key", "value", "value_bytes", "headers"]


def load(partitions: Any) -> None:
    p = partitions("orders", 0)
    p.append(
        [
            (b"a", b'{"id": 1, "name": "ann", "tags": ["x"], "offset": 99}', [], T0),
            (b"b", b'{"id": 2, "name": "bob"}', [], T0 + 1),
            (b"c", b"\xff\x00 not json", [], T0 + 2),
            (b"d", b"[1, 2]", [], T0 + 3),
        ]
    )
    p.upload()


def test_infer_expands_every_field(
    spark: SparkSession, moto: str, bucket: str, partitions: Any, tmp_path: Path
) -> None:
    load(partitions)
    job.run(options(moto, bucket, tmp_path, ("orders",), json_schema="infer"), spark)
    files = sorted((tmp_path / "out").rglob("*.parquet"))
    schema = pa.parquet.read_schema(files[0])
    # Inferred fields come sorted; "offset" collides with the source's column.
    assert schema.names == [*FIXED, "id", "name", "json_offset", "tags"]
    assert schema.field("id").type == pa.int64()
    rows = sorted(read_output(tmp_path / "out"), key=lambda r: r["offset"])
    assert [(r["id"], r["name"], r["tags"], r["json_offset"]) for r in rows] == [
        (1, "ann", ["x"], 99),
        (2, "bob", None, None),
        (None, None, None, None),
        (None, None, None, None),
    ]
    assert rows[2]["value_bytes"] == b"\xff\x00 not json"
    checkpoint = json.loads((tmp_path / "ckpt" / "offsets.json").read_text())
    assert checkpoint["pending"] is None


@pytest.mark.parametrize(
    "text",
    [
        "id BIGINT, name STRING",
        json.dumps(
            {
                "type": "struct",
                "fields": [
                    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
                    {"name": "name", "type": "string", "nullable": True, "metadata": {}},
                ],
            }
        ),
    ],
    ids=["ddl", "spark-json"],
)
def test_schema_file_picks_the_fields(
    spark: SparkSession, moto: str, bucket: str, partitions: Any, tmp_path: Path, text: str
) -> None:
    load(partitions)
    schema_file = tmp_path / "schema.txt"
    schema_file.write_text(text)
    opts = options(moto, bucket, tmp_path, ("orders",), json_schema=str(schema_file))
    job.run(opts, spark)
    rows = sorted(read_output(tmp_path / "out"), key=lambda r: r["offset"])
    expected = [(1, "ann"), (2, "bob"), (None, None), (None, None)]
    assert [(r["id"], r["name"]) for r in rows] == expected
    assert [k for k in rows[0] if k not in ("topic", "dt", "hr", "file")] == [
        *FIXED,
        "id",
        "name",
    ]


def test_bad_schema_file_is_a_clear_error(
    spark: SparkSession, moto: str, bucket: str, partitions: Any, tmp_path: Path
) -> None:
    load(partitions)
    schema_file = tmp_path / "schema.txt"
    schema_file.write_text("id BIGINT,, what")
    opts = options(moto, bucket, tmp_path, ("orders",), json_schema=str(schema_file))
    with pytest.raises(IngestError, match="not a schema"):
        job.run(opts, spark)
