//! The native state table of a fast-path shape (`streamremat.core.native_state`):
//! per window end, key -> accumulator row held here (`store.rs`), not in Python
//! dicts. The Python side keeps what is per window (first offsets, pending
//! recompute groups, stream time) and decides what `encode` writes; the table
//! holds the entries, folds batches into them, and encodes and decodes them
//! (`table_codec.rs`) with the GIL released.
//!
//! Every fold is all or nothing: pass 1 reads the batch (a record the table
//! can't take exactly makes it return None), then `table_fold.rs` folds it.

use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PySet};
use rustc_hash::FxHashSet;

use crate::accs::Shape;
use crate::fold::{kind_of, Batch, Folder};
use crate::json::{Bail, R};
use crate::store::{hash_key, Win, Windows};
use crate::table_codec::{self as codec, Item, RECOMPUTE};
use crate::table_fold::num_of;

/// What `encode` writes of a window (the Python side's plan).
const PLAN_RECOMPUTE: u8 = 0; // 1: every entry
const PLAN_DIRTY: u8 = 2;

#[pyclass(module = "streamremat_native")]
pub struct Table {
    pub(crate) shape: Shape,
    pub(crate) ncols: usize,
    pub(crate) size: i64,
    pub(crate) advance: i64,
    pub(crate) grace: i64,
    pub(crate) wins: Windows,
}

#[pymethods]
impl Table {
    /// `kinds`: per aggregation "count", "sum", "min", "max" or "mean" (a dict of
    /// them when `composite`); the window family's size, advance and grace.
    #[new]
    fn new(kinds: Vec<String>, composite: bool, size: i64, advance: i64, grace: i64)
           -> PyResult<Self> {
        let kinds: Vec<u8> = kinds.iter().map(|k| kind_of(k)).collect::<PyResult<_>>()?;
        if kinds.is_empty() || (!composite && kinds.len() != 1) {
            return Err(PyValueError::new_err("one kind, or a dict of at least one"));
        }
        if size <= 0 || advance <= 0 || grace < 0 {
            return Err(PyValueError::new_err("size and advance must be > 0, grace >= 0"));
        }
        let shape = Shape::new(kinds, composite);
        Ok(Table { ncols: shape.ncols(), shape, size, advance, grace, wins: Windows::default() })
    }

