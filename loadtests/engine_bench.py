"""Storage-engine benchmark: append, read, large-log and recovery figures for one partition log.

Run `python -m loadtests.engine_bench [--json] [--quick] [--dir DIR] [--large-gb N]`. Everything
runs in this process on one thread (no HTTP): it measures the engine, not the gateway.
MB = 10**6 bytes, GB = 10**9 bytes. Small figures are the best of `reps` runs; every run is kept
under `details`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import itertools
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from engine import batch as fmt
from engine.config import TopicConfig
from engine.log import PartitionLog

MB = 10**6
GB = 10**9
MIB = 2**20
GIB = 2**30
EPOCH = 0

# figure -> minimum acceptable value (one core)
TARGETS = {
    "encode_append_records_per_s": 1_000_000,
    "append_vs_raw_ratio": 0.5,
    "read_records_per_s": 3_000_000,
    "large_vs_small_ratio": 0.9,
}


@dataclasses.dataclass(frozen=True)
class Params:
    """Volumes and shapes of one run."""

    quick: bool
    encode_batches: int  # batches encoded and appended per run
    append_bytes: int  # bytes appended (and raw-written) per run
    read_bytes: int  # size of the log read by the read figures
    iter_read_bytes: int  # prefix of that log decoded through `iter_records`
    large_bytes: int  # the large log is filled to at least this size
    segment_bytes: int
    pool_batches: int  # distinct pre-encoded batches, appended round-robin
    warmup_batches: int
    roll_batches: int  # one-record batches in the segment each timed roll closes
    records_per_batch: int = 1000
    value_bytes: int = 100
    read_max_bytes: int = MIB
    reps: int = 3


FULL = Params(
    quick=False,
    encode_batches=4000,
    append_bytes=2 * GIB,
    read_bytes=768 * MIB,
    iter_read_bytes=128 * MIB,
    large_bytes=2 * GB,
    segment_bytes=GIB,
    pool_batches=256,
    warmup_batches=50,
    roll_batches=800_000,
)
QUICK = Params(
    quick=True,
    encode_batches=100,
    append_bytes=32 * MIB,
    read_bytes=16 * MIB,
    iter_read_bytes=4 * MIB,
    large_bytes=GB // 20,
    segment_bytes=16 * MIB,
    pool_batches=16,
    warmup_batches=5,
    roll_batches=2_000,
)


class BenchError(RuntimeError):
    """The engine returned something other than what the benchmark wrote."""


class Sample(NamedTuple):
    """One timed run: work done (records or bytes), wall-clock seconds, this process's CPU."""

    amount: int
    seconds: float
    cpu_seconds: float

    @property
    def rate(self) -> float:
        return self.amount / self.seconds

    @property
    def cpu_rate(self) -> float:
        return self.amount / self.cpu_seconds


class Stopwatch:
    """Wall clock (perf_counter) and process CPU time from construction to `sample`."""

    def __init__(self) -> None:
        self.cpu = time.process_time()
        self.wall = time.perf_counter()

    def sample(self, amount: int) -> Sample:
        wall = time.perf_counter() - self.wall
        return Sample(amount, wall, time.process_time() - self.cpu)


def best(samples: Sequence[Sample]) -> Sample:
    return max(samples, key=lambda s: s.rate)


def best_cpu(samples: Sequence[Sample]) -> float:
    """The best rate per CPU-second of this process."""
    return max(s.cpu_rate for s in samples)


def summary(samples: Sequence[Sample], scale: float = 1.0) -> dict[str, Any]:
    """Per-run rates (divided by `scale`) and their median, seconds, CPU share and amount."""
    return {
        "runs": [round(s.rate / scale, 1) for s in samples],
        "median": round(statistics.median(s.rate for s in samples) / scale, 1),
        "seconds": [round(s.seconds, 3) for s in samples],
        "cpu_share": [round(s.cpu_seconds / s.seconds, 2) for s in samples],
        "amount_per_run": samples[0].amount,
    }


# -- workload ------------------------------------------------------------------------------------


def make_records(params: Params) -> list[fmt.RecordInput]:
    """One batch worth of records: no key, no headers, a random `value_bytes` value each."""
    return [
        fmt.RecordInput(None, os.urandom(params.value_bytes))
        for _ in range(params.records_per_batch)
    ]


def now_ms() -> int:
    return int(time.time() * 1000)


