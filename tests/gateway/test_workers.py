"""--workers: the value it takes, and the data directories it refuses (tests/e2e/test_workers.py
runs the supervisor itself)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from engine.manager import TOPICS_DIR
from gateway import config
from gateway.cli.main import check_settings
from gateway.settings import Settings
from gateway.worker_dirs import INTERNAL_KEY, MARKER, ROOT, check_layout, shared_data_dir
from gateway.workers.supervisor import internal_key_file


def test_auto_is_the_usable_cpus_and_a_number_is_bounded() -> None:
    cpus = config.usable_cpus()
    assert config.worker_count("auto") == cpus
    assert config.worker_count(str(4 * cpus)) == 4 * cpus
    with pytest.raises(argparse.ArgumentTypeError, match=f"at most {4 * cpus}"):
        config.worker_count(str(4 * cpus + 1))
    with pytest.raises(argparse.ArgumentTypeError):
        config.worker_count("0")
    with pytest.raises(ValueError):
        config.worker_count("many")


def test_a_directory_keeps_its_number_of_workers(tmp_path: Path) -> None:
    check_layout(tmp_path, 1)  # a new directory takes any number
    check_layout(tmp_path, 3)
    (tmp_path / ROOT).mkdir()
    (tmp_path / ROOT / MARKER).write_text(json.dumps({"workers": 2}))
    check_layout(tmp_path, 2)
    for other in (1, 3):
        with pytest.raises(SystemExit, match=f"--workers 2, not --workers {other}"):
            check_layout(tmp_path, other)


def test_a_single_process_directory_is_not_taken_by_workers(tmp_path: Path) -> None:
    (tmp_path / TOPICS_DIR).mkdir()
    (tmp_path / TOPICS_DIR / "orders.json").write_text("{}")
    check_layout(tmp_path, 1)
    with pytest.raises(SystemExit, match=r"single process \(--workers 1\), not --workers 2"):
        check_layout(tmp_path, 2)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"cluster": ("http://e:2379",)}, "no --cluster or --advertise"),
        ({"advertise": "http://h:1"}, "no --cluster or --advertise"),
    ],
)
def test_what_workers_do_not_combine_with(changes: dict[str, object], message: str) -> None:
    settings = Settings(workers=2, **changes)  # type: ignore[arg-type]
    with pytest.raises(SystemExit, match=message):
        check_settings(settings)
    check_settings(Settings(workers=2, cluster=("http://e:2379",)), supervised=True)


def test_auth_is_for_workers_too_with_their_own_internal_key(tmp_path: Path) -> None:
    check_settings(Settings(workers=2, auth=True))
    settings = Settings(data_dir=tmp_path, workers=2, auth=True)
    root = tmp_path / ROOT
    root.mkdir()
    made = internal_key_file(settings, root)
    assert made == root / INTERNAL_KEY
    assert made.stat().st_mode & 0o777 == 0o600
    key = made.read_text()
    assert len(key.strip()) == 64
    made.chmod(0o644)
    assert internal_key_file(settings, root) == made  # kept, and private again
    assert made.read_text() == key and made.stat().st_mode & 0o777 == 0o600
    given = tmp_path / "given.key"
    given.write_text("short\n")
    with pytest.raises(SystemExit, match="at least 16 characters"):
        internal_key_file(Settings(workers=2, auth=True, internal_key_file=given), root)
    assert internal_key_file(Settings(workers=2), root) is None  # without --auth: none
    worker = Settings(data_dir=root / "worker-1", workers=2, cluster=("http://e:2379",))
    assert shared_data_dir(worker.data_dir) == tmp_path
