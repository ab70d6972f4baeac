//! Window results on their way to the sink, a slice at a time: `encode_results`
//! turns a slice of `WindowResult`s into their sink values (the bytes orjson
//! gives the default output `{"end_ms", "start_ms", "value"}`) and keys, and
//! `EncodedResults.batches` lays them out as Kafka record batches (v2, the
//! bytes aiokafka's `DefaultRecordBatchBuilder` writes), one run per partition
//! of Kafka's default partitioner. In Python each result cost a dict, an
//! `orjson.dumps`, an `OutRecord`, a partition lookup and aiokafka's
//! `BatchBuilder.append` (~15 us a result at 100k keys); here none of them
//! builds a Python object per result.
//!
//! A value this encoder does not write exactly as orjson (an int past 64 bits,
//! which orjson refuses, a subclass of a built-in type, a nested container, a
//! str with surrogates) makes `encode_results` return None: the caller then
//! takes the Python path, which also finds the results that fail.

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::murmur::murmur2;

/// Declined: the Python path encodes this slice.
struct Bail;
type R<T> = Result<T, Bail>;

// -- JSON as orjson writes it -----------------------------------------------------

/// A str's JSON text: orjson escapes `"`, `\` and the control characters below
/// 0x20 (`\b \t \n \f \r` by name, the rest as `\u00xx`), nothing else.
fn write_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[from..i]);
        if esc.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 15) as usize]);
        } else {
            out.extend_from_slice(esc);
        }
        from = i + 1;
    }
    out.extend_from_slice(&bytes[from..]);
    out.push(b'"');
}

/// A finite float as orjson (3.13) writes it: the shortest digits that read
/// back to it, plain up to 16 digits left of the point (`123.0`, `0.001`;
/// `1e+16` past them), `0.0000x` down to 1e-5, else `d.ddde-7`.
fn write_float(out: &mut Vec<u8>, f: f64) {
    // Rust's `{:e}` gives the shortest round-trip digits ("1.2345e-7", "5e0"),
    // but not always the closest of them: 711909615820736.25 is "...736.3" there
    // and "...736.2" in orjson (ties to even). So: the value correctly rounded to
    // that many digits, where it reads back to the same float.
    let shortest = format!("{:e}", f);
    let n = shortest.split_once('e').map_or(0, |(m, _)| m.bytes().filter(u8::is_ascii_digit).count());
    let closest = format!("{:.*e}", n.saturating_sub(1), f);
    let sci = if closest.parse::<f64>().ok() == Some(f) { closest } else { shortest };
    let (mantissa, exp) = sci.split_once('e').expect("LowerExp has an exponent");
    let exp: i32 = exp.parse().expect("LowerExp exponent");
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let mut digits: Vec<u8> = mantissa.bytes().filter(|&b| b != b'.').collect();
    while digits.len() > 1 && digits.last() == Some(&b'0') {
        digits.pop(); // rounded up to fewer digits: 9.5 -> "1.0e1"
    }
    let len = digits.len() as i32;
    // value = 0.d1d2...dn * 10^kk
    let kk = exp + 1;
    if neg {
        out.push(b'-');
    }
    let k = kk - len; // value = digits * 10^k
    if 0 <= k && kk <= 16 {
        out.extend_from_slice(&digits);
        out.extend(std::iter::repeat(b'0').take(k as usize));
        out.extend_from_slice(b".0");
    } else if 0 < kk && kk <= 16 {
        out.extend_from_slice(&digits[..kk as usize]);
        out.push(b'.');
        out.extend_from_slice(&digits[kk as usize..]);
    } else if -5 < kk && kk <= 0 {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat(b'0').take((-kk) as usize));
        out.extend_from_slice(&digits);
    } else {
        out.push(digits[0]);
        if len > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.push(b'e');
        if kk > 0 {
            out.push(b'+'); // orjson 3.13 signs positive exponents (ryu did not)
        }
        out.extend_from_slice((kk - 1).to_string().as_bytes());
    }
}

fn write_int(out: &mut Vec<u8>, obj: &Bound<'_, PyAny>) -> R<()> {
    // orjson takes i64 and u64; past them it raises (the Python path says so)
    if let Ok(i) = obj.extract::<i64>() {
        out.extend_from_slice(i.to_string().as_bytes());
    } else if let Ok(u) = obj.extract::<u64>() {
        out.extend_from_slice(u.to_string().as_bytes());
    } else {
        return Err(Bail);
    }
    Ok(())
}

