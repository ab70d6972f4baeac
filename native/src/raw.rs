//! The replay's record reader: a fetch response's record set (the bytes as the
//! broker sent them) parsed without a Python object per record, then folded by
//! `Folder::fold_raw` (see `fold.rs`).
//!
//! `RawRecords::parse` walks the batches exactly as aiokafka's `PartitionRecords`
//! iterates them under `read_committed` (aborted transactions from the response's
//! list skipped, control batches skipped, records below the fetch position
//! skipped, the position moved past each batch), for the batches it can take:
//! magic v2, uncompressed, a valid CRC-32C, records that parse to the batch's
//! end. At the first batch it can't take (compressed, an older magic, anything
//! aiokafka would raise on) or the first record at or past `until` (the replay's
//! end), it stops and says where aiokafka must take over: that batch's byte
//! position, the fetch position there and the aborted transactions still to
//! apply, so that aiokafka's own iteration of the rest gives the records (or the
//! error) it would have given for the whole response.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::fold::{Batch, Folder};
use crate::json::{Bail, R};

const LOG_OVERHEAD: usize = 12; // base offset, length
const HEADER: usize = 61; // the v2 batch header, records count included
const ATTRIBUTES_AT: usize = 21;
const COMPRESSION: i16 = 0x07;
const LOG_APPEND_TIME: i16 = 0x08;
const TRANSACTIONAL: i16 = 0x10;
const CONTROL: i16 = 0x20;

/// One data record: its offset and timestamp, and its key and value as spans of
/// the response's bytes (None: null).
struct Rec {
    offset: i64,
    ts: i64,
    key: Option<(usize, usize)>,
    value: Option<(usize, usize)>,
}

/// The records of one fetch response that `parse` took, and where aiokafka
/// takes over.
#[pyclass(frozen, module = "streamremat_native")]
pub struct RawRecords {
    data: Py<PyBytes>,
    recs: Vec<Rec>,
    /// the fetch position after the batches taken (aiokafka's `next_fetch_offset`)
    #[pyo3(get)]
    next_offset: i64,
    /// (byte position of the first batch not taken, the fetch position there, the
    /// aborted transactions (producer id, first offset) aiokafka must start from)
    #[pyo3(get)]
    handover: Option<(usize, i64, Vec<(i64, i64)>)>,
}

fn be_i16(d: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([d[at], d[at + 1]])
}

fn be_i32(d: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(d[at..at + 4].try_into().unwrap())
}

fn be_i64(d: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(d[at..at + 8].try_into().unwrap())
}

