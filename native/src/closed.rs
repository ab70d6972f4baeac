//! A closing window of the native table taken in key order, a bounded step at a
//! time, its results encoded straight from the table's numbers: no Python
//! object per key between the table and the sink's bytes (`core/closing.py`'s
//! `in_order` and `FixedSlice` did this in Python: popping every key, sorting
//! runs of them, merging the runs with `heapq.merge`, and building each key's
//! accumulator for the encoder to read).
//!
//! The steps are `in_order`'s: a window of at most one slice is sorted in one
//! step; past that, one step sorts each run of a slice's rows (an empty step:
//! its work was the sort), then each step merges the runs' next slice. The
//! order is the bytes' order, as Python sorts bytes (keys are unique within a
//! window, so it is the one order of `sorted`).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::accs::{Shape, COUNT, MAX, MEAN, MIN, SUM};
use crate::murmur::murmur2;
use crate::num::Num;
use crate::outjson::{write_float, Bail, R};
use crate::output::{quoted_names, value_head, EncodedResults};
use crate::store::Win;
use crate::table::Table;

#[pyclass(module = "streamremat_native")]
pub struct SortedWin {
    win: Win,
    shape: Shape,
    slice: usize,
    /// rows put into sorted runs so far
    sorted: usize,
    runs: Vec<Vec<u32>>,
    /// per run, the index of its next row to merge
    heads: Vec<usize>,
    /// run indexes, a min-heap by their next row's key (built when merging starts)
    heap: Option<Vec<u32>>,
    done: bool,
}

/// Take the closing window `end` out of `table` (None: no such window), to be
/// read in key order `slice` rows a step (`SortedWin.step`).
#[pyfunction]
pub fn take_sorted(mut table: PyRefMut<'_, Table>, end: i64, slice: usize)
                   -> PyResult<Option<SortedWin>> {
    if slice == 0 {
        return Err(PyValueError::new_err("slice must be >= 1"));
    }
    let shape = table.shape.clone();
    Ok(table.wins.remove(end).map(|win| SortedWin {
        win, shape, slice, sorted: 0, runs: Vec::new(), heads: Vec::new(), heap: None,
        done: false,
    }))
}

fn head<'a>(win: &'a Win, runs: &[Vec<u32>], heads: &[usize], r: u32) -> &'a [u8] {
    win.key(runs[r as usize][heads[r as usize]] as usize)
}

fn sift_down(heap: &mut [u32], mut i: usize, win: &Win, runs: &[Vec<u32>], heads: &[usize]) {
    let n = heap.len();
    loop {
        let l = 2 * i + 1;
        if l >= n {
            return;
        }
        let mut m = l;
        if l + 1 < n && head(win, runs, heads, heap[l + 1]) < head(win, runs, heads, heap[l]) {
            m = l + 1;
        }
        if head(win, runs, heads, heap[m]) >= head(win, runs, heads, heap[i]) {
            return;
        }
        heap.swap(i, m);
        i = m;
    }
}

#[pymethods]
impl SortedWin {
    /// The window's keys (all of them, taken or not).
    fn __len__(&self) -> usize {
        self.win.len()
    }

    /// The next step's rows in key order (none: that step sorted a run), or
    /// None once every row was taken.
    fn step(&mut self) -> Option<WinRows> {
        if self.done {
            return None;
        }
        let n = self.win.len();
        let rows = if n <= self.slice {
            self.done = true;
            self.win.sorted_rows(false)
        } else if self.sorted < n {
            let to = (self.sorted + self.slice).min(n);
            let win = &self.win;
            let mut run: Vec<u32> = (self.sorted as u32..to as u32).collect();
            run.sort_unstable_by(|&a, &b| win.key(a as usize).cmp(win.key(b as usize)));
            self.runs.push(run);
            self.sorted = to;
            Vec::new()
        } else {
            let rows = self.merge();
            if rows.is_empty() {
                self.done = true;
                return None;
            }
            rows
        };
        Some(self.rows(&rows))
    }
}

impl SortedWin {
    fn merge(&mut self) -> Vec<u32> {
        let (win, runs) = (&self.win, &self.runs);
        let heads = &mut self.heads;
        let heap = self.heap.get_or_insert_with(|| {
            heads.resize(runs.len(), 0);
            let mut h: Vec<u32> = (0..runs.len() as u32).filter(|&r| !runs[r as usize].is_empty())
                .collect();
            for i in (0..h.len() / 2).rev() {
                sift_down(&mut h, i, win, runs, heads);
            }
            h
        });
        let mut rows = Vec::with_capacity(self.slice);
        while rows.len() < self.slice && !heap.is_empty() {
            let r = heap[0] as usize;
            rows.push(runs[r][heads[r]]);
            heads[r] += 1;
            if heads[r] == runs[r].len() {
                heap.swap_remove(0);
            }
            sift_down(heap, 0, win, runs, heads);
        }
        rows
    }

    /// `rows`' keys and numbers, copied out of the window.
    fn rows(&self, rows: &[u32]) -> WinRows {
        let w = self.shape.width;
        let mut out = WinRows {
            keys: Vec::new(), key_ends: Vec::with_capacity(rows.len()),
            accs: Vec::with_capacity(rows.len() * w), shape: self.shape.clone(),
        };
        for &r in rows {
            let r = r as usize;
            out.keys.extend_from_slice(self.win.key(r));
            out.key_ends.push(out.keys.len());
            out.accs.extend_from_slice(&self.win.accs[r * w..(r + 1) * w]);
        }
        out
    }
}

