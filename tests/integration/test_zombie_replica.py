"""A zombie's late checkpoint never mixes into the new owner's chain in the replica
(the new owner writes in a new seq epoch; the zombie continues its old one)."""

from __future__ import annotations

from typing import Any

from streamremat.runtime.checkpointing import new_owner_seq
from streamremat.state.frame import CheckpointFrame, FrameKind, TaskId
from streamremat.state.kafka import KafkaCheckpointConfig, KafkaCheckpointStore
from streamremat.state.restore import newest_restore_point


def _frame(task: TaskId, seq: int, base: int, offset: int, payload: bytes,
           clean: bool = False) -> CheckpointFrame:
    kind = FrameKind.FULL if seq == base else FrameKind.DELTA
    return CheckpointFrame(task, seq, kind, base, offset, offset, clean, b"", payload)


def test_new_owner_seq_starts_a_new_epoch() -> None:
    assert new_owner_seq(0) == 0
    assert new_owner_seq(1) == new_owner_seq(7) == 1 << 32
    assert new_owner_seq((1 << 32) + 3) == 2 << 32


async def test_zombie_frames_do_not_mix_into_the_new_owners_chain(
    kafka_bootstrap: str, new_topic: Any
) -> None:
    topic = new_topic(1, {"cleanup.policy": "compact"})
    task = TaskId("sums", "src", 0)
    cfg = KafkaCheckpointConfig(partitions=1)
    zombie = await KafkaCheckpointStore.open(kafka_bootstrap, topic, cfg)
    owner = fresh = None
    try:
        await zombie.append(_frame(task, 0, 0, 100, b"Z-full@100"))
        await zombie.append(_frame(task, 1, 0, 200, b"Z-delta@200"))
        # The zombie freezes; the new owner restores and checkpoints in a new epoch.
        owner = await KafkaCheckpointStore.open(kafka_bootstrap, topic, cfg)
        choice = await newest_restore_point(task, owner, None)
        start = new_owner_seq(choice.next_seq)
        await owner.append(_frame(task, start, start, 500, b"A-full@500"))
        await owner.append(_frame(task, start + 1, start, 600, b"A-delta@600"))
        # The zombie thaws and writes late with its own next seq.
        await zombie.append(_frame(task, 2, 2, 200, b"Z-full@200", clean=True))

        fresh = await KafkaCheckpointStore.open(kafka_bootstrap, topic, cfg)
        point = (await newest_restore_point(task, fresh, None)).point
        assert point is not None
        assert [f.payload for f in point.chain] == [b"A-full@500", b"A-delta@600"]
        assert point.offset == 600
    finally:
        for store in (zombie, owner, fresh):
            if store is not None:
                await store.close()