/// None, a bool, an int, a float or a str, of exactly those types.
fn write_scalar(out: &mut Vec<u8>, obj: &Bound<'_, PyAny>) -> R<()> {
    if obj.is_exact_instance_of::<PyInt>() {
        write_int(out, obj)
    } else if obj.is_exact_instance_of::<PyFloat>() {
        let f = obj.cast::<PyFloat>().map_err(|_| Bail)?.value();
        if f.is_finite() {
            write_float(out, f);
        } else {
            out.extend_from_slice(b"null"); // orjson: NaN and infinities are null
        }
        Ok(())
    } else if obj.is_none() {
        out.extend_from_slice(b"null");
        Ok(())
    } else if obj.is_exact_instance_of::<PyBool>() {
        out.extend_from_slice(if obj.is_truthy().map_err(|_| Bail)? { b"true" } else { b"false" });
        Ok(())
    } else if obj.is_exact_instance_of::<PyString>() {
        let s = obj.cast::<PyString>().map_err(|_| Bail)?.to_str().map_err(|_| Bail)?;
        write_str(out, s);
        Ok(())
    } else {
        Err(Bail)
    }
}

/// A result value: a scalar, or a dict of str -> scalar (a dict of
/// aggregations), its items in dict order or, with `sort`, by name.
fn write_value(out: &mut Vec<u8>, obj: &Bound<'_, PyAny>, sort: bool) -> R<()> {
    let Ok(dict) = obj.cast_exact::<PyDict>() else { return write_scalar(out, obj) };
    let mut items: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = dict.iter().collect();
    if sort {
        let mut named = Vec::with_capacity(items.len());
        for (k, v) in items {
            let name = k.cast_exact::<PyString>().map_err(|_| Bail)?.to_str().map_err(|_| Bail)?;
            named.push((name.to_owned(), v));
        }
        named.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        out.push(b'{');
        for (i, (name, v)) in named.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_str(out, name);
            out.push(b':');
            write_scalar(out, v)?;
        }
        out.push(b'}');
        return Ok(());
    }
    out.push(b'{');
    for (i, (k, v)) in items.drain(..).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let name = k.cast_exact::<PyString>().map_err(|_| Bail)?.to_str().map_err(|_| Bail)?;
        write_str(out, name);
        out.push(b':');
        write_scalar(out, &v)?;
    }
    out.push(b'}');
    Ok(())
}

// -- results ------------------------------------------------------------------------

/// A slice of results encoded for the sink: keys, values and timestamps (the
/// window ends) in one buffer each, and each key's murmur2.
#[pyclass(frozen, module = "streamremat_native")]
pub struct EncodedResults {
    keys: Vec<u8>,
    key_ends: Vec<usize>,
    values: Vec<u8>,
    value_ends: Vec<usize>,
    timestamps: Vec<i64>,
    hashes: Vec<u32>,
}

impl EncodedResults {
    fn key(&self, i: usize) -> &[u8] {
        &self.keys[if i == 0 { 0 } else { self.key_ends[i - 1] }..self.key_ends[i]]
    }
    fn value(&self, i: usize) -> &[u8] {
        &self.values[if i == 0 { 0 } else { self.value_ends[i - 1] }..self.value_ends[i]]
    }
}

fn encode(results: &Bound<'_, PyList>, sort: bool) -> PyResult<R<EncodedResults>> {
    let py = results.py();
    let n = results.len();
    let mut enc = EncodedResults {
        keys: Vec::with_capacity(n * 16),
        key_ends: Vec::with_capacity(n),
        values: Vec::with_capacity(n * 48),
        value_ends: Vec::with_capacity(n),
        timestamps: Vec::with_capacity(n),
        hashes: Vec::with_capacity(n),
    };
    let (k_key, k_start, k_end, k_value) = (
        intern!(py, "key"), intern!(py, "start_ms"), intern!(py, "end_ms"), intern!(py, "value"),
    );
    for r in results.iter() {
        let key = r.getattr(k_key)?;
        let Ok(key) = key.cast_exact::<PyBytes>() else { return Ok(Err(Bail)) };
        let start = r.getattr(k_start)?;
        let end = r.getattr(k_end)?;
        if !start.is_exact_instance_of::<PyInt>() || !end.is_exact_instance_of::<PyInt>() {
            return Ok(Err(Bail));
        }
        let (Ok(start), Ok(end)) = (start.extract::<i64>(), end.extract::<i64>()) else {
            return Ok(Err(Bail));
        };
        let key = key.as_bytes();
        enc.keys.extend_from_slice(key);
        enc.key_ends.push(enc.keys.len());
        enc.hashes.push(murmur2(key) as u32 & 0x7fff_ffff);
        let v = &mut enc.values;
        v.extend_from_slice(b"{\"end_ms\":");
        v.extend_from_slice(end.to_string().as_bytes());
        v.extend_from_slice(b",\"start_ms\":");
        v.extend_from_slice(start.to_string().as_bytes());
        v.extend_from_slice(b",\"value\":");
        if write_value(v, &r.getattr(k_value)?, sort).is_err() {
            return Ok(Err(Bail));
        }
        v.push(b'}');
        enc.value_ends.push(v.len());
        enc.timestamps.push(end);
    }
    Ok(Ok(enc))
}

