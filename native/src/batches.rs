//! Kafka record batches (v2, uncompressed) built natively for aiokafka's
//! accumulator: the bytes its `DefaultRecordBatchBuilder` writes for the same
//! records, split at the same records, header and CRC-32C written when the
//! sender has set the producer's id, epoch and sequence.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

/// Bytes of a record batch v2 header; the CRC covers what follows `ATTRIBUTES`.
const HEADER: usize = 61;
const CRC_AT: usize = 17;
const ATTRIBUTES: usize = 21;
const TRANSACTIONAL: i16 = 0x10;

fn varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn varint_len(v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

/// CRC-32C (Castagnoli), as Kafka's record batches carry it.
fn crc32c(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[[u32; 256]; 8]> = std::sync::OnceLock::new();
    let t = TABLE.get_or_init(|| {
        let mut t = [[0u32; 256]; 8];
        for i in 0..256u32 {
            let mut c = i;
            for _ in 0..8 {
                c = if c & 1 != 0 { (c >> 1) ^ 0x82f6_3b78 } else { c >> 1 };
            }
            t[0][i as usize] = c;
        }
        for i in 0..256 {
            for k in 1..8 {
                t[k][i] = (t[k - 1][i] >> 8) ^ t[0][(t[k - 1][i] & 0xff) as usize];
            }
        }
        t
    });
    let mut crc = !0u32;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let lo = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) ^ crc;
        crc = t[7][(lo & 0xff) as usize]
            ^ t[6][((lo >> 8) & 0xff) as usize]
            ^ t[5][((lo >> 16) & 0xff) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][c[4] as usize]
            ^ t[2][c[5] as usize]
            ^ t[1][c[6] as usize]
            ^ t[0][c[7] as usize];
    }
    for &b in chunks.remainder() {
        crc = t[0][((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// One record batch being filled (records of one partition, in order).
pub(crate) struct Filling {
    buf: Vec<u8>,
    count: i32,
    first_ts: i64,
    max_ts: i64,
}

impl Filling {
    fn new() -> Self {
        Filling { buf: vec![0; HEADER], count: 0, first_ts: 0, max_ts: 0 }
    }
}

/// A record batch built natively, for aiokafka's accumulator in place of its
/// `BatchBuilder` (`producer.send_batch`): closed, it takes no more records;
/// the sender sets the producer's id, epoch and sequence when it drains it,
/// and `_build` then writes the header and CRC once.
#[pyclass(module = "streamremat_native")]
pub struct RecordBatch {
    buf: Vec<u8>,
    /// bytes of the batch (`buf` is given up once built)
    len: usize,
    count: i32,
    producer: (i64, i16, i32),
    built: Option<Py<PyBytes>>,
}

impl RecordBatch {
    fn from_filling(mut f: Filling, transactional: bool) -> Self {
        let len = f.buf.len();
        let b = &mut f.buf;
        b[0..8].copy_from_slice(&0i64.to_be_bytes()); // base offset: the broker's
        b[8..12].copy_from_slice(&((len - 12) as i32).to_be_bytes());
        b[12..16].copy_from_slice(&(-1i32).to_be_bytes()); // no partition leader epoch
        b[16] = 2; // magic
        let attrs: i16 = if transactional { TRANSACTIONAL } else { 0 };
        b[21..23].copy_from_slice(&attrs.to_be_bytes());
        b[23..27].copy_from_slice(&(f.count - 1).to_be_bytes()); // last offset delta
        b[27..35].copy_from_slice(&f.first_ts.to_be_bytes());
        b[35..43].copy_from_slice(&f.max_ts.to_be_bytes());
        b[57..61].copy_from_slice(&f.count.to_be_bytes());
        RecordBatch { buf: f.buf, len, count: f.count, producer: (-1, -1, 0), built: None }
    }
}

#[pymethods]
impl RecordBatch {
    #[pyo3(signature = (*_args, **_kwargs))]
    fn append(&self, _args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Option<()> {
        None // full: aiokafka then starts a batch of its own
    }

    fn close(&self) {}

    fn closed(&self) -> bool {
        true
    }

    fn record_count(&self) -> i32 {
        self.count
    }

    fn size(&self) -> usize {
        self.len
    }

    fn _set_producer_state(&mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) {
        self.producer = (producer_id, producer_epoch, base_sequence);
    }

    /// The batch's bytes, header and CRC written (once: a retry sends the same).
    fn _build(&mut self, py: Python<'_>) -> Py<PyBytes> {
        if let Some(b) = &self.built {
            return b.clone_ref(py);
        }
        let (pid, epoch, seq) = self.producer;
        let b = &mut self.buf;
        b[43..51].copy_from_slice(&pid.to_be_bytes());
        b[51..53].copy_from_slice(&epoch.to_be_bytes());
        b[53..57].copy_from_slice(&seq.to_be_bytes());
        let crc = crc32c(&b[ATTRIBUTES..]);
        b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        let bytes = PyBytes::new(py, b).unbind();
        self.built = Some(bytes.clone_ref(py));
        self.buf = Vec::new();
        bytes
    }
}


/// `records` (partition, key, value, timestamp) as record batches below
/// `batch_size` bytes (a record that large alone in one), split where aiokafka's
/// C builder splits them: (partition, batch) in the order each partition's
/// batches must go out.
pub(crate) fn lay_out<'a>(
    records: impl Iterator<Item = (u32, &'a [u8], &'a [u8], i64)>, partitions: u32,
    batch_size: usize, transactional: bool,
) -> Vec<(u32, RecordBatch)> {
    let mut filling: Vec<Option<Filling>> = (0..partitions).map(|_| None).collect();
    let mut done: Vec<(u32, RecordBatch)> = Vec::new();
    let mut body = Vec::with_capacity(256);
    for (p, key, value, ts) in records {
        let slot = &mut filling[p as usize];
        if let Some(f) = slot.as_ref() {
            // the record's size with this batch's base timestamp and next offset
            let size = 1 + varint_len(ts - f.first_ts) + varint_len(i64::from(f.count))
                + varint_len(key.len() as i64) + key.len()
                + varint_len(value.len() as i64) + value.len() + 1;
            // aiokafka's C builder refuses a record that would reach the size
            if f.buf.len() + size + varint_len(size as i64) >= batch_size {
                let full = slot.take().expect("checked");
                done.push((p, RecordBatch::from_filling(full, transactional)));
            }
        }
        let f = slot.get_or_insert_with(Filling::new);
        if f.count == 0 {
            f.first_ts = ts;
            f.max_ts = ts;
        } else if ts > f.max_ts {
            f.max_ts = ts;
        }
        body.clear();
        body.push(0); // record attributes
        varint(&mut body, ts - f.first_ts);
        varint(&mut body, i64::from(f.count));
        varint(&mut body, key.len() as i64);
        body.extend_from_slice(key);
        varint(&mut body, value.len() as i64);
        body.extend_from_slice(value);
        body.push(0); // no headers
        varint(&mut f.buf, body.len() as i64);
        f.buf.extend_from_slice(&body);
        f.count += 1;
    }
    for (p, slot) in filling.into_iter().enumerate() {
        if let Some(f) = slot {
            done.push((p as u32, RecordBatch::from_filling(f, transactional)));
        }
    }
    done
}
