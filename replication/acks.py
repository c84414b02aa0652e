"""A produce's acks (Kafka's producer `acks`): when the leader answers. Parsed once where a
request enters (`Acks.parse`, which takes Kafka's `-1` for `all`), then passed as this type
down to the append and to another node's internal append route (`Acks.value`)."""

from __future__ import annotations

import enum


class Acks(enum.Enum):
    NONE = "0"  # answered before the append is known to have happened
    LEADER = "1"  # answered once the leader appended
    ALL = "all"  # answered once every in-sync replica has the records (min.insync.replicas)

    @classmethod
    def parse(cls, text: str) -> Acks:
        """`0`, `1`, `all` or `-1` (Kafka's spelling of all); ValueError for anything else."""
        acks = BY_SPELLING.get(text)
        if acks is None:
            raise ValueError(f"acks must be one of {', '.join(BY_SPELLING)}, got {text!r}")
        return acks


BY_SPELLING = {"0": Acks.NONE, "1": Acks.LEADER, "all": Acks.ALL, "-1": Acks.ALL}
