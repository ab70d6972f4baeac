//! The batch fold of `streamremat.core.fastpath`'s shapes, into the very dicts
//! `FixedWindowState` keeps (windows, dirty, firsts), so that everything after
//! the fold (close, encode, apply, groups, refold) is the Python code as it is.
//!
//! Three passes, and only the last writes:
//! 1. records: key (bytes), event time (the record's timestamp or a value field,
//!    an int >= 0), each aggregated item (an int in i64 or a finite float), the
//!    value decoded by `json`;
//! 2. windows, lateness and the fold into native accumulators, one per (window,
//!    key) touched, each starting from the state's accumulator (read, not
//!    changed) or from the aggregation's zero, folded in record order with
//!    Python's arithmetic (`num`);
//! 3. the write: new windows (with their first offsets), then each accumulator
//!    (new keys in the order of their first record, as the Python loop inserts
//!    them), the dirty keys and stream time.
//!
//! Any record or accumulator passes 1-2 can't take exactly (a bad record, a big
//! int, a string, an overflow) makes the call return None with the state
//! untouched: the caller then runs the batch through the Python path.

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PySet};
use rustc_hash::FxHashMap;

use crate::attrs::Reader;
use crate::accs::{int_of, Shape, COUNT, MAX, MEAN, MIN, SUM};
use crate::json::{self, Bail, Val, R};
use crate::num::Num;
use crate::raw::RawRecords;


/// Value fields a shape may read (more: the Python path runs it).
pub const MAX_FIELDS: usize = 8;

/// How a record's value is read.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// not at all (Count() with the raw serde)
    Ignore,
    /// decoded to prove it is JSON, nothing picked (Count() with JSON)
    Validate,
    /// the whole value is the item of every aggregation that reads one
    Whole,
    /// an object whose fields are picked
    Fields,
}

/// One fast-path shape (the aggregations, where items and time come from, the
/// window family); `fold` runs a batch of it.
#[pyclass(frozen, module = "streamremat_native")]
pub struct Folder {
    shape: Shape,
    /// per column, its index in `fields` (Mode::Fields)
    col_field: Vec<usize>,
    fields: Vec<Vec<u8>>,
    time_field: Option<usize>,
    /// items per record
    pub ncols: usize,
    mode: Mode,
    hopping: bool,
}

pub fn kind_of(name: &str) -> PyResult<u8> {
    Ok(match name {
        "count" => COUNT,
        "sum" => SUM,
        "min" => MIN,
        "max" => MAX,
        "mean" => MEAN,
        _ => return Err(PyValueError::new_err(format!("unknown aggregation kind {name:?}"))),
    })
}

#[pymethods]
impl Folder {
    /// `kinds`: per aggregation "count", "sum", "min", "max" or "mean"; `fields`:
    /// per aggregation its value field (None: the whole value; ignored for count);
    /// `time_field`: the value field holding event time (None: the record's
    /// timestamp); `decode`: the value is JSON (else it is not read: count only).
    #[new]
    #[pyo3(signature = (kinds, fields, time_field, decode, composite, hopping))]
    fn new(
        kinds: Vec<String>, fields: Vec<Option<String>>, time_field: Option<String>,
        decode: bool, composite: bool, hopping: bool,
    ) -> PyResult<Self> {
        if kinds.is_empty() || kinds.len() != fields.len() {
            return Err(PyValueError::new_err("kinds and fields must be as long, and not empty"));
        }
        let kinds: Vec<u8> = kinds.iter().map(|k| kind_of(k)).collect::<PyResult<_>>()?;
        let mut names: Vec<Vec<u8>> = Vec::new();
        let mut field_index = |name: &str| -> usize {
            let b = name.as_bytes().to_vec();
            names.iter().position(|n| *n == b).unwrap_or_else(|| {
                names.push(b);
                names.len() - 1
            })
        };
        let (mut cols, mut offs, mut col_field) = (Vec::new(), Vec::new(), Vec::new());
        let (mut width, mut ncols, mut whole, mut named) = (0, 0, false, false);
        for (k, f) in kinds.iter().zip(&fields) {
            offs.push(width);
            width += if *k == MEAN { 2 } else { 1 };
            if *k == COUNT {
                cols.push(usize::MAX);
                continue;
            }
            cols.push(ncols);
            ncols += 1;
            match f {
                None => whole = true,
                Some(name) => {
                    named = true;
                    col_field.push(field_index(name));
                }
            }
        }
        let time_field = time_field.map(|n| field_index(&n));
        if names.len() > MAX_FIELDS {
            return Err(PyValueError::new_err(format!("more than {MAX_FIELDS} value fields")));
        }
        if whole && (named || time_field.is_some()) {
            return Err(PyValueError::new_err("the whole value can't also be an object of fields"));
        }
        let mode = if !decode {
            if ncols > 0 || time_field.is_some() {
                return Err(PyValueError::new_err("only a count can leave the value undecoded"));
            }
            Mode::Ignore
        } else if whole {
            Mode::Whole
        } else if named || time_field.is_some() {
            Mode::Fields
        } else {
            Mode::Validate
        };
        if !composite && kinds.len() != 1 {
            return Err(PyValueError::new_err("a lone aggregation has one kind"));
        }
        Ok(Folder {
            shape: Shape { kinds, cols, offs, width, composite },
            col_field, fields: names, time_field, ncols, mode, hopping,
        })
    }