    /// The native fold of a batch (`folder` reads it); (late indices, their times,
    /// stream time after it, [(end, first offset)] of the windows it created), or
    /// None with nothing changed.
    #[allow(clippy::type_complexity)]
    fn fold<'py>(
        &mut self, folder: PyRef<'py, Folder>, records: &Bound<'py, PyAny>, st0: i64,
    ) -> PyResult<Option<(Bound<'py, PyList>, Bound<'py, PyList>, i64, Bound<'py, PyList>)>> {
        let py = records.py();
        let Ok(records) = records.cast::<PyList>() else { return Ok(None) };
        if records.is_empty() {
            return Ok(None);
        }
        if folder.ncols != self.ncols {
            return Err(PyValueError::new_err("the folder's shape is not the table's"));
        }
        let Ok(batch) = folder.read(records) else { return Ok(None) };
        let keys: Vec<&[u8]> = batch.keys.iter().map(|k| k.as_bytes()).collect();
        let Ok(out) = self.fold_core(&keys, &batch.times, &batch.items, st0, None) else {
            return Ok(None);
        };
        let firsts = PyList::empty(py);
        for (end, rec) in out.firsts {
            firsts.append((end, records.get_item(rec)?.getattr(intern!(py, "offset"))?))?;
        }
        let late_times = PyList::new(py, out.late.iter().map(|&i| batch.times[i]))?;
        Ok(Some((PyList::new(py, out.late)?, late_times, out.st, firsts)))
    }

    /// The general path's batch (``FixedWindowState.add_batch``'s columns): (late
    /// indices, stream time, [(end, index of its first record)]), or None with
    /// nothing changed when an item is not an i64 or a float.
    #[allow(clippy::type_complexity)]
    fn add_items<'py>(
        &mut self, keys: &Bound<'py, PyList>, times: &Bound<'py, PyList>,
        items: &Bound<'py, PyList>, st0: i64,
    ) -> PyResult<Option<(Vec<usize>, i64, Vec<(i64, usize)>)>> {
        let Ok((ks, ts, xs)) = self.columns(keys, times, Some(items)) else { return Ok(None) };
        let keys: Vec<&[u8]> = ks.iter().map(|k| k.as_bytes()).collect();
        Ok(self.fold_core(&keys, &ts, &xs, st0, None).ok().map(|o| (o.late, o.st, o.firsts)))
    }

    /// The Python fast path's columns (keys, event times, one list of items per
    /// aggregation that reads one), as `add_items`.
    #[allow(clippy::type_complexity)]
    fn add_columns<'py>(
        &mut self, keys: &Bound<'py, PyList>, times: &Bound<'py, PyList>,
        columns: &Bound<'py, PyList>, st0: i64,
    ) -> PyResult<Option<(Vec<usize>, i64, Vec<(i64, usize)>)>> {
        let n = keys.len();
        let cols: Vec<Bound<'py, PyList>> = match columns.iter()
            .map(|c| c.cast_into_exact::<PyList>()).collect::<Result<_, _>>() {
            Ok(c) => c,
            Err(_) => return Ok(None),
        };
        if cols.len() != self.ncols || cols.iter().any(|c| c.len() != n) {
            return Ok(None);
        }
        let mut xs = Vec::with_capacity(n * self.ncols);
        for i in 0..n {
            for c in &cols {
                let Ok(x) = num_of(&c.get_item(i)?) else { return Ok(None) };
                xs.push(x);
            }
        }
        let Ok((ks, ts, _)) = self.columns(keys, times, None) else { return Ok(None) };
        let keys: Vec<&[u8]> = ks.iter().map(|k| k.as_bytes()).collect();
        Ok(self.fold_core(&keys, &ts, &xs, st0, None).ok().map(|o| (o.late, o.st, o.firsts)))
    }

    /// ``FixedWindowState.refold``: the records folded into the `pending` windows
    /// only; [(end, index of the record that is its first)], or None, unchanged.
    fn refold<'py>(
        &mut self, pending: Vec<i64>, keys: &Bound<'py, PyList>, times: &Bound<'py, PyList>,
        items: &Bound<'py, PyList>,
    ) -> PyResult<Option<Vec<(i64, usize)>>> {
        let Ok((ks, ts, xs)) = self.columns(keys, times, Some(items)) else { return Ok(None) };
        let keys: Vec<&[u8]> = ks.iter().map(|k| k.as_bytes()).collect();
        let pending: FxHashSet<i64> = pending.into_iter().collect();
        Ok(self.fold_core(&keys, &ts, &xs, 0, Some(&pending)).ok().map(|o| o.firsts))
    }

    /// `head` then the body `plan` says ([(end, first offset + 1 or 0, 0 recompute /
    /// 1 every entry / 2 the dirty ones)]), encoded with the GIL released; None
    /// when an accumulator has no native encoding (a float Min/Max).
    fn encode<'py>(
        &self, py: Python<'py>, head: &[u8], plan: Vec<(i64, u64, u8)>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let (shape, wins) = (&self.shape, &self.wins);
        let got = py.detach(|| -> R<Vec<u8>> {
            let mut out = Vec::with_capacity(head.len() + 64);
            out.extend_from_slice(head);
            let mut tmp = Vec::new();
            codec::write_uvarint(&mut out, plan.len() as u64);
            for &(end, first, mode) in &plan {
                codec::write_svarint(&mut out, end);
                codec::write_uvarint(&mut out, first);
                if mode == PLAN_RECOMPUTE {
                    out.push(RECOMPUTE);
                    continue;
                }
                out.push(codec::STORED);
                let win = wins.get(end).ok_or(Bail)?;
                let rows = win.sorted_rows(mode == PLAN_DIRTY);
                codec::write_uvarint(&mut out, rows.len() as u64);
                let mut acc = Vec::new();
                for r in rows {
                    let r = r as usize;
                    codec::write_bytes(&mut out, win.key(r));
                    acc.clear();
                    codec::encode_acc(&mut acc, shape,
                                      &win.accs[r * shape.width..(r + 1) * shape.width], &mut tmp)?;
                    codec::write_bytes(&mut out, &acc);
                }
            }
            Ok(out)
        });
        let Ok(v) = got else { return Ok(None) };
        bytes_without_gil(py, &v).map(Some)
    }

    /// ``FixedWindowState.apply`` of the body at `start` of `payload`, decoded with
    /// the GIL released: [(end, first offset + 1 or 0, kind)] per window in it, or
    /// None with nothing changed (something only Python reads, or a malformed body).
    fn apply(&mut self, py: Python<'_>, payload: &[u8], start: usize, version: u8)
             -> PyResult<Option<Vec<(i64, u64, u8)>>> {
        let Some(body) = payload.get(start..) else { return Ok(None) };
        let (shape, wins) = (&self.shape, &mut self.wins);
        let width = shape.width;
        Ok(py.detach(|| -> Option<Vec<(i64, u64, u8)>> {
            codec::walk(shape, body, version, |_, _| {}).ok()?;
            let mut events = Vec::new();
            let mut cur = 0i64;
            codec::walk(shape, body, version, |item, acc| match item {
                Item::Window(end, first, kind, n) => {
                    if kind == RECOMPUTE {
                        wins.reset(end);
                    } else {
                        wins.create(end).reserve(usize::try_from(n).unwrap_or(0), width);
                    }
                    events.push((end, first, kind));
                    cur = end;
                }
                Item::Entry(key) => {
                    let win = wins.create(cur);
                    let h = hash_key(key);
                    match win.find(key, h) {
                        Some(r) => win.accs[r * width..(r + 1) * width].copy_from_slice(acc),
                        None => {
                            win.push(key, h, acc);
                        }
                    }
                }
            }).ok()?;
            Some(events)
        }))
    }

    /// Windows touched since the last `clear_dirty` (Python's `dirty` keys).
    fn dirty_ends(&self) -> Vec<i64> {
        self.wins.by_end.iter().filter(|(_, w)| w.marked).map(|(&e, _)| e).collect()
    }

    fn clear_dirty(&mut self) {
        self.wins.by_end.values_mut().for_each(Win::clear_dirty);
    }

    /// The window ends, in the order they were created.
    fn ends(&self) -> Vec<i64> {
        self.wins.order.clone()
    }

    /// Mark a window as touched without touching an entry (Python's
    /// `dirty.setdefault(end, set())`).
    fn mark(&mut self, end: i64) {
        if let Some(w) = self.wins.get_mut(end) {
            w.marked = true;
        }
    }

    /// Drop a window (closed, or closed before a restore).
    fn drop_window(&mut self, end: i64) {
        self.wins.remove(end);
    }

    /// Take a closing window out; its results are built from it as they are asked for.
    fn take(&mut self, end: i64) -> Option<ClosedWin> {
        let win = self.wins.remove(end)?;
        Some(ClosedWin { win, shape: self.shape.clone(), next: 0, popped: 0 })
    }

    /// Per window in order, (end, encoded bytes of its entries: all of them when
    /// `exact` or few, else the first 8 scaled), as `FixedWindowState.groups`
    /// counts them; None when an accumulator has no native encoding.
    fn sizes(&self, exact: bool, sample: usize) -> Option<Vec<(i64, usize)>> {
        let width = self.shape.width;
        let (mut acc, mut tmp) = (Vec::new(), Vec::new());
        let mut out = Vec::with_capacity(self.wins.order.len());
        for &end in &self.wins.order {
            let win = self.wins.get(end)?;
            let n = win.len();
            let take = if exact || n <= sample { n } else { sample };
            let mut size = 0;
            for r in 0..take {
                acc.clear();
                codec::encode_acc(&mut acc, &self.shape, &win.accs[r * width..(r + 1) * width],
                                  &mut tmp).ok()?;
                size += acc.len() + win.key(r).len();
            }
            out.push((end, if take == n { size } else { size * n / take }));
        }
        Some(out)
    }

    fn open_windows(&self) -> usize {
        self.wins.by_end.values().map(Win::len).sum()
    }

    /// Distinct keys over the open windows (counted with the GIL released).
    fn open_keys(&self, py: Python<'_>) -> usize {
        let wins = &self.wins;
        if wins.by_end.len() == 1 {
            return self.open_windows();
        }
        py.detach(|| {
            let mut seen: FxHashSet<&[u8]> = FxHashSet::default();
            for w in wins.by_end.values() {
                seen.extend((0..w.len()).map(|r| w.key(r)));
            }
            seen.len()
        })
    }

    /// Bytes of memory the entries take (capacities).
    fn nbytes(&self) -> usize {
        self.wins.by_end.values().map(Win::nbytes).sum()
    }

    /// The table as `FixedWindowState`'s dicts, windows in their order: [(end,
    /// {key: accumulator} in insertion order, the dirty keys or None)].
    fn materialize<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        let width = self.shape.width;
        for &end in &self.wins.order {
            let Some(win) = self.wins.get(end) else { continue };
            let d = PyDict::new(py);
            let dirty = PySet::empty(py)?;
            for r in 0..win.len() {
                let key = PyBytes::new(py, win.key(r));
                d.set_item(&key, self.shape.new_acc(py, &win.accs[r * width..(r + 1) * width])?)?;
                if win.is_dirty(r) {
                    dirty.add(&key)?;
                }
            }
            if win.marked {
                out.append((end, d, dirty))?;
            } else {
                out.append((end, d, py.None()))?;
            }
        }
        Ok(out)
    }
}

