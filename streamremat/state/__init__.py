"""Checkpoint state layer: verifiable checkpoint frames in RocksDB and Kafka.

The runtime calls ``CheckpointStore.append/load/prune/last_seq/close`` on a
``RocksDBCheckpointStore`` (local) and a ``KafkaCheckpointStore`` (replica), and
``newest_restore_point`` on assignment. Payloads are opaque here.
"""

from streamremat.state.base import CheckpointStore
from streamremat.state.chain import RestorePoint
from streamremat.state.exceptions import (
    CheckpointSequenceError,
    CheckpointStoreUnavailable,
    CorruptCheckpoint,
    StateError,
    UnsupportedCheckpointVersion,
)
from streamremat.state.frame import (
    FORMAT_VERSION,
    CheckpointFrame,
    FrameKind,
    TaskId,
    decode_frame,
    encode_frame,
)
from streamremat.state.kafka import KafkaCheckpointConfig, KafkaCheckpointStore
from streamremat.state.restore import RestoreChoice, newest_restore_point
from streamremat.state.rocksdb import RocksDBCheckpointStore

__all__ = [
    "FORMAT_VERSION",
    "CheckpointFrame",
    "CheckpointSequenceError",
    "CheckpointStore",
    "CheckpointStoreUnavailable",
    "CorruptCheckpoint",
    "FrameKind",
    "KafkaCheckpointConfig",
    "KafkaCheckpointStore",
    "RestoreChoice",
    "RestorePoint",
    "RocksDBCheckpointStore",
    "StateError",
    "TaskId",
    "UnsupportedCheckpointVersion",
    "decode_frame",
    "encode_frame",
    "newest_restore_point",
]