# -- timed loops -----------------------------------------------------------------------------------


def encode_append(log: PartitionLog, records: list[fmt.RecordInput], batches: int) -> Sample:
    """Encode `batches` batches with the C builder and append each as leader."""
    encode = fmt.encode_batch
    append = log.append_as_leader
    watch = Stopwatch()
    for _ in range(batches):
        append(encode(records, default_timestamp=now_ms()), EPOCH)
    return watch.sample(batches * len(records))


def append_encoded(log: PartitionLog, pool: list[bytearray], count: int) -> Sample:
    """Append `count` pre-encoded batches, cycling through `pool` (re-stamped in place)."""
    append = log.append_as_leader
    chunks = list(itertools.islice(itertools.cycle(pool), count))
    watch = Stopwatch()
    for chunk in chunks:
        append(chunk, EPOCH)
    return watch.sample(sum(map(len, chunks)))


def raw_write(path: Path, pool: list[bytearray], count: int) -> Sample:
    """The physical limit: `os.write` the same chunks to an O_APPEND file, as a segment does."""
    chunks = list(itertools.islice(itertools.cycle(pool), count))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        write = os.write
        written = 0
        watch = Stopwatch()
        for chunk in chunks:
            written += write(fd, chunk)
        sample = watch.sample(written)
    finally:
        os.close(fd)
    if written != sum(map(len, chunks)):
        raise BenchError(f"short raw write: {written} bytes")
    return sample


Decoder = Callable[[memoryview], tuple[int, Any]]


def decode_batches(data: memoryview) -> tuple[int, Any]:
    """Walk whole batches with the C codec, touching each record's offset and value.

    Returns the last record's (offset, value) so the caller can check what it read.
    """
    offset, value = -1, None
    pos = 0
    end = len(data)
    while pos < end:
        stop = pos + fmt.read_header(data, pos).size
        for record in fmt.batch_records(data[pos:stop]):
            offset, value = record.offset, record.value
        pos = stop
    return offset, value


def decode_iter_records(data: memoryview) -> tuple[int, Any]:
    """Like `decode_batches`, through the engine's generic `iter_records` (full Record tuples)."""
    offset, value = -1, None
    for record in fmt.iter_records(data):
        offset, value = record.offset, record.value
    return offset, value


def read_log(
    log: PartitionLog, decode: Decoder, max_bytes: int, value_bytes: int, end: int
) -> Sample:
    """Fetch by offset from the log start to `end` (a batch boundary), decoding every record."""
    read = log.read
    first = offset = log.log_start_offset
    watch = Stopwatch()
    while offset < end:
        last, value = decode(read(offset, max_bytes, end).data)
        if last < offset or len(value) != value_bytes:
            raise BenchError(f"read at offset {offset} ended at offset {last}, value {value!r:.40}")
        offset = last + 1
    sample = watch.sample(end - first)
    if offset != end:
        raise BenchError(f"read ended at offset {offset}, expected {end}")
    return sample


# -- helpers ---------------------------------------------------------------------------------------


def drop_page_cache(directory: Path) -> None:
    """fsync every file in `directory`, then ask the kernel to evict it from the page cache."""
    for path in directory.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class CpuClock(NamedTuple):
    """Since boot: CPU seconds busy on all cores, stolen by the hypervisor, and ours."""

    busy: float
    steal: float
    own: float
    wall: float

    @classmethod
    def now(cls) -> CpuClock:
        with open("/proc/stat") as f:
            user, nice, system, _idle, _iowait, irq, softirq, steal = map(
                int, f.readline().split()[1:9]
            )
        tick = os.sysconf("SC_CLK_TCK")
        times = os.times()
        return cls(
            (user + nice + system + irq + softirq) / tick,
            steal / tick,
            times.user + times.system,
            time.monotonic(),
        )

    def since(self, start: CpuClock) -> dict[str, float]:
        """Mean cores busy with work other than this process (kernel writeback included), and
        mean cores stolen by the hypervisor, between `start` and this reading."""
        wall = self.wall - start.wall
        other = (self.busy - start.busy) - (self.own - start.own)
        return {
            "other_load_cores": round(max(other, 0.0) / wall, 2),
            "steal_cores": round((self.steal - start.steal) / wall, 2),
        }