/// `raw.rs`'s fold of a replay's parsed record sets where the state is a
/// `NativeWindowState` holding its table: into the table, with the first offsets
/// and stream time set on the Python state; Some(None) when the table declines
/// (nothing changed). None: not a table state (the dicts' fold runs).
#[allow(clippy::type_complexity)]
pub fn fold_raw_batch<'py>(
    state: &Bound<'py, PyAny>, b: &Batch<'py>,
) -> PyResult<Option<Option<(Bound<'py, PyList>, Bound<'py, PyList>)>>> {
    let py = state.py();
    let Ok(table) = state.getattr(intern!(py, "table")) else { return Ok(None) };
    let Ok(table) = table.cast_into::<Table>() else { return Ok(None) };
    let st0 = state.getattr(intern!(py, "stream_time"))?.extract::<i64>()?;
    let keys: Vec<&[u8]> = b.keys.iter().map(|k| k.as_bytes()).collect();
    let out = {
        let mut t = table.borrow_mut();
        if b.items.len() != b.times.len() * t.ncols || b.offsets.len() != b.times.len() {
            return Ok(Some(None));
        }
        match t.fold_core(&keys, &b.times, &b.items, st0, None) {
            Ok(out) => out,
            Err(_) => return Ok(Some(None)),
        }
    };
    state.setattr(intern!(py, "stream_time"), out.st)?;
    let firsts = state.getattr(intern!(py, "firsts"))?.cast_into::<PyDict>()?;
    for (end, rec) in out.firsts {
        firsts.set_item(end, b.offsets[rec])?;
    }
    let late_times = PyList::new(py, out.late.iter().map(|&i| b.times[i]))?;
    Ok(Some(Some((PyList::new(py, out.late)?, late_times))))
}