/// The sink records of `results` (a list of `WindowResult`) with the default
/// output and JSON: None when one of them needs the Python path. `sort`: the
/// value dict's items by name (orjson's `OPT_SORT_KEYS`), else in dict order.
#[pyfunction]
pub fn encode_results(results: &Bound<'_, PyList>, sort: bool) -> PyResult<Option<EncodedResults>> {
    Ok(encode(results, sort)?.ok())
}

/// Kinds of the built-in aggregations whose result `encode_accumulators` writes.
const K_COUNT: u8 = 0;
const K_SUM: u8 = 1;
const K_MINMAX: u8 = 2;
const K_MEAN: u8 = 3;

fn kind_code(name: &str) -> PyResult<u8> {
    Ok(match name {
        "count" => K_COUNT,
        "sum" => K_SUM,
        "min" | "max" => K_MINMAX,
        "mean" => K_MEAN,
        _ => return Err(PyValueError::new_err(format!("no native result for {name:?}"))),
    })
}

/// An exact int of at most 53 bits, or a float: what f64 divides as Python does.
fn exact_f64(obj: &Bound<'_, PyAny>) -> R<f64> {
    if obj.is_exact_instance_of::<PyFloat>() {
        return Ok(obj.cast::<PyFloat>().map_err(|_| Bail)?.value());
    }
    if obj.is_exact_instance_of::<PyInt>() {
        let i = obj.extract::<i64>().map_err(|_| Bail)?;
        if i.unsigned_abs() <= 1 << 53 {
            return Ok(i as f64);
        }
    }
    Err(Bail)
}

/// The result of one aggregation's accumulator, as `Aggregator.result` gives it
/// and orjson writes it: Count, Sum, Min and Max are their accumulator; Mean is
/// `[sum, count]`, `sum / count` or None for no items.
fn write_result(out: &mut Vec<u8>, kind: u8, acc: &Bound<'_, PyAny>) -> R<()> {
    match kind {
        K_COUNT | K_SUM => {
            if !acc.is_exact_instance_of::<PyInt>() && !acc.is_exact_instance_of::<PyFloat>() {
                return Err(Bail);
            }
            write_scalar(out, acc)
        }
        K_MINMAX => write_scalar(out, acc),
        _ => {
            let pair = acc.cast_exact::<PyList>().map_err(|_| Bail)?;
            if pair.len() != 2 {
                return Err(Bail);
            }
            let count = pair.get_item(1).map_err(|_| Bail)?;
            if !count.is_exact_instance_of::<PyInt>() {
                return Err(Bail);
            }
            if count.extract::<i64>().map_err(|_| Bail)? == 0 {
                out.extend_from_slice(b"null");
                return Ok(());
            }
            // exact operands: IEEE division rounds as Python's true division does
            let q = exact_f64(&pair.get_item(0).map_err(|_| Bail)?)? / exact_f64(&count)?;
            if q.is_finite() {
                write_float(out, q);
            } else {
                out.extend_from_slice(b"null");
            }
            Ok(())
        }
    }
}

