"""Checkpoint files: Kafka's text layout, atomic replacement, strict parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import checkpoint


def test_round_trip_and_layout(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    checkpoint.write_offsets(path, {("b", 1): 7, ("a", 0): 42})
    assert path.read_text() == "0\n2\na 0 42\nb 1 7\n"
    assert checkpoint.read_offsets(path) == {("a", 0): 42, ("b", 1): 7}
    assert not list(tmp_path.glob("*.tmp"))


def test_missing_file_is_empty(tmp_path: Path) -> None:
    assert checkpoint.read_offsets(tmp_path / "nothing") == {}


@pytest.mark.parametrize("text", ["", "1\n0\n", "0\n2\na 0 1\n", "0\n1\na 0\n", "0\n1\na x 1\n"])
def test_malformed_files_raise(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(checkpoint.CheckpointError):
        checkpoint.read_offsets(path)