/// A bytes object holding `v`, copied into it with the GIL released (a
/// checkpoint of millions of entries is tens of MB).
fn bytes_without_gil<'py>(py: Python<'py>, v: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let len = ffi::Py_ssize_t::try_from(v.len())
        .map_err(|_| PyValueError::new_err("state too large"))?;
    // SAFETY: a new bytes object of `len` bytes, not yet shared with anyone, is
    // filled before it is handed out; its buffer stays put while we hold it.
    unsafe {
        let obj = ffi::PyBytes_FromStringAndSize(std::ptr::null(), len);
        if obj.is_null() {
            return Err(PyErr::fetch(py));
        }
        let owned = Bound::from_owned_ptr(py, obj);
        let dst = ffi::PyBytes_AsString(obj) as usize;
        py.detach(|| std::ptr::copy_nonoverlapping(v.as_ptr(), dst as *mut u8, v.len()));
        Ok(owned.cast_into_unchecked::<PyBytes>())
    }
}

/// A closed window's entries, read as `core.closing.fixed_windows` reads a
/// window's dict: its length, its keys, `pop(key)` for the accumulator.
#[pyclass(module = "streamremat_native")]
pub struct ClosedWin {
    win: Win,
    shape: Shape,
    next: usize,
    popped: usize,
}

#[pymethods]
impl ClosedWin {
    fn __len__(&self) -> usize {
        self.win.len() - self.popped
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        if self.next >= self.win.len() {
            return None;
        }
        self.next += 1;
        Some(PyBytes::new(py, self.win.key(self.next - 1)))
    }

    /// The accumulator of `key`, as the Python state holds it.
    fn pop<'py>(&mut self, py: Python<'py>, key: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        let Some(r) = self.win.find(key, hash_key(key)) else {
            return Err(PyKeyError::new_err(key.to_vec()));
        };
        self.popped += 1;
        let w = self.shape.width;
        self.shape.new_acc(py, &self.win.accs[r * w..(r + 1) * w])
    }
}