    /// Pass 1 alone (the benchmarks' cost split): whether every record is clean.
    fn read_only(&self, records: &Bound<'_, PyAny>) -> bool {
        records.cast::<PyList>().is_ok_and(|r| self.read(r).is_ok())
    }

    /// Fold the batch into `state` (a FixedWindowState); return (late indices,
    /// their event times), or None with the state untouched.
    fn fold<'py>(
        &self, state: &Bound<'py, PyAny>, records: &Bound<'py, PyAny>,
    ) -> PyResult<Option<(Bound<'py, PyList>, Bound<'py, PyList>)>> {
        let Ok(records) = records.cast::<PyList>() else { return Ok(None) };
        self.run(state, records)
    }

    /// `fold` for the records of `raw` (a `RawRecords`, see `raw.rs`) at offsets >=
    /// `lo`, leaving out those whose windows all close by `horizon` (the replay
    /// horizon of `Task.process`): the same result and the same state as `fold` of
    /// aiokafka's records of them.
    #[pyo3(signature = (state, raw, lo, horizon=None))]
    fn fold_raw<'py>(
        &self, state: &Bound<'py, PyAny>, raw: PyRef<'py, RawRecords>, lo: i64,
        horizon: Option<i64>,
    ) -> PyResult<Option<(Bound<'py, PyList>, Bound<'py, PyList>)>> {
        crate::raw::fold(self, state, &raw, lo, horizon)
    }
}

/// What pass 1 read of a batch.
pub(crate) struct Batch<'py> {
    pub keys: Vec<Bound<'py, PyBytes>>,
    pub times: Vec<i64>,
    /// per record, its items (the columns, row by row)
    pub items: Vec<Num>,
    /// per record, its offset (raw records; records of objects have theirs)
    pub offsets: Vec<i64>,
}

struct Win<'py> {
    end: i64,
    /// the state's dict of the window, None for a window this batch creates
    dict: Option<Bound<'py, PyDict>>,
    /// the record that created it
    creator: usize,
}

struct Slot<'py> {
    win: usize,
    /// the record whose key the slot has
    rec: usize,
    /// the state's accumulator, None for a new key
    acc: Option<Bound<'py, PyAny>>,
}

fn item_of(v: Val<'_>) -> R<Num> {
    match v {
        Val::Int(i) => Ok(Num::I(i)),
        Val::Float(f) => Ok(Num::F(f)),
        _ => Err(Bail),
    }
}