/// The sink records of one closed window's accumulators (tumbling/hopping: one
/// start and end) without building their results: `kinds` per aggregation in
/// accumulator order ("count", "sum", "min", "max", "mean"); `names` None for a
/// lone aggregation (its accumulator is the value), else the dict's names in the
/// order they are written, `order[i]` the accumulator index of `names[i]`.
/// None when one accumulator needs the Python path.
#[pyfunction]
#[pyo3(signature = (keys, accs, start, end, kinds, names, order))]
pub fn encode_accumulators(
    keys: &Bound<'_, PyList>, accs: &Bound<'_, PyList>, start: i64, end: i64,
    kinds: Vec<String>, names: Option<Vec<String>>, order: Vec<usize>,
) -> PyResult<Option<EncodedResults>> {
    let codes = kinds.iter().map(|k| kind_code(k)).collect::<PyResult<Vec<u8>>>()?;
    if let Some(names) = &names {
        if names.len() != order.len() || order.iter().any(|&i| i >= codes.len()) {
            return Err(PyValueError::new_err("names and order must match the kinds"));
        }
    } else if codes.len() != 1 {
        return Err(PyValueError::new_err("a lone aggregation has one kind"));
    }
    let n = keys.len();
    if accs.len() != n {
        return Err(PyValueError::new_err("one accumulator per key"));
    }
    // the names' JSON and the head shared by every value
    let mut head = Vec::new();
    head.extend_from_slice(b"{\"end_ms\":");
    head.extend_from_slice(end.to_string().as_bytes());
    head.extend_from_slice(b",\"start_ms\":");
    head.extend_from_slice(start.to_string().as_bytes());
    head.extend_from_slice(b",\"value\":");
    let quoted: Vec<Vec<u8>> = names.iter().flatten().map(|name| {
        let mut q = Vec::new();
        write_str(&mut q, name);
        q.push(b':');
        q
    }).collect();
    let mut enc = EncodedResults {
        keys: Vec::with_capacity(n * 16),
        key_ends: Vec::with_capacity(n),
        values: Vec::with_capacity(n * (head.len() + 24)),
        value_ends: Vec::with_capacity(n),
        timestamps: vec![end; n],
        hashes: Vec::with_capacity(n),
    };
    for (key, acc) in keys.iter().zip(accs.iter()) {
        let Ok(key) = key.cast_exact::<PyBytes>() else { return Ok(None) };
        let key = key.as_bytes();
        enc.keys.extend_from_slice(key);
        enc.key_ends.push(enc.keys.len());
        enc.hashes.push(murmur2(key) as u32 & 0x7fff_ffff);
        let v = &mut enc.values;
        v.extend_from_slice(&head);
        let written = if names.is_none() {
            write_result(v, codes[0], &acc)
        } else {
            (|| {
                let parts = acc.cast_exact::<PyList>().map_err(|_| Bail)?;
                if parts.len() != codes.len() {
                    return Err(Bail);
                }
                v.push(b'{');
                for (i, &at) in order.iter().enumerate() {
                    if i > 0 {
                        v.push(b',');
                    }
                    v.extend_from_slice(&quoted[i]);
                    write_result(v, codes[at], &parts.get_item(at).map_err(|_| Bail)?)?;
                }
                v.push(b'}');
                Ok(())
            })()
        };
        if written.is_err() {
            return Ok(None);
        }
        v.push(b'}');
        enc.value_ends.push(v.len());
    }
    Ok(Some(enc))
}

// -- record batches -------------------------------------------------------------------

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
struct Filling {
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

#[pymethods]
impl EncodedResults {
    fn __len__(&self) -> usize {
        self.timestamps.len()
    }

    /// (keys, values, timestamps) as Python lists: for a producer whose batches
    /// this module can't build (compression), and for the tests.
    fn columns<'py>(&self, py: Python<'py>) -> PyResult<(Vec<Bound<'py, PyBytes>>, Vec<Bound<'py, PyBytes>>, Vec<i64>)> {
        let n = self.timestamps.len();
        let keys = (0..n).map(|i| PyBytes::new(py, self.key(i))).collect();
        let values = (0..n).map(|i| PyBytes::new(py, self.value(i))).collect();
        Ok((keys, values, self.timestamps.clone()))
    }

    /// Per key, its index among `partitions` sorted partitions (Kafka's default
    /// partitioner, as `partition_indexes`).
    fn partition_indexes(&self, partitions: u32) -> PyResult<Vec<u32>> {
        if partitions == 0 {
            return Err(PyValueError::new_err("a topic has at least one partition"));
        }
        Ok(self.hashes.iter().map(|h| h % partitions).collect())
    }

    /// The records as record batches below `batch_size` bytes (a record that
    /// large alone in one), split where aiokafka's builder splits them: (partition index,
    /// batch) in the order each partition's batches must go out.
    fn batches(
        &self, partitions: u32, batch_size: usize, transactional: bool,
    ) -> PyResult<Vec<(u32, RecordBatch)>> {
        if partitions == 0 {
            return Err(PyValueError::new_err("a topic has at least one partition"));
        }
        let mut filling: Vec<Option<Filling>> = (0..partitions).map(|_| None).collect();
        let mut done: Vec<(u32, RecordBatch)> = Vec::new();
        let mut body = Vec::with_capacity(256);
        for i in 0..self.timestamps.len() {
            let p = self.hashes[i] % partitions;
            let (key, value, ts) = (self.key(i), self.value(i), self.timestamps[i]);
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
        Ok(done)
    }
}

/// This module's part of `streamremat_native`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<EncodedResults>()?;
    m.add_class::<RecordBatch>()?;
    m.add_function(wrap_pyfunction!(encode_results, m)?)?;
    m.add_function(wrap_pyfunction!(encode_accumulators, m)?)?;
    Ok(())
}
