"""Real components for the ingest tests: one moto_server (S3) and one local Spark session.

Both live as long as this package's tests (package scope: the environment they need is
restored before other packages run). Nothing is skipped: without Java or pyspark the Spark
fixture fails. `--ingest-kills N` sets how many of the job's crash points the exactly-once
test tries on the default path (default 5, each state a rerun meets; 7, one of each kind: see
test_exactly_once.kill_points) and a sixth as many on the data-source path (at least 1,
halfway through a part file, where its writer differs; at most its 4), `--ingest-random-kills
N` how many kills at a random moment per write path (default 1), and `--ingest-seed S|random`
those moments (default 0). CI runs the defaults, a short run (each crash costs a fresh JVM
and the job up to its point, 5 to 20 s); longer runs raise them (docs/ingest.md:
`--ingest-kills 40 --ingest-random-kills 20 --ingest-seed random`).
"""

from __future__ import annotations

import itertools
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from pyspark.sql import SparkSession

from loadtests.common import MotoServer
from spark_ingest import job
from tests.spark_ingest.support import CREDENTIALS, SUBMIT_ARGS
from tests.spark_ingest.tiered import Partition

MOTO_SERVER = Path(sys.executable).with_name("moto_server")
# The first five crash points leave each state a rerun meets, the first seven are one of each
# kind (test_exactly_once.kill_points).
KILLS = 5
RANDOM_KILLS = 1
# The data-source path's crash points, mid-write first: halfway through a part file, after
# the summary, after a part file, halfway through a _SUCCESS marker.
DATA_SOURCE_POINTS = ("during:part", "summary", "after:part", "during:marker")
_buckets = itertools.count()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("sluice-ingest", "Sluice Spark ingest tests").addoption(
        "--ingest-kills",
        type=int,
        default=KILLS,
        help=f"crash points the exactly-once ingest test kills the job at (default {KILLS}; "
        "a sixth as many, at least 1, on the data-source path)",
    )
    parser.getgroup("sluice-ingest").addoption(
        "--ingest-random-kills",
        type=int,
        default=RANDOM_KILLS,
        help="kills at a random moment, per write path, in the exactly-once test "
        f"(default {RANDOM_KILLS})",
    )
    parser.getgroup("sluice-ingest").addoption(
        "--ingest-seed",
        default="0",
        help="the seed of those random moments: an integer, or 'random' (printed)",
    )


def ingest_kills(config: pytest.Config) -> int:
    """The option, or its default when pytest did not load this file at start-up."""
    try:
        return int(config.getoption("--ingest-kills"))
    except ValueError:
        return KILLS


@pytest.fixture(scope="package")
def aws_env() -> Iterator[dict[str, str]]:
    """Dummy credentials in the environment, for boto3 here and in Spark's workers, which
    also must run this interpreter (the JVM reads PYSPARK_PYTHON when it starts)."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in CREDENTIALS.items():
            mp.setenv(name, value)
        mp.setenv("PYSPARK_PYTHON", sys.executable)
        mp.setenv("PYSPARK_SUBMIT_ARGS", SUBMIT_ARGS)
        yield CREDENTIALS


@pytest.fixture(scope="package")
def moto(aws_env: dict[str, str]) -> Iterator[str]:
    """moto_server (the S3 endpoint of the tests) on a free port; its URL."""
    server = MotoServer()
    yield server.url
    server.close()


@pytest.fixture(scope="package")
def s3(moto: str) -> Any:
    return boto3.client("s3", endpoint_url=moto)


@pytest.fixture
def bucket(s3: Any) -> str:
    """A fresh bucket per test."""
    name = f"tier-{next(_buckets)}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="package")
def spark(aws_env: dict[str, str]) -> Iterator[SparkSession]:
    """One local Spark for all the tests: two cores, no UI, few shuffle partitions."""
    session = (
        SparkSession.builder.master("local[2]")
        .appName("sluice-ingest-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    job.register(session)
    yield session
    session.stop()


@pytest.fixture
def partitions(tmp_path: Path, s3: Any, bucket: str) -> Iterator[Any]:
    """A factory of engine-backed partitions uploading to this test's bucket (prefix `tier`)."""
    made: list[Partition] = []

    def make(topic: str, partition: int = 0, prefix: str = "tier", **configs: object) -> Partition:
        """Topic configs by their Kafka names with '_' for '.' (message_timestamp_type=...)."""
        overrides = {name.replace("_", "."): value for name, value in configs.items()}
        p = Partition(tmp_path / "logs", s3, bucket, prefix, topic, partition, overrides)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


_RANDOM_SEED = random.randrange(2**32)


def ingest_seed(config: pytest.Config) -> int:
    """`--ingest-seed`: the given integer, or one drawn for this session ('random')."""
    try:
        chosen = str(config.getoption("--ingest-seed"))
    except ValueError:
        return 0
    if chosen == "random":
        print(f"--ingest-seed {_RANDOM_SEED}")
        return _RANDOM_SEED
    return int(chosen)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "kill_index" in metafunc.fixturenames:
        metafunc.parametrize("kill_index", range(ingest_kills(metafunc.config)))
    if "data_source_point" in metafunc.fixturenames:
        count = max(1, min(len(DATA_SOURCE_POINTS), ingest_kills(metafunc.config) // 6))
        metafunc.parametrize("data_source_point", DATA_SOURCE_POINTS[:count])
    if "random_kill" in metafunc.fixturenames:
        try:
            count = int(metafunc.config.getoption("--ingest-random-kills"))
        except ValueError:
            count = RANDOM_KILLS
        metafunc.parametrize("random_kill", range(count))
