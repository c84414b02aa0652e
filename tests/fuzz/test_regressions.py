"""Every fuzz target's seeds and every input a fuzzer found, replayed in process (no atheris
run needed): the invariants hold for each."""

from __future__ import annotations

import importlib

import pytest

from tests.fuzz.regressions import REGRESSIONS
from tests.fuzz.runner import TARGETS


@pytest.mark.parametrize("target", TARGETS)
def test_seeds_hold_the_invariants(target: str) -> None:
    module = importlib.import_module(f"tests.fuzz.{target}")
    for seed in module.seeds():
        module.one_input(seed)


@pytest.mark.parametrize(
    ("target", "data"),
    [
        pytest.param(
            target,
            data,
            id=f"{target}-{name}",
            # Strict: once the fault is fixed this passes, and fails until the issue is cleared.
            marks=[pytest.mark.xfail(reason=issue, strict=True)] if issue else [],
        )
        for target, name, data, issue in REGRESSIONS
    ],
)
def test_found_inputs_hold_the_invariants(target: str, data: bytes) -> None:
    importlib.import_module(f"tests.fuzz.{target}").one_input(data)
