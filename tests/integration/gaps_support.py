"""Helpers of the retention-gap tests: one-partition input whose offsets are known,
the expected sink from the brute-force reference, DeleteRecords, sink reading.

The operator is tumbling 1 s windows of Count + Sum("x"), the fault apps' one
(``tests/fault/apps.py``); the expectation never runs the engine.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin.records_to_delete import RecordsToDelete

from streamremat.runtime.kafka import ProducerRecord, admin_client, consume_all
from tests.unit.reference import RefWindow, run_reference

WINDOW = RefWindow("tumbling", size=1_000)

#: (key bytes, start_ms, end_ms, canonical JSON of the value)
Result = tuple[bytes, int, int, str]


def make_records(n: int, base_ms: int, seed: int, keys: int = 7) -> list[ProducerRecord]:
    """``n`` records for partition 0, 10 ms of event time apart with some disorder
    (so some are late), values ``{"x": int}``. Offset i is record i."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ts = base_ms + i * 10 - rng.randint(0, 30)
        value = json.dumps({"x": rng.randint(-20, 50)}).encode()
        out.append(ProducerRecord(b"k%d" % rng.randrange(keys), value, ts, 0))
    return out


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _result(items: list[int]) -> dict[str, int]:
    return {"n": len(items), "total": sum(items)}


def reference_emissions(records: Sequence[ProducerRecord]) -> list[Result]:
    """What one task emits for ``records`` in this order, from the reference."""
    ref = [(r.key or b"", r.timestamp_ms or 0, json.loads(r.value or b"")["x"]) for r in records]
    return [(k, s, e, _canon(v)) for k, s, e, v in run_reference(WINDOW, ref, _result).emissions]


def emitted_after(records: Sequence[ProducerRecord], done: int) -> Counter[Result]:
    """Emissions of a task fed ``records`` once the first ``done`` of them are behind
    it (a replay of those emits nothing): the reference's list is in emission order."""
    before = len(reference_emissions(records[:done]))
    return Counter(reference_emissions(records)[before:])


async def read_sink(bootstrap: str, sink: str) -> Counter[Result]:
    out: Counter[Result] = Counter()
    for r in await consume_all(bootstrap, sink, isolation_level="read_committed", timeout_s=60):
        v = json.loads(r.value or b"null")
        out[(r.key or b"", v["start_ms"], v["end_ms"], _canon(v["value"]))] += 1
    return out


async def delete_records(bootstrap: str, topic: str, before: int, partition: int = 0) -> None:
    """Admin DeleteRecords: the partition's log start becomes ``before``."""
    async with admin_client(bootstrap) as admin:
        await admin.delete_records({TopicPartition(topic, partition): RecordsToDelete(before)})


async def committed(bootstrap: str, group: str, topic: str, partition: int = 0) -> int | None:
    async with admin_client(bootstrap) as admin:
        found = await admin.list_consumer_group_offsets(group)
    om = found.get(TopicPartition(topic, partition))
    return None if om is None or om.offset < 0 else int(om.offset)
