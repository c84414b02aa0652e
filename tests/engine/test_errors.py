"""Engine errors cross a process boundary whole (a segment's upload runs in a shipper process):
each class, its message, its code and its own attributes come back as they were raised."""

from __future__ import annotations

import inspect
import pickle

from engine import errors
from engine.errors import CorruptRecord, EngineError, OffsetOutOfRange


def test_every_engine_error_is_rebuilt_from_its_pickle() -> None:
    classes = [
        c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, EngineError)
    ]
    assert len(classes) > 10
    for cls in classes:
        raised = cls.__new__(cls, "what happened")
        raised.args = ("what happened",)
        again = pickle.loads(pickle.dumps(raised))
        assert type(again) is cls and str(again) == "what happened" and again.code == cls.code


def test_an_errors_own_attributes_come_back() -> None:
    again = pickle.loads(pickle.dumps(CorruptRecord("CRC mismatch at byte 61", 4_000)))
    assert (str(again), again.offset) == ("CRC mismatch at byte 61", 4_000)
    out_of_range = OffsetOutOfRange(12, 3, 9)
    again = pickle.loads(pickle.dumps(out_of_range))
    assert again.__dict__ == out_of_range.__dict__ and str(again) == str(out_of_range)
