//! Kafka's default partitioner hash, `Utils.murmur2` of the Java client, for a
//! batch of keys: aiokafka's is pure Python (~15 us a key), and a window closing
//! over many new keys asks for one per result.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// `org.apache.kafka.common.utils.Utils.murmur2`, the same 32-bit arithmetic.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Per key, the index into a topic's sorted partitions that Kafka's default
/// partitioner picks: `toPositive(murmur2(key)) % partitions`.
#[pyfunction]
pub fn partition_indexes(keys: Vec<Bound<'_, PyBytes>>, partitions: u32) -> PyResult<Vec<u32>> {
    if partitions == 0 {
        return Err(pyo3::exceptions::PyValueError::new_err("a topic has at least one partition"));
    }
    Ok(keys
        .iter()
        .map(|k| (murmur2(k.as_bytes()) & 0x7fff_ffff) as u32 % partitions)
        .collect())
}