/// A zigzag varint (Kafka's varint and varlong) at `*at`, moving `*at` past it.
#[inline]
fn varint(d: &[u8], at: &mut usize, end: usize) -> R<i64> {
    let mut v: u64 = 0;
    let mut shift = 0;
    loop {
        if *at >= end || shift > 63 {
            return Err(Bail);
        }
        let b = d[*at];
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    Ok((v >> 1) as i64 ^ -((v & 1) as i64))
}

/// A nullable byte span of length varint at `*at`.
#[inline]
fn span(d: &[u8], at: &mut usize, end: usize) -> R<Option<(usize, usize)>> {
    let n = varint(d, at, end)?;
    if n < 0 {
        return Ok(None);
    }
    let start = *at;
    let stop = start.checked_add(usize::try_from(n).map_err(|_| Bail)?).ok_or(Bail)?;
    if stop > end {
        return Err(Bail);
    }
    *at = stop;
    Ok(Some((start, stop)))
}

/// The records of one uncompressed v2 batch `d[start..end]` at offsets >= `pos`
/// into `out`; returns the first record at or past `until` was met. Any record
/// aiokafka would refuse is a Bail (the batch is then aiokafka's).
fn records(
    d: &[u8], start: usize, end: usize, pos: i64, until: i64, out: &mut Vec<Rec>,
) -> R<bool> {
    let attrs = be_i16(d, start + ATTRIBUTES_AT);
    let base = be_i64(d, start);
    let first_ts = be_i64(d, start + 27);
    let max_ts = be_i64(d, start + 35);
    let count = be_i32(d, start + 57);
    if count < 0 {
        return Err(Bail);
    }
    let mut at = start + HEADER;
    for _ in 0..count {
        let len = varint(d, &mut at, end)?;
        let body = at;
        let stop = body.checked_add(usize::try_from(len).map_err(|_| Bail)?).ok_or(Bail)?;
        if stop > end {
            return Err(Bail);
        }
        varint(d, &mut at, stop)?; // record attributes (unused)
        let ts_delta = varint(d, &mut at, stop)?;
        let ts = if attrs & LOG_APPEND_TIME != 0 { max_ts } else {
            first_ts.checked_add(ts_delta).ok_or(Bail)?
        };
        let offset_delta = varint(d, &mut at, stop)?;
        let offset = base.checked_add(offset_delta).ok_or(Bail)?;
        let key = span(d, &mut at, stop)?;
        let value = span(d, &mut at, stop)?;
        let headers = varint(d, &mut at, stop)?;
        if headers < 0 {
            return Err(Bail);
        }
        for _ in 0..headers {
            // (a header key is a string: aiokafka decodes it as UTF-8)
            let Some((ks, ke)) = span(d, &mut at, stop)? else { return Err(Bail) };
            std::str::from_utf8(&d[ks..ke]).map_err(|_| Bail)?;
            span(d, &mut at, stop)?;
        }
        if at != stop {
            return Err(Bail);
        }
        if offset < pos {
            continue; // below the fetch position, as aiokafka skips it
        }
        if offset >= until {
            return Ok(true);
        }
        out.push(Rec { offset, ts, key, value });
    }
    if at != end {
        return Err(Bail);
    }
    Ok(false)
}

/// The aborted transactions of a fetch response, applied batch by batch as
/// `PartitionRecords` does (`_consume_aborted_up_to`, the abort marker).
struct Aborted {
    /// (producer id, first offset), sorted by first offset as aiokafka sorts them
    list: Vec<(i64, i64)>,
    next: usize,
    producers: FxHashSet<i64>,
}

impl Aborted {
    /// What aiokafka must start from at a batch with base offset `base` to be
    /// where this is: every open aborted producer first (at `base`), then the rest.
    fn remaining(&self, base: i64) -> Vec<(i64, i64)> {
        let mut open: Vec<i64> = self.producers.iter().copied().collect();
        open.sort_unstable();
        let mut out: Vec<(i64, i64)> = open.into_iter().map(|p| (p, base)).collect();
        out.extend_from_slice(&self.list[self.next..]);
        out
    }
}

#[pymethods]
impl RawRecords {
    /// Parse `data`, the record set of a fetch at `fetch_offset`, with the
    /// response's `aborted` transactions (producer id, first offset), up to the
    /// first record at or past `until`.
    #[staticmethod]
    #[pyo3(signature = (data, fetch_offset, until, aborted, read_committed, check_crcs))]
    fn parse(
        data: Bound<'_, PyBytes>, fetch_offset: i64, until: i64, mut aborted: Vec<(i64, i64)>,
        read_committed: bool, check_crcs: bool,
    ) -> Self {
        aborted.sort_by_key(|a| a.1); // stable, as Python's sorted
        let mut ab = Aborted { list: aborted, next: 0, producers: FxHashSet::default() };
        let d = data.as_bytes();
        let mut recs = Vec::new();
        let mut pos = fetch_offset;
        let mut at = 0usize;
        let mut handover = None;
        while d.len() - at >= LOG_OVERHEAD {
            let len = be_i32(d, at + 8);
            let Some(end) = usize::try_from(len).ok().and_then(|l| (at + LOG_OVERHEAD).checked_add(l))
            else {
                handover = Some((at, pos, ab.remaining(be_i64(d, at))));
                break;
            };
            if end > d.len() {
                break; // a partial batch at the end of the response: aiokafka stops too
            }
            let saved = (ab.next, ab.producers.clone());
            match batch(d, at, end, &mut pos, until, read_committed, check_crcs, &mut ab, &mut recs) {
                Ok(false) => at = end,
                Ok(true) | Err(Bail) => {
                    // aiokafka takes this batch and the rest, from the state before it
                    (ab.next, ab.producers) = saved;
                    handover = Some((at, pos, ab.remaining(be_i64(d, at))));
                    break;
                }
            }
        }
        RawRecords { data: data.unbind(), recs, next_offset: pos, handover }
    }

    /// How many records were taken.
    fn __len__(&self) -> usize {
        self.recs.len()
    }

    /// The offset of the first record taken, None if there is none.
    fn first_offset(&self) -> Option<i64> {
        self.recs.first().map(|r| r.offset)
    }

    /// The offset of the last record taken at or after `lo`, None if there is none.
    fn last_offset(&self, lo: i64) -> Option<i64> {
        self.recs.last().map(|r| r.offset).filter(|&o| o >= lo)
    }
}

/// One batch `d[at..end]`: true where aiokafka must take over at it (a record at
/// or past `until`: the records before it are taken, and `pos` is past them), a
/// Bail where it can't be taken (nothing of it taken, `pos` unchanged).
#[allow(clippy::too_many_arguments)]
fn batch(
    d: &[u8], at: usize, end: usize, pos: &mut i64, until: i64, read_committed: bool,
    check_crcs: bool, ab: &mut Aborted, recs: &mut Vec<Rec>,
) -> R<bool> {
    let mark = recs.len();
    let out = batch_inner(d, at, end, pos, until, read_committed, check_crcs, ab, recs);
    if out.is_err() {
        recs.truncate(mark);
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn batch_inner(
    d: &[u8], at: usize, end: usize, pos: &mut i64, until: i64, read_committed: bool,
    check_crcs: bool, ab: &mut Aborted, recs: &mut Vec<Rec>,
) -> R<bool> {
    if end - at < HEADER || d[at + 16] != 2 {
        return Err(Bail); // an older magic, or too short: aiokafka's
    }
    if check_crcs {
        let crc = u32::from_be_bytes(d[at + 17..at + 21].try_into().unwrap());
        if crc32c::crc32c(&d[at + ATTRIBUTES_AT..end]) != crc {
            return Err(Bail);
        }
    }
    let base = be_i64(d, at);
    if base >= until {
        return Ok(true);
    }
    let attrs = be_i16(d, at + ATTRIBUTES_AT);
    let last_delta = be_i32(d, at + 23);
    let next = base.checked_add(i64::from(last_delta)).and_then(|n| n.checked_add(1)).ok_or(Bail)?;
    let producer = be_i64(d, at + 43);
    if read_committed {
        while let Some(&(p, first)) = ab.list.get(ab.next) {
            if first > base {
                break;
            }
            ab.producers.insert(p);
            ab.next += 1;
        }
        if attrs & CONTROL != 0 {
            // The marker: the first record's key, (version, type) as u16s; (0, 0) aborts.
            let mut one = Vec::new();
            records(d, at, end, i64::MIN, i64::MAX, &mut one)?;
            let (ks, ke) = one.first().and_then(|r| r.key).ok_or(Bail)?;
            if ke - ks < 4 {
                return Err(Bail);
            }
            if d[ks..ks + 4] == [0, 0, 0, 0] {
                ab.producers.remove(&producer);
            }
        }
        if attrs & TRANSACTIONAL != 0 && ab.producers.contains(&producer) {
            *pos = next;
            return Ok(false);
        }
    }
    if attrs & CONTROL != 0 {
        *pos = next;
        return Ok(false);
    }
    if attrs & COMPRESSION != 0 {
        return Err(Bail);
    }
    let mark = recs.len();
    let reached = records(d, at, end, *pos, until, recs)?;
    if let Some(last) = recs[mark..].last() {
        *pos = last.offset + 1;
    }
    if reached {
        return Ok(true);
    }
    *pos = next;
    Ok(false)
}

/// `Folder::fold_raw`: pass 1 over the records of `raw` at offsets >= `lo` (keys
/// as one bytes object per distinct key), then the fold as `fold`'s.
pub fn fold<'py>(
    folder: &Folder, state: &Bound<'py, PyAny>, raw: &RawRecords, lo: i64, horizon: Option<i64>,
) -> PyResult<Option<(Bound<'py, PyList>, Bound<'py, PyList>)>> {
    let py = state.py();
    let d = raw.data.bind(py).as_bytes();
    let skip = match horizon {
        Some(h) if folder.timed_by_record() => {
            let attr = |n: &str| -> PyResult<i64> { state.getattr(n)?.extract::<i64>() };
            let (size, advance, grace) = (attr("size")?, attr("advance")?, attr("grace")?);
            if advance <= 0 {
                return Ok(None);
            }
            Some((h, size, advance, grace))
        }
        _ => None,
    };
    let n = raw.recs.len();
    let mut b = Batch { keys: Vec::with_capacity(n), times: Vec::new(), items: Vec::new(),
                        offsets: Vec::with_capacity(n) };
    let mut interned: FxHashMap<&[u8], Bound<'py, PyBytes>> = FxHashMap::default();
    let reads_value = folder.reads_value();
    let mut took = || -> R<()> {
        for r in &raw.recs {
            if r.offset < lo {
                continue;
            }
            if let Some((h, size, advance, grace)) = skip {
                // Task.process's horizon: every window of t closes by then (i128: Python's ints)
                let t = i128::from(r.ts);
                let last_close = t - t.rem_euclid(i128::from(advance)) + i128::from(size)
                    + i128::from(grace);
                if last_close <= i128::from(h) {
                    continue;
                }
            }
            let (ks, ke) = r.key.ok_or(Bail)?;
            let k = &d[ks..ke];
            let key = interned.entry(k).or_insert_with(|| PyBytes::new(py, k)).clone();
            b.keys.push(key);
            b.offsets.push(r.offset);
            let value = if reads_value {
                Some(r.value.map(|(s, e)| &d[s..e]).ok_or(Bail)?)
            } else {
                None
            };
            let t = if folder.timed_by_record() { Some(r.ts) } else { None };
            folder.take(value, t, &mut b)?;
        }
        Ok(())
    };
    if took().is_err() {
        return Ok(None);
    }
    if b.keys.is_empty() {
        // all left out by the horizon: nothing changes (as the general path's empty batch)
        return Ok(Some((PyList::empty(py), PyList::empty(py))));
    }
    if let Some(got) = crate::table::fold_raw_batch(state, &b)? {
        return Ok(got); // the state's entries are in the native table (table.rs)
    }
    folder.fold_batch(state, &b, None)
}