def machine_info() -> dict[str, Any]:
    """CPU model, cores, memory, kernel, page-cache writeback ratios and the load average."""
    model = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    vm = Path("/proc/sys/vm")
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 2**20, 1),
        "kernel": platform.release(),
        "vm_dirty_background_ratio": int((vm / "dirty_background_ratio").read_text()),
        "vm_dirty_ratio": int((vm / "dirty_ratio").read_text()),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


# -- the run ---------------------------------------------------------------------------------------


class Bench:
    """Holds the workload and the scratch directory; one method per group of figures."""

    def __init__(self, root: Path, params: Params) -> None:
        self.root = root
        self.params = params
        self.config = TopicConfig().with_overrides({"segment.bytes": params.segment_bytes})
        self.records = make_records(params)
        self.pool = [
            fmt.encode_batch(make_records(params), default_timestamp=now_ms())
            for _ in range(params.pool_batches)
        ]
        self.batch_bytes = len(self.pool[0])
        self._logs = 0

    def new_log(self, name: str) -> PartitionLog:
        self._logs += 1
        topic = f"{name}{self._logs}"
        return PartitionLog(self.root / f"{topic}-0", topic, 0, self.config)

    def batches_for(self, size: int) -> int:
        return -(-size // self.batch_bytes)

    def alternate(self, first: Callable[[], None], second: Callable[[], None]) -> None:
        """Run the pair `reps` times, swapping which goes first, so drift hits both alike."""
        for rep in range(self.params.reps):
            for step in (first, second) if rep % 2 == 0 else (second, first):
                step()

    def append_vs_raw(self) -> tuple[list[Sample], list[Sample]]:
        """Pre-encoded appends and raw writes of the same chunks, alternated."""
        p = self.params
        count = self.batches_for(p.append_bytes)
        appends: list[Sample] = []
        raws: list[Sample] = []
        raw_path = self.root / "raw-write.bin"

        def append_run() -> None:
            log = self.new_log("append")
            append_encoded(log, self.pool, p.warmup_batches)
            appends.append(append_encoded(log, self.pool, count))
            log.delete()

        def raw_run() -> None:
            raw_write(raw_path, self.pool, p.warmup_batches)
            raws.append(raw_write(raw_path, self.pool, count))
            raw_path.unlink()

        raw_write(raw_path, self.pool, count)  # untimed: a VM may back memory on first touch
        raw_path.unlink()
        self.alternate(append_run, raw_run)
        return appends, raws

    def reads(self) -> dict[str, list[Sample]]:
        """Hot (page cache) and cold reads via the C codec, alternated; then via `iter_records`."""
        p = self.params
        log = self.new_log("read")
        append_encoded(log, self.pool, self.batches_for(p.read_bytes))
        log.advance_high_watermark(log.log_end_offset)
        end = log.high_watermark
        iter_end = self.batches_for(p.iter_read_bytes) * p.records_per_batch

        def measure(decode: Decoder, upto: int) -> Sample:
            return read_log(log, decode, p.read_max_bytes, p.value_bytes, upto)

        warmup_end = p.warmup_batches * p.records_per_batch
        measure(decode_batches, warmup_end)
        measure(decode_iter_records, warmup_end)
        hot: list[Sample] = []
        cold: list[Sample] = []

        def cold_run() -> None:
            drop_page_cache(log.directory)
            cold.append(measure(decode_batches, end))

        self.alternate(lambda: hot.append(measure(decode_batches, end)), cold_run)
        via_iter = [measure(decode_iter_records, iter_end) for _ in range(p.reps)]
        log.delete()
        return {"hot": hot, "iter_records": via_iter, "cold": cold}

    def encode_appends(self) -> tuple[list[Sample], list[Sample], PartitionLog, dict[str, Any]]:
        """Encode + append on a fresh log and on one filled past `large_bytes`, alternated.

        Each small run gets a fresh log, deleted unsynced after. The large log is filled with
        pre-encoded appends and fsynced before any timing; it is returned closed.
        """
        p = self.params
        large = self.new_log("large")
        fill_start = time.perf_counter()
        append_encoded(large, self.pool, self.batches_for(p.large_bytes))
        info: dict[str, Any] = {"fill_seconds": round(time.perf_counter() - fill_start, 3)}
        large.flush()
        info.update(fill_bytes=large.size_bytes, segments_before=len(large.segments))
        small_samples: list[Sample] = []
        large_samples: list[Sample] = []

        def small_run() -> None:
            log = self.new_log("encode")
            encode_append(log, self.records, p.warmup_batches)
            small_samples.append(encode_append(log, self.records, p.encode_batches))
            log.delete()

        def large_run() -> None:
            encode_append(large, self.records, p.warmup_batches)
            large_samples.append(encode_append(large, self.records, p.encode_batches))

        self.alternate(small_run, large_run)
        info.update(bytes_after=large.size_bytes, segments_after=len(large.segments))
        large.close()
        return small_samples, large_samples, large, info

    def rolls(self) -> list[Sample]:
        """Roll a segment of `roll_batches` one-record batches (a one-record produce's shape,
        the most index entries for its bytes), `reps` times: the event loop runs a roll in line
        with the append that fills the segment, so its length is a loop stall."""
        p = self.params
        log = self.new_log("roll")
        single = fmt.encode_batch(self.records[:1], default_timestamp=now_ms())
        samples = []
        for _ in range(p.reps):
            append_encoded(log, [single], p.roll_batches)
            watch = Stopwatch()
            log.roll()
            samples.append(watch.sample(1))
        log.delete()
        return samples

    def recovery(self, closed: PartitionLog) -> tuple[list[Sample], list[Sample]]:
        """Reopen a closed log uncleanly (CRC-check everything), hot and then cold."""
        directory, topic, size = closed.directory, closed.topic, closed.size_bytes

        def recover(cold: bool) -> Sample:
            if cold:
                drop_page_cache(directory)
            watch = Stopwatch()
            log = PartitionLog(
                directory, topic, 0, self.config, recovery_point=0, trust_files=False
            )
            sample = watch.sample(size)
            report = log.recovery
            log.close()
            if log.log_end_offset != closed.log_end_offset or report.errors:
                raise BenchError(f"recovery changed the log: {report}")
            if report.segments_scanned != len(closed.segments) or report.truncated_bytes:
                raise BenchError(f"recovery did not scan the log as expected: {report}")
            return sample

        hot = [recover(cold=False) for _ in range(self.params.reps)]
        cold = [recover(cold=True) for _ in range(self.params.reps)]
        shutil.rmtree(directory)
        return hot, cold


def run(params: Params, directory: Path | None) -> dict[str, Any]:
    """Run every figure in a fresh scratch directory (removed afterwards); return the report."""
    started = time.perf_counter()
    machine = machine_info()
    clock = CpuClock.now()
    root = Path(tempfile.mkdtemp(prefix="sluice-bench-", dir=directory))
    try:
        bench = Bench(root, params)
        appends, raws = bench.append_vs_raw()
        reads = bench.reads()
        encode, large, large_log, large_info = bench.encode_appends()
        recovery_hot, recovery_cold = bench.recovery(large_log)
        rolls = bench.rolls()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    machine["during_run"] = CpuClock.now().since(clock)

    small_rate = best(encode).rate
    large_rate = best(large).rate
    append_rate = best(appends).rate
    raw_rate = best(raws).rate
    hot_gb_seconds = min(s.seconds / (s.amount / GB) for s in recovery_hot)
    cold_gb_seconds = min(s.seconds / (s.amount / GB) for s in recovery_cold)
    figures: dict[str, float] = {
        "encode_append_records_per_s": round(small_rate),
        "append_encoded_mb_per_s": round(append_rate / MB, 1),
        "raw_write_mb_per_s": round(raw_rate / MB, 1),
        "append_vs_raw_ratio": round(append_rate / raw_rate, 3),
        "read_records_per_s": round(best(reads["hot"]).rate),
        "read_iter_records_records_per_s": round(best(reads["iter_records"]).rate),
        "read_cold_records_per_s": round(best(reads["cold"]).rate),
        "large_log_encode_append_records_per_s": round(large_rate),
        "large_vs_small_ratio": round(large_rate / small_rate, 3),
        "recovery_s_per_gb": round(hot_gb_seconds, 3),
        "recovery_cold_s_per_gb": round(cold_gb_seconds, 3),
        "segment_roll_ms": round(max(s.seconds for s in rolls) * 1000, 3),
    }
    record_bytes = params.records_per_batch * params.value_bytes
    return {
        **figures,
        "targets": {  # a quick run's volumes are too small to judge: "met" is null
            name: {"min": target, "met": None if params.quick else figures[name] >= target}
            for name, target in TARGETS.items()
        },
        "per_cpu_second": {
            "encode_append_records": round(best_cpu(encode)),
            "append_encoded_mb": round(best_cpu(appends) / MB, 1),
            "raw_write_mb": round(best_cpu(raws) / MB, 1),
            "append_vs_raw_ratio": round(best_cpu(appends) / best_cpu(raws), 3),
            "read_records": round(best_cpu(reads["hot"])),
            "large_log_encode_append_records": round(best_cpu(large)),
            "large_vs_small_ratio": round(best_cpu(large) / best_cpu(encode), 3),
        },
        "quick": params.quick,
        "workload": {
            "records_per_batch": params.records_per_batch,
            "value_bytes": params.value_bytes,
            "key": None,
            "headers": 0,
            "compression": "none",
            "timestamps": "CreateTime, one default timestamp per batch",
            "batch_bytes": bench.batch_bytes,
            "overhead_vs_values": round(bench.batch_bytes / record_bytes - 1, 3),
            "batches_per_append": 1,
        },
        "params": {
            **dataclasses.asdict(params),
            "topic_config": {"segment.bytes": params.segment_bytes},
            "leader_epoch": EPOCH,
        },
        "details": {
            "encode_append": summary(encode),
            "append_encoded_mb_per_s": summary(appends, MB),
            "raw_write_mb_per_s": summary(raws, MB),
            "read_hot": summary(reads["hot"]),
            "read_iter_records": summary(reads["iter_records"]),
            "read_cold": summary(reads["cold"]),
            "large_log": {**large_info, **summary(large)},
            "recovery_hot_bytes_per_s": summary(recovery_hot),
            "recovery_cold_bytes_per_s": summary(recovery_cold),
            "segment_roll": {
                "ms": [round(s.seconds * 1000, 3) for s in rolls],
                "cpu_ms": [round(s.cpu_seconds * 1000, 3) for s in rolls],
                "batches_per_segment": params.roll_batches,
            },
        },
        "notes": notes(params),
        "machine": machine,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "run_seconds": round(time.perf_counter() - started, 1),
    }


def notes(params: Params) -> list[str]:
    found = [
        f"Each figure is the best of {params.reps} runs (all runs and their median under "
        "details), after a warm-up; one thread, timed with time.perf_counter. Figures that are "
        "compared (append vs raw write, small vs large log, hot vs cold reads) alternate their "
        "runs so drift hits both alike. The "
        "machine may be shared: machine.during_run gives the mean cores busy with other work "
        "(kernel writeback included) and stolen by the hypervisor; details.*.cpu_share is this "
        "process's CPU time over wall time per run (well below 1 on a CPU-bound figure means it "
        "was descheduled and the figure is deflated). per_cpu_second restates the CPU-bound "
        "figures per CPU-second of this process (best run each): steadier under other load, but "
        "blind to I/O waits and to kernel work done outside the process (writeback).",
        "Encode + append: the RecordInput list is built once, outside the timed region (the HTTP "
        "layer's parsing is not measured); each batch is encoded by aiokafka's C builder and "
        "appended with append_as_leader (CRC check, offset/epoch stamping, one os.write).",
        "Pre-encoded appends reuse a pool of distinct batches round-robin, re-stamped in place: "
        "the base offset and leader epoch lie outside the CRC and are overwritten on every "
        "append, so each append validates and writes exactly the bytes a fresh copy would. "
        "Raw writes os.write the same chunks, in the same order, to a file in the same directory. "
        "One untimed raw write of the same volume comes first (a fresh VM may back guest memory "
        "on first touch; the first pass over the page cache was slower here).",
        "Throwaway logs and the raw file are deleted without fsync, so neither side pays for "
        "writeback (a run's volume should stay under vm.dirty_background_ratio of RAM, or "
        "background writeback overlaps it); the large log is filled with pre-encoded appends "
        "and fsynced before any timed append (its later appends stay unsynced, like the small "
        "logs').",
        "read_records_per_s: hot reads, served from the OS page cache (the log was just written "
        "and is far smaller than RAM) - by design, the page cache is the cache. Every batch is "
        "CRC-checked by the log; every record's offset and value are touched via the C codec. "
        "read_cold_records_per_s repeats it after fsync + POSIX_FADV_DONTNEED, alternating with "
        "the hot runs (on a VM the host may still cache the disk; kernel readahead overlaps the "
        "disk with decoding). read_iter_records_records_per_s decodes through "
        "engine.batch.iter_records (one Record tuple per record) over a prefix of the log.",
        "Recovery opens the closed large log with trust_files=False, recovery_point=0 (CRC-check "
        "every batch, rebuild both indexes); recovery_s_per_gb is hot (page cache, as after a "
        "process crash), recovery_cold_s_per_gb after dropping the files from the page cache.",
        "segment_roll_ms: the longest of the runs' `roll()` of a segment of roll_batches "
        "one-record batches (pending index entries written, the indexes released, the next "
        "segment's file created); the gateway runs a roll on its event loop.",
        "MB = 10**6 bytes, GB = 10**9 bytes.",
    ]
    if params.quick:
        found.append(
            "QUICK RUN: tiny volumes and 16 MiB segments; a smoke test, not figures (targets are "
            "not judged)."
        )
    return found


# -- command line ----------------------------------------------------------------------------------


def render(report: dict[str, Any]) -> str:
    """A readable table of the headline figures, targets and notes."""
    rows = [  # label, key, unit, key under per_cpu_second
        ("encode + append", "encode_append_records_per_s", "records/s", "encode_append_records"),
        ("pre-encoded append", "append_encoded_mb_per_s", "MB/s", "append_encoded_mb"),
        ("raw os.write", "raw_write_mb_per_s", "MB/s", "raw_write_mb"),
        ("append / raw", "append_vs_raw_ratio", "", "append_vs_raw_ratio"),
        ("read (hot, C codec)", "read_records_per_s", "records/s", "read_records"),
        ("read (hot, iter_records)", "read_iter_records_records_per_s", "records/s", ""),
        ("read (cold)", "read_cold_records_per_s", "records/s", ""),
        (
            "encode + append, large log",
            "large_log_encode_append_records_per_s",
            "records/s",
            "large_log_encode_append_records",
        ),
        ("large / small", "large_vs_small_ratio", "", "large_vs_small_ratio"),
        ("recovery (hot)", "recovery_s_per_gb", "s/GB", ""),
        ("recovery (cold)", "recovery_cold_s_per_gb", "s/GB", ""),
        ("segment roll (longest)", "segment_roll_ms", "ms", ""),
    ]
    targets = report["targets"]
    per_cpu = report["per_cpu_second"]
    machine = report["machine"]
    lines = [
        f"Sluice engine benchmark{' (QUICK)' if report['quick'] else ''} - {report['date']}",
        f"{machine['cpu']}, {machine['cores']} cores, {report['python']}; during the run: "
        f"{machine['during_run']['other_load_cores']} cores busy with other work, "
        f"{machine['during_run']['steal_cores']} stolen",
        "",
        f"{'figure':<28} {'value':>14}  {'unit':<10} {'per CPU-s':>14}  target",
    ]
    for label, key, unit, cpu_key in rows:
        target = ""
        if key in targets:
            met = targets[key]["met"]
            status = "not judged" if met is None else "ok" if met else "MISSED"
            target = f">= {targets[key]['min']:,} {status}"
        cpu = f"{per_cpu[cpu_key]:,}" if cpu_key else ""
        lines.append(f"{label:<28} {report[key]:>14,}  {unit:<10} {cpu:>14}  {target}")
    large = report["details"]["large_log"]
    lines += [
        "",
        f"large log: {large['bytes_after'] / GB:.2f} GB in {large['segments_after']} segments;"
        f" run took {report['run_seconds']} s",
        "",
        *(f"- {note}" for note in report["notes"]),
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m loadtests.engine_bench", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="tiny volumes, for CI smoke tests")
    parser.add_argument(
        "--dir", type=Path, help="where to make the scratch directory (default: the temp dir)"
    )
    parser.add_argument(
        "--large-gb", type=float, help="size of the large log in GB (default 2.0; quick 0.05)"
    )
    args = parser.parse_args(argv)
    params = QUICK if args.quick else FULL
    if args.large_gb is not None:
        params = dataclasses.replace(params, large_bytes=int(args.large_gb * GB))
    report = run(params, args.dir)
    print(json.dumps(report, indent=2) if args.json else render(report))


if __name__ == "__main__":
    main()
