"""The ceiling of bench/peers.py: plain aiokafka consumption plus the job in a dict.

Reads the topic from the beginning to its end offsets (no group, no state
durability, no outputs), decodes each JSON value and keeps count and sum of
``amount`` per key and 60 s tumbling window, closing windows by the partition's
stream time exactly as DESIGN.md section 4 says (grace 0). Prints one JSON line:
``{"events": N, "seconds": S, "windows": [[key, start_ms, count, sum], ...]}``
(``windows`` only with ``--windows``: the reference results of the cross-check).

``--group-by FIELD --grace-ms G`` (the re-keyed job): per that value field instead
of the key, grace G; the reference windows are then computed per field over all
records in event-time order (one stream time, as one task per key would see it
without skew between source partitions).

Usage: python raw_job.py BOOTSTRAP TOPIC [--windows] [--group-by FIELD --grace-ms G]
"""

from __future__ import annotations

import asyncio
import bisect
import json
import sys
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

SIZE_MS = 60_000


async def run(bootstrap: str, topic: str, field: str | None = None,
              grace_ms: int = 0, reference: bool = False) -> dict[str, Any]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest", isolation_level="read_committed",
        fetch_max_bytes=16 * 1024 * 1024, max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    await consumer.start()
    try:
        cluster = await consumer._client.fetch_all_metadata()
        parts = sorted(cluster.partitions_for_topic(topic) or [])
        tps = [TopicPartition(topic, p) for p in parts]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        remaining = {tp for tp in tps if ends[tp] > 0}
        # per partition: window start -> key -> [count, sum]; starts kept sorted
        open_: dict[TopicPartition, dict[int, dict[bytes, list[int]]]] = {tp: {} for tp in tps}
        starts: dict[TopicPartition, list[int]] = {tp: [] for tp in tps}
        stream_time = {tp: -1 for tp in tps}
        closed: list[list[Any]] = []
        events = 0
        loads = json.loads
        seen: list[tuple[int, str, int]] = []  # (t, field value, amount): --group-by
        started = time.perf_counter()
        while remaining:
            batches = await consumer.getmany(*remaining, timeout_ms=200, max_records=5000)
            for tp, messages in batches.items():
                state, order = open_[tp], starts[tp]
                st = stream_time[tp]
                for m in messages:
                    if m.offset >= ends[tp]:
                        break
                    events += 1
                    value = loads(m.value)
                    amount = value["amount"]
                    key = m.key
                    if field is not None:
                        key = str(value[field]).encode()
                        if reference:
                            seen.append((m.timestamp, key.decode(), amount))
                    t = m.timestamp
                    if t > st:
                        st = t
                        while order and order[0] + SIZE_MS + grace_ms <= st:
                            _close(order.pop(0), state, closed)
                    start = t - t % SIZE_MS
                    if start + SIZE_MS + grace_ms <= st:
                        continue  # late: its window has closed
                    window = state.get(start)
                    if window is None:
                        window = state[start] = {}
                        bisect.insort(order, start)
                    acc = window.get(key)
                    if acc is None:
                        window[key] = [1, amount]
                    else:
                        acc[0] += 1
                        acc[1] += amount
                stream_time[tp] = st
                if messages and messages[-1].offset + 1 >= ends[tp]:
                    remaining.discard(tp)
        seconds = time.perf_counter() - started
    finally:
        await consumer.stop()
    if field is not None and reference:
        closed = _per_field(seen, grace_ms)
    return {"events": events, "seconds": seconds, "windows": closed}


def _per_field(seen: list[tuple[int, str, int]], grace_ms: int) -> list[list[Any]]:
    """The closed windows per field value over all records in event-time order."""
    seen.sort(key=lambda r: r[0])
    state: dict[int, dict[str, list[int]]] = {}
    closed: list[list[Any]] = []
    st = -1
    for t, key, amount in seen:
        st = max(st, t)
        for start in sorted(s for s in state if s + SIZE_MS + grace_ms <= st):
            for k, (count, total) in state.pop(start).items():
                closed.append([k, start, count, total])
        acc = state.setdefault(t - t % SIZE_MS, {}).setdefault(key, [0, 0])
        acc[0] += 1
        acc[1] += amount
    for start in sorted(state):  # the end of the input closes what is left
        for k, (count, total) in state[start].items():
            closed.append([k, start, count, total])
    return closed


def _close(start: int, state: dict[int, dict[bytes, list[int]]], closed: list[list[Any]]) -> None:
    for key, (count, total) in state.pop(start).items():
        closed.append([key.decode() if key is not None else None, start, count, total])


def main() -> None:
    bootstrap, topic = sys.argv[1:3]
    field = sys.argv[sys.argv.index("--group-by") + 1] if "--group-by" in sys.argv else None
    grace = int(sys.argv[sys.argv.index("--grace-ms") + 1]) if "--grace-ms" in sys.argv else 0
    out = asyncio.run(run(bootstrap, topic, field, grace, "--windows" in sys.argv))
    if "--windows" not in sys.argv:
        out["windows_closed"] = len(out.pop("windows"))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