/// One step's rows of a `SortedWin`, in key order: their keys and accumulators
/// for Python (`keys`, `accs`, built only when read), or their sink records
/// (`encode`).
#[pyclass(frozen, module = "streamremat_native")]
pub struct WinRows {
    keys: Vec<u8>,
    key_ends: Vec<usize>,
    accs: Vec<Num>,
    shape: Shape,
}

impl WinRows {
    fn key(&self, i: usize) -> &[u8] {
        &self.keys[if i == 0 { 0 } else { self.key_ends[i - 1] }..self.key_ends[i]]
    }
}

/// An exact int of at most 53 bits, or a float: what f64 divides as Python does
/// (`outjson::exact_f64` for the numbers Python would hold).
fn exact(n: Num) -> R<f64> {
    match n {
        Num::F(f) => Ok(f),
        Num::I(i) if i.unsigned_abs() <= 1 << 53 => Ok(i as f64),
        _ => Err(Bail),
    }
}

fn write_num(out: &mut Vec<u8>, n: Num) {
    match n {
        Num::None => out.extend_from_slice(b"null"),
        Num::I(i) => out.extend_from_slice(i.to_string().as_bytes()),
        Num::F(f) if f.is_finite() => write_float(out, f),
        Num::F(_) => out.extend_from_slice(b"null"), // orjson: NaN and infinities are null
    }
}

/// The result of one aggregation from its numbers, as `outjson::write_result`
/// writes the accumulator Python would hold for them (`Shape::new_acc`).
fn write_result(out: &mut Vec<u8>, kind: u8, acc: &[Num]) -> R<()> {
    match kind {
        COUNT | SUM => {
            if acc[0] == Num::None {
                return Err(Bail);
            }
            write_num(out, acc[0]);
        }
        MIN | MAX => write_num(out, acc[0]),
        _ => {
            let Num::I(count) = acc[1] else { return Err(Bail) };
            if count == 0 {
                out.extend_from_slice(b"null");
                return Ok(());
            }
            let q = exact(acc[0])? / exact(acc[1])?;
            write_num(out, Num::F(q));
        }
    }
    Ok(())
}

/// The kind code of `accs.rs` for an aggregation's name.
fn kind_named(name: &str) -> Option<u8> {
    Some(match name {
        "count" => COUNT,
        "sum" => SUM,
        "min" => MIN,
        "max" => MAX,
        "mean" => MEAN,
        _ => return None,
    })
}

#[pymethods]
impl WinRows {
    fn __len__(&self) -> usize {
        self.key_ends.len()
    }

    fn keys<'py>(&self, py: Python<'py>) -> Vec<Bound<'py, PyBytes>> {
        (0..self.key_ends.len()).map(|i| PyBytes::new(py, self.key(i))).collect()
    }

    /// The accumulators as the Python state holds them.
    fn accs<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let w = self.shape.width;
        (0..self.key_ends.len()).map(|i| self.shape.new_acc(py, &self.accs[i * w..(i + 1) * w]))
            .collect()
    }

    /// `output::encode_accumulators` of these rows (the same arguments but the
    /// keys and accumulators, the same bytes), from the numbers; None when one
    /// needs the Python path (a Mean's sum past 53 bits) or the kinds are not
    /// the table's.
    #[pyo3(signature = (start, end, kinds, names, order))]
    fn encode(&self, start: i64, end: i64, kinds: Vec<String>, names: Option<Vec<String>>,
              order: Vec<usize>) -> Option<EncodedResults> {
        let shape = &self.shape;
        let codes: Vec<u8> = kinds.iter().map(|k| kind_named(k)).collect::<Option<_>>()?;
        if codes != shape.kinds || names.is_some() != shape.composite {
            return None;
        }
        if let Some(names) = &names {
            if names.len() != order.len() || order.iter().any(|&i| i >= codes.len()) {
                return None;
            }
        }
        let n = self.key_ends.len();
        let head = value_head(start, end);
        let quoted = quoted_names(names.as_deref());
        let mut values = Vec::with_capacity(n * (head.len() + 24));
        let mut value_ends = Vec::with_capacity(n);
        let w = shape.width;
        for i in 0..n {
            let acc = &self.accs[i * w..(i + 1) * w];
            values.extend_from_slice(&head);
            if names.is_none() {
                write_result(&mut values, codes[0], acc).ok()?;
            } else {
                values.push(b'{');
                for (j, &at) in order.iter().enumerate() {
                    if j > 0 {
                        values.push(b',');
                    }
                    values.extend_from_slice(&quoted[j]);
                    write_result(&mut values, codes[at], &acc[shape.offs[at]..]).ok()?;
                }
                values.push(b'}');
            }
            values.push(b'}');
            value_ends.push(values.len());
        }
        let hashes = (0..n).map(|i| murmur2(self.key(i)) as u32 & 0x7fff_ffff).collect();
        Some(EncodedResults {
            keys: self.keys.clone(), key_ends: self.key_ends.clone(), values, value_ends,
            timestamps: vec![end; n], hashes,
        })
    }
}