impl Folder {
    fn run<'py>(
        &self, state: &Bound<'py, PyAny>, records: &Bound<'py, PyList>,
    ) -> PyResult<Option<(Bound<'py, PyList>, Bound<'py, PyList>)>> {
        if records.is_empty() {
            return Ok(None);
        }
        let Ok(batch) = self.read(records) else { return Ok(None) };
        self.fold_batch(state, &batch, Some(records))
    }

    /// Passes 2 and 3 of what pass 1 read (`records`: where the records'
    /// offsets are, else `batch.offsets`).
    pub(crate) fn fold_batch<'py>(
        &self, state: &Bound<'py, PyAny>, batch: &Batch<'py>, records: Option<&Bound<'py, PyList>>,
    ) -> PyResult<Option<(Bound<'py, PyList>, Bound<'py, PyList>)>> {
        let py = state.py();
        let windows = state.getattr(intern!(py, "windows"))?.cast_into::<PyDict>()?;
        let Ok(st0) = int_of(&state.getattr(intern!(py, "stream_time"))?) else { return Ok(None) };
        let (Ok(size), Ok(advance), Ok(grace)) = (
            int_of(&state.getattr(intern!(py, "size"))?),
            int_of(&state.getattr(intern!(py, "advance"))?),
            int_of(&state.getattr(intern!(py, "grace"))?),
        ) else {
            return Ok(None);
        };
        if size <= 0 || advance <= 0 || grace < 0 {
            return Ok(None);
        }
        let mut late: Vec<usize> = Vec::new();
        let mut wins: Vec<Win<'py>> = Vec::new();
        let mut slots: Vec<Slot<'py>> = Vec::new();
        let mut accs: Vec<Num> = Vec::new();
        let folded = self.fold_all(
            batch, &windows, (st0, size, advance, grace), &mut late, &mut wins, &mut slots,
            &mut accs,
        );
        let Ok(st) = folded else { return Ok(None) };
        self.write(state, records, &windows, batch, &wins, &slots, &accs, st)?;
        let late_times = PyList::new(py, late.iter().map(|&i| batch.times[i]))?;
        Ok(Some((PyList::new(py, late)?, late_times)))
    }

    /// Pass 1 (also the native state table's, `table.rs`).
    pub(crate) fn read<'py>(&self, records: &Bound<'py, PyList>) -> R<Batch<'py>> {
        let py = records.py();
        let n = records.len();
        let ncols = self.ncols;
        let mut b = Batch {
            keys: Vec::with_capacity(n), times: Vec::with_capacity(n),
            items: Vec::with_capacity(n * ncols), offsets: Vec::new(),
        };
        // key, then timestamp and value where they are read
        let mut names = vec![intern!(py, "key").clone()];
        let ts_at = self.time_field.is_none().then(|| {
            names.push(intern!(py, "timestamp").clone());
            names.len() - 1
        });
        let value_at = (self.mode != Mode::Ignore).then(|| {
            names.push(intern!(py, "value").clone());
            names.len() - 1
        });
        let reader = Reader::new(&records.get_item(0).map_err(|_| Bail)?, names).map_err(|_| Bail)?;
        let mut got: Vec<Bound<'py, PyAny>> = Vec::with_capacity(3);
        for r in records.iter() {
            reader.read(&r, &mut got).map_err(|_| Bail)?;
            b.keys.push(got[0].clone().cast_into_exact::<PyBytes>().map_err(|_| Bail)?);
            let mut t = None;
            if let Some(at) = ts_at {
                t = Some(int_of(&got[at])?);
            }
            let value = match value_at {
                Some(at) => Some(got[at].cast_exact::<PyBytes>().map_err(|_| Bail)?.as_bytes()),
                None => None,
            };
            self.take(value, t, &mut b)?;
        }
        Ok(b)
    }

    /// Whether the value is read at all (else `take` gets None for it).
    pub(crate) fn reads_value(&self) -> bool {
        self.mode != Mode::Ignore
    }

    /// Whether event time is the record's timestamp (not a value field).
    pub(crate) fn timed_by_record(&self) -> bool {
        self.time_field.is_none()
    }

    /// The rest of pass 1 for one record whose key is in `b` already: its value
    /// (None where not read), its event time `t` (the record's timestamp, None
    /// when a value field holds it).
    pub(crate) fn take(&self, value: Option<&[u8]>, mut t: Option<i64>, b: &mut Batch<'_>) -> R<()> {
        let ncols = self.ncols;
        if self.mode != Mode::Ignore {
            let buf = value.ok_or(Bail)?;
            match self.mode {
                Mode::Validate => {
                    json::whole(buf)?;
                }
                Mode::Whole => {
                    let x = item_of(json::whole(buf)?)?;
                    for _ in 0..ncols {
                        b.items.push(x);
                    }
                }
                _ => {
                    let mut store = [Val::Missing; MAX_FIELDS];
                    let picked = &mut store[..self.fields.len()];
                    let mut names = [&b""[..]; MAX_FIELDS];
                    for (n, f) in names.iter_mut().zip(&self.fields) {
                        *n = f.as_slice();
                    }
                    json::pick(buf, &names[..self.fields.len()], picked)?;
                    if let Some(tf) = self.time_field {
                        match picked[tf] {
                            Val::Int(v) => t = Some(v),
                            _ => return Err(Bail),
                        }
                    }
                    for &f in &self.col_field {
                        b.items.push(item_of(picked[f])?);
                    }
                }
            }
        }
        match t {
            Some(v) if v >= 0 => b.times.push(v),
            _ => return Err(Bail),
        }
        Ok(())
    }

    /// Pass 2: returns the stream time after the batch.
    #[allow(clippy::too_many_arguments)]
    fn fold_all<'py>(
        &self, b: &Batch<'py>, windows: &Bound<'py, PyDict>, (st0, size, advance, grace): (i64, i64, i64, i64),
        late: &mut Vec<usize>, wins: &mut Vec<Win<'py>>, slots: &mut Vec<Slot<'py>>,
        accs: &mut Vec<Num>,
    ) -> R<i64> {
        let ncols = self.ncols;
        let n = b.times.len();
        let mut win_of: FxHashMap<i64, usize> = FxHashMap::default();
        let mut slot_of: FxHashMap<(usize, &[u8]), usize> =
            FxHashMap::with_capacity_and_hasher(n, Default::default());
        let shape = &self.shape;
        accs.reserve(n * shape.width);
        slots.reserve(n);
        let mut st = st0;
        let mut cur_end = i64::MIN;
        let mut cur_win = 0usize;
        for (i, &t) in b.times.iter().enumerate() {
            let key = b.keys[i].as_bytes();
            let items = &b.items[i * ncols..(i + 1) * ncols];
            let now = t.max(st);
            // Windows containing t start at the multiples of advance in (t - size, t],
            // newest first (the Python loop's order, which is the order it creates them).
            let mut start = t - t % advance;
            let low = t.checked_sub(size).ok_or(Bail)?;
            let mut is_late = false;
            while start > low {
                let end = start.checked_add(size).ok_or(Bail)?;
                start -= advance;
                if end.checked_add(grace).ok_or(Bail)? <= now {
                    is_late = true;
                    continue;
                }
                let w = if end == cur_end {
                    cur_win
                } else {
                    let w = match win_of.get(&end) {
                        Some(&w) => w,
                        None => {
                            let dict = match windows.get_item(end).map_err(|_| Bail)? {
                                None => None,
                                Some(d) => Some(d.cast_into_exact::<PyDict>().map_err(|_| Bail)?),
                            };
                            wins.push(Win { end, dict, creator: i });
                            win_of.insert(end, wins.len() - 1);
                            wins.len() - 1
                        }
                    };
                    if !self.hopping {
                        cur_end = end;
                        cur_win = w;
                    }
                    w
                };
                let s = match slot_of.get(&(w, key)) {
                    Some(&s) => s,
                    None => {
                        let acc = match &wins[w].dict {
                            None => None,
                            Some(d) => d.get_item(&b.keys[i]).map_err(|_| Bail)?,
                        };
                        let base = accs.len();
                        accs.resize(base + shape.width, Num::None);
                        match &acc {
                            None => shape.zero(&mut accs[base..]),
                            Some(a) => shape.load(a, &mut accs[base..])?,
                        }
                        slots.push(Slot { win: w, rec: i, acc });
                        slot_of.insert((w, key), slots.len() - 1);
                        slots.len() - 1
                    }
                };
                let base = s * shape.width;
                shape.update(&mut accs[base..base + shape.width], items)?;
            }
            st = now;
            if is_late {
                late.push(i);
            }
        }
        Ok(st)
    }

    /// Pass 3.
    #[allow(clippy::too_many_arguments)]
    fn write<'py>(
        &self, state: &Bound<'py, PyAny>, records: Option<&Bound<'py, PyList>>,
        windows: &Bound<'py, PyDict>, b: &Batch<'py>, wins: &[Win<'py>], slots: &[Slot<'py>],
        accs: &[Num], st: i64,
    ) -> PyResult<()> {
        let shape = &self.shape;
        let py = state.py();
        let dirty = state.getattr(intern!(py, "dirty"))?.cast_into::<PyDict>()?;
        let firsts = state.getattr(intern!(py, "firsts"))?.cast_into::<PyDict>()?;
        let mut dicts: Vec<Bound<'py, PyDict>> = Vec::with_capacity(wins.len());
        let mut dirties: Vec<Bound<'py, PySet>> = Vec::with_capacity(wins.len());
        for w in wins {
            let d = match &w.dict {
                Some(d) => d.clone(),
                None => {
                    let d = PyDict::new(py);
                    windows.set_item(w.end, &d)?;
                    match records {
                        Some(r) => firsts.set_item(w.end, r.get_item(w.creator)?.getattr(intern!(py, "offset"))?)?,
                        None => firsts.set_item(w.end, b.offsets[w.creator])?,
                    }
                    d
                }
            };
            dicts.push(d);
            let ds = match dirty.get_item(w.end)? {
                Some(s) => s.cast_into::<PySet>()?,
                None => {
                    let s = PySet::empty(py)?;
                    dirty.set_item(w.end, &s)?;
                    s
                }
            };
            dirties.push(ds);
        }
        for (s, slot) in slots.iter().enumerate() {
            let acc = &accs[s * shape.width..(s + 1) * shape.width];
            let key = &b.keys[slot.rec];
            if let Some(new) = shape.store(py, slot.acc.as_ref(), acc)? {
                dicts[slot.win].set_item(key, new)?;
            }
            dirties[slot.win].add(key)?;
        }
        state.setattr(intern!(py, "stream_time"), st)?;
        Ok(())
    }

}
