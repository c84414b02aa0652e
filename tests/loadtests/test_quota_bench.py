"""Quota enforcement measured against the configured rates on a real gateway (the goal:
within 10%), with `loadtests.quota_bench`'s greedy clients. The rates are low enough that any
machine can offer more than them: the figure is the gateway's, not the machine's."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests import quota_bench


def test_every_quota_holds_its_clients_to_its_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        quota_bench,
        "QUOTAS",
        {
            "produce_bytes_per_second": 1 << 20,
            "fetch_bytes_per_second": 1 << 20,
            "requests_per_second": 100.0,
        },
    )
    monkeypatch.setattr(quota_bench, "CELLS", tuple(
        (field, mode) for field in quota_bench.QUOTAS for mode in ("reject", "delay")))  # fmt: skip
    # A burst of half a second, then 1.5 s measured: within 1% of the rate on this machine.
    monkeypatch.setattr(quota_bench, "WINDOW_S", 0.5)
    doc = quota_bench.run(1, 1.5, tmp_path)
    figures = {(f["quota"], f["mode"]): f for f in doc["figures"]}
    assert set(figures) == set(quota_bench.CELLS)
    for (_, mode), figure in figures.items():
        assert 0.9 <= figure["ratio"] <= 1.1, figure
        assert (figure["refused"] > 0) == (mode == "reject"), figure  # delay mode: no 429
    assert "| requests_per_second | delay |" in quota_bench.markdown(doc)
