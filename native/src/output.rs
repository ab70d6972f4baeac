//! Window results on their way to the sink, a slice at a time:
//! `encode_accumulators` writes the sink values of a closed tumbling/hopping
//! window's slice straight from its accumulators (no result built), and
//! `encode_results` those of a slice of `WindowResult`s: the bytes orjson gives
//! the default output `{"end_ms", "start_ms", "value"}` (`outjson.rs`), with
//! the keys and their murmur2; `EncodedResults.batches` lays them out as Kafka
//! record batches per partition of the default partitioner (`batches.rs`). In
//! Python each result cost a `WindowResult`, a dict, an `orjson.dumps`, an
//! `OutRecord`, a partition lookup and aiokafka's `BatchBuilder.append` (~15 us
//! a result at 100k keys); here none of them builds a Python object per result.
//!
//! A value this encoder does not write exactly as orjson (an int past 64 bits,
//! which orjson refuses, a subclass of a built-in type, a nested container, a
//! str with surrogates) makes the call return None: the caller then takes the
//! Python path, which also finds the results that fail.

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyList};

use crate::batches::{lay_out, RecordBatch};
use crate::murmur::murmur2;
use crate::outjson::{kind_code, write_result, write_str, write_value, Bail, R};

// -- results ------------------------------------------------------------------------

/// A slice of results encoded for the sink: keys, values and timestamps (the
/// window ends) in one buffer each, and each key's murmur2.
#[pyclass(frozen, module = "streamremat_native")]
pub struct EncodedResults {
    pub(crate) keys: Vec<u8>,
    pub(crate) key_ends: Vec<usize>,
    pub(crate) values: Vec<u8>,
    pub(crate) value_ends: Vec<usize>,
    pub(crate) timestamps: Vec<i64>,
    pub(crate) hashes: Vec<u32>,
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
    let head = value_head(start, end);
    let quoted = quoted_names(names.as_deref());
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

/// The bytes every result value of one window starts with: `{"end_ms":E,"start_ms":S,"value":`
/// (the default output's keys in sorted order, as orjson writes them).
pub(crate) fn value_head(start: i64, end: i64) -> Vec<u8> {
    let mut head = Vec::new();
    head.extend_from_slice(b"{\"end_ms\":");
    head.extend_from_slice(end.to_string().as_bytes());
    head.extend_from_slice(b",\"start_ms\":");
    head.extend_from_slice(start.to_string().as_bytes());
    head.extend_from_slice(b",\"value\":");
    head
}

/// Each name of a dict of aggregations as its JSON string and a colon, in order.
pub(crate) fn quoted_names(names: Option<&[String]>) -> Vec<Vec<u8>> {
    names.into_iter().flatten().map(|name| {
        let mut q = Vec::new();
        write_str(&mut q, name);
        q.push(b':');
        q
    }).collect()
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
        Ok(lay_out((0..self.timestamps.len()).map(|i| {
            (self.hashes[i] % partitions, self.key(i), self.value(i), self.timestamps[i])
        }), partitions, batch_size, transactional))
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
